"""Every Python code block in `docs/` and the README runs, offline, against the shipped echo server.

Blocks fenced as ```python run; the blocks of one page run in order as one script (later blocks see what
earlier ones defined), in a fresh interpreter, with `OPENAI_BASE_URL` pointing at an `EchoServer` and a free
`AGL_SERVER_PORT`. A block that must not run is fenced as ```py and preceded by `<!-- not run: REASON -->`.
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
PAGE_TIMEOUT_SECONDS = 120
pytestmark = pytest.mark.slow


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, code, text before the fence) for every fenced block of the page."""
    text = page.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text[: m.start()]) for m in FENCE.finditer(text)]


def runnable(page: Path) -> str:
    return "\n\n".join(code for lang, code, _ in blocks(page) if lang == "python")


RUNNABLE_PAGES = [page for page in PAGES if runnable(page)]


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
    script = tmp_path / "page.py"
    script.write_text(runnable(page), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OPENAI_BASE_URL": echo.endpoint,
        "OPENAI_API_KEY": "EMPTY",
        "AGL_SERVER_PORT": str(pick_free_port()),
    }
    env.pop("AGL_CURRENT_ROLE", None)
    env.pop("AGL_MANAGED_STORE", None)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_SECONDS,
    )
    assert result.returncode == 0, f"{page.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
