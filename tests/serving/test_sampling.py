"""Per-row sampling on the device: counter-based draws, greedy/top-k/top-p, penalties, logprobs."""

from __future__ import annotations

import pytest
import torch

from agentlightning.serving.sampling import SamplingParams, SlotSampling, row_seed, sample_tokens, uniforms

pytestmark = pytest.mark.train


def _sampling(params: list[SamplingParams], seeds: list[int], vocab: int) -> SlotSampling:
    sampling = SlotSampling(len(params), vocab, torch.device("cpu"))
    for slot, (p, seed) in enumerate(zip(params, seeds, strict=True)):
        sampling.assign(slot, p, seed)
    return sampling


def _draw(logits: torch.Tensor, params: SamplingParams, seed: int, token_index: int = 0) -> int:
    sampling = _sampling([params], [seed], logits.shape[-1])
    ids, _ = sample_tokens(logits.unsqueeze(0), sampling, [0], torch.tensor([token_index]))
    return int(ids[0])


def test_uniforms_are_reproducible_in_range_and_independent_of_the_batch() -> None:
    seeds = torch.tensor([3, 3, 4, -(2**62)])
    counters = torch.tensor([0, 1, 0, 7])
    draws = uniforms(seeds, counters)
    assert draws.dtype == torch.float64 and ((draws >= 0) & (draws < 1)).all()
    assert len(set(draws.tolist())) == 4
    alone = [uniforms(seeds[i : i + 1], counters[i : i + 1]).item() for i in range(4)]
    assert draws.tolist() == alone
    many = uniforms(torch.full((20000,), 11), torch.arange(20000))
    assert many.mean().item() == pytest.approx(0.5, abs=0.01)
    assert (many < 0.1).double().mean().item() == pytest.approx(0.1, abs=0.01)


def test_choices_of_one_request_get_different_reproducible_seeds() -> None:
    assert row_seed(5, 0) == row_seed(5, 0)
    assert len({row_seed(5, i) for i in range(8)} | {row_seed(6, 0)}) == 9
    assert all(-(2**63) <= row_seed(2**70, i) < 2**63 for i in range(3))


def test_sampled_frequencies_follow_the_probabilities() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().unsqueeze(0).repeat(4000, 1)
    params = SamplingParams(temperature=1.0)
    sampling = _sampling([params] * 4000, list(range(4000)), 4)
    ids, _ = sample_tokens(logits, sampling, range(4000), torch.zeros(4000, dtype=torch.long))
    freqs = torch.bincount(ids, minlength=4).double() / 4000
    assert freqs.tolist() == pytest.approx(probs.tolist(), abs=0.03)


def test_greedy_top_k_one_and_tiny_top_p_pick_the_argmax() -> None:
    torch.manual_seed(0)
    logits = torch.randn(50)
    best = int(logits.argmax())
    for seed in range(5):
        assert _draw(logits, SamplingParams(temperature=0.0), seed) == best
        assert _draw(logits, SamplingParams(top_k=1), seed) == best
        assert _draw(logits, SamplingParams(top_p=1e-6), seed) == best
    samples = {_draw(logits, SamplingParams(temperature=2.0), seed) for seed in range(40)}
    assert len(samples) > 5


def test_top_k_keeps_only_the_k_most_likely_tokens() -> None:
    logits = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    drawn = {_draw(logits, SamplingParams(top_k=2, temperature=5.0), seed) for seed in range(60)}
    assert drawn == {0, 1}


def test_presence_and_frequency_penalties_count_each_rows_own_tokens() -> None:
    logits = torch.tensor([[2.0, 1.9, 0.0], [2.0, 1.9, 0.0]])
    params = [SamplingParams(temperature=0.0, presence_penalty=0.5), SamplingParams(temperature=0.0)]
    sampling = _sampling(params, [0, 0], 3)
    first, _ = sample_tokens(logits, sampling, [0, 1], torch.zeros(2, dtype=torch.long))
    second, _ = sample_tokens(logits, sampling, [0, 1], torch.ones(2, dtype=torch.long))
    assert first.tolist() == [0, 0]
    assert second.tolist() == [1, 0]  # token 0 is penalised for the first row only
    # Rows outside `active` do not count what they sampled.
    sampling.assign(0, params[0], 0)
    sample_tokens(logits[:1], sampling, [0], torch.zeros(1, dtype=torch.long), active=torch.tensor([False]))
    again, _ = sample_tokens(logits[:1], sampling, [0], torch.zeros(1, dtype=torch.long))
    assert again.tolist() == [0]


def test_logprobs_use_the_temperature_and_top_alternatives_are_sorted() -> None:
    torch.manual_seed(1)
    logits = torch.randn(2, 30)
    params = [SamplingParams(temperature=0.0, top_logprobs=3), SamplingParams(temperature=0.7)]
    sampling = _sampling(params, [1, 2], 30)
    ids, host = sample_tokens(logits, sampling, [0, 1], torch.zeros(2, dtype=torch.long))
    for row, scale in ((0, 1.0), (1, 0.7)):
        expected = torch.log_softmax(logits[row] / scale, dim=-1)[ids[row]].item()
        assert host.logprobs[row] == pytest.approx(expected, abs=1e-6)
    step = host.step(0, 3)
    values = [lp for _, lp in step.top_logprobs]
    assert values == sorted(values, reverse=True) and len(values) == 3
    assert step.top_logprobs[0] == (step.token_id, pytest.approx(step.logprob))
    assert host.step(1, 0).top_logprobs == []


def test_invalid_sampling_params_name_the_field() -> None:
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="top_logprobs"):
        SamplingParams(top_logprobs=21)
