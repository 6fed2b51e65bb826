"""The Algorithm base class: what the trainer hands an algorithm and how the algorithm reaches it."""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Optional, Union

from agentlightning.tracking import NullTracker, Tracker, TrackingSpec, make_tracker
from agentlightning.types import Dataset, NamedResources
from agentlightning.types.protocols import TrainerLike

if TYPE_CHECKING:
    from agentlightning.adapter import TraceAdapter
    from agentlightning.llm_proxy import LLMProxy
    from agentlightning.store.base import LightningStore

__all__ = ["Algorithm", "TrainedPolicy"]


@dataclass
class TrainedPolicy:
    """Weights an algorithm trained, handed to the next algorithm of a schedule that trains the same model."""

    model: Any
    """A Hugging Face causal LM (`torch.nn.Module`), LoRA merged into it."""
    tokenizer: Any
    source: str
    """What it was loaded from ("smollm2", a path or hub id; "a loaded model" otherwise), for messages."""
    trained_by: str
    """The algorithm that trained it ("RFT", "GRPO")."""


class Algorithm:
    """Drives training: enqueues rollouts into the store, publishes resources and learns from spans.

    The trainer injects the store (strong reference), and the trainer, adapter and LLM proxy (weak
    references, so an algorithm never keeps a finished trainer alive). Subclasses implement `run`,
    either as a plain method or as a coroutine.
    """

    _trainer_ref: Optional[weakref.ReferenceType[Any]] = None
    _llm_proxy_ref: Optional[weakref.ReferenceType[Any]] = None
    _adapter_ref: Optional[weakref.ReferenceType[Any]] = None
    _store: Optional[LightningStore] = None
    _initial_resources: Optional[NamedResources] = None
    _tracker: Optional[Tracker] = None
    _owns_tracker: bool = False

    def is_async(self) -> bool:
        """Whether `run` is a coroutine function (the trainer awaits it) or a plain function."""
        return inspect.iscoroutinefunction(self.run)

    # ---- trainer ----

    def set_trainer(self, trainer: TrainerLike) -> None:
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> TrainerLike:
        if self._trainer_ref is None:
            raise ValueError(f"{type(self).__name__} has no trainer; pass the algorithm to agl.Trainer(algorithm=...)")
        trainer = self._trainer_ref()
        if trainer is None:
            raise ValueError(f"the trainer of {type(self).__name__} was garbage collected; keep a reference to it")
        return trainer

    # ---- LLM proxy ----

    def set_llm_proxy(self, llm_proxy: Optional[LLMProxy]) -> None:
        self._llm_proxy_ref = weakref.ref(llm_proxy) if llm_proxy is not None else None

    def get_llm_proxy(self) -> Optional[LLMProxy]:
        """The LLM proxy configured on the trainer, or None when there is none."""
        if self._llm_proxy_ref is None:
            return None
        proxy = self._llm_proxy_ref()
        if proxy is None:
            raise ValueError(f"the LLM proxy of {type(self).__name__} was garbage collected; keep a reference to it")
        return proxy

    # ---- adapter ----

    def set_adapter(self, adapter: TraceAdapter[Any]) -> None:
        self._adapter_ref = weakref.ref(adapter)

    def get_adapter(self) -> TraceAdapter[Any]:
        if self._adapter_ref is None:
            raise ValueError(f"{type(self).__name__} has no adapter; pass one with agl.Trainer(adapter=...)")
        adapter = self._adapter_ref()
        if adapter is None:
            raise ValueError(f"the adapter of {type(self).__name__} was garbage collected; keep a reference to it")
        return adapter

    def has_adapter(self) -> bool:
        """Whether an adapter is set and still alive."""
        return self._adapter_ref is not None and self._adapter_ref() is not None

    # ---- store ----

    def set_store(self, store: LightningStore) -> None:
        self._store = store

    def get_store(self) -> LightningStore:
        if self._store is None:
            raise ValueError(
                f"{type(self).__name__} has no store; run it through agl.Trainer or call set_store(store) first"
            )
        return self._store

    # ---- resources ----

    def set_initial_resources(self, resources: NamedResources) -> None:
        self._initial_resources = resources

    def get_initial_resources(self) -> Optional[NamedResources]:
        """Resources given to the trainer as `initial_resources`, or None."""
        return self._initial_resources

    # ---- experiment tracking ----

    def set_tracker(self, tracker: Optional[Tracker]) -> None:
        """Use `tracker` (the trainer's `tracking=`) instead of starting one from the algorithm's own setting."""
        self._tracker, self._owns_tracker = tracker, False

    def get_tracker(self) -> Tracker:
        """Where to log metrics: the trainer's tracker, the one `start_tracking` started, or a `NullTracker`."""
        return self._tracker if self._tracker is not None else NullTracker()

    def start_tracking(
        self,
        spec: TrackingSpec,
        *,
        config: Mapping[str, Any],
        run_name: Optional[str] = None,
        dir: Optional[str] = None,
    ) -> Tracker:
        """Log `config` to the trainer's tracker, or start the backends `spec` names (None: `AGL_TRACKING`)."""
        if self._tracker is not None:
            self._tracker.log_config(config)
            return self._tracker
        self._tracker = make_tracker(spec, config=config, run_name=run_name, dir=dir)
        self._owns_tracker = True
        return self._tracker

    def finish_tracking(self) -> None:
        """Finish the tracker `start_tracking` started (the trainer finishes its own)."""
        if self._owns_tracker and self._tracker is not None:
            tracker, self._tracker, self._owns_tracker = self._tracker, None, False
            tracker.finish()

    # ---- schedules: what one algorithm hands to the next ----

    def accepts_adapter(self, adapter: TraceAdapter[Any]) -> bool:
        """Whether this algorithm reads what `adapter` produces; in a schedule a stage that does not gets
        `default_adapter()` instead of the trainer's adapter."""
        return True

    def default_adapter(self) -> Optional[TraceAdapter[Any]]:
        """The adapter to use when the trainer's is not one this algorithm reads (None: the trainer's)."""
        return None

    def get_result_resources(self) -> Optional[NamedResources]:
        """The resources this algorithm leaves to the next one of a schedule (e.g. the best prompt it found,
        next to the other initial resources); None when it changes none."""
        return None

    def get_trained_policy(self) -> Optional[TrainedPolicy]:
        """Weights this algorithm trained, for the next policy-training algorithm of a schedule (None: none)."""
        return None

    def continue_from(self, policy: TrainedPolicy) -> None:
        """Start from `policy` (trained by an earlier algorithm of the schedule) instead of loading a model.
        Algorithms that train no weights ignore it."""
        return None

    # ---- running ----

    def run(
        self,
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> Union[None, Awaitable[None]]:
        """Train (and validate) over the datasets. Subclasses override this, sync or async."""
        raise NotImplementedError(f"{type(self).__name__} must implement run(train_dataset, val_dataset)")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    def get_client(self) -> LightningStore:
        """Deprecated: the v0.1 client is gone; returns the store, which is what to use instead."""
        warnings.warn("Algorithm.get_client() is deprecated; use get_store()", DeprecationWarning, stacklevel=2)
        return self.get_store()
