"""Layer order of the lower packages, read from the source with `ast` (nothing is imported).

- `agentlightning/types/` is data only: it imports the standard library, pydantic and OpenTelemetry and
  nothing else - not even under `TYPE_CHECKING` or inside a function.
- `agentlightning/adapter/` turns spans into training data using only the data layers (types, semconv,
  utils); it never imports the emitters, tracers or anything above them.

Every `import`/`from ... import` statement counts wherever it appears, and so does
`importlib.import_module("...")` with a literal name. The one sanctioned exception is listed in
`ALLOWED_UPWARD`: the lazy v0.3 alias `agentlightning.types.Hook`, resolved only on attribute access.
`ALLOWED_LAZY_EXTERNAL` lists the one third-party import in `types/`: jinja2 (a core dependency), imported
inside `PromptTemplate.format` only when a jinja template is rendered. Moving it out would need a renderer
registry that `import agentlightning` fills, costing ~0.5 s per import (measured), for no layering gain.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "agentlightning"

THIRD_PARTY_FOR_TYPES = {"pydantic", "pydantic_core", "opentelemetry", "typing_extensions"}

# Modules of agentlightning each layer may import (a prefix matches its submodules).
ALLOWED_INTERNAL = {
    "types": ("agentlightning.types",),
    "adapter": ("agentlightning.adapter", "agentlightning.types", "agentlightning.semconv", "agentlightning.utils"),
}

# (file relative to the package, imported module): deliberate, lazy, documented exceptions.
ALLOWED_UPWARD = {("types/core.py", "agentlightning.compat.types_core")}
ALLOWED_LAZY_EXTERNAL = {("types/resources.py", "jinja2")}


def _python_files(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def _resolve(module: str | None, level: int, path: Path) -> str:
    """Absolute module name of a (possibly relative) import found in `path`."""
    if level == 0:
        return module or ""
    package_parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package_parts = package_parts[:-1]
    base = package_parts[: len(package_parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, wherever it is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, _resolve(node.module, node.level, path)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def _violations(layer: str, allowed_external: set[str] | None) -> list[str]:
    found: list[str] = []
    for path in _python_files(layer):
        relative = path.relative_to(PACKAGE).as_posix()
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if top == "agentlightning":
                ok = any(module == p or module.startswith(p + ".") for p in ALLOWED_INTERNAL[layer])
                ok = ok or (relative, module) in ALLOWED_UPWARD
            elif allowed_external is None:
                ok = True
            else:
                ok = top in sys.stdlib_module_names or top == "__future__" or top in allowed_external
                ok = ok or (relative, module) in ALLOWED_LAZY_EXTERNAL
            if not ok:
                found.append(f"{relative}:{line} imports {module}")
    return found


def test_types_import_only_stdlib_pydantic_and_opentelemetry() -> None:
    assert _violations("types", THIRD_PARTY_FOR_TYPES) == []


def test_adapter_imports_no_emitter_tracer_or_higher_layer() -> None:
    assert _violations("adapter", None) == []


def test_the_checker_catches_upward_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_package = tmp_path / "agentlightning"
    (fake_package / "types").mkdir(parents=True)
    (fake_package / "types" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import numpy\n"
        "if TYPE_CHECKING:\n"
        "    from agentlightning.runner import Runner\n"
        "def f():\n"
        "    from ..tracer import Tracer\n"
        "    import importlib\n"
        "    return importlib.import_module('agentlightning.emitter')\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake_package)
    assert _violations("types", THIRD_PARTY_FOR_TYPES) == [
        "types/bad.py:2 imports numpy",
        "types/bad.py:4 imports agentlightning.runner",
        "types/bad.py:6 imports agentlightning.tracer",
        "types/bad.py:8 imports agentlightning.emitter",
    ]


def test_hook_stays_importable_from_every_v03_path() -> None:
    import agentlightning
    import agentlightning.types
    import agentlightning.types.core
    from agentlightning.runner import Hook
    from agentlightning.runner.hook import Hook as HookFromModule

    assert Hook is HookFromModule
    assert agentlightning.Hook is Hook
    assert agentlightning.types.Hook is Hook  # type: ignore[attr-defined]
    assert agentlightning.types.core.Hook is Hook  # type: ignore[attr-defined]


def test_the_allowed_exceptions_are_lazy() -> None:
    """The exceptions above are imported inside functions, never when their module is imported."""
    for relative, module in ALLOWED_UPWARD | ALLOWED_LAZY_EXTERNAL:
        tree = ast.parse((PACKAGE / relative).read_text())
        module_level = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names} | {
            node.module for node in tree.body if isinstance(node, ast.ImportFrom)
        }
        assert module not in module_level, f"{relative} imports {module} at module level"
        lines = {line for line, name in imported_modules(PACKAGE / relative) if name == module}
        assert lines, f"{relative} no longer imports {module}: drop the exception"
