"""RayExecutionStrategy on a real three-node Ray cluster on this machine (head + two worker nodes).

The head has no CPUs for actors, so every runner lands on a worker node and reaches the driver's store
server over HTTP with the run's token. One test kills a worker node in the middle of a rollout; the last
one runs the multi-node recipe of docs/multi-node.md command by command: `agl store --backend postgres`
as a subprocess on a fresh PostgreSQL database, this cluster in place of `ray start`, and
`examples/multinode/train_ray.py` training a tiny model with GRPO on CPU.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import agentlightning as agl
from agentlightning.execution.ray_strategy import RayExecutionStrategy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import EnqueueRolloutRequest, Rollout, RolloutConfig
from tests.execution.conftest import pick_free_port
from tests.store.backends import POSTGRES_DSN

ray = pytest.importorskip("ray", reason="the ray extra is part of the dev extra; install agentlightning[ray]")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

DEADLINE_SECONDS = 60.0


RAY_OBJECT_STORE_BYTES = 80 * 1024 * 1024


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A real local Ray cluster for this module: a head without CPUs and two 2-CPU worker nodes.

    Stands in for `ray start --head --num-cpus 0` plus `ray start --address HEAD:6379` on two machines.
    Killed nodes are noticed within ~2 s (Ray's default is tens of seconds).
    """
    from ray.cluster_utils import Cluster

    local = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": RAY_OBJECT_STORE_BYTES,
            "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    try:
        for _ in range(2):
            local.add_node(num_cpus=2, object_store_memory=RAY_OBJECT_STORE_BYTES)
        local.wait_for_nodes()
        yield local
    finally:
        local.shutdown()


@pytest.fixture(scope="module")
def cluster(ray_cluster: Any) -> Iterator[Any]:
    """The cluster, with this test process connected as a Ray driver."""
    ray.init(address=ray_cluster.address, include_dashboard=False, logging_level="WARNING")
    try:
        yield ray_cluster
    finally:
        ray.shutdown()


class SpanningAgent(agl.LitAgent[dict[str, Any]]):
    """Opens a span (a heartbeat for its attempt) every `step_seconds`, `steps` times, then returns 1.0."""

    def __init__(self, steps: int = 2, step_seconds: float = 0.05) -> None:
        super().__init__()
        self.steps = steps
        self.step_seconds = step_seconds

    async def rollout_async(self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        from opentelemetry import trace as trace_api

        tracer = trace_api.get_tracer("tests.ray")
        for step in range(self.steps):
            with tracer.start_as_current_span(f"step-{step}", attributes={"index": task["index"]}):
                await asyncio.sleep(self.step_seconds)
        return 1.0


async def _wait_all(store: agl.LightningStore, rollout_ids: list[str]) -> list[Rollout]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        done = await store.wait_for_rollouts(rollout_ids=rollout_ids, timeout=0)
        if len(done) == len(rollout_ids):
            return done
        await asyncio.sleep(0.1)
    raise AssertionError(f"rollouts did not finish within {DEADLINE_SECONDS} s")


def _trainer(strategy: RayExecutionStrategy, algorithm: Any, store: agl.LightningStore) -> agl.Trainer:
    return agl.Trainer(
        algorithm=algorithm,
        store=store,
        strategy=strategy,
        tracer=agl.OtelTracer(),
        runner={"poll_interval": 0.1, "heartbeat_interval": 1.0},
    )


def _actor_locations(strategy: RayExecutionStrategy) -> list[dict[str, Any]]:
    return [ray.get(info.handle.where.remote(), timeout=30) for info in strategy.actors]


def _assert_no_actor_left(strategy: RayExecutionStrategy, pids: list[int]) -> None:
    for info in strategy.actors:
        namespace, name = info.name.split("/", 1)
        with pytest.raises(ValueError):
            ray.get_actor(name, namespace=namespace)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in pids):
        time.sleep(0.2)
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"runner actor processes still alive after shutdown: {alive}"


