"""The demo's GRPO and RFT: evaluated greedily and sampled, with a progress bar (or progress lines when stdout
is not a terminal), recording the exact-answer rate of each step and evaluation.

Imported by `train_calculator.py`; the classes are built on first use so that importing the script does not
import torch.
"""

from __future__ import annotations

import asyncio
import math
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from agentlightning.emitter import find_final_reward

if TYPE_CHECKING:
    from agentlightning.algorithm.grpo import GRPO
    from agentlightning.algorithm.rft import RFT

_GREEDY, _SAMPLED = 0, 1  # the sample slot of a validation rollout says how it decoded


@dataclass
class DemoClock:
    """The demo's time, shared by its stages: since its start, and without the held-out evaluations (the
    training time that `--time-budget` counts: evaluating is measuring, so it does not use the budget)."""

    start: float = field(default_factory=time.perf_counter)
    eval_s: float = 0.0
    training_began: bool = False

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    def train_s(self) -> float:
        return self.elapsed_s() - self.eval_s


def memory_gb() -> Dict[str, float]:
    """This process's resident memory now and its peak so far, in GB (the learner and the policy server live
    here; the runner processes are small and apart)."""
    import psutil

    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"rss_gb": psutil.Process().memory_info().rss / 1e9, "rss_peak_gb": peak_kb * 1024 / 1e9}


