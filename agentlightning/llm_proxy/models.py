"""The proxy's model list: LiteLLM-style `ModelConfig` entries resolved into backends to forward to.

An entry `{"model_name": "policy", "litellm_params": {"model": "hosted_vllm/Qwen/Qwen3-0.6B",
"api_base": "http://127.0.0.1:8000/v1"}}` serves the name `policy` by forwarding to that OpenAI-compatible
server with backend model `Qwen/Qwen3-0.6B`. Several entries with one name are used round-robin (and a
retry moves to the next); `model_name: "*"` with a `.../*` model forwards any other name unchanged.

Any other LiteLLM provider (`anthropic/`, `azure/`, `gemini/`, `bedrock/`...), or any `litellm_params` key
beyond the few the fast path understands (`rpm`, `max_retries`, `aws_region_name`...), makes a deployment
served through `litellm.acompletion` with all of its `litellm_params`; that needs the `litellm` extra, and
without it such an entry is refused with an error naming the extra.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict
from urllib.parse import urlsplit

__all__ = [
    "import_litellm",
    "apply_litellm_settings",
    "LiteLLMParams",
    "ModelConfig",
    "Deployment",
    "ModelRouter",
    "UnknownModelError",
    "OPENAI_COMPATIBLE_PROVIDERS",
    "litellm_available",
]

OPENAI_COMPATIBLE_PROVIDERS = ("hosted_vllm", "openai", "custom_openai", "openai_like", "vllm")
"""`litellm_params.model` prefixes served by forwarding to an OpenAI-compatible HTTP API."""

WILDCARD = "*"
DEFAULT_OPENAI_API_BASE = "https://api.openai.com/v1"
_KNOWN_PARAMS = frozenset({"model", "api_base", "api_key", "timeout", "extra_headers"})


class LiteLLMParams(TypedDict, total=False):
    """Where a model lives: `model` is `<provider>/<backend model>`, e.g. `hosted_vllm/Qwen/Qwen3-0.6B`."""

    model: str
    api_base: str
    api_key: str
    timeout: float
    extra_headers: dict[str, str]


class ModelConfig(TypedDict):
    """One LiteLLM `model_list` entry: the name clients ask for and how to reach it."""

    model_name: str
    litellm_params: LiteLLMParams


class UnknownModelError(KeyError):
    """A request named a model the proxy does not serve."""

    def __init__(self, model: str, known: Sequence[str]) -> None:
        self.model = model
        self.known = list(known)
        listed = ", ".join(repr(m) for m in self.known) or "none (the model list is empty)"
        super().__init__(f"model {model!r} is not served by this proxy; known models: {listed}")

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Deployment:
    """One backend serving a model name: `POST {api_base}/chat/completions` with `model=backend_model`."""

    model_name: str
    provider: str
    backend_model: str
    api_base: str
    api_key: Optional[str] = field(default=None, repr=False)  # secrets stay out of reprs, and so out of logs
    timeout: Optional[float] = None
    extra_headers: Optional[tuple[tuple[str, str], ...]] = field(default=None, repr=False)
    litellm_params: Optional[Mapping[str, Any]] = field(default=None, compare=False, repr=False)
    """All `litellm_params` of an entry served through LiteLLM (None for the OpenAI-compatible fast path)."""

    @property
    def via_litellm(self) -> bool:
        return self.litellm_params is not None

    def url(self, endpoint: str) -> str:
        """Full backend URL of an OpenAI route such as `chat/completions`."""
        return f"{self.api_base}/{endpoint}"

    def for_request(self, requested_model: str) -> Deployment:
        """A wildcard deployment bound to the model the client asked for."""
        if self.litellm_params is not None:
            if not self.backend_model.endswith("/" + WILDCARD):
                return self
            backend_model = f"{self.provider}/{requested_model}"
            params = {**self.litellm_params, "model": backend_model}
            return Deployment(requested_model, self.provider, backend_model, self.api_base, litellm_params=params)
        if self.backend_model != WILDCARD:
            return self
        return Deployment(
            requested_model,
            self.provider,
            requested_model,
            self.api_base,
            self.api_key,
            self.timeout,
            self.extra_headers,
        )


def _normalize_api_base(api_base: str, where: str) -> str:
    parts = urlsplit(api_base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{where}: api_base must be an http(s) URL like 'http://127.0.0.1:8000/v1', got {api_base!r}")
    base = api_base.rstrip("/")
    # A bare host means the OpenAI layout under /v1 (what vLLM serves); any explicit path is kept as given.
    return base + "/v1" if parts.path in ("", "/") else base


def litellm_available() -> bool:
    """Whether the `litellm` extra is installed (checked without importing it: the import takes seconds)."""
    try:
        return importlib.util.find_spec("litellm") is not None
    except (ImportError, ValueError):
        return False


def _litellm_deployment(model_name: str, params: Mapping[str, Any], where: str, why: str) -> Deployment:
    if not litellm_available():
        raise ValueError(
            f"{where} ({model_name!r}): {why}, which needs LiteLLM: pip install agentlightning[litellm]. Without "
            f"it this proxy forwards only to {', '.join(p + '/' for p in OPENAI_COMPATIBLE_PROVIDERS)} backends "
            f"with litellm_params {sorted(_KNOWN_PARAMS)}"
        )
    model = str(params["model"])
    provider, _, backend = model.partition("/")
    if backend == WILDCARD and model_name != WILDCARD:
        raise ValueError(f"{where}: a wildcard model {model!r} needs model_name '*', got {model_name!r}")
    api_base = params.get("api_base")
    return Deployment(
        model_name=model_name,
        provider=provider,
        backend_model=model,
        api_base=str(api_base) if api_base else "",
        litellm_params=dict(params),
    )


def parse_model_config(entry: Mapping[str, Any], position: int) -> Deployment:
    """Validate one model-list entry; errors name the entry and the fix."""
    where = f"model_list[{position}]"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be a dict {{model_name, litellm_params}}, got {type(entry).__name__}")
    model_name = entry.get("model_name")
    if not isinstance(model_name, str) or not model_name:
        raise ValueError(f"{where} needs a non-empty string 'model_name' (the name clients ask for)")
    params = entry.get("litellm_params")
    if not isinstance(params, Mapping):
        raise ValueError(f"{where} ({model_name!r}) needs 'litellm_params', e.g. {{'model': 'hosted_vllm/<name>'}}")
    model = params.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError(f"{where} ({model_name!r}) needs litellm_params.model, e.g. 'hosted_vllm/Qwen/Qwen3-0.6B'")
    provider, sep, backend_model = model.partition("/")
    if not sep:
        provider, backend_model = "openai", model
    if provider not in OPENAI_COMPATIBLE_PROVIDERS:
        why = f"provider {provider!r} in {model!r} is not OpenAI-compatible"
        return _litellm_deployment(model_name, params, where, why)  # type: ignore[arg-type]
    unknown = sorted(set(params) - _KNOWN_PARAMS)  # type: ignore[arg-type]
    if unknown:
        return _litellm_deployment(model_name, params, where, f"litellm_params {unknown} are LiteLLM options")  # type: ignore[arg-type]
    if backend_model == WILDCARD and model_name != WILDCARD:
        raise ValueError(f"{where}: a wildcard model {model!r} needs model_name '*', got {model_name!r}")
    api_base = params.get("api_base")
    api_key = params.get("api_key")
    if api_base is None:
        if provider != "openai":
            raise ValueError(
                f"{where} ({model_name!r}) needs litellm_params.api_base for {provider!r}, e.g. "
                "'http://127.0.0.1:8000/v1'"
            )
        # As LiteLLM (v0.3's proxy): OPENAI_BASE_URL, then OPENAI_API_BASE, then the hosted API.
        api_base = os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or DEFAULT_OPENAI_API_BASE
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
    if not isinstance(api_base, str):
        raise ValueError(f"{where} ({model_name!r}): api_base must be a string, got {api_base!r}")
    timeout = params.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"{where} ({model_name!r}): timeout must be a positive number of seconds, got {timeout!r}")
    extra_headers = params.get("extra_headers")
    if extra_headers is not None and not isinstance(extra_headers, Mapping):
        raise ValueError(f"{where} ({model_name!r}): extra_headers must be a dict, got {extra_headers!r}")
    return Deployment(
        model_name=model_name,
        provider=provider,
        backend_model=backend_model,
        api_base=_normalize_api_base(api_base, f"{where} ({model_name!r})"),
        api_key=str(api_key) if api_key else None,
        timeout=float(timeout) if timeout is not None else None,
        extra_headers=tuple((str(k), str(v)) for k, v in extra_headers.items()) if extra_headers else None,  # type: ignore[union-attr]
    )


class ModelRouter:
    """Model name -> deployments, picked round-robin; built from (and validating) a model list."""

    def __init__(self, model_list: Sequence[Mapping[str, Any]]) -> None:
        if isinstance(model_list, (str, bytes)) or not isinstance(model_list, Sequence):
            raise ValueError(f"model_list must be a list of ModelConfig dicts, got {type(model_list).__name__}")
        self._deployments: dict[str, list[Deployment]] = {}
        for position, entry in enumerate(model_list):
            deployment = parse_model_config(entry, position)
            siblings = self._deployments.setdefault(deployment.model_name, [])
            if siblings and siblings[0].via_litellm != deployment.via_litellm:
                raise ValueError(
                    f"model_list[{position}] ({deployment.model_name!r}) mixes a LiteLLM-served entry with an "
                    "OpenAI-compatible one under the same model_name; give them different names, or add a "
                    "LiteLLM option (e.g. 'rpm') to both so that both go through LiteLLM"
                )
            siblings.append(deployment)
        self._turns: dict[str, Iterator[int]] = {name: itertools.count() for name in self._deployments}

    @property
    def model_names(self) -> list[str]:
        """Served names in model-list order (`*` last, as it is a fallback)."""
        names = [name for name in self._deployments if name != WILDCARD]
        return names + ([WILDCARD] if WILDCARD in self._deployments else [])

    def resolve(self, model: str) -> list[Deployment]:
        """The deployments to try for `model`, starting with this request's round-robin pick.

        Raises `UnknownModelError` (listing the served names) when nothing serves `model`.
        """
        name = model if model in self._deployments else WILDCARD
        deployments = self._deployments.get(name)
        if not deployments:
            raise UnknownModelError(model, self.model_names)
        start = next(self._turns[name]) % len(deployments)
        ordered = deployments[start:] + deployments[:start]
        return [d.for_request(model) for d in ordered]

    def __len__(self) -> int:
        return sum(len(d) for d in self._deployments.values())


def import_litellm() -> Any:
    """The `litellm` module (its bundled model cost map, no download), or a RuntimeError naming the extra."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:  # pragma: no cover - the model list refuses such entries without the extra
        raise RuntimeError("this model-list entry needs LiteLLM: pip install agentlightning[litellm]") from exc
    return litellm


def apply_litellm_settings(settings: Mapping[str, Any]) -> None:
    """Set `litellm_settings` of a LiteLLM config (e.g. `drop_params`) on the `litellm` module."""
    litellm = import_litellm()
    for name, value in settings.items():
        setattr(litellm, name, value)