def test_runners_spread_over_worker_nodes_and_finish_every_rollout(cluster: Any) -> None:
    strategy = RayExecutionStrategy(n_runners=2, num_cpus=1, graceful_timeout=10.0)
    locations: list[dict[str, Any]] = []
    results: list[Rollout] = []

    @agl.algo
    async def algorithm(*, store: agl.LightningStore) -> None:
        requests = [EnqueueRolloutRequest(input={"index": i}, mode="train") for i in range(6)]
        enqueued = await store.enqueue_many_rollouts(requests)
        results.extend(await _wait_all(store, [r.rollout_id for r in enqueued]))
        locations.extend(await asyncio.to_thread(_actor_locations, strategy))

    store = InMemoryLightningStore(thread_safe=True)
    _trainer(strategy, algorithm, store).fit(SpanningAgent())

    assert [r.status for r in results] == ["succeeded"] * 6
    head_id = cluster.head_node.node_id
    worker_ids = {node.node_id for node in cluster.worker_nodes}
    assert {loc["node_id"] for loc in locations} == worker_ids, "SPREAD puts one runner on each worker node"
    assert head_id not in {loc["node_id"] for loc in locations}
    workers = asyncio.run(store.query_workers())
    assert {w.worker_id for w in workers} == {"Worker-0", "Worker-1"}
    _assert_no_actor_left(strategy, [loc["pid"] for loc in locations])


def test_store_server_requires_the_run_token(cluster: Any) -> None:
    """Runners on other nodes reach the store only with the token; an anonymous client is refused."""
    from agentlightning.store.client import LightningStoreClient

    strategy = RayExecutionStrategy(n_runners=1, graceful_timeout=5.0, auth_token="s3cret-token")
    observed: dict[str, Any] = {}

    @agl.algo
    async def algorithm(*, store: agl.LightningStore) -> None:
        enqueued = await store.enqueue_rollout(input={"index": 0})
        await _wait_all(store, [enqueued.rollout_id])
        server = store
        endpoint = strategy.endpoint(ray, server.port)  # type: ignore[attr-defined]
        observed["endpoint"] = endpoint
        anonymous = LightningStoreClient(endpoint, auth_token="wrong", retry_delays=(), health_retry_delays=())
        try:
            with pytest.raises(Exception) as info:
                await anonymous.query_rollouts()
            observed["error"] = str(info.value)
        finally:
            await anonymous.close()

    _trainer(strategy, algorithm, InMemoryLightningStore(thread_safe=True)).fit(SpanningAgent(steps=1))
    assert "401" in observed["error"] or "token" in observed["error"].lower()
    assert not observed["endpoint"].startswith("http://0.0.0.0")


def test_killing_a_node_mid_rollout_restarts_its_runner_and_retries_the_attempt_once(cluster: Any) -> None:
    strategy = RayExecutionStrategy(n_runners=2, num_cpus=1, max_restarts=2, graceful_timeout=10.0)
    # Each rollout gives up on a silent attempt after 3 s and allows exactly one retry.
    config = RolloutConfig(unresponsive_seconds=3.0, max_attempts=2, retry_condition=["unresponsive"])
    observed: dict[str, Any] = {}

    @agl.algo
    async def algorithm(*, store: agl.LightningStore) -> None:
        locations = await asyncio.to_thread(_actor_locations, strategy)
        observed["pids"] = [loc["pid"] for loc in locations]
        requests = [EnqueueRolloutRequest(input={"index": i}, mode="train", config=config) for i in range(8)]
        enqueued = await store.enqueue_many_rollouts(requests)
        ids = [r.rollout_id for r in enqueued]
        victim_rollout = await _running_rollout_of(store, ids, "Worker-0")
        victim_node = next(n for n in cluster.worker_nodes if n.node_id == locations[0]["node_id"])
        await asyncio.to_thread(cluster.remove_node, victim_node, False)
        observed["victim_rollout"] = victim_rollout
        observed["results"] = await _wait_all(store, ids)
        observed["attempts"] = {rid: (await store.query_attempts(rid)).items for rid in ids}
        deadline = time.monotonic() + DEADLINE_SECONDS
        while strategy.actors[0].restarts == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        observed["relocated"] = [info.locations[-1] for info in strategy.actors]

    store = InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.5)
    try:
        _trainer(strategy, algorithm, store).fit(SpanningAgent(steps=6, step_seconds=0.25))
    finally:
        cluster.add_node(num_cpus=2, object_store_memory=RAY_OBJECT_STORE_BYTES)

    results: list[Rollout] = observed["results"]
    assert [r.status for r in results] == ["succeeded"] * 8
    attempts = observed["attempts"]
    retried = {rid: [a.status for a in items] for rid, items in attempts.items() if len(items) > 1}
    assert retried == {observed["victim_rollout"]: ["unresponsive", "succeeded"]}
    for items in attempts.values():
        assert [a.status for a in items].count("succeeded") == 1, "no rollout runs to success twice"
    assert strategy.actors[0].restarts == 1 and strategy.actors[1].restarts == 0
    survivors = {n.node_id for n in cluster.worker_nodes}
    assert {loc["node_id"] for loc in observed["relocated"]} <= survivors
    pids = observed["pids"] + [loc["pid"] for loc in observed["relocated"]]
    _assert_no_actor_left(strategy, pids)


