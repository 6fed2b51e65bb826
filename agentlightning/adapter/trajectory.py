"""Trajectory aggregation: the LLM calls of one rollout merged into as few training rows as token ids allow.

A multi-turn rollout makes N LLM calls; each call's prompt usually re-renders the whole conversation so
far. The "transition" view trains N rows, each recomputing that shared prefix. The "trajectory" view
merges consecutive calls into one row when the next prompt's token ids start with exactly the previous
prompt ids + the previous response ids: the row is the first prompt, then every response (trained, loss
mask 1) with the tokens between them (tool results, user turns; context, loss mask 0).

When the next prompt does not extend the row, a new row starts and the break is recorded with a cause:

- `chat_template`: the text of the history changed (a template re-rendered earlier turns or the previous
  response differently, e.g. a tool call rewritten in another format);
- `retokenization`: the same text came back as other token ids (the response was decoded and encoded again);
- `other`: the prompts share (almost) nothing: another conversation, e.g. a sub-agent or a judge.

Without a `decode` function (a tokenizer's `decode`) the cause is guessed from where the ids diverge: in
the earlier prompt -> `chat_template`, in the previous response -> `retokenization`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, List, Literal, Optional, Sequence, Tuple

from agentlightning.types import Triplet

__all__ = [
    "BreakCause",
    "TurnTokens",
    "TrajectoryRow",
    "ContinuityBreak",
    "triplet_tokens",
    "classify_break",
    "merge_turns",
    "break_counts",
    "observation_keys",
]

BreakCause = Literal["chat_template", "retokenization", "other"]
BREAK_CAUSES: Tuple[BreakCause, ...] = ("chat_template", "retokenization", "other")

Decode = Callable[[List[int]], str]


@dataclass
class TurnTokens:
    """The token ids of one LLM call (and the sampling-time logprobs of its response, when recorded)."""

    prompt_ids: List[int]
    response_ids: List[int]
    logprobs: Optional[List[float]] = None
    index: int = 0
    """Position of the call among the rollout's triplets."""


@dataclass
class TrajectoryRow:
    """One training row: `prompt_ids`, then `response_ids` where `loss_mask` marks the model's own tokens.

    `logprobs` aligns with `response_ids` (0.0 on context tokens) and is None when any merged call lacked them.
    """

    prompt_ids: List[int]
    response_ids: List[int]
    loss_mask: List[int]
    logprobs: Optional[List[float]]
    turns: List[int] = field(default_factory=lambda: [])
    """Indices of the calls merged into this row, in order."""
    response_starts: List[int] = field(default_factory=lambda: [])
    """Offset in `response_ids` where each merged call's response begins (aligned with `turns`)."""

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass
class ContinuityBreak:
    """Call `turn` did not extend the row ending with call `previous_turn`, so it starts a new row."""

    turn: int
    previous_turn: int
    mismatch_index: int
    """First position where the prompt differs from (previous prompt + previous response)."""
    expected_prefix_length: int
    prompt_length: int
    cause: BreakCause


def _logprob_values(raw: Any) -> Optional[List[float]]:
    """Accepts a list of floats, OpenAI `logprobs` / `logprobs.content` entries, or their JSON text."""
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    if isinstance(raw, dict):
        raw = raw.get("content")  # type: ignore[reportUnknownMemberType]
    if not isinstance(raw, list):
        return None
    values: List[float] = []
    for entry in raw:  # type: ignore[reportUnknownVariableType]
        value = entry.get("logprob") if isinstance(entry, dict) else entry  # type: ignore[reportUnknownMemberType]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        values.append(float(value))
    return values


def _token_ids(part: Any) -> Optional[List[int]]:
    ids = part.get("token_ids") if isinstance(part, dict) else None  # type: ignore[reportUnknownMemberType]
    if isinstance(ids, str):
        try:
            ids = json.loads(ids)
        except json.JSONDecodeError:
            return None
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) for i in ids):  # type: ignore[reportUnknownVariableType]
        return None
    return [int(i) for i in ids]  # type: ignore[reportUnknownVariableType]


