"""Resources: the versioned, named things an algorithm improves (LLM endpoints, prompt templates)."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agentlightning.types.errors import ArgumentTypeError

__all__ = [
    "Resource",
    "LLM",
    "ProxyLLM",
    "PromptTemplate",
    "AlgorithmState",
    "ResourceUnion",
    "NamedResources",
    "ResourcesUpdate",
    "validate_named_resources",
]

logger = logging.getLogger(__name__)


class Resource(BaseModel):
    """Base of every resource; `resource_type` is the union's discriminator."""

    model_config = ConfigDict(extra="allow")

    resource_type: Any


class LLM(Resource):
    """An OpenAI-compatible endpoint and model name."""

    resource_type: Literal["llm"] = "llm"
    endpoint: str
    model: str
    # A secret: sent to whoever runs with the resource, never shown in reprs (and so never in logs).
    api_key: Optional[str] = Field(default=None, repr=False)
    sampling_parameters: dict[str, Any] = Field(default_factory=dict)

    def get_base_url(self, *args: Any, **kwargs: Any) -> str:
        return self.endpoint


class ProxyLLM(LLM):
    """An LLM behind the LLMProxy: its base URL carries the rollout and attempt being served."""

    resource_type: Literal["proxy_llm"] = "proxy_llm"  # type: ignore[assignment]

    def __getattribute__(self, name: str) -> Any:
        if name == "endpoint":
            logger.warning(
                "ProxyLLM.endpoint read directly; use get_base_url(rollout_id, attempt_id) so calls are "
                "attributed to their rollout."
            )
        return super().__getattribute__(name)

    def _raw_endpoint(self) -> str:
        return object.__getattribute__(self, "__dict__")["endpoint"]

    def get_base_url(self, rollout_id: Optional[str] = None, attempt_id: Optional[str] = None) -> str:  # type: ignore[override]
        endpoint = self._raw_endpoint()
        if rollout_id is None and attempt_id is None:
            return endpoint
        if rollout_id is None or attempt_id is None:
            raise ValueError(
                f"rollout_id and attempt_id must be given together (got rollout_id={rollout_id!r}, "
                f"attempt_id={attempt_id!r})"
            )
        for field, value in (("rollout_id", rollout_id), ("attempt_id", attempt_id)):
            if not isinstance(value, str):  # type: ignore[redundant-expr]
                raise ArgumentTypeError(
                    f"ProxyLLM.get_base_url: {field} must be a str, got {type(value).__name__} ({value!r}); "
                    "pass rollout.rollout_id and rollout.attempt.attempt_id"
                )
        base = endpoint.rstrip("/")
        has_v1 = base.endswith("/v1")
        if has_v1:
            base = base[: -len("/v1")]
        routed = f"{base}/rollout/{rollout_id}/attempt/{attempt_id}"
        return routed + "/v1" if has_v1 else routed

    def with_attempted_rollout(self, rollout: Any) -> LLM:
        """A plain `LLM` routed to this rollout's latest attempt."""
        return LLM(
            endpoint=self.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=self.model,
            api_key=self.api_key,
            sampling_parameters=dict(self.sampling_parameters),
        )


class PromptTemplate(Resource):
    """A prompt template rendered with f-string or jinja syntax."""

    resource_type: Literal["prompt_template"] = "prompt_template"
    template: str
    engine: Literal["jinja", "f-string", "poml"] = "f-string"

    def format(self, **kwargs: Any) -> str:
        if self.engine == "f-string":
            try:
                return self.template.format(**kwargs)
            except KeyError as exc:
                raise ValueError(f"prompt template needs placeholder {exc.args[0]!r}, not given to format()") from exc
        if self.engine == "jinja":
            import jinja2

            env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
            try:
                return env.from_string(self.template).render(**kwargs)
            except jinja2.UndefinedError as exc:
                raise ValueError(f"jinja prompt template: {exc.message}") from exc
        raise NotImplementedError(f"formatting prompt templates with engine {self.engine!r} is not supported")


class AlgorithmState(Resource):
    """Where an algorithm is in its search (e.g. APO's beam, GEPA's candidates and Pareto front), kept in the
    store so a run killed mid-way resumes from it. Agents never receive it: algorithms publish it in a
    resources bundle of its own, never next to the resources of a rollout."""

    resource_type: Literal["algorithm_state"] = "algorithm_state"
    algorithm: str
    """The algorithm that wrote it ("apo", "gepa", ...), checked when it is read back."""
    run: str
    """The run it belongs to: a store can hold the state of several runs."""
    state: dict[str, Any] = Field(default_factory=dict)
    """JSON-serializable; its layout belongs to the algorithm."""


ResourceUnion = Annotated[Union[LLM, ProxyLLM, PromptTemplate, AlgorithmState], Field(discriminator="resource_type")]
NamedResources = dict[str, ResourceUnion]

_named_resources_adapter: TypeAdapter[dict[str, Any]] = TypeAdapter(NamedResources)


def validate_named_resources(resources: Any) -> dict[str, Any]:
    """Validate a mapping of name -> resource (models or dicts); raises ValueError naming the bad entry."""
    if not isinstance(resources, dict):
        raise ValueError(f"resources must be a dict of name -> resource, got {type(resources).__name__}")
    plain = {k: (v.model_dump() if isinstance(v, BaseModel) else v) for k, v in resources.items()}
    try:
        return _named_resources_adapter.validate_python(plain)
    except Exception as exc:
        raise ValueError(f"malformed resources: {exc}") from exc


class ResourcesUpdate(BaseModel):
    """One version of a named bundle of resources."""

    resources_id: str
    create_time: float
    update_time: float
    version: int
    resources: NamedResources
