"""The policy engine: a request batcher in front of one causal LM whose weights can change between batches.

Requests that arrive while a batch is running, or within `batch_window_s` of each other, are decoded
together in one left-padded batch (`sampling.generate_rows`). The KV cache of a prompt prefix that the
rows of a batch share (a system prompt, few-shot turns, the earlier turns of a returning conversation)
is kept for later batches (`PrefixCache`, one per LoRA adapter) until the weights change. Each batch runs entirely under the weights
lock, so a completion is always sampled from a single weights version and `update_weights` never races
with in-flight generation. With LoRA `adapters`, a batch holds the requests of one adapter (or of the
base); the others are set aside, oldest first, for the next batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._prefix_cache import PrefixCache
from .sampling import GenerationRow, SamplingParams, TokenStep, generate_rows

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

__all__ = ["PolicyEngine", "SequenceDelta", "SequenceEnd", "CompletionStream", "CompletionEvent"]

logger = logging.getLogger(__name__)


@dataclass
class SequenceDelta:
    """One new token of choice `index` and the text it made visible (may be empty)."""

    index: int
    token_id: int
    logprob: float
    text: str
    top_logprobs: List[tuple[int, float]] = field(default_factory=lambda: [])


@dataclass
class SequenceEnd:
    """Choice `index` is complete: its full text, token ids and logprobs, and why it ended."""

    index: int
    finish_reason: str
    text: str
    text_tail: str
    token_ids: List[int]
    logprobs: List[float]
    weights_version: int


@dataclass
class _Failure:
    error: BaseException


CompletionEvent = Union[SequenceDelta, SequenceEnd]


class CompletionStream:
    """The events of one request (`n` choices), consumed as an async iterator on the submitting loop."""

    def __init__(
        self,
        prompt_ids: List[int],
        params: SamplingParams,
        n: int,
        loop: asyncio.AbstractEventLoop,
        adapter: Optional[str] = None,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.n = n
        self.adapter = adapter
        """The LoRA adapter that answers (None: the base, or the one policy of a server without adapters)."""
        self.cancelled = threading.Event()
        self._loop = loop
        self._events: asyncio.Queue[Union[CompletionEvent, _Failure]] = asyncio.Queue()
        self._remaining = n

    def push(self, event: Union[CompletionEvent, _Failure]) -> None:
        """Deliver an event from the engine thread (thread-safe)."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:  # the consumer's loop is gone; nobody is listening any more
            self.cancelled.set()

    def cancel(self) -> None:
        """Stop generating for this request at the next token (e.g. the HTTP client went away)."""
        self.cancelled.set()

    async def __aiter__(self) -> AsyncIterator[CompletionEvent]:
        while self._remaining > 0:
            event = await self._events.get()
            if isinstance(event, _Failure):
                raise event.error
            if isinstance(event, SequenceEnd):
                self._remaining -= 1
            yield event

    async def collect(self) -> List[SequenceEnd]:
        """Wait for every choice and return their ends ordered by index."""
        ends = [event async for event in self if isinstance(event, SequenceEnd)]
        return sorted(ends, key=lambda end: end.index)


_CLOSE = object()