def triplet_tokens(triplet: Triplet) -> Optional[Tuple[List[int], List[int], Optional[List[float]]]]:
    """`(prompt_ids, response_ids, response_logprobs)` of a triplet, or None when it lacks token ids.

    Logprobs whose count differs from the response's token count are unusable and come back as None.
    """
    prompt_ids, response_ids = _token_ids(triplet.prompt), _token_ids(triplet.response)
    if not prompt_ids or not response_ids:
        return None
    raw = triplet.response.get("logprobs") if isinstance(triplet.response, dict) else None  # type: ignore[reportUnknownMemberType]
    logprobs = _logprob_values(raw)
    if logprobs is not None and len(logprobs) != len(response_ids):
        logprobs = None
    return prompt_ids, response_ids, logprobs


def _first_mismatch(expected: Sequence[int], prompt: Sequence[int]) -> Optional[int]:
    for position, token in enumerate(expected):
        if position >= len(prompt) or prompt[position] != token:
            return position
    return None


def classify_break(
    previous_prompt: Sequence[int],
    previous_response: Sequence[int],
    prompt: Sequence[int],
    mismatch_index: int,
    decode: Optional[Decode] = None,
) -> BreakCause:
    """Why `prompt` does not start with `previous_prompt + previous_response` (see the module docstring)."""
    if mismatch_index < max(1, len(previous_prompt) // 2):
        return "other"
    expected = list(previous_prompt) + list(previous_response)
    if decode is not None:
        expected_text = decode(expected)
        prompt_text = decode(list(prompt))
        return "retokenization" if prompt_text.startswith(expected_text) else "chat_template"
    return "chat_template" if mismatch_index < len(previous_prompt) else "retokenization"


def merge_turns(
    turns: Sequence[TurnTokens], *, decode: Optional[Decode] = None
) -> Tuple[List[TrajectoryRow], List[ContinuityBreak]]:
    """Merge consecutive calls into rows while each prompt extends the row so far; returns rows and breaks."""
    rows: List[TrajectoryRow] = []
    breaks: List[ContinuityBreak] = []
    current: Optional[TrajectoryRow] = None
    last: Optional[TurnTokens] = None
    for turn in turns:
        if current is not None and last is not None:
            expected = current.prompt_ids + current.response_ids  # == last.prompt_ids + last.response_ids
            mismatch = _first_mismatch(expected, turn.prompt_ids)
            if mismatch is None:
                context = turn.prompt_ids[len(expected) :]
                current.response_ids += context + turn.response_ids
                current.loss_mask += [0] * len(context) + [1] * len(turn.response_ids)
                if current.logprobs is not None and turn.logprobs is not None:
                    current.logprobs += [0.0] * len(context) + turn.logprobs
                else:
                    current.logprobs = None
                current.turns.append(turn.index)
                current.response_starts.append(len(current.response_ids) - len(turn.response_ids))
                last = turn
                continue
            breaks.append(
                ContinuityBreak(
                    turn=turn.index,
                    previous_turn=last.index,
                    mismatch_index=mismatch,
                    expected_prefix_length=len(last.prompt_ids) + len(last.response_ids),
                    prompt_length=len(turn.prompt_ids),
                    cause=classify_break(last.prompt_ids, last.response_ids, turn.prompt_ids, mismatch, decode),
                )
            )
        current = TrajectoryRow(
            prompt_ids=list(turn.prompt_ids),
            response_ids=list(turn.response_ids),
            loss_mask=[1] * len(turn.response_ids),
            logprobs=None if turn.logprobs is None else list(turn.logprobs),
            turns=[turn.index],
            response_starts=[0],
        )
        rows.append(current)
        last = turn
    return rows, breaks


def break_counts(breaks: Sequence[ContinuityBreak]) -> dict[str, int]:
    """Number of breaks per cause (every cause listed, zeros included)."""
    counts = Counter(b.cause for b in breaks)
    return {cause: counts.get(cause, 0) for cause in BREAK_CAUSES}


def observation_keys(turns: Sequence[TurnTokens]) -> List[Tuple[int, ...]]:
    """What each call saw that the previous call did not: the tokens its prompt adds after the previous
    prompt + response (tool results, user turn), or its whole prompt when it does not extend them.
    Identical keys across a group's rollouts are the anchor states of step-level credit."""
    keys: List[Tuple[int, ...]] = []
    previous: Optional[List[int]] = None
    for turn in turns:
        if previous is not None and _first_mismatch(previous, turn.prompt_ids) is None:
            keys.append(tuple(turn.prompt_ids[len(previous) :]))
        else:
            keys.append(tuple(turn.prompt_ids))
        previous = turn.prompt_ids + turn.response_ids
    return keys
