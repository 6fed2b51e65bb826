"""Turning a round's edited prompts into new candidate versions, or rejecting them with a reason.

An edit becomes a candidate only when it is non-empty, keeps the parent's placeholders (the agent's
`format()` call must still fit) and differs from every prompt already in the beam or accepted this round.
A rejected edit keeps its reason in the round's `BranchRecord` and is logged.
"""

from __future__ import annotations

import logging
from typing import Optional

from agentlightning.types import PromptTemplate

from .placeholders import placeholder_problem
from .report import CandidateRecord, RoundRecord
from .resume import Candidate, RunState

__all__ = ["accept_edits", "edit_problem", "candidate_record"]

logger = logging.getLogger(__name__)


def accept_edits(state: RunState, record: RoundRecord, beam: list[Candidate], round_index: int) -> list[Candidate]:
    """Turn valid edits into new versions; reject (and log why) empty, broken or duplicate ones."""
    known = {c.prompt.template.strip(): c.version for c in beam}
    parents = {c.version: c for c in beam}
    new_candidates: list[Candidate] = []
    for branch in record.branches:
        parent = parents[branch.parent_version]
        if branch.rejected_reason is None:
            branch.rejected_reason = edit_problem(parent, branch.edited_template, known)
        if branch.rejected_reason is not None:
            logger.warning(
                "APO round %d: rejected an edit of %s: %s",
                round_index,
                branch.parent_version,
                branch.rejected_reason,
            )
            continue
        assert branch.edited_template is not None
        candidate = Candidate(
            version=state.new_version(),
            prompt=PromptTemplate(template=branch.edited_template, engine=parent.prompt.engine),
            parent=branch.parent_version,
            round=round_index,
        )
        branch.version = candidate.version
        state.candidates[candidate.version] = candidate
        known[branch.edited_template.strip()] = candidate.version
        new_candidates.append(candidate)
        state.report.candidates.append(candidate_record(candidate, critique=branch.critique))
    return new_candidates


def edit_problem(parent: Candidate, edited: Optional[str], known: dict[str, str]) -> Optional[str]:
    """Why `edited` cannot replace `parent` (None if it can); `known` maps templates seen so far to versions."""
    if edited is None or not edited.strip():
        return "the edited prompt is empty"
    problem = placeholder_problem(parent.prompt.template, edited, parent.prompt.engine)
    if problem is not None:
        return problem
    duplicate_of = known.get(edited.strip())
    if duplicate_of is not None:
        return f"the edited prompt is identical to {duplicate_of}"
    return None


def candidate_record(candidate: Candidate, critique: Optional[str] = None) -> CandidateRecord:
    """The report's entry for a prompt version."""
    return CandidateRecord(
        version=candidate.version,
        round=candidate.round,
        parent_version=candidate.parent,
        template=candidate.prompt.template,
        engine=candidate.prompt.engine,
        critique=critique,
    )
