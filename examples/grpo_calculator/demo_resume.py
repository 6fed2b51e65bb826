"""What `make demo` keeps to resume, and what a run does with an output folder that holds an earlier one.

Under `<output>/checkpoints/`:

    state.json        the run's settings, the warm start's results, the held-out results and time by step, and
                      whether the run finished
    warm_start/       the weights the RFT warm start trained (Hugging Face format): a rerun does not redo it
    grpo/step-NNNNNN/ the last GRPO checkpoint (weights, optimizer, RNG): a rerun resumes from it

Run again after an interruption (Ctrl-C, a kill, a crash), the demo goes on from the last GRPO checkpoint; a
warm start that did not finish starts over (it is one round of sampling and fine-tuning). A finished run
run again says so and prints its summary line; a larger `--steps` continues it; `--fresh` starts over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.json"
WARM_START_DIR = "warm_start"
GRPO_DIR = "grpo"

RUN_SETTINGS = (
    "model",
    "warm_start",
    "batch_size",
    "group_size",
    "lr",
    "lora_rank",
    "temperature",
    "aggregation",
    "max_tokens",
    "optimizer_steps",
    "val_limit",
    "deterministic",
    "seed",
    "rft_rounds",
    "rft_max_empty_rounds",
    "rft_tasks",
    "rft_group_size",
    "rft_threshold",
    "rft_epochs",
)
"""What a resumed run must share with the run it continues. The others change how it runs, not what it
learns: `--steps` (more steps continue a finished run), `--n-runners`, `--eval-every`, `--device`, ..."""


class DemoSettingsError(ValueError):
    """The output folder holds a run with other settings than this one's."""


@dataclass
class DemoState:
    """`checkpoints/state.json`."""

    settings: Dict[str, Any]
    warm_start: Optional[Dict[str, Any]] = None
    """Once the warm start finished: its `history` and `val_results` (the untrained model's held-out result)
    and the demo clock at its end (`clock`)."""
    val_results: Dict[int, Dict[str, float]] = field(default_factory=lambda: {})
    """GRPO's held-out results by step (step 0: after the warm start)."""
    clock: Dict[int, Dict[str, float]] = field(default_factory=lambda: {})
    """By GRPO step: the demo clock when the step was recorded (`elapsed_s`, `eval_s`)."""
    finished: Optional[Dict[str, int]] = None
    """Once a run completed: `steps` (GRPO steps trained) and `requested` (its `--steps`)."""
    resumed_from: List[int] = field(default_factory=lambda: [])
    """The GRPO step of each resumption, in order."""
    interrupted_rollouts: List[str] = field(default_factory=lambda: [])
    """Rollouts an interruption stopped (not counted as failed in the summary)."""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DemoState:
        raw = json.loads(text)
        return cls(
            settings=dict(raw["settings"]),
            warm_start=raw.get("warm_start"),
            val_results={int(step): dict(result) for step, result in (raw.get("val_results") or {}).items()},
            clock={int(step): dict(clock) for step, clock in (raw.get("clock") or {}).items()},
            finished=raw.get("finished"),
            resumed_from=[int(step) for step in raw.get("resumed_from") or []],
            interrupted_rollouts=[str(rollout_id) for rollout_id in raw.get("interrupted_rollouts") or []],
        )


def run_settings(args: argparse.Namespace) -> Dict[str, Any]:
    return {key: getattr(args, key) for key in RUN_SETTINGS}


@dataclass
class ResumePlan:
    """What this run does with its output folder: `fresh` (start over), `resume` or `done` (nothing to train)."""

    action: str
    message: str
    state: DemoState
    grpo_step: int = 0
    """The GRPO checkpoint's step this run resumes from (0: GRPO starts at its beginning)."""

    @property
    def warm_start_done(self) -> bool:
        return self.action == "resume" and self.state.warm_start is not None


def latest_grpo_step(output_dir: Path) -> int:
    """The step of the newest complete GRPO checkpoint under `output_dir` (0: none)."""
    from agentlightning.algorithm.grpo.learner import GRPOLearner

    latest = GRPOLearner.latest_checkpoint(output_dir / CHECKPOINTS / GRPO_DIR)
    return 0 if latest is None else int(latest.name.split("-", 1)[1])


