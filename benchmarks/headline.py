"""The headline figures of issue 14 in one run: ours, the ceiling measured beside it, and the goal.

Runs the quick variant of each benchmark as a subprocess (each writes `--json`), then prints one table:
    in-process rollout flow, memory     flow_bench.py   ceiling: pydantic validate per model (ceilings.py)
    same flow over HTTP, one client     flow_bench.py   ceiling: bare FastAPI+uvicorn echo, aiohttp client
    e2e client-server, 4 runners        e2e_bench.py    (default runner settings)
    SQLite single add_span (durable)    store_bench.py  ceiling: SQLite WAL single-row commit, FULL / NORMAL
    SQLite rollout flow                 flow_bench.py   ceiling: NORMAL commits/s over 8 commits per flow
    LLM proxy streamed reply, added p50 proxy_bench.py  ceiling: the direct call's own p50
    policy server, 8 concurrent         train_bench.py  (SmolLM2-135M on CPU; needs the model package)

Run from the repository root:
    python benchmarks/headline.py --quick                        # a few minutes
    python benchmarks/headline.py --quick --skip policy --json headline.json

A figure whose benchmark fails or times out is reported as n/a with the reason; the table always prints.
Numbers depend on the machine and its load (printed with them); nothing here gates CI.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
PARTS = ("flows", "ceilings", "e2e", "sqlite", "proxy", "policy")


@dataclass
class Figure:
    name: str
    ours: str
    ceiling: str
    goal: str
    met: Optional[bool]
    value: Optional[float] = None
    unit: str = ""


def load_text() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def run_part(name: str, args: list[str], json_path: Path, timeout: float) -> tuple[Optional[Any], str]:
    """Run one benchmark script with `--json`; returns its JSON (or None) and, on failure, why."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    command = [sys.executable, str(BENCHMARKS / args[0]), *args[1:], "--json", str(json_path)]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    print(f"  {name}: {time.perf_counter() - started:.0f} s (exit {done.returncode})", flush=True)
    if done.returncode != 0 or not json_path.exists():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {done.returncode}: {last[0][:120]}"
    return json.loads(json_path.read_text()), ""


def _find(rows: list[dict[str, Any]], **match: Any) -> Optional[dict[str, Any]]:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def _na(why: str) -> str:
    return f"n/a ({why})" if why else "n/a"


def build_figures(data: dict[str, Any], errors: dict[str, str]) -> list[Figure]:
    figures: list[Figure] = []
    flows = data.get("flows")
    ceilings = data.get("ceilings") or {}
    flow_rows = flows["results"] if flows else []

    def flow_figure(target: str) -> Optional[dict[str, Any]]:
        return _find(flow_rows, target=target)

    pyd = ceilings.get("pydantic")
    pyd_text = (
        "pydantic validate " + " / ".join(f"{k} {v:.1f}" for k, v in pyd["us_by_model"].items()) + " us per model"
        if pyd
        else _na(errors.get("ceilings", ""))
    )
    memory = flow_figure("memory")
    figures.append(
        Figure(
            "in-process rollout flow (enqueue, dequeue, 5 x add_span, succeed), memory",
            f"{memory['flows_per_second']:,.0f} /s ({memory['us_per_flow']:.0f} us; p50 {memory['p50_ms'] * 1000:.0f} us; "
            f"{memory['flows_per_cpu_second']:,.0f} per CPU-s; GC {memory.get('gc_share_of_cpu', 0) * 100:.0f} % of CPU)"
            if memory
            else _na(errors.get("flows", "")),
            pyd_text,
            ">= 4,000 /s",
            memory["flows_per_second"] >= 4000 if memory else None,
            memory["flows_per_second"] if memory else None,
            "flows/s",
        )
    )
    echo = ceilings.get("echo")
    http = flow_figure("http")
    figures.append(
        Figure(
            "same flow over HTTP, one client",
            f"{http['flows_per_second']:,.0f} /s" if http else _na(errors.get("flows", "")),
            f"FastAPI+uvicorn echo, aiohttp client: {echo['requests_per_second']:,.0f} req/s "
            f"(/8 requests = {echo['requests_per_second'] / 8:,.0f} flows/s)"
            if echo
            else _na(errors.get("ceilings", "")),
            ">= 400 /s",
            http["flows_per_second"] >= 400 if http else None,
            http["flows_per_second"] if http else None,
            "flows/s",
        )
    )
    e2e = (data.get("e2e") or [None])[0]
    figures.append(
        Figure(
            "e2e client-server, 4 runner processes, default runner settings",
            f"{e2e['rollouts_per_s']:,.1f} /s ({e2e['rollouts']} rollouts)" if e2e else _na(errors.get("e2e", "")),
            "-",
            ">= 250 /s",
            e2e["rollouts_per_s"] >= 250 if e2e else None,
            e2e["rollouts_per_s"] if e2e else None,
            "rollouts/s",
        )
    )
    sqlite_rows = (data.get("sqlite") or {}).get("results", [])
    add_span = _find(sqlite_rows, backend="sqlite", operation="add_span")
    commits = ceilings.get("sqlite")
    figures.append(
        Figure(
            "SQLite single add_span (durable)",
            f"{add_span['ops_per_second']:,.0f} /s" if add_span else _na(errors.get("sqlite", "")),
            f"SQLite WAL single-row commit: {commits['commits_per_second_full']:,.0f} /s (FULL), "
            f"{commits['commits_per_second_normal']:,.0f} /s (NORMAL)"
            if commits
            else _na(errors.get("ceilings", "")),
            ">= 4,000 /s",
            add_span["ops_per_second"] >= 4000 if add_span else None,
            add_span["ops_per_second"] if add_span else None,
            "spans/s",
        )
    )
    sqlite_flow = flow_figure("sqlite")
    figures.append(
        Figure(
            "SQLite rollout flow",
            f"{sqlite_flow['flows_per_second']:,.0f} /s ({sqlite_flow['flows_per_cpu_second']:,.0f} per CPU-s)"
            if sqlite_flow
            else _na(errors.get("flows", "")),
            f"NORMAL commits / 8 per flow: {commits['commits_per_second_normal'] / 8:,.0f} /s"
            if commits
            else _na(errors.get("ceilings", "")),
            ">= 800 /s",
            sqlite_flow["flows_per_second"] >= 800 if sqlite_flow else None,
            sqlite_flow["flows_per_second"] if sqlite_flow else None,
            "flows/s",
        )
    )
    proxy_rows = (data.get("proxy") or {}).get("results", [])
    stream = _find(proxy_rows, request="stream (routed)")
    figures.append(
        Figure(
            "LLM proxy, streamed reply, added latency p50",
            f"{stream['added_p50_ms']:.2f} ms" if stream else _na(errors.get("proxy", "")),
            f"direct call p50 {stream['direct_p50_ms']:.2f} ms" if stream else "-",
            "< 1.5 ms",
            stream["added_p50_ms"] < 1.5 if stream else None,
            stream["added_p50_ms"] if stream else None,
            "ms",
        )
    )
    policy_rows = (data.get("policy") or {}).get("results", [])
    batched = next((r for r in policy_rows if r["name"].startswith("generation batched")), None)
    figures.append(
        Figure(
            "policy server, SmolLM2-135M, 8 concurrent requests, generated tokens/s",
            f"{batched['value']:,.1f} tok/s" if batched else _na(errors.get("policy", "")),
            "-",
            ">= 80 tok/s",
            batched["value"] >= 80 if batched else None,
            batched["value"] if batched else None,
            "tokens/s",
        )
    )
    return figures


