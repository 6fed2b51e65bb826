"""What a request to the policy engine gives back: a stream of per-token deltas and per-choice ends.

The engine thread produces events; the request's event loop consumes them. Events are handed over in
batches (`Outbox`): one thread-safe wake-up per event loop and decode step, however many rows it served.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AsyncIterator, Callable, Dict, List, Optional, Tuple, Union

if TYPE_CHECKING:
    from .sampling import SamplingParams

__all__ = ["CompletionEvent", "CompletionStream", "Outbox", "SequenceDelta", "SequenceEnd"]


@dataclass
class SequenceDelta:
    """One new token of choice `index` and the text it made visible (may be empty)."""

    index: int
    token_id: int
    logprob: float
    text: str
    top_logprobs: List[Tuple[int, float]] = field(default_factory=lambda: [])


@dataclass
class SequenceEnd:
    """Choice `index` is complete: its full text, token ids and logprobs, and why it ended.

    `weights_version` is the version the choice started with; a choice still running when the weights
    change finishes on the new ones (`PolicyServer.swap_weights` drains first, so served ones never do).
    """

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
_Item = Union[CompletionEvent, _Failure]


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
        self.loop = loop
        self._events: asyncio.Queue[_Item] = asyncio.Queue()
        self._remaining = n
        self.on_end: Optional[Callable[[SequenceEnd], None]] = None
        """Called with each choice's end as the consumer receives it (the server remembers sampled turns)."""

    def push(self, event: _Item) -> None:
        """Deliver one event from another thread (thread-safe)."""
        _hand_over(self.loop, [(self, event)])

    def cancel(self) -> None:
        """Stop generating for this request at the next step (e.g. the HTTP client went away)."""
        self.cancelled.set()

    def fail(self, error: BaseException) -> None:
        self.push(_Failure(error))

    async def __aiter__(self) -> AsyncIterator[CompletionEvent]:
        while self._remaining > 0:
            event = await self._events.get()
            if isinstance(event, _Failure):
                raise event.error
            if isinstance(event, SequenceEnd):
                self._remaining -= 1
                if self.on_end is not None:
                    self.on_end(event)
            yield event

    async def collect(self) -> List[SequenceEnd]:
        """Wait for every choice and return their ends ordered by index."""
        ends = [event async for event in self if isinstance(event, SequenceEnd)]
        return sorted(ends, key=lambda end: end.index)


def _deliver(items: List[Tuple[CompletionStream, _Item]]) -> None:
    for stream, event in items:
        stream._events.put_nowait(event)  # type: ignore[reportPrivateUsage]


def _hand_over(loop: asyncio.AbstractEventLoop, items: List[Tuple[CompletionStream, _Item]]) -> None:
    try:
        loop.call_soon_threadsafe(_deliver, items)
    except RuntimeError:  # the consumer's loop is gone; nobody is listening any more
        for stream, _ in items:
            stream.cancelled.set()


class Outbox:
    """Events gathered during a step, handed to their event loops together by `flush`."""

    def __init__(self) -> None:
        self._by_loop: Dict[asyncio.AbstractEventLoop, List[Tuple[CompletionStream, _Item]]] = {}

    def put(self, stream: CompletionStream, event: _Item) -> None:
        self._by_loop.setdefault(stream.loop, []).append((stream, event))

    def flush(self) -> None:
        batches, self._by_loop = self._by_loop, {}
        for loop, items in batches.items():
            _hand_over(loop, items)
