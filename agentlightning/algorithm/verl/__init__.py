"""`VERL`: PPO/GRPO on GPU clusters with verl, rollouts from agent-lightning runners (extra `verl`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional

from agentlightning.algorithm.base import Algorithm
from agentlightning.types import Dataset

__all__ = ["VERL"]

logger = logging.getLogger(__name__)


class VERL(Algorithm):
    """Train the agent's model with verl: the config is verl's PPO trainer config plus `agentlightning.*`.

    `config` (dict or OmegaConf) is merged over the packaged default (`agentlightning/verl/config.yaml`
    over verl's `ppo_trainer`) and validated at once; unknown keys and bad values raise ValueError.
    Versions are checked at construction (verl, torch) and again before training (with vLLM); set
    `agentlightning.skip_version_check: true` to skip. `trainer_cls` / `daemon_cls` swap in subclasses of
    `AgentLightningTrainer` / `AgentModeDaemon`.
    """

    def __init__(self, config: Mapping[str, Any] | Any, trainer_cls: Any = None, daemon_cls: Any = None) -> None:
        from agentlightning.verl.config import merge_config
        from agentlightning.verl.versions import check_versions

        self.config = merge_config(config)
        self.skip_version_check = bool(self.config.agentlightning.get("skip_version_check", False))
        if not self.skip_version_check:
            self.versions = check_versions(require_vllm=False)
        self.trainer_cls = trainer_cls
        self.daemon_cls = daemon_cls

    def run(self, train_dataset: Optional[Dataset[Any]] = None, val_dataset: Optional[Dataset[Any]] = None) -> None:
        from agentlightning.verl.entrypoint import run_ppo
        from agentlightning.verl.versions import check_versions

        if not self.skip_version_check:
            self.versions = check_versions(require_vllm=True)
        run_ppo(
            self.config,
            train_dataset,  # type: ignore[arg-type]
            val_dataset,  # type: ignore[arg-type]
            store=self.get_store(),
            llm_proxy=self.get_llm_proxy(),
            adapter=self.get_adapter() if self.has_adapter() else None,
            trainer_cls=self.trainer_cls,
            daemon_cls=self.daemon_cls,
        )
