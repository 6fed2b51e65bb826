"""One base model, several LoRA adapters: `model="base:adapter"` picks the adapter per request."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Iterator, Optional

import httpx
import openai
import pytest
import torch

from agentlightning.serving.adapters import (
    UnknownAdapterError,
    active_adapter,
    adapter_parameters,
    resolve_adapter,
)
from agentlightning.serving.chat import render_chat_prompt
from agentlightning.serving.engine import PolicyEngine
from agentlightning.serving.sampling import SamplingParams
from agentlightning.serving.server import PolicyServer
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

HELLO: list[Any] = [{"role": "user", "content": "hello"}]
ADAPTERS = ("planner", "coder")


def two_adapter_model() -> tuple[Any, Any]:
    """The tiny Llama with two LoRA adapters whose (non-zero) weights differ, so each changes the output."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer = tiny_model(seed=0)

    def config() -> LoraConfig:
        return LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")

    peft_model: Any = get_peft_model(model, config(), adapter_name=ADAPTERS[0])
    peft_model.add_adapter(ADAPTERS[1], config())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name in ADAPTERS:
            for param in adapter_parameters(peft_model, name):
                param.copy_(torch.randn(param.shape, generator=generator))
    return peft_model.eval(), tokenizer


def next_token_logprobs(model: Any, prompt_ids: list[int], adapter: Optional[str]) -> torch.Tensor:
    with torch.no_grad(), active_adapter(model, adapter):
        logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
    return torch.log_softmax(logits, dim=-1)


@pytest.fixture
def adapter_server() -> Iterator[PolicyServer]:
    model, tokenizer = two_adapter_model()
    with PolicyServer(model, tokenizer, model_name="tiny", seed=0, adapters=ADAPTERS, batch_window_s=0.05) as server:
        yield server


def test_resolve_adapter_names() -> None:
    assert resolve_adapter("tiny", "tiny", ADAPTERS) is None
    assert resolve_adapter("tiny:planner", "tiny", ADAPTERS) == "planner"
    assert resolve_adapter("smollm2:coder", "tiny", ADAPTERS) == "coder"  # the prefix is the client's alias
    assert resolve_adapter("gpt-4o", "tiny", ADAPTERS) is None
    assert resolve_adapter("qwen2.5:0.5b", "tiny", ()) is None  # a server without adapters serves any name
    with pytest.raises(UnknownAdapterError, match=r"unknown adapter 'critic'.*'tiny:planner'"):
        resolve_adapter("tiny:critic", "tiny", ADAPTERS)


def test_each_model_name_is_answered_by_its_adapter(adapter_server: PolicyServer) -> None:
    """The first token's logprob matches a forward pass under the named adapter, and not under the others."""
    model = adapter_server.engine.model
    prompt_ids = render_chat_prompt(adapter_server.engine.tokenizer, HELLO)
    expected = {name: next_token_logprobs(model, prompt_ids, name) for name in (None, *ADAPTERS)}
    client = openai.AsyncOpenAI(base_url=adapter_server.endpoint, api_key="unused", max_retries=0)
    names = {"tiny": None, "tiny:planner": "planner", "tiny:coder": "coder"}

    async def ask(model_name: str, seed: int) -> dict[str, Any]:
        response = await client.chat.completions.create(
            model=model_name, messages=HELLO, max_tokens=1, seed=seed, logprobs=True
        )
        return response.model_dump()

    async def ask_all() -> list[tuple[str, dict[str, Any]]]:
        # Concurrent and interleaved: requests of different adapters must not share a batch.
        order = [name for seed in range(3) for name in names]
        answers = await asyncio.gather(*(ask(name, seed) for seed, name in enumerate(order)))
        return list(zip(order, answers, strict=True))

    for model_name, data in asyncio.run(ask_all()):
        assert data["model"] == model_name
        choice = data["choices"][0]
        token = choice["token_ids"][0]
        logprob = choice["logprobs"]["content"][0]["logprob"]
        for adapter, values in expected.items():
            matches = abs(float(values[token]) - logprob) < 1e-4
            assert matches == (adapter == names[model_name]), (model_name, adapter, float(values[token]), logprob)


