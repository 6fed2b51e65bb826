"""APO: automatic prompt optimization by beam search over prompt templates with textual gradients.

Each round, every prompt in the beam is run on small training batches; an LLM critiques it from the
graded runs (the "textual gradient") and another LLM call rewrites it following the critique. The beam
and the new prompts are scored on a validation batch, the best `beam_width` survive, and the round's
leader is checked on the full validation set. The best prompt found so far never gets worse.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar, Union, cast

from rich.console import Console

from agentlightning.adapter.messages import TraceToMessages
from agentlightning.tracking import TrackingSpec
from agentlightning.types import Dataset, NamedResources, PromptTemplate, RolloutMode

from ..base import Algorithm
from ..state import check_run_name, load_algorithm_state, save_algorithm_state
from ..utils import batch_iter_over_dataset
from .display import APODisplay, RoundProgress
from .edits import accept_edits, candidate_record
from .evaluation import BatchEvaluation, evaluate_prompt_on_batch
from .gradient import apply_edit, write_critique
from .llm import LLMCallError, RetryPolicy
from .placeholders import template_placeholders
from .prompts import APPLY_EDIT_PROMPT_FILES, GRADIENT_PROMPT_FILES, MetaPrompt, load_meta_prompts
from .report import (
    APOReport,
    BranchRecord,
    CandidateScore,
    EvaluationRecord,
    RoundRecord,
    round_metrics,
    write_report,
)
from .resume import Candidate, RunState, parse_search_state, restore_search, search_state

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["APO"]

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]


def _positive_int(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


T_task = TypeVar("T_task")


_REPORTED_SETTINGS = (
    "gradient_model", "apply_edit_model", "diversity_temperature", "gradient_batch_size", "val_batch_size",
    "beam_width", "branch_factor", "beam_rounds", "rollout_batch_timeout", "run_initial_validation",
)  # fmt: skip
"""The APO settings written into the report's config, beside the meta-prompts' names and the seed."""


class APO(Algorithm, Generic[T_task]):
    """Optimize the `PromptTemplate` in the trainer's initial resources with LLM critiques and edits.

    Needs `Trainer(adapter=agl.TraceToMessages(), initial_resources={"<name>": agl.PromptTemplate(...)})`
    and both a training and a validation dataset. The other initial resources (e.g. an `LLM`) are
    published unchanged next to every candidate prompt. Works with any OpenAI-compatible endpoint:
    only plain chat completions are requested.

    Args:
        async_openai_client: `openai.AsyncOpenAI` used for critiques and edits.
        gradient_model: model that writes critiques (textual gradients).
        apply_edit_model: model that rewrites the prompt following a critique.
        diversity_temperature: sampling temperature of the critique calls (varies the branches).
        gradient_batch_size: training tasks run per critique.
        val_batch_size: validation tasks that score the candidates of a round.
        beam_width: prompts kept after each round.
        branch_factor: new prompts derived from each parent per round.
        beam_rounds: number of rounds.
        rollout_batch_timeout: seconds to wait for one batch of rollouts; stragglers score 0.
        run_initial_validation: score the seed prompt on the full validation set first.
        gradient_prompt_files / gradient_prompts: your own critique meta-prompts (jinja files or
            strings) instead of the built-in ones; see `agentlightning.algorithm.apo.prompts`.
        apply_edit_prompt_files / apply_edit_prompts: your own edit meta-prompts.
        seed: seeds batch order, parent sampling and meta-prompt choice (None: not reproducible).
        report_path: where to write the JSON report (rewritten after every round).
        llm_retry: retry policy of the critique/edit calls (default 4 retries, 1 s doubling backoff).
        show_progress: print a progress bar and a table per round, and the best prompt at the end.
        console: rich console for that output (default: standard output).
        tracking: experiment tracking backends for the per-round scores (`["wandb", "mlflow"]`, a
            `TrackingConfig`...; None: `AGL_TRACKING`, else none; `Trainer(tracking=...)` wins).
        run_name: names the search in the store: its state is saved as resources `<run_name>-state` after
            every round and the best prompt so far as `<run_name>-best`.
        resume: continue the search of `run_name` saved in the store (after its last completed round);
            False starts over and overwrites it.
        _poml_trace: accepted for compatibility; the meta-prompts are jinja templates, not POML.
    """

    def __init__(
        self,
        async_openai_client: AsyncOpenAI,
        *,
        gradient_model: str = "gpt-5-mini",
        apply_edit_model: str = "gpt-4.1-mini",
        diversity_temperature: float = 1.0,
        gradient_batch_size: int = 4,
        val_batch_size: int = 16,
        beam_width: int = 4,
        branch_factor: int = 4,
        beam_rounds: int = 3,
        rollout_batch_timeout: float = 3600.0,
        run_initial_validation: bool = True,
        gradient_prompt_files: Optional[Sequence[PathLike]] = None,
        gradient_prompts: Optional[Sequence[str]] = None,
        apply_edit_prompt_files: Optional[Sequence[PathLike]] = None,
        apply_edit_prompts: Optional[Sequence[str]] = None,
        seed: Optional[int] = None,
        report_path: Optional[PathLike] = None,
        llm_retry: Optional[RetryPolicy] = None,
        show_progress: bool = True,
        console: Optional[Console] = None,
        tracking: TrackingSpec = None,
        run_name: str = "apo",
        resume: bool = True,
        _poml_trace: bool = False,
    ) -> None:
        if async_openai_client is None:  # pyright: ignore[reportUnnecessaryComparison]
            raise ValueError("APO needs an openai.AsyncOpenAI client for critiques and edits, got None")
        self.async_openai_client = async_openai_client
        self.gradient_model = gradient_model
        self.apply_edit_model = apply_edit_model
        if diversity_temperature < 0:
            raise ValueError(f"diversity_temperature must be >= 0, got {diversity_temperature}")
        self.diversity_temperature = diversity_temperature
        self.gradient_batch_size = _positive_int("gradient_batch_size", gradient_batch_size)
        self.val_batch_size = _positive_int("val_batch_size", val_batch_size)
        self.beam_width = _positive_int("beam_width", beam_width)
        self.branch_factor = _positive_int("branch_factor", branch_factor)
        if not isinstance(beam_rounds, int) or beam_rounds < 0:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"beam_rounds must be an integer >= 0, got {beam_rounds!r}")
        self.beam_rounds = beam_rounds
        if rollout_batch_timeout <= 0:
            raise ValueError(f"rollout_batch_timeout must be > 0 seconds, got {rollout_batch_timeout}")
        self.rollout_batch_timeout = rollout_batch_timeout
        self.run_initial_validation = run_initial_validation
        self.gradient_meta_prompts: list[MetaPrompt] = load_meta_prompts(
            gradient_prompt_files, gradient_prompts, defaults=GRADIENT_PROMPT_FILES, kind="gradient"
        )
        self.apply_edit_meta_prompts: list[MetaPrompt] = load_meta_prompts(
            apply_edit_prompt_files, apply_edit_prompts, defaults=APPLY_EDIT_PROMPT_FILES, kind="apply-edit"
        )
        self.seed = seed
        self.report_path = Path(report_path) if report_path is not None else None
        self.llm_retry = llm_retry or RetryPolicy()
        self.display = APODisplay(console, enabled=show_progress)
        self._poml_trace = _poml_trace
        self.tracking = tracking
        self.run_name = check_run_name(run_name)
        self.resume = resume
        self._best: Optional[Candidate] = None
        self._best_score: Optional[float] = None
        self._report: Optional[APOReport] = None
        self._result_resources: Optional[NamedResources] = None

    # ---- results ----

    def get_best_prompt(self) -> PromptTemplate:
        """The best prompt found (the seed until something beats it); ValueError before `run`."""
        if self._best is None:
            raise ValueError("APO has no best prompt yet; run it first (Trainer.fit or await apo.run(train, val))")
        return self._best.prompt

    def get_best_score(self) -> Optional[float]:
        """Full-validation score of `get_best_prompt()` (None if it was never validated)."""
        return self._best_score

    def get_result_resources(self) -> Optional[NamedResources]:
        """The initial resources with the best prompt in place of the seed (None before `run` ends)."""
        return self._result_resources

    def accepts_adapter(self, adapter: Any) -> bool:
        return isinstance(adapter, TraceToMessages)

    def default_adapter(self) -> TraceToMessages:
        return TraceToMessages()

    def get_report(self) -> APOReport:
        """The report of the current or last run; ValueError before `run`."""
        if self._report is None:
            raise ValueError("APO has no report yet; run it first")
        return self._report

    # ---- validation of what the trainer handed over ----

    def _messages_adapter(self) -> TraceToMessages:
        adapter = self.get_adapter() if self.has_adapter() else None
        if not isinstance(adapter, TraceToMessages):
            raise ValueError(
                f"APO needs a TraceToMessages adapter to show the agent's conversations to the critic, got "
                f"{type(adapter).__name__ if adapter is not None else 'none'}; "
                "pass agl.Trainer(adapter=agl.TraceToMessages(), ...)"
            )
        return adapter

    @staticmethod
    def _dataset_items(name: str, dataset: Optional[Dataset[Any]]) -> list[Any]:
        if dataset is None:
            raise ValueError(f"APO needs a {name} dataset; call trainer.fit(agent, train_dataset=..., val_dataset=...)")
        items = [dataset[i] for i in range(len(dataset))]
        if not items:
            raise ValueError(f"APO's {name} dataset is empty; pass at least one task")
        return items

    def _seed_prompt(self) -> tuple[str, PromptTemplate, NamedResources]:
        resources = self.get_initial_resources() or {}
        for name, resource in resources.items():
            if isinstance(resource, PromptTemplate):
                try:
                    template_placeholders(resource.template, resource.engine)
                except ValueError as exc:
                    raise ValueError(f"the seed prompt template {name!r} is {exc}") from exc
                return name, resource, dict(resources)
        described = ", ".join(f"{n!r} ({type(r).__name__})" for n, r in resources.items()) or "none"
        raise ValueError(
            f"APO needs a PromptTemplate in the initial resources to optimize, got {described}; pass "
            "agl.Trainer(initial_resources={'prompt': agl.PromptTemplate(template=..., engine='f-string')})"
        )

    # ---- the algorithm ----

    async def run(  # type: ignore[override]
        self,
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        """Beam search over prompts (SPEC steps 1-7); the best prompt ends up in `get_best_prompt()`.

        With `resume` (default), a search of the same `run_name` saved in the store continues after its
        last completed round (see `apo/resume.py`); a finished one just reports its best prompt.
        """
        adapter = self._messages_adapter()
        train_tasks = self._dataset_items("train", train_dataset)
        val_tasks = self._dataset_items("validation", val_dataset)
        resource_name, seed_prompt, resources = self._seed_prompt()
        store = self.get_store()

        rng = random.Random(self.seed)
        state = RunState(
            store=store,
            adapter=adapter,
            resource_name=resource_name,
            base_resources=resources,
            train_batches=batch_iter_over_dataset(cast(Dataset[Any], train_tasks), self.gradient_batch_size, rng=rng),
            val_batches=batch_iter_over_dataset(cast(Dataset[Any], val_tasks), self.val_batch_size, rng=rng),
            val_tasks=val_tasks,
            rng=rng,
            report=APOReport(
                config=self._config(),
                resource_name=resource_name,
                started_at=time.time(),
                seed_version="v0",
                best_version="v0",
                best_template=seed_prompt.template,
            ),
        )
        saved = await load_algorithm_state(store, algorithm="apo", run=self.run_name) if self.resume else None
        tracker = self.start_tracking(self.tracking, config=self._config(), run_name=self.run_name)
        try:
            if saved is not None:
                beam, done = self._resume(state, saved, seed_prompt, train_tasks, val_tasks)
            else:
                beam, done = [await self._start(state, seed_prompt)], 0
                if self._best_score is not None:
                    tracker.log_metrics({"best_score": self._best_score, "seed_val_score": self._best_score}, 0)
            for round_index in range(done + 1, self.beam_rounds + 1):
                beam = await self._round(state, beam, round_index)
                self._save(state)
                await self._checkpoint(state, beam, round_index)
                tracker.log_metrics(round_metrics(state.report.rounds[-1]), round_index)
        except BaseException as exc:
            state.report.status = "failed"
            state.report.error = f"{type(exc).__name__}: {exc}"
            state.report.finished_at = time.time()
            self._save(state)
            raise
        finally:
            self.finish_tracking()

        state.report.status = "finished"
        state.report.finished_at = time.time()
        self._save(state)
        best = self._best
        assert best is not None
        self._result_resources = state.resources_for(best)
        logger.info(
            "APO finished: best prompt %s (validation score %s):\n%s",
            best.version,
            "n/a" if self._best_score is None else f"{self._best_score:.4f}",
            best.prompt.template,
        )
        self.display.final(best.version, self._best_score, best.prompt.template)

    def _resume(
        self,
        state: RunState,
        saved: dict[str, Any],
        seed_prompt: PromptTemplate,
        train_tasks: list[Any],
        val_tasks: list[Any],
    ) -> tuple[list[Candidate], int]:
        """Continue the search saved in the store: returns its beam and the number of completed rounds."""
        restored = restore_search(state, parse_search_state(saved), seed_prompt, self._config())
        # The batch iterators drew from the generator before its state was restored: start them afresh.
        state.train_batches = batch_iter_over_dataset(
            cast(Dataset[Any], train_tasks), self.gradient_batch_size, rng=state.rng
        )
        state.val_batches = batch_iter_over_dataset(cast(Dataset[Any], val_tasks), self.val_batch_size, rng=state.rng)
        self._report, self._best, self._best_score = state.report, restored.best, restored.best_score
        logger.info(
            "APO run %r resumed from the store after round %d (best %s, %s); %d rounds to go",
            self.run_name,
            restored.completed_rounds,
            restored.best.version,
            "n/a" if restored.best_score is None else f"{restored.best_score:.4f}",
            max(0, self.beam_rounds - restored.completed_rounds),
        )
        return restored.beam, restored.completed_rounds

    async def _start(self, state: RunState, seed_prompt: PromptTemplate) -> Candidate:
        """A new search: the seed prompt as v0, validated on the full validation set first (if asked)."""
        self._report = state.report
        seed = Candidate(version=state.new_version(), prompt=seed_prompt, parent=None, round=0)
        state.candidates[seed.version] = seed
        state.report.candidates.append(candidate_record(seed))
        self._best, self._best_score = seed, None
        if self.run_initial_validation:
            logger.info("APO: validating the seed prompt on %d validation tasks", len(state.val_tasks))
            evaluation = await self._evaluate(state, seed, state.val_tasks, "val")
            seed.full_val_score = evaluation.score
            self._best_score = evaluation.score
            state.report.seed_validation = EvaluationRecord.from_evaluation(seed.version, "full_val", evaluation)
            state.report.best_score = evaluation.score
        self.display.seed(seed.version, self._best_score, seed.prompt.template)
        self._save(state)
        await self._checkpoint(state, [seed], 0)
        return seed

    async def _checkpoint(self, state: RunState, beam: list[Candidate], completed_rounds: int) -> None:
        """Save the search in the store, then publish the best prompt as `<run_name>-best` (the latest bundle)."""
        assert self._best is not None
        await save_algorithm_state(
            state.store,
            algorithm="apo",
            run=self.run_name,
            state=search_state(state, beam, self._best, self._best_score, completed_rounds),
            publish_after=(f"{self.run_name}-best", state.resources_for(self._best)),
        )

    async def _round(self, state: RunState, beam: list[Candidate], round_index: int) -> list[Candidate]:
        started = time.monotonic()
        parents = self._sample_parents(beam, state.rng)
        record = RoundRecord(round=round_index, parents=[p.version for p in parents])
        state.report.rounds.append(record)
        n_branches = len(parents) * self.branch_factor
        logger.info(
            "APO round %d/%d: %d parents x %d branches", round_index, self.beam_rounds, len(parents), self.branch_factor
        )
        with self.display.round_progress(round_index, self.beam_rounds, n_branches + len(beam) + n_branches + 1) as bar:
            # Draw batches and per-branch random streams in a fixed order, so a seed reproduces the run
            # however the concurrent branches interleave.
            jobs = [
                (parent, next(state.train_batches), random.Random(state.rng.getrandbits(64)))
                for parent in parents
                for _ in range(self.branch_factor)
            ]
            branches = await asyncio.gather(
                *(self._branch(state, parent, batch, rng, bar) for parent, batch, rng in jobs)
            )
            record.branches = list(branches)
            new_candidates = accept_edits(state, record, beam, round_index)
            candidates = beam + new_candidates
            bar.set_total(n_branches + len(candidates) + 1)

            val_batch = next(state.val_batches)
            evaluations = await asyncio.gather(
                *(self._scored(state, c, val_batch, bar, f"validating {c.version}") for c in candidates)
            )
            scores = {c.version: e.score for c, e in zip(candidates, evaluations, strict=True)}
            record.val_batch = [
                EvaluationRecord.from_evaluation(c.version, "val_batch", e)
                for c, e in zip(candidates, evaluations, strict=True)
            ]
            ranked = sorted(candidates, key=lambda c: scores[c.version], reverse=True)
            new_beam = ranked[: self.beam_width]
            kept = {c.version for c in new_beam}
            new_versions = {c.version for c in new_candidates}
            record.candidates = [
                CandidateScore(
                    version=c.version,
                    parent_version=c.parent,
                    new=c.version in new_versions,
                    val_batch_score=scores[c.version],
                    kept=c.version in kept,
                )
                for c in candidates
            ]
            record.beam = [c.version for c in new_beam]

            leader = new_beam[0]
            record.beam_best_version = leader.version
            if leader.full_val_score is None:
                label = f"full validation of {leader.version}"
                evaluation = await self._scored(state, leader, state.val_tasks, bar, label)
                leader.full_val_score = evaluation.score
                record.beam_best_full_val = EvaluationRecord.from_evaluation(leader.version, "full_val", evaluation)
            else:
                bar.advance(f"{leader.version} already validated")
            self._update_best(state, record, leader)

        record.seconds = round(time.monotonic() - started, 3)
        self.display.round_summary(record, {c.version: c.prompt.template for c in candidates})
        return new_beam

    def _sample_parents(self, beam: list[Candidate], rng: random.Random) -> list[Candidate]:
        """`beam_width` parents: the beam repeated when it is smaller, else a random sample of it."""
        if len(beam) < self.beam_width:
            return [beam[i % len(beam)] for i in range(self.beam_width)]
        return rng.sample(beam, self.beam_width)

    async def _evaluate(
        self, state: RunState, candidate: Candidate, tasks: list[Any], mode: RolloutMode
    ) -> BatchEvaluation:
        evaluation = await evaluate_prompt_on_batch(
            state.store,
            state.adapter,
            resources_id=candidate.version,
            resources=state.resources_for(candidate),
            tasks=tasks,
            mode=mode,
            timeout=self.rollout_batch_timeout,
        )
        logger.info(
            "APO: %s scored %.4f on %d %s tasks (%d unfinished)",
            candidate.version,
            evaluation.score,
            len(tasks),
            mode,
            evaluation.unfinished,
        )
        return evaluation

    async def _scored(
        self, state: RunState, candidate: Candidate, tasks: list[Any], bar: RoundProgress, label: str
    ) -> BatchEvaluation:
        evaluation = await self._evaluate(state, candidate, tasks, "val")
        bar.advance(label)
        return evaluation

    async def _branch(
        self, state: RunState, parent: Candidate, batch: list[Any], rng: random.Random, bar: RoundProgress
    ) -> BranchRecord:
        """Run the parent on a training batch, critique it and edit it; the edit is checked later."""
        record = BranchRecord(parent_version=parent.version)
        try:
            evaluation = await self._evaluate(state, parent, batch, "train")
            record.gradient_batch = EvaluationRecord.from_evaluation(parent.version, "gradient_batch", evaluation)
            critique = await write_critique(
                self.async_openai_client,
                model=self.gradient_model,
                temperature=self.diversity_temperature,
                prompt=parent.prompt,
                results=evaluation.results,
                sample_size=self.gradient_batch_size,
                meta_prompts=self.gradient_meta_prompts,
                rng=rng,
                retry=self.llm_retry,
            )
            record.gradient_prompt, record.critique = critique.meta_prompt, critique.text
            if not critique.text:
                record.rejected_reason = "the critique came back empty"
                return record
            edited, edit_prompt = await apply_edit(
                self.async_openai_client,
                model=self.apply_edit_model,
                prompt=parent.prompt,
                critique=critique.text,
                meta_prompts=self.apply_edit_meta_prompts,
                rng=rng,
                retry=self.llm_retry,
            )
            record.edit_prompt, record.edited_template = edit_prompt, edited
        except LLMCallError as exc:
            if exc.fatal:
                raise
            record.rejected_reason = str(exc)
        finally:
            bar.advance(f"critique and edit of {parent.version}")
        return record

    def _update_best(self, state: RunState, record: RoundRecord, leader: Candidate) -> None:
        score = leader.full_val_score
        improved = score is not None and (self._best_score is None or score > self._best_score)
        if improved:
            self._best, self._best_score = leader, score
            state.report.best_version = leader.version
            state.report.best_score = score
            state.report.best_template = leader.prompt.template
        assert self._best is not None
        record.improved = improved
        record.best_version, record.best_score = self._best.version, self._best_score
        logger.info(
            "APO round %d: beam leader %s scored %s on the full validation set; best so far %s (%s)",
            record.round,
            leader.version,
            "n/a" if score is None else f"{score:.4f}",
            self._best.version,
            "n/a" if self._best_score is None else f"{self._best_score:.4f}",
        )

    # ---- report ----

    def _config(self) -> dict[str, Any]:
        settings = {name: getattr(self, name) for name in _REPORTED_SETTINGS}
        return {
            **settings,
            "gradient_prompts": [p.name for p in self.gradient_meta_prompts],
            "apply_edit_prompts": [p.name for p in self.apply_edit_meta_prompts],
            "seed": self.seed,
        }

    def _save(self, state: RunState) -> None:
        if self.report_path is None:
            return
        try:
            write_report(state.report, self.report_path)
        except OSError as exc:
            logger.error("Could not write the APO report to %s: %s", self.report_path, exc)