def render(figures: list[Figure], load_before: str, load_after: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Issue 14 headline figures (this machine)")
    for column in ("figure", "ours", "ceiling measured here", "goal", "met"):
        table.add_column(column, overflow="fold")
    for f in figures:
        met = "-" if f.met is None else ("yes" if f.met else "no")
        table.add_row(f.name, f.ours, f.ceiling, f.goal, met)
    console = Console(width=max(160, Console().width))
    console.print(table)
    console.print(f"[dim]{load_before} before, {load_after} after; {os.cpu_count()} CPUs[/dim]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the quick variant of every benchmark (minutes)")
    parser.add_argument("--skip", default="", help=f"comma-separated parts to leave out: {','.join(PARTS)}")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds each part may take (default 300)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures (and each part's JSON) as JSON")
    args = parser.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    for part in skip:
        if part not in PARTS:
            parser.error(f"unknown part {part!r}; choose from {', '.join(PARTS)}")
    quick = ["--quick"] if args.quick else []
    commands: dict[str, list[str]] = {
        "flows": ["flow_bench.py", "--targets", "memory,sqlite,http", *quick],
        "ceilings": ["ceilings.py", *quick],
        "e2e": ["e2e_bench.py", "--n-runners", "4", "--total-tasks", "512" if args.quick else "2048"],
        "sqlite": ["store_bench.py", "--backends", "sqlite", "--concurrency", "0", *quick],
        "proxy": ["proxy_bench.py", "-n", "100" if args.quick else "300"],
        "policy": ["train_bench.py", *quick],
    }
    load_before = load_text()
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    print(f"Running {', '.join(p for p in PARTS if p not in skip)} ({load_before})", flush=True)
    with tempfile.TemporaryDirectory(prefix="agl-headline-") as directory:
        for part in PARTS:
            if part in skip:
                errors[part] = "skipped"
                continue
            result, why = run_part(part, commands[part], Path(directory) / f"{part}.json", args.timeout)
            if result is None:
                errors[part] = why
            else:
                data[part] = result
    figures = build_figures(data, errors)
    load_after = load_text()
    render(figures, load_before, load_after)
    if args.json:
        report = {
            "load_before": load_before,
            "load_after": load_after,
            "cpus": os.cpu_count(),
            "figures": [f.__dict__ for f in figures],
            "parts": data,
            "errors": errors,
        }
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
