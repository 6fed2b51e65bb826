"""A tiny config model saved to disk (a local model path, as users give `agl tinker`) and a running server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

if sys.version_info < (3, 11):
    pytest.skip("the tinker SDK needs Python 3.11+", allow_module_level=True)
pytest.importorskip("tinker", reason="the official tinker SDK is not installed (make test installs it)")
pytest.importorskip("peft", reason="LoRA training needs the train extra")

from agentlightning.tinker import TinkerConfig, TinkerServer  # noqa: E402

API_KEY = "tml-test-key"


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.support.tiny_model import tiny_model

    folder = tmp_path_factory.mktemp("tiny-llama")
    model, tokenizer = tiny_model(seed=0, hidden_size=32, layers=2)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def tinker_server(tiny_model_path: str, tmp_path: Path) -> Iterator[TinkerServer]:
    config = TinkerConfig(
        models={tiny_model_path: tiny_model_path},
        checkpoint_dir=str(tmp_path / "checkpoints"),
        api_keys=(API_KEY,),
        default_max_tokens=16,
        retrieve_wait_s=5.0,
    )
    import torch

    # One intra-op thread: on a busy CPU two threads of a tiny model's matmuls mostly wait for each other.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with TinkerServer(config) as server:
            yield server
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def tinker_env(tinker_server: TinkerServer, monkeypatch: pytest.MonkeyPatch) -> TinkerServer:
    """Point the SDK at the server the way a user does: TINKER_BASE_URL and TINKER_API_KEY."""
    monkeypatch.setenv("TINKER_BASE_URL", tinker_server.base_url)
    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return tinker_server
