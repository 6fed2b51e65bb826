"""Layer order of the package, read from the source with `ast` (nothing is imported).

Every `import`/`from ... import` statement counts wherever it appears (module level, inside a function,
under `TYPE_CHECKING`), and so does `importlib.import_module("...")` with a literal name.

- `LAYERS` ranks every top-level package/module of `agentlightning`, lowest first. It follows STYLE.md,
  placed by what each package actually needs: `adapter` (pure functions over types) sits just above the
  data layers, and the OpenAI-compatible HTTP fronts (`llm_proxy`, `serving`, `gateway`, `dashboard`) sit
  below the agents and algorithms that start them. A file never imports a package of a higher layer.
- No import circle spans two packages.
- No import circle joins the modules of one package either, except the ones in `ALLOWED_PACKAGE_CIRCLES`
  (each listed with how it closes; remove an entry once it is broken, the test insists). Here an import
  of a package that contains the importing module is left out: Python runs a package's `__init__` before
  any of its modules anyway, so counting it would make every package whose `__init__` re-exports its
  modules one circle.
- Every edge counts, old import paths included. `ALLOWED_UPWARD_IMPORTS` names the one arrow that runs back
  up, with its reason.
- `LEGACY_MODULES` are the modules kept for v0.1/v0.3 code (old import paths and the v0.1 stack in
  `agentlightning.compat`). The core imports none of them: only the importers listed beside each may, and
  a fresh interpreter that imports the core loads none.
- `agentlightning/types/` imports only the standard library, pydantic and OpenTelemetry.
- `agentlightning/adapter/` uses only the data layers (types, semconv, attributes).

`ALLOWED_LAZY_EXTERNAL` lists the one third-party import in `types/`: jinja2 (a core dependency), imported
inside `PromptTemplate.format` only when a jinja template is rendered. Moving it out would need a renderer
registry that `import agentlightning` fills, costing ~0.5 s per import (measured), for no layering gain.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "agentlightning"

THIRD_PARTY_FOR_TYPES = {"pydantic", "pydantic_core", "opentelemetry", "typing_extensions"}

# Lowest first. A unit is `agentlightning.<unit>` (a subpackage or a top-level module).
LAYERS: list[tuple[str, ...]] = [
    ("types", "semconv", "env_var", "logging", "config", "_process_entry", "_lazy"),
    ("utils", "tracking", "formats", "attributes", "web"),
    ("adapter",),
    ("store",),
    ("store_http",),
    ("instrumentation", "tracer", "emitter", "reward"),
    ("llm_proxy", "serving", "gateway", "dashboard"),
    ("litagent", "runner"),
    ("algorithm", "export", "verl"),
    ("compat", "client", "server"),
    ("execution", "trainer", "tinker"),
    ("cli", "contrib"),
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

# The one arrow that runs back up: v0.3's old paths `agentlightning.store.{client,server,client_server}`
# name the HTTP pair, which lives in `store_http` because it imports the store. `agentlightning.store`
# reaches them only on first use of the name (`store.LightningStoreServer`), through those modules.
ALLOWED_UPWARD_IMPORTS = {
    ("store/client.py", "agentlightning.store_http.client"),
    ("store/server.py", "agentlightning.store_http.server"),
    ("store/client_server.py", "agentlightning.store_http.client"),
    ("store/client_server.py", "agentlightning.store_http.server"),
}

# Modules kept for v0.1/v0.3 code, and the only files that may import each (a prefix matches submodules).
LEGACY_MODULES: dict[str, set[str]] = {
    # the v0.1 task server and client: the old top-level paths and v0.1 training
    "agentlightning.compat": {"client.py", "server.py", "trainer/legacy.py"},
    "agentlightning.client": set(),
    "agentlightning.server": set(),
    "agentlightning.runner.legacy": {"runner/__init__.py", "trainer/legacy.py"},  # `LegacyAgentRunner`
    "agentlightning.trainer.legacy": {"trainer/trainer.py"},  # `Trainer.fit_v0`, `fit(agent, <v0.1 URL>)`
    "agentlightning.runner.hook": set(),
    "agentlightning.store.client": set(),  # `agentlightning.store` loads it by a relative name, on first use
    "agentlightning.store.server": set(),
    "agentlightning.store.client_server": set(),
    "agentlightning.store.collection_based": set(),
    # v0.3's documented `agentlightning.utils.*` paths of modules that moved to the room of their subject
    "agentlightning.utils.otel": set(),
    "agentlightning.utils.metrics": set(),
}

# Circles inside one package that are tolerated: the modules of each and where the circle closes. None today;
# break a new one (a shared module both sides import, or a Protocol for a type-only reference) before listing it.
ALLOWED_PACKAGE_CIRCLES: dict[frozenset[str], str] = {}

# Modules of agentlightning each of these packages may import (a prefix matches its submodules).
ALLOWED_INTERNAL = {
    "types": ("agentlightning.types",),
    "adapter": (
        "agentlightning.adapter",
        "agentlightning.types",
        "agentlightning.semconv",
        "agentlightning.attributes",
    ),
}
ALLOWED_LAZY_EXTERNAL = {("types/resources.py", "jinja2")}


def _python_files(layer: str = "") -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py") if layer else PACKAGE.rglob("*.py"))


def _resolve(module: str | None, level: int, path: Path) -> str:
    """Absolute module name of a (possibly relative) import found in `path`."""
    if level == 0:
        return module or ""
    package_parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)[:-1]  # a module's package
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
            elif allowed_external is None:
                ok = True
            else:
                ok = top in sys.stdlib_module_names or top == "__future__" or top in allowed_external
                ok = ok or (relative, module) in ALLOWED_LAZY_EXTERNAL
            if not ok:
                found.append(f"{relative}:{line} imports {module}")
    return found


def _legacy_module(module: str) -> str | None:
    """The entry of `LEGACY_MODULES` that `module` is, or lies under."""
    for legacy in LEGACY_MODULES:
        if module == legacy or module.startswith(legacy + "."):
            return legacy
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _submodules_named(path: Path) -> Iterator[tuple[int, str]]:
    """`pkg.name` for every `from pkg import name` in the file (a submodule, when such a file exists)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                yield node.lineno, f"{_resolve(node.module, node.level, path)}.{alias.name}"


