"""ProxyLLM.get_base_url: routing URLs per rollout attempt, and the argument checks v0.3 makes."""

from __future__ import annotations

from typing import Any

import pytest

from agentlightning.types import ProxyLLM


def proxy(endpoint: str = "http://127.0.0.1:4000/v1") -> ProxyLLM:
    return ProxyLLM(endpoint=endpoint, model="m")


def test_routes_to_the_attempt_and_keeps_v1() -> None:
    assert proxy().get_base_url("ro-1", "at-1") == "http://127.0.0.1:4000/rollout/ro-1/attempt/at-1/v1"
    assert proxy("http://h:1/").get_base_url("ro-1", "at-1") == "http://h:1/rollout/ro-1/attempt/at-1"
    assert proxy().get_base_url() == "http://127.0.0.1:4000/v1"


@pytest.mark.parametrize(
    ("rollout_id", "attempt_id", "field"),
    [
        (1, "at-1", "rollout_id"),
        ("ro-1", 2, "attempt_id"),
        (b"ro", "at-1", "rollout_id"),
        ("ro-1", ["at"], "attempt_id"),
    ],
)
def test_non_string_ids_are_rejected_naming_the_field(rollout_id: Any, attempt_id: Any, field: str) -> None:
    with pytest.raises(TypeError, match=f"{field} must be a str"):
        proxy().get_base_url(rollout_id, attempt_id)
    with pytest.raises(ValueError, match=f"{field} must be a str"):  # what v0.3 raises: both catch sites work
        proxy().get_base_url(rollout_id, attempt_id)


def test_one_id_without_the_other_is_rejected() -> None:
    with pytest.raises(ValueError, match="together"):
        proxy().get_base_url("ro-1", None)
