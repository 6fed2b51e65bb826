"""Child-process entry of `ProcessAgent(agent_class=...)`: `python -m agentlightning._process_entry TARGET`.

TARGET is `"package.module:Class"` or `"path/to/file.py:Class"`. The class is instantiated without
arguments and its `run()` (async or not) is awaited; it reads what it needs from the environment
(`AGL_OPENAI_BASE_URL`, `AGL_EVENT_URL`, `AGL_KEY`, task fields). When `run()` returns a number, it is
posted as the attempt's reward. Exit status 0 on success, 1 with the traceback on stderr otherwise.
Only the standard library is imported here, so the agent's own imports decide the start-up cost.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

__all__ = ["load_agent_class", "split_target", "main"]


def split_target(target: str) -> tuple[str, str]:
    """("module or file", "Class") of a target; ValueError naming the expected forms."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ValueError(
            f"agent_class must look like 'package.module:Class' or 'path/to/file.py:Class', got {target!r}"
        )
    return where, name


def load_agent_class(target: str) -> type:
    """Import the class named by `target`."""
    where, name = split_target(target)
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"agent file {where!r} (from {target!r}) does not exist")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path} as a module")
        sys.path.insert(0, str(path.parent))
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise ImportError(f"{where!r} has no class {name!r} (from {target!r})")
    if not callable(getattr(cls, "run", None)):
        raise TypeError(f"{target!r} has no run() method; define `async def run(self)`")
    return cls


def _post_reward(value: float) -> None:
    url, key = os.environ.get("AGL_EVENT_URL"), os.environ.get("AGL_KEY")
    if not url or not key:
        raise RuntimeError("run() returned a reward but AGL_EVENT_URL / AGL_KEY are not set")
    body = json.dumps({"event_type": "reward", "data": {"value": value}}).encode("utf-8")
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (URL handed out by the gateway)
        response.read()


async def _run(target: str) -> Any:
    instance = load_agent_class(target)()
    result = instance.run()
    if inspect.isawaitable(result):
        result = await result
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m agentlightning._process_entry 'package.module:Class'", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(_run(args[0]))
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            _post_reward(float(result))
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