def import_edges(with_submodules: bool = False) -> Iterator[tuple[str, int, str]]:
    """(file relative to the package, line, imported agentlightning module): every one."""
    for path in _python_files():
        relative = path.relative_to(PACKAGE).as_posix()
        extra = list(_submodules_named(path)) if with_submodules else []
        for line, module in [*imported_modules(path), *extra]:
            if module.split(".")[0] == "agentlightning":
                yield relative, line, module


def upward_imports() -> list[str]:
    found: list[str] = []
    for relative, line, module in import_edges():
        source, target = _unit(_module_name(PACKAGE / relative)), _unit(module)
        if source and target and RANK[target] > RANK[source] and (relative, module) not in ALLOWED_UPWARD_IMPORTS:
            found.append(f"{relative}:{line} ({source}) imports {module} ({target})")
    return found


def _import_graph(*, skip_own_packages: bool) -> dict[str, set[str]]:
    """Module -> the agentlightning modules it imports (`skip_own_packages`: not the packages containing it)."""
    modules = {_module_name(path) for path in _python_files()}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for relative, _, module in import_edges(with_submodules=True):
        target = module
        while target not in modules and "." in target:  # `from pkg.mod import name`: the module imported
            target = target.rsplit(".", 1)[0]
        source = _module_name(PACKAGE / relative)
        while target.count(".") >= 1:  # importing `a.b.c` runs `a.b`'s `__init__` too
            if target in modules and target != source and not (skip_own_packages and source.startswith(target + ".")):
                graph[source].add(target)
            target = target.rsplit(".", 1)[0]
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan, iterative so deep graphs do not hit the recursion limit
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[current] = min(low[current], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[current])
                if low[current] == index[current]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == current:
                            break
                    components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [c for c in components if len(c) > 1]


def import_circles() -> list[list[str]]:
    """Strongly connected components of the file import graph that span more than one unit."""
    components = _strongly_connected(_import_graph(skip_own_packages=False))
    return [c for c in components if len({_unit(m) for m in c}) > 1]


def package_circles() -> list[frozenset[str]]:
    """Circles among the modules of one package (names relative to `agentlightning.`)."""
    components = _strongly_connected(_import_graph(skip_own_packages=True))
    prefix = len("agentlightning.")
    return [frozenset(m[prefix:] for m in c) for c in components if len({_unit(m) for m in c}) == 1]


def test_every_package_has_a_layer() -> None:
    units = {_unit(_module_name(path)) for path in _python_files()} - {""}
    assert sorted(units - set(RANK)) == []


def test_no_import_circle_spans_two_packages() -> None:
    assert import_circles() == []


def test_no_import_circle_inside_a_package_but_the_listed_ones() -> None:
    found = package_circles()
    assert [sorted(c) for c in found if c not in ALLOWED_PACKAGE_CIRCLES] == []
    assert [sorted(c) for c in ALLOWED_PACKAGE_CIRCLES if c not in found] == [], "broken circle: drop its entry"


