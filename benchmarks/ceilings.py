"""What this machine can do at best, measured without our code: the ceilings the headline figures compare with.

    pydantic   validating one model (Rollout, Attempt, Span) from a dict: the floor of any in-process call
    sqlite     a one-row INSERT committed in a WAL database, synchronous=FULL and =NORMAL, one at a time
    echo       a bare FastAPI app under uvicorn (its own process) echoing a JSON body, one aiohttp client
               sending one request at a time: the floor of any store call over HTTP

Run:
    python benchmarks/ceilings.py --quick
    python benchmarks/ceilings.py --only sqlite,echo --json ceilings.json

Numbers depend on the machine and its load (printed with them); never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import sqlite3
import statistics
import tempfile
import time
import timeit
from typing import Any

from fastapi import FastAPI, Request

KINDS = ("pydantic", "sqlite", "echo")


def pydantic_ceiling(number: int) -> dict[str, Any]:
    """Microseconds to validate each model from a dict (best of 5 repeats)."""
    from agentlightning.types import Attempt, Rollout, Span

    span = Span.from_attributes(
        rollout_id="ro-1",
        attempt_id="at-1",
        sequence_id=1,
        name="bench.llm_call",
        attributes={"gen_ai.prompt": "x" * 64, "gen_ai.completion": "y" * 64, "index": 1},
        start_time=1.0,
        end_time=2.0,
    )
    payloads = {
        "Rollout": (Rollout, {"rollout_id": "ro-1", "input": {"index": 1}, "start_time": 1.0}),
        "Attempt": (Attempt, {"rollout_id": "ro-1", "attempt_id": "at-1", "sequence_id": 1, "start_time": 1.0}),
        "Span": (Span, span.model_dump()),
    }
    per_model: dict[str, float] = {}
    for name, (model, payload) in payloads.items():
        best = min(timeit.repeat(lambda m=model, p=payload: m.model_validate(p), number=number, repeat=5))
        per_model[name] = best / number * 1e6
    return {"us_per_model": statistics.mean(per_model.values()), "us_by_model": per_model}


def sqlite_ceiling(commits: int) -> dict[str, Any]:
    """One-row INSERT + COMMIT per transaction in a WAL database, per synchronous mode."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agl-ceiling-") as directory:
        for mode in ("FULL", "NORMAL"):
            conn = sqlite3.connect(os.path.join(directory, f"{mode}.db"), isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {mode}")
            conn.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, key TEXT, body TEXT)")
            count = commits if mode == "NORMAL" else max(50, commits // 10)  # FULL fsyncs every commit
            started = time.perf_counter()
            for i in range(count):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO rows (key, body) VALUES (?, ?)", (f"k{i}", "x" * 200))
                conn.execute("COMMIT")
            out[f"commits_per_second_{mode.lower()}"] = count / (time.perf_counter() - started)
            conn.close()
    return out


async def _echo(request: Request) -> Any:
    return await request.json()


def _serve_echo(port: int) -> None:
    import uvicorn

    app = FastAPI()
    app.post("/echo")(_echo)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def _echo_requests(port: int, requests: int) -> float:
    import aiohttp

    body = {"rollout_id": "ro-1", "attempt_id": "at-1", "attributes": {"gen_ai.prompt": "x" * 64}}
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 60
        while True:  # wait for the server
            try:
                async with session.post(f"http://127.0.0.1:{port}/echo", json=body) as response:
                    await response.read()
                    break
            except aiohttp.ClientConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the echo server on port {port} did not come up within 60 s") from None
                await asyncio.sleep(0.05)
        for _ in range(max(10, requests // 10)):  # warm-up
            async with session.post(f"http://127.0.0.1:{port}/echo", json=body) as response:
                await response.read()
        started = time.perf_counter()
        for _ in range(requests):
            async with session.post(f"http://127.0.0.1:{port}/echo", json=body) as response:
                assert response.status == 200
                await response.json()
        return requests / (time.perf_counter() - started)


def echo_ceiling(requests: int) -> dict[str, Any]:
    """Sequential JSON POSTs per second to a bare FastAPI+uvicorn echo in its own process."""
    from agentlightning.web.launcher import pick_free_port

    port = pick_free_port()
    server = multiprocessing.get_context("spawn").Process(target=_serve_echo, args=(port,), daemon=True)
    server.start()
    try:
        return {"requests_per_second": asyncio.run(_echo_requests(port, requests))}
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGINT)
        server.join(30)
        if server.is_alive():
            server.kill()


def measure(kinds: list[str], quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if "pydantic" in kinds:
        results["pydantic"] = pydantic_ceiling(2000 if quick else 20000)
    if "sqlite" in kinds:
        results["sqlite"] = sqlite_ceiling(2000 if quick else 10000)
    if "echo" in kinds:
        results["echo"] = echo_ceiling(1000 if quick else 5000)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(KINDS), help=f"comma-separated: {','.join(KINDS)}")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (seconds, not tens of seconds)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.only.split(",") if k.strip()]
    for kind in kinds:
        if kind not in KINDS:
            parser.error(f"unknown ceiling {kind!r}; choose from {', '.join(KINDS)}")
    results = measure(kinds, args.quick)
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    print(f"Ceilings on this machine ({load})")
    if "pydantic" in results:
        by_model = ", ".join(f"{k} {v:.2f}" for k, v in results["pydantic"]["us_by_model"].items())
        print(f"  pydantic validate: {results['pydantic']['us_per_model']:.2f} us per model ({by_model})")
    if "sqlite" in results:
        s = results["sqlite"]
        print(
            f"  SQLite WAL single-row commit: {s['commits_per_second_full']:,.0f} /s (FULL), "
            f"{s['commits_per_second_normal']:,.0f} /s (NORMAL)"
        )
    if "echo" in results:
        print(f"  FastAPI+uvicorn echo, one aiohttp client: {results['echo']['requests_per_second']:,.0f} req/s")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"load": load, **results}, handle, indent=2)


if __name__ == "__main__":
    main()
