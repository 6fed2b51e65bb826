"""The learner update in steps: micro-batches by prompt, logits from the first response position, the phase it
reports while it runs, and the memory it gives back (optimizer state at a hand-over, malloc's free pages)."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import List

import pytest
import torch

from agentlightning.algorithm.grpo import GRPO, GRPOConfig, GRPOLearner, Sample
from agentlightning.algorithm.grpo.batch import collate, micro_batches
from agentlightning.algorithm.grpo.learner import UpdateProgress
from agentlightning.algorithm.grpo.prefix import forward_logits
from agentlightning.algorithm.rft import RFTConfig
from agentlightning.serving.heap import limit_malloc_arenas, release_free_memory
from agentlightning.serving.sampling import kv_cache_keyword
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

PREFIX = [1] + [random.Random(5).randrange(3, 300) for _ in range(39)]


def _samples(groups: int = 3, per_group: int = 4) -> List[Sample]:
    rng = random.Random(1)
    samples: List[Sample] = []
    for group in range(groups):
        prompt = PREFIX + [rng.randrange(3, 300) for _ in range(rng.randrange(2, 6))]
        for i in range(per_group):
            response = [rng.randrange(3, 300) for _ in range(rng.randrange(2, 9))]
            samples.append(
                Sample(
                    prompt_ids=list(prompt),
                    response_ids=response,
                    advantage=rng.choice([-1.0, 0.5, 1.0]),
                    old_logprobs=[-2.0] * len(response),
                    rollout_id=f"r{group}-{i}",
                    group_id=group,
                )
            )
    rng.shuffle(samples)
    return samples


def test_micro_batches_put_rows_of_one_prompt_together_shortest_first() -> None:
    samples = _samples()
    batches = micro_batches(list(range(len(samples))), samples, 4)
    assert sorted(i for batch in batches for i in batch) == list(range(len(samples)))
    for batch in batches:
        assert len({tuple(samples[i].prompt_ids) for i in batch}) == 1  # one group per micro-batch here
        lengths = [len(samples[i].response_ids) for i in batch]
        assert lengths == sorted(lengths)


@pytest.mark.parametrize("min_shared_tokens", [0, 16])
def test_logits_from_the_first_response_position_match_the_full_pass(min_shared_tokens: int) -> None:
    model, tokenizer = tiny_model(seed=2)
    batch = collate(_samples()[:5], int(tokenizer.pad_token_id))
    keep_from = min(batch.prompt_lengths) - 1
    with torch.no_grad():
        full = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        logits, offset = forward_logits(
            model,
            batch.input_ids,
            batch.attention_mask,
            max_shared=min(batch.prompt_lengths),
            min_shared_tokens=min_shared_tokens,
            cache_keyword=kv_cache_keyword(model),
            keep_from=keep_from,
        )
    assert offset == keep_from  # nothing before the first response position was projected
    assert logits.shape[1] == batch.input_ids.shape[1] - keep_from
    mask = batch.attention_mask[:, offset:].bool()
    assert torch.allclose(logits[mask], full[:, offset:][mask], atol=1e-5)


def _trained(micro_batch_size: int, accumulation: int) -> GRPOLearner:
    model, tokenizer = tiny_model(seed=4)
    config = GRPOConfig(
        micro_batch_size=micro_batch_size,
        gradient_accumulation_steps=accumulation,
        max_updates_per_batch=3,
        learning_rate=1e-3,
        seed=3,
    )
    learner = GRPOLearner(copy.deepcopy(model), tokenizer, config)
    learner.step(_samples())
    return learner


def test_how_an_optimizer_step_is_cut_into_micro_batches_does_not_change_the_update() -> None:
    one_by_one, together = _trained(1, 4), _trained(4, 1)  # 4 rows per optimizer step either way
    for (name, a), (_, b) in zip(one_by_one.policy.named_parameters(), together.policy.named_parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name


class _RecordingProgress(UpdateProgress):
    def __init__(self) -> None:
        super().__init__()
        self.lines: List[str] = []

    def advance(self, tokens: int = 0) -> None:
        super().advance(tokens)
        self.lines.append(self.describe())


@pytest.mark.parametrize("chunk_tokens", [0, 1])  # 1: every row goes backward on its own
def test_the_learner_reports_its_phase_micro_batches_and_tokens_per_second(chunk_tokens: int) -> None:
    model, tokenizer = tiny_model(seed=4)
    config = GRPOConfig(micro_batch_size=4, max_updates_per_batch=2, backward_chunk_tokens=chunk_tokens)
    learner = GRPOLearner(model, tokenizer, config)
    learner.progress = progress = _RecordingProgress()
    learner.step(_samples(), off_policy=True)
    scoring = [line for line in progress.lines if line.startswith("scoring:")]
    updating = [line for line in progress.lines if line.startswith("learner update:")]
    assert [line.split(",")[0] for line in scoring] == [
        "scoring: 1/3 micro-batches",
        "scoring: 2/3 micro-batches",
        "scoring: 3/3 micro-batches",
    ]
    assert [line.split(",")[0] for line in updating] == [f"learner update: {i}/3 micro-batches" for i in (1, 2, 3)]
    assert updating[-1].endswith(" tokens/s")
    assert progress.describe() == ""  # idle once the step is over


def test_grpo_describes_its_phase_from_the_learner_during_an_update() -> None:
    model, tokenizer = tiny_model(seed=4)
    algorithm = GRPO(model=model, tokenizer=tokenizer)
    assert algorithm.describe_phase() == "starting"
    algorithm.learner = GRPOLearner(model, tokenizer, algorithm.config)
    algorithm.phase = "learner update"
    algorithm.learner.progress.begin("learner update", 4)
    algorithm.learner.progress.advance(100)
    assert algorithm.describe_phase().startswith("learner update: 1/4 micro-batches")
    algorithm.learner.progress.finish()
    algorithm.phase = "weight swap"
    assert algorithm.describe_phase() == "weight swap"


def test_handing_the_weights_on_frees_the_optimizer_state() -> None:
    model, tokenizer = tiny_model(seed=4)
    algorithm = GRPO(model=model, tokenizer=tokenizer, micro_batch_size=4)
    algorithm.learner = GRPOLearner(model, tokenizer, algorithm.config)
    algorithm.learner.step(_samples())
    assert len(algorithm.learner.optimizer.state) > 0  # AdamW's moments, twice the weights
    policy = algorithm.get_trained_policy()
    assert policy is not None and policy.model is model
    assert len(algorithm.learner.optimizer.state) == 0
    assert all(p.grad is None for p in model.parameters())


def test_malloc_arenas_and_free_pages_are_given_back_where_glibc_runs() -> None:
    with pytest.raises(ValueError, match="arenas must be >= 1"):
        limit_malloc_arenas(0)
    assert isinstance(limit_malloc_arenas(2), bool)
    assert isinstance(release_free_memory(), bool)


def test_frozen_embeddings_stay_as_loaded_and_hold_no_gradient_or_optimizer_state(tmp_path: Path) -> None:
    model, tokenizer = tiny_model(seed=4)
    embeddings = model.get_input_embeddings().weight
    assert embeddings is model.get_output_embeddings().weight  # tied, as in SmolLM2
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = GRPOConfig(micro_batch_size=4, learning_rate=1e-2, freeze_embeddings=True)
    learner = GRPOLearner(model, tokenizer, config)
    assert all(p is not embeddings for p in learner.trainable_parameters)
    learner.step(_samples())
    after = dict(model.named_parameters())
    assert torch.equal(embeddings, before["model.embed_tokens.weight"])
    moved = [name for name in before if not torch.equal(after[name], before[name])]
    assert moved and len(moved) == len(learner.trainable_parameters)  # every other weight was trained
    assert embeddings.grad is None and embeddings not in learner.optimizer.state
    saved = torch.load(learner.save_checkpoint(tmp_path) / "weights.pt")
    assert "model.embed_tokens.weight" not in saved and len(saved) == len(moved)
    assert RFTConfig(freeze_embeddings=True).learner_config().freeze_embeddings  # the warm start's learner too


def test_a_hand_off_gives_the_frozen_embeddings_back_to_the_next_stages_config() -> None:
    model, tokenizer = tiny_model(seed=4)
    embeddings = model.get_input_embeddings().weight
    warm_start = GRPO(GRPOConfig(freeze_embeddings=True, device="cpu"), model=model, tokenizer=tokenizer)
    warm_start.learner = GRPOLearner(model, tokenizer, warm_start.config)
    assert not embeddings.requires_grad and warm_start.learner.frozen_embeddings == [embeddings]
    handed = warm_start.get_trained_policy()
    assert handed is not None and handed.model is model and embeddings.requires_grad
    trains_all = GRPOLearner(model, tokenizer, GRPOConfig(freeze_embeddings=False, device="cpu"))
    assert any(p is embeddings for p in trains_all.trainable_parameters)  # the next stage's own setting
    user_frozen, _ = tiny_model(seed=5)
    user_frozen.get_input_embeddings().weight.requires_grad_(False)  # frozen by the user, not by a config
    learner = GRPOLearner(user_frozen, tokenizer, GRPOConfig(freeze_embeddings=True, device="cpu"))
    assert learner.frozen_embeddings == []  # nothing to give back: a hand-off leaves the user's choice alone
