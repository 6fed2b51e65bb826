"""Semantic conventions: the exact span names and attribute keys agentlightning writes and reads."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel

__all__ = [
    "AGL_ANNOTATION",
    "AGL_MESSAGE",
    "AGL_OBJECT",
    "AGL_EXCEPTION",
    "AGL_OPERATION",
    "AGL_REWARD",
    "AGL_VIRTUAL",
    "AGL_STALE_ATTEMPT",
    "AGL_TRUNCATED_ATTRIBUTES",
    "AGL_ORIGINAL_SPAN_BYTES",
    "AGL_EXCEPTION_SUMMARY",
    "AGL_TIMEOUT_LOCATION",
    "TIMEOUT_LOCATIONS",
    "AGL_RUN",
    "RAW_GEN_AI_REQUEST",
    "LightningResourceAttributes",
    "LightningSpanAttributes",
    "RewardAttributes",
    "LinkAttributes",
    "RewardPydanticModel",
    "LinkPydanticModel",
    "PROMPT_TOKEN_IDS",
    "RESPONSE_TOKEN_IDS",
    "LOGPROBS_CONTENT",
    "LOGPROBS_REFUSAL",
]

AGL_ANNOTATION = "agentlightning.annotation"
AGL_MESSAGE = "agentlightning.message"
AGL_OBJECT = "agentlightning.object"
AGL_EXCEPTION = "agentlightning.exception"
AGL_OPERATION = "agentlightning.operation"
AGL_REWARD = "agentlightning.reward"
AGL_VIRTUAL = "agentlightning.virtual"
# Set (True) by the store on a span that arrived for a stale attempt (timed out, unresponsive or superseded).
AGL_STALE_ATTEMPT = "agentlightning.stale_attempt"
# A span too large for one store request keeps its attributes cut to fit: which ones, and its size before.
AGL_TRUNCATED_ATTRIBUTES = "agentlightning.truncated_attributes"
AGL_ORIGINAL_SPAN_BYTES = "agentlightning.original_span_bytes"
# On the `agentlightning.exception` span of an attempt that failed: the error as one line (`Type: message`,
# plus the URL of a failed HTTP request), for run summaries and the dashboard.
AGL_EXCEPTION_SUMMARY = "agentlightning.exception.summary"
# Where a timeout happened, on the span that records it: the LLM proxy's span of a call whose backend timed
# out ("llm_call"), or the exception span of an attempt that failed on a timeout (see TIMEOUT_LOCATIONS).
# Algorithms count such a rollout as timed out (GRPO: tokens discarded as `timeout`), never as reward 0.
AGL_TIMEOUT_LOCATION = "agentlightning.timeout.location"
TIMEOUT_LOCATIONS = ("llm_call", "reward", "rollout", "agent")
"""llm_call: a model request; reward: the reward computation; rollout: the rollout's own limit (its attempt
is marked `timeout` by the store, or `ProcessAgent` killed it); agent: another timeout inside the agent."""
# Rollout metadata key: the `fit`/`dev` run that created the rollout (`<script> <start time>` by default), so
# a store shared by several runs (and its dashboard) can keep them apart.
AGL_RUN = "agl_run"

RAW_GEN_AI_REQUEST = "raw_gen_ai_request"
"""LiteLLM's raw request span (the provider payload as `llm.<provider>.<key>`), child of the call's span; the
LLM proxy records it too, as v0.3 did. Readers fold it into its parent call (it is not a second call)."""

PROMPT_TOKEN_IDS = "prompt_token_ids"
RESPONSE_TOKEN_IDS = "response_token_ids"
LOGPROBS_CONTENT = "logprobs.content"
LOGPROBS_REFUSAL = "logprobs.refusal"


class LightningResourceAttributes(str, Enum):
    """OpenTelemetry resource attributes that tie spans to a rollout and attempt."""

    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"
    TRACER_NAME = "agentlightning.tracer.name"


class LightningSpanAttributes(str, Enum):
    """Span attribute keys (some are prefixes of flattened keys)."""

    REWARD = "agentlightning.reward"
    LINK = "agentlightning.link"
    TAG = "agentlightning.tag"
    MESSAGE_BODY = "agentlightning.message.body"
    OBJECT_TYPE = "agentlightning.object.type"
    OBJECT_LITERAL = "agentlightning.object.literal"
    OBJECT_JSON = "agentlightning.object.json"
    OPERATION_NAME = "agentlightning.operation.name"
    OPERATION_INPUT = "agentlightning.operation.input"
    OPERATION_OUTPUT = "agentlightning.operation.output"


class RewardAttributes(str, Enum):
    """Keys inside one flattened reward dimension: `agentlightning.reward.<i>.<key>`."""

    REWARD_NAME = "name"
    REWARD_VALUE = "value"


class LinkAttributes(str, Enum):
    """Keys inside one flattened link: `agentlightning.link.<i>.<key>`."""

    KEY_MATCH = "key_match"
    VALUE_MATCH = "value_match"


class RewardPydanticModel(BaseModel):
    """One named reward dimension."""

    name: str
    value: float


class LinkPydanticModel(BaseModel):
    """A link from one span to others whose attribute `key_match` equals `value_match`."""

    key_match: str
    value_match: str