def legacy_imports() -> list[str]:
    """Imports of a legacy module by a file that `LEGACY_MODULES` does not list for it (or that is not itself one)."""
    found: list[str] = []
    for relative, line, module in import_edges():
        legacy = _legacy_module(module)
        source = _module_name(PACKAGE / relative)
        if legacy is None or _legacy_module(source) == legacy or relative in LEGACY_MODULES[legacy]:
            continue
        found.append(f"{relative}:{line} imports {module}")
    return found


def test_no_import_points_up_the_layers_but_the_named_one() -> None:
    assert upward_imports() == []
    edges = {(relative, module) for relative, _, module in import_edges()}
    assert sorted(ALLOWED_UPWARD_IMPORTS - edges) == [], "an allowed upward import is gone: drop its entry"


def test_the_core_imports_no_legacy_module() -> None:
    assert legacy_imports() == []


_CORE_PROBE = """
import importlib, json, pkgutil, sys
import agentlightning
skip = {"compat", "client", "server", "cli", "contrib", "verl", "reward"}
for info in pkgutil.iter_modules(agentlightning.__path__):
    if info.name not in skip and not info.name.startswith("_"):
        try:
            importlib.import_module("agentlightning." + info.name)
        except ImportError:
            pass  # an optional extra that is not installed
import agentlightning.trainer.trainer, agentlightning.algorithm.base, agentlightning.litagent.litagent
legacy = json.loads(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if any(m == l or m.startswith(l + ".") for l in legacy))))
"""


def test_importing_the_core_loads_no_legacy_module() -> None:
    probe = [sys.executable, "-c", _CORE_PROBE, json.dumps(sorted(LEGACY_MODULES))]
    result = subprocess.run(probe, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_types_import_only_stdlib_pydantic_and_opentelemetry() -> None:
    assert _violations("types", THIRD_PARTY_FOR_TYPES) == []


def test_adapter_imports_no_emitter_tracer_or_higher_layer() -> None:
    assert _violations("adapter", None) == []


def test_the_checkers_catch_upward_imports_and_circles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_package = tmp_path / "agentlightning"
    for package in ("types", "store", "runner", "compat"):
        (fake_package / package).mkdir(parents=True)
        (fake_package / package / "__init__.py").write_text("")
    (fake_package / "types" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import numpy\n"
        "if TYPE_CHECKING:\n"
        "    from agentlightning.runner import Runner\n"
        "def f():\n"
        "    from ..store import base\n"
        "    import importlib\n"
        "    return importlib.import_module('agentlightning.compat.x')\n"
    )
    (fake_package / "store" / "base.py").write_text("from agentlightning.types import bad\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake_package)
    assert _violations("types", THIRD_PARTY_FOR_TYPES) == [
        "types/bad.py:2 imports numpy",
        "types/bad.py:4 imports agentlightning.runner",
        "types/bad.py:6 imports agentlightning.store",
        "types/bad.py:8 imports agentlightning.compat.x",
    ]
    assert upward_imports() == [
        "types/bad.py:4 (types) imports agentlightning.runner (runner)",
        "types/bad.py:6 (types) imports agentlightning.store (store)",
        "types/bad.py:8 (types) imports agentlightning.compat.x (compat)",
    ]
    assert import_circles() == [["agentlightning.store.base", "agentlightning.types.bad"]]


def test_the_package_circle_checker_skips_imports_of_the_own_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = tmp_path / "agentlightning" / "runner"
    runner.mkdir(parents=True)
    (tmp_path / "agentlightning" / "__init__.py").write_text("")
    (runner / "__init__.py").write_text("from .a import A\nfrom .c import C\n")
    (runner / "a.py").write_text("from agentlightning.runner import b\nA = 1\n")
    (runner / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n")
    (runner / "c.py").write_text("from agentlightning.runner import A\nC = A\n")  # from its own package
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "agentlightning")
    assert package_circles() == [frozenset({"runner.a", "runner.b"})]


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


def test_the_allowed_external_import_is_lazy() -> None:
    """jinja2 is imported inside a function, never when its module is imported."""
    for relative, module in ALLOWED_LAZY_EXTERNAL:
        tree = ast.parse((PACKAGE / relative).read_text())
        module_level = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names} | {
            node.module for node in tree.body if isinstance(node, ast.ImportFrom)
        }
        assert module not in module_level, f"{relative} imports {module} at module level"
        lines = {line for line, name in imported_modules(PACKAGE / relative) if name == module}
        assert lines, f"{relative} no longer imports {module}: drop the exception"
