"""A retrieval-augmented QA agent: the model searches a shipped corpus with a BM25 tool, then answers.

The corpus (`data/corpus.jsonl`) describes Kestrel Isle, a place that exists only here, so a model cannot
answer from memory: it has to call `search`. The retriever is `bm25s` (BM25 over sparse matrices). The
agent loop: send the question with the `search` tool; run every tool call the model makes and send back
the top passages; stop at the first reply without tool calls (the answer) or after `max_turns` model
calls. Reward: the token-level F1 between the answer and the reference answer (SQuAD-style
normalisation: lower case, no punctuation or articles).
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import bm25s
from openai import OpenAI

import agentlightning as agl

DATA = Path(__file__).resolve().parent / "data"

SYSTEM_PROMPT = (
    "You answer questions about Kestrel Isle. You know nothing about it yourself: first call the search "
    "tool with a short query, then answer with a few words taken from the passages it returns."
)

SEARCH_TOOL: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the Kestrel Isle corpus; returns the most relevant passages.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look for"}},
            "required": ["query"],
        },
    },
}


def load_jsonl(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class Retriever:
    """BM25 over the passages of `corpus.jsonl` (English stop words removed)."""

    def __init__(self, passages: Sequence[Dict[str, str]]) -> None:
        if not passages:
            raise ValueError("the corpus has no passages")
        self.passages = list(passages)
        self.index = bm25s.BM25()
        tokens = bm25s.tokenize([p["text"] for p in self.passages], stopwords="en", show_progress=False)
        self.index.index(tokens, show_progress=False)

    @classmethod
    def from_corpus(cls, path: Path = DATA / "corpus.jsonl") -> Retriever:
        return cls(load_jsonl(path))  # type: ignore[arg-type]

    def search(self, query: str, k: int = 2) -> List[Dict[str, str]]:
        """The `k` best passages for `query` (fewer when fewer share a word with it)."""
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:  # only stop words
            return []
        k = min(k, len(self.passages))
        indices, scores = self.index.retrieve(tokens, k=k, show_progress=False)
        return [self.passages[int(i)] for i, s in zip(indices[0], scores[0], strict=True) if s > 0]


def normalize_answer(text: str) -> List[str]:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return text.split()


def answer_f1(prediction: str, reference: str) -> float:
    """Token F1 between the prediction and the reference (1.0 for an exact match after normalisation)."""
    predicted, gold = normalize_answer(prediction), normalize_answer(reference)
    if not predicted or not gold:
        return float(predicted == gold)
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


@dataclass
class RagResult:
    answer: str
    searches: List[str]
    turns: int


def answer_question(
    client: OpenAI, model: str, retriever: Retriever, question: str, *, max_turns: int = 3, **sampling: Any
) -> RagResult:
    """Run the search-then-answer loop for one question."""
    messages: List[Dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    searches: List[str] = []
    for turn in range(1, max_turns + 1):
        reply = client.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            tools=[SEARCH_TOOL],  # type: ignore[list-item]
            **sampling,
        )
        message = reply.choices[0].message
        calls = message.tool_calls or []
        if not calls:
            return RagResult(answer=message.content or "", searches=searches, turns=turn)
        messages.append(
            {
                "role": "assistant",
                "content": message.content or "",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }  # type: ignore[union-attr]
                    for c in calls
                ],
            }
        )
        for call in calls:
            query = _query_of(call.function.arguments) if call.function.name == "search" else None  # type: ignore[union-attr]
            if query is None:
                result = 'error: call search with a JSON object {"query": "..."}'
            else:
                searches.append(query)
                found = retriever.search(query)
                result = "\n".join(f"[{p['id']}] {p['text']}" for p in found) or "no passage matches"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return RagResult(answer="", searches=searches, turns=max_turns)


def _query_of(arguments: Optional[str]) -> Optional[str]:
    try:
        parsed = json.loads(arguments or "")
    except json.JSONDecodeError:
        return None
    query = parsed.get("query") if isinstance(parsed, dict) else None
    return query if isinstance(query, str) and query.strip() else None


class RagAgent(agl.LitAgent[Dict[str, Any]]):
    """The trainable agent: the `LLM` resource answers, the reward is the answer F1."""

    def __init__(self, retriever: Optional[Retriever] = None, max_turns: int = 3) -> None:
        super().__init__()
        self.retriever = retriever or Retriever.from_corpus()
        self.max_turns = max_turns

    def rollout(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm = next(r for r in resources.values() if isinstance(r, agl.LLM))
        client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "EMPTY", max_retries=0)
        result = answer_question(
            client, llm.model, self.retriever, task["question"], max_turns=self.max_turns, **llm.sampling_parameters
        )
        agl.emit_object({"searches": result.searches, "turns": result.turns, "answer": result.answer})
        return answer_f1(result.answer, task["answer"])
