"""Fused projections and regional compilation serve what the model's own layers serve, token for token."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, List

import httpx
import pytest
import torch

from agentlightning.serving.engine import PolicyEngine
from agentlightning.serving.fingerprint import (
    FINGERPRINT_PATH,
    WeightsFingerprint,
    compare_fingerprints,
    fingerprint_of,
)
from agentlightning.serving.fused import fuse_layers
from agentlightning.serving.sampling import SamplingParams
from agentlightning.serving.server import PolicyServer
from tests.support.tiny_model import ScriptedLM, tiny_model

pytestmark = pytest.mark.train

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
SEEDED = SamplingParams(max_tokens=24, temperature=1.0, ignore_eos=True, seed=7)
PROMPTS = [[1, 70, 71], [1] + list(range(20, 60)), [1, 9], [1, 5, 6, 7, 8]]


def _model(seed: int = 0) -> tuple[Any, Any]:
    return tiny_model(seed, hidden_size=64, layers=3)


def _run(engine: PolicyEngine, params: SamplingParams) -> List[Any]:
    async def run() -> List[Any]:
        return await asyncio.gather(*[engine.generate(p, params, n=2) for p in PROMPTS])

    return asyncio.run(run())


def _generate(model: Any, tokenizer: Any, **options: Any) -> dict[str, List[Any]]:
    engine = PolicyEngine(model, tokenizer, batch_window_s=0.05, seed=0, **options)
    engine.start()
    try:
        return {"greedy": _run(engine, GREEDY), "seeded": _run(engine, SEEDED)}
    finally:
        engine.close()


def _assert_same(want: dict[str, List[Any]], got: dict[str, List[Any]]) -> None:
    for kind in want:
        for w, g in zip(want[kind], got[kind], strict=True):
            assert [e.token_ids for e in g] == [e.token_ids for e in w], kind
            for a, b in zip(w, g, strict=True):
                assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


def test_fused_layers_serve_the_unfused_tokens() -> None:
    model, tokenizer = _model()
    unfused = _generate(copy.deepcopy(model), tokenizer, fuse=False)
    engine = PolicyEngine(model, tokenizer, batch_window_s=0.05, seed=0, fuse=True)
    engine.start()
    try:
        fused = {"greedy": _run(engine, GREEDY), "seeded": _run(engine, SEEDED)}
        plan = engine.slot_model.fused
        assert plan is not None and plan.active and plan.calls > 0
        assert plan.packed  # CPU: oneDNN-prepacked weights
    finally:
        engine.close()
    _assert_same(unfused, fused)


def test_regional_compile_serves_the_eager_tokens() -> None:
    model, tokenizer = _model()
    eager = _generate(copy.deepcopy(model), tokenizer, fuse=False)
    engine = PolicyEngine(model, tokenizer, batch_window_s=0.05, seed=0, compile=True)
    engine.start()
    try:
        compiled = {"greedy": _run(engine, GREEDY), "seeded": _run(engine, SEEDED)}
        regional = engine.slot_model.regional
        assert regional is not None and regional.active, regional and regional.reason
        assert regional.compile_s  # every variant compiled (and timed) at start
        other, _ = _model(seed=1)
        engine.update_weights(other.state_dict())  # copied in place: the compiled layers read the new weights
        swapped = _run(engine, GREEDY)
    finally:
        engine.close()
    _assert_same(eager, compiled)
    _assert_same({"greedy": _generate(other, tokenizer, fuse=False)["greedy"]}, {"greedy": swapped})


@pytest.mark.parametrize("how", ["state_dict", "in_place"])
def test_new_weights_are_served_after_fusing(how: str) -> None:
    model, tokenizer = _model()
    other, _ = _model(seed=1)
    expected = _generate(copy.deepcopy(other), tokenizer, fuse=False)["greedy"]
    engine = PolicyEngine(model, tokenizer, batch_window_s=0.05, seed=0, fuse=True)
    engine.start()
    try:
        before = _run(engine, GREEDY)
        if how == "state_dict":
            engine.update_weights(other.state_dict())
        else:  # shared-model mode: the learner changes the served parameters in place, then announces it
            with torch.no_grad():
                for mine, theirs in zip(model.parameters(), other.parameters(), strict=True):
                    mine.copy_(theirs)
            engine.update_weights(model)
        after = _run(engine, GREEDY)
    finally:
        engine.close()
    assert [e.token_ids for e in after[0]] != [e.token_ids for e in before[0]]
    _assert_same({"greedy": expected}, {"greedy": after})


def test_views_keep_in_place_copies_and_training_on_the_parameters() -> None:
    model, _ = _model()
    reference = copy.deepcopy(model)
    plan = fuse_layers(model)
    attn = model.model.layers[0].self_attn
    assert plan.active and plan.layers[0].qkv.weight.data_ptr() == attn.q_proj.weight.data_ptr()
    ids = torch.tensor([[1, 5, 6, 7, 8, 9]])
    for net in (model, reference):  # training runs the model's own code, on the same parameters
        net.train()
        net(ids).logits.square().mean().backward()
    grads = zip(model.model.layers[0].parameters(), reference.model.layers[0].parameters(), strict=True)
    assert all(torch.allclose(a.grad, b.grad, atol=1e-6) for a, b in grads)
    with torch.no_grad():
        attn.k_proj.weight.add_(1.0)  # an optimizer step: in place, seen by the fused matrix
    assert bool((plan.layers[0].qkv.weight[attn.q_proj.weight.shape[0]] == attn.k_proj.weight[0]).all())
    clone = copy.deepcopy(model)  # a copy runs its own weights, not the original's fused ones
    with torch.no_grad():
        clone.model.layers[0].mlp.down_proj.weight.zero_()
        assert not torch.allclose(clone.eval()(ids).logits, model.eval()(ids).logits)


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_qwen_layers_fuse_to_the_same_logits(family: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        family,
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    reference = copy.deepcopy(model)
    plan = fuse_layers(model)
    assert plan.active, plan.reason
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)
        plan.pack(batch_hint=8)
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-4)
    assert plan.calls > 0


def test_models_that_do_not_fit_keep_their_own_layers() -> None:
    from peft import LoraConfig, get_peft_model

    scripted = fuse_layers(ScriptedLM([5, 6], vocab_size=16, eos_token_id=2))
    assert not scripted.active and scripted.reason is not None and "decoder layers" in scripted.reason
    model, tokenizer = _model()
    lora: Any = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    plan = fuse_layers(lora)
    assert not plan.active and plan.reason is not None and "peft" in plan.reason
    engine = PolicyEngine(lora, tokenizer, batch_window_s=0.0, compile=True)
    engine.start()
    try:
        assert engine.slot_model.regional is None  # fell back to eager decoding, with the reason logged
        assert asyncio.run(engine.generate([1, 9], GREEDY))[0].token_ids
    finally:
        engine.close()


def _served(server: PolicyServer) -> WeightsFingerprint:
    url = f"{server.endpoint.removesuffix('/v1')}{FINGERPRINT_PATH}"
    return WeightsFingerprint.model_validate(httpx.get(url, params={"per_layer": 0}, timeout=30).json())


def test_an_update_frees_the_prepacked_copies_and_the_fingerprint_reads_what_is_served() -> None:
    model, tokenizer = _model()
    server = PolicyServer(model, tokenizer, port=0, fuse=True)
    server.start()
    engine, attn = server.engine, model.model.layers[0].self_attn
    name = "model.layers.0.self_attn.k_proj.weight"
    try:
        plan = engine.slot_model.fused
        assert plan is not None and plan.packed and all(layer.packed is not None for layer in plan.layers)
        parameters = dict(model.named_parameters())
        packed = engine.packed_weights()
        assert name in packed and "lm_head.weight" in packed
        assert all(torch.equal(read(), parameters.get(key, model.lm_head.weight)) for key, read in packed.items())

        with engine.exclusive(weights_change=True):  # a learner update: the copies' memory is free meanwhile
            assert all(layer.packed is None for layer in plan.layers) and not engine.packed_weights()
            with torch.no_grad():
                attn.k_proj.weight.add_(0.5)
        engine.update_weights(model)  # shared-model mode: announced, packed again from the new values
        assert torch.equal(engine.packed_weights()[name](), attn.k_proj.weight)
        assert _served(server) == fingerprint_of(model, version=1, per_layer=0)

        with torch.no_grad():  # changed but never announced: the copies still serve the old values
            attn.k_proj.weight.add_(0.5)
        problems = compare_fingerprints(fingerprint_of(model, version=1, per_layer=0), _served(server))
        assert len(problems) == 1 and name in problems[0] and "checksum" in problems[0]
    finally:
        server.stop()
    assert "forward" not in model.model.layers[0].__dict__  # closing gave the layers their own code back
    assert "forward" not in model.lm_head.__dict__