def make_algorithm_classes() -> Tuple[type[GRPO], type[RFT]]:
    """`(DemoGRPO, DemoRFT)`."""
    from agentlightning.algorithm.grpo import GRPO
    from agentlightning.algorithm.rft import RFT

    class DemoProgress:
        """What both demo algorithms add to GRPO's loop: two-way evaluation, progress, exact-answer rates."""

        NAME: str
        META_STEP: str
        META_SAMPLE: str
        META_GROUP: str
        VAL_RESOURCES_ID: str
        config: Any
        learner: Any
        server: Any
        last_step: bool
        llm_resource_name: str
        get_store: Any
        get_initial_resources: Any
        _enqueue: Any
        _wait: Any
        describe_phase: Any
        phase: str

        def _init_progress(self) -> None:
            self.progress: Any = None
            self.bar: Any = None
            self.clock = DemoClock()
            """Set by the demo at its start (one for all stages): evaluations record their time from there."""
            self.sampled_evals = "all"
            """"all": every evaluation also samples; "ends": only before training and after the last step."""
            self.train_started: Optional[float] = None
            self.val_results: Dict[int, Dict[str, float]] = {}
            self.log_lines = not sys.stdout.isatty()

        @property
        def sampled_val_resources_id(self) -> str:
            return f"{self.NAME.lower()}-val-sampled"

        async def _publish_resources(self) -> None:
            await super()._publish_resources()  # type: ignore[misc]
            llm = self.server.as_resource(
                {"temperature": self.config.temperature, "max_tokens": self.config.max_new_tokens}
            )
            initial = dict(self.get_initial_resources() or {})
            await self.get_store().update_resources(
                self.sampled_val_resources_id, {**initial, self.llm_resource_name: llm}
            )

        async def rewards_of(self, mode: str, step: int, sample: Optional[int] = None) -> List[float]:
            """Final rewards of this algorithm's succeeded rollouts of `mode` enqueued at `step`."""
            store = self.get_store()
            rewards: Dict[Tuple[Any, Any], float] = {}
            for rollout in await store.query_rollouts(status_in=["succeeded"]):
                meta = rollout.metadata or {}
                if rollout.mode != mode or meta.get(self.META_STEP) != step:
                    continue
                if sample is not None and meta.get(self.META_SAMPLE) != sample:
                    continue
                key = (meta.get(self.META_GROUP), meta.get(self.META_SAMPLE))  # a resumed run may re-enqueue one
                if key not in rewards:
                    reward = find_final_reward(await store.query_spans(rollout.rollout_id, "latest"))
                    rewards[key] = 0.0 if reward is None else reward
            return list(rewards.values())

        async def rewards_by_sample(self, enqueued: Dict[Any, str], finished: Dict[str, Any]) -> Dict[int, List[float]]:
            """Final rewards of the succeeded rollouts among `enqueued` (`{(task, sample): rollout_id}`), by sample."""
            rewards: Dict[int, List[float]] = {}
            for (_task, sample), rollout_id in enqueued.items():
                rollout = finished.get(rollout_id)
                if rollout is None or rollout.status != "succeeded":
                    continue
                reward = find_final_reward(await self.get_store().query_spans(rollout_id, "latest"))
                rewards.setdefault(sample, []).append(0.0 if reward is None else reward)
            return rewards

        async def _watch(self, mode: str, step: int, total: int, label: str) -> None:
            """Show finished/total rollouts until cancelled: in the bar, and as a line every ~15 s off a terminal."""
            store = self.get_store()
            began = time.perf_counter()
            last_line = 0.0
            while True:
                finished = set()
                for rollout in await store.query_rollouts(status_in=["succeeded", "failed", "cancelled"]):
                    meta = rollout.metadata or {}
                    if rollout.mode == mode and meta.get(self.META_STEP) == step:
                        finished.add((meta.get(self.META_GROUP), meta.get(self.META_SAMPLE)))
                done = len(finished)
                phase = self.describe_phase()
                doing = f", {phase}" if phase and phase != "rollouts" else ""
                self._describe(f"{label}: {done}/{total} rollouts{doing}")
                now = time.perf_counter()
                if self.log_lines and now - last_line >= 15.0:
                    last_line = now
                    print(f"  {label}: {done}/{total} rollouts done{doing} ({now - began:.0f} s)", flush=True)
                await asyncio.sleep(2.0)

        def _describe(self, text: str) -> None:
            if self.progress is not None and self.bar is not None:
                self.progress.update(self.bar, description=text)

        def _advance(self, text: str, **fields: Any) -> None:
            if self.progress is not None and self.bar is not None:
                self.progress.update(self.bar, advance=1, description=text, **fields)

        def _print(self, text: str) -> None:
            if self.progress is not None and not self.log_lines:
                self.progress.console.print(text)
            else:
                print(text, flush=True)

        def _label(self, step: int) -> str:
            return f"validation ({'before training' if step == 0 else f'after step {step}'})"

        def _samples_at(self, step: int) -> bool:
            return self.sampled_evals == "all" or step == 0 or self.last_step

        async def evaluate(self, val_dataset: Any) -> Dict[str, float]:
            """Each held-out task greedy (temperature 0) and, when `_samples_at`, sampled (training temperature)."""
            step = self.learner.global_step
            label = self._label(step)
            tasks = len(val_dataset)
            passes = (("greedy", _GREEDY), ("sampled", _SAMPLED)) if self._samples_at(step) else (("greedy", _GREEDY),)
            self.phase = "evaluation"
            watcher = asyncio.ensure_future(self._watch("val", step, len(passes) * tasks, label))
            began, train_s = time.perf_counter(), self.clock.train_s()
            enqueued: Dict[Any, str] = {}
            finished: Dict[str, Any] = {}
            try:
                for name, sample in passes:
                    requests = {(i, sample): val_dataset[i] for i in range(tasks)}
                    resources_id = self.VAL_RESOURCES_ID if name == "greedy" else self.sampled_val_resources_id
                    enqueued.update(await self._enqueue(requests, step, mode="val", resources_id=resources_id))
                finished = await self._wait(list(enqueued.values()))
            finally:
                watcher.cancel()
                self.clock.eval_s += time.perf_counter() - began
            result: Dict[str, float] = {"tasks": float(tasks), "time_s": time.perf_counter() - began}
            by_sample = await self.rewards_by_sample(enqueued, finished)
            for name, sample in passes:
                rewards = by_sample.get(sample, [])  # failed/unfinished rollouts count as 0
                result[f"{name}_reward"] = math.fsum(rewards) / max(1, tasks)  # exact: the same in any order
                result[f"{name}_exact"] = sum(r >= 1.0 for r in rewards) / max(1, tasks)
                result[f"{name}_finished"] = float(len(rewards))
            result["elapsed_s"], result["train_s"] = self.clock.elapsed_s(), train_s
            self.val_results[step] = result
            unfinished = len(enqueued) - int(sum(result[f"{name}_finished"] for name, _ in passes))
            if unfinished:
                self._print(
                    f"warning: {unfinished} of {len(enqueued)} validation rollouts did not succeed within "
                    f"{self.config.rollout_timeout_s:.0f} s; they count as wrong answers"
                )
            sampled = f", sampled {result['sampled_exact']:.0%}" if "sampled_exact" in result else ""
            trained = f"; {train_s:.0f} s of training" if self.clock.training_began else ""  # none before step 1
            self._print(
                f"{label}: exact answers greedy {result['greedy_exact']:.0%}{sampled} of {tasks} held-out tasks "
                f"(greedy reward {result['greedy_reward']:.3f}, {result['time_s']:.0f} s{trained})"
            )
            self._advance(f"{label} done")
            metrics = {"val_reward_mean": result["greedy_reward"], "val_exact_accuracy": result["greedy_exact"]}
            if "sampled_exact" in result:
                metrics["val_sampled_reward_mean"] = result["sampled_reward"]
                metrics["val_sampled_exact_accuracy"] = result["sampled_exact"]
            return {**metrics, "val_rollouts": float(len(enqueued))}

        async def _tracked_step(self, train_dataset: Any, reuse_store: bool, label: str) -> Dict[str, Any]:
            """The parent's `train_step` with the progress shown and the exact-answer rate added."""
            cfg = self.config
            step = self.learner.global_step
            if self.train_started is None:
                self.train_started = time.perf_counter()
            self.clock.training_began = True
            watcher = asyncio.ensure_future(self._watch("train", step, cfg.batch_size * cfg.group_size, label))
            try:
                metrics = await super().train_step(train_dataset, reuse_store=reuse_store)  # type: ignore[misc]
            finally:
                watcher.cancel()
            rewards = await self.rewards_of("train", step)
            metrics["exact_rate"] = sum(r >= 1.0 for r in rewards) / max(1, len(rewards))
            metrics.update(memory_gb())
            return metrics

    class DemoGRPO(DemoProgress, GRPO):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._init_progress()
            self.on_warm_start: Optional[Callable[[Any], None]] = None
            """Called with the warm start's weights (a `TrainedPolicy`) before GRPO builds on them."""
            self.on_record: Optional[Callable[[int], None]] = None
            """Called after each step is recorded (its checkpoint follows)."""
            self.steps_before = 0
            """GRPO steps an interrupted run did before this one resumed (for the time left)."""

        def build(self) -> Any:
            if self._continued_from is not None and self.on_warm_start is not None:
                self.phase = "saving the warm start"
                self.on_warm_start(self._continued_from)
            return super().build()

        def _record(self, step: int, metrics: Dict[str, Any], writer: Any) -> None:
            super()._record(step, metrics, writer)
            if self.on_record is not None:
                self.on_record(step)

        def _label(self, step: int) -> str:
            if step == 0 and getattr(self, "after_warm_start", False):
                return "validation (after the warm start)"
            return super()._label(step)

        def elapsed_s(self) -> float:
            """`--time-budget` counts the demo's training time: from its start (the warm start included),
            without the held-out evaluations."""
            return self.clock.train_s()

        async def train_step(self, train_dataset: Any, *, reuse_store: bool = False) -> Dict[str, Any]:
            cfg = self.config
            step = self.learner.global_step
            metrics = await self._tracked_step(train_dataset, reuse_store, f"step {step + 1}/{cfg.total_steps}")
            self._print(
                f"step {step + 1:>2}/{cfg.total_steps}: train reward {metrics['reward_mean']:.3f} "
                f"(+-{metrics['reward_std']:.2f}), exact {metrics['exact_rate']:.0%}, {int(metrics['transitions'])} LLM "
                f"calls in {int(metrics['rows'])} rows, {metrics['trained_tokens_per_rollout']:.0f} trained tokens/rollout, "
                f"rollouts {metrics['rollouts'] - metrics['rollouts_failed']:.0f}/{metrics['rollouts']:.0f}, "
                f"{metrics['step_time_s']:.0f} s "
                + (
                    "(no reward differences: update skipped)"
                    if metrics.get("update_skipped")
                    else f"(train {metrics['train_time_s']:.0f} s)"
                )
                + f", RSS {metrics['rss_gb']:.1f} GB"
            )
            assert self.train_started is not None
            per_step = (time.perf_counter() - self.train_started) / max(1, step + 1 - self.steps_before)
            left_s = per_step * (cfg.total_steps - step - 1)
            if cfg.time_budget_s is not None:
                left_s = min(left_s, max(0.0, cfg.time_budget_s - self.elapsed_s()))
            eta = f"~{left_s / 60:.1f} min + validation"
            self._advance(f"trained {step + 1} steps", eta=eta)
            return metrics

    class DemoRFT(DemoProgress, RFT):
        """The warm start: RFT rounds before GRPO; its evaluation after the last round is GRPO's first one."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._init_progress()

        async def evaluate(self, val_dataset: Any) -> Dict[str, float]:
            if self.last_step:
                return {}  # GRPO evaluates these weights first thing
            return await super().evaluate(val_dataset)

        async def train_step(self, train_dataset: Any, *, reuse_store: bool = False) -> Dict[str, Any]:
            step = self.learner.global_step
            label = f"warm start (RFT) round {step + 1}"
            metrics = await self._tracked_step(train_dataset, reuse_store, label)
            empty = " (none kept: no update" + ("" if self.last_step else "; sampling again") + ")"
            self._print(
                f"{label}: train reward {metrics['reward_mean']:.3f}, exact {metrics['exact_rate']:.0%}, kept "
                f"{metrics['selected_rollouts']:.0f} of {metrics['rollouts']:.0f} rollouts "
                f"({metrics['rows_trained']:.0f} rows), {metrics['step_time_s']:.0f} s"
                + (empty if metrics.get("update_skipped") else "")
            )
            self._advance(f"warm start: {step + 1} rounds")
            return metrics

    return DemoGRPO, DemoRFT
