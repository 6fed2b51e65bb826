"""`RFT`: rejection-sampling fine-tuning. Sample rollouts with the policy, keep the best, fine-tune on them.

Each round: publish the policy server as an `LLM` resource, enqueue `group_size` rollouts per task of the
round's tasks, wait for them, score each by its return, keep the best of each group or every rollout above
a threshold (`selection.py`), and take `epochs` supervised passes (negative log-likelihood of the tokens the
model generated) over the kept rollouts' rows. The rows are the exact token ids the policy server sampled,
built like GRPO's (`algorithm/grpo/batch.py`: calls merged into trajectories, tool results masked out).

RFT runs on GRPO's loop and learner (one round is one GRPO step, with the supervised objective in place of
the policy gradient): the same store/runner/adapter path, LoRA or full weights, CPU or GPU, checkpoints
and resume, validation, metrics. In a schedule (`[agl.RFT(...), agl.GRPO(...)]`) GRPO continues from the
weights RFT trained: a warm start that makes valid tool calls likely before GRPO needs them.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from typing import Any, Dict, Sequence

from ...types import Dataset
from ..grpo.algorithm import GRPO, rollout_return
from ..grpo.config import GRPOConfig
from .config import RFTConfig
from .selection import ScoredRollout, select_rollouts

__all__ = ["RFT"]

logger = logging.getLogger(__name__)

_POLICY_GRADIENT_METRICS = ("kl", "clip_fraction", "ratio_mean", "advantage_abs_mean")


class RFT(GRPO):
    """Rejection-sampling fine-tuning of a Hugging Face causal LM, on CPU or one GPU.

    Takes GRPO's arguments (`config` is an `RFTConfig`): the model, the policy server and the polling.
    """

    NAME = "RFT"
    META_STEP, META_GROUP, META_SAMPLE = "rft_round", "rft_group", "rft_sample"
    TRAIN_RESOURCES_ID, VAL_RESOURCES_ID = "rft-train", "rft-val"

    def _learner_config(self, values: Dict[str, Any]) -> GRPOConfig:
        self.rft_config = RFTConfig.from_dict(values)
        self.empty_rounds = 0
        """Rounds of this run that kept no rollout (see `RFTConfig.max_empty_rounds`)."""
        return self.rft_config.learner_config()

    async def train_step(self, train_dataset: Dataset[Any], *, reuse_store: bool = False) -> Dict[str, Any]:
        """One round: sample, select, fine-tune, serve the new weights; returns the round's metrics."""
        assert self.learner is not None and self.server is not None
        cfg = self.rft_config
        started = time.perf_counter()
        step = self.learner.global_step
        self.phase = "rollouts"
        batch = await self._collect_step(train_dataset, step, reuse_store, started)
        scored = [ScoredRollout(g.rollout_id, g.group_id, rollout_return(g, 0.0)) for g in batch.groups]
        kept = select_rollouts(
            scored, selection=cfg.selection, reward_threshold=cfg.reward_threshold, keep_per_group=cfg.keep_per_group
        )
        kept_ids = {r.rollout_id for r in kept}
        samples = [s for s in batch.samples if s.rollout_id in kept_ids]
        self.tokens.discard("rejected", sum(s.trained_tokens for s in batch.samples if s.rollout_id not in kept_ids))
        self.empty_rounds += not samples
        # The last round: `rounds` of them trained (empty ones within `max_empty_rounds` do not count).
        self.last_step = step + 1 - self.empty_rounds >= cfg.rounds or step + 1 >= self.config.total_steps
        if samples:
            self.phase = "learner update"
            metrics = await asyncio.to_thread(self._supervised_update, samples)
            self.phase = "rollouts"
            self.tokens.train(int(metrics.pop("tokens_trained", 0)))
            self.tokens.discard("update_cap", int(metrics.pop("tokens_update_cap", 0)))
            metrics["nll"] = metrics.pop("pg_loss")
            for key in _POLICY_GRADIENT_METRICS:
                metrics.pop(key, None)
            metrics["update_skipped"] = 0.0
        else:
            logger.warning(
                "RFT round %d: none of %d rollouts was selected (%s, reward_threshold=%s); no update",
                step + 1,
                len(scored),
                cfg.selection,
                cfg.reward_threshold,
            )
            metrics = self.learner.skip_step(samples)
        rewards = [r.reward for r in scored]
        metrics.update(
            {
                "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
                "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
                "rollouts": float(batch.rollouts),
                "rollouts_failed": float(batch.failed),
                "rollouts_timed_out": float(batch.timed_out),
                "selected_rollouts": float(len(kept)),
                "selected_reward_mean": statistics.fmean(r.reward for r in kept) if kept else 0.0,
                "groups_selected": float(len({r.group_id for r in kept})),
                "rows_trained": float(len(samples)),
                "triplets_skipped": float(batch.counters.get("skipped_triplets", 0)),
                "rollout_wait_s": batch.wait_s,
                "step_time_s": time.perf_counter() - started,
                "weights_version": float(self.server.weights_version),
            }
        )
        return metrics

    def _supervised_update(self, samples: Sequence[Any]) -> Dict[str, float]:
        assert self.learner is not None and self.server is not None
        with self.server.engine.exclusive(weights_change=True):  # no generation while the shared weights change
            metrics = self.learner.step(samples, objective="nll")
        self.phase = "weight swap"
        self.server.update_weights(self.learner.policy)
        metrics["weight_sync_ms"] = self.server.weight_sync_ms[-1]
        metrics.update(self.check_weight_sync())
        return metrics