async def _running_rollout_of(store: agl.LightningStore, rollout_ids: list[str], worker_id: str) -> str:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        for rid in rollout_ids:
            attempt = await store.get_latest_attempt(rid)
            if attempt is not None and attempt.worker_id == worker_id and attempt.status == "running":
                return rid
        await asyncio.sleep(0.05)
    raise AssertionError(f"{worker_id} never ran a rollout")


def test_algorithm_crash_stops_every_actor(cluster: Any) -> None:
    pids: list[int] = []
    holder: dict[str, RayExecutionStrategy] = {}

    @agl.algo
    async def algorithm(*, store: agl.LightningStore) -> None:
        pids.extend(loc["pid"] for loc in await asyncio.to_thread(_actor_locations, holder["strategy"]))
        raise RuntimeError("algorithm exploded")

    # The same script as with strategy="cs": only the strategy spec changes.
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=InMemoryLightningStore(thread_safe=True),
        strategy={"type": "ray", "num_cpus": 1, "graceful_timeout": 5.0},
        n_runners=2,
        tracer=agl.OtelTracer(),
        runner={"poll_interval": 0.1},
    )
    assert isinstance(trainer.strategy, RayExecutionStrategy)
    holder["strategy"] = trainer.strategy
    with pytest.raises(RuntimeError, match="algorithm exploded"):
        trainer.fit(SpanningAgent())
    _assert_no_actor_left(trainer.strategy, pids)


def test_ctrl_c_in_the_training_process_leaves_no_actor(cluster: Any) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys
    import uuid
    from pathlib import Path

    namespace = f"agl-sigint-{uuid.uuid4().hex[:8]}"
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.execution.ray_child", cluster.address, namespace],
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the training process exited before its runners started"
        started = json.loads(line)
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert child.returncode != 0, "Ctrl+C propagates as an interruption"
    for qualified in started["names"]:
        _, name = qualified.split("/", 1)
        with pytest.raises(ValueError):
            ray.get_actor(name, namespace=namespace)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in started["pids"]):
        time.sleep(0.2)
    assert not [pid for pid in started["pids"] if psutil.pid_exists(pid)]


def test_unpicklable_runner_fails_before_any_actor_starts() -> None:
    import threading

    class LockedAgent(SpanningAgent):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

    strategy = RayExecutionStrategy(n_runners=1)
    with pytest.raises(TypeError, match="cannot be sent to Ray actors"):
        _trainer(strategy, None, InMemoryLightningStore(thread_safe=True)).fit(LockedAgent())
    assert strategy.actors == []


