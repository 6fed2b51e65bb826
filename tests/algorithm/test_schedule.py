"""Schedules: `Trainer(algorithm=[...])` runs algorithms in turn on one store, each from what the last left."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import pytest
import torch
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet, TraceToMessages
from agentlightning.algorithm import Schedule, TrainedPolicy
from agentlightning.algorithm.apo import APO, RetryPolicy
from agentlightning.algorithm.grpo import GRPO, GRPOConfig
from agentlightning.algorithm.rft import RFT, RFTConfig
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import LLM, NamedResources, PromptTemplate
from tests.algorithm.apo.scripted import (
    AGENT_MODEL,
    EDIT_MODEL,
    GRADIENT_MODEL,
    SEED_TEMPLATE,
    ScriptedLLM,
    keyword_agent,
    questions,
)
from tests.algorithm.rft.agents import vowel_agent
from tests.support.openai_server import OpenAITestServer
from tests.support.tiny_model import tiny_model

SHM = {"type": "shm", "main_thread": "algorithm", "n_runners": 2, "graceful_delay": 0.2}


class Recorder(agl.Algorithm):
    """A stage that records what it was given and leaves `result` / `weights` for the next one."""

    def __init__(self, result: Optional[NamedResources] = None, weights: Optional[TrainedPolicy] = None):
        self.result, self.weights = result, weights
        self.seen_resources: Optional[NamedResources] = None
        self.seen_adapter: Any = None

    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:  # type: ignore[override]
        self.seen_resources = self.get_initial_resources()
        self.seen_adapter = self.get_adapter()

    def get_result_resources(self) -> Optional[NamedResources]:
        return self.result

    def get_trained_policy(self) -> Optional[TrainedPolicy]:
        return self.weights


class MessagesReader(Recorder):
    def accepts_adapter(self, adapter: Any) -> bool:
        return isinstance(adapter, TraceToMessages)

    def default_adapter(self) -> TraceToMessages:
        return TraceToMessages()


class WeightsTrainer(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.continued: Optional[TrainedPolicy] = None

    def continue_from(self, policy: TrainedPolicy) -> None:
        self.continued = policy


def test_stages_get_the_last_resources_the_latest_weights_and_an_adapter_they_read() -> None:
    weights = TrainedPolicy(model=object(), tokenizer=object(), source="smollm2", trained_by="RFT")
    better = {"prompt": PromptTemplate(template="Better: {question}")}
    first, second, third = Recorder(weights=weights), MessagesReader(result=better), WeightsTrainer()
    adapter = TracerTraceToTriplet()
    trainer = agl.Trainer(
        algorithm=[first, second, third],
        strategy=SHM,
        tracer=OtelTracer(),
        runner={"poll_interval": 0.05},
        adapter=adapter,
        initial_resources={"prompt": PromptTemplate(template=SEED_TEMPLATE)},
    )
    assert isinstance(trainer.algorithm, Schedule) and trainer.algorithm.stages == [first, second, third]
    trainer.fit(keyword_agent, questions(1))
    assert first.seen_resources is not None and first.seen_resources["prompt"].template == SEED_TEMPLATE
    assert second.seen_resources == first.seen_resources  # the first stage changed no resource
    assert third.seen_resources == better
    # The weights skip the stage that trains none; the messages reader got its own adapter.
    assert third.continued is weights
    assert first.seen_adapter is adapter and third.seen_adapter is adapter
    assert isinstance(second.seen_adapter, TraceToMessages)
    assert [(r.algorithm, r.passed_weights) for r in trainer.algorithm.records] == [
        ("Recorder", True),
        ("MessagesReader", False),
        ("WeightsTrainer", False),
    ]
    with pytest.raises(ValueError, match="at least one algorithm"):
        Schedule([])
    with pytest.raises(ValueError, match="appears twice"):
        Schedule([first, first])
    with pytest.raises(TypeError, match=r"algorithm\[1\]"):
        agl.Trainer(algorithm=[first, 42])


def test_a_weights_trainer_refuses_the_weights_of_another_model() -> None:
    policy = TrainedPolicy(model=object(), tokenizer=object(), source="smollm2", trained_by="RFT")
    with pytest.raises(ValueError, match="give every stage of the schedule the same model"):
        GRPO(model="HuggingFaceTB/SmolLM2-360M-Instruct").continue_from(policy)
    grpo = GRPO()
    grpo.continue_from(policy)
    assert grpo.model_spec is policy.model and grpo.model_source() == "smollm2"


@pytest.mark.train
def test_apo_then_grpo_trains_the_policy_with_the_prompt_apo_found() -> None:
    store = InMemoryLightningStore()
    model, tokenizer = tiny_model()
    with OpenAITestServer(ScriptedLLM()) as server:
        apo = APO(
            AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0),
            gradient_model=GRADIENT_MODEL,
            apply_edit_model=EDIT_MODEL,
            beam_width=1,
            branch_factor=1,
            beam_rounds=1,
            gradient_batch_size=2,
            val_batch_size=2,
            llm_retry=RetryPolicy(max_retries=1, base_delay=0.01),
            show_progress=False,
        )
        config = GRPOConfig(group_size=2, batch_size=2, total_steps=1, max_new_tokens=4, device="cpu")
        grpo = GRPO(config, model=model, tokenizer=tokenizer, llm_resource_name="llm")
        trainer = agl.Trainer(
            algorithm=[apo, grpo],
            store=store,
            strategy=SHM,
            tracer=OtelTracer(),
            adapter=TraceToMessages(),  # APO's; GRPO reads triplets with its default adapter
            runner={"poll_interval": 0.05},
            initial_resources={
                "prompt": PromptTemplate(template=SEED_TEMPLATE),
                "llm": LLM(endpoint=server.base_url, model=AGENT_MODEL),
            },
        )
        trainer.fit(keyword_agent, questions(2), val_dataset=questions(2, "v"))

    best = apo.get_best_prompt()
    assert best.template != SEED_TEMPLATE  # the scripted critic's edit won: a keyword was added
    published = asyncio.run(store.get_resources_by_id("grpo-train"))
    assert published is not None
    assert published.resources["prompt"] == best  # GRPO's rollouts ran with APO's prompt ...
    llm = published.resources["llm"]
    assert isinstance(llm, LLM) and llm.model == "grpo-policy"  # ... on the policy it trains
    record = grpo.history[-1]
    assert (
        record["step"] == 1
        and record["rollouts"] == 4
        and record["rollouts_failed"] == 0
        and record["triplets_skipped"] == 0
    )
    assert record["transitions"] == 4  # the agent's calls became triplets with token ids


class SnapshotRFT(RFT):
    def get_trained_policy(self) -> Optional[TrainedPolicy]:
        policy = super().get_trained_policy()
        assert policy is not None
        self.final_weights = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
        return policy


class SnapshotGRPO(GRPO):
    def build(self) -> Any:
        built = super().build()
        assert self.learner is not None
        self.start_weights = {n: p.detach().clone() for n, p in self.learner.policy.named_parameters()}
        return built


@pytest.mark.train
def test_rft_then_grpo_continues_from_the_weights_rft_trained() -> None:
    model, tokenizer = tiny_model()
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    rft_config = RFTConfig(
        rounds=1, tasks_per_round=2, group_size=3, max_new_tokens=4, learning_rate=3e-2, lora_rank=4, device="cpu"
    )
    rft = SnapshotRFT(rft_config, model=model, tokenizer=tokenizer, lora_target_modules=["q_proj", "v_proj"])
    grpo_config = GRPOConfig(group_size=2, batch_size=2, total_steps=1, max_new_tokens=4, device="cpu")
    grpo = SnapshotGRPO(grpo_config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    trainer = agl.Trainer(
        algorithm=[rft, grpo], store=store, strategy=SHM, tracer=OtelTracer(), runner={"poll_interval": 0.05}
    )
    trainer.fit(vowel_agent, [{"question": f"question {i}"} for i in range(2)])

    [rft_round] = rft.history
    assert rft_round["selected_rollouts"] >= 1 and rft_round["update_skipped"] == 0.0
    # RFT's LoRA was merged into the model GRPO then trained: GRPO started exactly where RFT ended.
    assert any(not torch.equal(initial[n], w) for n, w in rft.final_weights.items())
    assert rft.final_weights.keys() == grpo.start_weights.keys()
    assert all(torch.equal(rft.final_weights[n], grpo.start_weights[n]) for n in grpo.start_weights)
    assert [r.passed_weights for r in trainer.algorithm.records] == [True, False]  # type: ignore[union-attr]
    tags = [
        sorted(k for k in (r.metadata or {}) if k.endswith(("_round", "_step")))
        for r in asyncio.run(store.query_rollouts())
    ]
    assert tags.count(["rft_round"]) == 6 and tags.count(["grpo_step"]) == 4  # one store, each stage tags its own