def plan_run(args: argparse.Namespace) -> ResumePlan:
    """Decide from `<output>/checkpoints/` whether this run starts over, resumes, or has nothing to do."""
    output_dir: Path = args.output_dir
    settings = run_settings(args)
    fresh = DemoState(settings=settings)
    where = f"{output_dir}/"
    path = output_dir / CHECKPOINTS / STATE_FILE
    if not args.checkpoints:
        return ResumePlan(
            "fresh", f"Starting a new run in {where} (--no-checkpoints: running it again starts over)", fresh
        )
    if args.fresh:
        return ResumePlan("fresh", f"--fresh: starting over in {where} (an earlier run there is removed)", fresh)
    if not path.exists():
        return ResumePlan(
            "fresh",
            f"Starting a new run in {where} (checkpoints in {where}{CHECKPOINTS}/: run the same command again after "
            "an interruption to resume; --fresh starts over)",
            fresh,
        )
    state = DemoState.from_json(path.read_text(encoding="utf-8"))
    changed = [key for key in RUN_SETTINGS if state.settings.get(key) != settings[key]]
    if changed:
        key = changed[0]
        raise DemoSettingsError(
            f"{where} holds a run with other settings (--{key.replace('_', '-')} {state.settings.get(key)!r} there, "
            f"{settings[key]!r} now); run with its settings to resume it, add --fresh to start over, or pick "
            "another --output-dir"
        )
    step = latest_grpo_step(output_dir)
    if state.finished is not None and args.steps <= max(state.finished["steps"], state.finished["requested"]):
        return ResumePlan(
            "done",
            f"{where} holds a finished run ({state.finished['steps']} GRPO steps): nothing to train. --fresh trains "
            f"again from the start; a larger --steps continues it. Its summary ({where}summary.json):",
            state,
            step,
        )
    if state.warm_start is None and settings["warm_start"] == "rft":
        return ResumePlan("fresh", f"The run in {where} stopped during the warm start: starting over", fresh)
    if step == 0 and state.warm_start is None:
        return ResumePlan("fresh", f"The run in {where} stopped before its first checkpoint: starting over", fresh)
    warm = "" if state.warm_start is None else f"; the warm start finished before (kept in {CHECKPOINTS}/warm_start/)"
    if state.finished is not None:
        what = f"Continuing the finished run in {where} from GRPO step {step} to {args.steps}"
    elif step:
        what = f"Resuming the run in {where} from GRPO step {step} of {args.steps}"
    else:
        what = f"Resuming the run in {where}: GRPO starts at step 0"
    return ResumePlan("resume", what + warm, state, step)


def resume_hint(output_dir: Path) -> str:
    """What running the same command again does now (said when a run is interrupted)."""
    path = output_dir / CHECKPOINTS / STATE_FILE
    state = DemoState.from_json(path.read_text(encoding="utf-8")) if path.exists() else None
    step = latest_grpo_step(output_dir)
    if state is None or (state.warm_start is None and state.settings.get("warm_start") == "rft"):
        return "The warm start had not finished: running the same command again starts over."
    if step == 0 and state.warm_start is None:
        return "No checkpoint yet: running the same command again starts over."
    where = f"GRPO step {step}" if step else "the warm start's weights (GRPO step 0)"
    return f"Run the same command again to resume from {where}; add --fresh to start over."


