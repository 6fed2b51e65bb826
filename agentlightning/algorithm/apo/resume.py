"""What an APO run works with, and how it is kept in the store so a killed run continues where it stopped.

The search state is saved after the seed validation and after every completed round: the run report
(every candidate, critique and score so far), the beam, the full-validation scores, the next version
number, the best prompt and the random generator's state. A round cut short by a crash is run again
from its start, with fresh batches: the generator resumes from its state at the end of the last
completed round.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from agentlightning.adapter.messages import TraceToMessages
from agentlightning.algorithm.state import describe_state_errors
from agentlightning.store.base import LightningStore
from agentlightning.types import NamedResources, PromptTemplate

from .report import APOReport

__all__ = [
    "Candidate",
    "RunState",
    "SavedSearch",
    "RestoredSearch",
    "search_state",
    "parse_search_state",
    "restore_search",
]

STATE_VERSION = 1


@dataclass
class Candidate:
    """A prompt version of the search."""

    version: str
    prompt: PromptTemplate
    parent: Optional[str]
    round: int
    full_val_score: Optional[float] = None


@dataclass
class RunState:
    """What one `run()` works with (kept off the APO instance so runs never share state)."""

    store: LightningStore
    adapter: TraceToMessages
    resource_name: str
    base_resources: NamedResources
    train_batches: Iterator[list[Any]]
    val_batches: Iterator[list[Any]]
    val_tasks: list[Any]
    rng: random.Random
    report: APOReport
    next_version: int = 0
    candidates: dict[str, Candidate] = field(default_factory=lambda: {})

    def new_version(self) -> str:
        version = f"v{self.next_version}"
        self.next_version += 1
        return version

    def resources_for(self, candidate: Candidate) -> NamedResources:
        return {**self.base_resources, self.resource_name: candidate.prompt}


@dataclass
class SavedSearch:
    """A search as it stood after `completed_rounds` rounds (read back from the store)."""

    report: APOReport
    beam: list[str]
    """Versions in the beam, best first."""
    full_val_scores: dict[str, float]
    next_version: int
    rng_state: Any
    best_version: str
    best_score: Optional[float]
    completed_rounds: int


@dataclass
class RestoredSearch:
    beam: list[Candidate]
    best: Candidate
    best_score: Optional[float]
    completed_rounds: int


def search_state(
    state: RunState, beam: list[Candidate], best: Candidate, best_score: Optional[float], completed_rounds: int
) -> dict[str, Any]:
    """The JSON-serializable state saved in the store."""
    version, internal, gauss = state.rng.getstate()
    return {
        "state_version": STATE_VERSION,
        "report": state.report.model_dump(mode="json"),
        "beam": [c.version for c in beam],
        "full_val_scores": {v: c.full_val_score for v, c in state.candidates.items() if c.full_val_score is not None},
        "next_version": state.next_version,
        "rng": [version, list(internal), gauss],
        "best_version": best.version,
        "best_score": best_score,
        "completed_rounds": completed_rounds,
    }


Finite = Annotated[float, Field(allow_inf_nan=False)]
Word = Annotated[int, Field(ge=0, le=2**32 - 1)]  # one word of the Mersenne Twister's state


def _as_tuple(value: Any) -> Any:
    """JSON keeps the generator's state tuple as a list."""
    return tuple(value) if isinstance(value, list) else value  # pyright: ignore[reportUnknownArgumentType]


