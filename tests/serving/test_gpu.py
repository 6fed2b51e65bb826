"""The policy engine on CUDA: CUDA-graph decoding gives what eager decoding and Hugging Face give."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import torch

from agentlightning.serving.engine import PolicyEngine
from agentlightning.serving.sampling import SamplingParams
from tests.support.tiny_model import tiny_model

pytestmark = [
    pytest.mark.train,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
PROMPTS = [[1, 70, 71], [1] + list(range(20, 60)), [1, 9], [1, 5, 6, 7, 8]]


def _generate(model: Any, tokenizer: Any, params: SamplingParams, graphs: bool) -> tuple[list[Any], int]:
    engine = PolicyEngine(model, tokenizer, batch_window_s=0.05, cuda_graphs=graphs, seed=0)
    engine.start()

    async def run() -> list[Any]:
        return await asyncio.gather(*[engine.generate(p, params, n=2) for p in PROMPTS])

    try:
        return asyncio.run(run()), engine.slot_model.graphs_captured
    finally:
        engine.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_decoding_equals_eager_decoding_token_for_token(dtype: torch.dtype) -> None:
    model, tokenizer = tiny_model(hidden_size=64, layers=3)
    model = model.to("cuda", dtype=dtype)
    sampled = SamplingParams(max_tokens=24, temperature=1.0, ignore_eos=True, seed=7)
    for params in (GREEDY, sampled):
        eager, _ = _generate(model, tokenizer, params, graphs=False)
        graphed, captured = _generate(model, tokenizer, params, graphs=True)
        assert captured > 0
        for want, got in zip(eager, graphed, strict=True):
            assert [e.token_ids for e in got] == [e.token_ids for e in want]
            for w, g in zip(want, got, strict=True):
                assert g.logprobs == pytest.approx(w.logprobs, abs=1e-3 if dtype == torch.bfloat16 else 1e-5)


def test_greedy_graph_decoding_equals_hugging_face_generate() -> None:
    model, tokenizer = tiny_model(hidden_size=64, layers=3)
    model = model.to("cuda")
    results, _ = _generate(model, tokenizer, GREEDY, graphs=True)
    for prompt, ends in zip(PROMPTS, results, strict=True):
        expected = model.generate(
            torch.tensor([prompt], device="cuda"), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :].tolist()
        assert all(end.token_ids == expected for end in ends)


def test_new_weights_are_served_by_the_captured_graphs() -> None:
    model, tokenizer = tiny_model(hidden_size=64, layers=3)
    model = model.to("cuda")
    other, _ = tiny_model(seed=1, hidden_size=64, layers=3)
    engine = PolicyEngine(model, tokenizer, batch_window_s=0.0, cuda_graphs=True)
    engine.start()
    try:
        before = asyncio.run(engine.generate(PROMPTS[0], GREEDY))[0]
        captured = engine.slot_model.graphs_captured
        engine.update_weights(other.state_dict())  # copied in place: the graphs stay valid
        after = asyncio.run(engine.generate(PROMPTS[0], GREEDY))[0]
        assert engine.slot_model.graphs_captured == captured
    finally:
        engine.close()
    expected = other.to("cuda").generate(
        torch.tensor([PROMPTS[0]], device="cuda"), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0
    )[0, len(PROMPTS[0]) :]
    assert after.token_ids == expected.tolist() and after.logprobs != before.logprobs


def test_compiled_graph_decoding_equals_eager_decoding() -> None:
    model, tokenizer = tiny_model(hidden_size=64, layers=3)
    model = model.to("cuda")
    eager, _ = _generate(model, tokenizer, GREEDY, graphs=False)
    engine = PolicyEngine(model, tokenizer, batch_window_s=0.05, compile=True, seed=0)
    engine.start()

    async def run() -> list[Any]:
        return await asyncio.gather(*[engine.generate(p, GREEDY, n=2) for p in PROMPTS])

    try:
        compiled = asyncio.run(run())
        regional = engine.slot_model.regional
        assert regional is not None and regional.active and engine.slot_model.graphs_captured > 0
        captured = engine.slot_model.graphs_captured
        other, _ = tiny_model(seed=1, hidden_size=64, layers=3)
        engine.update_weights(other.state_dict())  # in place: the compiled graphs read the new weights
        swapped = asyncio.run(engine.generate(PROMPTS[0], GREEDY))[0]
        assert engine.slot_model.graphs_captured == captured
    finally:
        engine.close()
    for want, got in zip(eager, compiled, strict=True):
        assert [e.token_ids for e in got] == [e.token_ids for e in want]
    expected = other.to("cuda").generate(
        torch.tensor([PROMPTS[0]], device="cuda"), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0
    )[0, len(PROMPTS[0]) :]
    assert swapped.token_ids == expected.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_graph_decoding_equals_unfused_eager_decoding(dtype: torch.dtype) -> None:
    model, tokenizer = tiny_model(hidden_size=64, layers=3)
    model = model.to("cuda", dtype=dtype)
    sampled = SamplingParams(max_tokens=24, temperature=1.0, ignore_eos=True, seed=7)
    for params in (GREEDY, sampled):
        engine = PolicyEngine(
            copy.deepcopy(model), tokenizer, batch_window_s=0.05, cuda_graphs=False, fuse=False, seed=0
        )
        engine.start()
        try:
            want = asyncio.run(_gather(engine, params))
        finally:
            engine.close()
        got, _ = _generate(model, tokenizer, params, graphs=True)  # fused by default
        for w, g in zip(want, got, strict=True):
            assert [e.token_ids for e in g] == [e.token_ids for e in w]


async def _gather(engine: PolicyEngine, params: SamplingParams) -> list[Any]:
    return await asyncio.gather(*[engine.generate(p, params, n=2) for p in PROMPTS])
