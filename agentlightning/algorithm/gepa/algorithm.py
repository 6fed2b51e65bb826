"""GEPA: reflective, Pareto-based prompt optimization (the `gepa` package) on our store and runners.

gepa drives the search: it picks a candidate from the Pareto front (the candidates that are best on at
least one validation example), runs it on a minibatch of training tasks, shows the reflection model what
happened (the reflective dataset, built from the rollouts' stored spans), evaluates the proposed rewrite
on the same minibatch and, if it does better, on the whole validation set, where its per-example scores
update the front. This module supplies what gepa leaves to its user: the adapter that runs candidates as
rollouts (`adapter.py`), the reflection model and budgets (`reflection.py`), and the search state kept in
the store so a killed run resumes (`persistence.py`). The best candidate and the front are published as
resources (`<run>-best`, `<run>-frontier`) while the search runs, for the dashboard and the next stage.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Optional, cast

from agentlightning.adapter.messages import TraceToMessages
from agentlightning.types import Dataset, NamedResources, PromptTemplate

from ..apo.llm import RetryPolicy
from ..base import Algorithm
from ..state import check_run_name, load_algorithm_state
from .adapter import Example, StoreAdapter, find_reusable_rollouts
from .bridge import LoopBridge, run_in_daemon_thread
from .persistence import check_saved_search, search_rng_from_json, search_rng_to_json, state_from_json
from .reflection import Budget, ReflectionModel, ReflectionUsage
from .search import SearchRecorder, placeholder_reflection_prompt

if TYPE_CHECKING:
    from gepa import GEPAResult
    from openai import AsyncOpenAI

__all__ = ["GEPA"]

logger = logging.getLogger(__name__)

CandidateSelection = Literal["pareto", "current_best", "epsilon_greedy"]


class GEPA(Algorithm):
    """Optimize the `PromptTemplate` resources of the trainer's initial resources with gepa.

    Needs `Trainer(initial_resources={..., "<name>": agl.PromptTemplate(...)})` and a training dataset; the
    validation dataset (default: the training one) is where the Pareto front is kept, per example. The
    other initial resources (e.g. the agent's `LLM`) are published unchanged next to every candidate.

    Args:
        async_openai_client: `openai.AsyncOpenAI` for the reflection model (any OpenAI-compatible server).
        reflection_model: the model that reads the reflective dataset and proposes new prompts.
        components: the names of the prompt templates to optimize (default: every `PromptTemplate`).
        max_rollouts / max_reflection_tokens / max_reflection_dollars / max_iterations: budgets (at least
            one); the search stops at the first iteration boundary past any of them. Dollars need prices.
        price_per_million_input_tokens / price_per_million_output_tokens: the reflection model's prices.
        minibatch_size: training tasks per reflection (and per acceptance test of a proposal).
        candidate_selection: which candidate gets improved: sampled from the Pareto front ("pareto"), the
            best on average ("current_best"), or mostly the best, sometimes any ("epsilon_greedy").
        module_selector: with several templates, improve one per iteration in turn ("round_robin") or
            all at once ("all").
        use_merge: also try merging two front candidates that improved different components (gepa's merge).
        perfect_score: a minibatch on which the parent already scores this everywhere is skipped.
        reflection_temperature: sampling temperature of the reflection model (None: the server default).
        reflection_prompt_template: gepa's reflection prompt (with `<curr_param>` and `<side_info>`); the
            default is gepa's own plus an instruction to keep the template's placeholders.
        rollout_batch_timeout: seconds to wait for one batch of rollouts; stragglers score 0.
        seed: seeds the candidate selection and the minibatches.
        run_name: names the search in the store: resources `<run_name>-state`, `-best`, `-frontier`,
            `-<hash>` per candidate, and the `gepa_run` metadata of its rollouts.
        resume: continue the search of `run_name` saved in the store (False: start over).
        llm_retry: retry policy of the reflection calls.
    """

    def __init__(
        self,
        async_openai_client: AsyncOpenAI,
        *,
        reflection_model: str = "gpt-5-mini",
        components: Optional[Sequence[str]] = None,
        max_rollouts: Optional[int] = None,
        max_reflection_tokens: Optional[int] = None,
        max_reflection_dollars: Optional[float] = None,
        max_iterations: Optional[int] = None,
        price_per_million_input_tokens: Optional[float] = None,
        price_per_million_output_tokens: Optional[float] = None,
        minibatch_size: int = 3,
        candidate_selection: CandidateSelection = "pareto",
        module_selector: Literal["round_robin", "all"] = "round_robin",
        use_merge: bool = False,
        perfect_score: float = 1.0,
        reflection_temperature: Optional[float] = None,
        reflection_prompt_template: Optional[str] = None,
        rollout_batch_timeout: float = 3600.0,
        seed: int = 0,
        run_name: str = "gepa",
        resume: bool = True,
        llm_retry: Optional[RetryPolicy] = None,
    ) -> None:
        if async_openai_client is None:  # pyright: ignore[reportUnnecessaryComparison]
            raise ValueError("GEPA needs an openai.AsyncOpenAI client for the reflection model, got None")
        _check_budget(
            max_rollouts,
            max_reflection_tokens,
            max_reflection_dollars,
            max_iterations,
            priced=price_per_million_input_tokens is not None and price_per_million_output_tokens is not None,
        )
        if minibatch_size < 1:
            raise ValueError(f"minibatch_size must be >= 1, got {minibatch_size}")
        if candidate_selection not in ("pareto", "current_best", "epsilon_greedy"):
            raise ValueError(
                f"candidate_selection must be 'pareto', 'current_best' or 'epsilon_greedy', got {candidate_selection!r}"
            )
        if module_selector not in ("round_robin", "all"):
            raise ValueError(f"module_selector must be 'round_robin' or 'all', got {module_selector!r}")
        if rollout_batch_timeout <= 0:
            raise ValueError(f"rollout_batch_timeout must be > 0 seconds, got {rollout_batch_timeout}")
        self.async_openai_client = async_openai_client
        self.reflection_model = reflection_model
        self.components = list(components) if components is not None else None
        self.max_rollouts = max_rollouts
        self.max_reflection_tokens = max_reflection_tokens
        self.max_reflection_dollars = max_reflection_dollars
        self.max_iterations = max_iterations
        self.price_per_million_input_tokens = price_per_million_input_tokens
        self.price_per_million_output_tokens = price_per_million_output_tokens
        self.minibatch_size = minibatch_size
        self.candidate_selection: CandidateSelection = candidate_selection
        self.module_selector = module_selector
        self.use_merge = use_merge
        self.perfect_score = perfect_score
        self.reflection_temperature = reflection_temperature
        self.reflection_prompt_template = reflection_prompt_template
        self.rollout_batch_timeout = rollout_batch_timeout
        self.seed = seed
        self.run_name = check_run_name(run_name)
        self.resume = resume
        self.llm_retry = llm_retry or RetryPolicy()
        self.result: Optional[GEPAResult[Any, Any]] = None
        """gepa's result of the last run: every candidate, its parents and validation scores, the front."""
        self.stop_reason: Optional[str] = None
        self.reflection_usage = ReflectionUsage()
        self.rollouts_started = 0
        """Rollouts this process enqueued (not counting those reused from the store on resume)."""
        self._best: Optional[dict[str, PromptTemplate]] = None
        self._result_resources: Optional[NamedResources] = None

    # ---- results ----

    def get_best_candidate(self) -> dict[str, PromptTemplate]:
        """The best candidate's templates by resource name (highest mean validation score); ValueError before `run`."""
        if self._best is None:
            raise ValueError("GEPA has no best candidate yet; run it first (Trainer.fit)")
        return dict(self._best)

    def get_best_prompt(self) -> PromptTemplate:
        """The best template, when one template is optimized (see `get_best_candidate` for several)."""
        best = self.get_best_candidate()
        if len(best) != 1:
            raise ValueError(f"GEPA optimized {len(best)} templates {sorted(best)}; use get_best_candidate()")
        return next(iter(best.values()))

    def get_result_resources(self) -> Optional[NamedResources]:
        return self._result_resources

    def accepts_adapter(self, adapter: Any) -> bool:
        return isinstance(adapter, TraceToMessages)

    def default_adapter(self) -> TraceToMessages:
        return TraceToMessages()

    # ---- the algorithm ----

    def _seeds(self) -> tuple[dict[str, PromptTemplate], NamedResources]:
        resources = dict(self.get_initial_resources() or {})
        templates = {name: r for name, r in resources.items() if isinstance(r, PromptTemplate)}
        names = self.components if self.components is not None else list(templates)
        unknown = [name for name in names if name not in templates]
        if unknown or not names:
            described = ", ".join(f"{n!r} ({type(r).__name__})" for n, r in resources.items()) or "none"
            raise ValueError(
                f"GEPA optimizes PromptTemplate resources; {'found none' if not names else f'{unknown} are not ones'} "
                f"among the initial resources ({described}); pass agl.Trainer(initial_resources={{'prompt': "
                "agl.PromptTemplate(template=..., engine='f-string')}) and, to pick some, GEPA(components=[...])"
            )
        return {name: templates[name] for name in names}, resources

    def _adapter(self) -> TraceToMessages:
        adapter = self.get_adapter() if self.has_adapter() else None
        return adapter if isinstance(adapter, TraceToMessages) else TraceToMessages()

    async def run(  # type: ignore[override]
        self,
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        """Search until a budget runs out; the best candidate ends up in `get_best_candidate()`."""
        if train_dataset is None or len(train_dataset) == 0:
            raise ValueError("GEPA needs a non-empty train_dataset; call trainer.fit(agent, train_dataset=...)")
        train = [Example(f"train:{i}", train_dataset[i]) for i in range(len(train_dataset))]
        val_source = val_dataset if val_dataset is not None and len(val_dataset) > 0 else train_dataset
        val = [Example(f"val:{i}", val_source[i]) for i in range(len(val_source))]
        seeds, resources = self._seeds()
        store = self.get_store()
        bridge = LoopBridge(asyncio.get_running_loop())
        saved = await load_algorithm_state(store, algorithm="gepa", run=self.run_name) if self.resume else None
        if saved is not None:
            check_saved_search(saved)
            state_from_json(saved["gepa"])  # checked now, before any rollout is looked up
        reflection = ReflectionModel(
            self.async_openai_client,
            self.reflection_model,
            bridge,
            temperature=self.reflection_temperature,
            price_per_million_input_tokens=self.price_per_million_input_tokens,
            price_per_million_output_tokens=self.price_per_million_output_tokens,
            retry=self.llm_retry,
        )
        adapter = StoreAdapter(
            store=store,
            bridge=bridge,
            messages=self._adapter(),
            base_resources=resources,
            seeds=seeds,
            run=self.run_name,
            timeout=self.rollout_batch_timeout,
            reuse=await find_reusable_rollouts(store, self.run_name) if saved is not None else None,
        )
        budget = Budget(
            reflection,
            max_rollouts=self.max_rollouts,
            max_reflection_tokens=self.max_reflection_tokens,
            max_reflection_dollars=self.max_reflection_dollars,
            max_iterations=self.max_iterations,
        )
        recorder = SearchRecorder(store, adapter, reflection, self.run_name, bridge)
        try:
            with tempfile.TemporaryDirectory(prefix="agl-gepa-") as run_dir:
                options = self._gepa_options(seeds, run_dir, recorder, budget, reflection, saved)
                search = functools.partial(_optimize, train, val, adapter, options)
                result = await run_in_daemon_thread(search, bridge, f"AgentLightning-GEPA-{self.run_name}")
        finally:
            self.reflection_usage = reflection.usage
            self.rollouts_started = adapter.rollouts_started
        if reflection.fatal_error is not None:
            raise reflection.fatal_error
        self.result, self.stop_reason = result, budget.reason
        best = result.candidates[result.best_idx]
        self._result_resources = adapter.resources_for(best)
        self._best = {name: PromptTemplate(template=best[name], engine=seed.engine) for name, seed in seeds.items()}
        logger.info(
            "GEPA run %r stopped (%s): %d candidates, best c%d with mean validation score %.4f; %d rollouts here, "
            "%d reflection tokens",
            self.run_name,
            self.stop_reason,
            len(result.candidates),
            result.best_idx,
            result.val_aggregate_scores[result.best_idx],
            adapter.rollouts_started,
            reflection.usage.tokens,
        )

    def _gepa_options(
        self,
        seeds: dict[str, PromptTemplate],
        run_dir: str,
        recorder: SearchRecorder,
        budget: Budget,
        reflection: ReflectionModel,
        saved: Optional[dict[str, Any]],
    ) -> dict[str, Any]:
        """The keyword arguments of `gepa.optimize`; a saved search is written into `run_dir` for gepa to load."""
        from gepa.strategies.batch_sampler import EpochShuffledBatchSampler
        from gepa.strategies.candidate_selector import (
            CurrentBestCandidateSelector,
            EpsilonGreedyCandidateSelector,
            ParetoCandidateSelector,
        )

        rng = random.Random(self.seed)
        sampler = EpochShuffledBatchSampler(minibatch_size=self.minibatch_size, rng=rng)
        if saved is not None:
            state_from_json(saved["gepa"]).save(run_dir)
            search_rng_from_json(saved["search"], rng, sampler)
            reflection.usage = ReflectionUsage(**saved["reflection"])
            logger.info("GEPA run %r resumes from the store after iteration %d", self.run_name, saved["iteration"])
        selector = {
            "pareto": lambda: ParetoCandidateSelector(rng=rng),
            "current_best": CurrentBestCandidateSelector,
            "epsilon_greedy": lambda: EpsilonGreedyCandidateSelector(epsilon=0.1, rng=rng),
        }[self.candidate_selection]()
        recorder.search_state = lambda: search_rng_to_json(rng, sampler)
        return {
            "seed_candidate": {name: template.template for name, template in seeds.items()},
            "reflection_lm": reflection,
            "reflection_prompt_template": self.reflection_prompt_template or placeholder_reflection_prompt(),
            "candidate_selection_strategy": selector,
            "batch_sampler": sampler,
            "module_selector": self.module_selector,
            "use_merge": self.use_merge,
            "perfect_score": self.perfect_score,
            "skip_perfect_score": True,
            "frontier_type": "instance",
            "stop_callbacks": [budget],
            "run_dir": run_dir,
            "callbacks": [recorder],
            "logger": recorder,
            "seed": self.seed,
            "raise_on_exception": True,
            "display_progress_bar": False,
        }


def _check_budget(
    max_rollouts: Optional[int],
    max_reflection_tokens: Optional[int],
    max_reflection_dollars: Optional[float],
    max_iterations: Optional[int],
    *,
    priced: bool,
) -> None:
    """ValueError unless at least one budget is set and every one set is usable."""
    if all(limit is None for limit in (max_rollouts, max_reflection_tokens, max_reflection_dollars, max_iterations)):
        raise ValueError(
            "GEPA needs a budget: pass max_rollouts, max_reflection_tokens, max_reflection_dollars or max_iterations"
        )
    for name, limit in (
        ("max_rollouts", max_rollouts),
        ("max_reflection_tokens", max_reflection_tokens),
        ("max_iterations", max_iterations),
    ):
        if limit is not None and (not isinstance(limit, int) or limit < 1):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"{name} must be an integer >= 1, got {limit!r}")
    if max_reflection_dollars is not None:
        if max_reflection_dollars <= 0:
            raise ValueError(f"max_reflection_dollars must be > 0, got {max_reflection_dollars}")
        if not priced:
            raise ValueError(
                "max_reflection_dollars needs the reflection model's prices: pass "
                "price_per_million_input_tokens and price_per_million_output_tokens"
            )


def _optimize(train: list[Example], val: list[Example], adapter: StoreAdapter, options: dict[str, Any]) -> Any:
    import gepa

    return gepa.optimize(trainset=train, valset=val, adapter=cast(Any, adapter), **options)