def test_runners_that_cannot_be_placed_are_reported_and_shut_down(
    cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    strategy = RayExecutionStrategy(n_runners=2, resources={"accelerator": 1}, graceful_timeout=1.0)

    @agl.algo
    async def algorithm(*, store: agl.LightningStore) -> None:
        await asyncio.sleep(0.5)

    with caplog.at_level("WARNING", logger="agentlightning.execution.ray_strategy"):
        _trainer(strategy, algorithm, InMemoryLightningStore(thread_safe=True)).fit(SpanningAgent())
    assert "0.0 accelerator in all, but 2 runners ask for 1 each: only 0 can run" in caplog.text
    for info in strategy.actors:
        namespace, name = info.name.split("/", 1)
        with pytest.raises(ValueError):
            ray.get_actor(name, namespace=namespace)


def test_a_local_ray_gets_room_for_every_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    strategy = RayExecutionStrategy(n_runners=64, num_cpus=0.5)
    assert strategy._init_kwargs()["num_cpus"] >= 32
    assert "num_cpus" not in RayExecutionStrategy(n_runners=64, address="auto")._init_kwargs()
    assert RayExecutionStrategy(n_runners=64, init_kwargs={"num_cpus": 3})._init_kwargs()["num_cpus"] == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_runners": 0}, "n_runners"),
        ({"num_cpus": -1}, "num_cpus"),
        ({"max_restarts": -2}, "max_restarts"),
        ({"server_port": 70000}, "server_port"),
        ({"resources": {"accelerator": -1.0}}, "accelerator"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RayExecutionStrategy(**kwargs)


def test_trainer_accepts_ray_alias_with_runner_count() -> None:
    trainer = agl.Trainer(strategy={"type": "ray", "num_cpus": 0.5, "resources": {"agent": 1}}, n_runners=3)
    assert isinstance(trainer.strategy, RayExecutionStrategy)
    assert (trainer.strategy.n_runners, trainer.strategy.num_cpus, trainer.strategy.resources) == (
        3,
        0.5,
        {"agent": 1},
    )
    assert trainer.n_runners == 3


# ---- the multi-node recipe of docs/multi-node.md ----

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "recipe-token"


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh PostgreSQL database for the store (dropped afterwards)."""
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is part of the dev extra")
    try:
        admin = psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=3)
    except Exception as exc:
        pytest.skip(f"no PostgreSQL reachable at {POSTGRES_DSN} (set AGL_TEST_POSTGRES_DSN): {exc}")
    name = f"agl_recipe_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_DSN.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def agl_store(database: str) -> Iterator[str]:
    """`agl store --backend postgres --dsn ... --host 0.0.0.0 --port P --auth-token T` as on the head node."""
    port = pick_free_port()
    command = [sys.executable, "-m", "agentlightning.cli", "store", "--backend", "postgres", "--dsn", database]
    command += ["--host", "0.0.0.0", "--port", str(port), "--auth-token", TOKEN]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/agl/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode() if process.stdout else ""
                raise AssertionError(f"agl store did not come up: {output[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.postgres
@pytest.mark.train
@pytest.mark.timeout(300)
def test_recipe_trains_with_grpo_through_agl_store_on_postgres_and_ray_runners(
    tmp_path: Path, agl_store: str, ray_cluster: Any
) -> None:
    from tests.support.tiny_model import tiny_model

    model, tokenizer = tiny_model()
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    checkpoint_dir = tmp_path / "run"

    command = [sys.executable, str(ROOT / "examples" / "multinode" / "train_ray.py"), "--store-url", agl_store]
    command += ["--ray-address", ray_cluster.address, "--algorithm", "grpo", "--model", str(model_dir)]
    command += ["--n-runners", "2", "--steps", "1", "--checkpoint-dir", str(checkpoint_dir), "--device", "cpu"]
    env = {**os.environ, "AGL_STORE_TOKEN": TOKEN}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "done: 2 runner actors" in result.stdout

    metrics = [json.loads(line) for line in (checkpoint_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]

    from agentlightning.store.client import LightningStoreClient

    async def inspect() -> tuple[list[str], set[str]]:
        client = LightningStoreClient(agl_store, auth_token=TOKEN)
        try:
            rollouts = (await client.query_rollouts()).items
            workers = {w.worker_id for w in await client.query_workers()}
            return [r.status for r in rollouts], workers
        finally:
            await client.close()

    statuses, workers = asyncio.run(inspect())
    assert statuses == ["succeeded"] * 4, "batch_size 2 x group_size 2 rollouts, all in PostgreSQL"
    assert workers == {"Worker-0", "Worker-1"}
