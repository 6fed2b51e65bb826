"""A newcomer's first hour, end to end: README quick start -> watch it in the dashboard -> first agent -> GRPO.

As a user would: `agl serve --model echo` and `agl store` are started first, in their own processes; the
README's quick-start script and docs/first-agent.md's agent with its GRPO block (the tiny test model in
place of SmolLM2) run as scripts with `AGL_STORE_URL` pointing at that store (the page's other blocks,
its `Trainer.dev` check and APO, run in tests/docs/test_code_blocks.py). Each must finish on its own (no hang), print a few lines (no wall of text, no unclosed HTTP
session), and name the store. The dashboard of that store then shows each run apart from the others.
The code run is the code in the documents, so they cannot drift from what works.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentlightning.web.launcher import pick_free_port
from tests.support.agl_cli import running
from tests.support.browser import CHROMIUM, chromium_page
from tests.support.run_output import summary_line, without_progress

pytestmark = [pytest.mark.slow, pytest.mark.train]

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SCRIPT_TIMEOUT = 180
SCREENSHOTS = ROOT / "artifacts" / "screenshots"


def code_blocks(page: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == language]


def grpo_files() -> tuple[str, str]:
    """first-agent.md's `agent.py` and its `grpo.py`, shrunk to one step of the tiny model (each edit must apply)."""
    page = ROOT / "docs" / "first-agent.md"
    agent = code_blocks(page, "python")[0]
    (grpo,) = [block for block in code_blocks(page, "py") if "agl.GRPO(" in block]
    edits = {
        'model="smollm2"': "model=MODEL, tokenizer=TOKENIZER",
        "total_steps=5, batch_size=8, group_size=4": "total_steps=1, batch_size=2, group_size=2",
        "max_new_tokens=32": "max_new_tokens=8",
        "n_runners=4": "n_runners=2",
        "TASKS * 16": "TASKS[:2]",
        "val_dataset=TASKS)": "val_dataset=TASKS[:1])",
    }
    for old, new in edits.items():
        assert old in grpo, f"docs/first-agent.md's GRPO block no longer has {old!r}; update this test with it"
        grpo = grpo.replace(old, new)
    assert agent.startswith("# file: agent.py\n") and "from agent import" in grpo, "the page's file layout changed"
    tiny = "from tests.support.tiny_model import tiny_model\n\nMODEL, TOKENIZER = tiny_model(seed=0)\n"
    return agent, tiny + "\n" + grpo


def run_script(path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(path)],
        cwd=path.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(process: subprocess.Popen[str], name: str) -> list[str]:
    try:
        output, _ = process.communicate(timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"{name} hung for {SCRIPT_TIMEOUT} s:\n{output}") from None
    assert process.returncode == 0, f"{name} exited with {process.returncode}:\n{output}"
    assert "Traceback" not in output and "Unclosed" not in output, f"{name}:\n{output}"
    return output.splitlines()


def test_readme_quick_start_dashboard_first_agent_and_grpo(tmp_path: Path) -> None:
    echo_port, store_port = pick_free_port(), pick_free_port()
    store_url = f"http://127.0.0.1:{store_port}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENAI_BASE_URL": f"http://127.0.0.1:{echo_port}/v1",
        "AGL_STORE_URL": store_url,
    }
    quickstart = tmp_path / "quickstart.py"
    quickstart.write_text(code_blocks(ROOT / "README.md", "python")[0])
    agent_code, grpo_code = grpo_files()
    (tmp_path / "agent.py").write_text(agent_code)  # the page's layout: grpo.py imports agent.py
    grpo = tmp_path / "first_agent_grpo.py"
    grpo.write_text(grpo_code)

    with (
        running(["serve", "--model", "echo", "--port", str(echo_port)], f"http://127.0.0.1:{echo_port}/health"),
        running(["store", "--port", str(store_port), "--log-level", "WARNING"], f"{store_url}/v1/agl/health"),
    ):
        # One after the other, as the pages go (a store's queue is shared: runs at once take each other's work).
        outputs = {script.name: finished(run_script(script, env), script.name) for script in (quickstart, grpo)}

        store_line = f"  store: LightningStoreClient to the store server at {store_url} (dashboard: {store_url}/)"
        for name, lines in outputs.items():
            assert store_line in lines, (name, lines)
            assert len(without_progress(lines)) <= 12, (name, lines)  # the summary, not a wall of text
        # A run over PROGRESS_INTERVAL_SECONDS prints progress lines before its summary: find the summary by name.
        quickstart_summary = summary_line(outputs["quickstart.py"])
        assert "2 rollouts: 2 succeeded, 0 failed" in quickstart_summary
        # GRPO: one step of 2 tasks x 2 samples, and one validation rollout before and after it.
        assert "6 rollouts: 6 succeeded, 0 failed" in summary_line(outputs["first_agent_grpo.py"]), outputs

        if CHROMIUM.exists():  # the dashboard part needs Debian's chromium (make browser)
            check_dashboard(store_url)


def check_dashboard(store_url: str) -> None:
    """Each script is a run of its own on the Training page (the latest shown first); the rollouts list has all."""
    from playwright.sync_api import expect

    with chromium_page() as (page, errors):
        page.goto(f"{store_url}/#/rollouts")
        expect(page.locator(".page-info")).to_contain_text("of 8")  # 2 + (4 train + 2 val)
        page.click('a[data-nav="training"]')
        options = page.locator("#run-select option")
        expect(options).to_have_count(3)  # two runs, and both merged
        labels = options.all_inner_texts()
        assert labels[0].startswith("first_agent_grpo.py ") and labels[0].endswith("(latest)"), labels
        expect(page.locator("#reward-chart svg .series-train-raw circle")).to_have_count(4)  # the latest run
        expect(page.locator("#reward-chart svg .series-val-raw circle")).to_have_count(2)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "first-hour-training.png"), full_page=True)
        assert labels[1].startswith("quickstart.py ") and labels[2] == "all 2 runs, merged", labels
        quickstart_run = next(o.get_attribute("value") for o in options.all() if o.inner_text().startswith("quick"))
        page.select_option("#run-select", quickstart_run)
        expect(page.locator("#reward-chart svg .series-train-raw circle")).to_have_count(2)
        expect(page.locator("#reward-chart svg .series-val-raw circle")).to_have_count(0)
        assert errors == [], errors


def test_grpo_script_follows_the_docs() -> None:
    """The GRPO run above is docs/first-agent.md's block with only the model and the sizes changed."""
    _, script = grpo_files()
    assert "trainer.fit(capital_agent, train_dataset=TASKS[:2], val_dataset=TASKS[:1])" in script
    assert textwrap.dedent(script).count("agl.GRPO(") == 1
