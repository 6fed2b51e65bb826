"""The policy engine: request batching, weight updates between batches, request validation."""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest
import torch

from agentlightning.serving.engine import PolicyEngine, SequenceDelta, SequenceEnd
from agentlightning.serving.sampling import SamplingParams
from agentlightning.serving.weights import merged_state_dict, shares_parameters
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


@pytest.fixture
def engine():
    model, tokenizer = tiny_model()
    engine = PolicyEngine(model, tokenizer, max_batch_size=4, batch_window_s=5.0, seed=0)
    engine.start()
    yield engine
    engine.close()


async def test_concurrent_requests_share_one_batch(engine: PolicyEngine) -> None:
    # max_batch_size=4 closes the batch as soon as four rows are queued (the 5 s window is never waited out).
    results = await asyncio.gather(
        *[engine.generate([1, 30 + i], GREEDY) for i in range(2)], engine.generate([1, 40], GREEDY, n=2)
    )
    assert engine.batches_run == 1
    assert [len(r) for r in results] == [1, 1, 2]
    assert results[2][0].token_ids == results[2][1].token_ids  # greedy: both choices agree


async def test_stream_events_add_up_to_the_end_event(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    events = [e async for e in engine.submit([1, 33, 34], SamplingParams(max_tokens=6, seed=1, ignore_eos=True), n=2)]
    ends = {e.index: e for e in events if isinstance(e, SequenceEnd)}
    for index in (0, 1):
        deltas = [e for e in events if isinstance(e, SequenceDelta) and e.index == index]
        assert [d.token_id for d in deltas] == ends[index].token_ids
        assert [d.logprob for d in deltas] == ends[index].logprobs
        assert "".join(d.text for d in deltas) + ends[index].text_tail == ends[index].text


async def test_update_weights_serves_new_weights_and_bumps_the_version(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    before = (await engine.generate([1, 50, 51], GREEDY))[0]
    other, _ = tiny_model(seed=1)
    assert engine.update_weights(other.state_dict()) == 1
    after = (await engine.generate([1, 50, 51], GREEDY))[0]
    assert after.weights_version == 1 and before.weights_version == 0
    assert after.logprobs != before.logprobs
    # The served weights are now exactly the other model's.
    for name, tensor in engine.model.state_dict().items():
        assert torch.equal(tensor, other.state_dict()[name])


async def test_stored_prompt_prefixes_are_forgotten_when_the_weights_change(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    prompt = [1] + list(range(20, 60))
    before = (await engine.generate(prompt, GREEDY))[0]
    assert engine.prefix_cache is not None and len(engine.prefix_cache) == 1
    other, _ = tiny_model(seed=1)
    engine.update_weights(other.state_dict())
    assert len(engine.prefix_cache) == 0
    after = (await engine.generate(prompt, GREEDY))[0]
    fresh = PolicyEngine(other, engine.tokenizer, prefix_cache_entries=0)
    fresh.start()
    try:
        expected = (await fresh.generate(prompt, GREEDY))[0]
    finally:
        fresh.close()
    assert after.logprobs != before.logprobs
    assert after.token_ids == expected.token_ids
    assert after.logprobs == pytest.approx(expected.logprobs, abs=1e-5)


async def test_shared_model_update_only_marks_a_new_version(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    before = (await engine.generate([1, 60], GREEDY))[0]
    with torch.no_grad():
        for parameter in engine.model.parameters():
            parameter.add_(0.05)
    assert engine.update_weights(engine.model) == 1
    after = (await engine.generate([1, 60], GREEDY))[0]
    assert after.logprobs != before.logprobs


def test_mismatched_weights_are_rejected(engine: PolicyEngine) -> None:
    with pytest.raises(ValueError, match="do not match"):
        engine.update_weights({"not.a.weight": torch.zeros(1)})
    assert engine.weights_version == 0


async def test_exclusive_holds_generation_until_released(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    entered = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with engine.exclusive():
            entered.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(30)
    task = asyncio.ensure_future(engine.generate([1, 70], GREEDY))
    await asyncio.sleep(0.2)  # give the engine a chance to (wrongly) run the batch
    assert not task.done()
    release.set()
    result = await task
    holder.join()
    assert len(result[0].token_ids) == 8


async def test_requests_are_validated(engine: PolicyEngine) -> None:
    with pytest.raises(ValueError, match="empty"):
        engine.submit([], GREEDY)
    with pytest.raises(ValueError, match="n must be"):
        engine.submit([1], GREEDY, n=0)
    with pytest.raises(ValueError, match="context"):
        engine.submit([1] * 600, GREEDY)


async def test_max_tokens_is_clamped_to_the_context(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    result = await engine.generate([1] * 505, SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True))
    assert len(result[0].token_ids) == 512 - 505


async def test_submit_needs_a_running_engine() -> None:
    model, tokenizer = tiny_model()
    engine = PolicyEngine(model, tokenizer)
    with pytest.raises(RuntimeError, match="start"):
        engine.submit([1, 2], GREEDY)


def test_lora_weights_are_merged_for_a_copy_of_the_served_model() -> None:
    from peft import LoraConfig, get_peft_model

    base, _ = tiny_model()
    served = copy.deepcopy(base)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    assert not shares_parameters(peft_model, served)
    merged = merged_state_dict(peft_model)
    served.load_state_dict(merged)
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
        actual = served(input_ids=ids).logits
    assert torch.allclose(expected, actual, atol=1e-5)
    assert shares_parameters(peft_model, base)  # peft wraps in place: sharing the base model needs no copy
