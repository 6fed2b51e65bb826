"""`POST /proxy/pause` takes only a finite `retry_after_seconds` up to a day, and `/proxy/state` always answers.

Before: `{"retry_after_seconds": Infinity}` was stored, every `GET /proxy/state` answered 500 (Infinity is not
JSON) until a finite pause, and a trainer polling it never went on.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import httpx
import pytest

from agentlightning.gateway import Gateway
from agentlightning.web.pause import MAX_RETRY_AFTER_SECONDS, PauseGate


def admin(gateway: Gateway) -> dict[str, str]:
    return {"Authorization": f"Bearer {gateway.admin_key}", "Content-Type": "application/json"}


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "-1", "1e308", "86401"])
async def test_a_pause_with_a_non_finite_or_huge_retry_after_is_refused(
    make_gateway: Callable[..., Any], value: str
) -> None:
    gateway: Gateway = await make_gateway(upstreams=["http://127.0.0.1:9/v1"])
    root = gateway.endpoint
    refused = httpx.post(f"{root}/proxy/pause", content=f'{{"retry_after_seconds": {value}}}', headers=admin(gateway))
    assert refused.status_code == 422
    assert "retry_after_seconds" in str(refused.json()["detail"])
    state = httpx.get(f"{root}/proxy/state", headers=admin(gateway))
    assert state.status_code == 200 and state.json()["paused"] is False
    accepted = httpx.post(f"{root}/proxy/pause", json={"retry_after_seconds": 30}, headers=admin(gateway))
    assert accepted.status_code == 200 and accepted.json()["retry_after_seconds"] == 30


@pytest.mark.parametrize("value", [math.inf, math.nan, -0.5, MAX_RETRY_AFTER_SECONDS * 2])
def test_the_gate_itself_refuses_a_retry_after_it_could_not_report(value: float) -> None:
    gate = PauseGate(1.0)
    with pytest.raises(ValueError, match="retry_after_seconds"):
        gate.pause("swap", value)
    assert not gate.paused and gate.state()["retry_after_seconds"] == 1
    with pytest.raises(ValueError, match="retry_after_seconds"):
        PauseGate(value)
    with pytest.raises(TypeError, match="retry_after_seconds"):
        PauseGate("5")  # type: ignore[arg-type]
