"""The model list: validation with actionable errors, backend URLs, round-robin and wildcard routing."""

from __future__ import annotations

from typing import Any

import pytest

from agentlightning.llm_proxy.models import ModelRouter, UnknownModelError, parse_model_config


def entry(name: str, model: str, api_base: Any = "http://127.0.0.1:8000/v1", **params: Any) -> dict[str, Any]:
    litellm_params: dict[str, Any] = {"model": model, **params}
    if api_base is not None:
        litellm_params["api_base"] = api_base
    return {"model_name": name, "litellm_params": litellm_params}


def test_hosted_vllm_entry_becomes_a_backend_with_the_model_name_after_the_provider():
    deployment = parse_model_config(entry("policy", "hosted_vllm/Qwen/Qwen3-0.6B", api_key="k"), 0)
    assert deployment.model_name == "policy"
    assert deployment.provider == "hosted_vllm"
    assert deployment.backend_model == "Qwen/Qwen3-0.6B"
    assert deployment.url("chat/completions") == "http://127.0.0.1:8000/v1/chat/completions"
    assert deployment.api_key == "k"


@pytest.mark.parametrize(
    ("api_base", "expected"),
    [
        ("http://host:8000", "http://host:8000/v1"),
        ("http://host:8000/", "http://host:8000/v1"),
        ("http://host:8000/v1/", "http://host:8000/v1"),
        ("https://example.com/api/v1", "https://example.com/api/v1"),
    ],
)
def test_api_base_without_a_path_gets_the_openai_v1_prefix(api_base: str, expected: str):
    assert parse_model_config(entry("m", "openai/gpt", api_base=api_base), 0).api_base == expected


def test_openai_entry_without_api_base_uses_openai_and_its_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    deployment = parse_model_config(entry("gpt", "gpt-4.1-mini", api_base=None), 3)
    assert deployment.provider == "openai"
    assert deployment.backend_model == "gpt-4.1-mini"
    assert deployment.api_base == "https://api.openai.com/v1"
    assert deployment.api_key == "sk-test"


def test_openai_entry_without_api_base_honours_openai_base_url_then_openai_api_base(monkeypatch: pytest.MonkeyPatch):
    # As LiteLLM, which v0.3's proxy ran on.
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9001/v1")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert parse_model_config(entry("gpt", "openai/gpt", api_base=None), 0).api_base == "http://127.0.0.1:9001/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9002")
    assert parse_model_config(entry("gpt", "openai/gpt", api_base=None), 0).api_base == "http://127.0.0.1:9002/v1"
    # An explicit api_base still wins.
    assert parse_model_config(entry("gpt", "openai/gpt"), 0).api_base == "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not a dict", "model_list[0] must be a dict"),
        ({"litellm_params": {"model": "openai/x"}}, "needs a non-empty string 'model_name'"),
        ({"model_name": "m"}, "needs 'litellm_params'"),
        ({"model_name": "m", "litellm_params": {}}, "needs litellm_params.model"),
        (entry("m", "hosted_vllm/x", api_base=None), "needs litellm_params.api_base for 'hosted_vllm'"),
        (entry("m", "hosted_vllm/x", api_base="localhost:8000"), "api_base must be an http(s) URL"),
        (entry("m", "hosted_vllm/*"), "a wildcard model 'hosted_vllm/*' needs model_name '*'"),
        (entry("m", "hosted_vllm/x", timeout=-1), "timeout must be a positive number"),
    ],
)
def test_malformed_entries_are_rejected_with_the_fix(bad: Any, message: str):
    with pytest.raises(ValueError) as info:
        ModelRouter([bad])
    assert message in str(info.value)


def test_model_list_must_be_a_list():
    with pytest.raises(ValueError, match="model_list must be a list"):
        ModelRouter("hosted_vllm/x")  # type: ignore[arg-type]


def test_same_name_deployments_rotate_and_list_the_others_for_retries():
    router = ModelRouter(
        [entry("policy", "hosted_vllm/a", "http://a:1/v1"), entry("policy", "hosted_vllm/b", "http://b:1/v1")]
    )
    picks = [[d.backend_model for d in router.resolve("policy")] for _ in range(3)]
    assert picks == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert len(router) == 2
    assert router.model_names == ["policy"]


def test_unknown_model_error_lists_the_served_names():
    router = ModelRouter([entry("policy", "hosted_vllm/a"), entry("judge", "openai/gpt")])
    with pytest.raises(UnknownModelError) as info:
        router.resolve("gpt-4o")
    assert str(info.value) == "model 'gpt-4o' is not served by this proxy; known models: 'policy', 'judge'"
    with pytest.raises(UnknownModelError, match="the model list is empty"):
        ModelRouter([]).resolve("x")


def test_wildcard_forwards_any_other_name_unchanged():
    router = ModelRouter([entry("policy", "hosted_vllm/a"), entry("*", "openai/*", "http://any:1/v1")])
    assert router.resolve("policy")[0].backend_model == "a"
    (deployment,) = router.resolve("gpt-4o-mini")
    assert (deployment.model_name, deployment.backend_model, deployment.api_base) == (
        "gpt-4o-mini",
        "gpt-4o-mini",
        "http://any:1/v1",
    )
    assert router.model_names == ["policy", "*"]
