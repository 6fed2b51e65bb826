"""`ForwardingLightningStore`: a store that passes every contract call on to `_forward`.

A wrapper (the threaded facade, the HTTP client, the server's delegate) implements `_forward` and
gets every contract method with the contract's own signature; it overrides only the methods it
treats apart.
"""

from __future__ import annotations

import functools
import inspect
from abc import abstractmethod
from typing import Any, Callable, Coroutine

from .base import LightningStore

__all__ = ["ForwardingLightningStore"]

_NOT_FORWARDED = frozenset({"close", "close_loop_resources"})
"""Lifecycle calls: each wrapper decides what closing it means for its target."""


class ForwardingLightningStore(LightningStore):
    """Implements every contract coroutine as `await self._forward(method_name, arguments_by_name)`.

    Methods with a default implementation in `LightningStore` (the `*_many_*` batch calls,
    `add_otel_span`, `statistics`) are forwarded too, so the target's own versions are used.
    """

    @abstractmethod
    async def _forward(self, method: str, arguments: dict[str, Any]) -> Any:
        """Run contract method `method` with `arguments` (every parameter, by name) on the target."""


def _forwarder(name: str, contract: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """`name` with the contract's signature; its arguments, defaults applied, go to `_forward` by name."""
    signature = inspect.signature(contract)

    @functools.wraps(contract)
    async def forward(self: ForwardingLightningStore, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments["self"]
        return await self._forward(name, arguments)

    return forward


for _name, _contract in vars(LightningStore).items():
    if inspect.iscoroutinefunction(_contract) and not _name.startswith("_") and _name not in _NOT_FORWARDED:
        setattr(ForwardingLightningStore, _name, _forwarder(_name, _contract))
