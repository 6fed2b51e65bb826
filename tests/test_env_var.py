"""Environment variables: names, defaults and strict parsing."""

from __future__ import annotations

import pytest

from agentlightning.env_var import (
    LightningEnvVar,
    resolve_bool_env_var,
    resolve_int_env_var,
    resolve_str_env_var,
)


def test_enum_values_are_the_variable_names() -> None:
    assert {e.value for e in LightningEnvVar} >= {
        "AGL_EMITTER_DEBUG",
        "AGL_MANAGED_STORE",
        "AGL_CURRENT_ROLE",
        "AGL_SERVER_HOST",
        "AGL_SERVER_PORT",
    }


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", "On", " on "])
def test_truthy_values(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("AGL_MANAGED_STORE", raw)
    assert resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, fallback=False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "OFF"])
def test_falsy_values(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("AGL_MANAGED_STORE", raw)
    assert resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, fallback=True) is False


def test_invalid_bool_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_MANAGED_STORE", "maybe")
    with pytest.raises(ValueError, match="AGL_MANAGED_STORE='maybe'"):
        resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, fallback=True)


def test_override_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_MANAGED_STORE", "not-a-bool")
    monkeypatch.setenv("AGL_SERVER_PORT", "1234")
    monkeypatch.setenv("AGL_SERVER_HOST", "10.0.0.4")
    assert resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, False, fallback=True) is False
    assert resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, 9999, fallback=4747) == 9999
    assert resolve_str_env_var(LightningEnvVar.AGL_SERVER_HOST, "0.0.0.0", fallback="localhost") == "0.0.0.0"


def test_fallback_when_unset_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_SERVER_PORT", raising=False)
    monkeypatch.setenv("AGL_SERVER_HOST", "")
    assert resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, fallback=4747) == 4747
    assert resolve_str_env_var(LightningEnvVar.AGL_SERVER_HOST, fallback="localhost") == "localhost"
    assert resolve_bool_env_var(LightningEnvVar.AGL_EMITTER_DEBUG) is None


def test_int_from_environment_and_invalid_int(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_SERVER_PORT", "10000")
    assert resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, fallback=4747) == 10000
    monkeypatch.setenv("AGL_SERVER_PORT", "ten")
    with pytest.raises(ValueError, match="AGL_SERVER_PORT='ten'"):
        resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, fallback=4747)


def test_plain_string_names_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_CURRENT_ROLE", "runner")
    assert resolve_str_env_var("AGL_CURRENT_ROLE", fallback="both") == "runner"
