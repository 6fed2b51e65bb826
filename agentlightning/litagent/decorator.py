"""Function decorators that turn a plain rollout function into a `LitAgent`.

The function's signature decides what the runner injects: the first parameter is always `task`; a
parameter named `llm` receives the first `LLM` resource, `prompt_template` the first `PromptTemplate`,
and `rollout` the running `AttemptedRollout`.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Optional, TypeVar, Union, overload

from agentlightning.types import LLM, AttemptedRollout, NamedResources, PromptTemplate, ProxyLLM, Rollout

from .litagent import LitAgent

__all__ = ["FunctionalLitAgent", "llm_rollout", "prompt_rollout", "rollout"]

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")

RolloutFunc = Callable[..., Any]
AgentDecorator = Callable[[RolloutFunc], "FunctionalLitAgent[Any]"]

# Parameters the runner can fill in, besides the leading `task`.
_INJECTABLE = ("llm", "prompt_template", "rollout")
_LLM_SIGNATURE = "(task, llm[, prompt_template][, rollout])"
_PROMPT_SIGNATURE = "(task, prompt_template[, llm][, rollout])"


def _func_name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


def _is_coroutine_callable(func: Any) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 - callable objects with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _describe_resources(resources: Mapping[str, Any]) -> str:
    if not resources:
        return "none"
    return ", ".join(f"{name!r} ({getattr(r, 'resource_type', type(r).__name__)})" for name, r in resources.items())


def _signature_problem(func: RolloutFunc, resource_param: str) -> Optional[str]:
    """Why `func` cannot be called as `func(task, <resource_param>=..., ...)`, or None if it can."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        return f"its signature cannot be inspected ({exc})"
    params = list(sig.parameters.values())
    names = [p.name for p in params]
    if len(params) < 2:
        return f"it takes {len(params)} parameter(s) {tuple(names)}, but needs at least 'task' and {resource_param!r}"
    if names[0] != "task":
        return f"its first parameter is {names[0]!r}, but must be named 'task'"
    if resource_param not in names:
        return f"it has no parameter named {resource_param!r} (parameters: {tuple(names)})"
    for param in params[1:]:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if param.name in _INJECTABLE and param.kind is inspect.Parameter.POSITIONAL_ONLY:
            return f"parameter {param.name!r} is positional-only, but injected resources are passed by keyword"
        if param.name not in _INJECTABLE and param.default is inspect.Parameter.empty:
            return (
                f"parameter {param.name!r} has no default and cannot be injected "
                f"(only {', '.join(repr(n) for n in _INJECTABLE)} are); give it a default or remove it"
            )
    return None


class FunctionalLitAgent(LitAgent[T_task]):
    """A `LitAgent` backed by a plain (sync or async) function; still callable like that function."""

    def __init__(self, rollout_func: RolloutFunc, *, strip_proxy: bool = True) -> None:
        super().__init__()
        self._rollout_func = rollout_func
        self._strip_proxy = strip_proxy
        self._is_async = _is_coroutine_callable(rollout_func)
        self._params = set(inspect.signature(rollout_func).parameters)
        functools.update_wrapper(self, rollout_func)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._rollout_func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionalLitAgent({_func_name(self._rollout_func)})"

    def is_async(self) -> bool:
        return self._is_async

    def rollout(self, task: T_task, resources: NamedResources, rollout: Rollout) -> Any:
        if self._is_async:
            raise RuntimeError(
                f"{_func_name(self._rollout_func)} is async; the runner must call rollout_async(), not rollout()"
            )
        return self._rollout_func(task, **self._build_kwargs(resources, rollout))

    async def rollout_async(self, task: T_task, resources: NamedResources, rollout: Rollout) -> Any:
        if not self._is_async:
            raise RuntimeError(
                f"{_func_name(self._rollout_func)} is synchronous; the runner must call rollout(), not rollout_async()"
            )
        return await self._rollout_func(task, **self._build_kwargs(resources, rollout))

    def _build_kwargs(self, resources: NamedResources, rollout: Rollout) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if "rollout" in self._params:
            kwargs["rollout"] = rollout
        if "llm" in self._params:
            kwargs["llm"] = self._pick_llm(resources, rollout)
        if "prompt_template" in self._params:
            kwargs["prompt_template"] = self._pick_prompt_template(resources)
        return kwargs

    def _pick_first(self, resources: NamedResources, kind: type, param: str) -> Any:
        matches = [(name, r) for name, r in (resources or {}).items() if isinstance(r, kind)]
        if not matches:
            raise ValueError(
                f"{_func_name(self._rollout_func)} needs a {kind.__name__} resource for its {param!r} parameter, "
                f"but none was given; resources given: {_describe_resources(resources or {})}"
            )
        if len(matches) > 1:
            logger.warning(
                "%s: several %s resources (%s); injecting the first one, %r, as %r.",
                _func_name(self._rollout_func),
                kind.__name__,
                ", ".join(repr(name) for name, _ in matches),
                matches[0][0],
                param,
            )
        return matches[0][1]

    def _pick_llm(self, resources: NamedResources, rollout: Rollout) -> LLM:
        llm: LLM = self._pick_first(resources, LLM, "llm")
        if self._strip_proxy and isinstance(llm, ProxyLLM):
            if not isinstance(rollout, AttemptedRollout):
                raise ValueError(
                    f"cannot route ProxyLLM for rollout {rollout.rollout_id!r}: it has no attempt; "
                    "pass an AttemptedRollout or decorate with strip_proxy=False"
                )
            return llm.with_attempted_rollout(rollout)
        return llm

    def _pick_prompt_template(self, resources: NamedResources) -> PromptTemplate:
        return self._pick_first(resources, PromptTemplate, "prompt_template")


