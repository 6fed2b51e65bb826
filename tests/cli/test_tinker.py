"""`agl tinker` arguments: models as PATH or NAME=PATH, keys the SDK can send, clear exits on bad input."""

from __future__ import annotations

import pytest

from agentlightning.cli import SUBCOMMANDS
from agentlightning.cli.tinker import main, parse_models


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
