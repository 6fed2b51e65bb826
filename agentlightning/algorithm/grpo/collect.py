"""How a GRPO step gets its rollouts: the store side of the loop, a base of `GRPO` (and so of `RFT`).

Sync (`_collect_step`): enqueue `group_size` rollouts per task of the step's batch (reusing those an
interrupted run left in the store), wait for all of them, and turn their spans into triplets and rows.

Async (`_collect_complete_groups`, `GRPOConfig.async_rollouts`): groups stay pending across steps (see
`groups.py`); a step waits until `min_complete_groups` of them are complete, trains on those and leaves the
rest running, and `_prefetch` enqueues the next step's groups before the update.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ...emitter import find_final_reward
from ...types import Dataset, EnqueueRolloutRequest, Rollout, RolloutConfig, RolloutMode, Span
from ..base import Algorithm
from .batch import RolloutTriplets, Sample, samples_from_rollouts
from .config import GRPOConfig
from .determinism import canonical_order
from .groups import GroupKey, GroupTally, PendingGroup, drop_stale_groups
from .outcomes import RolloutOutcome, rollout_outcome, rollout_tokens
from .roles import role_of_triplet
from .tokens import TokenLedger

if TYPE_CHECKING:
    from ...serving.server import PolicyServer
    from .learner import GRPOLearner

__all__ = ["CollectedRollouts", "RolloutCollection"]

logger = logging.getLogger(__name__)


@dataclass
class CollectedRollouts:
    """A step's finished rollouts and their training rows."""

    groups: List[RolloutTriplets]
    """The succeeded rollouts trained on."""
    samples: List[Sample]
    counters: Dict[str, int]
    rollouts: int
    """Rollouts the step used up: trained on, or dropped (failed, stale)."""
    failed: int
    """Of `rollouts`: not succeeded, or timed out (see `timed_out`)."""
    generation_s: float
    """From their (earliest) enqueue to the end of the collection."""
    wait_s: float
    """From the start of the step."""
    metrics: Dict[str, float] = field(default_factory=lambda: {})
    """Metrics of the mode (async: staleness and groups)."""
    timed_out: int = 0
    """Of `failed`: rollouts that timed out (the rollout, an LLM call or the reward), never trained on."""