class _SavedFields(BaseModel):
    """What `search_state` writes, strictly typed (a saved state is read back from a store anyone may write)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    state_version: Literal[1]
    report: dict[str, Any]
    beam: Annotated[list[str], Field(min_length=1)]
    full_val_scores: dict[str, Finite]
    next_version: Annotated[int, Field(ge=1)]
    rng: Annotated[
        tuple[Literal[3], Annotated[list[Word], Field(min_length=625, max_length=625)], Optional[Finite]],
        BeforeValidator(_as_tuple),
    ]
    best_version: str
    best_score: Optional[Finite]
    completed_rounds: Annotated[int, Field(ge=0)]


def _malformed(detail: str) -> ValueError:
    return ValueError(f"the saved APO state is invalid: {detail}; pass resume=False to start over")


def parse_search_state(state: dict[str, Any]) -> SavedSearch:
    """Read back what `search_state` wrote; ValueError naming the field when it cannot be resumed as it is."""
    if not isinstance(state, dict) or state.get("state_version") != STATE_VERSION:  # pyright: ignore[reportUnnecessaryIsInstance]
        found = state.get("state_version") if isinstance(state, dict) else type(state).__name__  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(
            f"the saved APO state has version {found!r}, this APO reads {STATE_VERSION}; pass resume=False to start over"
        )
    try:
        fields = _SavedFields.model_validate(state)
        report = APOReport.model_validate(fields.report)
    except ValidationError as exc:
        raise _malformed(describe_state_errors(exc)) from None
    except RecursionError:
        raise _malformed("it nests too deeply") from None
    versions = [c.version for c in report.candidates]
    known = set(versions)
    numbered = [int(m.group(1)) for v in versions if (m := re.fullmatch(r"v(\d+)", v))]
    checks = [
        (len(known) == len(versions), "report.candidates: a version appears twice"),
        (set(fields.beam) <= known, f"beam: {sorted(set(fields.beam) - known)} are not candidates of the report"),
        (len(set(fields.beam)) == len(fields.beam), "beam: a version appears twice"),
        (fields.best_version in known, f"best_version: {fields.best_version!r} is not a candidate of the report"),
        (report.seed_version in known, f"report.seed_version: {report.seed_version!r} is not a candidate"),
        (set(fields.full_val_scores) <= known, "full_val_scores: scores of versions that are not candidates"),
        (fields.next_version > max(numbered, default=-1), f"next_version: {fields.next_version} is already taken"),
        (fields.rng[1][-1] <= 624, f"rng[1][624]: position {fields.rng[1][-1]} is past the generator's 624 words"),
    ]
    for ok, problem in checks:
        if not ok:
            raise _malformed(problem)
    version, internal, gauss = fields.rng
    return SavedSearch(
        report=report,
        beam=fields.beam,
        full_val_scores=fields.full_val_scores,
        next_version=fields.next_version,
        rng_state=(version, tuple(internal), gauss),
        best_version=fields.best_version,
        best_score=fields.best_score,
        completed_rounds=fields.completed_rounds,
    )


def restore_search(
    state: RunState, saved: SavedSearch, seed_prompt: PromptTemplate, config: dict[str, Any]
) -> RestoredSearch:
    """Load a saved search into `state` (report, candidates, next version, random state).

    Raises ValueError unless it started from this seed prompt (same resource name, text and engine): two
    different searches must not share a run name.
    """
    report = saved.report
    seed = next((c for c in report.candidates if c.version == report.seed_version), None)
    if (
        report.resource_name != state.resource_name
        or seed is None
        or seed.template != seed_prompt.template
        or seed.engine != seed_prompt.engine
    ):
        raise ValueError(
            f"the store holds an APO search over resource {report.resource_name!r} from another seed prompt; "
            "pass run_name=... to start a separate search, or resume=False to start over"
        )
    report.status, report.error, report.finished_at = "running", None, None
    report.config = config
    report.resumed_at.append(time.time())
    state.report = report
    for record in report.candidates:
        state.candidates[record.version] = Candidate(
            version=record.version,
            prompt=PromptTemplate(template=record.template, engine=cast(Any, record.engine)),
            parent=record.parent_version,
            round=record.round,
            full_val_score=saved.full_val_scores.get(record.version),
        )
    state.next_version = saved.next_version
    state.rng.setstate(saved.rng_state)
    return RestoredSearch(
        beam=[state.candidates[version] for version in saved.beam],
        best=state.candidates[saved.best_version],
        best_score=saved.best_score,
        completed_rounds=saved.completed_rounds,
    )
