"""The Kestrel Isle corpus search as an MCP tool server over stdio (started by `kestrel_agent.py` per rollout).

One tool, `search(query)`: the best BM25 passage of this folder's `data/corpus.jsonl` as `[id] text`, or
"no passage matches".

Run it by hand to talk MCP over stdin/stdout:  python examples/openai_agents_rag/search_server.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "rag"))
from rag_agent import Retriever  # noqa: E402

retriever = Retriever.from_corpus(HERE / "data" / "corpus.jsonl")
server = MCPServer("kestrel-search", instructions="Search the Kestrel Isle corpus.")


@server.tool(description="Search the Kestrel Isle corpus; returns the most relevant passages.")
def search(query: str) -> str:
    found = retriever.search(query, k=1)
    return "\n".join(f"[{p['id']}] {p['text']}" for p in found) or "no passage matches"


if __name__ == "__main__":
    server.run("stdio")
