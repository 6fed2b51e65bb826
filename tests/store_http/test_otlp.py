"""OTLP/HTTP trace ingestion at POST /v1/traces: protobuf (plain and gzip) and JSON become stored spans."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Sequence
from typing import Any, Optional

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from agentlightning.store import InMemoryLightningStore, LightningStoreServer
from agentlightning.types import AttemptedRollout

PROTOBUF = {"content-type": "application/x-protobuf"}


class _Collect(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def record_spans(resource_attributes: dict[str, Any]) -> list[ReadableSpan]:
    """A parent span with a child (attributes, event, error status), as an instrumented agent would emit."""
    collector = _Collect()
    provider = TracerProvider(resource=Resource.create(resource_attributes))
    provider.add_span_processor(SimpleSpanProcessor(collector))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("agent") as parent:
        parent.set_attribute("agent.name", "calc")
        with tracer.start_as_current_span("llm") as child:
            child.set_attribute("gen_ai.usage.tokens", 12)
            child.set_attribute("tags", ["a", "b"])
            child.add_event("token", {"index": 1})
            child.set_status(Status(StatusCode.ERROR, "rate limited"))
    provider.shutdown()
    return collector.spans


def ids_of(rollout: AttemptedRollout, sequence_id: Optional[int] = None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "agentlightning.rollout_id": rollout.rollout_id,
        "agentlightning.attempt_id": rollout.attempt.attempt_id,
    }
    if sequence_id is not None:
        attributes["agentlightning.span_sequence_id"] = sequence_id
    return attributes


@pytest.fixture
async def server() -> AsyncIterator[LightningStoreServer]:
    srv = LightningStoreServer(InMemoryLightningStore(), port=0)
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def http(server: LightningStoreServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.endpoint, timeout=30) as client:
        yield client


async def test_protobuf_export_allocates_sequence_ids(server: LightningStoreServer, http: httpx.AsyncClient) -> None:
    rollout = await server.start_rollout(input=1)
    spans = record_spans(ids_of(rollout))
    body = encode_spans(spans).SerializeToString()
    response = await http.post("/v1/traces", content=body, headers=PROTOBUF)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    parsed = ExportTraceServiceResponse()
    parsed.ParseFromString(response.content)
    assert parsed.partial_success.rejected_spans == 0

    stored = await server.query_spans(rollout.rollout_id)
    assert [s.name for s in stored] == ["llm", "agent"]  # export order: the child ends first
    assert [s.sequence_id for s in stored] == [1, 2]
    llm, agent = stored.items
    assert llm.parent_id == agent.span_id and agent.parent_id is None
    assert llm.trace_id == agent.trace_id == format(spans[0].context.trace_id, "032x")  # type: ignore[union-attr]
    assert llm.attributes["gen_ai.usage.tokens"] == 12 and llm.attributes["tags"] == ["a", "b"]
    assert llm.status.status_code == "ERROR" and llm.status.description == "rate limited"
    assert llm.events[0].name == "token" and llm.events[0].attributes == {"index": 1}
    assert llm.start_time is not None and 1e9 < llm.start_time < 1e11  # seconds, not nanoseconds
    assert llm.resource.attributes["agentlightning.rollout_id"] == rollout.rollout_id
    assert (await server.get_rollout_by_id(rollout.rollout_id)).status == "running"  # type: ignore[union-attr]
    assert await server.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id) == 3


async def test_explicit_sequence_id_from_resource(server: LightningStoreServer, http: httpx.AsyncClient) -> None:
    rollout = await server.start_rollout(input=1)
    body = encode_spans(record_spans(ids_of(rollout, sequence_id=41))).SerializeToString()
    assert (await http.post("/v1/traces", content=body, headers=PROTOBUF)).status_code == 200
    stored = await server.query_spans(rollout.rollout_id)
    assert [s.sequence_id for s in stored] == [41, 41]
    assert await server.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id) == 42


async def test_sequence_id_zero_from_resource_is_a_real_id(
    server: LightningStoreServer, http: httpx.AsyncClient
) -> None:
    """As v0.3: 0 is stored as sent and the rollout's next id is 1."""
    rollout = await server.start_rollout(input=1)
    body = encode_spans(record_spans(ids_of(rollout, sequence_id=0))).SerializeToString()
    assert (await http.post("/v1/traces", content=body, headers=PROTOBUF)).status_code == 200
    stored = await server.query_spans(rollout.rollout_id)
    assert [s.sequence_id for s in stored] == [0, 0]
    assert await server.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id) == 1


