"""`@algo`: turn a plain function into an Algorithm whose parameters are filled by the trainer."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Optional, Union

from agentlightning.types import Dataset

from .base import Algorithm

__all__ = ["algo", "FunctionalAlgorithm", "INJECTABLE_PARAMETERS"]

INJECTABLE_PARAMETERS: tuple[str, ...] = (
    "store",
    "train_dataset",
    "val_dataset",
    "llm_proxy",
    "adapter",
    "initial_resources",
    "tracker",
)
"""Keyword parameters `@algo` functions may declare; each receives the trainer's component."""


class FunctionalAlgorithm(Algorithm):
    """An Algorithm backed by a function; `run` calls it with the parameters it declares.

    Calling the instance directly calls the original function unchanged.
    """

    def __init__(self, algorithm_func: Callable[..., Union[None, Awaitable[None]]]) -> None:
        self._algorithm_func = algorithm_func
        self._signature = inspect.signature(algorithm_func)
        self._is_async_func = inspect.iscoroutinefunction(algorithm_func)
        params = self._signature.parameters.values()
        self._accepts_any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        unknown = [
            p.name
            for p in params
            if p.name not in INJECTABLE_PARAMETERS
            and p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        if unknown:
            raise TypeError(
                f"@algo function {getattr(algorithm_func, '__name__', algorithm_func)!r} has required parameters "
                f"{unknown} that the trainer cannot fill; use only {list(INJECTABLE_PARAMETERS)} or give defaults"
            )
        functools.update_wrapper(self, algorithm_func)  # type: ignore[arg-type]

    def is_async(self) -> bool:
        return self._is_async_func

    def _wants(self, name: str) -> bool:
        return name in self._signature.parameters or self._accepts_any_keyword

    def _injected_kwargs(
        self, train_dataset: Optional[Dataset[Any]], val_dataset: Optional[Dataset[Any]]
    ) -> dict[str, Any]:
        available: dict[str, Callable[[], Any]] = {
            "store": self.get_store,
            "train_dataset": lambda: train_dataset,
            "val_dataset": lambda: val_dataset,
            "llm_proxy": self.get_llm_proxy,
            "adapter": lambda: self.get_adapter() if self.has_adapter() else None,
            "initial_resources": self.get_initial_resources,
            "tracker": self.get_tracker,
        }
        return {name: getter() for name, getter in available.items() if self._wants(name)}

    def run(  # type: ignore[override]
        self,
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> Union[None, Awaitable[None]]:
        """Call the function with the trainer components it declares (a coroutine when it is async).

        Raises TypeError when a non-empty dataset is given but the function has no parameter to receive
        it: the data would otherwise be dropped without a word (None or an empty dataset loses nothing).
        """
        for name, dataset in (("train_dataset", train_dataset), ("val_dataset", val_dataset)):
            if dataset is not None and len(dataset) > 0 and not self._wants(name):
                raise TypeError(
                    f"@algo function {getattr(self._algorithm_func, '__name__', self._algorithm_func)!r} was given "
                    f"{name} but has no {name!r} parameter; add `{name}` to its signature or do not pass it"
                )
        return self._algorithm_func(**self._injected_kwargs(train_dataset, val_dataset))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._algorithm_func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionalAlgorithm({getattr(self._algorithm_func, '__qualname__', self._algorithm_func)!r})"


def algo(func: Callable[..., Union[None, Awaitable[None]]]) -> FunctionalAlgorithm:
    """Decorate `def my_algo(*, store, train_dataset, ...)` (sync or async) so it can be a trainer's algorithm."""
    return FunctionalAlgorithm(func)
