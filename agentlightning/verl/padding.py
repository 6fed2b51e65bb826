"""Fixed-length token rows for verl batches: prompts are left-padded, responses right-padded."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["get_left_padded_ids_and_attention_mask", "get_right_padded_ids_and_attention_mask"]


def _check(max_length: int) -> None:
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")


def get_left_padded_ids_and_attention_mask(
    ids: Sequence[int], max_length: int, pad_token_id: int
) -> tuple[list[int], list[int]]:
    """Pad on the left (or keep the last `max_length` tokens) so a prompt ends where its response begins.

    Returns the ids and an attention mask with 1 on real tokens and 0 on padding, both `max_length` long.
    """
    _check(max_length)
    kept = list(ids[-max_length:]) if len(ids) > max_length else list(ids)
    pad = max_length - len(kept)
    return [pad_token_id] * pad + kept, [0] * pad + [1] * len(kept)


def get_right_padded_ids_and_attention_mask(
    ids: Sequence[int], max_length: int, pad_token_id: int
) -> tuple[list[int], list[int]]:
    """Pad on the right (or keep the first `max_length` tokens) so a response starts right after its prompt."""
    _check(max_length)
    kept = list(ids[:max_length])
    pad = max_length - len(kept)
    return kept + [pad_token_id] * pad, [1] * len(kept) + [0] * pad
