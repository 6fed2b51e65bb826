"""`generate_id`: random lowercase hex of the asked length, refused outside 1..40."""

from __future__ import annotations

import string

import pytest

from agentlightning.utils.id import generate_id


@pytest.mark.parametrize("length", [1, 7, 8, 12, 40])
def test_ids_are_hex_of_the_asked_length(length: int) -> None:
    ids = {generate_id(length) for _ in range(200)}
    assert all(len(i) == length and set(i) <= set(string.hexdigits.lower()) for i in ids)
    if length >= 8:
        assert len(ids) == 200  # 32+ random bits each: no repeats among a few hundred


@pytest.mark.parametrize("length", [0, -1, 41])
def test_lengths_outside_one_to_forty_are_refused(length: int) -> None:
    with pytest.raises(ValueError, match="1..40"):
        generate_id(length)
