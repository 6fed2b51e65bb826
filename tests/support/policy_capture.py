"""What a framework agent sends is what we train on: run it against the real policy server, behind the LLM proxy.

`PromptScriptedLM` stands in for the policy's weights: it reads each whole prompt (the server runs with
`deterministic=True`, so every prefill is one full prompt), lets `choose(prompt_text)` pick the reply
text, emits exactly its tokens, then end-of-turn, and records `(prompt ids, reply ids)` per model call.
The policy server around it is the real one (chat template, `<tool_call>` parsing into OpenAI tool calls,
token ids in the response). `capture` runs rollouts of an agent through `LLMProxy` to that server with the
runner's tracer on too, and returns, per rollout, the triplets the trainer's adapter builds, the final
reward and the calls the model served: a test then checks they are the same calls, exactly once each.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.llm_proxy import LLMProxy
from agentlightning.serving.server import PolicyServer
from tests.support.tiny_model import tiny_tokenizer

__all__ = ["PromptScriptedLM", "CapturedRollout", "capture", "tool_call_text"]


def tool_call_text(name: str, arguments: str) -> str:
    """A tool call in the policy server's (Hermes) format, as a model trained on it would write it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


class PromptScriptedLM(torch.nn.Module):
    """A causal LM whose reply to a prompt is `choose(prompt text)`, token for token, then end-of-turn."""

    def __init__(
        self, tokenizer: Any, choose: Callable[[str], str], encode: Optional[Callable[[str], List[int]]] = None
    ) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.choose = choose
        self.encode: Callable[[str], List[int]] = encode or (
            lambda text: list(tokenizer.encode(text, add_special_tokens=False))
        )
        """The ids the model samples for a reply text (default: its canonical tokenization)."""
        self.vocab_size = len(tokenizer)
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.config = types.SimpleNamespace(
            max_position_embeddings=16384,
            eos_token_id=self.eos_token_id,
            num_hidden_layers=1,
            num_attention_heads=1,
            hidden_size=1,
            vocab_size=self.vocab_size,
        )
        self.calls: List[Tuple[List[int], List[int]]] = []
        """(prompt ids, reply ids without end-of-turn) of every prompt the model was given."""
        self._script: List[int] = []
        self._prompt_end = 0

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, **_: Any) -> Any:
        last = position_ids[:, -1]
        if input_ids.shape[1] > 1:  # a prefill: the whole prompt (deterministic serving, one request at a time)
            prompt = [int(t) for t in input_ids[0].tolist()]
            text = self.tokenizer.decode(prompt, skip_special_tokens=False)
            self._script = list(self.encode(self.choose(text)))
            self._prompt_end = int(last.max())
            self.calls.append((prompt, self._script))
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab_size), -30.0)
        for row, position in enumerate(last.tolist()):
            step = position - self._prompt_end
            logits[row, -1, self._script[step] if step < len(self._script) else self.eos_token_id] = 30.0
        return types.SimpleNamespace(logits=logits)


@dataclass
class CapturedRollout:
    rollout_id: str
    status: str
    reward: Optional[float]
    triplets: List[agl.Triplet]
    calls: List[Tuple[List[int], List[int]]]
    """What the model served for this rollout: (prompt ids, reply ids), in order."""
    span_names: List[str]


async def capture(
    agent: Any,
    tasks: Sequence[Any],
    choose: Callable[[str], str],
    *,
    sampling: Optional[Dict[str, Any]] = None,
) -> List[CapturedRollout]:
    """Run one rollout per task through LLMProxy -> PolicyServer(PromptScriptedLM), with the tracer on."""
    tokenizer = tiny_tokenizer()
    model = PromptScriptedLM(tokenizer, choose)
    store = agl.InMemoryLightningStore(thread_safe=True)
    results: List[CapturedRollout] = []
    with PolicyServer(model, tokenizer, model_name="policy", deterministic=True, default_max_tokens=512) as server:
        entry = {"model_name": "policy", "litellm_params": {"model": "hosted_vllm/policy", "api_base": server.endpoint}}
        proxy = LLMProxy(model_list=[entry], store=store, launch_mode="thread")  # type: ignore[list-item]
        await proxy.start()
        try:
            runner: agl.LitAgentRunner[Any] = agl.LitAgentRunner(agl.OtelTracer(), heartbeat_interval=0)
            resource = proxy.as_resource(model="policy", sampling_parameters=sampling or {"temperature": 0.0})
            with runner.run_context(agent=agent, store=store):
                for task in tasks:
                    served_before = len(model.calls)
                    rollout = await runner.step(task, resources={"main_llm": resource})
                    spans = list(await store.query_spans(rollout.rollout_id))
                    stored = await store.get_rollout_by_id(rollout.rollout_id)
                    results.append(
                        CapturedRollout(
                            rollout_id=rollout.rollout_id,
                            status=str(stored.status if stored else rollout.status),
                            reward=agl.find_final_reward(spans),
                            triplets=list(TracerTraceToTriplet().adapt(spans)),
                            calls=model.calls[served_before:],
                            span_names=[span.name for span in spans],
                        )
                    )
        finally:
            await proxy.stop()
    return results


def assert_every_call_captured_once(captured: CapturedRollout) -> None:
    """Each model call is one triplet with the served tokens (reply + end-of-turn), in order, recorded by both
    the proxy and the client tracer; the rollout's reward sits on its last triplet."""
    eos = int(tiny_tokenizer().eos_token_id)
    assert captured.status == "succeeded", captured
    got = [(t.prompt["token_ids"], t.response["token_ids"]) for t in captured.triplets]
    assert got == [(prompt, reply + [eos]) for prompt, reply in captured.calls]
    assert captured.span_names.count("raw_gen_ai_request") == len(captured.calls)  # the proxy saw each call
    assert captured.span_names.count("openai.chat.completion") >= len(captured.calls)  # so did the client tracer
    assert [t.reward for t in captured.triplets] == [None] * (len(captured.calls) - 1) + [captured.reward]
