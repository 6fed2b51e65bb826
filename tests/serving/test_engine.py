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


async def test_an_exclusive_section_for_a_weights_change_empties_the_prefix_cache_first(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    prompt = [1] + list(range(20, 60))
    await engine.generate(prompt, GREEDY)
    assert engine.prefix_cache is not None and len(engine.prefix_cache) == 1
    with engine.exclusive():  # a reader (a fingerprint, a sampler) keeps the cache
        assert len(engine.prefix_cache) == 1
    with engine.exclusive(weights_change=True):  # a trainer's update: the entries would go stale
        assert len(engine.prefix_cache) == 0
    assert engine.weights_version == 0  # the new version is marked by update_weights, after the change


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


# Decoding ------------------------------------------------------------------------------------------------


def _plain_logprobs(model: torch.nn.Module, prompt: list[int], generated: list[int], temperature: float):
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return [logprobs[len(prompt) - 1 + k, token].item() for k, token in enumerate(generated)]


async def test_greedy_decoding_equals_hugging_face_generate(engine: PolicyEngine) -> None:
    model, _ = tiny_model(seed=3, hidden_size=64)
    engine = PolicyEngine(model, engine.tokenizer, batch_window_s=0.05)
    engine.start()
    prompts = [[1, 70, 71], [1] + list(range(20, 45)), [1, 9]]
    try:
        results = await asyncio.gather(*[engine.generate(p, GREEDY) for p in prompts])
    finally:
        engine.close()
    for prompt, (result,) in zip(prompts, results, strict=True):
        expected = model.generate(
            torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :]
        assert result.token_ids == expected.tolist()


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
async def test_logprobs_of_batched_rows_equal_a_plain_forward_pass(engine: PolicyEngine, temperature: float) -> None:
    prompts = [[1, 40, 41, 42, 43, 44], [1, 50], [1, 60, 61, 62]]
    params = SamplingParams(max_tokens=12, temperature=temperature, ignore_eos=True, seed=4)
    results = await asyncio.gather(*[engine.generate(p, params, n=1 + i % 2) for i, p in enumerate(prompts)])
    for prompt, ends in zip(prompts, results, strict=True):
        for end in ends:
            assert len(end.token_ids) == 12 and end.finish_reason == "length"
            expected = _plain_logprobs(engine.model, prompt, end.token_ids, temperature)
            assert end.logprobs == pytest.approx(expected, abs=1e-4)


SHARED = [1] + list(range(20, 60))  # a 41-token "system prompt" every row starts with


@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_a_seeded_row_decodes_the_same_alone_or_batched(engine: PolicyEngine, temperature: float) -> None:
    prompts = [SHARED + [70, 71, 72], SHARED + [80], SHARED + [90, 91, 92, 93, 94]]
    params = [SamplingParams(max_tokens=10, temperature=temperature, ignore_eos=True, seed=i) for i in range(3)]
    fresh = PolicyEngine(engine.model, engine.tokenizer, prefix_cache_entries=0, batch_window_s=0.0)
    fresh.start()
    try:
        alone = [(await fresh.generate(p, params[i]))[0] for i, p in enumerate(prompts)]
    finally:
        fresh.close()
    # Three slots and a long window: the three arrive together, share one prefill and the stored prefix.
    engine = PolicyEngine(engine.model, engine.tokenizer, max_batch_size=3, batch_window_s=30.0)
    engine.start()
    try:
        batched = await asyncio.gather(*[engine.generate(p, params[i]) for i, p in enumerate(prompts)])
    finally:
        engine.close()
    assert engine.batches_run == 1
    assert engine.prefix_cache is not None and engine.prefix_cache.hits == 3
    for one, (many,) in zip(alone, batched, strict=True):
        assert many.token_ids == one.token_ids
        assert many.logprobs == pytest.approx(one.logprobs, abs=1e-5)


async def test_a_returning_conversation_reuses_its_stored_turn(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    first = (await engine.generate(SHARED + [70], GREEDY))[0]
    follow_up = SHARED + [70] + first.token_ids + [33, 34]  # the first turn, its reply and a tool result
    cache = engine.prefix_cache
    assert cache is not None
    reused = (await engine.generate(follow_up, GREEDY))[0]
    assert cache.hits == 1 and cache.reused_tokens == len(SHARED) + 1 + len(first.token_ids) - 1
    fresh = PolicyEngine(engine.model, engine.tokenizer, prefix_cache_entries=0)
    fresh.start()
    try:
        expected = (await fresh.generate(follow_up, GREEDY))[0]
    finally:
        fresh.close()
    assert reused.token_ids == expected.token_ids
    assert reused.logprobs == pytest.approx(expected.logprobs, abs=1e-5)


# Continuous batching ---------------------------------------------------------------------------------------


async def test_a_request_arriving_mid_batch_finishes_before_the_longest_row(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    long = engine.submit([1, 30], SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True))
    seen: list[str] = []

    async def follow_long() -> None:
        async for event in long:
            if isinstance(event, SequenceEnd):
                seen.append("long")

    task = asyncio.ensure_future(follow_long())
    while engine.steps_run < 3:  # the long row is decoding
        await asyncio.sleep(0.01)
    short = await engine.generate([1, 31, 32], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    seen.append("short")
    await task
    assert seen == ["short", "long"]
    assert len(short[0].token_ids) == 3
    assert engine.batches_run == 2  # the short request joined the running batch, not a batch of its own


async def test_slots_are_reused_and_queued_requests_wait_for_one() -> None:
    model, tokenizer = tiny_model()
    engine = PolicyEngine(model, tokenizer, max_batch_size=2, batch_window_s=0.0)
    engine.start()
    try:
        params = [SamplingParams(max_tokens=2 + 3 * i, temperature=0.0, ignore_eos=True) for i in range(5)]
        results = await asyncio.gather(*[engine.generate([1, 40 + i], params[i]) for i in range(5)])
        assert [len(r[0].token_ids) for r in results] == [2, 5, 8, 11, 14]
        assert engine.active_sequences == 0
        with pytest.raises(ValueError, match="max_batch_size"):
            engine.submit([1], GREEDY, n=3)
    finally:
        engine.close()


async def test_cancelling_a_request_frees_its_slot() -> None:
    model, tokenizer = tiny_model()
    engine = PolicyEngine(model, tokenizer, max_batch_size=1, batch_window_s=0.0)
    engine.start()
    try:
        stream = engine.submit([1, 30], SamplingParams(max_tokens=400, ignore_eos=True))
        async for event in stream:
            if isinstance(event, SequenceDelta):
                stream.cancel()
            else:
                assert event.finish_reason == "abort" and len(event.token_ids) < 400
        # The only slot is free again: the next request runs.
        result = await asyncio.wait_for(engine.generate([1, 31], GREEDY), timeout=60)
        assert len(result[0].token_ids) == 8 and engine.active_sequences == 0
    finally:
        engine.close()


async def test_weights_change_only_between_decode_steps(engine: PolicyEngine) -> None:
    engine.batch_window_s = 0.0
    stream = engine.submit([1, 30], SamplingParams(max_tokens=300, temperature=0.0, ignore_eos=True))
    task = asyncio.ensure_future(stream.collect())
    while engine.steps_run < 2:
        await asyncio.sleep(0.01)
    other, _ = tiny_model(seed=1)
    with engine.exclusive():  # like a learner updating a shared model: no step runs meanwhile
        held_at = engine.steps_run
        await asyncio.sleep(0.1)
        assert engine.steps_run == held_at
    version = await asyncio.to_thread(engine.update_weights, other.state_dict())
    (end,) = await task
    assert version == 1 and end.weights_version == 0 and len(end.token_ids) == 300


async def test_closing_fails_running_and_queued_requests() -> None:
    model, tokenizer = tiny_model()
    engine = PolicyEngine(model, tokenizer, max_batch_size=1, batch_window_s=0.0)
    engine.start()
    running = engine.submit([1, 30], SamplingParams(max_tokens=500, ignore_eos=True))
    queued = engine.submit([1, 31], GREEDY)
    while engine.steps_run < 1:
        await asyncio.sleep(0.01)
    await asyncio.to_thread(engine.close)
    for stream in (running, queued):
        with pytest.raises(RuntimeError, match="closed"):
            await stream.collect()


async def test_the_padded_shapes_cuda_graphs_use_decode_the_same() -> None:
    """Bucketed shapes (padding rows in a scratch slot, power-of-two lengths) change no token."""
    model, tokenizer = tiny_model()
    prompts = [[1, 40, 41, 42, 43, 44], [1, 50], [1] + list(range(20, 60)), [1, 60, 61, 62]]
    params = [
        SamplingParams(max_tokens=10, temperature=t, seed=i, ignore_eos=True) for i, t in enumerate([0, 1, 0.5, 1])
    ]
    results = []
    for bucketed in (False, True):
        engine = PolicyEngine(model, tokenizer, max_batch_size=8, batch_window_s=0.05)
        engine.start()
        engine.slot_model.bucketed = bucketed
        try:
            results.append(await asyncio.gather(*[engine.generate(p, params[i], n=2) for i, p in enumerate(prompts)]))
        finally:
            engine.close()
    for exact, padded in zip(*results, strict=True):
        assert [e.token_ids for e in padded] == [e.token_ids for e in exact]
        for a, b in zip(exact, padded, strict=True):
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


async def test_a_closed_engine_frees_its_kv_cache_and_serves_again_when_restarted() -> None:
    """A closed engine lets its KV cache go (a schedule keeps the warm start's closed server around while GRPO
    serves: two caches of SmolLM2's size were 1.6 GB); start() allocates a fresh one and serves as before."""
    import gc
    import weakref

    model, tokenizer = tiny_model()
    engine = PolicyEngine(model, tokenizer, max_batch_size=2, batch_window_s=0.0, seed=0)
    engine.start()
    before = (await engine.generate([1, 50, 51], GREEDY))[0]
    buffer = weakref.ref(engine.slot_model.cache.buffer)
    engine.close()
    gc.collect()
    assert buffer() is None
    engine.start()
    try:
        again = (await engine.generate([1, 50, 51], GREEDY))[0]
    finally:
        engine.close()
    assert again.token_ids == before.token_ids and again.logprobs == before.logprobs