class RolloutCollection(Algorithm):
    """Enqueues a step's rollouts into the store, waits for them and builds the training rows.

    `GRPO` sets the attributes below; the rollout metadata keys and resource ids are its class attributes.
    """

    NAME: str
    META_CHECKPOINT: str
    META_STEP: str
    META_GROUP: str
    META_SAMPLE: str
    TRAIN_RESOURCES_ID: str
    config: GRPOConfig
    learner: Optional[GRPOLearner]
    server: Optional[PolicyServer]
    poll_interval: float
    tokens: TokenLedger
    """Where the generated tokens went (`tokens.py`): settled here as rollouts are taken or given up on."""
    _pending: Dict[GroupKey, PendingGroup]
    """Async: groups enqueued and not yet trained on or dropped, oldest first (see `groups.py`)."""

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

    async def _collect_step(
        self, train_dataset: Dataset[Any], step: int, reuse_store: bool, started: float
    ) -> CollectedRollouts:
        """Sync: enqueue the step's rollouts (reusing those of an interrupted run) and wait for all of them."""
        wanted = self._step_requests(train_dataset, step)
        existing = await self._existing_rollouts(step) if reuse_store else {}
        requests = {key: task for key, task in wanted.items() if key not in existing}
        enqueued = await self._enqueue(requests, step, mode="train", resources_id=self.TRAIN_RESOURCES_ID)
        rollout_keys = {**existing, **enqueued}
        finished = await self._wait(list(rollout_keys.values()))
        # Reused rollouts may have failed against the previous run's server: replace those once.
        failed_reused = {key: wanted[key] for key, rid in existing.items() if _failed(finished.get(rid))}
        for key in failed_reused:
            await self._settle_failed(rollout_keys[key])
        if failed_reused:
            replacements = await self._enqueue(failed_reused, step, mode="train", resources_id=self.TRAIN_RESOURCES_ID)
            rollout_keys.update(replacements)
            finished.update(await self._wait(list(replacements.values())))
        wait_s = time.perf_counter() - started

        groups: List[RolloutTriplets] = []
        failed = timed_out = 0
        for (group, _k), rollout_id in rollout_keys.items():
            usable, reason = await self._take(rollout_id, finished.get(rollout_id))
            if usable is None:
                failed, timed_out = failed + 1, timed_out + (reason == "timeout")
                continue
            groups.append(RolloutTriplets(rollout_id, group, usable.triplets, usable.final_reward))
        if self.config.deterministic:  # runners finish in any order; train in one that does not depend on it
            groups = canonical_order(groups)
        counters: Dict[str, int] = {}
        samples = self._samples(groups, counters)
        self._discard_row_losses(counters)
        if not samples:
            raise RuntimeError(
                f"{self.NAME} step {step + 1}: none of {len(rollout_keys)} rollouts ({failed} failed) produced triplets with "
                "token ids; check that the agent calls the published LLM resource and the tracer records token ids"
            )
        return CollectedRollouts(
            groups, samples, counters, len(rollout_keys), failed, wait_s, wait_s, timed_out=timed_out
        )

    async def _collect_complete_groups(
        self, train_dataset: Dataset[Any], step: int, reuse_store: bool, started: float
    ) -> CollectedRollouts:
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
        failed = timed_out = 0
        while True:
            running = [r for g in self._pending.values() for r in g.rollout_ids.values() if r not in terminal]
            terminal.update({r.rollout_id: r for r in await self._finished_within(running, deadline)})
            for group in [g for g in self._pending.values() if all(r in terminal for r in g.rollout_ids.values())]:
                if await self._replace_failed_reused(group, terminal):
                    continue
                del self._pending[group.key]
                consumed.append(group)
                members, lost, lost_to_timeouts = await self._take_group(group, terminal)
                failed, timed_out = failed + lost, timed_out + lost_to_timeouts
                if not members:
                    tally.failed += 1
                    continue
                built = self._samples(members, counters)
                samples, stats = drop_stale_groups(built, version, cfg.max_staleness)
                dropped = stats.pop("groups_dropped_stale")
                for key, value in stats.items():
                    staleness[key] = staleness.get(key, 0.0) + value
                if dropped:
                    tally.dropped_stale += 1
                    self.tokens.discard("stale", sum(s.trained_tokens for s in built))
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
        self._discard_row_losses(counters)
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
        return CollectedRollouts(
            groups=[member for _key, members, _samples in taken for member in members],
            samples=samples,
            counters=counters,
            rollouts=sum(len(group.rollout_ids) for group in consumed),
            failed=failed,
            generation_s=now - min((group.enqueued_at for group in consumed), default=started),
            wait_s=now - started,
            metrics={**staleness, **tally.as_metrics(), "rollouts_ready_at_step_start": float(ready)},
            timed_out=timed_out,
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
        for k in failed:
            await self._settle_failed(group.rollout_ids[k])
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

    def _role_of(self, triplet: Any) -> Optional[str]:
        return role_of_triplet(triplet, self.config.role_patterns)

    def _decode(self, ids: List[int]) -> str:
        assert self.learner is not None
        return str(self.learner.tokenizer.decode(ids))

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
                    metadata={
                        self.META_STEP: step,
                        self.META_GROUP: key[0],
                        self.META_SAMPLE: key[1],
                        **self._checkpoint_tag(),
                    },
                )
                for key in keys
            ]
        )
        for rollout in rollouts:
            self.tokens.track(rollout.rollout_id)
        return {key: rollout.rollout_id for key, rollout in zip(keys, rollouts, strict=False)}

    def _checkpoint_tag(self) -> Dict[str, str]:
        directory = self.config.checkpoint_dir
        return {self.META_CHECKPOINT: str(Path(directory).resolve())} if directory else {}

    def _from_this_checkpoint(self, rollout: Rollout) -> bool:
        """Whether an earlier run with this `checkpoint_dir` enqueued the rollout (untagged ones: older runs)."""
        tag = (rollout.metadata or {}).get(self.META_CHECKPOINT)
        return tag is None or self._checkpoint_tag().get(self.META_CHECKPOINT) == tag

    async def _cancel_leftovers(self) -> None:
        """Cancel the rollouts the interrupted run left queued or running: its runners are gone, and this
        run's runners take this run's rollouts only (the step's finished ones are reused, the rest enqueued)."""
        store = self.get_store()
        live = await store.query_rollouts(status_in=["queuing", "requeuing", "preparing", "running"])
        own = self._checkpoint_tag().get(self.META_CHECKPOINT)
        leftovers = [r for r in live if own is not None and (r.metadata or {}).get(self.META_CHECKPOINT) == own]
        for rollout in leftovers:
            await store.update_rollout(rollout.rollout_id, status="cancelled")
        if leftovers:
            logger.warning(
                "%s: cancelled %d rollouts the interrupted run left queued or running", self.NAME, len(leftovers)
            )

    async def _existing_rollouts(self, step: int) -> Dict[Tuple[int, int], str]:
        """Train rollouts of `step` already in the store (enqueued before a crash), by (group, sample)."""
        found: Dict[Tuple[int, int], str] = {}
        for rollout in await self.get_store().query_rollouts():
            meta = rollout.metadata or {}
            if (
                rollout.mode == "train"
                and meta.get(self.META_STEP) == step
                and rollout.status not in ("failed", "cancelled")
                and self._from_this_checkpoint(rollout)
            ):
                found.setdefault((int(meta[self.META_GROUP]), int(meta[self.META_SAMPLE])), rollout.rollout_id)
        for rollout_id in found.values():
            self.tokens.track(rollout_id)
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

    async def _outcome(self, rollout_id: str) -> RolloutOutcome:
        return await rollout_outcome(self.get_store(), rollout_id, self._adapt)

    async def _take(self, rollout_id: str, rollout: Optional[Rollout]) -> Tuple[Optional[RolloutOutcome], str]:
        """Settle a rollout the step is done waiting for: its outcome when it can be trained on (its latest
        attempt's tokens then go to rows), else None and the reason its tokens were discarded."""
        outcome = await self._outcome(rollout_id)
        self.tokens.settle(rollout_id, outcome.total_tokens)
        self.tokens.discard_counts(outcome.earlier)
        if rollout is None:  # still running after rollout_timeout_s: its later tokens are discarded too
            self.tokens.watch(rollout_id, outcome.total_tokens, "timeout")
            self.tokens.discard("timeout", outcome.tokens)
            return None, "timeout"
        if outcome.attempt_gave_up:  # a runner the store gave up on may still record (late) tokens
            late = "timeout" if outcome.timeout_location or outcome.earlier.get("timeout") else "failed"
            self.tokens.watch(rollout_id, outcome.total_tokens, late)
        if rollout.status == "succeeded" and outcome.timeout_location is None:
            return outcome, ""
        reason = "timeout" if outcome.timeout_location is not None else "failed"
        self.tokens.discard(reason, outcome.tokens)
        return None, reason

    async def _take_group(
        self, group: PendingGroup, terminal: Dict[str, Rollout]
    ) -> Tuple[List[RolloutTriplets], int, int]:
        """Async: settle a complete group's rollouts; returns the usable ones, and how many were not (of
        those, how many timed out)."""
        members: List[RolloutTriplets] = []
        failed = timed_out = 0
        for rollout_id in group.rollout_ids.values():
            usable, reason = await self._take(rollout_id, terminal[rollout_id])
            if usable is None:
                failed, timed_out = failed + 1, timed_out + (reason == "timeout")
            else:
                members.append(RolloutTriplets(rollout_id, group.key, usable.triplets, usable.final_reward))
        return members, failed, timed_out

    async def _settle_failed(self, rollout_id: str) -> None:
        """A reused rollout that failed and is replaced: its tokens are discarded."""
        outcome = await self._outcome(rollout_id)
        self.tokens.settle(rollout_id, outcome.total_tokens)
        self.tokens.discard_counts(outcome.earlier)
        self.tokens.discard("timeout" if outcome.timeout_location else "failed", outcome.tokens)

    def _discard_row_losses(self, counters: Dict[str, int]) -> None:
        """Tokens of the taken rollouts that no row trains (cut, prompt too long, no role)."""
        self.tokens.discard("truncated", counters.get("tokens_truncated", 0))
        self.tokens.discard("prompt_too_long", counters.get("tokens_prompt_too_long", 0))
        self.tokens.discard("no_role", counters.get("tokens_without_role", 0))

    async def observe_tokens_in_flight(self) -> None:
        """Read the tokens recorded so far by the rollouts in flight and by those given up on."""
        store = self.get_store()
        for rollout_id in [*self.tokens.in_flight, *self.tokens.abandoned]:
            self.tokens.observe(rollout_id, await rollout_tokens(store, rollout_id, self._adapt))
            if rollout_id in self.tokens.abandoned:
                rollout = await store.get_rollout_by_id(rollout_id)
                if rollout is None or rollout.status in ("succeeded", "failed", "cancelled"):
                    self.tokens.forget(rollout_id)

    def _adapt(self, spans: Sequence[Span]) -> Tuple[List[Any], Optional[float]]:
        """One attempt's spans as triplets (the trainer's adapter), and the final reward when no triplet has one."""
        from ...adapter import TracerTraceToTriplet
        from ...adapter.retokenize import retokenize_triplets

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
