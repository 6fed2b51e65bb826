"""Batched sampling: what the KV-cached, left-padded decode loop returns must match a plain forward pass."""

from __future__ import annotations

import pytest
import torch

from agentlightning.serving._prefix_cache import PrefixCache, common_prefix_length
from agentlightning.serving.sampling import GenerationRow, SamplingParams, generate_rows, left_pad
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train


def _full_forward_logprobs(model: torch.nn.Module, prompt: list[int], generated: list[int], temperature: float):
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    scale = temperature if temperature > 0 else 1.0
    logprobs = torch.log_softmax(logits / scale, dim=-1)
    return [logprobs[len(prompt) - 1 + k, token].item() for k, token in enumerate(generated)]


def test_left_pad_puts_padding_before_tokens() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_logprobs_of_batched_rows_equal_a_plain_forward_pass(temperature: float) -> None:
    model, tokenizer = tiny_model()
    prompts = [[1, 40, 41, 42, 43, 44], [1, 50], [1, 60, 61, 62]]
    params = SamplingParams(max_tokens=12, temperature=temperature, ignore_eos=True)
    rows = [GenerationRow(p, params, generator=torch.Generator().manual_seed(i)) for i, p in enumerate(prompts)]
    results = generate_rows(model, rows, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[2])
    for prompt, result in zip(prompts, results, strict=True):
        assert len(result.token_ids) == 12 and result.finish_reason == "length"
        expected = _full_forward_logprobs(model, prompt, result.token_ids, temperature)
        assert result.logprobs == pytest.approx(expected, abs=1e-4)


def test_greedy_picks_the_argmax_of_a_plain_forward_pass() -> None:
    model, tokenizer = tiny_model()
    prompt = [1, 70, 71]
    result = generate_rows(
        model,
        [GenerationRow(prompt, SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))],
        pad_token_id=0,
        eos_token_ids=[2],
    )[0]
    ids = list(prompt)
    for _ in range(6):
        with torch.no_grad():
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert result.token_ids == ids[len(prompt) :]


def test_rows_stop_at_eos_or_when_the_callback_says_so() -> None:
    model, _ = tiny_model()
    steps: list[int] = []

    def stop_after_three(step) -> bool:
        steps.append(step.token_id)
        return len(steps) == 3

    rows = [
        GenerationRow(
            [1, 5], SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True), on_token=stop_after_three
        ),
        GenerationRow([1, 5], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)),
    ]
    first, second = generate_rows(model, rows, pad_token_id=0, eos_token_ids=[2])
    assert (len(first.token_ids), first.finish_reason) == (3, "stop")
    assert (len(second.token_ids), second.finish_reason) == (4, "length")
    # Greedy token at eos: declaring the greedy first token an eos id ends the row right there.
    eos_first = generate_rows(
        model,
        [GenerationRow([1, 5], SamplingParams(max_tokens=10, temperature=0.0))],
        pad_token_id=0,
        eos_token_ids=[second.token_ids[0]],
    )[0]
    assert eos_first.token_ids == [second.token_ids[0]] and eos_first.finish_reason == "stop"


def test_seeded_generators_reproduce_samples_and_top_k_one_is_greedy() -> None:
    model, _ = tiny_model()

    def sample(seed: int, **kw) -> list[int]:
        row = GenerationRow(
            [1, 9, 10],
            SamplingParams(max_tokens=8, ignore_eos=True, **kw),
            generator=torch.Generator().manual_seed(seed),
        )
        return generate_rows(model, [row], pad_token_id=0, eos_token_ids=[2])[0].token_ids

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)
    assert sample(5, top_k=1) == sample(6, temperature=0.0)
    assert sample(7, top_p=1e-6) == sample(8, temperature=0.0)


def test_top_logprobs_are_sorted_and_include_the_greedy_token() -> None:
    model, _ = tiny_model()
    row = GenerationRow([1, 9], SamplingParams(max_tokens=3, temperature=0.0, top_logprobs=3, ignore_eos=True))
    steps = []
    row.on_token = lambda step: steps.append(step) or False
    generate_rows(model, [row], pad_token_id=0, eos_token_ids=[2])
    for step in steps:
        values = [lp for _, lp in step.top_logprobs]
        assert values == sorted(values, reverse=True) and len(values) == 3
        assert step.top_logprobs[0][0] == step.token_id
        assert step.top_logprobs[0][1] == pytest.approx(step.logprob)


def test_invalid_sampling_params_name_the_field() -> None:
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)


SHARED = [1] + list(range(20, 60))  # a 41-token "system prompt" every row starts with


def _run(model, prompts, params_list, *, seeds=None, prefix_cache=None):
    rows = [
        GenerationRow(p, params, generator=None if seeds is None else torch.Generator().manual_seed(seeds[i]))
        for i, (p, params) in enumerate(zip(prompts, params_list, strict=True))
    ]
    return generate_rows(model, rows, pad_token_id=0, eos_token_ids=[2], prefix_cache=prefix_cache)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_row_decodes_the_same_alone_or_in_a_batch_with_a_shared_prefix(temperature: float) -> None:
    model, _ = tiny_model()
    prompts = [SHARED + [70, 71, 72], SHARED + [80], SHARED + [90, 91, 92, 93, 94]]
    params = [SamplingParams(max_tokens=10, temperature=temperature, ignore_eos=True)] * 3
    alone = [_run(model, [p], [params[0]], seeds=[i])[0] for i, p in enumerate(prompts)]
    cache = PrefixCache(min_tokens=8)
    batched = _run(model, prompts, params, seeds=[0, 1, 2], prefix_cache=cache)
    assert len(cache) == 1  # the shared 41 tokens were encoded once, for the whole batch
    for one, many in zip(alone, batched, strict=True):
        assert many.token_ids == one.token_ids
        assert many.logprobs == pytest.approx(one.logprobs, abs=1e-5)


def test_a_returning_conversation_reuses_the_stored_prefix() -> None:
    model, _ = tiny_model()
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    cache = PrefixCache(min_tokens=8)
    first = _run(model, [SHARED + [70], SHARED + [71]], [greedy, greedy], prefix_cache=cache)[0]
    follow_up = SHARED + [70] + first.token_ids + [33, 34]  # the first turn, its reply and a tool result
    reused = _run(model, [follow_up], [greedy], prefix_cache=cache)[0]
    assert cache.hits == 1 and cache.reused_tokens == len(SHARED)
    fresh = _run(model, [follow_up], [greedy])[0]
    assert reused.token_ids == fresh.token_ids
    assert reused.logprobs == pytest.approx(fresh.logprobs, abs=1e-5)
    # The follow-up (less its last token) was stored as it went by: the next turn encodes only its new tokens.
    again = follow_up + reused.token_ids + [35, 36]
    assert (
        _run(model, [again], [greedy], prefix_cache=cache)[0].token_ids == _run(model, [again], [greedy])[0].token_ids
    )
    assert cache.hits == 2 and cache.reused_tokens == len(SHARED) + len(follow_up) - 1


def test_prefix_cache_keeps_the_most_recently_used_entries() -> None:
    cache = PrefixCache(max_entries=2, min_tokens=1)
    for key in ([1, 2], [1, 2, 3], [4, 5]):
        cache.store(key, object())
    assert len(cache) == 2 and cache.longest_shared([[1, 2, 9]]) is None  # [1, 2] was the oldest
    hit = cache.longest_shared([[1, 2, 3, 9], [1, 2, 3, 8]])
    assert hit is not None and hit[0] == (1, 2, 3)
    assert cache.longest_shared([[1, 2, 3]]) is None  # every prompt needs at least one token of its own
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
