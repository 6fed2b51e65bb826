"""OpenAI chat-completions wire format for the policy server: the request model and response builders.

Beyond OpenAI, responses carry vLLM's token-id fields (`prompt_token_ids` at the top level, `token_ids`
per choice) when `return_token_ids` is true - the server default, since RL needs them.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .sampling import SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "ChatCompletionRequest",
    "StreamOptions",
    "logprobs_content",
    "new_completion_id",
    "openai_error",
]


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """The fields of `POST /v1/chat/completions` the policy server honours; unknown fields are ignored."""

    model_config = ConfigDict(extra="allow")

    messages: List[Dict[str, Any]] = Field(min_length=1)
    model: Optional[str] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    n: int = Field(default=1, ge=1, le=64)
    max_tokens: Optional[int] = Field(default=None, ge=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = Field(default=None, ge=0.0, le=5.0)
    top_p: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(default=None, ge=-1)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    stop: Optional[Union[str, List[str]]] = None
    seed: Optional[int] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    return_token_ids: Optional[bool] = None
    ignore_eos: bool = False
    chat_template_kwargs: Optional[Dict[str, Any]] = None

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        """The engine's sampling parameters for this request."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=max(0, self.top_k or 0),
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            stop=tuple(stop),
            seed=self.seed,
            logprobs=self.logprobs,
            top_logprobs=(self.top_logprobs or 0) if self.logprobs else 0,
            ignore_eos=self.ignore_eos,
        )

    def prompt_tools(self) -> Optional[List[Dict[str, Any]]]:
        """The tools to show the model; none when `tool_choice` is "none"."""
        return None if self.tool_choice == "none" else self.tools


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def _token_entry(tokenizer: PreTrainedTokenizerBase, token_id: int, logprob: float) -> Dict[str, Any]:
    text = str(tokenizer.decode([token_id]))
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def logprobs_content(
    tokenizer: PreTrainedTokenizerBase,
    token_ids: List[int],
    logprobs: List[float],
    top_logprobs: Optional[List[List[tuple[int, float]]]] = None,
) -> List[Dict[str, Any]]:
    """OpenAI `logprobs.content` entries for the given tokens."""
    entries: List[Dict[str, Any]] = []
    for position, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=False)):
        entry = _token_entry(tokenizer, token_id, logprob)
        alternatives = top_logprobs[position] if top_logprobs is not None else []
        entry["top_logprobs"] = [_token_entry(tokenizer, tid, lp) for tid, lp in alternatives]
        entries.append(entry)
    return entries


def openai_error(
    message: str, *, error_type: str = "invalid_request_error", param: Optional[str] = None
) -> Dict[str, Any]:
    """The OpenAI error body `{"error": {...}}`."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": None}}
