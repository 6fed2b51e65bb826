"""Start verl's workers and run `AgentLightningTrainer` in this process, on our store and datasets.

verl's own entrypoint reads parquet files and runs the trainer inside a Ray actor; here the tasks are the
Python datasets given to `Trainer.fit`, and the trainer runs in the algorithm's thread so it talks to the
store the execution strategy serves. Needs the `verl` extra and GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from agentlightning.adapter.base import TraceAdapter
from agentlightning.store.base import LightningStore

__all__ = ["run_ppo", "TaskDataset"]


class TaskDataset:
    """Agent tasks (dicts) as a map-style dataset verl's dataloader can batch.

    Each item carries the task's fields (they become `non_tensor_batch` columns, then rollout inputs) and
    a one-element `fake_ids` tensor, so verl's collate function produces a tensor batch to take the
    device from.
    """

    def __init__(self, tasks: Sequence[Any]) -> None:
        for index, task in enumerate(tasks):
            if not isinstance(task, dict):
                raise TypeError(f"VERL tasks must be dicts (their keys become batch columns); task {index} is {task!r}")
        self.tasks = list(tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        return {**self.tasks[index], "fake_ids": torch.zeros(1, dtype=torch.long)}


def run_ppo(
    config: Any,
    train_dataset: Optional[Sequence[Any]] = None,
    val_dataset: Optional[Sequence[Any]] = None,
    *,
    store: Optional[LightningStore] = None,
    llm_proxy: Any = None,
    adapter: Optional[TraceAdapter[Any]] = None,
    trainer_cls: Optional[type[Any]] = None,
    daemon_cls: Optional[type[Any]] = None,
) -> None:
    """Build verl's worker groups like `verl.trainer.main_ppo_v0.TaskRunner` does, then fit.

    v1.0's call, `run_ppo(config, train_dataset, val_dataset)` (no store), trains a harnessed agent
    instead: a `Trainer` with the `VERL` algorithm runs `agentlightning.local.agent_class` per rollout in
    its own process (see `launch.fit_harnessed_agent`).
    """
    if store is None:
        from .launch import fit_harnessed_agent  # composes trainer-level parts; only on this path

        fit_harnessed_agent(config, train_dataset, val_dataset)
        return
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.workers.config import HFModelConfig

    from .daemon import AgentModeDaemon
    from .trainer import AgentLightningTrainer

    if train_dataset is None:
        raise ValueError("VERL needs a train_dataset: pass it to Trainer.fit(agent, train_dataset=...)")
    if not ray.is_initialized():
        ray.init(runtime_env=get_ppo_ray_runtime_env(config), **dict(config.ray_kwargs.get("ray_init", {}) or {}))
    OmegaConf.resolve(config)

    workers = BaseTaskRunner()
    actor_rollout_cls, worker_group_cls = workers.add_actor_rollout_worker(config)
    workers.add_critic_worker(config)
    workers.add_reward_model_resource_pool(config)
    workers.add_ref_policy_worker(config, actor_rollout_cls)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)

    trainer = (trainer_cls or AgentLightningTrainer)(
        store=store,
        llm_proxy=llm_proxy,
        adapter=adapter,
        daemon_cls=daemon_cls or AgentModeDaemon,
        config=config,
        tokenizer=model_config.tokenizer,
        processor=model_config.processor,
        role_worker_mapping=workers.role_worker_mapping,
        resource_pool_manager=workers.init_resource_pool_mgr(config),
        ray_worker_group_cls=worker_group_cls,
        train_dataset=TaskDataset(train_dataset),
        val_dataset=TaskDataset(val_dataset) if val_dataset is not None else None,
        collate_fn=collate_fn,
    )
    trainer.init_workers()
    trainer.fit()
