"""`PolicyServer`: an OpenAI-compatible chat-completions server over a `PolicyEngine`.

Routes: `POST /v1/chat/completions` (non-streaming and SSE streaming), `POST /v1/responses` and
`POST /v1/messages` (`apis.py`), `GET /v1/models`, `GET /health`
(also `/v1/health`), `GET /v1/weights/fingerprint` (`fingerprint.py`). The server runs uvicorn on a background thread so a trainer in the same process can
update the weights it serves (`update_weights`) without a restart.

Around a weight swap (`swap_weights`) the server pauses: new model requests wait (held, at most
`hold_timeout_s`; only then 429 with `Retry-After`), requests already running finish, the weights change,
and it resumes, which lets the held requests in. A swap never fails a request that waits less than the hold
timeout; each swap's duration and the requests it held are kept in `swaps`. Every completion reports the
weights version that produced it (`system_fingerprint`: "weights-v<N>").

With `deterministic=True` the engine decodes one request at a time, without prefix cache, seeding each
request from its content (see `PolicyEngine`): a completion depends only on the weights and the request.

With `adapters` (LoRA adapters of a peft model, e.g. one per agent role) the server serves the frozen
base as `model_name` and each adapter as `model_name:adapter` (see `serving/adapters.py`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Union

from ..types.resources import LLM
from ..web.limits import DEFAULT_MAX_REQUEST_SIZE
from .adapters import UnknownAdapterError, adapter_model_name
from .chat import TOOL_CALL_OPEN, parse_tool_calls
from .completions import ClientGone, submit_chat, unless_disconnected
from .completions import complete_chat as _complete
from .completions import usage as _usage
from .completions import wants_token_ids as _wants_token_ids
from .engine import CompletionStream, PolicyEngine, SequenceDelta
from .fingerprint import add_fingerprint_route
from .protocol import ChatCompletionRequest, logprobs_content, new_completion_id, now, openai_error
from .sampled_turns import SampledTurns
from .shell import OpenAIServer

if TYPE_CHECKING:
    import torch
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response
    from transformers import PreTrainedTokenizerBase

__all__ = ["PolicyServer", "SwapReport"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SwapReport:
    """One `swap_weights`: how long the server was paused, and what that cost the requests.

    `swap_ms` spans pause to resume (`drain_ms` waiting for running requests, `weight_sync_ms` the copy);
    `held_requests` arrived meanwhile and waited (the longest `wait_ms_max`); `rejected_requests` were
    answered 429 because they waited longer than `hold_timeout_s` (0 unless the swap took that long).
    """

    swap_ms: float
    drain_ms: float
    weight_sync_ms: float
    held_requests: int
    wait_ms_max: float
    wait_ms_total: float
    rejected_requests: int

    def as_metrics(self) -> Dict[str, float]:
        """The report as GRPO step metrics (`swap_*`)."""
        return {
            "swap_ms": self.swap_ms,
            "swap_held_requests": float(self.held_requests),
            "swap_wait_ms": self.wait_ms_max,
            "swap_wait_ms_total": self.wait_ms_total,
            "swap_rejected_requests": float(self.rejected_requests),
        }


class PolicyServer(OpenAIServer):
    """Serve `model` over HTTP as an OpenAI-compatible endpoint that also returns token ids and logprobs.

    Args:
        model: a Hugging Face causal LM (plain or peft); shared with a trainer in shared-model mode.
        tokenizer: its tokenizer (needs a chat template and a pad token; see `models.prepare_tokenizer`).
        model_name: the id reported by `/v1/models` and in responses (requests may name any model).
        host/port: where to bind; port None or 0 picks a free port.
        max_batch_size/batch_window_s: continuous batching: sequences decoded at once, and how long an idle
            engine lets the first request wait for others to share its prefill (see `PolicyEngine`).
        default_max_tokens: completion length when a request sets none.
        seed: seeds the sampling of requests that give no `seed`.
        always_logprobs: return logprobs even when a request does not ask (GRPO turns this on so the
            tracer records the sampling-time logprobs of agents that never request them).
        retry_after_s: the `Retry-After` (seconds) of the 429 answered to a request held past `hold_timeout_s`.
        hold_timeout_s: how long a model request that arrives during a weight swap waits for it to end
            before it is answered 429 (0: answer 429 at once, the behaviour before holding).
        deterministic: decode one request at a time, without prefix cache, each seeded from its content and
            the weights version (see `PolicyEngine`); slower, but a completion no longer depends on timing.
        adapters: LoRA adapters of the (peft) model, each served as `model_name:<adapter>`; requests for
            `model_name` then run the base with adapters disabled, and unknown adapters get 404.
        compile: `torch.compile` one fused decoder layer for every layer (True), or the whole forward
            ("model"); see `PolicyEngine`.
        fuse: fused projections, on CPU served from prepacked copies of the weights (faster decoding; the
            copies take the weights' size and are dropped while an update holds the engine); None: CUDA only.
            See `PolicyEngine`.
        keep_sampled_turns: prompt a conversation that comes back longer with the ids the model sampled for
            its earlier turns, not their re-tokenized text (`sampled_turns.py`), so multi-turn trajectories
            merge; how many prompts did so is `sampled_turns.reused_prompts`. False: always tokenize the text.
        max_body_size / allowed_hosts / allowed_origins: see `OpenAIServer` (413 / 403 answers).
    """

    kind = "policy server"

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        *,
        model_name: str = "policy",
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        max_batch_size: int = 32,
        batch_window_s: float = 0.01,
        default_max_tokens: int = 256,
        seed: Optional[int] = None,
        always_logprobs: bool = False,
        retry_after_s: float = 1.0,
        hold_timeout_s: float = 600.0,
        adapters: Sequence[str] = (),
        compile: Union[bool, str] = False,
        fuse: Optional[bool] = None,
        deterministic: bool = False,
        keep_sampled_turns: bool = True,
        max_body_size: int = DEFAULT_MAX_REQUEST_SIZE,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
    ) -> None:
        if hold_timeout_s < 0:
            raise ValueError(f"hold_timeout_s must be >= 0, got {hold_timeout_s}")
        self.engine = PolicyEngine(
            model,
            tokenizer,
            max_batch_size=max_batch_size,
            batch_window_s=batch_window_s,
            seed=seed,
            adapters=adapters,
            compile=compile,
            fuse=fuse,
            deterministic=deterministic,
        )
        super().__init__(
            model_name=model_name,
            host=host,
            port=port,
            retry_after_s=retry_after_s,
            max_body_size=max_body_size,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
        )
        self.default_max_tokens = default_max_tokens
        self.always_logprobs = always_logprobs
        self.sampled_turns: Optional[SampledTurns] = SampledTurns(tokenizer) if keep_sampled_turns else None
        """The ids of recent turns as sampled (None with `keep_sampled_turns=False`)."""
        self.hold_timeout_s = hold_timeout_s
        self.swaps: List[SwapReport] = []
        """One report per `swap_weights`."""
        self.drain_times_s: List[float] = []
        """How long each `swap_weights` waited for running requests to finish."""
        self.weight_sync_ms: List[float] = []
        """How long each `update_weights` took (ms), the copy into a served copy included."""

    # Lifecycle ---------------------------------------------------------------------------------------

    @property
    def app(self) -> FastAPI:
        """The shared OpenAI app, plus `GET /v1/weights/fingerprint` (what these weights are, checked by learners)."""
        if self._app is None:
            self._app = super().app
            add_fingerprint_route(self._app, self.engine)
        return self._app

    def health(self) -> Dict[str, Any]:
        return {"status": "ok", "weights_version": self.weights_version}

    def _starting(self) -> None:
        self.engine.start()

    def _stopped(self) -> None:
        self.engine.close()

    def __enter__(self) -> PolicyServer:
        self.start()
        return self

    # Training-facing API -----------------------------------------------------------------------------

    def update_weights(self, source: Union[torch.nn.Module, Mapping[str, torch.Tensor]]) -> int:
        """Serve new weights (state dict, module, or the shared module after an in-place update).

        How long each took (the copy into the served model, ms) is kept in `weight_sync_ms`.
        """
        import torch

        started = time.perf_counter()
        version = self.engine.update_weights(source)
        device = next(self.engine.model.parameters()).device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.weight_sync_ms.append((time.perf_counter() - started) * 1000)
        return version

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    @property
    def retry_after_s(self) -> float:
        return self.gate.retry_after_seconds

    @property
    def paused(self) -> bool:
        return self.gate.paused

    @property
    def in_flight(self) -> int:
        """Model requests being answered right now."""
        return self.gate.inflight

    @property
    def rejected_while_paused(self) -> int:
        """Model requests answered 429 because the server stayed paused longer than `hold_timeout_s`."""
        return self.gate.rejected

    def pause(self) -> None:
        """Hold new model requests until `resume()` (429 + `Retry-After` past `hold_timeout_s`); running ones continue."""
        self.gate.pause("swapping weights")

    def resume(self) -> None:
        self.gate.resume()

    def drain(self, timeout: Optional[float] = None) -> float:
        """Wait until no model request is running; returns the seconds waited.

        Raises:
            TimeoutError: requests were still running after `timeout` seconds.
        """
        return self.gate.drain(timeout)

    def swap_weights(
        self, source: Union[torch.nn.Module, Mapping[str, torch.Tensor]], *, drain_timeout: Optional[float] = None
    ) -> int:
        """Pause, let running requests finish, serve the new weights, resume; returns the new version.

        Requests that arrive meanwhile are held and go on at the resume; the swap is reported in `swaps`.
        """
        started = time.perf_counter()
        rejected = self.gate.rejected
        drained_s, sync_ms = 0.0, 0.0
        self.pause()
        try:
            drained_s = self.drain(drain_timeout)
            self.drain_times_s.append(drained_s)
            version = self.update_weights(source)
            sync_ms = self.weight_sync_ms[-1]
            return version
        finally:
            self.resume()
            release = self.gate.last_release
            self.swaps.append(
                SwapReport(
                    swap_ms=(time.perf_counter() - started) * 1000,
                    drain_ms=drained_s * 1000,
                    weight_sync_ms=sync_ms,
                    held_requests=release.held,
                    wait_ms_max=release.longest_s * 1000,
                    wait_ms_total=release.total_s * 1000,
                    rejected_requests=self.gate.rejected - rejected,
                )
            )

    async def admit(self) -> bool:
        """Count a new model request in; while paused hold it, at most `hold_timeout_s` (False: answer 429)."""
        if self.hold_timeout_s <= 0:
            return self.gate.enter()
        return await self.gate.enter_when_open(self.hold_timeout_s)

    def paused_message(self) -> str:
        """The 429 message for a request held past `hold_timeout_s`."""
        return f"the policy server has been swapping weights for over {self.hold_timeout_s:g} s; retry shortly"

    @property
    def adapters(self) -> List[str]:
        return list(self.engine.adapters)

    async def serve_chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        from starlette.responses import JSONResponse, StreamingResponse

        if not await self.admit():
            return JSONResponse(
                status_code=429,
                content=openai_error(self.paused_message(), error_type="rate_limit"),
                headers={"Retry-After": f"{self.retry_after_s:g}"},
            )
        streaming = False
        try:
            response = await _answer_chat(self, body, request)
            streaming = isinstance(response, StreamingResponse)
            return response
        finally:
            if not streaming:
                self.gate.exit()

    async def complete(self, body: ChatCompletionRequest, request: Request) -> Dict[str, Any]:
        stream = submit_chat(self, body)
        return await unless_disconnected(request, stream, _complete(self, body, stream))

    @property
    def served_models(self) -> List[str]:
        """The model names requests may select: the base, then `base:<adapter>` for each adapter."""
        return [self.model_name, *(adapter_model_name(self.model_name, a) for a in self.engine.adapters)]

    def as_resource(
        self, sampling_parameters: Optional[Dict[str, Any]] = None, *, adapter: Optional[str] = None
    ) -> LLM:
        """An `LLM` resource pointing at this server (at one of its adapters), to publish through the store."""
        if adapter is not None and adapter not in self.engine.adapters:
            raise ValueError(f"unknown adapter {adapter!r}; this server serves adapters {self.engine.adapters}")
        return LLM(
            endpoint=self.endpoint,
            model=adapter_model_name(self.model_name, adapter),
            sampling_parameters=dict(sampling_parameters or {}),
        )


# HTTP layer --------------------------------------------------------------------------------------------


async def _answer_chat(server: PolicyServer, body: ChatCompletionRequest, request: Request) -> Response:
    from starlette.responses import JSONResponse, StreamingResponse

    try:
        stream = submit_chat(server, body)
    except UnknownAdapterError as exc:
        return JSONResponse(status_code=404, content=openai_error(str(exc), param="model"))
    except ValueError as exc:
        return JSONResponse(status_code=400, content=openai_error(str(exc)))
    except Exception as exc:  # template errors and the like must not kill the server
        logger.exception("Could not prepare a chat completion")
        return JSONResponse(status_code=500, content=openai_error(str(exc), error_type="server_error"))
    if body.stream:
        return StreamingResponse(_counted(server, _sse(server, body, stream)), media_type="text/event-stream")
    try:
        content = await unless_disconnected(request, stream, _complete(server, body, stream))
    except ClientGone as exc:
        logger.info("Chat completion cancelled: %s", exc)
        return JSONResponse(status_code=499, content=openai_error(str(exc)))
    except Exception as exc:
        logger.exception("Chat completion failed")
        return JSONResponse(status_code=500, content=openai_error(str(exc), error_type="server_error"))
    return JSONResponse(content=content)


async def _counted(server: PolicyServer, chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """A streamed response stays in flight until its last chunk is sent (or the client goes away)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        server.gate.exit()


class _ToolTextGate:
    """Streams content text but holds back anything from a `<tool_call>` tag on (sent as `tool_calls`), and a
    reply that opens with `{` (a bare JSON tool call) until it ends."""

    def __init__(self) -> None:
        self.text = ""
        self.sent = 0

    def push(self, delta: str) -> str:
        self.text += delta
        if self.sent == 0 and (not self.text.strip() or self.text.lstrip().startswith("{")):
            return ""  # a reply that opens with a JSON object may be a bare (Llama 3.1) tool call: hold it all
        cut = self.text.find(TOOL_CALL_OPEN)
        if cut == -1:
            cut = len(self.text)
            for size in range(min(len(TOOL_CALL_OPEN) - 1, len(self.text)), 0, -1):
                if TOOL_CALL_OPEN.startswith(self.text[-size:]):
                    cut -= size
                    break
        out = self.text[self.sent : max(self.sent, cut)]
        self.sent = max(self.sent, cut)
        return out


async def _sse(server: PolicyServer, body: ChatCompletionRequest, stream: CompletionStream) -> AsyncIterator[str]:
    tokenizer = server.engine.tokenizer
    completion_id, created = new_completion_id(), now()
    with_tools = bool(body.prompt_tools())
    gates = {i: _ToolTextGate() for i in range(stream.n)}

    def chunk(choices: List[Dict[str, Any]], **extra: Any) -> str:
        payload: Dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": adapter_model_name(server.model_name, stream.adapter),
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

    completed = False
    completion_tokens = 0
    try:
        first_extra: Dict[str, Any] = {"prompt_token_ids": stream.prompt_ids} if _wants_token_ids(body) else {}
        for index in range(stream.n):
            role = {"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            yield chunk([role], **(first_extra if index == 0 else {}))
        async for event in stream:
            if isinstance(event, SequenceDelta):
                completion_tokens += 1
                text = gates[event.index].push(event.text) if with_tools else event.text
                choice: Dict[str, Any] = {"index": event.index, "delta": {"content": text}, "finish_reason": None}
                if body.logprobs or server.always_logprobs:
                    entries = logprobs_content(tokenizer, [event.token_id], [event.logprob], [event.top_logprobs])
                    choice["logprobs"] = {"content": entries, "refusal": None}
                if _wants_token_ids(body):
                    choice["token_ids"] = [event.token_id]
                yield chunk([choice])
                continue
            delta: Dict[str, Any] = {}
            finish_reason = event.finish_reason
            if with_tools:
                gate = gates[event.index]
                gate.push(event.text_tail)
                _content, tool_calls = parse_tool_calls(gate.text)
                if tool_calls:  # text before the first tag has been streamed already
                    finish_reason = "tool_calls"
                    delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(tool_calls)]
                    rest = ""
                else:
                    rest = gate.text[gate.sent :]
                if rest:
                    delta["content"] = rest
            elif event.text_tail:
                delta["content"] = event.text_tail
            yield chunk([{"index": event.index, "delta": delta, "finish_reason": finish_reason}])
        if body.stream_options is not None and body.stream_options.include_usage:
            yield chunk([], usage=_usage(len(stream.prompt_ids), completion_tokens))
        yield "data: [DONE]\n\n"
        completed = True
    except Exception as exc:
        logger.exception("Streaming chat completion failed")
        yield f"data: {json.dumps(openai_error(str(exc), error_type='server_error'))}\n\n"
    finally:
        if not completed:
            stream.cancel()