class DemoCheckpoints:
    """Writes `state.json` as the run goes (after the warm start, after each GRPO step, at the end)."""

    def __init__(self, output_dir: Path, state: DemoState) -> None:
        self.root = output_dir / CHECKPOINTS
        self.state = state
        self.root.mkdir(parents=True, exist_ok=True)
        self.write()

    @property
    def grpo_dir(self) -> Path:
        return self.root / GRPO_DIR

    @property
    def warm_start_dir(self) -> Path:
        return self.root / WARM_START_DIR

    def write(self) -> None:
        staging = self.root / f".{STATE_FILE}.tmp"
        staging.write_text(self.state.to_json(), encoding="utf-8")
        staging.replace(self.root / STATE_FILE)  # atomic: a kill leaves the old state or the new one

    def save_warm_start(self, policy: Any, rft: Any, clock: Any) -> None:
        """Keep the warm start's weights (`policy`: a `TrainedPolicy`) and results, so a rerun skips it."""
        started = time.perf_counter()
        staging = self.root / f".{WARM_START_DIR}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        policy.model.save_pretrained(staging)
        policy.tokenizer.save_pretrained(staging)
        shutil.rmtree(self.warm_start_dir, ignore_errors=True)
        staging.rename(self.warm_start_dir)
        self.state.warm_start = {
            "history": list(rft.history),
            "val_results": {str(step): result for step, result in rft.val_results.items()},
            "clock": {"elapsed_s": clock.elapsed_s(), "eval_s": clock.eval_s},
            "save_s": round(time.perf_counter() - started, 1),
        }
        self.write()

    def record_step(self, step: int, val_results: Dict[int, Dict[str, float]], clock: Any) -> None:
        """After GRPO recorded `step` (its checkpoint follows): what a resumption from it restores."""
        self.state.val_results = dict(val_results)
        self.state.clock[step] = {"elapsed_s": clock.elapsed_s(), "eval_s": clock.eval_s}
        self.write()

    def finish(self, steps: int, requested: int) -> None:
        self.state.finished = {"steps": steps, "requested": requested}
        self.write()

    def restore(self, plan: ResumePlan, grpo: Any, clock: Any, store_path: Path) -> None:
        """Restore what GRPO's checkpoint does not hold: the metrics, held-out results and clock (`DemoClock`)
        until its step, and note the rollouts the interruption stopped (GRPO cancels those left queued or
        running)."""
        step = plan.grpo_step
        grpo.history = trim_metrics(grpo.metrics_path, step)
        grpo.val_results = {s: result for s, result in plan.state.val_results.items() if step and s <= step}
        grpo.steps_before = step
        restored = self.restored_clock(step)
        clock.start = time.perf_counter() - restored["elapsed_s"]  # the time until the checkpoint counts on
        clock.eval_s, clock.training_began = restored["eval_s"], True
        self.state.val_results = dict(grpo.val_results)
        self.state.finished = None
        self.state.resumed_from.append(step)
        stopped = asyncio.run(interrupted_rollouts(store_path, self.grpo_dir, step))
        self.state.interrupted_rollouts = sorted({*self.state.interrupted_rollouts, *stopped})
        self.write()

    def restored_clock(self, step: int) -> Dict[str, float]:
        """The clock at `step` (0: at the end of the warm start; no warm start: zero)."""
        if step and step in self.state.clock:
            return self.state.clock[step]
        warm = self.state.warm_start or {}
        return dict(warm.get("clock") or {"elapsed_s": 0.0, "eval_s": 0.0})


@dataclass
class WarmStartRecord:
    """The finished warm start as `state.json` keeps it: what the summary and the plot read of `DemoRFT`."""

    history: List[Dict[str, Any]]
    val_results: Dict[int, Dict[str, float]]

    @classmethod
    def of(cls, state: DemoState) -> WarmStartRecord:
        warm = state.warm_start or {}
        results = {int(step): dict(result) for step, result in (warm.get("val_results") or {}).items()}
        return cls(history=list(warm.get("history") or []), val_results=results)


async def interrupted_rollouts(store_path: Path, grpo_dir: Path, step: int) -> List[str]:
    """GRPO's rollouts of the work after its checkpoint at `step` that did not succeed: the interruption
    stopped them (runners stopped mid-rollout fail theirs; GRPO cancels those left queued or running)."""
    from agentlightning.algorithm.grpo import GRPO
    from agentlightning.store.sqlite import SqliteLightningStore

    store = SqliteLightningStore(store_path)
    try:
        own = str(grpo_dir.resolve())
        return [
            rollout.rollout_id
            for rollout in await store.query_rollouts()
            if (rollout.metadata or {}).get(GRPO.META_CHECKPOINT) == own
            and int((rollout.metadata or {}).get(GRPO.META_STEP, -1)) >= step
            and rollout.status != "succeeded"
        ]
    finally:
        await store.close()


def trim_metrics(path: Path, step: int) -> List[Dict[str, Any]]:
    """Drop the records after `step` (written before the interruption, never checkpointed); returns the rest.

    With `step` 0 (no GRPO checkpoint) nothing is kept: GRPO evaluates the warm-started model again.
    """
    from agentlightning.algorithm.grpo import read_metrics

    kept = [record for record in read_metrics(path) if step and int(record["step"]) <= step]
    path.write_text("".join(json.dumps(record) + "\n" for record in kept), encoding="utf-8")
    return kept