def test_interleaved_requests_batch_per_adapter_without_waiting_for_each_other() -> None:
    """All twelve are admitted together; each decode step serves one adapter's four rows (6 steps, not 24)."""
    model, tokenizer = two_adapter_model()
    engine = PolicyEngine(model, tokenizer, max_batch_size=32, batch_window_s=0.2, seed=0, adapters=ADAPTERS)
    order = [None, "planner", "coder"] * 4

    async def run() -> list[int]:
        # Submitted back to back: all are queued within the first batch's window.
        params = SamplingParams(max_tokens=3, ignore_eos=True)
        streams = [engine.submit([1, 5, 6], params, adapter=name) for name in order]
        return [len(await stream.collect()) for stream in streams]

    engine.start()
    try:
        assert asyncio.run(run()) == [1] * len(order)
    finally:
        engine.close()
    assert engine.batches_run == 1
    assert engine.steps_run == 3 * 2  # the first token comes from the prefill, two more per adapter
    with pytest.raises(ValueError, match="unknown adapter 'critic'"):
        engine.submit([1], SamplingParams(), adapter="critic")


def test_unknown_adapter_is_a_404_naming_it(adapter_server: PolicyServer) -> None:
    response = httpx.post(
        f"{adapter_server.endpoint}/chat/completions", json={"model": "tiny:critic", "messages": HELLO}
    )
    assert response.status_code == 404
    error = response.json()["error"]
    assert "unknown adapter 'critic'" in error["message"] and "tiny:coder" in error["message"]
    assert error["param"] == "model"


def test_models_lists_the_base_and_every_adapter(adapter_server: PolicyServer) -> None:
    client = openai.OpenAI(base_url=adapter_server.endpoint, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["tiny", "tiny:planner", "tiny:coder"]
    assert adapter_server.as_resource(adapter="coder").model == "tiny:coder"
    assert adapter_server.as_resource().model == "tiny"
    with pytest.raises(ValueError, match="unknown adapter 'critic'"):
        adapter_server.as_resource(adapter="critic")


def test_adapters_need_a_peft_model_that_holds_them() -> None:
    model, tokenizer = tiny_model(seed=0)
    with pytest.raises(ValueError, match="need a peft model"):
        PolicyServer(model, tokenizer, adapters=["planner"])
    peft_model, tokenizer = two_adapter_model()
    with pytest.raises(ValueError, match=r"no adapters \['critic'\]"):
        PolicyServer(peft_model, tokenizer, adapters=["planner", "critic"])
    with pytest.raises(ValueError, match="must match"):
        PolicyServer(peft_model, tokenizer, adapters=["plan:ner"])


def test_update_weights_copies_adapters_into_a_served_copy() -> None:
    """Async training serves a copy: the learner's new adapter weights are copied in, the base untouched."""
    learner_model, tokenizer = two_adapter_model()
    served = copy.deepcopy(learner_model)
    server = PolicyServer(served, tokenizer, adapters=ADAPTERS)
    with torch.no_grad():
        for param in adapter_parameters(learner_model, "coder"):
            param.add_(1.0)
    base_before = {n: p.clone() for n, p in served.named_parameters() if "lora_" not in n}
    assert server.update_weights(learner_model) == 1
    learned = dict(learner_model.named_parameters())
    for name, param in served.named_parameters():
        if "lora_" in name:
            assert torch.equal(param, learned[name]), name
        else:
            assert torch.equal(param, base_before[name]), name


async def test_each_adapter_reuses_only_its_own_prompt_prefixes() -> None:
    model, tokenizer = two_adapter_model()
    prompt = [1] + list(range(20, 60))  # long enough to be stored
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    cached = PolicyEngine(model, tokenizer, adapters=ADAPTERS, batch_window_s=0.0)
    plain = PolicyEngine(model, tokenizer, adapters=ADAPTERS, batch_window_s=0.0, prefix_cache_entries=0)
    cached.start()
    plain.start()
    try:
        for adapter in (None, *ADAPTERS, None, *ADAPTERS):  # the second round reuses stored prefixes
            got = (await cached.generate(prompt, greedy, adapter=adapter))[0]
            want = (await plain.generate(prompt, greedy, adapter=adapter))[0]
            assert got.token_ids == want.token_ids
            assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    finally:
        cached.close()
        plain.close()
    for adapter in (None, *ADAPTERS):
        store = cached.prefix_cache_for(adapter)
        assert store is not None and len(store) == 1 and store.hits == 1
    assert plain.prefix_cache is None
