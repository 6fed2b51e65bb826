"""The meta-prompts APO sends to its LLMs: jinja templates for critiques (gradients) and edits.

Built-in variants live next to this module in `prompts/*.md`. Users may pass their own as files or
strings; they are rendered with the same variables:

- gradient prompts: `prompt_template` (text), `placeholders` (list such as `["{question}"]`),
  `engine`, and `experiments`, a list of runs with `index`, `task`, `status`, `reward`,
  `reward_text`, `messages` (OpenAI chat messages) and `transcript` (those messages as text).
- edit prompts: `prompt_template`, `placeholders`, `engine` and `critique`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import jinja2

__all__ = [
    "MetaPrompt",
    "GRADIENT_PROMPT_FILES",
    "APPLY_EDIT_PROMPT_FILES",
    "load_meta_prompts",
    "builtin_prompt_path",
]

_PROMPT_DIR = Path(__file__).parent / "prompts"

GRADIENT_PROMPT_FILES = ("text_gradient_variant01.md", "text_gradient_variant02.md", "text_gradient_variant03.md")
APPLY_EDIT_PROMPT_FILES = ("apply_edit_variant01.md", "apply_edit_variant02.md")

_ENVIRONMENT = jinja2.Environment(
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=False,
)


def builtin_prompt_path(name: str) -> Path:
    """Path of a built-in meta-prompt file (e.g. `text_gradient_variant01.md`)."""
    return _PROMPT_DIR / name


@dataclass(frozen=True)
class MetaPrompt:
    """One named, compiled meta-prompt template."""

    name: str
    source: str
    template: jinja2.Template

    def render(self, **variables: Any) -> str:
        try:
            return self.template.render(**variables).strip()
        except jinja2.UndefinedError as exc:
            raise ValueError(
                f"meta-prompt {self.name!r} uses an unknown variable ({exc.message}); "
                f"available: {', '.join(sorted(variables))}"
            ) from exc


def _compile(name: str, source: str) -> MetaPrompt:
    try:
        template = _ENVIRONMENT.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"meta-prompt {name!r} is not a valid jinja template (line {exc.lineno}: {exc.message})")
    return MetaPrompt(name=name, source=source, template=template)


def load_meta_prompts(
    files: Optional[Sequence[Union[str, Path]]],
    strings: Optional[Sequence[str]],
    *,
    defaults: Sequence[str],
    kind: str,
) -> list[MetaPrompt]:
    """Compile user files and strings, or the built-in `defaults` when the user gives neither."""
    prompts: list[MetaPrompt] = []
    for file in files or ():
        path = Path(file)
        if not path.is_file():
            raise ValueError(f"{kind} prompt file {str(path)!r} does not exist; pass a path to a jinja/text file")
        prompts.append(_compile(path.name, path.read_text(encoding="utf-8")))
    for index, text in enumerate(strings or ()):
        if not isinstance(text, str) or not text.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"{kind} prompt string #{index} is empty; pass the template text")
        prompts.append(_compile(f"{kind}-string-{index}", text))
    if prompts:
        return prompts
    return [_compile(name, builtin_prompt_path(name).read_text(encoding="utf-8")) for name in defaults]
