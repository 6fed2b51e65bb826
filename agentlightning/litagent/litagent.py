"""`LitAgent`: the base class of every agent a runner can execute."""

from __future__ import annotations

import warnings
import weakref
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar

from agentlightning.types import NamedResources, Rollout, RolloutRawResult
from agentlightning.types.protocols import RunnerLike

if TYPE_CHECKING:
    from agentlightning.tracer.base import Tracer

__all__ = ["LitAgent"]

T_task = TypeVar("T_task")

# The async variants a subclass may override; overriding any of them makes the agent async.
_ASYNC_METHODS = ("rollout_async", "training_rollout_async", "validation_rollout_async")


class LitAgent(Generic[T_task]):
    """An agent that turns one task (plus resources) into a rollout result.

    Override `rollout` (sync) or `rollout_async` (async); override `training_rollout*` /
    `validation_rollout*` only when training and validation must behave differently. The runner calls the
    training variant when `rollout.mode == "train"` and the validation variant otherwise. The return value
    is a `RolloutRawResult`: None (spans come from the tracer), a float reward, or a list of spans.
    """

    def __init__(self, *, trained_agents: Optional[str] = None) -> None:
        if trained_agents is not None:
            warnings.warn(
                "LitAgent(trained_agents=...) is deprecated; select the trained agent with the adapter's "
                "`agent_match` instead, e.g. TracerTraceToTriplet(agent_match=...).",
                DeprecationWarning,
                stacklevel=2,
            )
        self.trained_agents = trained_agents
        self._trainer_ref: Optional[weakref.ReferenceType[Any]] = None
        self._runner_ref: Optional[weakref.ReferenceType[RunnerLike]] = None

    def __getstate__(self) -> dict[str, Any]:
        # Weak references cannot be pickled; a copy sent to another process is re-linked there.
        state = self.__dict__.copy()
        state["_trainer_ref"] = None
        state["_runner_ref"] = None
        return state

    def is_async(self) -> bool:
        """True when the subclass overrides any async rollout variant (the runner then awaits it)."""
        cls = type(self)
        return any(getattr(cls, name) is not getattr(LitAgent, name) for name in _ASYNC_METHODS)

    # ---- links to the trainer and the runner (weak, so the agent never keeps them alive) ----

    def set_trainer(self, trainer: Any) -> None:
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Any:
        """The trainer running this agent; raises ValueError if none was set or it was garbage-collected."""
        if self._trainer_ref is None:
            raise ValueError(f"no trainer is set on {type(self).__name__}; call set_trainer() or use Trainer.fit()")
        trainer = self._trainer_ref()
        if trainer is None:
            raise ValueError(f"the trainer of {type(self).__name__} was garbage-collected; keep a reference to it")
        return trainer

    @property
    def trainer(self) -> Any:
        return self.get_trainer()

    def get_tracer(self) -> Tracer:
        """The trainer's tracer, or the runner's tracer when the agent runs without a trainer."""
        if self._trainer_ref is not None and self._trainer_ref() is not None:
            return self.get_trainer().tracer
        if self._runner_ref is not None:
            runner = self._runner_ref()
            tracer = getattr(runner, "tracer", None)
            if tracer is not None:
                return tracer
        raise ValueError(
            f"{type(self).__name__} has no tracer: it is attached neither to a trainer nor to a runner with a tracer"
        )

    @property
    def tracer(self) -> Tracer:
        return self.get_tracer()

    def set_runner(self, runner: RunnerLike) -> None:
        self._runner_ref = weakref.ref(runner)

    def get_runner(self) -> RunnerLike:
        """The runner executing this agent; raises ValueError if none was set or it was garbage-collected."""
        if self._runner_ref is None:
            raise ValueError(f"no runner is set on {type(self).__name__}; call set_runner() or Runner.init(agent)")
        runner = self._runner_ref()
        if runner is None:
            raise ValueError(f"the runner of {type(self).__name__} was garbage-collected; keep a reference to it")
        return runner

    @property
    def runner(self) -> RunnerLike:
        return self.get_runner()

    # ---- legacy (v0.1) lifecycle hooks, called only by the deprecated LegacyAgentRunner ----

    def on_rollout_start(self, task: Any, runner: Any, tracer: Any) -> None:
        """Deprecated: called before a legacy rollout starts. Use `agentlightning.Hook.on_rollout_start`."""

    def on_rollout_end(self, task: Any, rollout: Any, runner: Any, tracer: Any) -> None:
        """Deprecated: called after a legacy rollout ends. Use `agentlightning.Hook.on_rollout_end`."""

    # ---- rollout variants ----

    def rollout(self, task: T_task, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run one task synchronously. Subclasses override this or `rollout_async`."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement rollout(task, resources, rollout) or rollout_async(...)"
        )

    async def rollout_async(self, task: T_task, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run one task asynchronously. Subclasses override this or `rollout`."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement rollout_async(task, resources, rollout) or rollout(...)"
        )

    def training_rollout(self, task: T_task, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Rollout for mode "train"; defaults to `rollout`."""
        return self.rollout(task, resources, rollout)

    def validation_rollout(self, task: T_task, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Rollout for modes "val"/"test"/None; defaults to `training_rollout`."""
        return self.training_rollout(task, resources, rollout)

    async def training_rollout_async(
        self, task: T_task, resources: NamedResources, rollout: Rollout
    ) -> RolloutRawResult:
        """Async rollout for mode "train"; defaults to `rollout_async`."""
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(
        self, task: T_task, resources: NamedResources, rollout: Rollout
    ) -> RolloutRawResult:
        """Async rollout for modes "val"/"test"/None; defaults to `training_rollout_async`."""
        return await self.training_rollout_async(task, resources, rollout)
