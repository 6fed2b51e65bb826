"""The token-fidelity matrix: every capture path x API x conversation x chat-template family, and the outcome
each cell must have. `docs/token-fidelity.md` shows `render_tables()`; a test keeps the two in step.

- `exact`: the triplets' token ids are the ids the policy sampled (prompt and reply, end-of-turn included),
  and a tool loop's second prompt extends the first prompt + reply, so the trajectory merges the two calls
  into one row without re-tokenizing the first turn.
- `flagged`: the ids were rebuilt from text (`token_ids_source: retokenized`), and counted in the adapter's
  report (`n_triplets_retokenized`) and GRPO's `triplets_retokenized` metric.
- `n.a.`: the path cannot carry that API at all (the reason is in `NOT_APPLICABLE`; its test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from tests.support.chat_templates import FAMILIES, REAL_TOKENIZERS

__all__ = ["PATHS", "APIS", "SHAPES", "Cell", "CELLS", "NOT_APPLICABLE", "cells_of", "render_tables"]

PATHS: Dict[str, str] = {
    "client": "client instrumentation (the agent's SDK client, traced in-process, straight to the policy server)",
    "proxy": "LLM proxy (`LLMProxy` in front of the policy server)",
    "gateway": "gateway (`agl gateway`, rollout-scoped URLs)",
    "otlp": "OTLP GenAI spans (the official OpenTelemetry instrumentation; no token ids, retokenized)",
}
APIS: Dict[str, str] = {"chat": "Chat Completions", "responses": "Responses", "messages": "Messages"}
FAMILY_TITLES: Dict[str, str] = {
    "smollm2": "SmolLM2",
    "qwen2_5": "Qwen2.5",
    "llama3": "Llama 3.1",
    "qwen3_thinking": "Qwen3 (thinking)",
}
SHAPES: Tuple[Tuple[bool, bool], ...] = ((False, False), (True, False), (False, True), (True, True))
"""(stream, tool loop) of each conversation: one call, or a tool call + its result + the answer."""

NOT_APPLICABLE: Dict[Tuple[str, str], str] = {
    ("gateway", "messages"): "the gateway serves Chat Completions, Completions and Responses routes, not Messages",
    ("otlp", "responses"): "opentelemetry-instrumentation-openai-v2 traces chat completions (and embeddings) only",
    ("otlp", "messages"): "no official OpenTelemetry GenAI instrumentation of the anthropic SDK is installed",
}


@dataclass(frozen=True)
class Cell:
    path: str
    api: str
    stream: bool
    tools: bool
    family: str

    @property
    def id(self) -> str:
        shape = ("stream" if self.stream else "plain") + ("-toolloop" if self.tools else "")
        return f"{self.path}-{self.api}-{shape}-{self.family}"

    @property
    def not_applicable(self) -> Optional[str]:
        return NOT_APPLICABLE.get((self.path, self.api))

    @property
    def expected(self) -> str:
        if self.not_applicable:
            return "n.a."
        return "flagged" if self.path == "otlp" else "exact"


CELLS: List[Cell] = [
    Cell(path, api, stream, tools, family)
    for path in PATHS
    for api in APIS
    for stream, tools in SHAPES
    for family in FAMILIES
]


def cells_of(path: str) -> List[Cell]:
    return [cell for cell in CELLS if cell.path == path]


def _shape_label(stream: bool, tools: bool) -> str:
    return ("streamed" if stream else "not streamed") + (", tool call + tool result" if tools else ", one call")


def render_tables() -> str:
    """The matrix as Markdown: one table per capture path, a row per API and conversation, a column per family."""
    families = [f"{FAMILY_TITLES[family]}{'' if family in REAL_TOKENIZERS else ' *'}" for family in FAMILIES]
    lines: List[str] = []
    for path, title in PATHS.items():
        lines += [f"### {title}", "", "| API | conversation | " + " | ".join(families) + " |"]
        lines.append("|---|---|" + "---|" * len(families))
        for api, api_title in APIS.items():
            for stream, tools in SHAPES:
                outcomes = [Cell(path, api, stream, tools, family).expected for family in FAMILIES]
                lines.append(f"| {api_title} | {_shape_label(stream, tools)} | " + " | ".join(outcomes) + " |")
        lines.append("")
    lines += ["Reasons for n.a.:", ""]
    lines += [
        f"- {PATHS[path].split(' (')[0]} x {APIS[api]}: {reason}" for (path, api), reason in NOT_APPLICABLE.items()
    ]
    return "\n".join(lines) + "\n"
