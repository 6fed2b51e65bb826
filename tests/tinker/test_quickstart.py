"""The tinker SDK's documented quick-start loop (Pig Latin), unmodified, against `agl tinker` on 127.0.0.1:
supervised forward_backward + optim_step, then sampling from the saved weights."""

from __future__ import annotations

import numpy as np
import tinker
from tinker import types

from agentlightning.tinker import TinkerServer


def test_sdk_quickstart_trains_and_samples(tinker_env: TinkerServer, tiny_model_path: str) -> None:
    service_client = tinker.ServiceClient()
    base_model = tiny_model_path
    training_client = service_client.create_lora_training_client(base_model=base_model)
    tokenizer = training_client.get_tokenizer()

    examples = [
        {"input": "banana split", "output": "anana-bay plit-say"},
        {"input": "quantum physics", "output": "uantum-qay ysics-phay"},
        {"input": "donut shop", "output": "onut-day op-shay"},
        {"input": "pickle jar", "output": "ickle-pay ar-jay"},
        {"input": "space exploration", "output": "ace-spay exploration-way"},
        {"input": "rubber duck", "output": "ubber-ray uck-day"},
        {"input": "coding wizard", "output": "oding-cay izard-way"},
    ]

    def process_example(example: dict, tokenizer) -> types.Datum:
        prompt = f"English: {example['input']}\nPig Latin:"
        prompt_tokens = tokenizer.encode(prompt, add_special_tokens=True)
        prompt_weights = [0] * len(prompt_tokens)
        completion_tokens = tokenizer.encode(f" {example['output']}\n\n", add_special_tokens=False)
        completion_weights = [1] * len(completion_tokens)
        tokens = prompt_tokens + completion_tokens
        weights = prompt_weights + completion_weights
        input_tokens = tokens[:-1]
        target_tokens = tokens[1:]
        weights = weights[1:]
        return types.Datum(
            model_input=types.ModelInput.from_ints(tokens=input_tokens),
            loss_fn_inputs=dict(weights=weights, target_tokens=target_tokens),
        )

    processed_examples = [process_example(ex, tokenizer) for ex in examples]

    losses = []
    for _ in range(6):
        fwdbwd_future = training_client.forward_backward(processed_examples, "cross_entropy")
        optim_future = training_client.optim_step(types.AdamParams(learning_rate=1e-2))
        fwdbwd_result = fwdbwd_future.result()
        optim_future.result()
        logprobs = np.concatenate([output["logprobs"].tolist() for output in fwdbwd_result.loss_fn_outputs])
        weights = np.concatenate([example.loss_fn_inputs["weights"].tolist() for example in processed_examples])
        losses.append(-np.dot(logprobs, weights) / weights.sum())
    assert losses[-1] < losses[0], losses

    sampling_client = training_client.save_weights_and_get_sampling_client()
    prompt = types.ModelInput.from_ints(tokenizer.encode("English: coffee break\nPig Latin:"))
    params = types.SamplingParams(max_tokens=20, temperature=0.0, stop=["\n"])
    result = sampling_client.sample(prompt=prompt, sampling_params=params, num_samples=8).result()
    assert len(result.sequences) == 8
    texts = {tokenizer.decode(seq.tokens) for seq in result.sequences}
    assert len(texts) == 1  # temperature 0: every sample is the greedy answer
    assert all(0 < len(seq.tokens) <= 20 and len(seq.logprobs) == len(seq.tokens) for seq in result.sequences)