def _make_agent(func: RolloutFunc, resource_param: str, decorator: str, strip_proxy: bool) -> FunctionalLitAgent[Any]:
    problem = _signature_problem(func, resource_param)
    if problem is not None:
        expected = _LLM_SIGNATURE if resource_param == "llm" else _PROMPT_SIGNATURE
        raise ValueError(f"@{decorator} cannot wrap {_func_name(func)}: {problem}. Expected parameters: {expected}.")
    return FunctionalLitAgent(func, strip_proxy=strip_proxy)


@overload
def llm_rollout(func: RolloutFunc, *, strip_proxy: bool = True) -> FunctionalLitAgent[Any]: ...
@overload
def llm_rollout(func: None = None, *, strip_proxy: bool = True) -> AgentDecorator: ...
def llm_rollout(
    func: Optional[RolloutFunc] = None, *, strip_proxy: bool = True
) -> Union[FunctionalLitAgent[Any], AgentDecorator]:
    """Make an agent from `f(task, llm[, rollout])`; `llm` is the first LLM resource.

    With `strip_proxy` (default), a `ProxyLLM` is turned into a plain `LLM` routed to the running attempt.
    """

    def decorate(f: RolloutFunc) -> FunctionalLitAgent[Any]:
        return _make_agent(f, "llm", "llm_rollout", strip_proxy)

    return decorate if func is None else decorate(func)


@overload
def prompt_rollout(func: RolloutFunc, *, strip_proxy: bool = True) -> FunctionalLitAgent[Any]: ...
@overload
def prompt_rollout(func: None = None, *, strip_proxy: bool = True) -> AgentDecorator: ...
def prompt_rollout(
    func: Optional[RolloutFunc] = None, *, strip_proxy: bool = True
) -> Union[FunctionalLitAgent[Any], AgentDecorator]:
    """Make an agent from `f(task, prompt_template[, rollout])`; `prompt_template` is the first PromptTemplate."""

    def decorate(f: RolloutFunc) -> FunctionalLitAgent[Any]:
        return _make_agent(f, "prompt_template", "prompt_rollout", strip_proxy)

    return decorate if func is None else decorate(func)


@overload
def rollout(func: RolloutFunc, *, strip_proxy: bool = True) -> FunctionalLitAgent[Any]: ...
@overload
def rollout(func: None = None, *, strip_proxy: bool = True) -> AgentDecorator: ...
def rollout(
    func: Optional[RolloutFunc] = None, *, strip_proxy: bool = True
) -> Union[FunctionalLitAgent[Any], AgentDecorator]:
    """Make an agent from a function whose signature matches `@llm_rollout` or `@prompt_rollout`."""

    def decorate(f: RolloutFunc) -> FunctionalLitAgent[Any]:
        llm_problem = _signature_problem(f, "llm")
        if llm_problem is None:
            return FunctionalLitAgent(f, strip_proxy=strip_proxy)
        prompt_problem = _signature_problem(f, "prompt_template")
        if prompt_problem is None:
            return FunctionalLitAgent(f, strip_proxy=strip_proxy)
        raise NotImplementedError(
            f"@rollout cannot wrap {_func_name(f)}: its signature matches no agent pattern. "
            f"Expected parameters {_LLM_SIGNATURE} ({llm_problem}) or {_PROMPT_SIGNATURE} ({prompt_problem})."
        )

    return decorate if func is None else decorate(func)
