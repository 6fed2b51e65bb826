"""Token fidelity, one test per cell of the matrix in `matrix.py` (and `docs/token-fidelity.md`).

For each capture path, API, conversation and chat-template family, a real SDK client talks to a real policy
server (through the proxy or the gateway where the path has one); the triplets the trainer's adapter builds
must carry exactly the ids the model sampled, and a tool loop must merge into one trajectory row (its second
prompt extends the first prompt + reply: the first turn was not re-tokenized). OTLP GenAI spans carry no ids:
their triplets must be flagged as retokenized and counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import pytest

pytest.importorskip("torch", reason="needs the train extra")
anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")


import agentlightning as agl  # noqa: E402
from agentlightning.adapter import LlmProxyTraceToTriplet, TracerTraceToTriplet  # noqa: E402
from agentlightning.adapter.retokenize import RETOKENIZED, TOKEN_IDS_SOURCE  # noqa: E402
from agentlightning.adapter.trajectory import TurnTokens, merge_turns  # noqa: E402
from agentlightning.gateway import Gateway  # noqa: E402
from agentlightning.llm_proxy import LLMProxy  # noqa: E402
from agentlightning.types import AttemptedRollout, Triplet  # noqa: E402

from .conftest import FamilyPolicy  # noqa: E402
from .conversations import ANSWER, Endpoint, converse  # noqa: E402
from .matrix import Cell, cells_of, render_tables  # noqa: E402

pytestmark = [pytest.mark.train]

DOC = Path(__file__).resolve().parents[2] / "docs" / "token-fidelity.md"
Served = List[Tuple[List[int], List[int]]]


def _params(path: str) -> List[Any]:
    return [pytest.param(cell, id=cell.id) for cell in cells_of(path)]


async def _rollout(store: agl.InMemoryLightningStore, cell: Cell) -> AttemptedRollout:
    return await store.start_rollout(input={"cell": cell.id}, mode="train")


def _ids(triplets: Sequence[Triplet]) -> Served:
    return [(list(t.prompt["token_ids"]), list(t.response["token_ids"])) for t in triplets]


def assert_exact(cell: Cell, triplets: Sequence[Triplet], served: Served) -> None:
    """The ids trained on are the ids sampled, and a tool loop is one trajectory row (nothing re-tokenized)."""
    assert len(served) == (2 if cell.tools else 1), served
    assert _ids(triplets) == served
    assert all(TOKEN_IDS_SOURCE not in t.metadata for t in triplets)
    rows, breaks = merge_turns([TurnTokens(p, r, index=i) for i, (p, r) in enumerate(served)])
    assert breaks == [] and len(rows) == 1, breaks
    assert rows[0].response_ids[: len(served[0][1])] == served[0][1]


async def _answered(cell: Cell, endpoint: Endpoint) -> None:
    assert ANSWER in await converse(endpoint, cell.api, cell.stream, cell.tools)


# Client instrumentation ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tracer(store: agl.InMemoryLightningStore) -> Iterator[agl.OtelTracer]:
    running = agl.OtelTracer()
    running.init()
    running.init_worker(0, store)
    yield running
    running.teardown_worker(0)
    running.teardown()


@pytest.mark.parametrize("cell", _params("client"))
async def test_client_instrumentation(
    cell: Cell, policies: Dict[str, FamilyPolicy], store: agl.InMemoryLightningStore, tracer: agl.OtelTracer
) -> None:
    policy = policies[cell.family]
    rollout, start = await _rollout(store, cell), len(policy.model.calls)
    async with tracer.trace_context(cell.id, rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id):
        await _answered(cell, Endpoint(policy.server.endpoint, "policy"))
    triplets = TracerTraceToTriplet().adapt(await store.query_spans(rollout.rollout_id))
    assert_exact(cell, triplets, policy.served_since(start))


# LLM proxy -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", _params("proxy"))
async def test_llm_proxy(
    cell: Cell, policies: Dict[str, FamilyPolicy], store: agl.InMemoryLightningStore, proxy: LLMProxy
) -> None:
    policy = policies[cell.family]
    rollout, start = await _rollout(store, cell), len(policy.model.calls)
    base = f"{proxy.endpoint}/rollout/{rollout.rollout_id}/attempt/{rollout.attempt.attempt_id}/v1"
    await _answered(cell, Endpoint(base, f"policy-{cell.family}"))
    triplets = LlmProxyTraceToTriplet().adapt(await store.query_spans(rollout.rollout_id))
    assert_exact(cell, triplets, policy.served_since(start))


# Gateway ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", _params("gateway"))
async def test_gateway(
    cell: Cell, policies: Dict[str, FamilyPolicy], store: agl.InMemoryLightningStore, gateways: Dict[str, Gateway]
) -> None:
    policy, gateway = policies[cell.family], gateways[cell.family]
    rollout, start = await _rollout(store, cell), len(policy.model.calls)
    ids = (rollout.rollout_id, rollout.attempt.attempt_id)
    endpoint = Endpoint(gateway.openai_base_url(*ids, "train"), "policy", api_key=gateway.key(*ids))
    if cell.not_applicable:
        with pytest.raises(anthropic.NotFoundError):  # no /messages route on the gateway
            await converse(endpoint, cell.api, cell.stream, cell.tools)
        assert policy.served_since(start) == []
        return
    await _answered(cell, endpoint)
    triplets = LlmProxyTraceToTriplet().adapt(await store.query_spans(rollout.rollout_id))
    assert_exact(cell, triplets, policy.served_since(start))


# OTLP GenAI spans, retokenized -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def genai_spans() -> Iterator[Any]:
    """The official OpenAI instrumentation (latest GenAI conventions, messages on the spans) into memory."""
    from tests.fidelity.otlp import official_openai_instrumentation

    with official_openai_instrumentation() as exporter:
        yield exporter


@pytest.mark.parametrize("cell", _params("otlp"))
async def test_otlp_genai_retokenized(cell: Cell, policies: Dict[str, FamilyPolicy], genai_spans: Any) -> None:
    policy = policies[cell.family]
    genai_spans.clear()
    start = len(policy.model.calls)
    await _answered(cell, Endpoint(policy.server.endpoint, "policy"))
    if cell.not_applicable:  # the calls were made, and no GenAI span records them
        assert len(policy.served_since(start)) == (2 if cell.tools else 1)
        assert genai_spans.get_finished_spans() == ()
        return
    served = policy.served_since(start)
    adapter = TracerTraceToTriplet(tokenizer=policy.tokenizer)
    triplets, report = adapter.adapt_with_report(genai_spans.get_finished_spans())
    assert len(triplets) == len(served) == (2 if cell.tools else 1)
    assert [t.metadata.get(TOKEN_IDS_SOURCE) for t in triplets] == [RETOKENIZED] * len(served)
    assert report.n_triplets_retokenized == len(served)
    # Why they are flagged: rebuilt from text, the reply is not what the model sampled ("Paris" spelled out).
    assert all(t.prompt["token_ids"] and t.response["token_ids"] for t in triplets)
    assert [list(t.response["token_ids"]) for t in triplets] != [reply for _, reply in served]


# The documented matrix -------------------------------------------------------------------------------------


def test_the_docs_show_this_matrix() -> None:
    text = DOC.read_text()
    begin, end = "<!-- matrix:begin -->\n", "<!-- matrix:end -->"
    assert begin in text and end in text, f"{DOC} lacks the {begin.strip()} ... {end} markers"
    shown = text.split(begin, 1)[1].split(end, 1)[0]
    assert shown == render_tables(), (
        "docs/token-fidelity.md is out of date: paste tests.fidelity.matrix.render_tables()"
    )
