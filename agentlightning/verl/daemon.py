"""AgentModeDaemon: the bridge between verl's training loop and our store, runners and LLM proxy.

Per batch verl hands the daemon its samples and the addresses of its vLLM servers; the daemon points the
LLM proxy at those servers, publishes the proxy as the `main_llm` resource, enqueues `rollout.n` rollouts
per sample, waits until every one is terminal, adapts their spans to triplets and pads them into the
token-level batch verl trains on. Failed, cancelled, timed-out and late rollouts never crash it and are
never counted twice: each rollout id is accounted once, when the store reports it terminal, and the
counts go into the metrics. Its methods are synchronous (verl calls them from its driver); the store
calls run on a private event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Literal, Optional, TypeVar

from agentlightning.adapter.base import TraceAdapter
from agentlightning.store.base import LightningStore
from agentlightning.types import EnqueueRolloutRequest, NamedResources, RolloutConfig, Triplet

from .batch import FinishedRollout, SampleBuilder, build_batch, make_sample_builder
from .objectives import select_async_groups

__all__ = ["AgentModeDaemon"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SET_UP_TIMEOUT_SECONDS = 60.0
_MAX_CONSECUTIVE_STORE_ERRORS = 30


class AgentModeDaemon:
    """Drive one batch of rollouts at a time through the store and turn them into verl batches.

    Args:
        port: port of the LLM proxy the daemon creates when `llm_proxy` is None (default: a free one).
        train_rollout_n: rollouts per training sample (`actor_rollout_ref.rollout.n`); validation uses 1.
        train_information: `model` (name the vLLM servers serve, required) and optional `temperature`.
        tokenizer: kept for callers that decode samples; the daemon itself works on token ids.
        mini_batch_size: verl's `ppo_mini_batch_size` (reported in metrics).
        pad_token_id: id used to pad prompts and responses.
        reward_fillna_value: reward of a finished rollout that reported none; None raises ValueError instead.
        llm_timeout_seconds: per-attempt `timeout_seconds` and `unresponsive_seconds` of every rollout.
        mode: only "v1" (store + LLM proxy); the v0 server mode is gone.
        llm_proxy, store, adapter: the trainer's components (`store` is required; the adapter defaults to
            `TracerTraceToTriplet`, the proxy to a new `LLMProxy` writing to `store`).
        sample_builder: how a rollout becomes samples; default from `trace_aggregation`.
        trace_aggregation: "transition" (one sample per LLM call) or "trajectory" (one per rollout).
        mismatch_log_dir: trajectory mode: write calls that do not continue the previous one here (JSON).
        max_attempts: attempts per rollout; failures in `retry_condition` are retried up to this many.
        retry_condition: attempt statuses that requeue a rollout (default timeout and unresponsive).
        batch_timeout_seconds: give up on rollouts still unfinished this long after a batch was enqueued
            (they are cancelled and reported); None waits for the store's per-attempt timeouts.
        poll_interval: seconds between checks of the store while waiting.
        async_rollout: bounded-staleness async training: a training step waits only for as many complete
            task groups as it enqueued (oldest first), and the others keep running into the next step.
        max_staleness: async: a group enqueued more than this many weight updates ago is dropped.
        max_in_flight: async: most tasks in flight (`async_train_batch_size`); a step also waits until the
            groups it leaves running fit in, with room for the next batch. None: no limit.
        train_groups: async: task groups a training step takes (`data.train_batch_size`); None: as many as
            the last set-up enqueued.
    """

    def __init__(
        self,
        port: Optional[int] = None,
        train_rollout_n: int = 1,
        train_information: Optional[Mapping[str, Any]] = None,
        tokenizer: Any = None,
        mini_batch_size: int = 1,
        pad_token_id: int = 0,
        reward_fillna_value: Optional[float] = 0.0,
        llm_timeout_seconds: float = 1200.0,
        mode: Literal["v1"] = "v1",
        llm_proxy: Any = None,
        store: Optional[LightningStore] = None,
        adapter: Optional[TraceAdapter[Any]] = None,
        *,
        sample_builder: Optional[SampleBuilder] = None,
        trace_aggregation: str = "trajectory",
        mismatch_log_dir: Optional[str] = None,
        max_attempts: int = 1,
        retry_condition: Sequence[str] = ("timeout", "unresponsive"),
        batch_timeout_seconds: Optional[float] = None,
        poll_interval: float = 1.0,
        async_rollout: bool = False,
        max_staleness: int = 1,
        max_in_flight: Optional[int] = None,
        train_groups: Optional[int] = None,
    ) -> None:
        if mode != "v1":
            raise ValueError(
                f"AgentModeDaemon mode {mode!r} is not supported; only 'v1' (a LightningStore and an LLM proxy) is"
            )
        if store is None:
            raise ValueError("AgentModeDaemon needs the trainer's store (store=...); runners take rollouts from it")
        if train_rollout_n < 1:
            raise ValueError(f"train_rollout_n (actor_rollout_ref.rollout.n) must be >= 1, got {train_rollout_n}")
        if llm_timeout_seconds <= 0:
            raise ValueError(f"llm_timeout_seconds must be > 0, got {llm_timeout_seconds}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if batch_timeout_seconds is not None and batch_timeout_seconds <= 0:
            raise ValueError(f"batch_timeout_seconds must be > 0 or None, got {batch_timeout_seconds}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval}")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.mode = mode
        self.store = store
        self.port = port
        self.train_rollout_n = train_rollout_n
        self.train_information: dict[str, Any] = dict(train_information or {})
        self.tokenizer = tokenizer
        self.mini_batch_size = mini_batch_size
        self.pad_token_id = pad_token_id
        self.reward_fillna_value = reward_fillna_value
        self.llm_timeout_seconds = llm_timeout_seconds
        self.rollout_config = RolloutConfig(
            timeout_seconds=llm_timeout_seconds,
            unresponsive_seconds=llm_timeout_seconds,
            max_attempts=max_attempts,
            retry_condition=list(retry_condition),  # type: ignore[arg-type]
        )
        self.batch_timeout_seconds = batch_timeout_seconds
        self.poll_interval = poll_interval
        self.sample_builder: SampleBuilder = sample_builder or make_sample_builder(trace_aggregation, mismatch_log_dir)
        if adapter is None:
            from agentlightning.adapter import TracerTraceToTriplet

            adapter = TracerTraceToTriplet()
        self.adapter: TraceAdapter[Any] = adapter
        self.llm_proxy = llm_proxy
        self._owns_proxy = llm_proxy is None

        self.async_rollout = async_rollout
        self.max_staleness = max_staleness
        self.max_in_flight = max_in_flight
        self.train_groups = train_groups
        self.weights_version = 0
        """Weight updates so far (`on_weights_updated`): the age of an async group is counted in them."""
        self._enqueued_version: dict[str, int] = {}
        self._wanted_groups = 0
        self._async_metrics: dict[str, Any] = {}

        self.backend_llm_server_addresses: list[str] = []
        self.is_train = True
        self._data_id_of: dict[str, str] = {}
        self._finished: dict[str, FinishedRollout] = {}
        self._enqueued_at: Optional[float] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None

    # ---- lifecycle ----

    def start(self) -> None:
        """Start the private event loop the store calls run on (idempotent)."""
        if self._loop is not None:
            return
        ready = threading.Event()

        def run_loop() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            ready.set()
            loop.run_forever()
            loop.close()

        self._loop_thread = threading.Thread(target=run_loop, name="AgentModeDaemon-loop", daemon=True)
        self._loop_thread.start()
        ready.wait()

    def stop(self) -> None:
        """Cancel unfinished rollouts (carried-over ones too), stop a proxy the daemon created, stop the loop."""
        if self._loop is None:
            return
        try:
            self._forget(cancel=True)
            if self._owns_proxy and self.llm_proxy is not None and self.llm_proxy.is_running():
                self._run(self.llm_proxy.stop(), timeout=_SET_UP_TIMEOUT_SECONDS)
        finally:
            loop, self._loop = self._loop, None
            loop.call_soon_threadsafe(loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=10)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: Optional[float] = None) -> T:
        if self._loop is None:
            self.start()
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=timeout)

    # ---- one batch ----

    def set_up_data_and_server(
        self, data: Mapping[str, Sequence[Any]], server_addresses: Sequence[str], is_train: bool = True
    ) -> None:
        """Point the proxy at `server_addresses`, publish it, and enqueue the rollouts for `data`.

        `data` is column-oriented (verl's `non_tensor_batch`): every column has one entry per sample.
        """
        self._run(self._set_up(data, list(server_addresses), is_train), timeout=_SET_UP_TIMEOUT_SECONDS)

    async def _set_up(self, data: Mapping[str, Sequence[Any]], server_addresses: list[str], is_train: bool) -> None:
        if not (self._carries_over() and is_train):
            await self._cancel_unfinished()  # async validation drops the rollouts carried over, too
            self._reset()
        columns = list(data.keys())
        if not columns:
            raise ValueError("data has no columns; pass verl's non_tensor_batch (one entry per sample per column)")
        lengths = {key: len(data[key]) for key in columns}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"data columns have different lengths: {lengths}")
        await self._update_proxy(server_addresses)
        self.is_train = is_train
        temperature = self.train_information.get("temperature", 0.7 if is_train else 0.0)
        resource = self.llm_proxy.as_resource(
            model=self.train_information.get("model"), sampling_parameters={"temperature": temperature}
        )
        resources: NamedResources = {"main_llm": resource}
        update = await self.store.add_resources(resources)

        n_samples = lengths[columns[0]]
        per_sample = self.train_rollout_n if is_train else 1
        requests: list[EnqueueRolloutRequest] = []
        data_ids: list[str] = []
        for index in range(n_samples):
            data_id = str(uuid.uuid4())
            sample = {key: _to_native(data[key][index]) for key in columns}
            sample["data_id"] = data_id
            for _ in range(per_sample):
                requests.append(
                    EnqueueRolloutRequest(
                        input=sample,
                        mode="train" if is_train else "val",
                        resources_id=update.resources_id,
                        config=self.rollout_config,
                        metadata={"data_id": data_id, "is_train": is_train},
                    )
                )
                data_ids.append(data_id)
        rollouts = await self.store.enqueue_many_rollouts(requests)
        self._data_id_of.update({r.rollout_id: data_id for r, data_id in zip(rollouts, data_ids, strict=True)})
        self._enqueued_version.update({data_id: self.weights_version for data_id in data_ids})
        self._wanted_groups = self.train_groups or n_samples
        self._enqueued_at = time.monotonic()
        logger.info("Enqueued %d rollouts for %d samples (is_train=%s)", len(rollouts), n_samples, is_train)

    async def _update_proxy(self, server_addresses: list[str]) -> None:
        if self.llm_proxy is None:
            from agentlightning.llm_proxy import LLMProxy

            self.llm_proxy = LLMProxy(port=self.port, store=self.store, launch_mode="thread")
        if server_addresses and server_addresses != self.backend_llm_server_addresses:
            model = self.train_information.get("model")
            if not model:
                raise ValueError("train_information['model'] is not set: the name the vLLM servers serve is needed")
            self.llm_proxy.update_model_list(
                [
                    {
                        "model_name": model,
                        "litellm_params": {"model": f"hosted_vllm/{model}", "api_base": f"http://{address}/v1"},
                    }
                    for address in server_addresses
                ]
            )
            self.backend_llm_server_addresses = list(server_addresses)
        if not self.llm_proxy.is_running():
            await self.llm_proxy.start()

    def run_until_all_finished(self, verbose: bool = True) -> None:
        """Block until every rollout of the batch is terminal (or `batch_timeout_seconds` passes)."""
        if not self._data_id_of:
            logger.warning("run_until_all_finished: no rollouts were enqueued")
            return
        self._run(self._wait(verbose))

    def _carries_over(self) -> bool:
        return self.async_rollout and self.is_train

    def _groups(self) -> dict[str, list[str]]:
        """Rollout ids per data id, in enqueue order."""
        groups: dict[str, list[str]] = {}
        for rid, data_id in self._data_id_of.items():
            groups.setdefault(data_id, []).append(rid)
        return groups

    def _enough_finished(self) -> bool:
        if len(self._finished) == len(self._data_id_of):
            return True
        if not self._carries_over():
            return False
        selection = select_async_groups(
            self._groups(), self._finished, self._enqueued_version, self.weights_version, self.max_staleness,
            self._wanted_groups,
        )  # fmt: skip
        if len(selection.train) < self._wanted_groups:
            return False
        room = None if self.max_in_flight is None else self.max_in_flight - self._wanted_groups
        return room is None or len(selection.carried) <= room

    def in_flight_groups(self) -> int:
        """Task groups enqueued and not trained or dropped yet (async: carried over ones included)."""
        return len(set(self._data_id_of.values()))

    def on_weights_updated(self) -> None:
        """The policy changed: rollouts carried over from now on are one update older."""
        self.weights_version += 1

    async def _wait(self, verbose: bool) -> None:
        last_report = 0.0
        store_errors = 0
        while not self._enough_finished():
            pending = [rid for rid in self._data_id_of if rid not in self._finished]
            try:
                terminal = await self.store.wait_for_rollouts(rollout_ids=pending, timeout=0)
                store_errors = 0
            except Exception:
                # A store behind HTTP can blip (restart, network); keep waiting, but not forever.
                store_errors += 1
                if store_errors > _MAX_CONSECUTIVE_STORE_ERRORS:
                    raise
                logger.warning("Polling the store failed (%d in a row); retrying", store_errors, exc_info=True)
                await asyncio.sleep(self.poll_interval)
                continue
            for rollout in terminal:
                if rollout.rollout_id in self._finished or rollout.rollout_id not in self._data_id_of:
                    continue
                self._finished[rollout.rollout_id] = await self._finish(rollout.rollout_id, rollout.status)
            if self._enough_finished():
                break
            elapsed = time.monotonic() - (self._enqueued_at or time.monotonic())
            if self.batch_timeout_seconds is not None and elapsed > self.batch_timeout_seconds:
                cancelled = await self._cancel_unfinished()
                logger.warning(
                    "%d rollouts were still unfinished %.0f s after enqueueing; cancelled them", cancelled, elapsed
                )
                continue
            if verbose and time.monotonic() - last_report > 30:
                logger.info("Finished %d/%d rollouts", len(self._finished), len(self._data_id_of))
                last_report = time.monotonic()
            await asyncio.sleep(self.poll_interval)
        counts = self.status_counts()
        logger.info("All %d rollouts finished: %s", len(self._finished), counts)

    async def _cancel_unfinished(self) -> int:
        """Cancel this batch's rollouts that are not terminal yet and account them as cancelled."""
        return await self._cancel([rid for rid in self._data_id_of if rid not in self._finished])

    async def _cancel(self, rollout_ids: list[str]) -> int:
        cancelled = 0
        for rid in rollout_ids:
            try:
                rollout = await self.store.update_rollout(rollout_id=rid, status="cancelled")
                status = rollout.status
            except Exception:
                logger.exception("Could not cancel rollout %s; accounting it as cancelled", rid)
                status = "cancelled"
            self._finished[rid] = await self._finish(rid, status)
            cancelled += 1
        return cancelled

    async def _finish(self, rollout_id: str, status: str) -> FinishedRollout:
        """Adapt a terminal rollout's latest attempt to triplets and fix its reward (once per rollout)."""
        data_id = self._data_id_of[rollout_id]
        triplets: list[Triplet] = []
        if status == "succeeded":
            try:
                spans = await self.store.query_spans(rollout_id, "latest")
                triplets = list(self.adapter.adapt(list(spans))) if spans else []
            except Exception:
                logger.exception("Adapting the spans of rollout %s failed; it gets no triplets", rollout_id)
        reward = next((t.reward for t in reversed(triplets) if t.reward is not None), None)
        missing = reward is None
        if missing:
            if self.reward_fillna_value is None and status == "succeeded":
                raise ValueError(
                    f"rollout {rollout_id!r} reported no reward and reward_fillna_value is None; "
                    "emit a reward from the agent or set a fill value"
                )
            reward = self.reward_fillna_value if self.reward_fillna_value is not None else 0.0
        assert reward is not None
        return FinishedRollout(
            rollout_id=rollout_id,
            data_id=data_id,
            status=status,
            reward=float(reward),
            triplets=triplets,
            reward_was_missing=missing,
        )

    def status_counts(self) -> dict[str, int]:
        """How many rollouts of the batch ended in each terminal status."""
        counts: dict[str, int] = {}
        for rollout in self._finished.values():
            counts[rollout.status] = counts.get(rollout.status, 0) + 1
        return counts

    @property
    def finished_rollouts(self) -> list[FinishedRollout]:
        """The batch's terminal rollouts, in enqueue order."""
        return [self._finished[rid] for rid in self._data_id_of if rid in self._finished]

    # ---- results ----

    def get_train_data_batch(
        self, max_prompt_length: int, max_response_length: int, device: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        """The training batch (a verl `DataProto`) and metrics; only succeeded rollouts become samples."""
        batch, metrics = self.get_train_token_batch(max_prompt_length, max_response_length, device)
        return batch.to_data_proto(), metrics

    def get_train_token_batch(
        self, max_prompt_length: int, max_response_length: int, device: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        """Like `get_train_data_batch`, but the padded tensors before wrapping (no verl import needed)."""
        if not self.is_train:
            raise RuntimeError("get_train_data_batch() after a validation set-up; call set_up(..., is_train=True)")
        rollouts = self._take_async_groups() if self.async_rollout else self.finished_rollouts
        if not self.async_rollout:
            self._check_all_finished()
        succeeded = [r for r in rollouts if r.status == "succeeded"]
        samples = [sample for rollout in succeeded for sample in self.sample_builder.build(rollout)]
        batch = build_batch(
            samples,
            max_prompt_length=max_prompt_length,
            max_response_length=max_response_length,
            pad_token_id=self.pad_token_id,
            device=device,
        )
        counts: dict[str, int] = {}
        for rollout in rollouts:
            counts[rollout.status] = counts.get(rollout.status, 0) + 1
        metrics: dict[str, Any] = {
            **self._async_metrics,
            "training/reward": _mean([r.reward for r in succeeded]),
            "training/n_rollouts": len(succeeded),
            "training/n_rollouts_w_trace": sum(1 for r in succeeded if r.triplets),
            "training/n_rollouts_failed": counts.get("failed", 0),
            "training/n_rollouts_cancelled": counts.get("cancelled", 0),
            "training/n_rollouts_reward_filled": sum(1 for r in succeeded if r.reward_was_missing),
            "training/n_triplets": sum(len(r.triplets) for r in succeeded),
            "training/n_samples": len(batch),
            "training/n_truncated_triplets": batch.n_truncated_responses,
            "training/n_prompts_too_long": batch.n_prompts_too_long,
        }
        mismatches = getattr(self.sample_builder, "mismatches", None)
        if isinstance(mismatches, int):
            metrics["training/n_trajectory_mismatches_total"] = mismatches
        return batch, metrics

    def get_test_metrics(self) -> dict[str, Any]:
        """Validation metrics: mean reward over finished rollouts, response lengths and turns where traced."""
        if self.is_train:
            raise RuntimeError("get_test_metrics() after a training set-up; call set_up(..., is_train=False)")
        self._check_all_finished()
        rollouts = self.finished_rollouts
        succeeded = [r for r in rollouts if r.status == "succeeded"]
        traced = [r for r in succeeded if r.triplets]
        lengths = [[len(_response_ids(t)) for t in r.triplets] for r in traced]
        counts = self.status_counts()
        return {
            "val/reward": _mean([r.reward for r in succeeded]),
            "val/n_rollouts": len(succeeded),
            "val/n_rollouts_w_trace": len(traced),
            "val/n_rollouts_failed": counts.get("failed", 0),
            "val/n_rollouts_cancelled": counts.get("cancelled", 0),
            "val/mean_response_length": _mean([sum(ls) / len(ls) for ls in lengths]),
            "val/sum_response_length": _mean([float(sum(ls)) for ls in lengths]),
            "val/turn_count": _mean([float(len(ls)) for ls in lengths]),
        }

    def _take_async_groups(self) -> list[FinishedRollout]:
        """The groups this async step trains on; stale groups are dropped (unfinished rollouts cancelled)."""
        groups = self._groups()
        selection = select_async_groups(
            groups, self._finished, self._enqueued_version, self.weights_version, self.max_staleness,
            self._wanted_groups,
        )  # fmt: skip
        taken = [self._finished[rid] for data_id in selection.train for rid in groups[data_id]]
        ages = [self.weights_version - self._enqueued_version[data_id] for data_id in selection.train]
        stale_unfinished = [rid for d in selection.stale for rid in groups[d] if rid not in self._finished]
        if stale_unfinished:
            self._run(self._cancel(stale_unfinished), timeout=_SET_UP_TIMEOUT_SECONDS)
        for data_id in selection.train + selection.stale:
            for rid in groups[data_id]:
                self._data_id_of.pop(rid, None)
                self._finished.pop(rid, None)
            self._enqueued_version.pop(data_id, None)
        self._async_metrics = {
            "training/async_groups_trained": len(selection.train),
            "training/async_groups_carried_over": len(selection.carried),
            "training/async_groups_dropped_stale": len(selection.stale),
            "training/async_max_staleness": max(ages, default=0),
        }
        return taken

    def clear_data_and_server(self) -> None:
        """Forget the batch; its rollouts still unfinished are cancelled so they do not leak into the next
        (in async training they are carried over instead)."""
        self._forget(cancel=not self._carries_over())

    def _forget(self, cancel: bool) -> None:
        if not cancel:
            return
        if self._loop is not None and any(rid not in self._finished for rid in self._data_id_of):
            self._run(self._cancel_unfinished(), timeout=_SET_UP_TIMEOUT_SECONDS)
        self._reset()

    def _reset(self) -> None:
        self._data_id_of = {}
        self._finished = {}
        self._enqueued_version = {}
        self._enqueued_at = None

    def _check_all_finished(self) -> None:
        if len(self._finished) < len(self._data_id_of):
            raise RuntimeError(
                f"only {len(self._finished)}/{len(self._data_id_of)} rollouts are finished; "
                "call run_until_all_finished() first"
            )


def _response_ids(triplet: Triplet) -> list[Any]:
    response = triplet.response
    ids = response.get("token_ids") if isinstance(response, dict) else None  # type: ignore[reportUnknownMemberType]
    return list(ids) if isinstance(ids, (list, tuple)) else []  # type: ignore[reportUnknownArgumentType]


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _to_native(value: Any) -> Any:
    """numpy scalars and arrays (verl's non-tensor batch) as plain Python values the store can serialize."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, Mapping):
        return {str(k): _to_native(v) for k, v in value.items()}  # type: ignore[reportUnknownVariableType]
    if isinstance(value, (list, tuple)):
        return [_to_native(v) for v in value]  # type: ignore[reportUnknownVariableType]
    return value
