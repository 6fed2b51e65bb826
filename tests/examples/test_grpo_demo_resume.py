"""`make demo` run again in the same folder: it resumes an interrupted run, does not redo the warm start, says
when a run is finished, and starts over with `--fresh`.

The interrupted run is the real script in a subprocess, stopped with Ctrl-C's signal (SIGINT to its
process group) once its first GRPO checkpoint is on disk; the tiny test model, saved in Hugging Face format,
stands in for SmolLM2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from agentlightning.algorithm.grpo import read_metrics
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEMO_DIR = ROOT / "examples" / "grpo_calculator"
sys.path.insert(0, str(DEMO_DIR))
train_calculator = importlib.import_module("train_calculator")
demo_resume = importlib.import_module("demo_resume")

SMALL = ["--batch-size", "2", "--group-size", "2", "--val-limit", "2", "--max-tokens", "24", "--n-runners", "1"]
SMALL += ["--rft-tasks", "2", "--rft-group-size", "2", "--rft-max-empty-rounds", "0", "--sampled-evals", "ends"]
SMALL += ["--device", "cpu"]
WARM_START_LINE = "warm start (RFT) round 1: "


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-model")
    model, tokenizer = tiny_model(seed=0)
    model.config.max_position_embeddings = 2048  # the demo's few-shot prompt is longer than the default 512
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _command(model_dir: Path, output_dir: Path, *extra: str) -> List[str]:
    script = str(DEMO_DIR / "train_calculator.py")
    return [sys.executable, script, "--model", str(model_dir), "--output-dir", str(output_dir), *SMALL, *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def _run(model_dir: Path, output_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        _command(model_dir, output_dir, *extra), env=_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _interrupt_after_first_checkpoint(model_dir: Path, output_dir: Path) -> subprocess.CompletedProcess[str]:
    """Start a run of many steps, and stop it like Ctrl-C does once GRPO's first checkpoint is complete."""
    checkpoint = output_dir / "checkpoints" / "grpo" / "step-000001" / "trainer_state.pt"
    process = subprocess.Popen(
        _command(model_dir, output_dir, "--steps", "40"),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 600
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    # A later step's checkpoint may have replaced the first one (the demo keeps the last) before the signal.
    assert demo_resume.latest_grpo_step(output_dir) >= 1, stdout[-3000:] + stderr[-3000:]
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_an_interrupted_demo_resumes_from_its_checkpoint_without_redoing_the_warm_start(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    out = tmp_path / "demo"
    stopped = _interrupt_after_first_checkpoint(tiny_model_dir, out)
    assert stopped.returncode == 130, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert "Starting a new run in " in stopped.stdout.splitlines()[0]
    assert any(line.startswith(WARM_START_LINE) for line in stopped.stdout.splitlines())
    assert "Interrupted. Run the same command again to resume from GRPO step " in stopped.stderr
    step = demo_resume.latest_grpo_step(out)  # 1, or later if a step finished before the signal arrived
    assert step >= 1 and (out / "checkpoints" / "warm_start" / "config.json").exists()

    resumed = _run(tiny_model_dir, out, "--steps", str(step + 1))
    lines = resumed.stdout.splitlines()
    assert lines[0].startswith(f"Resuming the run in {out}/ from GRPO step {step} of {step + 1}; the warm start ")
    assert f"GRPO resumed from step {step} " in resumed.stderr
    assert not any(line.startswith(WARM_START_LINE) for line in lines)  # the warm start is not redone
    summary = json.loads((out / "summary.json").read_text())
    assert lines[-1] == summary["line"] and f", {step + 1} steps, 0 failed rollouts, " in summary["line"]
    assert summary["steps"] == step + 1 and summary["resumed_from_steps"] == [step]
    assert summary["warm_start"]["rounds"] == 1  # kept from the interrupted run
    # One record per step: those after the checkpoint that the interrupted run wrote are gone.
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(step + 2))
    # The held-out results over time: untrained, after the warm start, after the last step.
    timeline = summary["held_out_greedy_exact_by_time"]
    assert len(timeline) == 3 and [p["elapsed_s"] for p in timeline] == sorted(p["elapsed_s"] for p in timeline)
    assert len(summary["memory_gb"]["rss_per_step"]) == step + 1 and summary["memory_gb"]["peak"] > 0

    again = _run(tiny_model_dir, out, "--steps", str(step + 1))
    assert again.stdout.splitlines()[0].startswith(f"{out}/ holds a finished run ({step + 1} GRPO steps)")
    assert again.stdout.splitlines()[-1] == summary["line"] and "resumed" not in again.stderr

    fresh = _run(tiny_model_dir, out, "--steps", "1", "--fresh")
    lines = fresh.stdout.splitlines()
    assert lines[0].startswith(f"--fresh: starting over in {out}/")
    assert any(line.startswith(WARM_START_LINE) for line in lines) and "resumed" not in fresh.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["resumed_from_steps"] == []
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [0, 1]


def _args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = train_calculator.build_parser()
    return train_calculator.apply_quick(parser.parse_args(["--output-dir", str(tmp_path), *SMALL, *argv]))


def _write_state(tmp_path: Path, state: object) -> None:
    (tmp_path / "checkpoints").mkdir(parents=True, exist_ok=True)
    (tmp_path / "checkpoints" / "state.json").write_text(state.to_json())  # type: ignore[attr-defined]


def test_the_demo_plans_from_its_state_fresh_resume_continue_or_done(tmp_path: Path) -> None:
    plan = demo_resume.plan_run(_args(tmp_path))
    assert plan.action == "fresh" and plan.message.startswith(f"Starting a new run in {tmp_path}/")

    args = _args(tmp_path, "--steps", "3")
    state = demo_resume.DemoState(settings=demo_resume.run_settings(args))
    _write_state(tmp_path, state)  # the warm start did not finish
    plan = demo_resume.plan_run(args)
    assert plan.action == "fresh" and "stopped during the warm start: starting over" in plan.message

    state.warm_start = {"history": [], "val_results": {"0": {"greedy_exact": 0.0}}, "clock": {}}
    _write_state(tmp_path, state)
    plan = demo_resume.plan_run(args)
    assert plan.action == "resume" and plan.grpo_step == 0 and plan.warm_start_done
    assert demo_resume.WarmStartRecord.of(plan.state).val_results == {0: {"greedy_exact": 0.0}}

    state.finished = {"steps": 3, "requested": 3}
    _write_state(tmp_path, state)
    assert demo_resume.plan_run(args).action == "done"
    assert demo_resume.plan_run(_args(tmp_path, "--steps", "2")).action == "done"
    more = demo_resume.plan_run(_args(tmp_path, "--steps", "5"))
    assert more.action == "resume" and more.message.startswith(f"Continuing the finished run in {tmp_path}/")
    assert demo_resume.plan_run(_args(tmp_path, "--steps", "3", "--fresh")).action == "fresh"
    unkept = demo_resume.plan_run(_args(tmp_path, "--steps", "3", "--no-checkpoints"))
    assert unkept.action == "fresh" and "--no-checkpoints: running it again starts over" in unkept.message


def test_the_demo_refuses_to_resume_a_run_with_other_settings(tmp_path: Path) -> None:
    state = demo_resume.DemoState(settings=demo_resume.run_settings(_args(tmp_path)))
    _write_state(tmp_path, state)
    with pytest.raises(demo_resume.DemoSettingsError, match=r"--lr 3e-05 there, 0.001 now\); .* add --fresh"):
        demo_resume.plan_run(_args(tmp_path, "--lr", "1e-3"))
    assert demo_resume.plan_run(_args(tmp_path, "--lr", "1e-3", "--fresh")).action == "fresh"
    # How it runs may change: more runner processes, another evaluation schedule.
    assert demo_resume.plan_run(_args(tmp_path, "--n-runners", "4", "--eval-every", "1")).action == "fresh"
