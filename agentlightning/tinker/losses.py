"""Tinker's built-in losses over one datum's target-token logprobs, summed over tokens as Tinker defines them.

With `logprobs` the current policy's log pi(target_t), `weights`/`advantages` the datum's loss inputs,
`sampling_logprobs` the sampler's log q(target_t) and `ratio = exp(logprobs - sampling_logprobs)`:

    cross_entropy        -sum(weights * logprobs)
    importance_sampling  -sum(ratio * advantages)
    ppo                  -sum(min(ratio * A, clip(ratio, low, high) * A))        low/high: clip thresholds
    cispo                -sum(stopgrad(clip(ratio, low, high)) * logprobs * A)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, Mapping, Union

from .errors import TinkerUserError

if TYPE_CHECKING:
    import torch

__all__ = ["LOSSES", "datum_loss"]

Config = Mapping[str, Union[float, str]]


def _input(inputs: Mapping[str, torch.Tensor], name: str, loss: str) -> torch.Tensor:
    if name not in inputs:
        raise TinkerUserError(f"loss {loss!r} needs loss_fn_inputs[{name!r}]; got {sorted(inputs)}")
    return inputs[name]


def _ratio(logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], loss: str) -> torch.Tensor:
    import torch

    return torch.exp(logprobs - _input(inputs, "logprobs", loss))


def _bounds(config: Config) -> tuple[float, float]:
    return float(config.get("clip_low_threshold", 0.8)), float(config.get("clip_high_threshold", 1.2))


def _cross_entropy(logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Config) -> torch.Tensor:
    weights = inputs.get("weights")
    return -(logprobs if weights is None else logprobs * weights).sum()


def _importance_sampling(logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Config) -> torch.Tensor:
    advantages = _input(inputs, "advantages", "importance_sampling")
    return -(_ratio(logprobs, inputs, "importance_sampling") * advantages).sum()


def _ppo(logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Config) -> torch.Tensor:
    import torch

    advantages = _input(inputs, "advantages", "ppo")
    ratio = _ratio(logprobs, inputs, "ppo")
    low, high = _bounds(config)
    return -torch.minimum(ratio * advantages, ratio.clamp(low, high) * advantages).sum()


def _cispo(logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Config) -> torch.Tensor:
    advantages = _input(inputs, "advantages", "cispo")
    low, high = _bounds(config)
    weight = _ratio(logprobs, inputs, "cispo").clamp(low, high).detach()
    return -(weight * logprobs * advantages).sum()


LOSSES: Dict[str, Callable[[torch.Tensor, Mapping[str, torch.Tensor], Config], torch.Tensor]] = {
    "cross_entropy": _cross_entropy,
    "importance_sampling": _importance_sampling,
    "ppo": _ppo,
    "cispo": _cispo,
}


def datum_loss(name: str, logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Config) -> torch.Tensor:
    """The loss `name` of one datum (a scalar tensor)."""
    if name not in LOSSES:
        raise TinkerUserError(f"loss_fn {name!r} is not supported here; use one of {sorted(LOSSES)}")
    return LOSSES[name](logprobs, inputs, config)
