"""A store seeded like a short training run, for dashboard tests and screenshots.

Rollouts in every status and mode (train rewards rising, a retried rollout, one running, some queued),
span trees with LLM calls carrying token ids, a tool call, reward spans and an LLM judge whose call the
adapter drops; two prompt-template versions; workers busy, idle, silent and offline. Times come from a manual
clock that ends close to the real current time, so ages and durations look like a real run's.

Write a seeded SQLite file (then `agl store --backend sqlite --path demo.db`):

    python -m tests.dashboard.seed demo.db --train 120 --val 30
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from agentlightning.emitter.reward import emit_reward
from agentlightning.instrumentation.openai import LLM_SPAN_NAME, request_to_attributes, response_to_attributes
from agentlightning.store.base import LightningStore
from agentlightning.types import LLM, PromptTemplate, RolloutConfig, Span, TraceStatus

__all__ = ["ManualClock", "Seeded", "seed_store", "PROMPT_V1", "PROMPT_V2", "SHOWCASE_QUESTION"]

PROMPT_V1 = "You are a helpful assistant.\nAnswer the question: {question}"
PROMPT_V2 = (
    "You are a careful math tutor.\n"
    "Think step by step and use the calculator tool for arithmetic.\n"
    "Answer the question: {question}\n"
    "End with 'Answer: <number>'."
)
SHOWCASE_QUESTION = "A train travels 120 km in 1.5 hours. What is its average speed in km/h?"


class ManualClock:
    """Time that moves only when told to; the stores read it through `clock=`."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class Seeded:
    """Ids of what `seed_store` created, for assertions."""

    resources_ids: list[str] = field(default_factory=list)
    rollout_ids: dict[str, list[str]] = field(default_factory=dict)
    """Rollout ids by final status."""
    modes: dict[str, str] = field(default_factory=dict)
    rewards: dict[str, float] = field(default_factory=dict)
    """Final reward of each finished rollout that has one."""
    showcase_rollout_id: str = ""
    showcase_attempt_ids: list[str] = field(default_factory=list)
    workers: dict[str, str] = field(default_factory=dict)
    """Worker id -> expected status."""

    def add(self, status: str, rollout_id: str, mode: str) -> None:
        self.rollout_ids.setdefault(status, []).append(rollout_id)
        self.modes[rollout_id] = mode

    @property
    def total(self) -> int:
        return sum(len(ids) for ids in self.rollout_ids.values())


class _Trace:
    """Spans of one attempt with ids and times from the manual clock."""

    def __init__(self, rollout_id: str, attempt_id: str, clock: ManualClock) -> None:
        self.rollout_id = rollout_id
        self.attempt_id = attempt_id
        self.clock = clock
        self.trace_id = f"{random.getrandbits(128):032x}"
        self.spans: list[Span] = []

    def span(
        self,
        name: str,
        attributes: dict[str, Any],
        *,
        parent: Optional[Span] = None,
        start: float,
        end: float,
        error: Optional[str] = None,
    ) -> Span:
        span = Span.from_attributes(
            attributes=attributes,
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
            sequence_id=len(self.spans) + 1,
            trace_id=self.trace_id,
            span_id=f"{random.getrandbits(64):016x}",
            parent_id=parent.span_id if parent is not None else None,
            start_time=start,
            end_time=end,
            name=name,
            status=TraceStatus(status_code="ERROR", description=error) if error else None,
        )
        self.spans.append(span)
        return span

    def llm(
        self,
        messages: list[dict[str, Any]],
        reply: str,
        *,
        parent: Span,
        start: float,
        seconds: float,
        prompt_ids: list[int],
        response_ids: list[int],
        model: str = "qwen2.5-0.5b-instruct",
    ) -> Span:
        request = {"model": model, "messages": messages, "temperature": 0.7}
        response = {
            "id": f"chatcmpl-{random.getrandbits(40):010x}",
            "model": model,
            "prompt_token_ids": prompt_ids,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                    "token_ids": response_ids,
                }
            ],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(response_ids)},
        }
        attributes = {**request_to_attributes(request), **response_to_attributes(response)}
        return self.span(LLM_SPAN_NAME, attributes, parent=parent, start=start, end=start + seconds)

    def reward(self, value: float, *, parent: Span, start: float, end: Optional[float] = None) -> Span:
        core = emit_reward(value, propagate=False)
        return self.span(core.name, dict(core.attributes), parent=parent, start=start, end=end or start + 0.01)


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(100, 32000) for _ in range(n)]


