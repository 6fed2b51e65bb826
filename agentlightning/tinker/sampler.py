"""Sampling for Tinker clients on the policy engine that agents use (`serving.PolicyServer`).

Each training run has one live policy server: `save_weights_for_sampler` copies the run's weights into it
(a new weights version), so a recipe sampling from its latest checkpoint and an agent calling the server's
OpenAI endpoint are served by the same engine at the same version. A base model has a policy server of its
own; an older sampler checkpoint is loaded into a frozen one (the few most recent are kept).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence

from .errors import TinkerUserError
from .wire import SampledSequence

if TYPE_CHECKING:
    import torch

    from ..serving.server import PolicyServer

__all__ = ["ServedPolicy", "SamplerPool", "sampling_params"]

logger = logging.getLogger(__name__)


@dataclass
class ServedPolicy:
    """A policy server and what it serves: the weights version and fingerprint of each sampler path."""

    server: PolicyServer
    key: str
    paths: Dict[str, int] = field(default_factory=lambda: {})
    """Sampler path -> the weights version it was loaded as."""
    fingerprints: Dict[int, str] = field(default_factory=lambda: {})

    @property
    def version(self) -> int:
        return self.server.weights_version

    def endpoint(self) -> str:
        """The OpenAI base URL of this policy (its HTTP server starts on first use)."""
        self.server.start()
        return self.server.endpoint


def sampling_params(params: Mapping[str, Any], tokenizer: Any, default_max_tokens: int) -> tuple[Any, List[int]]:
    """Our `SamplingParams` from Tinker's, and the stop token ids (Tinker may stop on token ids, not text)."""
    from ..serving.sampling import SamplingParams

    stop = params.get("stop")
    stop_tokens: List[int] = []
    stop_text: List[str] = []
    if isinstance(stop, str):
        stop_text = [stop]
    elif isinstance(stop, list):
        for item in stop:  # type: ignore[reportUnknownVariableType]
            if isinstance(item, int):
                stop_tokens.append(item)
            else:
                stop_text.append(str(item))  # type: ignore[reportUnknownArgumentType]
    top_k = int(params.get("top_k", -1))
    try:
        ours = SamplingParams(
            max_tokens=int(params.get("max_tokens") or default_max_tokens),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=max(top_k, 0),
            stop=tuple(stop_text),
            seed=params.get("seed"),
            logprobs=True,
        )
    except ValueError as exc:
        raise TinkerUserError(f"sampling_params: {exc}")
    return ours, stop_tokens


def _cut_at_stop_tokens(sequence: SampledSequence, stop_tokens: Sequence[int]) -> SampledSequence:
    for index, token in enumerate(sequence.tokens):
        if token in stop_tokens:
            return SampledSequence(sequence.tokens[: index + 1], sequence.logprobs[: index + 1], "stop")
    return sequence


