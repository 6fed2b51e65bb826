"""A micro-batch's shared prompt prefix, encoded once, gives the plain forward pass's logits and gradients."""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

import pytest
import torch

from agentlightning.algorithm.grpo import GRPOConfig, GRPOLearner, Sample
from agentlightning.algorithm.grpo.batch import collate
from agentlightning.algorithm.grpo.loss import token_logprobs
from agentlightning.algorithm.grpo.prefix import forward_logits, pad_left, shared_prefix_length
from agentlightning.serving.sampling import kv_cache_keyword
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

PREFIX = [1] + [random.Random(3).randrange(3, 300) for _ in range(47)]  # a "system prompt" of 48 tokens


def _samples() -> list[Sample]:
    rng = random.Random(0)
    return [
        Sample(
            prompt_ids=PREFIX + [rng.randrange(3, 300) for _ in range(rng.randrange(0, 7))],
            response_ids=[rng.randrange(3, 300) for _ in range(rng.randrange(1, 9))],
            advantage=rng.choice([-1.0, 0.5, 1.0]),
        )
        for _ in range(6)
    ]


def test_the_shared_prefix_stops_at_the_first_difference_and_leaves_every_row_a_token() -> None:
    ids = torch.tensor([[1, 5, 6, 7, 0], [1, 5, 6, 8, 9], [1, 5, 6, 7, 3]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert shared_prefix_length(ids, mask) == 3
    assert shared_prefix_length(ids[[0, 2]], mask[[0, 2]]) == 3  # rows 0 and 2 share 4, but row 0 has only 4
    assert shared_prefix_length(ids[:1], mask[:1]) == 3
    assert shared_prefix_length(torch.tensor([[2, 5], [1, 5]]), torch.ones(2, 2, dtype=torch.long)) == 0


def _response_logprobs(model: Any, samples: list[Sample], min_shared: int) -> tuple[torch.Tensor, torch.Tensor]:
    batch = collate(samples, pad_token_id=0)
    logits, offset = forward_logits(
        model,
        batch.input_ids,
        batch.attention_mask,
        max_shared=min(batch.prompt_lengths),
        min_shared_tokens=min_shared,
        cache_keyword=kv_cache_keyword(model),
    )
    logprobs, _ = token_logprobs(logits, batch.input_ids[:, offset:])
    return pad_left(logprobs, offset), batch.response_mask


@pytest.mark.parametrize("rows", ["varied", "same-prompt"])
def test_logits_and_gradients_match_the_plain_forward_pass(rows: str) -> None:
    model, _ = tiny_model(seed=1)
    samples = _samples()
    if rows == "same-prompt":  # a group's rows: one prompt, responses that start alike (never in the prefix)
        samples = [replace(s, prompt_ids=samples[0].prompt_ids, response_ids=[7, 8] + s.response_ids) for s in samples]
    shared, mask = _response_logprobs(model, samples, min_shared=16)
    plain, mask_plain = _response_logprobs(model, samples, min_shared=0)
    assert torch.equal(mask, mask_plain) and mask.sum() > 20
    torch.testing.assert_close(shared * mask, plain * mask, rtol=1e-5, atol=1e-5)

    grads = []
    for min_shared in (16, 0):
        model.zero_grad(set_to_none=True)
        logprobs, mask = _response_logprobs(model, samples, min_shared)
        (logprobs * mask).sum().backward()
        grads.append({name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 5
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_prefix_shorter_than_the_minimum_takes_the_plain_pass() -> None:
    model, _ = tiny_model(seed=1)
    samples = _samples()
    calls: list[int] = []
    original = model.forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["input_ids"].shape[1])
        return original(*args, **kwargs)

    model.forward = counting  # type: ignore[method-assign]
    batch = collate(samples, pad_token_id=0)
    keyword = kv_cache_keyword(model)
    width = batch.input_ids.shape[1]
    for min_shared, expected_calls, expected_offset in ((49, [width], 0), (48, [48, width - 48], 47)):
        calls.clear()
        _, offset = forward_logits(
            model,
            batch.input_ids,
            batch.attention_mask,
            max_shared=60,
            min_shared_tokens=min_shared,
            cache_keyword=keyword,
        )
        # 49: one pass over the whole width; 48: the prefix once, then every row's rest.
        assert calls == expected_calls and offset == expected_offset


def test_a_learner_step_with_prefix_sharing_updates_the_weights_like_one_without() -> None:
    model, tokenizer = tiny_model(seed=2)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    results = []
    for min_shared in (32, 0):
        config = GRPOConfig(learning_rate=1e-2, micro_batch_size=3, device="cpu", shared_prefix_min_tokens=min_shared)
        learner = GRPOLearner(copy.deepcopy(model), tokenizer, config)
        metrics = learner.step(_samples())
        results.append(({n: p.detach().clone() for n, p in learner.policy.named_parameters()}, metrics))
    (shared, shared_metrics), (plain, plain_metrics) = results
    assert shared_metrics["loss"] == pytest.approx(plain_metrics["loss"], rel=1e-4, abs=1e-6)
    # Adam divides by the gradient's running RMS, which turns rounding in near-zero gradients into visible
    # steps: compare the whole update instead of each weight.
    moved = torch.cat([(plain[n] - start[n]).flatten() for n in start])
    apart = torch.cat([(shared[n] - plain[n]).flatten() for n in start])
    assert moved.norm() > 0.1 and apart.norm() / moved.norm() < 1e-4


@pytest.mark.parametrize("min_shared", [32, 0])
def test_rows_backpropagated_in_chunks_update_the_weights_like_one_pass(min_shared: int) -> None:
    """Chunks of rows (the prefix encoded once, its gradients carried back after the last chunk) give the
    update of the whole micro-batch in one pass, with and without a shared prefix."""
    model, tokenizer = tiny_model(seed=4)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    results = []
    for chunk_tokens in (5, 0):
        config = GRPOConfig(
            learning_rate=1e-2,
            micro_batch_size=6,
            device="cpu",
            shared_prefix_min_tokens=min_shared,
            backward_chunk_tokens=chunk_tokens,
        )
        learner = GRPOLearner(copy.deepcopy(model), tokenizer, config)
        calls: list[int] = []
        original = learner.policy.forward

        def counting(*args: Any, _calls: list[int] = calls, _forward: Any = original, **kwargs: Any) -> Any:
            if torch.is_grad_enabled():  # the update's passes, not the scoring pass before it
                _calls.append(kwargs["input_ids"].shape[0])
            return _forward(*args, **kwargs)

        learner.policy.forward = counting  # type: ignore[method-assign]
        metrics = learner.step(_samples())
        results.append(({n: p.detach().clone() for n, p in learner.policy.named_parameters()}, metrics, calls))
    (chunked, chunked_metrics, chunked_calls), (whole, whole_metrics, whole_calls) = results
    # Chunked: more passes, each over fewer rows (a prefix pass of one row first when the rows share one).
    assert len(chunked_calls) > len(whole_calls) and max(chunked_calls) < max(whole_calls)
    if min_shared:
        assert chunked_calls[0] == 1
    assert chunked_metrics["loss"] == pytest.approx(whole_metrics["loss"], rel=1e-4, abs=1e-6)
    assert chunked_metrics["response_tokens"] == whole_metrics["response_tokens"]
    moved = torch.cat([(whole[n] - start[n]).flatten() for n in start])
    apart = torch.cat([(chunked[n] - whole[n]).flatten() for n in start])
    assert moved.norm() > 0.1 and apart.norm() / moved.norm() < 1e-4


def test_row_chunks_keep_the_order_and_the_budget() -> None:
    from agentlightning.algorithm.grpo.prefix import common_prefix, row_chunks

    assert row_chunks([3, 4, 2, 9, 1], 7) == [[0, 1], [2], [3], [4]]
    assert row_chunks([3, 4], 0) == [[0, 1]] and row_chunks([], 5) == []
    assert common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]], 10) == 2
    assert common_prefix([[1, 2, 3], [1, 2, 3]], 1) == 1
