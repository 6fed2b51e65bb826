"""The Kestrel Isle corpus search as an MCP tool server (started once per process by `kestrel_agent.py`).

One tool, `search(query)`: the best BM25 passage of this folder's `data/corpus.jsonl` as `[id] text`, or
"no passage matches".

Run it by hand:
    python examples/openai_agents_rag/search_server.py                # MCP over stdin/stdout
    python examples/openai_agents_rag/search_server.py --port 8765    # streamable HTTP at http://127.0.0.1:8765/mcp
With `--port` the server also exits when its stdin closes (so a parent that started it with a pipe as stdin
never leaves it behind).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from mcp.server.mcpserver import MCPServer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "rag"))
from rag_agent import Retriever  # noqa: E402

retriever = Retriever.from_corpus(HERE / "data" / "corpus.jsonl")
server = MCPServer("kestrel-search", instructions="Search the Kestrel Isle corpus.", log_level="WARNING")


@server.tool(description="Search the Kestrel Isle corpus; returns the most relevant passages.")
def search(query: str) -> str:
    found = retriever.search(query, k=1)
    return "\n".join(f"[{p['id']}] {p['text']}" for p in found) or "no passage matches"


def _exit_when_stdin_closes() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The Kestrel Isle search tool as an MCP server.")
    parser.add_argument(
        "--port", type=int, default=None, help="serve streamable HTTP on 127.0.0.1:PORT (default: stdio)"
    )
    args = parser.parse_args()
    if args.port is None:
        server.run("stdio")
    else:
        threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
        server.run("streamable-http", host="127.0.0.1", port=args.port, stateless_http=True)
