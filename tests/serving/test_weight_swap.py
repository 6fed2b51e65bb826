"""Weight swaps while rollouts run: a request that arrives during a swap waits for it, none fails.

A real policy server on 127.0.0.1 serves a tiny random Llama; concurrent multi-turn "rollouts" call it
through the OpenAI client with retries off (a 429 would fail the rollout), while another thread swaps
in other weights again and again.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, List

import openai
import pytest

from agentlightning.serving.server import PolicyServer
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

SWAPS = 12
ROLLOUTS_AT_ONCE = 12
TURNS = 3


async def _rollout(client: openai.AsyncOpenAI, index: int) -> List[str]:
    """A multi-turn conversation; returns the weights version of each answer."""
    messages: List[Any] = [{"role": "user", "content": f"question {index}"}]
    versions: List[str] = []
    for _ in range(TURNS):
        response = await client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=1.0)
        versions.append(str(response.system_fingerprint))
        messages += [
            {"role": "assistant", "content": response.choices[0].message.content or ""},
            {"role": "user", "content": "and then?"},
        ]
    return versions


def test_repeated_swaps_under_concurrent_rollouts_fail_no_rollout() -> None:
    model, tokenizer = tiny_model(seed=0)
    weights = [tiny_model(seed=seed)[0].state_dict() for seed in (1, 2)]
    with PolicyServer(model, tokenizer, model_name="tiny", retry_after_s=0.1) as server:
        swapping = threading.Event()

        def swap_repeatedly() -> None:
            swapping.set()
            for k in range(SWAPS):
                while server.in_flight == 0:  # swap while requests are being answered
                    threading.Event().wait(0.001)
                server.swap_weights(weights[k % 2], drain_timeout=60)

        async def run() -> List[Any]:
            client = openai.AsyncOpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)
            swapper = asyncio.ensure_future(asyncio.to_thread(swap_repeatedly))
            outcomes: List[Any] = []
            index = 0
            while not swapper.done():  # waves of concurrent rollouts until every swap is done
                wave = [_rollout(client, index + i) for i in range(ROLLOUTS_AT_ONCE)]
                index += ROLLOUTS_AT_ONCE
                outcomes += await asyncio.gather(*wave, return_exceptions=True)
            await swapper
            return outcomes

        outcomes = asyncio.run(run())

    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert not failures, f"{len(failures)} of {len(outcomes)} rollouts failed: {failures[:3]}"
    assert len(server.swaps) == SWAPS and server.weights_version == SWAPS
    assert server.rejected_while_paused == 0 and sum(s.rejected_requests for s in server.swaps) == 0
    # Every held request is accounted for, and each swap covers its drain and its copy.
    assert server.gate.held == sum(s.held_requests for s in server.swaps)
    for report in server.swaps:
        assert report.swap_ms >= report.drain_ms + report.weight_sync_ms
        assert report.held_requests == 0 or report.wait_ms_max > 0
    # Answers came from several weights versions: the rollouts did run across the swaps.
    versions = {version for rollout in outcomes for version in rollout}
    assert len(versions) >= 2 and versions <= {f"weights-v{v}" for v in range(SWAPS + 1)}