def _simple_trace(trace: _Trace, rng: random.Random, question: str, reward: Optional[float], fail: bool) -> None:
    """agent -> LLM call (-> reward): the shape of most rollouts."""
    t0 = trace.clock.now
    duration = rng.uniform(4.0, 14.0)
    root = trace.span("agent.math_tutor", {"agent.name": "math_tutor"}, start=t0, end=t0 + duration)
    prompt = _ids(rng, rng.randrange(30, 60))
    trace.llm(
        [{"role": "user", "content": question}],
        "Let me compute that. Answer: 42",
        parent=root,
        start=t0 + 0.2,
        seconds=duration * 0.7,
        prompt_ids=prompt,
        response_ids=_ids(rng, rng.randrange(8, 30)),
    )
    if fail:
        trace.span(
            "agentlightning.exception",
            {"exception.type": "TimeoutError", "exception.message": "tool call timed out after 10 s"},
            parent=root,
            start=t0 + duration * 0.8,
            end=t0 + duration * 0.8,
            error="TimeoutError: tool call timed out after 10 s",
        )
    if reward is not None:
        trace.reward(reward, parent=root, start=t0 + duration - 0.05)


def _showcase_trace(trace: _Trace) -> None:
    """A two-turn agent with a tool call, a reward, and an LLM judge inside the reward span."""
    t0 = trace.clock.now
    root = trace.span("agent.math_tutor", {"agent.name": "math_tutor"}, start=t0, end=t0 + 9.0)
    system = {"role": "system", "content": PROMPT_V2.split("\n")[0]}
    user = {"role": "user", "content": SHOWCASE_QUESTION}
    first_prompt = list(range(1000, 1042))
    first_reply = list(range(5000, 5012))
    trace.llm(
        [system, user],
        "I will divide the distance by the time using the calculator.",
        parent=root,
        start=t0 + 0.3,
        seconds=2.1,
        prompt_ids=first_prompt,
        response_ids=first_reply,
    )
    tool = trace.span(
        "tool.calculator",
        {"tool.name": "calculator", "tool.input": "120 / 1.5", "tool.output": "80"},
        parent=root,
        start=t0 + 2.6,
        end=t0 + 3.1,
    )
    trace.span("calculator.eval", {"expression": "120 / 1.5"}, parent=tool, start=t0 + 2.7, end=t0 + 3.0)
    trace.llm(
        [
            system,
            user,
            {"role": "assistant", "content": "I will divide the distance by the time using the calculator."},
            {"role": "tool", "content": "80"},
        ],
        "The average speed is 120 km / 1.5 h = 80 km/h.\nAnswer: 80",
        parent=root,
        start=t0 + 3.3,
        seconds=2.4,
        prompt_ids=first_prompt + first_reply + list(range(7000, 7009)),
        response_ids=list(range(6000, 6018)),
    )
    judge = trace.reward(1.0, parent=root, start=t0 + 6.0, end=t0 + 8.8)
    trace.llm(
        [{"role": "user", "content": "Is 'Answer: 80' correct for: " + SHOWCASE_QUESTION}],
        "Yes, 80 km/h is correct.",
        parent=judge,
        start=t0 + 6.2,
        seconds=2.3,
        prompt_ids=list(range(9000, 9030)),
        response_ids=list(range(9500, 9507)),
        model="judge-model",
    )


def _heartbeat_stats(rng: random.Random, host: str, cpu: float, memory: float) -> dict[str, Any]:
    total = 64 * 1024**3
    return {
        "timestamp": 0.0,
        "hostname": host,
        "platform": "Linux-6.1-x86_64",
        "cpu": {"logical_cores": 16, "physical_cores": 8, "usage_percent": cpu, "load_average": [2.1, 1.8, 1.5]},
        "memory": {
            "total_bytes": total,
            "available_bytes": int(total * (1 - memory / 100)),
            "used_bytes": int(total * memory / 100),
            "usage_percent": memory,
            "swap_used_bytes": 0,
            "swap_percent": 0.0,
        },
        "process": {
            "pid": rng.randrange(1000, 60000),
            "cpu_percent": cpu,
            "rss_bytes": 512 * 1024**2,
            "num_threads": 12,
        },
    }


