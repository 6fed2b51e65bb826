"""Placeholders of prompt templates, so an edited prompt can be checked to still fit the agent's `format()` call."""

from __future__ import annotations

import re
import string
from typing import Optional

__all__ = ["template_placeholders", "placeholder_problem"]

_ROOT_NAME = re.compile(r"^[^.\[]*")


def _fstring_placeholders(template: str) -> set[str]:
    names: set[str] = set()
    for _, field_name, format_spec, _ in string.Formatter().parse(template):
        if field_name is None:
            continue
        match = _ROOT_NAME.match(field_name)
        names.add(match.group(0) if match else field_name)
        # Nested fields such as "{value:{width}}" are placeholders too.
        if format_spec and "{" in format_spec:
            names |= _fstring_placeholders(format_spec)
    return names


def _jinja_placeholders(template: str) -> set[str]:
    import jinja2
    from jinja2 import meta

    environment = jinja2.Environment(autoescape=False)
    return set(meta.find_undeclared_variables(environment.parse(template)))


def template_placeholders(template: str, engine: str) -> Optional[set[str]]:
    """The variable names a template expects (f-string or jinja); None for engines we cannot inspect.

    Raises ValueError when the text is not a valid template for the engine.
    """
    if engine == "f-string":
        try:
            return _fstring_placeholders(template)
        except ValueError as exc:
            raise ValueError(f"not a valid f-string template ({exc}); literal braces must be doubled: {{{{ }}}}")
    if engine == "jinja":
        import jinja2

        try:
            return _jinja_placeholders(template)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"not a valid jinja template (line {exc.lineno}: {exc.message})")
    return None


def _render_names(names: set[str], engine: str) -> str:
    if engine == "jinja":
        return ", ".join("{{ " + name + " }}" for name in sorted(names))
    return ", ".join("{" + name + "}" for name in sorted(names))


def placeholder_problem(original: str, candidate: str, engine: str) -> Optional[str]:
    """Why `candidate` cannot replace `original` (empty, unparsable, placeholders lost or added), or None."""
    if not candidate.strip():
        return "the edited prompt is empty"
    expected = template_placeholders(original, engine)
    try:
        found = template_placeholders(candidate, engine)
    except ValueError as exc:
        return f"the edited prompt is {exc}"
    if expected is None or found is None:
        return None
    missing = expected - found
    if missing:
        return f"the edited prompt drops the placeholder(s) {_render_names(missing, engine)}"
    extra = found - expected
    if extra:
        return (
            f"the edited prompt adds unknown placeholder(s) {_render_names(extra, engine)}; "
            f"the agent only fills {_render_names(expected, engine) or 'none'}"
        )
    return None
