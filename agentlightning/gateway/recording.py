"""`GatewaySpanRecorder`: stores each finished gateway call as an LLM span, in one store round trip.

The span is the one the LLM proxy records (`llm_proxy.spans.build_call_span`), written with
`AUTO_SEQUENCE_ID` so the store assigns the next one as it inserts it. Because the write completes before
the end of the answer reaches the agent, anything the agent records afterwards (its reward) still sorts
after the call, without the separate sequence-id request the proxy makes on arrival.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agentlightning.llm_proxy.call import ProxyCall
from agentlightning.llm_proxy.callbacks import ProxyCallback
from agentlightning.llm_proxy.spans import build_call_span
from agentlightning.semconv import LightningResourceAttributes
from agentlightning.types import AUTO_SEQUENCE_ID

if TYPE_CHECKING:
    from agentlightning.llm_proxy.runtime import ProxyRuntime

__all__ = ["GatewaySpanRecorder"]

logger = logging.getLogger(__name__)


class GatewaySpanRecorder(ProxyCallback):
    """Record every call of a rollout attempt; the answer completes once its span is stored."""

    async def on_call_end(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        exporter = runtime.exporter
        if not call.is_attributed or exporter is None:
            return
        span = build_call_span(call, AUTO_SEQUENCE_ID)
        span.resource.attributes.pop(LightningResourceAttributes.SPAN_SEQUENCE_ID.value, None)
        if not await exporter.export(span):
            logger.warning(
                "the gateway could not store the call of rollout %s attempt %s", call.rollout_id, call.attempt_id
            )