class PolicyEngine:
    """Serves completions from `model`, batching concurrent requests; see the module docstring."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_batch_size: int = 32,
        batch_window_s: float = 0.01,
        max_context: Optional[int] = None,
        seed: Optional[int] = None,
        prefix_cache_entries: int = 8,
        adapters: Sequence[str] = (),
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
        self.eos_token_ids = _eos_token_ids(model, tokenizer)
        self.adapters = check_adapters(model, adapters)
        """LoRA adapters selectable per request; with any, a request without one runs the adapter-free base."""
        self._rng = random.Random(seed)
        self._weights_lock = threading.RLock()
        self._weights_version = 0
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self.batches_run = 0
        self._prefix_cache_entries = prefix_cache_entries
        self._prefix_caches: Dict[Optional[str], PrefixCache] = {}

    # Lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the batching thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._worker, name="agl-policy-engine", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Finish the running batch, then stop the thread; queued requests fail with RuntimeError."""
        if self._thread is None:
            return
        self._queue.put(_CLOSE)
        self._thread.join(timeout)
        self._thread = None
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, CompletionStream):
                item.push(_Failure(RuntimeError("the policy engine was closed before this request ran")))

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def prefix_cache_for(self, adapter: Optional[str] = None) -> Optional[PrefixCache]:
        """The KV caches of shared prompt prefixes for batches of `adapter` (None: the base), kept apart
        because an adapter changes the keys and values; None when `prefix_cache_entries=0`."""
        if not self._prefix_cache_entries:
            return None
        if adapter not in self._prefix_caches:
            self._prefix_caches[adapter] = PrefixCache(self._prefix_cache_entries)
        return self._prefix_caches[adapter]

    @property
    def prefix_cache(self) -> Optional[PrefixCache]:
        """`prefix_cache_for(None)`: the stored prefixes of the base (or of the one policy); emptied when the
        weights change."""
        return self.prefix_cache_for(None)

    # Requests ----------------------------------------------------------------------------------------

    def submit(
        self, prompt_ids: Sequence[int], params: SamplingParams, n: int = 1, *, adapter: Optional[str] = None
    ) -> CompletionStream:
        """Queue a request from inside a running event loop; iterate the returned stream for its events.

        `adapter` picks one of `adapters` (None: the base); only requests of the same adapter share a batch.
        """
        if adapter is not None and adapter not in self.adapters:
            raise ValueError(f"unknown adapter {adapter!r}; this engine serves adapters {self.adapters}")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
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
        """Bumped by every `update_weights`; completions report the version they were sampled with."""
        return self._weights_version

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold generation off (waits for the running batch) - e.g. while a trainer updates a shared model."""
        with self._weights_lock:
            yield

    def update_weights(self, source: Union[torch.nn.Module, Mapping[str, torch.Tensor]]) -> int:
        """Serve new weights from a state dict or a module (plain or peft); returns the new version.

        A module that shares the served model's parameters (shared-model mode) needs no copy; the call
        only marks the new version. With `adapters`, a module's adapter weights are copied into the served
        peft model (the base is frozen). Blocks until the running batch finishes.
        """
        import torch

        from .adapters import copy_adapter_weights
        from .weights import merged_state_dict, shares_parameters

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
            for cache in self._prefix_caches.values():
                cache.clear()
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

    # Batching thread ---------------------------------------------------------------------------------

    def _worker(self) -> None:
        # Requests set aside, oldest first: another adapter's (a batch runs one adapter), or one that did
        # not fit the batch it arrived in. Without adapters this is at most the one request that did not fit.
        waiting: List[Any] = []
        while True:
            first = waiting.pop(0) if waiting else self._queue.get()
            if first is _CLOSE:
                return
            batch: List[CompletionStream] = [first]
            rows = first.n
            set_aside: List[Any] = []
            for item in waiting:
                if _joins(item, first.adapter, rows, self.max_batch_size):
                    batch.append(item)
                    rows += item.n
                else:
                    set_aside.append(item)
            waiting = set_aside
            deadline = time.monotonic() + self.batch_window_s
            while rows < self.max_batch_size and _CLOSE not in waiting:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if _joins(item, first.adapter, rows, self.max_batch_size):
                    batch.append(item)
                    rows += item.n
                    continue
                waiting.append(item)
                if item is _CLOSE or item.adapter == first.adapter:  # this adapter's batch is full
                    break
            self._run_batch([s for s in batch if not s.cancelled.is_set()])

    def _run_batch(self, batch: List[CompletionStream]) -> None:
        if not batch:
            return
        import torch

        from ._detokenizer import IncrementalDetokenizer
        from .adapters import active_adapter

        device = next(self.model.parameters()).device
        rows: List[GenerationRow] = []
        owners: List[tuple[CompletionStream, int, IncrementalDetokenizer]] = []
        for stream in batch:
            seed = stream.params.seed if stream.params.seed is not None else self._rng.randrange(2**62)
            generator = torch.Generator(device=device)
            generator.manual_seed(seed)
            for index in range(stream.n):
                detokenizer = IncrementalDetokenizer(self.tokenizer, stream.params.stop)
                owners.append((stream, index, detokenizer))
                rows.append(
                    GenerationRow(
                        prompt_ids=stream.prompt_ids,
                        params=stream.params,
                        on_token=_token_callback(stream, index, detokenizer),
                        generator=generator,
                    )
                )
        try:
            selected = active_adapter(self.model, batch[0].adapter) if self.adapters else contextlib.nullcontext()
            with self._weights_lock, selected:
                version = self._weights_version
                was_training = self.model.training
                self.model.eval()
                try:
                    results = generate_rows(
                        self.model,
                        rows,
                        pad_token_id=int(self.tokenizer.pad_token_id),  # type: ignore[arg-type]
                        eos_token_ids=self.eos_token_ids,
                        prefix_cache=self.prefix_cache_for(batch[0].adapter),
                    )
                finally:
                    self.model.train(was_training)
        except Exception as exc:
            logger.exception("Generation failed for a batch of %d rows", len(rows))
            for stream in batch:
                stream.push(_Failure(exc))
            return
        self.batches_run += 1
        for (stream, index, detokenizer), result in zip(owners, results, strict=False):
            stream.push(
                SequenceEnd(
                    index=index,
                    finish_reason=result.finish_reason,
                    text_tail=detokenizer.flush(),
                    text=detokenizer.text,
                    token_ids=result.token_ids,
                    logprobs=result.logprobs,
                    weights_version=version,
                )
            )


def _joins(item: Any, adapter: Optional[str], rows: int, max_rows: int) -> bool:
    """Whether a queued request can join a batch of `adapter` that holds `rows` rows."""
    return item is not _CLOSE and item.adapter == adapter and rows + item.n <= max_rows


def _token_callback(stream: CompletionStream, index: int, detokenizer: Any) -> Callable[[TokenStep], bool]:
    def on_token(step: TokenStep) -> bool:
        text, stopped = detokenizer.push(step.token_id)
        stream.push(SequenceDelta(index, step.token_id, step.logprob, text, step.top_logprobs))
        return stopped or stream.cancelled.is_set()

    return on_token


def _eos_token_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> List[int]:
    """Every id that ends a turn: the tokenizer's eos plus the model's generation-config eos ids."""
    ids: set[int] = set()
    for value in (
        tokenizer.eos_token_id,
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
        getattr(getattr(model, "config", None), "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)  # type: ignore[reportUnknownVariableType]
    if not ids:
        raise ValueError("neither the tokenizer nor the model defines an eos token; set tokenizer.eos_token")
    return sorted(ids)
