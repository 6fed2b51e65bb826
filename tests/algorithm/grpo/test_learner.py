"""The GRPO learner on a tiny model: updates, served weights, token-id round trip, LoRA, checkpoints."""

from __future__ import annotations

import copy
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from agentlightning.algorithm.grpo import GRPOConfig, GRPOLearner, RolloutTriplets, Sample, samples_from_rollouts
from agentlightning.serving.server import PolicyServer
from agentlightning.types import Triplet
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train


def _samples(count: int = 6, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    return [
        Sample(
            prompt_ids=[1] + [rng.randrange(3, 300) for _ in range(rng.randrange(2, 6))],
            response_ids=[rng.randrange(3, 300) for _ in range(rng.randrange(1, 5))],
            advantage=rng.choice([-1.0, 1.0]),
        )
        for _ in range(count)
    ]


def _config(**overrides: Any) -> GRPOConfig:
    return GRPOConfig(**{"learning_rate": 1e-2, "micro_batch_size": 2, "device": "cpu", **overrides})


def _params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def test_a_step_changes_the_weights_and_reports_metrics() -> None:
    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, _config())
    before = _params(learner.policy)
    metrics = learner.step(_samples())
    assert learner.global_step == 1
    assert any(not torch.equal(before[n], p) for n, p in learner.policy.named_parameters())
    # Old logprobs were missing: recomputed from the same weights, so the first update is exactly on-policy.
    assert metrics["old_logprobs_recomputed"] == 6
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and metrics["clip_fraction"] == 0.0
    for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm", "train_tokens_per_s"):
        assert key in metrics
    assert metrics["entropy"] > 0 and not learner.policy.training


def test_a_supervised_step_makes_the_trained_tokens_more_likely_whatever_their_advantage() -> None:
    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, _config(kl_coef=0.1, epochs_per_batch=3))
    samples = [replace(s, advantage=-1.0) for s in _samples()]  # a policy gradient would push these down
    before = [sum(values) for values in learner.score(samples)]
    metrics = learner.step(samples, objective="nll")
    after = [sum(values) for values in learner.score(samples)]
    assert sum(after) > sum(before) + 0.1
    # Nothing of the policy gradient is used: no recomputed old logprobs, no reference copy scored.
    assert metrics["old_logprobs_recomputed"] == 0 and metrics["kl"] == 0.0 and metrics["optimizer_steps"] == 3
    assert metrics["pg_loss"] == pytest.approx(-sum(before) / sum(len(s.response_ids) for s in samples), rel=0.2)
    with pytest.raises(ValueError, match="objective must be 'grpo' or 'nll'"):
        learner.step(samples, objective="sft")  # type: ignore[arg-type]


def test_served_token_ids_and_logprobs_are_exactly_what_is_trained_on() -> None:
    model, tokenizer = tiny_model()
    config = _config(temperature=0.7)
    learner = GRPOLearner(model, tokenizer, config)
    with PolicyServer(learner.policy, tokenizer, seed=0) as server:
        client = openai.OpenAI(base_url=server.endpoint, api_key="x", max_retries=0)
        response = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=8, temperature=0.7, logprobs=True
        ).model_dump()
    choice = response["choices"][0]
    served_logprobs = [e["logprob"] for e in choice["logprobs"]["content"]]
    triplet = Triplet(
        prompt={"token_ids": response["prompt_token_ids"]},
        response={"token_ids": choice["token_ids"], "logprobs": choice["logprobs"]},
        reward=1.0,
    )
    (sample,) = samples_from_rollouts([RolloutTriplets("ro", "g", [triplet])])
    assert sample.prompt_ids + sample.response_ids == response["prompt_token_ids"] + choice["token_ids"]
    assert sample.old_logprobs == served_logprobs
    # The learner scores the same tokens at the same temperature to the same values.
    assert learner.score([sample])[0] == pytest.approx(served_logprobs, abs=1e-4)


