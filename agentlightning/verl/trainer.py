"""AgentLightningTrainer: verl's `RayPPOTrainer` with generation replaced by our runners (via AgentModeDaemon).

verl keeps what it is good at (FSDP actor/critic/ref workers, vLLM replicas, advantage estimators, weight
sync); the daemon supplies the batch: rollouts run by our runners against the vLLM replicas through the
LLM proxy, adapted to token ids. Per step: wake the replicas with the current weights, run the batch's
rollouts, build the batch, recompute old/ref log-probs and values, compute advantages on the raw samples
(one per rollout by default), drop over-long prompts, cap the PPO updates, weigh every rollout the same in
the loss (by default), and update. With `async_rollout`, rollouts not trained this step keep running:
the LLM proxy holds their calls while the replicas sleep. Needs the `verl` extra and GPUs (written against
verl 0.9.1; see `agentlightning.verl.versions`); the RL choices live in `objectives.py` (CPU-tested).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pprint import pprint
from typing import Any, Optional

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm import tqdm
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.core_algos import agg_loss
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, apply_kl_penalty, compute_advantage
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics

from agentlightning.adapter.base import TraceAdapter
from agentlightning.store.base import LightningStore
from agentlightning.tracking import Tracker

from .config import PER_ROLLOUT_MEAN, daemon_options, make_verl_tracker
from .daemon import AgentModeDaemon
from .objectives import per_rollout_loss_weights, rollout_level_advantages, samples_within_update_cap

__all__ = ["AgentLightningTrainer"]


class AgentLightningTrainer(RayPPOTrainer):
    """PPO/GRPO where rollouts come from agent-lightning runners instead of verl's agent loop."""

    def __init__(
        self,
        store: Optional[LightningStore],
        llm_proxy: Any,
        adapter: Optional[TraceAdapter[Any]],
        daemon_cls: type[AgentModeDaemon] = AgentModeDaemon,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.llm_proxy = llm_proxy
        self.adapter = adapter
        self.daemon_cls = daemon_cls
        self.agent_mode_daemon: Optional[AgentModeDaemon] = None
        self._batches: Iterator[dict[str, Any]] = iter(())

    # ---- the daemon ----

    def _make_daemon(self) -> AgentModeDaemon:
        return self.daemon_cls(
            **daemon_options(self.config),
            tokenizer=self.tokenizer,
            pad_token_id=self.tokenizer.pad_token_id,
            store=self.store,
            llm_proxy=self.llm_proxy,
            adapter=self.adapter,
        )

    def _hold_rollouts(self, daemon: AgentModeDaemon) -> None:
        """Async: hold the calls of carried-over rollouts at the proxy while the replicas sleep."""
        gate = getattr(daemon.llm_proxy, "gate", None)
        if daemon.async_rollout and getattr(daemon.llm_proxy, "launch_mode", None) == "mp":
            logging.getLogger(__name__).warning(
                "async_rollout: the LLM proxy serves from another process (launch_mode='mp') and cannot hold calls "
                "while the replicas sleep; calls made then fail. Give VERL no llm_proxy, or one with launch_mode='thread'"
            )
        if daemon.async_rollout and gate is not None:
            gate.pause("training step")
            gate.drain(timeout=float(self.config.agentlightning.get("llm_timeout_seconds", 1200.0)))

    def _release_rollouts(self, daemon: AgentModeDaemon) -> None:
        daemon.on_weights_updated()
        gate = getattr(daemon.llm_proxy, "gate", None)
        if gate is not None:
            gate.resume()

    def _server_addresses(self) -> list[str]:
        manager: Any = self.llm_server_manager  # created by verl's init_workers (sync through auto_await)
        return list(manager.server_addresses)

    def _rollouts(self, batch: DataProto, is_train: bool) -> AgentModeDaemon:
        daemon = self.agent_mode_daemon
        assert daemon is not None
        daemon.set_up_data_and_server(batch.non_tensor_batch, self._server_addresses(), is_train=is_train)
        if is_train and daemon.async_rollout and daemon.max_in_flight is not None:
            # Keep async_train_batch_size tasks in flight: the batches taken here are skipped by fit's loop.
            size = int(self.config.data.train_batch_size)
            while daemon.in_flight_groups() + size <= daemon.max_in_flight:
                extra = next(self._batches, None)
                if extra is None:
                    break
                more = DataProto.from_single_dict(extra).non_tensor_batch
                daemon.set_up_data_and_server(more, self._server_addresses(), is_train=True)
        daemon.run_until_all_finished()
        return daemon

    def _sample_lengths(self) -> tuple[int, int]:
        """Token budgets of a sample: `data.*` per LLM call, `trace_aggregator.trajectory_*` per rollout."""
        aggregator = self.config.agentlightning.trace_aggregator
        if aggregator.level == "trajectory":
            return int(aggregator.trajectory_max_prompt_length), int(aggregator.trajectory_max_response_length)
        return int(self.config.data.max_prompt_length), int(self.config.data.max_response_length)

    # ---- validation ----

    def _validate(self, merged: bool = False) -> dict[str, Any]:
        if len(self.val_dataloader) != 1:
            raise ValueError("agent mode validates in one batch; set data.val_batch_size to null")
        test_batch = DataProto.from_single_dict(next(iter(self.val_dataloader)))
        daemon = self._rollouts(test_batch, is_train=False)
        metrics = daemon.get_test_metrics()
        daemon.clear_data_and_server()
        return metrics

    def _advantages(self, batch: Any, metrics: dict[str, Any]) -> Any:
        """Rewards (with the KL penalty when configured), then advantages: per rollout, or verl's per sample."""
        if self.config.algorithm.use_kl_in_reward:
            kl_ctrl: Any = self.kl_ctrl_in_reward
            batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=kl_ctrl, kl_penalty=self.config.algorithm.kl_penalty)
            metrics.update(kl_metrics)
        else:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
        algorithm = self.config.algorithm
        if self.config.agentlightning.advantage_level == "rollout":
            advantages, returns = rollout_level_advantages(
                batch.batch["token_level_rewards"],
                batch.batch["response_mask"],
                batch.non_tensor_batch["rollout_id_list"],
                batch.non_tensor_batch["uid"],
                estimator=str(algorithm.adv_estimator),
                norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True),
                config=algorithm,
            )
            batch.batch["advantages"], batch.batch["returns"] = advantages, returns
            return batch
        return compute_advantage(
            batch,
            adv_estimator=algorithm.adv_estimator,
            gamma=algorithm.gamma,
            lam=algorithm.lam,
            num_repeat=self.config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True),
            config=algorithm,
        )

    def _trim_for_update(self, batch: Any, metrics: dict[str, Any]) -> Any:
        """Only now (advantages saw every sample) drop over-long prompts, keep whole PPO mini-batches within
        the update cap, and weigh each rollout the same in the loss."""
        agl_config = self.config.agentlightning
        actor_config = self.config.actor_rollout_ref.actor
        keep = (~batch.batch["is_drop_mask"]).nonzero(as_tuple=True)[0]
        metrics["training/n_triplets_prompt_too_long"] = int(batch.batch["is_drop_mask"].shape[0] - keep.shape[0])
        batch = batch[keep]
        mini_batch_size = actor_config.ppo_mini_batch_size
        order = list(range(len(batch)))
        random.shuffle(order)
        batch.reorder(torch.tensor(order, dtype=torch.int32))
        whole = len(batch) // mini_batch_size * mini_batch_size
        kept = samples_within_update_cap(
            len(batch), mini_batch_size, int(actor_config.ppo_epochs), agl_config.get("max_ppo_update_times")
        )
        metrics["training/n_triplets_dropped_remainder"] = len(batch) - whole
        metrics["training/n_samples_dropped_update_cap"] = whole - kept
        if kept == 0:
            raise RuntimeError(
                f"only {len(batch)} samples left, fewer than ppo_mini_batch_size={mini_batch_size}; "
                "raise data.train_batch_size or rollout.n, or lower ppo_mini_batch_size"
            )
        batch = batch[list(range(kept))]
        if agl_config.loss_aggregation == PER_ROLLOUT_MEAN:
            weights = per_rollout_loss_weights(batch.batch["response_mask"], batch.non_tensor_batch["rollout_id_list"])
            batch.batch["advantages"] = batch.batch["advantages"] * weights
        return batch

    # ---- one training step ----

    def _train_step(self, batch_dict: dict[str, Any]) -> dict[str, Any]:
        gen_batch = DataProto.from_single_dict(batch_dict)
        metrics: dict[str, Any] = {}
        timing_raw: dict[str, float] = {}
        with marked_timer("step", timing_raw):
            with marked_timer("gen", timing_raw):
                daemon = self._rollouts(gen_batch, is_train=True)
                batch: Any
                max_prompt_length, max_response_length = self._sample_lengths()
                batch, agent_metrics = daemon.get_train_data_batch(
                    max_prompt_length=max_prompt_length,
                    max_response_length=max_response_length,
                    device=gen_batch.batch["fake_ids"].device,
                )
                metrics.update(agent_metrics)
                daemon.clear_data_and_server()
                self._hold_rollouts(daemon)
                checkpoint_manager: Any = self.checkpoint_manager
                checkpoint_manager.sleep_replicas()

            # GRPO groups by `uid`: the rollouts of one sample share its data id.
            batch.non_tensor_batch["uid"] = batch.non_tensor_batch["data_id_list"]
            batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
            batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature

            # Workers need the batch divisible by their world size; advantages use the raw samples.
            batch, pad_size = pad_dataproto_to_divisor(batch, self.actor_rollout_wg.world_size)
            with marked_timer("old_log_prob", timing_raw):
                old_log_prob, _ = self._compute_old_log_prob(batch)
                actor_config = self.config.actor_rollout_ref.actor
                entropy = agg_loss(
                    loss_mat=old_log_prob.batch["entropys"],
                    loss_mask=batch.batch["response_mask"],
                    loss_agg_mode=actor_config.loss_agg_mode,
                    loss_scale_factor=actor_config.get("loss_scale_factor"),
                )
                metrics["actor/entropy"] = entropy.detach().item()
                old_log_prob.batch.pop("entropys")
                batch = batch.union(old_log_prob)
            if self.use_reference_policy:
                with marked_timer("ref", timing_raw):
                    batch = batch.union(self._compute_ref_log_prob(batch))
            if self.use_critic:
                with marked_timer("values", timing_raw):
                    batch = batch.union(self._compute_values(batch))
            batch = unpad_dataproto(batch, pad_size=pad_size)

            with marked_timer("adv", timing_raw):
                batch = self._advantages(batch, metrics)
            batch = self._trim_for_update(batch, metrics)
            if self.config.trainer.balance_batch:
                self._balance_batch(batch, metrics=metrics)

            if self.use_critic:
                with marked_timer("update_critic", timing_raw):
                    metrics.update(reduce_metrics(self._update_critic(batch).meta_info["metrics"]))
            if self.config.trainer.critic_warmup <= self.global_steps:
                with marked_timer("update_actor", timing_raw):
                    metrics.update(reduce_metrics(self._update_actor(batch).meta_info["metrics"]))
            with marked_timer("update_weights", timing_raw):
                checkpoint_manager.update_weights(self.global_steps)
            self._release_rollouts(daemon)

        metrics.update(compute_data_metrics(batch=batch, use_critic=self.use_critic))
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
        return metrics

    # ---- the loop ----

    def fit(self) -> None:
        from verl.utils.tracking import Tracking

        logger = Tracking(
            project_name=self.config.trainer.project_name,
            experiment_name=self.config.trainer.experiment_name,
            default_backend=self.config.trainer.logger,
            config=OmegaConf.to_container(self.config, resolve=True),
        )
        tracker = make_verl_tracker(self.config)
        try:
            self._fit(logger, tracker)
        finally:
            tracker.finish()

    def _fit(self, logger: Any, tracker: Tracker) -> None:
        self.global_steps = 0
        self._load_checkpoint()
        checkpoint_manager: Any = self.checkpoint_manager
        checkpoint_manager.update_weights(self.global_steps)
        self.agent_mode_daemon = self._make_daemon()
        self.agent_mode_daemon.start()
        try:
            if self.val_dataset is not None and self.config.trainer.get("val_before_train", True):
                val_metrics = self._validate()
                pprint(f"Initial validation metrics: {val_metrics}")
                logger.log(data=val_metrics, step=self.global_steps)
                tracker.log_metrics(val_metrics, self.global_steps)
                if self.config.trainer.get("val_only", False):
                    return
            progress = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training")
            self.global_steps += 1
            for epoch in range(self.config.trainer.total_epochs):
                self._batches = iter(self.train_dataloader)
                for batch_dict in self._batches:
                    is_last_step = self.global_steps >= self.total_training_steps
                    metrics = self._train_step(batch_dict)
                    test_freq = self.config.trainer.test_freq
                    if (
                        self.val_dataset is not None
                        and test_freq > 0
                        and (is_last_step or self.global_steps % test_freq == 0)
                    ):
                        metrics.update(self._validate())
                    save_freq = self.config.trainer.save_freq
                    if save_freq > 0 and (is_last_step or self.global_steps % save_freq == 0):
                        self._save_checkpoint()
                    metrics.update({"training/global_step": self.global_steps, "training/epoch": epoch})
                    logged = {k: _scalar(v) for k, v in metrics.items()}
                    logger.log(data=logged, step=self.global_steps)
                    tracker.log_metrics(logged, self.global_steps)
                    progress.update(1)
                    if is_last_step:
                        progress.close()
                        return
                    self.global_steps += 1
        finally:
            self.agent_mode_daemon.stop()


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, (np.generic, torch.Tensor)) and np.size(value) == 1 else value
