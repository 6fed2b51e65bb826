"""`agl serve` as a real process: loads a saved model, serves chat completions, stops on Ctrl+C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentlightning.cli import SUBCOMMANDS
from agentlightning.cli.serve import main
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train


def test_serve_is_a_registered_subcommand() -> None:
    assert SUBCOMMANDS["serve"][0] == "agentlightning.cli.serve"


def test_a_model_that_cannot_be_loaded_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", str(tmp_path / "nowhere")]) == 1
    assert "cannot load model" in capsys.readouterr().err


@pytest.mark.slow
def test_agl_serve_serves_a_saved_model_until_interrupted(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    command = [sys.executable, "-m", "agentlightning.cli", "serve", "--model", str(tmp_path), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        endpoint, before = None, []
        for line in process.stdout:
            match = re.search(r"at (http://\S+/v1)", line)
            if match:
                endpoint = match.group(1)
                break
            before.append(line)
        assert endpoint, "agl serve never reported its endpoint"
        assert any("fused projections: 2 LlamaDecoderLayer layers" in line for line in before), before  # --fuse
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        data = httpx.post(f"{endpoint}/chat/completions", json=body, timeout=60).json()
        assert data["model"] == str(tmp_path) and data["prompt_token_ids"] and data["choices"][0]["token_ids"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