def test_weights_trained_in_shared_mode_are_served_immediately() -> None:
    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, _config(learning_rate=5e-2))
    with PolicyServer(learner.policy, tokenizer, seed=0) as server:
        client = openai.OpenAI(base_url=server.endpoint, api_key="x", max_retries=0)
        greedy: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
        greedy.update(temperature=0, logprobs=True)
        before = client.chat.completions.create(**greedy).model_dump()
        with server.engine.exclusive():
            learner.step(_samples(8))
        assert server.update_weights(learner.policy) == 1
        after = client.chat.completions.create(**greedy).model_dump()
    assert after["system_fingerprint"] == "weights-v1"
    first_token = after["choices"][0]["token_ids"][0]
    sample = Sample(prompt_ids=after["prompt_token_ids"], response_ids=[first_token], advantage=0.0)
    assert after["choices"][0]["logprobs"]["content"][0]["logprob"] == pytest.approx(
        learner.score([sample])[0][0], abs=1e-4
    )
    assert before["choices"][0]["logprobs"] != after["choices"][0]["logprobs"]


def test_gradient_accumulation_matches_one_big_batch() -> None:
    """Micro-batches of 6, 2 and 1 samples accumulate the same gradient as one batch of 6.

    Each micro-batch divides its token sum by the token count of the whole optimizer step (not its own), so
    the accumulated gradient is the same sum in another order. The update goes through SGD with lr = 1, so
    the weight change *is* the (clipped) gradient: AdamW's first step is lr * g / (|g| + eps), which maps a
    float32 rounding difference on a near-zero gradient entry to a full +-lr step and cannot be compared
    entry by entry. Summing <= 6 float32 partial gradients in a different order (and over other padding)
    moves each entry by a few ulps of the largest terms: we allow 1e-5 relative plus 1e-6 of the largest entry.
    """
    samples = _samples(6)
    deltas = []
    for micro in (6, 2, 1):
        model, tokenizer = tiny_model()
        learner = GRPOLearner(model, tokenizer, _config(micro_batch_size=micro))
        learner.optimizer = torch.optim.SGD(learner.trainable_parameters, lr=1.0)
        before = _params(learner.policy)
        metrics = learner.step(samples)
        assert metrics["optimizer_steps"] == 1
        deltas.append({name: before[name] - p.detach() for name, p in learner.policy.named_parameters()})
    scale = max(float(d.abs().max()) for d in deltas[0].values())
    assert scale > 0
    for name, value in deltas[0].items():
        for other in deltas[1:]:
            assert torch.allclose(value, other[name], rtol=1e-5, atol=1e-6 * scale), name


def test_gradient_accumulation_steps_sets_the_number_of_optimizer_steps() -> None:
    model, tokenizer = tiny_model()
    learner = GRPOLearner(
        model, tokenizer, _config(micro_batch_size=2, gradient_accumulation_steps=2, epochs_per_batch=2)
    )
    assert learner.step(_samples(8))["optimizer_steps"] == 4  # 4 micro-batches / 2 per step, twice


def test_lora_trains_only_adapters_and_uses_the_disabled_base_as_reference() -> None:
    model, tokenizer = tiny_model()
    base_before = _params(model)
    learner = GRPOLearner(model, tokenizer, _config(lora_rank=4, kl_coef=0.1, learning_rate=5e-2))
    trainable = [n for n, p in learner.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert learner.reference is None
    samples = _samples(6)
    first = learner.step(samples)
    second = learner.step(samples)
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)  # LoRA B starts at zero: policy == reference
    assert second["kl"] > 0
    for name, parameter in learner.policy.get_base_model().named_parameters():  # type: ignore[operator]
        if "lora_" not in name:
            assert torch.equal(parameter, base_before[name.replace(".base_layer.", ".")])
    # The reference (adapters disabled) still scores like the untouched base model.
    untouched, _ = tiny_model()
    reference_scores = learner.score(samples, reference=True)
    plain = GRPOLearner(untouched, tokenizer, _config()).score(samples)
    assert reference_scores[0] == pytest.approx(plain[0], abs=1e-5)


