"""The `make demo` script end to end in `--quick` mode, with the tiny test model in place of SmolLM2.

Same code path as the real demo: `Trainer.fit` with the client-server strategy and runner processes, a
SQLite store, the tracer recording the policy server's token ids, the triplet adapter and GRPO.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm.grpo import read_metrics, triplet_tokens
from agentlightning.store.sqlite import SqliteLightningStore
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.slow]

DEMO_DIR = Path(__file__).resolve().parents[2] / "examples" / "grpo_calculator"
sys.path.insert(0, str(DEMO_DIR))
train_calculator = importlib.import_module("train_calculator")  # the demo script, importable from its folder


async def _llm_calls(store_path: Path) -> tuple[dict[str, int], int, list[tuple[str, int]]]:
    """Rollouts per mode, LLM-call spans, and (mode, triplets with token ids) of every succeeded rollout."""
    store = SqliteLightningStore(store_path)
    try:
        rollouts = list(await store.query_rollouts())
        modes: dict[str, int] = {}
        llm_spans = 0
        with_tokens: list[tuple[str, int]] = []
        for rollout in rollouts:
            modes[str(rollout.mode)] = modes.get(str(rollout.mode), 0) + 1
            assert rollout.status == "succeeded", rollout
            spans = list(await store.query_spans(rollout.rollout_id, "latest"))
            calls = [s for s in spans if s.name == "openai.chat.completion"]
            llm_spans += len(calls)
            triplets = list(TracerTraceToTriplet().adapt(spans))
            assert len(triplets) == len(calls) >= 1
            with_tokens.append((str(rollout.mode), sum(triplet_tokens(t) is not None for t in triplets)))
            assert with_tokens[-1][1] == len(calls), "every LLM call must carry prompt and response token ids"
        return modes, llm_spans, with_tokens
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("bf16_cpu", "flag", "served", "hint"),
    [(True, "auto", "auto", True), (False, "auto", "auto", False), (True, "bfloat16", "bfloat16", False)],
)
def test_the_demo_serves_float32_on_cpu_and_names_bfloat16_where_the_cpu_computes_it(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    bf16_cpu: bool,
    flag: str,
    served: str,
    hint: bool,
) -> None:
    from agentlightning.serving import models

    monkeypatch.setattr(models, "cpu_computes_bfloat16", lambda: bf16_cpu)
    args = train_calculator.build_parser().parse_args(["--device", "cpu", "--serve-dtype", flag])
    assert train_calculator.grpo_config(args, Path("metrics.jsonl")).serve_dtype == served
    assert train_calculator.rft_config(args, Path("m.jsonl")).serve_dtype == served
    assert ("--serve-dtype bfloat16 decodes" in capsys.readouterr().out) is hint


@pytest.mark.parametrize(
    ("argv", "warm_start"),
    [([], "rft"), (["--deterministic"], "none"), (["--warm-start", "none"], "none"), (["--quick"], "rft")],
)
def test_the_demo_warm_starts_with_rft_by_default_except_in_deterministic_mode(
    argv: list[str], warm_start: str
) -> None:
    args = train_calculator.apply_quick(train_calculator.build_parser().parse_args(argv))
    assert args.warm_start == warm_start
    with pytest.raises(ValueError, match="--deterministic covers GRPO only"):
        train_calculator.apply_quick(
            train_calculator.build_parser().parse_args(["--deterministic", "--warm-start", "rft"])
        )


def test_quick_demo_writes_outputs_and_trains_on_token_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, tokenizer = tiny_model(seed=0)
    model.config.max_position_embeddings = 2048  # the demo's few-shot prompt is longer than the default 512
    argv = ["--quick", "--warm-start", "none", "--eval-every", "1", "--sampled-evals", "ends"]
    argv += ["--output-dir", str(tmp_path / "demo")]
    args = train_calculator.build_parser().parse_args(argv)
    summary = train_calculator.run_demo(args, model=model, tokenizer=tokenizer)

    out = tmp_path / "demo"
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    held_out = summary["held_out_exact_accuracy"]
    assert set(held_out) == {"greedy_exact", "sampled_exact", "greedy_reward", "sampled_reward"}
    assert all(set(v) == {"before", "after"} for v in held_out.values())
    assert len(summary["train_reward_per_step"]) == 2 and summary["steps"] == 2
    assert summary["rows"]["aggregation"] == "trajectory"
    assert 1.0 <= summary["rows"]["llm_calls_per_rollout"] and summary["rows"]["rows_per_rollout"] >= 1.0
    assert (out / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"

    # Off a terminal the run logs progress lines; its last line is the one-line summary, also in summary.json.
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("  validation (before training): ") for line in lines)
    assert any(line.startswith("  step 1/2: ") and "rollouts done" in line for line in lines)
    assert lines[-1] == summary["line"]
    expected = (
        f"demo: held-out greedy {held_out['greedy_exact']['before']:.2f} -> {held_out['greedy_exact']['after']:.2f}, "
        f"sampled {held_out['sampled_exact']['before']:.2f} -> {held_out['sampled_exact']['after']:.2f}, 2 steps, "
    )
    assert summary["line"].startswith(expected) and summary["line"].endswith(" s")

    records = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    # Held out after every step; sampled too only before training and after the last step (--sampled-evals ends).
    for record in records:
        assert "val_exact_accuracy" in record
        assert ("val_sampled_exact_accuracy" in record) == (record["step"] != 1)
    for record in records[1:]:
        assert record["rollouts"] == 4 and record["rollouts_failed"] == 0
        assert record["triplets_skipped"] == 0 and record["old_logprobs_recomputed"] == 0
        assert record["rows"] >= 4  # at least one row per rollout
        # Tied groups (all rewards equal) are left out of the update: the rest is what trained.
        assert record["rows_trained"] == record["samples"] <= record["rows"]
        assert record["rows_trained"] == 0 or record["groups_tied_dropped"] < 2
        assert record["transitions"] >= record["rows"]
        assert record["optimizer_steps"] <= 2  # --optimizer-steps caps the updates per batch

    modes, llm_spans, with_tokens = asyncio.run(_llm_calls(out / "store.db"))
    # 4 held-out tasks x (greedy + sampled) before and after, greedy after step 1; 2 steps x 2 tasks x 2 rollouts.
    assert modes == {"val": 20, "train": 8}
    assert llm_spans >= 24
    assert all(count >= 1 for _mode, count in with_tokens)


def test_quick_demo_with_an_rft_warm_start_runs_rft_then_grpo_on_one_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, tokenizer = tiny_model(seed=0)
    model.config.max_position_embeddings = 2048
    # A budget spent by the warm start already: GRPO's first step is its last (of --quick's 2).
    argv = ["--quick", "--warm-start", "rft", "--time-budget", "0.001", "--val-limit", "2"]
    argv += ["--output-dir", str(tmp_path / "rft-seed0")]  # where benchmarks/demo_seeds.py reads this run
    summary = train_calculator.run_demo(
        train_calculator.build_parser().parse_args(argv), model=model, tokenizer=tokenizer
    )

    warm = summary["warm_start"]
    assert warm["method"] == "rft" and warm["rounds"] == 1 and warm["rollouts"] == 4  # 2 tasks x 2 rollouts
    assert 0 <= warm["selected_rollouts"] <= 2 and set(warm["val_after"]) >= {"greedy_exact", "sampled_exact"}
    assert summary["steps"] == 1 and summary["settings"]["warm_start"] == "rft"
    # Held out: the untrained model (before RFT), after the warm start, after GRPO, in time order.
    timeline = summary["held_out_greedy_exact_by_time"]
    assert len(timeline) == 3 and [p["elapsed_s"] for p in timeline] == sorted(p["elapsed_s"] for p in timeline)
    # Training time (what the budget counts) leaves the evaluations out: it grows by less than the wall time.
    assert [p["train_s"] for p in timeline] == sorted(p["train_s"] for p in timeline)
    assert all(p["train_s"] < p["elapsed_s"] for p in timeline[1:])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("warm start (RFT) round 1: ") for line in lines)
    assert any(line.startswith("validation (after the warm start): ") for line in lines)
    assert (tmp_path / "rft-seed0" / "rft_metrics.jsonl").exists()

    async def tags() -> list[tuple[str, str]]:
        store = SqliteLightningStore(tmp_path / "rft-seed0" / "store.db")
        try:
            found = []
            for rollout in await store.query_rollouts():
                stage = "rft" if "rft_round" in (rollout.metadata or {}) else "grpo"
                found.append((stage, str(rollout.mode)))
            return found
        finally:
            await store.close()

    found = asyncio.run(tags())
    # RFT: 4 train rollouts and the untrained model's held-out pass (2 tasks greedy + sampled); no pass after
    # its last round (GRPO's first one evaluates the same weights). GRPO: 1 step x 2 x 2, two held-out passes,
    # and no rollouts prefetched for a step that the budget did not allow.
    assert found.count(("rft", "train")) == 4 and found.count(("rft", "val")) == 4
    assert found.count(("grpo", "train")) == 4 and found.count(("grpo", "val")) == 8

    # The seed study reads the run: the first evaluation at or above a threshold, in training seconds.
    seeds = _load_demo_seeds()
    anything = seeds.read_run(tmp_path, "rft", 0, threshold=0.0)
    assert anything["reached"] and anything["train_s_to_threshold"] == timeline[0]["train_s"]
    assert anything["train_s_to_stay"] == timeline[0]["train_s"] and anything["warm_start_s"] == warm["seconds"]
    impossible = seeds.read_run(tmp_path, "rft", 0, threshold=1.5)
    assert not impossible["reached"] and impossible["train_s_to_stay"] is None and impossible["steps"] == 1
    arm = seeds.arm_summary([anything, impossible])
    assert arm["runs"] == 2 and arm["reached"] == 1 and arm["stayed"] == 1
    assert seeds.read_run(tmp_path, "none", 0, threshold=0.9) is None  # no such run


def _load_demo_seeds() -> Any:
    path = DEMO_DIR.parents[1] / "benchmarks" / "demo_seeds.py"
    spec = importlib.util.spec_from_file_location("demo_seeds", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _steady(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record without what measures time or memory (they differ between runs)."""
    return {
        k: v
        for k, v in record.items()
        if k != "time" and not k.endswith(("_s", "_ms", "per_s")) and not k.startswith("rss_")
    }


