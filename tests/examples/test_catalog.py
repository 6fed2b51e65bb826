"""docs/examples.md lists every example with the extras it needs and its offline run, and the table is true.

Every third-party package an example's files import (anywhere, lazily too) must come with the core
dependencies, the extras its row lists, or a `pip install --no-deps ...` its row shows (for packages pip
cannot resolve beside the extras), which `make venv` must run with the same pins; an extra named must exist
in pyproject.toml; a command shown with `--quick` must be a script that has that option, and every script
named must exist.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "docs" / "examples.md"
ROW = re.compile(r"^\| `((?:examples|contrib/recipes)/[\w-]+/)` \|(.*)\|(.*)\|(.*)\|$", re.MULTILINE)


def _requirement_name(spec: str) -> str:
    return re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower().replace("_", "-")


def _lists(section: str) -> dict[str, list[str]]:
    """`name = ["spec", ...]` entries of one pyproject.toml table (no tomllib on Python 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    body = text.split(f"\n[{section}]\n", 1)[1].split("\n[", 1)[0]
    body = "\n".join(line.split(" #")[0] for line in body.splitlines() if not line.lstrip().startswith("#"))
    return {
        name: re.findall(r'"([^"]+)"', items)
        for name, items in re.findall(r"^([\w-]+) = \[(.*?)\]\s*$", body, flags=re.MULTILINE | re.DOTALL)
    }


NO_DEPS = re.compile(r"`pip install --no-deps ([^`]+)`")


def _makefile_no_deps_specs() -> set[str]:
    """The pinned specs the Makefile installs with `--no-deps` (literally, or through a `NAME := ...` variable)."""
    text = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+) :?= (.*)$", text, flags=re.MULTILINE))
    specs: set[str] = set()
    for line in re.findall(r"pip install --quiet --no-deps (.*)$", text, flags=re.MULTILINE):
        for word in line.split():
            variable = re.fullmatch(r"\$\((\w+)\)", word)
            specs.update(variables.get(variable.group(1), "").split() if variable else [word])
    return specs


def _rows() -> dict[str, tuple[str, str]]:
    return {folder: (extras, run) for folder, _, extras, run in ROW.findall(CATALOG.read_text())}


def _third_party_imports(folder: Path) -> set[str]:
    # An example may reuse another's modules (its data, reward) through sys.path: those are local too.
    local = {p.stem for p in (ROOT / "examples").rglob("*.py")} | {p.stem for p in folder.rglob("*.py")}
    local |= {"tests", "agentlightning"}
    modules: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module.split(".")[0])
    return {m for m in modules if m not in local and m not in sys.stdlib_module_names and m != "__future__"}


def test_every_example_folder_has_a_row() -> None:
    folders = {f"examples/{p.name}/" for p in (ROOT / "examples").iterdir() if p.is_dir()}
    folders |= {f"contrib/recipes/{p.name}/" for p in (ROOT / "contrib" / "recipes").iterdir() if p.is_dir()}
    assert folders <= set(_rows()), sorted(folders - set(_rows()))


def test_the_extras_listed_cover_every_import() -> None:
    extras = _lists("project.optional-dependencies")
    core = {_requirement_name(spec) for spec in _lists("project")["dependencies"]}
    assert "anthropic" in {_requirement_name(spec) for spec in extras["examples"]} and "openai" in core
    distributions = importlib.metadata.packages_distributions()
    for folder, (extras_cell, _) in _rows().items():
        named = set(re.findall(r"`([\w-]+)`", extras_cell))
        unknown = {name for name in named if name not in extras}
        assert not unknown, f"{folder}: no extra named {sorted(unknown)} in pyproject.toml"
        provided = core | {_requirement_name(spec) for name in named for spec in extras[name]}
        no_deps = [spec for command in NO_DEPS.findall(extras_cell) for spec in command.split()]
        missing = set(no_deps) - _makefile_no_deps_specs()
        assert not missing, f"{folder}: the Makefile does not install {sorted(missing)} with --no-deps"
        provided |= {_requirement_name(spec) for spec in no_deps}
        for module in sorted(_third_party_imports(ROOT / folder)):
            dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
            assert dists & provided, f"{folder} imports {module!r}, which none of {sorted(named) or 'no extras'} brings"


def test_quick_is_shown_only_for_scripts_that_have_it() -> None:
    for folder, (_, run_cell) in _rows().items():
        for command in re.findall(r"`(python [^`]+)`", run_cell):
            script = ROOT / command.split()[1]
            assert script.is_file(), f"{folder}: {command!r} names a missing script"
            if "--quick" in command.split():
                text = script.read_text()
                if "eval_parser(" in text:  # the framework ports take their options from the shared harness
                    text += (ROOT / "examples" / "evaluate_agent.py").read_text()
                assert '"--quick"' in text, f"{folder}: {script.name} has no --quick option"
