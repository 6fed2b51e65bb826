"""The model over KV-cache slots: prefill and decode steps give the logprobs of a plain forward pass.

`bucketed=True` runs the shapes CUDA graphs use (padded batches, a scratch slot for padding rows,
power-of-two lengths) eagerly, so the CPU checks the same arithmetic the GPU replays.
"""

from __future__ import annotations

import pytest
import torch

from agentlightning.serving.sampling import SamplingMode, SamplingParams, SlotSampling
from agentlightning.serving.slots import SlotModel, bucket
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

TOP = 20
MODE = SamplingMode(sampled=False, truncates=False, penalized=False, top_logprobs=TOP)


def _plain_top(model: torch.nn.Module, ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return torch.log_softmax(logits, dim=-1).topk(TOP).values.tolist()


def _slot_model(bucketed: bool, slots: int = 4, **kwargs) -> tuple[SlotModel, SlotSampling, torch.nn.Module]:
    model, _ = tiny_model()
    slot_model = SlotModel(model, slots=slots, max_context=512, bucketed=bucketed, **kwargs)
    sampling = SlotSampling(slots + 1, slot_model.vocab_size, slot_model.device)
    for slot in range(slots):
        sampling.assign(slot, SamplingParams(temperature=0.0, top_logprobs=TOP), 0)
    return slot_model, sampling, model


def _prefill(slots: SlotModel, prompts: dict[int, list[int]], starts: list[int] | None = None) -> torch.Tensor:
    with torch.inference_mode():
        logits = slots.prefill(list(prompts), list(prompts.values()), starts or [0] * len(prompts))
    for slot, prompt in prompts.items():
        slots.positions[slot, 0] = len(prompt)
        slots.prompt_lengths[slot] = len(prompt)
    return logits


def _feed(slots: SlotModel, sampling: SlotSampling, tokens: dict[int, int]) -> dict[int, list[float]]:
    """One decode step in which the slots in `tokens` take those tokens; their top logprobs."""
    batch = slots.batch_bucket(max(tokens) + 1)
    for slot, token in tokens.items():
        slots.input_ids[slot, 0] = token
    slots.set_active(list(tokens))
    needed = int(slots.positions[list(tokens)].max()) + 1
    with torch.inference_mode():
        host = slots.decode_step(batch, slots.kv_bucket(needed), sampling, MODE).to_host()
    assert host.top is not None
    return {slot: host.top[0][slot] for slot in tokens}


@pytest.mark.parametrize("bucketed", [False, True])
def test_prefill_and_decode_match_a_plain_forward_pass_for_rows_of_any_length(bucketed: bool) -> None:
    slots, sampling, model = _slot_model(bucketed, initial_capacity=16)
    prompts = {3: [1, 40, 41, 42, 43, 44], 0: [1, 50], 2: [1, 60, 61, 62]}
    logits = _prefill(slots, prompts)
    for row, prompt in enumerate(prompts.values()):
        expected = torch.log_softmax(logits[row], dim=-1).topk(TOP).values.tolist()
        assert expected == pytest.approx(_plain_top(model, prompt), abs=1e-5)
    texts = {slot: list(p) for slot, p in prompts.items()}
    for step in range(20):  # past the initial capacity of 16: the cache grows on the way
        tokens = {slot: 100 + 7 * step + slot for slot in texts}
        tops = _feed(slots, sampling, tokens)
        for slot, token in tokens.items():
            texts[slot].append(token)
            assert tops[slot] == pytest.approx(_plain_top(model, texts[slot]), abs=1e-4)
    assert slots.cache.capacity >= 26


@pytest.mark.parametrize("bucketed", [False, True])
def test_rows_that_sit_out_a_step_are_not_disturbed(bucketed: bool) -> None:
    slots, sampling, model = _slot_model(bucketed, slots=3)
    prompts = [[1, 5, 6, 7], [1, 8, 9], [1, 10]]
    _prefill(slots, dict(enumerate(prompts)))
    _feed(slots, sampling, {0: 20, 2: 21})  # slot 1 sits out: it is fed a dummy token and does not move
    _feed(slots, sampling, {1: 22})
    tops = _feed(slots, sampling, {0: 23, 1: 24, 2: 25})
    expected = [prompts[0] + [20, 23], prompts[1] + [22, 24], prompts[2] + [21, 25]]
    for slot, ids in enumerate(expected):
        assert tops[slot] == pytest.approx(_plain_top(model, ids), abs=1e-4)


def test_a_prefill_can_start_after_a_copied_prefix_and_sequences_can_move() -> None:
    slots, sampling, model = _slot_model(bucketed=True)
    shared = [1] + list(range(20, 40))
    _prefill(slots, {0: shared})
    slots.cache.write(2, slots.cache.read(0, len(shared)), len(shared))
    logits = _prefill(slots, {2: [70, 71]}, starts=[len(shared)])
    slots.positions[2, 0] = slots.prompt_lengths[2] = len(shared) + 2
    top = torch.log_softmax(logits[0], dim=-1).topk(TOP).values.tolist()
    assert top == pytest.approx(_plain_top(model, shared + [70, 71]), abs=1e-4)
    slots.move(2, 1, len(shared) + 2)
    tops = _feed(slots, sampling, {1: 72})
    assert tops[1] == pytest.approx(_plain_top(model, shared + [70, 71, 72]), abs=1e-4)


def test_shapes_are_bucketed_and_the_context_is_enforced() -> None:
    assert [bucket(v, 1, 32) for v in (1, 3, 4, 17, 40)] == [1, 4, 4, 32, 32]
    assert bucket(5, 64, 1024) == 64
    model, _ = tiny_model()
    slots = SlotModel(model, slots=2, max_context=64, cuda_graphs=False)
    assert not slots.use_graphs and not slots.bucketed
    assert slots.batch_bucket(3) == 3 and slots.kv_bucket(17) == 32
    with pytest.raises(ValueError, match="context is 64"):
        slots.ensure_capacity(65)


def test_a_model_without_a_transformers_config_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="num_hidden_layers"):
        SlotModel(torch.nn.Linear(2, 2), slots=1, max_context=8)
