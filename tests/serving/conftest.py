"""Fixtures for policy-server tests: a tiny random Llama and a running server on a free port."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from agentlightning.serving.server import PolicyServer
from tests.support.tiny_model import tiny_model


@pytest.fixture
def model_and_tokenizer() -> tuple[Any, Any]:
    return tiny_model(seed=0)


@pytest.fixture
def server(model_and_tokenizer: tuple[Any, Any]) -> Iterator[PolicyServer]:
    model, tokenizer = model_and_tokenizer
    with PolicyServer(model, tokenizer, model_name="tiny", seed=0, default_max_tokens=16) as running:
        yield running
