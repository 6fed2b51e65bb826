"""Registry of store backends the conformance suite runs against.

Each backend is an async context manager factory `(tmp_path, clock) -> LightningStore` that yields a
fresh, isolated store driven by the injected `FakeClock` with watchdog debouncing off. Adding a
backend is one `register_backend(...)` call; a backend whose module does not exist (yet) is simply
not registered. Tests that need a particular ability name it with `@pytest.mark.backend_traits(...)`
and only run on backends that declare it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentlightning.store import InMemoryLightningStore, LightningStore, LightningStoreThreaded

__all__ = [
    "FakeClock",
    "Backend",
    "BACKENDS",
    "register_backend",
    "module_available",
    "TRAIT_BLOCKING_WAIT",
    "TRAIT_THREADS",
    "TRAIT_NULL_CLEARS",
    "POSTGRES_DSN",
]

# wait_for_rollouts may block for longer than 0.1 s (every backend here does; the HTTP client long-polls).
TRAIT_BLOCKING_WAIT = "blocking_wait"
# Safe to call from several threads, each running its own event loop.
TRAIT_THREADS = "threads"
# update_attempt(metadata=None / last_heartbeat_time=None) clears the field: in-process stores only; over
# HTTP a null there is answered 400, as in v0.3 (tests/store_http/test_server.py).
TRAIT_NULL_CLEARS = "null_clears"

POSTGRES_DSN = os.environ.get("AGL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


class FakeClock:
    """A clock tests move by hand: `clock()` / `clock.now` read it, `clock.advance(s)` moves it."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


BackendFactory = Callable[[Path, FakeClock], AbstractAsyncContextManager[LightningStore]]


@dataclass(frozen=True)
class Backend:
    name: str
    factory: BackendFactory
    traits: frozenset[str] = frozenset()
    # Exceptions this backend raises for bad input (the HTTP client may wrap ValueError).
    errors: tuple[type[BaseException], ...] = (ValueError,)
    marks: tuple[Any, ...] = field(default=())


BACKENDS: dict[str, Backend] = {}


def module_available(module: str) -> bool:
    """True when `module` exists; a module that exists but fails to import still raises (loudly)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def register_backend(
    name: str,
    factory: BackendFactory,
    *,
    traits: frozenset[str] = frozenset(),
    errors: tuple[type[BaseException], ...] = (ValueError,),
    marks: tuple[Any, ...] = (),
    requires: tuple[str, ...] = (),
) -> None:
    """Add a backend unless one of the modules it `requires` does not exist yet."""
    if all(module_available(m) for m in requires):
        BACKENDS[name] = Backend(name, factory, traits, errors, marks)


# ---- in-process backends ----


@asynccontextmanager
async def memory_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[LightningStore]:
    store = InMemoryLightningStore(clock=clock, scan_debounce_seconds=0)
    yield store
    await store.close()


@asynccontextmanager
async def threaded_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[LightningStore]:
    store = LightningStoreThreaded(InMemoryLightningStore(clock=clock, scan_debounce_seconds=0))
    yield store
    await store.close()


register_backend("memory", memory_store, traits=frozenset({TRAIT_BLOCKING_WAIT, TRAIT_NULL_CLEARS}))
register_backend("threaded", threaded_store, traits=frozenset({TRAIT_BLOCKING_WAIT, TRAIT_THREADS, TRAIT_NULL_CLEARS}))


# ---- HTTP: a LightningStoreServer over the memory store, reached through a LightningStoreClient ----


@asynccontextmanager
async def http_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[LightningStore]:
    from agentlightning.store_http.client import LightningStoreClient
    from agentlightning.store_http.server import LightningStoreServer

    inner = InMemoryLightningStore(clock=clock, scan_debounce_seconds=0)
    server = LightningStoreServer(inner, host="127.0.0.1", port=0, launch_mode="thread")
    await server.start()
    client = LightningStoreClient(server.endpoint, retry_delays=(), health_retry_delays=())
    try:
        yield client
    finally:
        await client.close()
        await server.stop()
        await inner.close()


register_backend(
    "http",
    http_store,
    traits=frozenset({TRAIT_BLOCKING_WAIT, TRAIT_THREADS}),
    requires=("agentlightning.store_http.server",),
)


# ---- SQL backends (agentlightning.store.sqlite / agentlightning.store.postgres) ----


@asynccontextmanager
async def sqlite_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[LightningStore]:
    module = importlib.import_module("agentlightning.store.sqlite")
    store: LightningStore = module.SqliteLightningStore(tmp_path / "store.db", clock=clock, scan_debounce_seconds=0)
    try:
        yield store
    finally:
        await store.close()


def _postgres_reachable_or_skip() -> None:
    try:
        import psycopg
    except ImportError:
        pytest.skip("postgres backend needs psycopg: pip install agentlightning[postgres]")
    try:
        with psycopg.connect(POSTGRES_DSN, connect_timeout=3):
            pass
    except Exception as exc:
        pytest.skip(f"no PostgreSQL reachable at {POSTGRES_DSN} (set AGL_TEST_POSTGRES_DSN): {exc}")


def _drop_postgres_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def postgres_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[LightningStore]:
    _postgres_reachable_or_skip()
    module = importlib.import_module("agentlightning.store.postgres")
    schema = f"agl_test_{uuid.uuid4().hex[:12]}"
    store: LightningStore = module.PostgresLightningStore(
        POSTGRES_DSN, schema=schema, clock=clock, scan_debounce_seconds=0
    )
    try:
        yield store
    finally:
        await store.close()
        _drop_postgres_schema(schema)


register_backend(
    "sqlite",
    sqlite_store,
    traits=frozenset({TRAIT_BLOCKING_WAIT, TRAIT_THREADS, TRAIT_NULL_CLEARS}),
    requires=("agentlightning.store.sqlite",),
)
register_backend(
    "postgres",
    postgres_store,
    traits=frozenset({TRAIT_BLOCKING_WAIT, TRAIT_THREADS, TRAIT_NULL_CLEARS}),
    marks=(pytest.mark.postgres,),
    requires=("agentlightning.store.postgres",),
)
