"""The documentation site builds offline with `mkdocs build --strict`, with generated CLI and REST references."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

sys.path.insert(0, str(ROOT))
import docs_hooks  # noqa: E402
from tests.support.browser import CHROMIUM, chromium_page  # noqa: E402


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--config-file",
        str(config),
        "--site-dir",
        str(site),
    ]
    return subprocess.run(command, cwd=config.parent, env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it."""
    site = tmp_path_factory.mktemp("docs") / "site"
    result = _build(ROOT / "mkdocs.yml", site)
    assert result.returncode == 0, result.stderr[-5000:]
    return site


def test_site_builds_strictly_and_offline(site: Path) -> None:
    html = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    assert "agl serve" in html and "--model" in html
    rest = (site / "reference" / "rest.html").read_text(encoding="utf-8")
    assert "/v1/agl/rollouts" in rest and "Dequeue Rollouts" in rest
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    assert "LightningStore" in api and "GRPOConfig" in api
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, page
        assert "unpkg.com" not in text, page  # the offline search shim is vendored, not fetched


def test_the_site_opened_from_disk_links_pages_and_finds_search_results(site: Path) -> None:
    """`site/index.html` opened as a file: nav links open pages (not folder listings) and search answers."""
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (make browser)")
    from playwright.sync_api import expect

    with chromium_page() as (page, errors):
        page.goto((site / "index.html").as_uri())
        page.click("nav >> text=Train your first agent")
        assert page.url == (site / "first-agent.html").as_uri()
        expect(page.locator("h1")).to_contain_text("Train your first agent")
        search = page.locator("input.md-search__input")
        search.click()
        search.press_sequentially("dashboard", delay=20)
        expect(page.locator(".md-search-result__item").first).to_be_visible(timeout=15_000)
        page.locator(".md-search-result__item a").first.click()
        assert page.url.startswith("file://") and ".html" in page.url
        assert errors == []


def test_a_page_missing_from_the_nav_is_still_published(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copy(ROOT / "docs_hooks.py", project / "docs_hooks.py")
    (project / "docs" / "harnessed-agents.md").write_text("# Harnessed agents\n\nAgents in other processes.\n")
    (project / "docs" / "notes.md").write_text("# Notes\n\nAnything else.\n")
    site = tmp_path / "site"
    result = _build(project / "mkdocs.yml", site)
    assert result.returncode == 0, result.stderr[-5000:]
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "harnessed-agents.html" in home and "notes.html" in home  # both linked from the navigation


def test_cli_reference_covers_every_subcommand() -> None:
    from agentlightning.cli import SUBCOMMANDS

    text = docs_hooks.cli_reference()
    for name in SUBCOMMANDS:
        assert f"## agl {name}" in text
    assert "usage: agl serve" in text and "--backend" in text


def test_rest_reference_lists_store_routes_by_group() -> None:
    text = docs_hooks.rest_reference()
    assert "## rollouts" in text and "## OpenTelemetry (OTLP/HTTP)" in text
    assert "| POST | `/v1/agl/queues/rollouts/dequeue` |" in text
