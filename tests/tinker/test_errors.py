"""Bad requests get Tinker-shaped errors (`{"error", "category"}`, 4xx), through HTTP and through futures."""

from __future__ import annotations

import httpx
import pytest
import tinker
from tinker import types

from agentlightning.tinker import TinkerConfig, TinkerServer

from .conftest import API_KEY


def _post(server: TinkerServer, path: str, body: object, key: str = API_KEY) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body, headers={"X-API-Key": key}, timeout=30)


def test_api_key_is_required(tinker_server: TinkerServer) -> None:
    for key in ("", "tml-wrong"):
        response = _post(tinker_server, "/api/v1/create_session", {"tags": [], "sdk_version": "x"}, key=key)
        assert response.status_code == 401
        assert response.json()["category"] == "user" and "API key" in response.json()["error"]
    assert httpx.get(f"{tinker_server.base_url}/api/v1/healthz").json() == {"status": "ok"}


def test_bad_requests_are_4xx_with_a_reason(tinker_server: TinkerServer) -> None:
    session = _post(tinker_server, "/api/v1/create_session", {"tags": []}).json()["session_id"]
    cases = [
        ("/api/v1/create_model", {"session_id": session, "base_model": "nope"}, 400, "not served here"),
        ("/api/v1/create_model", {"session_id": "missing", "base_model": "x"}, 404, "unknown"),
        ("/api/v1/get_info", {"model_id": "run-missing"}, 404, "create_model"),
        ("/api/v1/retrieve_future", {"request_id": "sample-999"}, 404, "unknown"),
        ("/api/v1/load_weights", {"path": "file:///etc/passwd", "optimizer": False}, 400, "tinker://"),
        ("/api/v1/nothing", {}, 404, "not a route"),
    ]
    for path, body, status, words in cases:
        response = _post(tinker_server, path, body)
        assert response.status_code == status, (path, response.text)
        assert words in response.json()["error"], response.json()
    broken = httpx.post(
        f"{tinker_server.base_url}/api/v1/create_session", content=b"{not json", headers={"X-API-Key": API_KEY}
    )
    assert broken.status_code == 400 and "not JSON" in broken.json()["error"]


def test_a_failed_future_reports_the_reason(tinker_env: TinkerServer, tiny_model_path: str) -> None:
    with tinker.ServiceClient() as service_client:
        training_client = service_client.create_lora_training_client(base_model=tiny_model_path, rank=4).result()
        datum = types.Datum(
            model_input=types.ModelInput.from_ints([5, 6, 7]),
            loss_fn_inputs=dict(target_tokens=[6, 7, 8], weights=[1.0, 1.0, 1.0]),
        )
        with pytest.raises(tinker.RequestFailedError, match="needs loss_fn_inputs\\['advantages'\\]"):
            training_client.forward_backward([datum], "ppo").result()
        mismatched = types.Datum(
            model_input=types.ModelInput.from_ints([5, 6, 7]), loss_fn_inputs=dict(target_tokens=[6], weights=[1.0])
        )
        with pytest.raises(tinker.RequestFailedError, match="target_tokens has 1 entries"):
            training_client.forward_backward([mismatched], "cross_entropy").result()
        # The run is still usable after the failures.
        assert training_client.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"] > 0


def test_config_refuses_keys_the_sdk_would_not_send(tiny_model_path: str) -> None:
    with pytest.raises(ValueError, match="tml-"):
        TinkerConfig(models={"m": tiny_model_path}, api_keys=("secret",))
    with pytest.raises(ValueError, match="require_api_key=False"):
        TinkerConfig(models={"m": tiny_model_path})
