"""Regional compilation: `torch.compile` the two halves of one fused decoder layer, reused by every layer.

`fused.FusedLayers` runs each layer as `pre_attention` and `post_attention`, pure functions of tensors
(weights included), with the KV-cache write and attention between them. Compiling those two functions
instead of the whole model means compiling one layer's work, not thirty layers': the layers differ only
in the tensors they pass, so every layer replays the same compiled code, and a weight updated in place
is read by it like any other input. Shapes are dynamic; a batch or length of one is its own
specialisation, so at most four variants per half (decode/prefill x one row/more) ever compile.

Each first call of a variant is timed and logged (`compile_s`); `warm_up` triggers them at start. A
failure to compile falls back to the eager halves, for good, with the reason logged and kept.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Hashable, Optional, Set

from .fused import FusedLayers, post_attention, pre_attention

__all__ = ["RegionalCompile"]

logger = logging.getLogger(__name__)


class RegionalCompile:
    """Compiles `plan`'s layer halves (module docstring); `plan` then calls the compiled ones."""

    def __init__(self, plan: FusedLayers, *, mode: Optional[str] = None) -> None:
        import torch

        self.plan = plan
        self.reason: Optional[str] = None
        """Why compiled code is not used (a failure to compile), or None."""
        self.compile_s: Dict[str, float] = {}
        """Seconds of each variant's first call (its compilation), by name."""
        self._seen: Set[Hashable] = set()
        self._pre = torch.compile(pre_attention, dynamic=True, fullgraph=True, mode=mode)
        self._post = torch.compile(post_attention, dynamic=True, fullgraph=True, mode=mode)
        plan.pre = self._wrap("pre_attention", self._pre, pre_attention)
        plan.post = self._wrap("post_attention", self._post, post_attention)

    @property
    def active(self) -> bool:
        return self.reason is None

    @property
    def total_compile_s(self) -> float:
        return sum(self.compile_s.values())

    def _wrap(self, name: str, compiled: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if self.reason is not None:
                return eager(*args)
            hidden = args[0]
            key = (name, hidden.shape[0] == 1, hidden.shape[1] == 1, hidden.dtype, hidden.device.type)
            if key in self._seen:
                return compiled(*args)
            started = time.perf_counter()
            try:
                out = compiled(*args)
            except Exception as exc:  # a torch/inductor that cannot compile this: serve eagerly
                self._fail(f"{type(exc).__name__}: {exc}")
                return eager(*args)
            elapsed = time.perf_counter() - started
            label = f"{name} ({'1 row' if key[1] else 'rows'}, {'decode' if key[2] else 'prefill'})"
            self.compile_s[label] = elapsed
            self._seen.add(key)
            logger.info("regional compile: %s compiled in %.1f s (reused by every layer)", label, elapsed)
            return out

        return call

    def _fail(self, reason: str) -> None:
        self.reason = reason
        self.plan.pre, self.plan.post = pre_attention, post_attention
        logger.warning("regional compile off: %s; the fused layers run eagerly", reason, exc_info=True)
