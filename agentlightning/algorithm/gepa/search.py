"""Watching gepa's search: each completed iteration saves the search state in the store and publishes the
best candidate (`<run>-best`, the latest resources) and the Pareto front (`<run>-frontier`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Optional

from agentlightning.store.base import LightningStore
from agentlightning.types import NamedResources, PromptTemplate

from ..state import save_algorithm_state
from .adapter import StoreAdapter
from .bridge import LoopBridge
from .persistence import state_to_json
from .reflection import ReflectionModel

if TYPE_CHECKING:
    from gepa import GEPAResult
    from gepa.core.state import GEPAState

__all__ = ["SearchRecorder", "frontier_resources", "placeholder_reflection_prompt"]

logger = logging.getLogger(__name__)

_KEEP_PLACEHOLDERS = (
    "The instruction is a template that the application fills in: keep every placeholder (such as {question} or "
    "{{ question }}) exactly as it is written in the current instruction.\n\n"
)


def placeholder_reflection_prompt() -> str:
    """gepa's reflection prompt, plus the rule that a template's placeholders must survive the rewrite."""
    from gepa.strategies.instruction_proposal import InstructionProposalSignature

    default = InstructionProposalSignature.default_prompt_template
    marker = "Provide the new instructions within ``` blocks."
    return (
        default.replace(marker, _KEEP_PLACEHOLDERS + marker)
        if marker in default
        else default + "\n\n" + _KEEP_PLACEHOLDERS
    )


def frontier_resources(result: GEPAResult[Any, Any], adapter: StoreAdapter) -> NamedResources:
    """The Pareto front as resources: each front candidate's templates, with its scores as extra fields.

    A candidate is on the front when no other scores higher on some validation example it is best at;
    `front_examples` counts those examples. Named `c<index>` (`c<index>.<name>` with several templates).
    """
    wins: dict[int, int] = {}
    for programs in result.per_val_instance_best_candidates.values():
        for index in programs:
            wins[index] = wins.get(index, 0) + 1
    resources: NamedResources = {}
    for index in sorted(wins):
        candidate = result.candidates[index]
        for name, seed in adapter.seeds.items():
            key = f"c{index}" if len(adapter.seeds) == 1 else f"c{index}.{name}"
            resources[key] = PromptTemplate(
                template=candidate[name],
                engine=seed.engine,
                **_front_fields(
                    gepa_candidate=index,
                    val_score=round(result.val_aggregate_scores[index], 6),
                    front_examples=wins[index],
                    val_examples=len(result.per_val_instance_best_candidates),
                    parents=[p for p in result.parents[index] if p is not None],
                    best=index == result.best_idx,
                ),
            )
    return resources


def _front_fields(**fields: Any) -> dict[str, Any]:
    """Extra fields of a front candidate's template (resources allow extras): shown by the dashboard."""
    return fields


class SearchRecorder:
    """gepa callback and logger: saves and publishes after every iteration (from gepa's thread)."""

    def __init__(
        self,
        store: LightningStore,
        adapter: StoreAdapter,
        reflection: ReflectionModel,
        run: str,
        bridge: LoopBridge,
    ) -> None:
        self.store = store
        self.adapter = adapter
        self.reflection = reflection
        self.run = run
        self.bridge = bridge
        self.search_state: Callable[[], dict[str, Any]] = dict
        """The random generator and sampler state (set by GEPA once it built them)."""
        self.checkpoints = 0
        self._published_seed = False
        self._skipped: Optional[str] = None

    # gepa's LoggerProtocol
    def log(self, message: str) -> None:
        logger.debug("gepa: %s", message)

    # gepa's callbacks (only those used; gepa skips the others)
    def on_iteration_start(self, event: Any) -> None:
        if not self._published_seed:  # the seed's validation is done: show it before the first proposal
            self._published_seed = True
            self._wait(self._publish(event["state"]))

    def on_evaluation_skipped(self, event: Any) -> None:
        self._skipped = str(event.get("reason", "skipped")).replace("_", " ")

    def on_iteration_end(self, event: Any) -> None:
        state: GEPAState = event["state"]
        if event["proposal_accepted"]:
            outcome = "proposal accepted"
        elif self._skipped is not None:  # e.g. the parent already scored perfectly on the minibatch
            outcome = f"no proposal ({self._skipped})"
        else:
            outcome = "proposal rejected"
        self._skipped = None
        logger.info(
            "GEPA iteration %d: %s; %d candidates, %d rollouts, %d reflection tokens",
            event["iteration"],
            outcome,
            len(state.program_candidates),
            state.total_num_evals,
            self.reflection.usage.tokens,
        )
        self._wait(self._checkpoint(state))

    def on_optimization_end(self, event: Any) -> None:
        self._wait(self._checkpoint(event["final_state"]))

    def _wait(self, coroutine: Any) -> None:
        self.bridge.call(coroutine)

    async def _publish(self, state: GEPAState) -> tuple[str, NamedResources]:
        from gepa import GEPAResult

        result = GEPAResult.from_state(state)
        await self.store.update_resources(f"{self.run}-frontier", frontier_resources(result, self.adapter))
        best = (f"{self.run}-best", self.adapter.resources_for(result.candidates[result.best_idx]))
        await self.store.update_resources(*best)
        return best

    async def _checkpoint(self, state: GEPAState) -> None:
        best = await self._publish(state)
        snapshot = {
            "iteration": state.i + 1,
            "gepa": state_to_json(state),
            "search": self.search_state(),
            "reflection": vars(self.reflection.usage).copy(),
        }
        await save_algorithm_state(self.store, algorithm="gepa", run=self.run, state=snapshot, publish_after=best)
        self.checkpoints += 1