class SamplerPool:
    """The policy servers of runs, base models and older sampler checkpoints (see the module docstring)."""

    def __init__(self, *, max_frozen: int = 2, default_max_tokens: int = 256, max_batch_size: int = 32) -> None:
        self.live: Dict[str, ServedPolicy] = {}
        """Run id -> its live policy."""
        self.base: Dict[str, ServedPolicy] = {}
        self.frozen: OrderedDict[str, ServedPolicy] = OrderedDict()
        self.max_frozen = max_frozen
        self.default_max_tokens = default_max_tokens
        self.max_batch_size = max_batch_size

    def _server(self, model: torch.nn.Module, tokenizer: Any, name: str) -> PolicyServer:
        from ..serving.server import PolicyServer

        served = copy.deepcopy(model).eval().requires_grad_(False)
        server = PolicyServer(
            served,
            tokenizer,
            model_name=name,
            default_max_tokens=self.default_max_tokens,
            max_batch_size=self.max_batch_size,
            always_logprobs=True,
        )
        server.engine.start()
        return server

    def base_policy(self, name: str, model: torch.nn.Module, tokenizer: Any) -> ServedPolicy:
        if name not in self.base:
            self.base[name] = ServedPolicy(self._server(model, tokenizer, name), key=name)
        return self.base[name]

    def publish(
        self, run_id: str, path: str, weights: Mapping[str, torch.Tensor], fingerprint: str, make: Callable[[], Any]
    ) -> int:
        """Serve `weights` on the run's live policy as a new version for sampler `path`; returns the version.

        `make()` gives `(model, tokenizer, name)` for the first publish of a run.
        """
        policy = self.live.get(run_id)
        if policy is None:
            model, tokenizer, name = make()
            policy = self.live[run_id] = ServedPolicy(self._server(model, tokenizer, name), key=run_id)
        version = policy.server.update_weights(weights)
        policy.paths[path] = version
        policy.fingerprints[version] = fingerprint
        return version

    def for_path(self, path: str, run_id: str) -> Optional[ServedPolicy]:
        """The policy that serves sampler `path` at its own version, if one does."""
        live = self.live.get(run_id)
        if live is not None and live.paths.get(path) == live.version:
            return live
        if path in self.frozen:
            self.frozen.move_to_end(path)
            return self.frozen[path]
        return None

    def add_frozen(
        self, path: str, model: torch.nn.Module, tokenizer: Any, name: str, fingerprint: str
    ) -> ServedPolicy:
        policy = ServedPolicy(self._server(model, tokenizer, name), key=path)
        policy.paths[path] = policy.version
        policy.fingerprints[policy.version] = fingerprint
        self.frozen[path] = policy
        while len(self.frozen) > self.max_frozen:
            _, old = self.frozen.popitem(last=False)
            old.server.stop()
        return policy

    def close(self) -> None:
        for policy in [*self.live.values(), *self.base.values(), *self.frozen.values()]:
            try:
                policy.server.stop()
            except Exception:  # closing the others matters more than one failure
                logger.exception("could not stop policy %s", policy.key)


async def sample(
    policy: ServedPolicy, prompt: Sequence[int], params: Mapping[str, Any], num_samples: int, prompt_logprobs: bool
) -> tuple[List[SampledSequence], Optional[List[float]], int]:
    """`num_samples` completions of `prompt` (and its logprobs when asked); returns them and the weights version."""
    engine = policy.server.engine
    ours, stop_tokens = sampling_params(params, engine.tokenizer, policy.server.default_max_tokens)
    if num_samples < 1:
        raise TinkerUserError(f"num_samples must be >= 1, got {num_samples}")
    version = engine.weights_version
    sequences: List[SampledSequence] = []
    remaining = num_samples
    try:
        while remaining:
            n = min(remaining, engine.max_batch_size)
            ends = await engine.generate(list(prompt), ours, n)
            for end in sorted(ends, key=lambda e: e.index):
                reason = "length" if end.finish_reason == "length" else "stop"
                sequences.append(_cut_at_stop_tokens(SampledSequence(end.token_ids, end.logprobs, reason), stop_tokens))
            remaining -= n
    except ValueError as exc:
        raise TinkerUserError(str(exc))
    scored = await asyncio.to_thread(_prompt_logprobs, policy, prompt) if prompt_logprobs else None
    return sequences, scored, version


def _prompt_logprobs(policy: ServedPolicy, prompt: Sequence[int]) -> List[float]:
    """log pi(prompt_t | prompt_<t) under the served weights (NaN for the first token)."""
    import torch

    engine = policy.server.engine
    with engine.exclusive(), torch.inference_mode():
        model: Any = engine.model
        device = next(model.parameters()).device
        ids = torch.tensor([list(prompt)], device=device)
        logits = model(input_ids=ids).logits[0].float()
        values = logits[:-1].log_softmax(-1).gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
    return [math.nan, *values.cpu().tolist()]
