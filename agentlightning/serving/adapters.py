"""Several LoRA adapters on one served base model: resolving a request's model name to an adapter.

A server with adapters `("planner", "coder")` and model name `grpo-smollm2` answers `model="grpo-smollm2"`
with the frozen base (adapters disabled) and `model="grpo-smollm2:planner"` with the `planner` adapter.
The prefix before the colon is not checked (clients often carry their own alias for the base), the
adapter after it is: an unknown one is an error that lists what the server serves.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence

if TYPE_CHECKING:
    import torch

__all__ = [
    "ADAPTER_NAME_RE",
    "UnknownAdapterError",
    "active_adapter",
    "adapter_model_name",
    "adapter_parameters",
    "check_adapters",
    "copy_adapter_weights",
    "resolve_adapter",
]

ADAPTER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
"""Adapter (role) names: they appear in model names (`base:name`) and resource names (`name_llm`)."""


class UnknownAdapterError(LookupError):
    """A request named `base:adapter` for an adapter the server does not serve."""


def adapter_model_name(base: str, adapter: Optional[str]) -> str:
    """The model name that selects `adapter` (the base name itself for None)."""
    return base if adapter is None else f"{base}:{adapter}"


def resolve_adapter(model: Optional[str], base: str, adapters: Sequence[str]) -> Optional[str]:
    """The adapter a request's `model` selects; None means the base (or, without adapters, the policy).

    Without adapters every model name reaches the one served policy (as before adapters existed).

    Raises:
        UnknownAdapterError: `model` is `<x>:<name>` and `name` is not one of `adapters`.
    """
    if not adapters or not model or model == base or ":" not in model:
        return None
    suffix = model.rsplit(":", 1)[1]
    if suffix in adapters:
        return suffix
    served = [adapter_model_name(base, None), *(adapter_model_name(base, a) for a in adapters)]
    raise UnknownAdapterError(f"model {model!r} names an unknown adapter {suffix!r}; this server serves {served}")


def check_adapters(model: torch.nn.Module, adapters: Sequence[str]) -> List[str]:
    """Validate that `model` is a peft model holding every adapter in `adapters`; returns them as a list."""
    names = list(adapters)
    if not names:
        return names
    bad = [name for name in names if not ADAPTER_NAME_RE.match(name)]
    if bad:
        raise ValueError(f"adapter names {bad} must match {ADAPTER_NAME_RE.pattern} (they appear in model names)")
    config: Any = getattr(model, "peft_config", None)
    if not isinstance(config, dict):
        raise ValueError(f"adapters {names} need a peft model holding them; got a plain {type(model).__name__}")
    missing = [name for name in names if name not in config]
    if missing:
        raise ValueError(f"the model has no adapters {missing}; it holds {sorted(config)}")  # type: ignore[reportUnknownArgumentType]
    return names


@contextlib.contextmanager
def active_adapter(model: torch.nn.Module, adapter: Optional[str]) -> Iterator[None]:
    """Run `model` with `adapter` active, or with every adapter disabled (the frozen base) for None.

    peft's `set_adapter` also marks only the active adapter trainable; callers that train set their own
    adapter before each update, so the choice is not restored afterwards.
    """
    peft_model: Any = model
    if adapter is None:
        with peft_model.disable_adapter():
            yield
        return
    if peft_model.active_adapter != adapter:
        peft_model.set_adapter(adapter)
    yield


_ADAPTER_PARAM_RE = r"\.lora_[A-Za-z_]+\.{name}\."


def adapter_parameters(model: torch.nn.Module, adapter: str) -> List[torch.nn.Parameter]:
    """The parameters of one LoRA adapter (`...lora_A.<adapter>.weight` and friends)."""
    pattern = re.compile(_ADAPTER_PARAM_RE.format(name=re.escape(adapter)))
    found = [p for name, p in model.named_parameters() if pattern.search(name)]
    if not found:
        raise ValueError(f"the model has no parameters of adapter {adapter!r}")
    return found


def copy_adapter_weights(source: torch.nn.Module, target: torch.nn.Module, adapters: Sequence[str]) -> None:
    """Copy the weights of `adapters` from one peft model into another of the same layout (a served copy)."""
    import torch

    wanted = [re.compile(_ADAPTER_PARAM_RE.format(name=re.escape(a))) for a in adapters]
    target_params = dict(target.named_parameters())
    with torch.no_grad():
        for name, param in source.named_parameters():
            if any(p.search(name) for p in wanted):
                if name not in target_params:
                    raise ValueError(f"the served model has no parameter {name!r}; was it copied from the learner?")
                target_params[name].copy_(param.detach())
