"""Environment variables that configure agentlightning, and strict parsers for them.

Explicit constructor arguments always win over the environment; the environment wins over defaults.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Optional, Union, overload

__all__ = [
    "LightningEnvVar",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
]

_TRUTHY = frozenset({"1", "true", "yes", "on"})
_FALSY = frozenset({"0", "false", "no", "off"})


class LightningEnvVar(Enum):
    """Names of the environment variables agentlightning reads."""

    AGL_EMITTER_DEBUG = "AGL_EMITTER_DEBUG"
    """Log every emitted span (bool)."""

    AGL_MANAGED_STORE = "AGL_MANAGED_STORE"
    """Whether execution strategies wrap the store (threaded facade / HTTP server); default true."""

    AGL_CURRENT_ROLE = "AGL_CURRENT_ROLE"
    """Which side of the client-server strategy this process plays: algorithm, runner or both (default)."""

    AGL_SERVER_HOST = "AGL_SERVER_HOST"
    """Host the store server binds to (algorithm side) or connects to (runner side); default localhost."""

    AGL_SERVER_PORT = "AGL_SERVER_PORT"
    """Port of the store server; default 4747."""

    AGL_STORE_TOKEN = "AGL_STORE_TOKEN"
    """Optional bearer token the store server requires and clients send."""

    AGL_STORE_URL = "AGL_STORE_URL"
    """URL of a running store server (e.g. `http://127.0.0.1:4747` from `agl store`) that `Trainer` uses when
    given no `store`: the run's rollouts and spans go there and show in that server's dashboard."""

    AGL_MODEL_CACHE = "AGL_MODEL_CACHE"
    """Folder where `load_causal_lm("smollm2")` keeps the float32 model it converts from the package's GGUF
    file once, so later loads skip the conversion (default `~/.cache/agentlightning/models`; `off`: none)."""

    AGL_STALL_SECONDS = "AGL_STALL_SECONDS"
    """Seconds `fit`/`dev` wait while no rollout of the run moves and no runner sends a heartbeat before
    failing with an error (default 300)."""


EnvVarName = Union[LightningEnvVar, str]


def _name(env_var: EnvVarName) -> str:
    return env_var.value if isinstance(env_var, LightningEnvVar) else env_var


def _raw(env_var: EnvVarName) -> Optional[str]:
    value = os.environ.get(_name(env_var))
    if value is None or value.strip() == "":
        return None
    return value.strip()


@overload
def resolve_bool_env_var(env_var: EnvVarName, override: Optional[bool] = None, *, fallback: bool) -> bool: ...
@overload
def resolve_bool_env_var(
    env_var: EnvVarName, override: Optional[bool] = None, fallback: Optional[bool] = None
) -> Optional[bool]: ...
def resolve_bool_env_var(
    env_var: EnvVarName, override: Optional[bool] = None, fallback: Optional[bool] = None
) -> Optional[bool]:
    """`override` if given, else the parsed variable, else `fallback`.

    Truthy values are 1/true/yes/on, falsy 0/false/no/off (case-insensitive); anything else is an error.
    """
    if override is not None:
        return override
    raw = _raw(env_var)
    if raw is None:
        return fallback
    lowered = raw.lower()
    if lowered in _TRUTHY:
        return True
    if lowered in _FALSY:
        return False
    raise ValueError(
        f"environment variable {_name(env_var)}={raw!r} is not a boolean; "
        f"use one of {sorted(_TRUTHY)} or {sorted(_FALSY)}"
    )


@overload
def resolve_int_env_var(env_var: EnvVarName, override: Optional[int] = None, *, fallback: int) -> int: ...
@overload
def resolve_int_env_var(
    env_var: EnvVarName, override: Optional[int] = None, fallback: Optional[int] = None
) -> Optional[int]: ...
def resolve_int_env_var(
    env_var: EnvVarName, override: Optional[int] = None, fallback: Optional[int] = None
) -> Optional[int]:
    """`override` if given, else the variable parsed as an integer, else `fallback`."""
    if override is not None:
        return override
    raw = _raw(env_var)
    if raw is None:
        return fallback
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {_name(env_var)}={raw!r} is not an integer; set it to e.g. 4747")


@overload
def resolve_str_env_var(env_var: EnvVarName, override: Optional[str] = None, *, fallback: str) -> str: ...
@overload
def resolve_str_env_var(
    env_var: EnvVarName, override: Optional[str] = None, fallback: Optional[str] = None
) -> Optional[str]: ...
def resolve_str_env_var(
    env_var: EnvVarName, override: Optional[str] = None, fallback: Optional[str] = None
) -> Optional[str]:
    """`override` if given, else the variable (empty counts as unset), else `fallback`."""
    if override is not None:
        return override
    raw = _raw(env_var)
    return fallback if raw is None else raw
