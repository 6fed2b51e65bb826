"""The APO run report: every candidate, critique, edit and score, saved as JSON after each round."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, Field

from .evaluation import BatchEvaluation

__all__ = [
    "EvaluationRecord",
    "CandidateRecord",
    "BranchRecord",
    "CandidateScore",
    "RoundRecord",
    "APOReport",
    "round_metrics",
    "write_report",
]


class EvaluationRecord(BaseModel):
    """One prompt scored on one batch."""

    version: str
    scope: Literal["gradient_batch", "val_batch", "full_val"]
    score: float
    rollout_ids: list[str]
    rewards: list[Optional[float]]
    statuses: list[str]
    unfinished: int
    seconds: float

    @classmethod
    def from_evaluation(
        cls, version: str, scope: Literal["gradient_batch", "val_batch", "full_val"], evaluation: BatchEvaluation
    ) -> EvaluationRecord:
        return cls(
            version=version,
            scope=scope,
            score=evaluation.score,
            rollout_ids=[r.rollout_id for r in evaluation.results],
            rewards=[r.reward for r in evaluation.results],
            statuses=[r.status for r in evaluation.results],
            unfinished=evaluation.unfinished,
            seconds=round(evaluation.seconds, 3),
        )


class CandidateRecord(BaseModel):
    """A prompt version: where it came from and its text."""

    version: str
    round: int = Field(description="round that created it; 0 for the seed prompt")
    parent_version: Optional[str] = None
    template: str
    engine: str
    critique: Optional[str] = None


class BranchRecord(BaseModel):
    """One critique-and-edit step from a parent prompt, accepted (new `version`) or rejected (`rejected_reason`)."""

    parent_version: str
    gradient_batch: Optional[EvaluationRecord] = None
    gradient_prompt: Optional[str] = Field(default=None, description="meta-prompt used for the critique")
    critique: Optional[str] = None
    edit_prompt: Optional[str] = Field(default=None, description="meta-prompt used for the edit")
    edited_template: Optional[str] = None
    version: Optional[str] = None
    rejected_reason: Optional[str] = None


class CandidateScore(BaseModel):
    """A candidate's score on the round's validation batch and whether it stayed in the beam."""

    version: str
    parent_version: Optional[str]
    new: bool
    val_batch_score: float
    kept: bool


class RoundRecord(BaseModel):
    round: int
    parents: list[str]
    branches: list[BranchRecord] = Field(default_factory=lambda: [])
    candidates: list[CandidateScore] = Field(default_factory=lambda: [])
    val_batch: list[EvaluationRecord] = Field(default_factory=lambda: [])
    beam: list[str] = Field(default_factory=lambda: [])
    beam_best_version: Optional[str] = None
    beam_best_full_val: Optional[EvaluationRecord] = None
    best_version: Optional[str] = None
    best_score: Optional[float] = None
    improved: bool = False
    seconds: float = 0.0


class APOReport(BaseModel):
    """Everything an APO run did, in order; `best_*` always describe the best prompt found so far."""

    status: Literal["running", "finished", "failed"] = "running"
    error: Optional[str] = None
    config: dict[str, Any]
    resource_name: str
    started_at: float
    finished_at: Optional[float] = None
    resumed_at: list[float] = Field(default_factory=lambda: [], description="when the run resumed from the store")
    seed_version: str
    seed_validation: Optional[EvaluationRecord] = None
    candidates: list[CandidateRecord] = Field(default_factory=lambda: [])
    rounds: list[RoundRecord] = Field(default_factory=lambda: [])
    best_version: str
    best_score: Optional[float] = None
    best_template: str


def round_metrics(record: RoundRecord) -> dict[str, float]:
    """The numbers of one round that experiment trackers plot: scores, beam size, accepted edits, time."""
    scores = [c.val_batch_score for c in record.candidates]
    metrics: dict[str, float] = {
        "candidates": float(len(record.candidates)),
        "new_candidates": float(sum(1 for c in record.candidates if c.new)),
        "rejected_edits": float(sum(1 for b in record.branches if b.rejected_reason is not None)),
        "improved": float(record.improved),
        "round_seconds": record.seconds,
    }
    if scores:
        metrics["val_batch_score_max"] = max(scores)
        metrics["val_batch_score_mean"] = sum(scores) / len(scores)
    if record.beam_best_full_val is not None:
        metrics["beam_best_full_val_score"] = record.beam_best_full_val.score
    if record.best_score is not None:
        metrics["best_score"] = record.best_score
    return metrics


def write_report(report: APOReport, path: Union[str, Path]) -> None:
    """Write the report as JSON, atomically (a reader never sees a half-written file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(report.model_dump_json(indent=2))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
