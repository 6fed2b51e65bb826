"""One policy, two front doors: weights trained through the Tinker API are served by the policy engine an
agent's OpenAI calls use, at the same weights version and fingerprint."""

from __future__ import annotations

import httpx
import openai
import tinker
from tinker import types

from agentlightning.serving.chat import render_chat_prompt
from agentlightning.tinker import TinkerServer
from agentlightning.tinker.runs import weights_fingerprint

from .conftest import API_KEY


def _train_a_step(training_client: tinker.TrainingClient, tokenizer) -> None:
    tokens = tokenizer.encode("hello world, how are you today?")
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs=dict(weights=[1.0] * (len(tokens) - 1), target_tokens=tokens[1:]),
    )
    training_client.forward_backward([datum], "cross_entropy").result()
    training_client.optim_step(types.AdamParams(learning_rate=5e-2)).result()


def _policy(server: TinkerServer, path: str) -> dict:
    response = httpx.get(
        f"{server.base_url}/api/v1/agl/policy", params={"model_path": path}, headers={"X-API-Key": API_KEY}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_tinker_weights_serve_agents_at_the_same_version(tinker_env: TinkerServer, tiny_model_path: str) -> None:
    with tinker.ServiceClient() as service_client:
        _check_one_policy(tinker_env, service_client, tiny_model_path)


def _check_one_policy(tinker_env: TinkerServer, service_client: tinker.ServiceClient, tiny_model_path: str) -> None:
    training_client = service_client.create_lora_training_client(base_model=tiny_model_path, rank=4).result()
    tokenizer = training_client.get_tokenizer()
    run = tinker_env.service.run(training_client.model_id)

    _train_a_step(training_client, tokenizer)
    first = training_client.save_weights_for_sampler("first").result().path
    policy = _policy(tinker_env, first)
    assert policy["weights_version"] == policy["checkpoint_weights_version"] == 1
    assert policy["fingerprint"] == weights_fingerprint(run.merged_weights())
    served = tinker_env.service.samplers.live[run.run_id].server
    assert weights_fingerprint(served.engine.model.state_dict()) == policy["fingerprint"]

    # An agent's call through the OpenAI endpoint of that policy: the same weights version answers.
    agent = openai.OpenAI(base_url=policy["endpoint"], api_key="unused")
    reply = agent.chat.completions.create(
        model=policy["model"], messages=[{"role": "user", "content": "hello"}], max_tokens=4, temperature=0
    )
    assert reply.system_fingerprint == policy["system_fingerprint"] == "weights-v1"

    # Tinker sampling of the same checkpoint runs on that engine too: the agent's greedy tokens, exactly.
    prompt_ids = render_chat_prompt(served.engine.tokenizer, [{"role": "user", "content": "hello"}])
    sampler = training_client.create_sampling_client(first).result()
    sampled = sampler.sample(
        types.ModelInput.from_ints(list(prompt_ids)), 1, types.SamplingParams(max_tokens=4, temperature=0.0)
    ).result()
    agent_tokens = (reply.choices[0].model_extra or {})["token_ids"]
    assert sampled.sequences[0].tokens == agent_tokens

    # Training on: the next sampler checkpoint is the next version of the same live policy...
    _train_a_step(training_client, tokenizer)
    second = training_client.save_weights_for_sampler("second").result().path
    newer = _policy(tinker_env, second)
    assert (newer["endpoint"], newer["weights_version"]) == (policy["endpoint"], 2)
    assert newer["fingerprint"] != policy["fingerprint"]
    # ...and the first checkpoint, loaded from disk into a frozen policy, keeps its own fingerprint.
    again = _policy(tinker_env, first)
    assert again["fingerprint"] == policy["fingerprint"]
    assert again["endpoint"] != policy["endpoint"]
