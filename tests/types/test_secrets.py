"""API keys travel with resources and configs but never show in their reprs, so never in logs."""

from __future__ import annotations

from agentlightning.gateway import GatewayConfig
from agentlightning.llm_proxy.models import ModelRouter
from agentlightning.types import LLM, ProxyLLM

SECRET = "sk-test-secret-123"


def test_resources_keep_the_key_but_never_show_it() -> None:
    for resource in (
        LLM(endpoint="http://h/v1", model="m", api_key=SECRET),
        ProxyLLM(endpoint="http://h/v1", model="m", api_key=SECRET),
    ):
        assert SECRET not in repr(resource) and SECRET not in str(resource) and SECRET not in f"{resource!r}"
        assert resource.api_key == SECRET and resource.model_dump()["api_key"] == SECRET  # still sent to runners


def test_proxy_deployments_and_gateway_configs_never_show_keys() -> None:
    router = ModelRouter(
        [
            {
                "model_name": "m",
                "litellm_params": {"model": "hosted_vllm/m", "api_base": "http://h/v1", "api_key": SECRET},
            }
        ]
    )
    (deployment,) = router.resolve("m")
    assert deployment.api_key == SECRET and SECRET not in repr(deployment)
    config = GatewayConfig(upstreams=("http://h/v1",), upstream_api_key=SECRET)
    assert SECRET not in repr(config)
