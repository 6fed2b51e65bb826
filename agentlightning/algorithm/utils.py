"""Helpers for writing algorithms: store / LLM-proxy injection and endless shuffled batches."""

from __future__ import annotations

import functools
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Optional, TypeVar, cast

from agentlightning.types import Dataset

if TYPE_CHECKING:
    from .base import Algorithm

__all__ = ["with_store", "with_llm_proxy", "batch_iter_over_dataset"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


def with_store(func: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Decorate an async algorithm method so it receives `self.get_store()` as its first argument."""

    @functools.wraps(func)
    async def wrapper(self: Algorithm, *args: Any, **kwargs: Any) -> R:
        return await func(self, self.get_store(), *args, **kwargs)

    return wrapper


def with_llm_proxy(
    required: bool = False, auto_start: bool = True
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Decorate an async algorithm method so it receives the trainer's LLM proxy (or None) first.

    Args:
        required: raise ValueError when no proxy is configured instead of passing None.
        auto_start: start the proxy if it is not running and stop it again when the method returns.
    """

    def decorator(func: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(func)
        async def wrapper(self: Algorithm, *args: Any, **kwargs: Any) -> R:
            proxy = self.get_llm_proxy()
            if proxy is None:
                if required:
                    raise ValueError(
                        f"{type(self).__name__}.{func.__name__} needs an LLM proxy; pass agl.Trainer(llm_proxy=...)"
                    )
                return await func(self, None, *args, **kwargs)
            started_here = False
            if auto_start and not proxy.is_running():
                await proxy.start()
                started_here = True
            try:
                return await func(self, proxy, *args, **kwargs)
            finally:
                if started_here:
                    try:
                        await proxy.stop()
                    except Exception:
                        logger.exception("Stopping the LLM proxy started for %s failed", func.__name__)

        return wrapper

    return decorator


def batch_iter_over_dataset(
    dataset: Dataset[T], batch_size: int, *, rng: Optional[random.Random] = None
) -> Iterator[list[T]]:
    """Yield shuffled batches forever, reshuffling on every pass over the dataset.

    When `batch_size` covers the dataset, every batch is the whole dataset in a new order. Otherwise
    batches run across pass boundaries without repeating an item inside one batch, and every item is
    used once per pass.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    size = len(dataset)
    if size == 0:
        raise ValueError("cannot iterate batches over an empty dataset; pass at least one sample")
    shuffler = rng or cast(random.Random, random)
    if batch_size >= size:
        while True:
            order = list(range(size))
            shuffler.shuffle(order)
            yield [dataset[i] for i in order]

    pending: deque[int] = deque()
    while True:
        batch: list[int] = []
        chosen: set[int] = set()
        deferred: list[int] = []
        while len(batch) < batch_size:
            if not pending:
                order = list(range(size))
                shuffler.shuffle(order)
                pending.extend(order)
            index = pending.popleft()
            if index in chosen:
                deferred.append(index)
                continue
            batch.append(index)
            chosen.add(index)
        pending.extendleft(reversed(deferred))
        yield [dataset[i] for i in batch]
