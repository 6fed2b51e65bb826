"""Sampler sessions as rollouts: each `asample` call of a recorded session becomes an LLM span in a store.

The span is the one the LLM proxy writes for a chat completion (`llm_proxy.spans.build_call_span`): prompt
and response token ids, logprobs and the weights version (`system_fingerprint`, "weights-v<N>"), so
`agl export`, the triplet adapters and GRPO read Tinker samples like any agent's calls.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ..store.base import LightningStore
    from .wire import SampledSequence

__all__ = ["SessionRecorder"]

logger = logging.getLogger(__name__)


class SessionRecorder:
    """Starts one rollout per sampling session in `store` and adds a span per sample call."""

    def __init__(self, store: LightningStore) -> None:
        self.store = store
        self._rollouts: Dict[str, Tuple[str, str]] = {}
        """Sampling session id -> (rollout id, attempt id) of sessions still sampling."""
        self._finished: Dict[str, str] = {}

    async def rollout_of(self, session_id: str, model: str) -> Tuple[str, str]:
        if session_id not in self._rollouts:
            attempted = await self.store.start_rollout(
                input={"tinker_sampling_session": session_id, "model": model},
                metadata={"source": "agl tinker", "sampling_session_id": session_id},
            )
            self._rollouts[session_id] = (attempted.rollout_id, attempted.attempt.attempt_id)
        return self._rollouts[session_id]

    async def finish(self, session_ids: Sequence[str]) -> None:
        """The client finished: the rollouts of these sampling sessions succeed (and `agl export` takes them)."""
        for session_id in session_ids:
            ids = self._rollouts.pop(session_id, None)
            if ids is not None:
                await self.store.finish_attempt(ids[0], ids[1], "succeeded")
                self._finished[session_id] = ids[0]

    def rollout_ids(self) -> Dict[str, str]:
        """Sampling session id -> the rollout its calls are recorded in."""
        return {**self._finished, **{session: ids[0] for session, ids in self._rollouts.items()}}

    async def record(
        self,
        session_id: str,
        model: str,
        tokenizer: Any,
        prompt: Sequence[int],
        params: Dict[str, Any],
        sequences: Sequence[SampledSequence],
        weights_version: int,
        started: float,
    ) -> Optional[str]:
        """Store the span of one sample call; returns its rollout id (None when the store refused it)."""
        from ..llm_proxy.call import ProxyCall
        from ..llm_proxy.spans import build_call_span
        from ..types import AUTO_SEQUENCE_ID

        rollout_id, attempt_id = await self.rollout_of(session_id, model)
        body = {
            "model": model,
            "messages": [{"role": "user", "content": tokenizer.decode(list(prompt))}],
            "n": len(sequences),
            **{
                key: params[key]
                for key in ("max_tokens", "temperature", "top_p", "seed")
                if params.get(key) is not None
            },
        }
        choices: List[Dict[str, Any]] = []
        for index, sequence in enumerate(sequences):
            entries = [
                {"token": tokenizer.decode([token]), "logprob": float(logprob), "top_logprobs": []}
                for token, logprob in zip(sequence.tokens, sequence.logprobs, strict=False)
            ]
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": tokenizer.decode(sequence.tokens)},
                    "finish_reason": sequence.stop_reason,
                    "token_ids": list(sequence.tokens),
                    "logprobs": {"content": entries, "refusal": None},
                }
            )
        response = {
            "id": f"tinker-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(started),
            "model": model,
            "system_fingerprint": f"weights-v{weights_version}",
            "choices": choices,
            "prompt_token_ids": list(prompt),
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": sum(len(s.tokens) for s in sequences),
                "total_tokens": len(prompt) + sum(len(s.tokens) for s in sequences),
            },
        }
        call = ProxyCall(
            kind="chat",
            client_body=body,
            body=body,
            headers={},
            start_time=started,
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            status_code=200,
            response=response,
            end_time=time.time(),
            extra_attributes={"agentlightning.tinker.sampling_session_id": session_id},
        )
        stored = await self.store.add_span(build_call_span(call, AUTO_SEQUENCE_ID))
        if stored is None:
            logger.warning("the store did not keep the span of sampling session %s", session_id)
            return None
        return rollout_id
