"""Every Python code block in `docs/` and the README runs, offline, against the shipped echo server.

Blocks fenced as ```python run; the blocks of one page run in order as one script (later blocks see what
earlier ones defined), in a fresh interpreter, with `OPENAI_BASE_URL` pointing at an `EchoServer` and a free
`AGL_SERVER_PORT`. A block that must not run is fenced as ```py and preceded by `<!-- not run: REASON -->`.

A block whose first line is `# file: NAME.py` is a file of the page's layout instead: it is written as
NAME.py, and each such file with a `__main__` block runs as `python NAME.py` in that folder, in page order,
as a reader who pasted the files would run them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlightning.serving.echo import EchoServer
from agentlightning.web.launcher import pick_free_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```([^\s`]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(\S.*?)\s*-->\s*$")
FILE_HEADER = re.compile(r"^# file: ([\w.-]+\.py)[ \t]*$", re.MULTILINE)
PAGE_TIMEOUT_SECONDS = 120
pytestmark = pytest.mark.slow


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, code, text before the fence) for every fenced block of the page."""
    text = page.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text[: m.start()]) for m in FENCE.finditer(text)]


def layout_file(code: str) -> str | None:
    """The file name a block is (its first line `# file: NAME.py`), or None for a block of the page's script."""
    match = FILE_HEADER.match(code)
    return match.group(1) if match else None


def runnable(page: Path) -> str:
    return "\n\n".join(code for lang, code, _ in blocks(page) if lang == "python" and layout_file(code) is None)


def layout(page: Path) -> list[tuple[str, str]]:
    """`(file name, code)` of the page's runnable `# file:` blocks, in page order."""
    named = [(layout_file(code), code) for lang, code, _ in blocks(page) if lang == "python"]
    return [(name, code) for name, code in named if name is not None]


RUNNABLE_PAGES = [page for page in PAGES if runnable(page) or layout(page)]


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    with EchoServer() as server:
        yield server


def test_pages_are_found() -> None:
    names = {page.name for page in RUNNABLE_PAGES}
    assert {"README.md", "index.md", "writing-agents.md", "store.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_blocks_that_do_not_run_say_why(page: Path) -> None:
    for lang, code, before in blocks(page):
        if lang == "py":
            last_line = before.rstrip("\n").rsplit("\n", 1)[-1]
            assert NOT_RUN.search(last_line), (
                f"{page.name}: a ```py block must follow `<!-- not run: REASON -->`; use ```python to run it:\n"
                f"{code[:200]}"
            )


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(page: Path, echo: EchoServer, tmp_path: Path) -> None:
    scripts: list[Path] = []
    if runnable(page):
        scripts.append(tmp_path / "page.py")
        scripts[0].write_text(runnable(page), encoding="utf-8")
    for name, code in layout(page):
        (tmp_path / name).write_text(code, encoding="utf-8")
        if '__name__ == "__main__"' in code:
            scripts.append(tmp_path / name)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OPENAI_BASE_URL": echo.endpoint,
        "OPENAI_API_KEY": "EMPTY",
        "AGL_SERVER_PORT": str(pick_free_port()),
    }
    env.pop("AGL_CURRENT_ROLE", None)
    env.pop("AGL_MANAGED_STORE", None)
    for script in scripts:
        env["AGL_SERVER_PORT"] = str(pick_free_port())
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT_SECONDS,
        )
        assert result.returncode == 0, (
            f"{page.name} ({script.name}) failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        )


def test_layout_files_each_run_one_thing() -> None:
    """A page that lays out files gives each at most one `__main__` block (pasted, a file runs one thing)."""
    page = ROOT / "docs" / "first-agent.md"
    code_blocks = [code for lang, code, _ in blocks(page) if lang in ("python", "py")]
    assert [layout_file(code) for code in code_blocks if layout_file(code)] == [
        "agent.py",
        "check.py",
        "apo.py",
        "grpo.py",
    ]
    for code in code_blocks:
        mains = code.count('if __name__ == "__main__":')
        assert mains <= 1 and (mains == 0 or layout_file(code) is not None), f"first-agent.md:\n{code[:200]}"
    text = page.read_text(encoding="utf-8")
    assert all(name in text.split("## The agent")[0] for name in ("agent.py", "check.py", "apo.py", "grpo.py"))
