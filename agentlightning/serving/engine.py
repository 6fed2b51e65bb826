"""The policy engine: continuous batching over one causal LM whose weights can change between steps.

Each choice of a request runs in a slot of a preallocated KV cache (`slots.SlotModel`). The engine thread
loops: admit waiting requests into free slots (`admission.py`: one batched prefill; a prompt prefix stored
in the `PrefixCache`, or shared by the prompts admitted together, is encoded once), then run one decode step
over the running sequences. A request that arrives while others decode joins at the next step; a
sequence that ends leaves at once and frees its slot. On CUDA the decode step replays a CUDA graph.

Every step runs under the weights lock, so `update_weights` (or `exclusive()`) waits for the step in
flight and never races one. With LoRA `adapters`, each step decodes the sequences of one adapter (or of
the base), taking turns.

Deterministic mode: batch composition and prefix-cache hits depend on arrival times and change the logits
in their last bits, so the engine admits one request at a time, keeps no prefix cache, and seeds a request
without a seed from its content and the count of identical requests before it under these weights
(`sampling.content_seed`). A completion then depends only on the weights and the request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import heapq
import logging
import queue
import random
import threading
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._prefix_cache import PrefixCache
from ._rows import Launched, Row
from .adapters import copy_adapter_weights
from .admission import Admission
from .heap import release_free_memory
from .models import eos_token_ids
from .sampling import SamplingMode, SamplingParams, SlotSampling, TokenStep
from .stream import CompletionEvent, CompletionStream, Outbox, SequenceDelta, SequenceEnd
from .weights import merged_state_dict, shares_parameters

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from .fused import FusedLayers
    from .slots import SlotModel

__all__ = ["PolicyEngine", "SequenceDelta", "SequenceEnd", "CompletionStream", "CompletionEvent"]

logger = logging.getLogger(__name__)

_CLOSE = object()


class PolicyEngine(Admission):
    """Serves completions from `model` with continuous batching; see the module docstring.

    Args:
        max_batch_size: slots, i.e. sequences decoded at once (a request with `n` choices takes `n`).
        batch_window_s: when idle, how long the first request waits for others to share its prefill.
        max_context: longest sequence (prompt + completion); default the model's `max_position_embeddings`.
        seed: seeds requests that bring no seed of their own.
        prefix_cache_entries: token prefixes whose KV cache is kept for reuse (0 turns reuse off).
        adapters: LoRA adapters of a peft model that requests may select.
        cuda_graphs: replay decode steps as CUDA graphs (default: on CUDA).
        compile: True (or "regional"): `torch.compile` one fused decoder layer's two halves, reused by
            every layer (`regional.py`; compiled at `start`, the time logged); "model": the whole forward
            (the first steps compile, minutes for a 30-layer model). False: eager.
        fuse: fused projections (`fused.py`: q/k/v as one matmul, gate/up as one) for Llama/Qwen2/Qwen3
            layers (other models keep their own layers, with the reason logged); on CPU also served from
            oneDNN-prepacked copies (1.5-1.7x faster decoding at 8 rows, measured, for the weights' size in
            memory; `exclusive(weights_change=True)` drops them until `update_weights` packs again). None: on
            for CUDA, off on CPU (GRPO and RFT turn it on where they serve the learner's own weights).
        max_prefill_tokens: padded prompt tokens per prefill pass (longer admissions are split).
        deterministic: one request at a time, no prefix cache, content-derived seeds (module docstring).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_batch_size: int = 32,
        batch_window_s: float = 0.01,
        max_context: Optional[int] = None,
        seed: Optional[int] = None,
        prefix_cache_entries: int = 16,
        adapters: Sequence[str] = (),
        cuda_graphs: Optional[bool] = None,
        compile: Union[bool, str] = False,
        fuse: Optional[bool] = None,
        max_prefill_tokens: int = 8192,
        deterministic: bool = False,
    ) -> None:
        from .adapters import check_adapters

        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; pass it through serving.models.prepare_tokenizer first")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        config: Any = getattr(model, "config", None)
        self.max_context: Optional[int] = max_context or getattr(config, "max_position_embeddings", None)
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.adapters = check_adapters(model, adapters)
        """LoRA adapters selectable per request; with any, a request without one runs the adapter-free base."""
        self.cuda_graphs = cuda_graphs
        self.compile = compile
        self.fuse = fuse
        self._launched: Optional[Launched] = None
        self.max_prefill_tokens = max_prefill_tokens
        self._rng = random.Random(seed)
        self.deterministic = deterministic
        self._base_seed = seed or 0
        self._seen: Dict[bytes, int] = {}
        """Deterministic mode: requests admitted per content key under the current weights."""
        self._weights_lock = threading.RLock()
        self._weights_version = 0
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._prefix_cache_entries = 0 if deterministic else prefix_cache_entries
        self._prefix_caches: Dict[Optional[str], PrefixCache] = {}
        self._slots: Optional[SlotModel] = None
        self._sampling: Optional[SlotSampling] = None
        self._rows: Dict[int, Row] = {}
        self._free: List[int] = list(range(max_batch_size))
        self._waiting: Deque[CompletionStream] = collections.deque()
        self._admitting: List[CompletionStream] = []
        self._turn = 0
        self._active_key: Optional[tuple[int, ...]] = None
        self.batches_run = 0
        """Admission rounds: groups of requests prefilled together."""
        self.steps_run = 0
        """Decode steps."""

    # Lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the engine thread (idempotent); allocates the KV cache on first start."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._ensure_slots().warm_up()
        self._thread = threading.Thread(target=self._worker, name="agl-policy-engine", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the thread after the step in flight; running and queued requests fail with RuntimeError."""
        if self._thread is None:
            return
        self._queue.put(_CLOSE)
        thread, self._thread = self._thread, None
        thread.join(timeout)
        self._fail_all(RuntimeError("the policy engine was closed before this request finished"))
        if not thread.is_alive():  # the KV cache (0.8 GB for SmolLM2's 33 slots of 512) goes: start() makes a new one
            fused = self._fused()
            if fused is not None:
                fused.restore()  # the layers' own forwards back, the prepacked copies freed
            self._slots, self._sampling, self._active_key = None, None, None  # the new slots start inactive

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def slot_model(self) -> SlotModel:
        """The model over its KV-cache slots (created at `start`)."""
        return self._ensure_slots()

    def _ensure_slots(self) -> SlotModel:
        if self._slots is None:
            from .slots import SlotModel

            context = self.max_context or 4096
            self._slots = SlotModel(
                self.model,
                slots=self.max_batch_size,
                max_context=context,
                cuda_graphs=self.cuda_graphs,
                compile=self.compile,
                fuse=self.fuse,
            )
            self._sampling = SlotSampling(self.max_batch_size + 1, self._slots.vocab_size, self._slots.device)
        return self._slots

    def prefix_cache_for(self, adapter: Optional[str] = None) -> Optional[PrefixCache]:
        """The KV caches of prompt prefixes for `adapter` (None: the base), kept apart because an adapter
        changes the keys and values; None when `prefix_cache_entries=0`."""
        if not self._prefix_cache_entries:
            return None
        if adapter not in self._prefix_caches:
            self._prefix_caches[adapter] = PrefixCache(self._prefix_cache_entries)
        return self._prefix_caches[adapter]

    @property
    def prefix_cache(self) -> Optional[PrefixCache]:
        """`prefix_cache_for(None)`: emptied when the weights change."""
        return self.prefix_cache_for(None)

    @property
    def active_sequences(self) -> int:
        """Choices being decoded right now (slots in use)."""
        return len(self._rows)

    # Requests ----------------------------------------------------------------------------------------

    def submit(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, adapter: Optional[str] = None
    ) -> CompletionStream:
        """Queue a request from inside a running event loop; iterate the returned stream for its events.

        `adapter` picks one of `adapters` (None: the base).
        """
        if adapter is not None and adapter not in self.adapters:
            raise ValueError(f"unknown adapter {adapter!r}; this engine serves adapters {self.adapters}")
        if not 1 <= n <= self.max_batch_size:
            raise ValueError(f"n must be >= 1 and <= max_batch_size ({self.max_batch_size}), got {n}")
        if not prompt_ids:
            raise ValueError("the prompt is empty; give at least one token")
        if not self.running:
            raise RuntimeError("the policy engine is not running; call start() first")
        if self.max_context is not None:
            room = self.max_context - len(prompt_ids)
            if room < 1:
                raise ValueError(
                    f"the prompt has {len(prompt_ids)} tokens but the model's context is {self.max_context}; "
                    "shorten the conversation"
                )
            if params.max_tokens > room:
                params = dataclasses.replace(params, max_tokens=room)
        stream = CompletionStream(list(prompt_ids), params, n, asyncio.get_running_loop(), adapter)
        self._queue.put(stream)
        return stream

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, adapter: Optional[str] = None
    ) -> List[SequenceEnd]:
        """Submit and wait for all `n` choices."""
        return await self.submit(prompt_ids, params, n, adapter=adapter).collect()

    # Weights -----------------------------------------------------------------------------------------

    @property
    def weights_version(self) -> int:
        """Bumped by every `update_weights`; completions report the version they started with."""
        return self._weights_version

    @contextlib.contextmanager
    def exclusive(self, *, weights_change: bool = False) -> Iterator[None]:
        """Hold generation off (waits for the step in flight) - e.g. while a trainer updates a shared model.

        `weights_change`: the weights change inside, so the prefix caches and the prepacked copies of the
        weights (`fuse` on CPU; both stale then) are dropped first and their memory is free for the update;
        `update_weights` marks the new version afterwards and packs again."""
        with self._weights_lock:
            if weights_change:
                cached = any(len(cache) for cache in self._prefix_caches.values())
                for cache in self._prefix_caches.values():
                    cache.clear()
                fused = self._fused()
                if (fused is not None and fused.unpack()) or cached:
                    release_free_memory()  # the engine thread's blocks go back to the OS for the update's
            yield

    def packed_weights(self) -> Dict[str, Callable[[], torch.Tensor]]:
        """The weights served from prepacked copies (`fuse` on CPU), by parameter name, each read back
        dense on call; the weight fingerprint checks these in place of the parameters."""
        fused = self._fused()
        return fused.served_tensors(self.model) if fused is not None else {}

    def _fused(self) -> Optional[FusedLayers]:
        return self._slots.fused if self._slots is not None else None

    def update_weights(self, source: Union[torch.nn.Module, Mapping[str, torch.Tensor]]) -> int:
        """Serve new weights from a state dict or a module (plain or peft); returns the new version.

        A module that shares the served model's parameters (shared-model mode) needs no copy; the call
        only marks the new version. With `adapters`, a module's adapter weights are copied into the served
        peft model (the base is frozen). Waits for the step in flight.
        """
        import torch

        with self._weights_lock:
            if isinstance(source, torch.nn.Module):
                if shares_parameters(source, self.model):
                    pass
                elif self.adapters:
                    copy_adapter_weights(source, self.model, self.adapters)
                else:
                    self._load(merged_state_dict(source))
            else:
                self._load(source)
            self._weights_version += 1
            self._seen.clear()
            for cache in self._prefix_caches.values():
                cache.clear()
            if self._slots is not None:
                self._slots.weights_changed()
            return self._weights_version

    def _load(self, state: Mapping[str, torch.Tensor]) -> None:
        result = self.model.load_state_dict(dict(state), strict=False)
        # Tied weights (lm_head = embeddings) may legitimately be absent from the source.
        missing = [k for k in result.missing_keys if not k.endswith("lm_head.weight")]
        if missing or result.unexpected_keys:
            raise ValueError(
                f"weights do not match the served model: missing {missing[:5]}, unexpected "
                f"{list(result.unexpected_keys)[:5]}; pass a state dict of the same architecture"
            )

    # Engine thread -----------------------------------------------------------------------------------

    def _worker(self) -> None:
        import torch

        outbox = Outbox()
        try:
            while self._take_requests():
                with self._weights_lock, torch.inference_mode(), self._eval_mode():
                    self._drop_cancelled(outbox)
                    self._admit(outbox)
                    launched = self._launch()
                    self._land(outbox)
                    self._launched = launched
                outbox.flush()
        except Exception as exc:  # a broken model or device: fail what runs rather than hang it
            logger.exception("The policy engine stopped")
            self._fail_all(exc)
        finally:
            outbox.flush()

    def _take_requests(self) -> bool:
        """Move queued requests to the waiting line; blocks while there is nothing to do. False on close."""
        import time

        items: List[Any] = []
        if not self._rows and not self._waiting and self._launched is None:
            items.append(self._queue.get())
            deadline = time.monotonic() + self.batch_window_s
            rows = getattr(items[0], "n", 0)
            while items[-1] is not _CLOSE and rows < len(self._free):
                try:
                    items.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
                rows += getattr(items[-1], "n", 0)
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for item in items:
            if item is _CLOSE:
                return False
            self._waiting.append(item)
        return True

    @contextlib.contextmanager
    def _eval_mode(self) -> Iterator[None]:
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)

    def _fail_all(self, error: BaseException) -> None:
        with self._weights_lock:
            self._launched = None
            streams = {id(row.stream): row.stream for row in self._rows.values()}
            for row in list(self._rows.values()):
                self._release(row)
            streams.update((id(stream), stream) for stream in self._admitting)
            self._admitting.clear()
            while self._waiting:
                stream = self._waiting.popleft()
                streams[id(stream)] = stream
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, CompletionStream):
                    streams[id(item)] = item
        for stream in streams.values():
            stream.fail(error)

    def _release(self, row: Row) -> None:
        assert self._sampling is not None
        row.done = True
        del self._rows[row.slot]
        self._sampling.release(row.slot)
        heapq.heappush(self._free, row.slot)

    def _drop_cancelled(self, outbox: Outbox) -> None:
        for row in [r for r in self._rows.values() if r.stream.cancelled.is_set()]:
            self._finish(row, "abort", outbox)
        self._waiting = collections.deque(s for s in self._waiting if not s.cancelled.is_set())

    # Decoding ----------------------------------------------------------------------------------------

    def _launch(self) -> Optional[Launched]:
        """Start one decode step for the running sequences of one adapter (the adapters take turns).

        On CUDA the step runs while the host lands the previous one: a sequence that ended there may take
        part in this step too, and its extra token is dropped when this step lands.
        """
        slots, sampling = self.slot_model, self._sampling
        assert sampling is not None
        rows = [row for row in self._rows.values() if row.wants_more]
        if not rows:
            return None
        adapters = sorted({row.adapter for row in rows}, key=lambda a: (a is not None, a or ""))
        adapter = adapters[self._turn % len(adapters)]
        self._turn += 1
        rows = [row for row in rows if row.adapter == adapter]
        batch = slots.batch_bucket(max(row.slot for row in rows) + 1)
        kv_len = slots.kv_bucket(max(row.next_position + row.in_flight for row in rows) + 1)
        active = tuple(sorted(row.slot for row in rows))
        if active != self._active_key:
            slots.set_active(active)
            self._active_key = active
        mode = SamplingMode.of(sampling.params[:batch])
        with self._adapter(adapter):
            tokens = slots.decode_step(batch, kv_len, sampling, mode, key=adapter).copy_to_host()
        self.steps_run += 1
        for row in rows:
            row.in_flight += 1
        return Launched([(row, row.slot) for row in rows], tokens)

    def _land(self, outbox: Outbox) -> None:
        """Hand out the tokens of the step launched before (waits for it when it still runs)."""
        launched, self._launched = self._launched, None
        if launched is None:
            return
        sampled = launched.tokens.wait()
        for row, slot in launched.rows:
            row.in_flight -= 1
            if not row.done:
                self._emit(row, sampled.step(slot, row.stream.params.top_logprobs), outbox)

    def _emit(self, row: Row, step: TokenStep, outbox: Outbox) -> None:
        """Record a sampled token, send its delta, and end the row when it is done."""
        params = row.stream.params
        row.token_ids.append(step.token_id)
        row.logprobs.append(step.logprob)
        text, stopped = row.detokenizer.push(step.token_id)
        outbox.put(row.stream, SequenceDelta(row.index, step.token_id, step.logprob, text, step.top_logprobs))
        if stopped or (step.token_id in self.eos_token_ids and not params.ignore_eos):
            self._finish(row, "stop", outbox)
        elif row.stream.cancelled.is_set():
            self._finish(row, "abort", outbox)
        elif len(row.token_ids) >= params.max_tokens:
            self._finish(row, "length", outbox)

    def _finish(self, row: Row, reason: str, outbox: Outbox) -> None:
        cache = self.prefix_cache_for(row.adapter) if reason != "abort" else None
        fed = row.next_position  # the prompt and every token but the last went through the model
        if cache is not None and fed >= cache.min_tokens:
            tokens = [*row.stream.prompt_ids, *row.token_ids][:fed]
            if not cache.covered(tokens):
                cache.store(tokens, self.slot_model.cache.read(row.slot, fed))
        self._release(row)
        outbox.put(
            row.stream,
            SequenceEnd(
                index=row.index,
                finish_reason=reason,
                text_tail=row.detokenizer.flush(),
                text=row.detokenizer.text,
                token_ids=row.token_ids,
                logprobs=row.logprobs,
                weights_version=row.version,
            ),
        )
