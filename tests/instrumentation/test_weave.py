"""The in-memory Weave trace server: pairs call starts and ends in any order, keeps objects, refuses the rest."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

pytestmark = pytest.mark.weave

pytest.importorskip("weave", reason="needs the weave extra: pip install agentlightning[weave]")

from agentlightning.instrumentation.weave import (  # noqa: E402
    InMemoryWeaveTraceServer,
    WeaveCallRecord,
    instrument_weave,
    uninstrument_weave,
)

START = datetime.datetime(2025, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def _start(call_id: str, parent_id: Any = None) -> dict[str, Any]:
    return {
        "start": {
            "project_id": "e/p",
            "id": call_id,
            "trace_id": "0190a0e4-0000-7000-8000-000000000001",
            "parent_id": parent_id,
            "op_name": f"weave:///e/p/op/{call_id}:abc123",
            "display_name": None,
            "started_at": START,
            "attributes": {"agent.name": "planner"},
            "inputs": {"x": 1},
        }
    }


def _end(call_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "end": {
            "project_id": "e/p",
            "id": call_id,
            "ended_at": START + datetime.timedelta(seconds=2),
            "output": {"y": 2},
            "summary": {},
            **extra,
        }
    }


def test_calls_are_reported_once_complete_whatever_order_their_halves_arrive() -> None:
    server = InMemoryWeaveTraceServer()
    finished: list[WeaveCallRecord] = []
    server.add_call_listener(finished.append)

    response = server.call_start(_start("child", parent_id="root"))
    assert response.id == "child"
    server.call_end(_end("root"))  # the end of a call may overtake its start
    assert finished == [] and server.n_pending_calls == 2
    server.call_end(_end("child", exception='{"type": "ValueError", "message": "bad"}'))
    server.call_start(_start("root"))

    assert [record.id for record in finished] == ["child", "root"]
    child = finished[0]
    assert child.parent_id == "root" and child.short_op_name == "child"
    assert child.started_at == START.timestamp() and child.ended_at == START.timestamp() + 2
    assert child.inputs == {"x": 1} and child.output == {"y": 2}
    assert child.attributes == {"agent.name": "planner"}
    assert child.exception is not None and server.n_pending_calls == 0 and server.n_finished_calls == 2


def test_objects_files_and_tables_get_digests_and_unsupported_calls_say_so() -> None:
    server = InMemoryWeaveTraceServer()
    obj = server.obj_create({"obj": {"project_id": "e/p", "object_id": "op", "val": {"a": 1}}})
    assert obj.object_id == "op" and server.objects[("op", obj.digest)] == {"a": 1}
    file = server.file_create({"project_id": "e/p", "file": ("obj.py", b"print(1)"), "expected_digest": "d1"})
    assert file.digest == "d1" and server.files["d1"] == b"print(1)"
    table = server.table_create({"table": {"project_id": "e/p", "rows": [{"r": 1}, {"r": 2}]}})
    assert len(table.row_digests) == 2 and server.tables[table.digest] == [{"r": 1}, {"r": 2}]
    assert not hasattr(server, "call_processor")
    with pytest.raises(AttributeError, match="does not support Weave's 'feedback_create'"):
        server.feedback_create({})


def test_a_failing_listener_does_not_stop_the_others() -> None:
    server = InMemoryWeaveTraceServer()
    seen: list[str] = []

    def broken(record: WeaveCallRecord) -> None:
        raise RuntimeError("listener bug")

    server.add_call_listener(broken)
    server.add_call_listener(lambda record: seen.append(record.id))
    server.call_start(_start("c"))
    server.call_end(_end("c"))
    assert seen == ["c"]


def test_instrument_is_idempotent_and_restores_the_previous_client() -> None:
    from weave.trace.context import weave_client_context

    before = weave_client_context.get_weave_client()
    server = instrument_weave("entity/project", patch_integrations=False)
    try:
        assert instrument_weave("other", patch_integrations=False) is server
        client = weave_client_context.get_weave_client()
        assert client is not None and client.entity == "entity" and client.project == "project"
    finally:
        uninstrument_weave()
    assert weave_client_context.get_weave_client() is before
    with pytest.raises(ValueError, match="'a/b/c' must be 'project' or 'entity/project'"):
        instrument_weave("a/b/c")
