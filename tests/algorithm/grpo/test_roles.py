"""One LoRA per agent role: role names and patterns, call -> role, rows per role, per-role updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest
import torch

from agentlightning.algorithm.grpo import GRPO, GRPOConfig, GRPOLearner, RolloutTriplets, Sample
from agentlightning.algorithm.grpo.batch import samples_from_rollouts
from agentlightning.algorithm.grpo.roles import normalize_roles, role_of_triplet, role_resource_name
from agentlightning.serving.adapters import active_adapter
from agentlightning.types import Triplet
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train

ROLES = {"planner": "plan", "coder": "^coder$"}


def _call(
    prompt: list[int],
    response: list[int],
    *,
    agent: Optional[str] = None,
    model: Optional[str] = None,
    reward: Optional[float] = None,
) -> Triplet:
    metadata: dict[str, Any] = {}
    if agent is not None:
        metadata["agent_name"] = agent
    if model is not None:
        metadata["request"] = {"model": model}
    return Triplet(prompt={"token_ids": prompt}, response={"token_ids": response}, reward=reward, metadata=metadata)


def _role_of(triplet: Triplet) -> Optional[str]:
    return role_of_triplet(triplet, ROLES)


# Names and config -------------------------------------------------------------------------------------


def test_roles_are_a_mapping_or_a_list_of_exact_names() -> None:
    assert normalize_roles(["planner", "coder"]) == {"planner": "^planner$", "coder": "^coder$"}
    assert normalize_roles(ROLES) == ROLES
    assert normalize_roles(None) == {} and normalize_roles([]) == {}
    with pytest.raises(ValueError, match="role name 'plan ner' must match"):
        normalize_roles(["plan ner"])
    with pytest.raises(ValueError, match=r"roles\['coder'\] = '\(' is not a valid agent_match regex"):
        normalize_roles({"coder": "("})
    with pytest.raises(ValueError, match="got the string"):
        normalize_roles("planner")
    assert role_resource_name("planner") == "planner_llm"


def test_config_needs_lora_for_roles_and_round_trips() -> None:
    with pytest.raises(ValueError, match=r"roles=\['coder', 'planner'\].*set lora_rank > 0"):
        GRPOConfig(roles=["planner", "coder"])
    config = GRPOConfig(lora_rank=4, roles=["planner", "coder"])
    assert config.roles == {"planner": "^planner$", "coder": "^coder$"} == config.role_patterns
    assert GRPOConfig.from_dict(config.to_dict()) == config


def test_a_role_published_under_the_base_resource_name_is_refused() -> None:
    with pytest.raises(ValueError, match="role 'main' would be published as 'main_llm'"):
        GRPO(lora_rank=4, roles=["main", "coder"])


# Call -> role -----------------------------------------------------------------------------------------


def test_role_of_a_call_is_its_agent_name_else_the_adapter_it_called() -> None:
    assert _role_of(_call([1], [2], agent="trip-planner")) == "planner"  # regex search
    assert _role_of(_call([1], [2], agent="coder")) == "coder"
    assert _role_of(_call([1], [2], model="grpo-smollm2:coder")) == "coder"
    response_only = Triplet(prompt={}, response={}, metadata={"response": {"model": "x:planner"}})
    assert role_of_triplet(response_only, ROLES) == "planner"
    # The agent name wins over the model it called; names that match nothing fall back to the model.
    assert _role_of(_call([1], [2], agent="planner", model="x:coder")) == "planner"
    assert _role_of(_call([1], [2], agent="reviewer", model="x:coder")) == "coder"
    assert _role_of(_call([1], [2], agent="reviewer")) is None
    assert _role_of(_call([1], [2], model="grpo-smollm2")) is None
    assert _role_of(_call([1], [2], model="x:critic")) is None


def test_roles_from_agent_spans_through_the_trace_adapter() -> None:
    """The agent name the adapter reads from the enclosing agent span picks the role."""
    from agentlightning.adapter import TracerTraceToTriplet
    from tests.adapter.span_factory import SpanFactory

    f = SpanFactory()
    user = {"role": "user", "content": "hi"}
    root = f.span("session", start=0, end=30)
    planner = f.agent("trip-planner", parent=root, start=1, end=10)
    p_call = f.openai_call([user], response_id="p", prompt_ids=[1], response_ids=[2], parent=planner, start=2, end=3)
    coder = f.agent("coder", parent=root, start=11, end=20)
    c_call = f.openai_call([user], response_id="c", prompt_ids=[3], response_ids=[4], parent=coder, start=12, end=13)
    triplets = TracerTraceToTriplet().adapt([root, planner, p_call, coder, c_call])
    assert [(t.metadata["response_id"], _role_of(t)) for t in triplets] == [("p", "planner"), ("c", "coder")]


# Rows per role ----------------------------------------------------------------------------------------


def test_rows_merge_only_within_a_role_and_calls_without_a_role_are_counted() -> None:
    # planner [1,2]->[3]; coder continues the planner's tokens; planner continues its own first call.
    calls = [
        _call([1, 2], [3], agent="planner"),
        _call([1, 2, 3, 4], [5], agent="coder"),
        _call([1, 2, 3, 4, 5, 6], [7], agent="planner"),
    ]
    # Without roles the three calls are one continuous row.
    assert len(samples_from_rollouts([RolloutTriplets("ro", "g", calls)])) == 1

    stats: dict[str, int] = {}
    with_roles = calls + [_call([9], [8], agent="reviewer", reward=1.0)]
    samples = samples_from_rollouts([RolloutTriplets("ro", "g", with_roles)], role_of=_role_of, stats=stats)
    rows = sorted((s.role, s.prompt_ids, s.response_ids, s.loss_mask) for s in samples)
    assert rows == [
        ("coder", [1, 2, 3, 4], [5], None),
        # The planner's second call merges into its first: the coder's tokens in between are context.
        ("planner", [1, 2], [3, 4, 5, 6, 7], [1, 0, 0, 0, 1]),
    ]
    assert stats["triplets_without_role"] == 1 and stats["rows"] == 2


def test_advantages_stay_per_rollout_group_across_roles() -> None:
    """The reward of a call without a role still counts in its rollout's return (the group advantage)."""
    rollouts = [
        RolloutTriplets(
            rollout_id,
            "task",
            [
                _call([1], [2], agent="planner"),
                _call([1, 5], [6], agent="coder"),
                _call([9], [9], agent="judge", reward=reward),
            ],
        )
        for rollout_id, reward in (("good", 1.0), ("bad", 0.0))
    ]
    samples = samples_from_rollouts(rollouts, role_of=_role_of, scale_advantages=False)
    by_key = {(s.rollout_id, s.role): s.advantage for s in samples}
    assert by_key == {
        ("good", "planner"): 0.5,
        ("good", "coder"): 0.5,
        ("bad", "planner"): -0.5,
        ("bad", "coder"): -0.5,
    }


