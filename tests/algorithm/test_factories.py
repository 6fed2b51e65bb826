"""APO / VERL factories: lazy imports, and a clear error naming the extra when an algorithm is unavailable."""

from __future__ import annotations

import sys

import pytest
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.algorithm import APO, VERL


def test_factories_are_exported_functions() -> None:
    assert agl.APO is APO and agl.VERL is VERL
    assert callable(APO) and not isinstance(APO, type)


def test_apo_factory_builds_the_algorithm() -> None:
    client = AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
    algorithm = APO(client, beam_rounds=1)
    assert isinstance(algorithm, agl.Algorithm)
    assert type(algorithm).__module__.startswith("agentlightning.algorithm.apo")


@pytest.mark.parametrize(("factory", "module", "extra"), [(APO, "apo", "apo"), (VERL, "verl", "verl")])
def test_missing_module_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, factory: object, module: str, extra: str
) -> None:
    # A None entry in sys.modules makes the import fail like a missing optional dependency.
    monkeypatch.setitem(sys.modules, f"agentlightning.algorithm.{module}", None)
    with pytest.raises(ImportError, match=rf"pip install 'agentlightning\[{extra}\]'"):
        factory({})  # type: ignore[operator]
