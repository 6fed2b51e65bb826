"""The dashboard next to a GRPO demo, in headless Chromium: greedy and sampled validation passes are averaged
apart, a rollout's Duration leaves out its wait in the queue, and at 1,300 px the rollouts table shows the
reward without scrolling. Screenshots land in `artifacts/screenshots/` (`AGL_SHOTS_DIR` to put them elsewhere).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .seed import ManualClock, _simple_trace, _Trace  # pyright: ignore[reportPrivateUsage]
from .test_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, TIMEOUT_MS, TOKEN, StoreProcess, _free_port

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    ),
]

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

QUEUE_WAIT_S, RUN_S = 600.0, 9.0
LONG_INPUT = "Compute 85 times 61, then explain every step of the multiplication in words. " * 4
LONG_WORKER = "runner-7-build-host-with-a-long-name.internal-pid-4194301"
SHOTS = Path(os.environ.get("AGL_SHOTS_DIR") or SCREENSHOTS)


async def _seed(path: Path) -> dict[str, str]:
    """Greedy val rollouts all right, sampled ones half right, finishing interleaved; one rollout that queued
    for 10 minutes and ran for 9 s; train rollouts with long inputs."""
    from agentlightning.store.sqlite import SqliteLightningStore
    from agentlightning.types import LLM

    clock = ManualClock(1_760_000_000.0)
    store = SqliteLightningStore(path, clock=clock)
    rng = random.Random(3)
    try:
        llm = LLM(endpoint="http://127.0.0.1:8000/v1", model="grpo-smollm2")
        for resources_id in ("grpo-val", "grpo-val-sampled", "grpo-train"):
            await store.update_resources(resources_id, {"main_llm": llm})

        async def finish(rollout_id: str, attempt_id: str, reward: float) -> None:
            trace = _Trace(rollout_id, attempt_id, clock)
            _simple_trace(trace, rng, "What is 85 * 61?", reward, False)
            await store.add_many_spans(trace.spans)
            clock.advance(max(s.end_time or 0.0 for s in trace.spans) - clock.now + 0.2)
            await store.update_attempt(rollout_id, attempt_id, status="succeeded")

        for i in range(8):
            for resources_id, reward in (("grpo-val", 1.0), ("grpo-val-sampled", float(i % 2))):
                rollout = await store.start_rollout(
                    input={"question": f"What is {i} * 7?"}, mode="val", resources_id=resources_id, worker_id="r0"
                )
                await finish(rollout.rollout_id, rollout.attempt.attempt_id, reward)
        queued = await store.enqueue_rollout(input={"question": LONG_INPUT}, mode="train", resources_id="grpo-train")
        clock.advance(QUEUE_WAIT_S)
        claimed = await store.dequeue_rollout(worker_id="r1")
        assert claimed is not None and claimed.rollout_id == queued.rollout_id
        trace = _Trace(claimed.rollout_id, claimed.attempt.attempt_id, clock)
        root = trace.span("agent.calculator", {}, start=clock.now, end=clock.now + RUN_S - 0.05)
        trace.reward(0.5, parent=root, start=clock.now + RUN_S - 0.1)
        await store.add_many_spans(trace.spans)
        clock.advance(RUN_S)
        await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
        for i in range(6):
            rollout = await store.start_rollout(
                input={"question": f"{LONG_INPUT} ({i})"}, mode="train", resources_id="grpo-train", worker_id="r1"
            )
            await finish(rollout.rollout_id, rollout.attempt.attempt_id, 0.25)
        failed = await store.start_rollout(
            input={"question": LONG_INPUT}, mode="train", resources_id="grpo-train", worker_id=LONG_WORKER
        )
        trace = _Trace(failed.rollout_id, failed.attempt.attempt_id, clock)
        _simple_trace(trace, rng, LONG_INPUT, None, True)
        await store.add_many_spans(trace.spans)
        await store.update_attempt(failed.rollout_id, failed.attempt.attempt_id, status="failed")
        return {"queued": queued.rollout_id}
    finally:
        await store.close()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StoreProcess, dict[str, str]]]:
    path = tmp_path_factory.mktemp("passes") / "demo.db"
    with ThreadPoolExecutor(max_workers=1) as pool:  # Playwright's sync API keeps a loop running in this thread
        ids = pool.submit(asyncio.run, _seed(path)).result()
    server = StoreProcess(path, _free_port())
    server.start()
    yield server, ids
    server.stop()


@pytest.fixture
def page(seeded: tuple[StoreProcess, dict[str, str]]) -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        context.add_init_script("localStorage.setItem('agl.dashboard.settings', JSON.stringify({refreshSeconds: 0}))")
        tab = context.new_page()
        tab.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.goto(f"{seeded[0].url}/#token={TOKEN}")
        expect(tab.locator("#connection")).to_have_attribute("data-state", "connected")
        yield tab
        browser.close()
        assert errors == [], errors


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_greedy_and_sampled_validation_are_averaged_apart(page: Page) -> None:
    page.click('a[data-nav="training"]')
    page.select_option("#smoothing", "5")
    chart = page.locator("#reward-chart svg")
    greedy, sampled = chart.locator(".series-val-grpo-val path"), chart.locator(".series-val-grpo-val-sampled path")
    expect(greedy).to_have_count(1)
    expect(sampled).to_have_count(1)
    expect(page.locator("#reward-chart")).to_contain_text("val \u00b7 grpo-val (moving average)")
    expect(page.locator("#reward-chart")).to_contain_text("val \u00b7 grpo-val-sampled (moving average)")
    # The greedy pass is right every time: its average is a flat line, not pulled down by the sampled pass.
    heights = chart.evaluate(
        """(svg) => [...svg.querySelectorAll('.series-val-grpo-val path')][0].getAttribute('d')
            .match(/[ML][^ML]+/g).map((seg) => Number(seg.trim().slice(1).split(/[ ,]+/)[1]))"""
    )
    assert len(heights) == 8 and max(heights) - min(heights) < 0.01
    shot(page, "training-val-passes")


def test_duration_leaves_out_the_wait_in_the_queue(page: Page, seeded: tuple[StoreProcess, dict[str, str]]) -> None:
    server, ids = seeded
    row = server.api("GET", "/dashboard/rollouts", params={"limit": 50})["items"]
    queued = next(r for r in row if r["rollout_id"] == ids["queued"])
    assert queued["duration"] == pytest.approx(RUN_S, abs=0.01)
    assert queued["queue_wait"] == pytest.approx(QUEUE_WAIT_S, abs=0.01)
    cell = page.locator(f'tr[data-rollout-id="{ids["queued"]}"] td[data-col="duration"]')
    expect(cell).to_have_text("9.00 s")
    expect(cell.locator("span")).to_have_attribute("title", "ran 9.00 s; waited 10m 0s in the queue")
    page.click(f'tr[data-rollout-id="{ids["queued"]}"] a')
    expect(page.locator(".rollout-header")).to_contain_text("waited 10m 0s in the queue")


def test_the_reward_column_is_visible_at_1300_px(page: Page) -> None:
    expect(page.locator("tr[data-rollout-id]")).to_have_count(20)
    layout = page.evaluate(
        """() => {
            const wrap = document.querySelector('table').parentElement;
            const reward = [...document.querySelectorAll('th')].find((th) => th.textContent.includes('Final reward'));
            return {scroll: wrap.scrollWidth - wrap.clientWidth, right: reward.getBoundingClientRect().right,
                    width: window.innerWidth, pageScroll: document.documentElement.scrollWidth - window.innerWidth};
        }"""
    )
    shot(page, "rollouts-1300px")
    assert layout["scroll"] <= 1 and layout["pageScroll"] <= 1, layout
    assert layout["right"] <= layout["width"], layout