def test_quick_demo_in_deterministic_mode_repeats_itself_and_evaluates_after_every_step(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        model, tokenizer = tiny_model(seed=0)
        model.config.max_position_embeddings = 2048
        argv = [
            "--quick",
            "--deterministic",
            "--async-rollouts",
            "--eval-every",
            "1",
            "--output-dir",
            str(tmp_path / name),
        ]
        summary = train_calculator.run_demo(
            train_calculator.build_parser().parse_args(argv), model=model, tokenizer=tokenizer
        )
        runs.append((summary, read_metrics(tmp_path / name / "metrics.jsonl")))

    (summary, records), (other_summary, other_records) = runs
    assert summary["mode"] == "deterministic" and summary["settings"]["async_rollouts"] is True  # overridden
    assert summary["rollouts"]["failed"] == 0 and summary["rollouts"]["by_status"] == {
        "succeeded": 32
    }  # 8 train, 3 x 8 held out
    assert ", 0 failed rollouts, " in summary["line"]
    # The held-out tasks after every step: the learning curve is in metrics.jsonl and the summary.
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all("val_exact_accuracy" in r and "val_sampled_exact_accuracy" in r for r in records)
    assert [point["step"] for point in summary["curve"]] == [0, 1, 2]
    assert all("held_out_greedy_exact" in point for point in summary["curve"])
    assert "train_reward" in summary["curve"][1] and "train_reward" not in summary["curve"][0]
    # The same seed gave the same run: rewards, losses, rows, held-out results.
    assert [_steady(r) for r in records] == [_steady(r) for r in other_records]
    assert summary["curve"] == other_summary["curve"]


def test_the_demo_curve_has_whole_steps_and_starts_from_the_untrained_model(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    records = [
        {"step": 0, "val_reward_mean": 0.6, "val_exact_accuracy": 0.5, "val_sampled_exact_accuracy": 0.25},
        {"step": 1, "reward_mean": 0.5, "reward_std": 0.2, "exact_rate": 0.4},
        {
            "step": 2,
            "reward_mean": 0.7,
            "reward_std": 0.1,
            "exact_rate": 0.6,
            "val_reward_mean": 0.9,
            "val_exact_accuracy": 1.0,
        },
    ]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    untrained = {"greedy_exact": 0.0, "greedy_reward": 0.1, "sampled_exact": 0.0}
    labels = train_calculator.plot_demo_curve(metrics, tmp_path / "curve.png", "RFT, then GRPO", untrained)
    assert labels == ["untrained", "warm\nstart", "1", "2"]
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    labels = train_calculator.plot_demo_curve(metrics, tmp_path / "grpo.png", "GRPO")
    assert all(label.lstrip("\u2212-").isdigit() for label in labels if label)  # no 0.5 steps