async def seed_store(
    store: LightningStore, clock: ManualClock, *, n_train: int = 22, n_val: int = 6, seed: int = 7
) -> Seeded:
    """Fill `store` (built with `clock=clock`) like a short training run; returns what it created."""
    rng = random.Random(seed)
    random.seed(seed)
    seeded = Seeded()
    llm = LLM(
        endpoint="http://127.0.0.1:8000/v1", model="qwen2.5-0.5b-instruct", sampling_parameters={"temperature": 0.7}
    )
    v1 = await store.add_resources({"prompt": PromptTemplate(template=PROMPT_V1, engine="f-string"), "llm": llm})
    seeded.resources_ids.append(v1.resources_id)
    clock.advance(5)
    workers = ["runner-0", "runner-1"]

    async def finished(
        mode: str, reward: Optional[float], *, fail: bool = False, question: str = "What is 6 * 7?"
    ) -> str:
        worker = workers[len(seeded.modes) % 2]
        attempted = await store.start_rollout(input={"question": question}, mode=mode, worker_id=worker)  # type: ignore[arg-type]
        clock.advance(0.5)
        trace = _Trace(attempted.rollout_id, attempted.attempt.attempt_id, clock)
        _simple_trace(trace, rng, question, reward, fail)
        await store.add_many_spans(trace.spans)
        clock.advance(max((s.end_time or 0.0) for s in trace.spans) - clock.now + 0.2)
        status = "failed" if fail else "succeeded"
        await store.update_attempt(attempted.rollout_id, attempted.attempt.attempt_id, status=status)
        seeded.add(status, attempted.rollout_id, mode)
        if reward is not None:
            seeded.rewards[attempted.rollout_id] = reward
        clock.advance(rng.uniform(1.0, 6.0))
        return attempted.rollout_id

    # Training with prompt v1, then v2 (rewards rise); a validation round after each half.
    for i in range(n_train):
        if i == n_train // 2:
            for _ in range(n_val // 2):
                await finished("val", round(min(1.0, max(0.0, rng.gauss(0.35, 0.15))), 2))
            # Extra fields, as GEPA attaches to the templates of its Pareto front; the dashboard lists them.
            v2_prompt = PromptTemplate(template=PROMPT_V2, engine="f-string", val_score=0.75, parents=[0])
            v2 = await store.add_resources({"prompt": v2_prompt, "llm": llm})
            seeded.resources_ids.append(v2.resources_id)
            clock.advance(5)
        progress = i / max(1, n_train - 1)
        fail = i in (3, 11, n_train - 4)
        reward = None if fail else round(min(1.0, max(0.0, rng.gauss(0.2 + 0.6 * progress, 0.15))), 2)
        await finished("train", reward, fail=fail, question=f"What is {i + 2} * {i + 5}?")
    for _ in range(n_val - n_val // 2):
        await finished("val", round(min(1.0, max(0.0, rng.gauss(0.75, 0.1))), 2))
    await finished("test", 1.0)

    # The showcase rollout: attempt 1 fails, the retry succeeds with a rich trace.
    config = RolloutConfig(max_attempts=3, retry_condition=["failed"])
    showcase = await store.start_rollout(
        input={"question": SHOWCASE_QUESTION}, mode="train", config=config, worker_id="runner-1"
    )
    first = _Trace(showcase.rollout_id, showcase.attempt.attempt_id, clock)
    _simple_trace(first, rng, SHOWCASE_QUESTION, None, fail=True)
    await store.add_many_spans(first.spans)
    clock.advance(10)
    await store.update_attempt(showcase.rollout_id, showcase.attempt.attempt_id, status="failed")
    clock.advance(2)
    retry = await store.dequeue_rollout(worker_id="runner-1")
    assert retry is not None and retry.rollout_id == showcase.rollout_id, retry
    clock.advance(0.3)
    second = _Trace(showcase.rollout_id, retry.attempt.attempt_id, clock)
    _showcase_trace(second)
    await store.add_many_spans(second.spans)
    clock.advance(9.5)
    await store.update_attempt(showcase.rollout_id, retry.attempt.attempt_id, status="succeeded")
    seeded.add("succeeded", showcase.rollout_id, "train")
    seeded.rewards[showcase.rollout_id] = 1.0
    seeded.showcase_rollout_id = showcase.rollout_id
    seeded.showcase_attempt_ids = [showcase.attempt.attempt_id, retry.attempt.attempt_id]
    clock.advance(3)

    # A rollout waiting for its retry, one cancelled, two queued, one running on runner-0.
    retrying = await store.start_rollout(
        input={"question": "What is 17 * 23?"},
        mode="train",
        config=RolloutConfig(max_attempts=2, retry_condition=["failed"]),
        worker_id="runner-1",
    )
    clock.advance(4)
    await store.update_attempt(retrying.rollout_id, retrying.attempt.attempt_id, status="failed")
    seeded.add("requeuing", retrying.rollout_id, "train")
    cancelled = await store.start_rollout(input={"question": "What is 2 ** 10?"}, mode="train")
    await store.update_rollout(cancelled.rollout_id, status="cancelled")
    seeded.add("cancelled", cancelled.rollout_id, "train")
    for k in range(2):
        queued = await store.enqueue_rollout(input={"question": f"What is {k + 30} - 7?"}, mode="val")
        seeded.add("queuing", queued.rollout_id, "val")
    clock.advance(2)
    running = await store.start_rollout(input={"question": "What is 99 + 1?"}, mode="train", worker_id="runner-0")
    trace = _Trace(running.rollout_id, running.attempt.attempt_id, clock)
    root = trace.span("agent.math_tutor", {"agent.name": "math_tutor"}, start=clock.now, end=clock.now + 0.1)
    await store.add_many_spans([root])
    seeded.add("running", running.rollout_id, "train")

    # Heartbeats: runner-0 busy, runner-1 idle (its last attempt ended), runner-2 silent for 15 minutes,
    # runner-3 idle when it went silent 15 minutes ago (its process ended: the dashboard shows it offline).
    # With a clock that ends about now, the last heartbeats land on the real now: the dashboard shows
    # workers silent for over a minute as offline, and runner-0 and runner-1 must read as live.
    if abs(clock.now - time.time()) < 3600:
        clock.now = max(clock.now, time.time() - 902)
    await store.update_worker("runner-2", heartbeat_stats=_heartbeat_stats(rng, "gpu-node-2", 3.0, 21.0))
    last_job = await store.start_rollout(input={"question": "What is 1 + 1?"}, mode="test", worker_id="runner-3")
    await store.update_worker("runner-3", heartbeat_stats=_heartbeat_stats(rng, "gpu-node-3", 5.0, 30.0))
    await store.update_attempt(last_job.rollout_id, last_job.attempt.attempt_id, status="succeeded")
    seeded.add("succeeded", last_job.rollout_id, "test")
    for _ in range(10):  # runner-0 keeps heartbeating, which keeps its running attempt responsive
        clock.advance(90)
        await store.update_worker("runner-0")
    await store.update_worker("runner-1", heartbeat_stats=_heartbeat_stats(rng, "gpu-node-1", 12.5, 48.0))
    clock.advance(2)
    await store.update_worker("runner-0", heartbeat_stats=_heartbeat_stats(rng, "gpu-node-0", 86.0, 74.0))
    seeded.workers = {"runner-0": "busy", "runner-1": "idle", "runner-2": "unknown", "runner-3": "offline"}
    return seeded


def clock_ending_now(n_train: int, n_val: int) -> ManualClock:
    """A clock starting early enough that seeding ends about now (each rollout takes ~15 s)."""
    return ManualClock(time.time() - (n_train + n_val + 8) * 16.0 - 940.0)


async def _write(path: str, n_train: int, n_val: int) -> None:
    from agentlightning.store.sqlite import SqliteLightningStore

    clock = clock_ending_now(n_train, n_val)
    store = SqliteLightningStore(path, clock=clock)
    try:
        seeded = await seed_store(store, clock, n_train=n_train, n_val=n_val)
    finally:
        await store.close()
    print(f"seeded {path}: {seeded.total} rollouts; showcase rollout {seeded.showcase_rollout_id}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Write a SQLite store seeded like a short training run.")
    parser.add_argument("path")
    parser.add_argument("--train", type=int, default=22)
    parser.add_argument("--val", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(_write(args.path, args.train, args.val))


if __name__ == "__main__":
    main()