async def test_negative_sequence_id_from_resource_is_numbered(
    server: LightningStoreServer, http: httpx.AsyncClient
) -> None:
    """As v0.3's OTLP receiver: a negative id is replaced by the rollout's next ones."""
    rollout = await server.start_rollout(input=1)
    body = encode_spans(record_spans(ids_of(rollout, sequence_id=-3))).SerializeToString()
    assert (await http.post("/v1/traces", content=body, headers=PROTOBUF)).status_code == 200
    stored = await server.query_spans(rollout.rollout_id)
    assert [s.sequence_id for s in stored] == [1, 2]


async def test_gzip_protobuf_from_the_real_otlp_exporter(server: LightningStoreServer) -> None:
    rollout = await server.start_rollout(input=1)
    spans = record_spans(ids_of(rollout))
    exporter = OTLPSpanExporter(endpoint=server.otlp_traces_endpoint(), compression=Compression.Gzip)
    try:
        result = await asyncio.to_thread(exporter.export, spans)
    finally:
        exporter.shutdown()
    assert result == SpanExportResult.SUCCESS
    assert (await server.query_spans(rollout.rollout_id)).total == 2


def _hex_json_request(rollout: AttemptedRollout, with_ids: bool = True) -> dict[str, Any]:
    resource_attributes = [{"key": "service.name", "value": {"stringValue": "agent"}}]
    if with_ids:
        resource_attributes += [
            {"key": "agentlightning.rollout_id", "value": {"stringValue": rollout.rollout_id}},
            {"key": "agentlightning.attempt_id", "value": {"stringValue": rollout.attempt.attempt_id}},
        ]
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource_attributes},
                "scopeSpans": [
                    {
                        "scope": {"name": "manual"},
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "parentSpanId": "eee19b7ec3c1b173",
                                "name": "tool-call",
                                "kind": 1,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000001500000000",
                                "attributes": [
                                    {"key": "tool", "value": {"stringValue": "calculator"}},
                                    {"key": "n", "value": {"intValue": "3"}},
                                    {
                                        "key": "nested",
                                        "value": {
                                            "kvlistValue": {"values": [{"key": "x", "value": {"doubleValue": 0.5}}]}
                                        },
                                    },
                                ],
                                "status": {"code": 1},
                            }
                        ],
                    }
                ],
            }
        ]
    }


async def test_json_export(server: LightningStoreServer, http: httpx.AsyncClient) -> None:
    rollout = await server.start_rollout(input=1)
    response = await http.post("/v1/traces", json=_hex_json_request(rollout))
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert response.json() == {}
    (span,) = (await server.query_spans(rollout.rollout_id)).items
    assert span.trace_id == "5b8efff798038103d269b633813fc60c"
    assert span.span_id == "eee19b7ec3c1b174" and span.parent_id == "eee19b7ec3c1b173"
    assert span.attributes == {"tool": "calculator", "n": 3, "nested.x": 0.5}
    assert span.start_time == 1_700_000_000.0 and span.end_time == 1_700_000_001.5
    assert span.status.status_code == "OK" and span.sequence_id == 1


async def test_spans_without_ids_are_reported_as_rejected(
    server: LightningStoreServer, http: httpx.AsyncClient
) -> None:
    rollout = await server.start_rollout(input=1)
    response = await http.post("/v1/traces", json=_hex_json_request(rollout, with_ids=False))
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert "agentlightning.rollout_id" in response.json()["partialSuccess"]["errorMessage"]
    assert (await server.query_spans(rollout.rollout_id)).total == 0


async def test_bad_otlp_requests(server: LightningStoreServer, http: httpx.AsyncClient) -> None:
    rollout = await server.start_rollout(input=1)
    garbage = await http.post("/v1/traces", content=b"\xff\x00not-protobuf", headers=PROTOBUF)
    assert garbage.status_code == 400 and "protobuf" in garbage.json()["detail"]
    bad_json = await http.post("/v1/traces", content=b"{", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["detail"]
    wrong_type = await http.post("/v1/traces", content=b"x", headers={"content-type": "text/plain"})
    assert wrong_type.status_code == 415 and "application/x-protobuf" in wrong_type.json()["detail"]
    bad_gzip = await http.post("/v1/traces", content=b"x", headers={**PROTOBUF, "content-encoding": "gzip"})
    assert bad_gzip.status_code == 400

    unknown = record_spans({"agentlightning.rollout_id": "ro-nowhere", "agentlightning.attempt_id": "at-nowhere"})
    response = await http.post("/v1/traces", content=encode_spans(unknown).SerializeToString(), headers=PROTOBUF)
    assert response.status_code == 404 and "ro-nowhere" in response.json()["detail"]

    zipped = gzip.compress(encode_spans(record_spans(ids_of(rollout))).SerializeToString())
    ok = await http.post("/v1/traces", content=zipped, headers={**PROTOBUF, "content-encoding": "gzip"})
    assert ok.status_code == 200
    assert (await server.query_spans(rollout.rollout_id)).total == 2
