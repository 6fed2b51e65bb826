"""A LangGraph text-to-SQL agent (write -> check -> rewrite) over small SQLite tables (`sql_tasks.py`).

The agent is written the way LangGraph's docs write one: a typed state, a `StateGraph` whose nodes are
functions, a conditional edge, and a LangChain `ChatOpenAI` model pointed at the `LLM` resource's
endpoint. The graph:

    write  ->  check  --(the model kept its query, or no rewrites left)-->  END
                 ^  \\--(otherwise)-->  rewrite
                 '----------------------'

`write` asks for a query from the table's schema and the question; `check` runs it on a fresh in-memory
copy of the database; `rewrite` shows the model the rows (or the SQLite error) and asks it to keep or fix
the query. The prompts and the execution-match reward are `examples/spider`'s; the questions are sized
for a 135M model (`sql_tasks.py`: one small table each, four question families, held-out tables never
trained on), and one rewrite is allowed. The only agentlightning parts are the `@agl.rollout` decorator
and the returned reward.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import agentlightning as agl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spider"))
from sql_agent import CHECK_PROMPT, SEED_PROMPT, extract_sql  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sql_tasks import describe_outcome, execution_match, load_questions, schema_text  # noqa: E402

__all__ = ["SqlState", "build_graph", "langgraph_sql_agent", "load_questions", "MAX_REWRITES"]

MAX_REWRITES = 1


class SqlState(TypedDict):
    """The graph's state: the conversation so far, every query written, and whether the last was kept."""

    messages: List[BaseMessage]
    queries: List[Optional[str]]
    kept: bool


def build_graph(chat: ChatOpenAI, max_rewrites: int = MAX_REWRITES) -> Any:
    """The compiled write -> check -> rewrite graph on `chat`."""

    def write(state: SqlState) -> Dict[str, Any]:
        reply = chat.invoke(state["messages"])
        return {"messages": [*state["messages"], reply], "queries": [extract_sql(str(reply.content))]}

    def check(state: SqlState) -> Dict[str, Any]:
        outcome = describe_outcome(state["queries"][-1])
        return {"messages": [*state["messages"], HumanMessage(CHECK_PROMPT.format(outcome=outcome))]}

    def rewrite(state: SqlState) -> Dict[str, Any]:
        reply = chat.invoke(state["messages"])
        sql = extract_sql(str(reply.content))
        kept = sql is not None and sql == state["queries"][-1]
        return {"messages": [*state["messages"], reply], "queries": [*state["queries"], sql], "kept": kept}

    def after_check(state: SqlState) -> str:
        return "rewrite" if len(state["queries"]) <= max_rewrites else END

    def after_rewrite(state: SqlState) -> str:
        return END if state["kept"] or len(state["queries"]) > max_rewrites else "check"

    graph = StateGraph(SqlState)
    graph.add_node("write", write)
    graph.add_node("check", check)
    graph.add_node("rewrite", rewrite)
    graph.add_edge(START, "write")
    graph.add_edge("write", "check")
    graph.add_conditional_edges("check", after_check, ["rewrite", END])
    graph.add_conditional_edges("rewrite", after_rewrite, ["check", END])
    return graph.compile()


def final_query(queries: List[Optional[str]]) -> Optional[str]:
    return next((q for q in reversed(queries) if q), None)


@agl.rollout
def langgraph_sql_agent(task: Dict[str, Any], llm: agl.LLM) -> float:
    """One rollout: the graph writes, checks and rewrites a query; execution match is the reward."""
    sampling = llm.sampling_parameters
    chat = ChatOpenAI(
        base_url=llm.endpoint,
        model=llm.model,
        api_key=llm.api_key or "EMPTY",  # type: ignore[arg-type]
        temperature=sampling.get("temperature", 0.0),
        max_tokens=sampling.get("max_tokens", 128),  # type: ignore[call-arg]
        max_retries=0,
    )
    prompt = SEED_PROMPT.format(schema=schema_text(task["table"]), question=task["question"])
    state = build_graph(chat).invoke({"messages": [HumanMessage(prompt)], "queries": [], "kept": False})
    queries: List[Optional[str]] = state["queries"]
    turns = sum(isinstance(m, AIMessage) for m in state["messages"])
    agl.emit_object({"queries": queries, "turns": turns})
    return execution_match(final_query(queries), task["sql"])