# Per-role updates -------------------------------------------------------------------------------------


def _role_learner() -> GRPOLearner:
    model, tokenizer = tiny_model(seed=0)
    return GRPOLearner(model, tokenizer, GRPOConfig(lora_rank=4, roles=["a", "b"], learning_rate=1e-1, device="cpu"))


def _samples(role: Optional[str]) -> list[Sample]:
    return [
        Sample([1, 5, 6], [7, 8, 9], advantage=1.0, rollout_id="r1", role=role),
        Sample([1, 5, 6], [9, 8, 7], advantage=-1.0, rollout_id="r2", role=role),
    ]


def test_a_role_update_changes_only_that_roles_adapter_and_optimizer() -> None:
    learner = _role_learner()
    before = {name: p.detach().clone() for name, p in learner.policy.named_parameters()}
    metrics = learner.step(_samples("a"))
    changed = {name for name, p in learner.policy.named_parameters() if not torch.equal(p, before[name])}
    assert changed and all(".lora_B.a." in name or ".lora_A.a." in name for name in changed), sorted(changed)
    assert learner.role_optimizers["a"].state_dict()["state"]
    assert not learner.role_optimizers["b"].state_dict()["state"]
    assert metrics["role_a_samples"] == 2 and "role_b_samples" not in metrics and learner.global_step == 1

    metrics = learner.step(_samples("a")[:1] + _samples("b")[1:])
    assert metrics["role_a_samples"] == 1 and metrics["role_b_samples"] == 1 and metrics["samples"] == 2
    assert learner.role_optimizers["b"].state_dict()["state"]


def test_samples_without_a_known_role_are_refused() -> None:
    learner = _role_learner()
    with pytest.raises(
        ValueError, match=r"roles \['None', 'c'\] have no adapter; this learner trains roles \['a', 'b'\]"
    ):
        learner.step(_samples(None) + _samples("c"))


def test_export_writes_the_base_and_one_peft_adapter_per_role(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    learner = _role_learner()
    learner.step(_samples("a"))
    target = learner.export_model(tmp_path / "export")
    base: Any = AutoModelForCausalLM.from_pretrained(target)
    restored: Any = PeftModel.from_pretrained(base, target / "adapters" / "a", adapter_name="a")
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad(), active_adapter(learner.policy, "a"):
        expected = learner.policy(input_ids=ids).logits
    with torch.no_grad():
        assert torch.allclose(restored(input_ids=ids).logits, expected, atol=1e-5)
    assert (target / "adapters" / "b" / "adapter_config.json").exists()
