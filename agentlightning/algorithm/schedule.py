"""Schedules: several algorithms run one after another on one store, each starting from what the last left.

`Trainer(algorithm=[agl.APO(...), agl.GRPO(...)])` (or `agl.Schedule([...])`) runs APO, then GRPO with
APO's best prompt among its initial resources; `[agl.RFT(...), agl.GRPO(...)]` runs GRPO on the weights
RFT trained. What passes from one stage to the next:

- resources: a stage's `get_result_resources()` (APO's and GEPA's best prompt next to the other
  resources) become the next stage's initial resources; a stage that changes none passes on its own;
- weights: the last stage that trained weights (RFT, GRPO) hands them (`get_trained_policy()`, asked for
  only then) to the next stage that trains weights (`continue_from`), skipping the stages in between (a
  prompt optimizer between RFT and GRPO).

All stages share the trainer's store, runners, LLM proxy and datasets. Each gets the trainer's adapter
when it reads what that adapter produces (`accepts_adapter`), else its own default: messages for the
prompt optimizers, triplets for the weight trainers.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from agentlightning.types import Dataset, NamedResources

from .base import Algorithm, TrainedPolicy

if TYPE_CHECKING:
    from agentlightning.adapter import TraceAdapter

__all__ = ["Schedule", "StageRecord"]

logger = logging.getLogger(__name__)


@dataclass
class StageRecord:
    """What one stage of a schedule did."""

    index: int
    algorithm: str
    seconds: float
    resources_passed_on: list[str]
    """Names of the resources the next stage started from (after this stage)."""
    passed_weights: bool
    """Whether a later stage continued from the weights this one trained."""


class Schedule(Algorithm):
    """Run `stages` in order on the trainer's store; see the module docstring for what passes between them.

    Args:
        stages: the algorithms, in order (instances; each runs once).
    """

    def __init__(self, stages: Sequence[Algorithm]) -> None:
        stages = list(stages)
        if not stages:
            raise ValueError("a schedule needs at least one algorithm, got an empty list")
        for index, stage in enumerate(stages):
            if not isinstance(stage, Algorithm):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise TypeError(
                    f"schedule stage {index} is {type(stage).__name__}, not an agl.Algorithm; "
                    "pass algorithm instances such as agl.APO(...) or agl.GRPO(...)"
                )
        if len({id(stage) for stage in stages}) != len(stages):
            raise ValueError("the same algorithm instance appears twice in the schedule; create one per stage")
        self.stages = stages
        self.records: list[StageRecord] = []
        self._adapters: list[TraceAdapter[Any]] = []  # stages hold adapters weakly; keep defaults alive
        self._resources: Optional[NamedResources] = None
        self._trainers: list[Algorithm] = []

    def __repr__(self) -> str:
        return f"Schedule([{', '.join(type(stage).__name__ for stage in self.stages)}])"

    def get_result_resources(self) -> Optional[NamedResources]:
        return self._resources

    def describe_phase(self) -> str:
        """The running stage's phase (`GRPO.describe_phase`), named after the stage; "" when it tells none."""
        stage = getattr(self, "_running", None)
        describe = getattr(stage, "describe_phase", None)
        phase = describe() if callable(describe) else ""
        return f"{type(stage).__name__} {phase}" if phase else ""

    def get_trained_policy(self) -> Optional[TrainedPolicy]:
        """The weights of the last stage that trained some (asked for only when this is called)."""
        handed = _latest_policy(list(enumerate(self._trainers)))
        return handed[1] if handed is not None else None

    def accepts_adapter(self, adapter: TraceAdapter[Any]) -> bool:
        return True

    async def run(  # type: ignore[override]
        self,
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        resources = self.get_initial_resources()
        trainers: list[tuple[int, Algorithm]] = []  # stages that may have trained weights since the last hand-over
        self.records = []
        for index, stage in enumerate(self.stages):
            name = type(stage).__name__
            self._running = stage
            logger.info("Schedule stage %d/%d: %s", index + 1, len(self.stages), name)
            self._wire(stage, resources)
            if trainers and _overrides(stage, "continue_from"):
                handed = _latest_policy(trainers)
                if handed is not None:
                    stage.continue_from(handed[1])
                    self.records[handed[0]].passed_weights = True
                    logger.info("%s continues from the weights %s trained", name, handed[1].trained_by)
                trainers = []
            started = time.monotonic()
            await _run_stage(stage, train_dataset, val_dataset)
            result = stage.get_result_resources()
            if result is not None:
                resources = dict(result)
            if _overrides(stage, "get_trained_policy"):
                trainers.append((index, stage))
            self.records.append(
                StageRecord(
                    index=index,
                    algorithm=name,
                    seconds=round(time.monotonic() - started, 3),
                    resources_passed_on=sorted(resources or {}),
                    passed_weights=False,
                )
            )
        self._resources = resources
        self._trainers = [stage for _index, stage in trainers]

    def _wire(self, stage: Algorithm, resources: Optional[NamedResources]) -> None:
        """Give a stage what the trainer gave the schedule, and the resources the previous stage left."""
        stage.set_store(self.get_store())
        try:
            stage.set_trainer(self.get_trainer())
        except ValueError:
            pass  # run outside a trainer (tests, scripts): stages do without one too
        stage.set_llm_proxy(self.get_llm_proxy())
        adapter = self.get_adapter() if self.has_adapter() else None
        if adapter is None or not stage.accepts_adapter(adapter):
            default = stage.default_adapter()
            if default is not None:
                self._adapters.append(default)
                adapter = default
                logger.info("Schedule: %s reads spans with its own %s", type(stage).__name__, type(default).__name__)
        if adapter is not None:
            stage.set_adapter(adapter)
        if resources is not None:
            stage.set_initial_resources(dict(resources))


def _latest_policy(trainers: list[tuple[int, Algorithm]]) -> Optional[tuple[int, TrainedPolicy]]:
    """The weights of the latest stage that has some, asked for only now: handing weights over may change
    the stage's model (LoRA merged in)."""
    for index, stage in reversed(trainers):
        policy = stage.get_trained_policy()
        if policy is not None:
            return index, policy
    return None


def _overrides(stage: Algorithm, method: str) -> bool:
    """Whether the stage's class overrides an `Algorithm` method: `continue_from` (it takes weights from an
    earlier stage), `get_trained_policy` (it leaves weights for a later one)."""
    return getattr(type(stage), method) is not getattr(Algorithm, method)


async def _run_stage(
    stage: Algorithm, train_dataset: Optional[Dataset[Any]], val_dataset: Optional[Dataset[Any]]
) -> None:
    if stage.is_async():
        result = stage.run(train_dataset=train_dataset, val_dataset=val_dataset)
    else:  # a blocking algorithm must not stall the loop the runners and the store server share
        result = await asyncio.to_thread(stage.run, train_dataset=train_dataset, val_dataset=val_dataset)
    if inspect.isawaitable(result):
        await result