def test_full_finetuning_with_kl_keeps_a_frozen_reference_copy() -> None:
    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, _config(kl_coef=0.5))
    assert learner.reference is not None and learner.reference is not learner.policy
    learner.step(_samples())
    assert learner.step(_samples())["kl"] > 0
    assert all(not p.requires_grad for p in learner.reference.parameters())


def test_checkpoint_resume_continues_exactly_like_an_uninterrupted_run(tmp_path: Path) -> None:
    batches = [_samples(4, seed=s) for s in range(3)]
    model, tokenizer = tiny_model()
    straight = GRPOLearner(model, tokenizer, _config(epochs_per_batch=2))
    for batch in batches:
        straight.step(batch)

    model, tokenizer = tiny_model()
    first = GRPOLearner(model, tokenizer, _config(epochs_per_batch=2, keep_checkpoints=1))
    first.step(batches[0])
    first.save_checkpoint(tmp_path, extra={"note": "after step 1"})
    first.step(batches[1])
    path = first.save_checkpoint(tmp_path)
    assert GRPOLearner.latest_checkpoint(tmp_path) == path and path.name == "step-000002"
    assert [p.name for p in tmp_path.iterdir()] == ["step-000002"]  # keep_checkpoints=1 pruned step 1

    model, tokenizer = tiny_model(seed=9)  # different initial weights: everything must come from the checkpoint
    resumed = GRPOLearner(model, tokenizer, _config(epochs_per_batch=2))
    resumed.load_checkpoint(path)
    assert resumed.global_step == 2
    resumed.step(batches[2])
    for name, value in _params(straight.policy).items():
        assert torch.allclose(value, dict(resumed.policy.named_parameters())[name], atol=1e-6), name


def test_checkpoints_refuse_a_different_model_layout(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    path = GRPOLearner(model, tokenizer, _config(lora_rank=2)).save_checkpoint(tmp_path)
    other, _ = tiny_model()
    with pytest.raises(ValueError, match="LoRA"):
        GRPOLearner(other, tokenizer, _config()).load_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="not a GRPO checkpoint"):
        GRPOLearner(copy.deepcopy(other), tokenizer, _config()).load_checkpoint(tmp_path)


def test_export_merges_lora_into_a_servable_model(tmp_path: Path) -> None:
    from agentlightning.serving.models import load_causal_lm

    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, _config(lora_rank=4, learning_rate=5e-2))
    learner.step(_samples())
    learner.step(_samples())
    exported, _ = load_causal_lm(str(learner.export_model(tmp_path / "export")), device="cpu")
    ids = torch.tensor([[1, 20, 21, 22]])
    with torch.no_grad():
        assert torch.allclose(exported(input_ids=ids).logits, learner.policy(input_ids=ids).logits, atol=1e-5)


def test_a_step_without_samples_explains_what_to_check() -> None:
    model, tokenizer = tiny_model()
    with pytest.raises(ValueError, match="token ids"):
        GRPOLearner(model, tokenizer, _config()).step([])


def test_max_updates_per_batch_caps_the_optimizer_steps() -> None:
    model, tokenizer = tiny_model()
    config = _config(epochs_per_batch=3, gradient_accumulation_steps=1, micro_batch_size=2, max_updates_per_batch=4)
    metrics = GRPOLearner(model, tokenizer, config).step(_samples(6))
    assert metrics["optimizer_steps"] == 4  # 3 epochs x 3 micro-batches would be 9
    with pytest.raises(ValueError, match="max_updates_per_batch"):
        _config(max_updates_per_batch=0)


def test_rollout_mean_gradient_does_not_depend_on_how_a_rollout_is_split_into_rows() -> None:
    # The same rollout as one row, or as one row per turn (same tokens trained): equal weight, equal loss.
    merged = Sample([1, 5, 6], [7, 8, 9, 10], 1.0, loss_mask=[1, 1, 0, 1], rollout_id="a")
    split = [Sample([1, 5, 6], [7, 8], 1.0, rollout_id="a"), Sample([1, 5, 6, 7, 8, 9], [10], 1.0, rollout_id="a")]
    other = Sample([1, 11], [12], -1.0, rollout_id="b")
    losses = []
    for rows in ([merged, other], [*split, other]):
        model, tokenizer = tiny_model()
        learner = GRPOLearner(model, tokenizer, _config(loss_aggregation="rollout-mean", micro_batch_size=8))
        losses.append(learner.step(rows)["loss"])
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)


