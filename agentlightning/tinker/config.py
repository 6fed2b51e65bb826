"""`TinkerConfig`: what `agl tinker` serves, where it keeps checkpoints, and who may call it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

__all__ = ["TinkerConfig"]


@dataclass
class TinkerConfig:
    """Configuration of a Tinker-compatible service (see docs/tinker.md)."""

    models: Dict[str, str] = field(default_factory=lambda: {})
    """Base model name (what clients send as `base_model`) -> what to load: a local folder, "smollm2", a hub id."""
    checkpoint_dir: str = "runs/tinker"
    """Where training runs keep `run.json` and their checkpoints (`tinker://<run>/<kind>/<name>`)."""
    api_keys: Tuple[str, ...] = ()
    """Accepted `X-API-Key` values; the SDK only sends keys that start with `tml-`."""
    require_api_key: bool = True
    """False: accept any caller (a trusted, loopback-only setup)."""
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port."""
    device: Optional[str] = None
    default_max_tokens: int = 256
    """Sampling length when a request sets no `max_tokens`."""
    max_batch_size: int = 32
    """Sequences a policy engine decodes at once."""
    max_frozen_samplers: int = 2
    """Older sampler checkpoints kept loaded for sampling (the live one of each run does not count)."""
    retrieve_wait_s: float = 20.0
    """How long `retrieve_future` holds a request open for a pending future before answering try-again."""

    def __post_init__(self) -> None:
        if self.require_api_key and not self.api_keys:
            raise ValueError("TinkerConfig needs api_keys (e.g. ('tml-local',)) or require_api_key=False")
        bad = [key for key in self.api_keys if not key.startswith("tml-")]
        if bad:
            raise ValueError(f"api_keys {bad} do not start with 'tml-'; the tinker SDK refuses such keys")
        if not self.models:
            raise ValueError("TinkerConfig.models is empty; name at least one base model, e.g. {'tiny': './tiny'}")
        if self.retrieve_wait_s <= 0:
            raise ValueError(f"retrieve_wait_s must be > 0, got {self.retrieve_wait_s}")
