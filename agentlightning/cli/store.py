"""`agl store`: serve a LightningStore over HTTP so algorithms and runners on other processes/hosts share it."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, Optional

from ._logging import LOG_LEVELS, run_service, setup_cli_logging

__all__ = ["build_parser", "build_store", "byte_size", "parse_memory_budget", "main", "LOG_LEVELS"]

logger = logging.getLogger(__name__)

BACKENDS = ("memory", "sqlite", "postgres")
MONGO_NAMES = ("mongo", "mongodb")
MONGO_MESSAGE = (
    "agl store: there is no MongoDB backend here (v0.3's `--backend mongo`). PostgreSQL is the multi-host "
    "backend: `agl store --backend postgres --dsn postgresql://USER@HOST:5432/DB` (needs "
    "`pip install agentlightning[postgres]`); `--backend sqlite` keeps data in a file on one host."
)


def _backend_name(value: str) -> str:
    name = value.strip().lower()
    if name in BACKENDS or name in MONGO_NAMES:
        return name
    raise argparse.ArgumentTypeError(f"unknown backend {value!r}; choose from {', '.join(BACKENDS)}")


TRACKERS = ("prometheus", "console")
DEFAULT_SQLITE_PATH = "agentlightning-store.db"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"agl store: environment variable {name}={raw!r} is not a port number") from None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE_FORMS = "bytes with an optional unit (512K, 16MB, 1GiB; binary multiples)"


def _is_fraction(match: re.Match[str]) -> bool:
    return "." in match.group(1) and not match.group(2) and match.group(3) is None


def _bytes(text: str) -> Optional[int]:
    """`16MB`, `512k`, `1GiB`, `1048576` -> bytes (units are powers of 1024); None when it is not such a size."""
    match = _SIZE.match(text)
    if match is None or _is_fraction(match):
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_memory_budget(text: str) -> float:
    """`--memory-budget`: bytes with an optional binary unit (`512M`, `2GB`, `1GiB`) or a fraction of RAM (`0.5`)."""
    match = _SIZE.match(text)
    if match is not None and _is_fraction(match):
        fraction = float(match.group(1))
        if 0.0 < fraction <= 1.0:
            return fraction
    else:
        size = _bytes(text)
        if size is not None and size > 0:
            return size
    raise argparse.ArgumentTypeError(
        f"invalid memory budget {text!r}: give {_SIZE_FORMS} or a fraction of system memory in (0, 1] such as 0.5"
    )


def byte_size(text: str) -> int:
    """`--max-body-size`: a positive number of bytes, see `_bytes`."""
    size = _bytes(text)
    if size is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (give {_SIZE_FORMS})")
    if size < 1:
        raise argparse.ArgumentTypeError(f"--max-body-size must be at least 1 byte, got {text!r}")
    return size


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agl store",
        description=(
            "Serve a LightningStore over HTTP (REST under /v1/agl, OTLP traces at /v1/traces) and the dashboard "
            "at http://HOST:PORT/ (rollouts, span trees, rewards, resources, workers). Send a training script's "
            "run to it with AGL_STORE_URL=http://HOST:PORT (or Trainer(store='http://HOST:PORT')); clients "
            "connect with LightningStoreClient('http://HOST:PORT')."
        ),
        epilog=(
            "examples:\n"
            "  agl store                                   # in-memory store + dashboard on 127.0.0.1:4747\n"
            "  AGL_STORE_URL=http://127.0.0.1:4747 python train.py   # (another terminal) watch the run there\n"
            "  agl store --backend sqlite --path runs.db   # durable store in a SQLite file\n"
            "  agl store --host 0.0.0.0 --auth-token s3cret  # reachable from other hosts, token required"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("AGL_SERVER_HOST") or "127.0.0.1",
        help="interface to bind (default: $AGL_SERVER_HOST or 127.0.0.1; use 0.0.0.0 for other hosts)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=_env_int("AGL_SERVER_PORT", 4747),
        help="port to listen on (default: $AGL_SERVER_PORT or 4747; 0 picks a free port)",
    )
    parser.add_argument(
        "--backend",
        type=_backend_name,
        metavar="{" + ",".join(BACKENDS) + "}",
        default="memory",
        help="where data lives: memory (lost on exit), sqlite (a file), postgres (a database); default memory",
    )
    parser.add_argument(
        "--path",
        default=DEFAULT_SQLITE_PATH,
        help=f"SQLite database file for --backend sqlite (default: {DEFAULT_SQLITE_PATH})",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("AGL_POSTGRES_DSN"),
        help="PostgreSQL connection string for --backend postgres, e.g. postgresql://user@host:5432/db "
        "(default: $AGL_POSTGRES_DSN)",
    )
    parser.add_argument(
        "--auth-token",
        help="require 'Authorization: Bearer TOKEN' on every request but the health check "
        "(default: $AGL_STORE_TOKEN; none = open)",
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from ORIGIN (repeatable; '*' allows any)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="without --auth-token, also answer requests that name this server NAME in their Host header "
        "(repeatable; IP addresses, localhost and this machine's name always work; '*' allows any name)",
    )
    parser.add_argument(
        "--tracker",
        action="append",
        choices=TRACKERS,
        default=[],
        help="record metrics: prometheus (served at /v1/prometheus) and/or console (logged); repeatable",
    )
    parser.add_argument(
        "--n-workers",
        type=int,
        default=1,
        help="server processes (default 1); more than 1 needs a store shared across processes (sqlite/postgres)",
    )
    parser.add_argument(
        "--max-body-size",
        type=byte_size,
        default=16 * 1024 * 1024,
        metavar="BYTES",
        help="largest request body accepted, e.g. 16MB or 1048576 (default 16MB); larger ones get HTTP 413",
    )
    docs_help = "serve /openapi.json, /docs and /redoc without the auth token (they need it by default)"
    parser.add_argument("--public-docs", action="store_true", help=docs_help)
    parser.add_argument(
        "--memory-budget",
        type=parse_memory_budget,
        metavar="SIZE",
        help="memory backend: bytes of spans, rollouts and attempts to keep; beyond it the oldest finished "
        "rollouts lose their spans, then are dropped (e.g. 512M, 2GB, or 0.5 of the memory available: the "
        "container's cgroup limit, else RAM; default 0.7 of it)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="INFO", help="log verbosity (default INFO)")
    return parser


def build_tracker(names: Sequence[str]) -> Any:
    """The metrics backend for `--tracker` values (None when none was asked for)."""
    from agentlightning.tracking.metrics import (
        ConsoleMetricsBackend,
        MetricsBackend,
        MultiMetricsBackend,
        PrometheusMetricsBackend,
    )

    backends: list[MetricsBackend] = []
    for name in dict.fromkeys(names):
        backends.append(PrometheusMetricsBackend() if name == "prometheus" else ConsoleMetricsBackend())
    if not backends:
        return None
    return backends[0] if len(backends) == 1 else MultiMetricsBackend(backends)


def build_store(args: argparse.Namespace, tracker: Any = None) -> Any:
    """The store chosen by `--backend` (backend modules are imported only when chosen)."""
    budget = getattr(args, "memory_budget", None)
    if args.backend == "memory":
        from agentlightning.store.memory import InMemoryLightningStore

        return InMemoryLightningStore(tracker=tracker, eviction_memory_threshold=budget)
    if budget is not None:
        raise SystemExit(f"agl store: --memory-budget applies to --backend memory only, not {args.backend}")
    if args.backend == "sqlite":
        from agentlightning.store.sqlite import SqliteLightningStore

        return SqliteLightningStore(args.path, tracker=tracker)
    if not args.dsn:
        raise SystemExit(
            "agl store: --backend postgres needs --dsn postgresql://USER@HOST:PORT/DB (or $AGL_POSTGRES_DSN)"
        )
    try:
        from agentlightning.store.postgres import PostgresLightningStore
    except ImportError as exc:
        raise SystemExit(f"agl store: the postgres backend needs `pip install agentlightning[postgres]` ({exc})")
    return PostgresLightningStore(args.dsn, tracker=tracker)


async def _serve(args: argparse.Namespace) -> None:
    from agentlightning.dashboard import dashboard_router
    from agentlightning.store_http.server import LightningStoreServer

    tracker = build_tracker(args.tracker)
    store = build_store(args, tracker)
    try:
        server = LightningStoreServer(
            store,
            host=args.host,
            port=args.port,
            cors_allow_origins=args.cors_origin or None,
            launch_mode="mp" if args.n_workers > 1 else "asyncio",
            n_workers=args.n_workers,
            tracker=tracker,
            auth_token=args.auth_token,
            routers=[dashboard_router()],
            max_body_size=args.max_body_size,
            public_docs=args.public_docs,
            allowed_hosts=args.allowed_host,
        )
        await server.start()
        auth = "bearer token required" if server.auth_token else "no auth token"
        print(
            f"agl store: {args.backend} store at {server.endpoint}/v1/agl ({auth}); dashboard at {server.endpoint}/ "
            f"(Ctrl+C to stop). Send a run here: AGL_STORE_URL={server.endpoint} python train.py",
            flush=True,
        )
        await server.run_forever()
    finally:
        await store.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.backend in MONGO_NAMES:
        print(MONGO_MESSAGE, file=sys.stderr)
        return 2
    if args.n_workers < 1:
        print(f"agl store: --n-workers must be >= 1, got {args.n_workers}", file=sys.stderr)
        return 2
    setup_cli_logging(args.log_level)
    return run_service("agl store", _serve(args))