def _step_credit_rollouts() -> list[RolloutTriplets]:
    """Two rollouts of one task with equal totals (episode advantage 0): at the same observation (tool result
    7) rollout "good" answers 20 and earns the reward there, rollout "bad" answers 21 and earned it earlier."""

    def call(prompt: list[int], response: list[int], reward: float) -> Triplet:
        return Triplet(prompt={"token_ids": prompt}, response={"token_ids": response}, reward=reward)

    prompt = [1, 30, 31, 32]
    good = [call(prompt, [40], 0.0), call([*prompt, 40, 7], [20], 1.0)]
    bad = [call(prompt, [40], 1.0), call([*prompt, 40, 7], [21], 0.0)]
    return [RolloutTriplets("good", "task", good), RolloutTriplets("bad", "task", bad)]


def test_only_step_level_credit_separates_a_good_step_from_a_bad_one() -> None:
    plain = samples_from_rollouts(_step_credit_rollouts())
    assert [s.advantage for s in plain] == [0.0, 0.0] and all(s.token_advantages is None for s in plain)
    samples = samples_from_rollouts(_step_credit_rollouts(), step_advantage_weight=1.0, scale_advantages=False)
    # One merged row per rollout: [40] (first call, same return 1 in both: step advantage 0), context [7], answer.
    assert [(s.response_ids, s.loss_mask) for s in samples] == [([40, 7, 20], [1, 0, 1]), ([40, 7, 21], [1, 0, 1])]
    assert [s.token_advantages for s in samples] == [[0.0, 0.0, 0.5], [0.0, 0.0, -0.5]]

    def answer_logprobs(learner: GRPOLearner) -> tuple[float, float]:
        good, bad = learner.score(samples)
        return good[2], bad[2]

    for weight, moves in ((0.0, False), (1.0, True)):
        model, tokenizer = tiny_model()
        learner = GRPOLearner(model, tokenizer, _config(step_advantage_weight=weight, scale_advantages=False))
        rows = samples_from_rollouts(_step_credit_rollouts(), step_advantage_weight=weight, scale_advantages=False)
        good_before, bad_before = answer_logprobs(learner)
        for _ in range(3):
            learner.step(rows)
        good_after, bad_after = answer_logprobs(learner)
        if moves:
            assert good_after > good_before + 0.1 and bad_after < bad_before - 0.1
        else:  # the episode advantage alone is 0 for both: nothing to learn
            assert (good_after, bad_after) == pytest.approx((good_before, bad_before), abs=1e-6)


def test_off_policy_steps_apply_truncated_importance_weights() -> None:
    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, _config(is_ratio_cap=2.0))
    samples = _samples(4)
    current = learner.score(samples)
    # Behaviour logprobs log(4) below the current policy: pi_prox / pi_behaviour = 4, capped at 2.
    stale = [replace(s, old_logprobs=[v - math.log(4) for v in lp]) for s, lp in zip(samples, current, strict=True)]
    metrics = learner.step(stale, off_policy=True)
    assert metrics["is_weight_mean"] == pytest.approx(2.0) and metrics["is_weight_capped_fraction"] == 1.0
    # The ratio is taken against the current weights (pi_prox), so the first update is exactly on-policy.
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and metrics["clip_fraction"] == 0.0
    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, _config(is_ratio_cap=2.0))
    fresher = [replace(s, old_logprobs=[v + math.log(2) for v in lp]) for s, lp in zip(samples, current, strict=True)]
    assert learner.step(fresher, off_policy=True)["is_weight_mean"] == pytest.approx(0.5, rel=1e-4)
