"""The engine's deterministic mode: a completion depends on the weights and the request, not on timing."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Tuple

import pytest

from agentlightning.serving.engine import PolicyEngine
from agentlightning.serving.sampling import SamplingParams
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

PROMPTS = [[1, 5 + i, 17, 40 + 3 * i, 9, 2][: 3 + i % 4] for i in range(6)]
PARAMS = SamplingParams(max_tokens=12, temperature=1.0, logprobs=True)

Completion = Tuple[Tuple[int, ...], Tuple[float, ...]]


def _generate(engine: PolicyEngine, prompts: List[List[int]], concurrently: bool) -> List[Completion]:
    async def run() -> List[Completion]:
        if concurrently:
            ends = await asyncio.gather(*(engine.generate(p, PARAMS) for p in prompts))
        else:
            ends = [await engine.generate(p, PARAMS) for p in prompts]
        return [(tuple(e[0].token_ids), tuple(e[0].logprobs)) for e in ends]

    return asyncio.run(run())


def _engine(deterministic: bool) -> PolicyEngine:
    model, tokenizer = tiny_model(seed=0)
    engine = PolicyEngine(model, tokenizer, max_batch_size=8, seed=0, deterministic=deterministic)
    engine.start()
    return engine


def test_completions_do_not_depend_on_what_else_runs_or_on_arrival_order() -> None:
    engine = _engine(deterministic=True)
    try:
        one_by_one = _generate(engine, PROMPTS, concurrently=False)
        together = _generate(engine, PROMPTS, concurrently=True)
        reversed_order = _generate(engine, PROMPTS[::-1], concurrently=True)[::-1]
        # Identical requests (a GRPO group's first prompt) get different seeds by their count.
        group = _generate(engine, [PROMPTS[0]] * 4, concurrently=True)
    finally:
        engine.close()
    # Each run of a prompt under these weights is its next occurrence: the 1st, 2nd, 3rd time it came.
    fresh = _engine(deterministic=True)
    try:
        replay = [_generate(fresh, PROMPTS, concurrently=True) for _ in range(3)]
        replay_group = _generate(fresh, [PROMPTS[0]] * 4, concurrently=True)
    finally:
        fresh.close()
    assert replay == [one_by_one, together, reversed_order]  # tokens and logprobs, bit for bit
    assert sorted(group) == sorted(replay_group)  # the same set, whichever request got which
    assert len({tokens for tokens, _ in group}) > 1
    assert fresh.prefix_cache is None and fresh.batches_run == 3 * len(PROMPTS) + 4  # one request per admission


def test_new_weights_start_the_occurrence_count_again() -> None:
    engine = _engine(deterministic=True)
    try:
        first = _generate(engine, PROMPTS[:2], concurrently=True)
        state: Dict[str, Any] = {k: v.clone() for k, v in engine.model.state_dict().items()}
        engine.update_weights(state)  # the same values, a new version: seeds change with the version
        second = _generate(engine, PROMPTS[:2], concurrently=True)
    finally:
        engine.close()
    assert engine.weights_version == 1 and first != second


def test_the_default_engine_batches_concurrent_requests() -> None:
    engine = _engine(deterministic=False)
    try:
        _generate(engine, PROMPTS, concurrently=True)
    finally:
        engine.close()
    assert engine.batches_run < len(PROMPTS)
