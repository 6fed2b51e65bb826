"""The dashboard in headless Chromium, against `agl store --backend sqlite` serving a seeded store file.

Each page must show the seeded data; filters, paging, the span tree, triplets, the resource diff, token
login and the connection indicator must work. Screenshots land in `artifacts/screenshots/`.
Needs Debian's `chromium` (`apt-get install chromium`); Playwright drives it, no browser download.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    ),
]

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from .seed import PROMPT_V1, PROMPT_V2, Seeded, clock_ending_now, seed_store  # noqa: E402

TOKEN = "browser-test-token"
API = "/v1/agl"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StoreProcess:
    """`agl store` serving a SQLite file in a child process; can be stopped and started again."""

    def __init__(self, db_path: Path, port: int) -> None:
        self.db_path = db_path
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "agentlightning.cli", "store", "--backend", "sqlite", "--path"]
        command += [str(self.db_path), "--port", str(self.port), "--auth-token", TOKEN, "--log-level", "WARNING"]
        env = {k: v for k, v in os.environ.items() if k != "AGL_STORE_TOKEN"}
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with httpx.Client(timeout=2.0) as http:
            for _ in range(300):
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"agl store exited: {self.process.stderr.read().decode() if self.process.stderr else ''}"
                    )
                try:
                    if http.get(f"{self.url}{API}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                try:
                    self.process.wait(timeout=0.1)  # doubles as the pause between health probes
                except subprocess.TimeoutExpired:
                    pass
        raise RuntimeError(f"agl store did not answer on {self.url} within 30 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
            response = http.request(method, API + path, **kwargs)
            response.raise_for_status()
            return response.json()


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Seeded]:
    from agentlightning.store.sqlite import SqliteLightningStore

    path = tmp_path_factory.mktemp("dashboard") / "demo.db"

    async def seed() -> Seeded:
        clock = clock_ending_now(22, 6)
        store = SqliteLightningStore(path, clock=clock)
        try:
            return await seed_store(store, clock, n_train=22, n_val=6)
        finally:
            await store.close()

    # A thread of its own: Playwright's sync API keeps an event loop running in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return path, pool.submit(asyncio.run, seed()).result()


@pytest.fixture(scope="module")
def server(seeded_db: tuple[Path, Seeded]) -> Iterator[StoreProcess]:
    store = StoreProcess(seeded_db[0], _free_port())
    store.start()
    yield store
    store.stop()


@pytest.fixture(scope="module")
def seeded(seeded_db: tuple[Path, Seeded]) -> Seeded:
    return seeded_db[1]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _new_page(browser: Browser, settings: dict[str, Any] | None = None) -> tuple[Page, list[str]]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    if settings is not None:
        context.add_init_script(f"localStorage.setItem('agl.dashboard.settings', JSON.stringify({settings!r}))")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    page.on(
        "console",
        lambda message: (
            errors.append(f"console: {message.text}")
            if message.type == "error" and "Failed to load resource" not in message.text
            else None
        ),
    )
    return page, errors


@pytest.fixture
def page(browser: Browser, server: StoreProcess) -> Iterator[Page]:
    """A signed-in page (token from the URL fragment) with auto-refresh off, failing on JS errors."""
    tab, errors = _new_page(browser, {"refreshSeconds": 0})
    tab.goto(f"{server.url}/#token={TOKEN}")
    expect(tab.locator("#connection")).to_have_attribute("data-state", "connected")
    yield tab
    tab.context.close()
    assert errors == [], errors


def shot(page: Page, name: str, *, full_page: bool = True) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


def rollout_rows(page: Page) -> Any:
    return page.locator("tr[data-rollout-id]")


def wait_for_rows(page: Page, count: int) -> list[str]:
    expect(rollout_rows(page)).to_have_count(count)
    return [row.get_attribute("data-rollout-id") or "" for row in rollout_rows(page).all()]


# ---- rollouts ----


def test_rollouts_page_lists_the_seeded_rollouts(page: Page, server: StoreProcess, seeded: Seeded) -> None:
    total = server.api("GET", "/dashboard/rollouts", params={"limit": 1})["total"]
    assert total >= seeded.total
    assert page.url.endswith("#/rollouts")  # the token left the address bar
    ids = wait_for_rows(page, 20)
    expect(page.locator(".page-info")).to_have_text(f"1\u201320 of {total}")
    newest = server.api("GET", "/dashboard/rollouts", params={"limit": 20})["items"]
    assert set(ids) == {row["rollout_id"] for row in newest}  # rollouts started together may tie on time
    running = seeded.rollout_ids["running"][0]
    expect(page.locator(f'tr[data-rollout-id="{running}"] .badge')).to_have_text("running")
    succeeded = len(seeded.rollout_ids["succeeded"])
    expect(page.locator('[data-filter="status"] [data-value="succeeded"] .chip-count')).to_have_text(str(succeeded))
    showcase = page.locator(f'tr[data-rollout-id="{seeded.showcase_rollout_id}"]')
    expect(showcase.locator("td").nth(3)).to_have_text("2")  # attempts
    expect(showcase.locator(".reward")).to_have_text("1.000")
    shot(page, "rollouts")


def test_status_mode_and_id_filters(page: Page, seeded: Seeded) -> None:
    wait_for_rows(page, 20)
    page.click('[data-filter="status"] [data-value="failed"]')
    failed = wait_for_rows(page, len(seeded.rollout_ids["failed"]))
    assert set(failed) == set(seeded.rollout_ids["failed"])
    assert "status=failed" in page.url
    shot(page, "rollouts-filtered-failed")

    page.click('[data-filter="status"] [data-value="failed"]')  # off again
    page.click('[data-filter="mode"] [data-value="val"]')
    vals = {rid for rid, mode in seeded.modes.items() if mode == "val"}
    assert set(wait_for_rows(page, len(vals))) == vals
    expect(page.locator("tr[data-rollout-id] .tag").first).to_have_text("val")

    page.click('[data-filter="mode"] [data-value="val"]')
    page.fill("#rollout-search", seeded.showcase_rollout_id[3:])
    assert wait_for_rows(page, 1) == [seeded.showcase_rollout_id]
    page.fill("#rollout-search", "no-such-rollout")
    expect(page.locator("tr.empty-row")).to_contain_text("No rollout matches")


def test_pagination_sorting_and_page_size(page: Page, server: StoreProcess) -> None:
    first = wait_for_rows(page, 20)
    page.get_by_role("button", name="Next page").click()
    expect(page.locator(".page-number")).to_have_text(re.compile(r"Page 2 / \d+"))
    total = server.api("GET", "/dashboard/rollouts", params={"limit": 1})["total"]
    second = wait_for_rows(page, min(20, total - 20))
    assert not set(first) & set(second)

    page.click('th[data-key="start_time"]')  # newest first -> oldest first, back to page 1
    oldest = server.api("GET", "/dashboard/rollouts", params={"sort_order": "asc", "limit": 20})["items"]
    expect(rollout_rows(page).first).to_have_attribute("data-rollout-id", oldest[0]["rollout_id"])
    expect(page.locator('th[data-key="start_time"]')).to_contain_text("\u25b2")

    page.select_option('select[aria-label="Rows per page"]', "10")
    assert wait_for_rows(page, 10) == [row["rollout_id"] for row in oldest[:10]]
    expect(page.locator(".page-info")).to_have_text(f"1\u201310 of {total}")


# ---- one rollout ----


def test_rollout_detail_shows_attempts_and_span_tree(page: Page, seeded: Seeded) -> None:
    page.click(f'tr[data-rollout-id="{seeded.showcase_rollout_id}"] a')
    expect(page.locator("#page-title")).to_have_text(f"Rollout {seeded.showcase_rollout_id}")
    expect(page.locator("tr[data-attempt-id]")).to_have_count(2)
    expect(page.locator(f'tr[data-attempt-id="{seeded.showcase_attempt_ids[1]}"]')).to_have_class(
        re.compile("selected")
    )
    tree = page.locator(".waterfall .span-row[data-span-id]")
    expect(tree).to_have_count(7)
    names = [row.get_attribute("data-name") for row in tree.all()]
    assert names[0] == "agent.math_tutor" and names.count("openai.chat.completion") == 3
    expect(page.locator('.span-row[data-name="calculator.eval"]')).to_have_attribute("aria-level", "3")
    expect(page.locator('.span-row[data-name="agentlightning.annotation"] .span-reward')).to_have_text("reward 1.000")
    expect(page.locator(".stat").filter(has_text="Final reward")).to_contain_text("1.000")
    shot(page, "rollout-span-tree")

    page.click('.span-row[data-name="tool.calculator"]')
    drawer = page.locator(".drawer")
    expect(drawer).to_contain_text("tool.input")
    expect(drawer).to_contain_text("120 / 1.5")
    shot(page, "rollout-span-detail", full_page=False)  # the drawer covers the viewport
    page.keyboard.press("Escape")
    expect(drawer).to_have_count(0)

    page.click('.span-row[data-name="tool.calculator"] button.caret')
    expect(page.locator('.span-row[data-name="calculator.eval"]')).to_have_count(0)
    expect(page.locator('.span-row[data-name="tool.calculator"] .span-hidden')).to_have_text("+1")
    page.get_by_role("button", name="Expand all").click()
    expect(page.locator('.span-row[data-name="calculator.eval"]')).to_have_count(1)

    page.click(f'tr[data-attempt-id="{seeded.showcase_attempt_ids[0]}"]')
    expect(page.locator('.span-row[data-name="agentlightning.exception"] .badge')).to_have_text("error")
    assert f"attempt={seeded.showcase_attempt_ids[0]}" in page.url


def test_rollout_detail_shows_triplets_and_drop_report(page: Page, server: StoreProcess, seeded: Seeded) -> None:
    page.goto(f"{server.url}/#/rollouts/{seeded.showcase_rollout_id}?tab=triplets")
    report = page.locator(".report")
    expect(report).to_contain_text("2 triplets from 3 LLM spans in 7 spans")
    expect(report).to_contain_text("inside_reward_span \u00d7 1")
    expect(page.locator(".drop-report")).to_contain_text("made while computing a reward")
    cards = page.locator("article.triplet")
    expect(cards).to_have_count(2)
    expect(cards.nth(0)).to_contain_text("prompt 42 tokens")
    expect(cards.nth(0)).to_contain_text("response 12 tokens")
    expect(cards.nth(0).locator(".role-user")).to_contain_text("A train travels 120 km")
    expect(cards.nth(1).locator(".triplet-reward")).to_contain_text("1.000")
    expect(cards.nth(1).locator(".role-tool")).to_contain_text("80")
    cards.nth(1).locator("summary").click()
    expect(cards.nth(1).locator(".token-row").nth(1)).to_contain_text("6000 6001 6002")
    shot(page, "rollout-triplets")


def test_rollout_page_shows_a_zero_llm_spans_notice(page: Page, server: StoreProcess, seeded: Seeded) -> None:
    flagged = seeded.rollout_ids["succeeded"][-1]
    current = server.api("GET", f"/rollouts/{flagged}").get("metadata") or {}
    metadata = {**current, "llm_spans": 0, "llm_spans_hint": "It was given LLM resource(s) 'llm' but no LLM call"}
    server.api("POST", f"/rollouts/{flagged}", json={"metadata": metadata})
    try:
        page.goto(f"{server.url}/#/rollouts/{flagged}")
        notice = page.locator(".zero-llm-spans")
        expect(notice).to_contain_text("Zero LLM spans")
        expect(notice).to_contain_text("no LLM call")
    finally:
        server.api("POST", f"/rollouts/{flagged}", json={"metadata": current or None})


# ---- resources, workers, training, settings ----


def test_resources_page_shows_templates_and_diff(page: Page, server: StoreProcess, seeded: Seeded) -> None:
    page.click('a[data-nav="resources"]')
    rows = page.locator("tr[data-resources-id]")
    expect(rows).to_have_count(2)
    latest, first = seeded.resources_ids[1], seeded.resources_ids[0]
    expect(rows.first).to_have_attribute("data-resources-id", latest)
    expect(rows.first).to_contain_text("latest")
    expect(page.locator("#resource-detail pre.template")).to_have_text(PROMPT_V2)
    extras = page.locator("#resource-detail .resource-extras")
    expect(extras).to_contain_text("val_score")
    expect(extras).to_contain_text("0.75")
    expect(extras).to_contain_text("[0]")
    diff = page.locator("#resource-diff")
    expect(diff.locator('[data-name="prompt"]')).to_have_attribute("data-state", "changed")
    expect(diff.locator('[data-name="llm"]')).to_have_attribute("data-state", "unchanged")
    expect(diff.locator(".diff-del")).to_contain_text(PROMPT_V1.split("\n")[0])
    expect(diff.locator(".diff-add").first).to_contain_text("You are a careful math tutor.")
    shot(page, "resources")

    rows.nth(1).click()
    expect(page.locator("#resource-detail pre.template")).to_have_text(PROMPT_V1)
    expect(page.locator("#resource-detail .resource-extras")).to_have_count(0)
    page.select_option('select[name="diff-before"]', latest)
    page.select_option('select[name="diff-after"]', first)
    expect(diff.locator(".diff-add")).to_contain_text("You are a helpful assistant.")


def test_workers_page_shows_heartbeats_and_stats(page: Page, seeded: Seeded) -> None:
    page.click('a[data-nav="workers"]')
    rows = page.locator("tr[data-worker-id]")
    expect(rows).to_have_count(4)
    for worker, status in seeded.workers.items():
        expect(page.locator(f'tr[data-worker-id="{worker}"] .badge')).to_have_text(status)
    busy = page.locator('tr[data-worker-id="runner-0"]')
    expect(busy).to_contain_text(seeded.rollout_ids["running"][0])
    expect(busy).to_contain_text("86%")
    expect(page.locator('tr[data-worker-id="runner-2"] .stale')).to_contain_text("ago")
    expect(page.locator('[data-filter="status"] [data-value="busy"] .chip-count')).to_have_text("1")
    shot(page, "workers")
    busy.click()
    expect(page.locator(".drawer")).to_contain_text("gpu-node-0")
    expect(page.locator(".drawer")).to_contain_text("of 16 cores")
    page.keyboard.press("Escape")
    page.click('[data-filter="status"] [data-value="idle"]')
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-worker-id", "runner-1")


def test_worker_filter_counts_match_the_rows_they_show(page: Page) -> None:
    """runner-3 last reported "idle" and went silent: its row, its chip and the filter all say offline."""
    page.click('a[data-nav="workers"]')
    expect(page.locator("tr[data-worker-id]")).to_have_count(4)
    chip = lambda status: page.locator(f'[data-filter="status"] [data-value="{status}"] .chip-count')  # noqa: E731
    expect(chip("idle")).to_have_text("1")
    expect(chip("offline")).to_have_text("1")
    for status in ("idle", "offline"):
        page.click(f'[data-filter="status"] [data-value="{status}"]')
        rows = page.locator("tr[data-worker-id]")
        expect(rows).to_have_count(1)
        expect(rows.first.locator(".badge")).to_have_text(status)
        page.click(f'[data-filter="status"] [data-value="{status}"]')  # off again


def test_a_failed_rollout_says_why_in_its_row_and_on_its_page(page: Page, seeded: Seeded) -> None:
    page.click('[data-filter="status"] [data-value="failed"]')
    failed = seeded.rollout_ids["failed"][0]
    row = page.locator(f'tr[data-rollout-id="{failed}"]')
    expect(row.locator(".row-error")).to_have_text("TimeoutError: tool call timed out after 10 s")
    row.locator("a").first.click()
    notice = page.locator(".failure-notice")
    expect(notice).to_contain_text("Attempt failed: TimeoutError: tool call timed out after 10 s")
    expect(page.locator('.span-row[data-name="agentlightning.exception"] .badge')).to_have_text("error")
    shot(page, "rollout-failed")
    page.goto(f"{page.url.split('#')[0]}#/rollouts/{seeded.showcase_rollout_id}")
    expect(page.locator(".span-row").first).to_be_visible()
    expect(page.locator(".failure-notice")).to_have_count(0)  # its latest attempt succeeded


def test_stat_cards_wrap_their_text_instead_of_cutting_it(browser: Browser, server: StoreProcess) -> None:
    tab, errors = _new_page(browser, {"refreshSeconds": 0})
    try:
        tab.set_viewport_size({"width": 900, "height": 900})
        tab.goto(f"{server.url}/#token={TOKEN}")
        tab.click('a[data-nav="training"]')
        expect(tab.locator('[data-stat="val"]')).to_contain_text("latest of 2 validations")
        clipped = tab.evaluate(
            """() => [...document.querySelectorAll('.stat-value, .stat-hint')]
                .filter((el) => el.scrollWidth > el.clientWidth + 1).map((el) => el.textContent)"""
        )
        assert clipped == []
        shot(tab, "training-narrow")
    finally:
        tab.context.close()
    assert errors == [], errors


def test_training_page_plots_rewards_and_throughput(page: Page, server: StoreProcess, seeded: Seeded) -> None:
    page.click('a[data-nav="training"]')
    finished = sum(len(seeded.rollout_ids.get(s, [])) for s in ("succeeded", "failed", "cancelled"))
    expect(page.locator('[data-stat="finished"] .stat-value')).to_have_text(str(finished))
    expect(page.locator('[data-stat="workers"] .stat-value')).to_have_text("1 busy")
    # The seed validates after each half of training: the card shows the latest round, not a pooled mean.
    expect(page.locator('[data-stat="val"]')).to_contain_text("latest of 2 validations")
    chart = page.locator("#reward-chart svg")
    train_points = sum(1 for rid, r in seeded.rewards.items() if seeded.modes[rid] == "train")
    val_points = sum(1 for rid, r in seeded.rewards.items() if seeded.modes[rid] == "val")
    expect(chart.locator(".series-train-raw circle")).to_have_count(train_points)
    expect(chart.locator('g[class*="series-val"][class$="-raw"] circle')).to_have_count(val_points)
    expect(chart.locator(".series-train path")).to_have_count(1)
    expect(page.locator("#throughput-chart svg rect")).not_to_have_count(0)
    versions = page.locator("#versions-table")
    for resources_id in seeded.resources_ids:
        expect(versions).to_contain_text(resources_id[:15])
    shot(page, "training")

    page.click('[data-axis="time"]')
    expect(page.locator("#reward-chart")).to_contain_text("finish time")
    page.click('[data-filter="mode"] [data-value="val"]')
    expect(chart.locator(".series-train-raw circle")).to_have_count(0)
    expect(page.locator('#reward-chart svg g[class*="series-val"][class$="-raw"] circle')).to_have_count(val_points)


def test_settings_page_saves_the_refresh_interval(page: Page) -> None:
    page.click('a[data-nav="settings"]')
    expect(page.locator("#server-info")).to_contain_text("SqliteLightningStore")
    page.select_option("#refresh-interval", "10")
    page.click("#settings-save")
    expect(page.locator("#settings-message")).to_contain_text("Saved. Connected to")
    stored = page.evaluate("JSON.parse(localStorage.getItem('agl.dashboard.settings')).refreshSeconds")
    assert stored == 10
    page.fill("#server-url", "not a url")
    page.click("#settings-save")
    expect(page.locator("#settings-message")).to_contain_text("is not an http(s) URL")
    shot(page, "settings")


# ---- auth, live refresh, connection ----


def test_login_form_accepts_only_the_right_token(browser: Browser, server: StoreProcess) -> None:
    tab, errors = _new_page(browser, {"refreshSeconds": 0})
    try:
        tab.goto(server.url + "/")
        dialog = tab.locator("#login")
        expect(dialog).to_be_visible()
        expect(tab.locator("#connection")).to_have_attribute("data-state", "unauthorized")
        shot(tab, "login")
        tab.fill("#token-input", "wrong-token")
        tab.click("#login-submit")
        expect(tab.locator("#login-error")).to_have_text("The server rejected this token.")
        tab.fill("#token-input", TOKEN)
        tab.click("#login-submit")
        expect(dialog).to_be_hidden()
        expect(tab.locator("tr[data-rollout-id]").first).to_be_visible()
        assert tab.evaluate("localStorage.getItem('agl.dashboard.token')") == TOKEN
    finally:
        tab.context.close()
    assert errors == [], errors


def test_auto_refresh_shows_new_rollouts_without_rebuilding_unchanged_rows(
    browser: Browser, server: StoreProcess
) -> None:
    tab, errors = _new_page(browser, {"refreshSeconds": 1})
    try:
        tab.goto(f"{server.url}/#token={TOKEN}")
        expect(tab.locator("tr[data-rollout-id]").first).to_be_visible()
        table = tab.locator("table.data").element_handle()
        for _ in range(2):  # two refreshes with unchanged data keep the very same table element
            with tab.expect_response(lambda r: "/dashboard/rollouts" in r.url):
                pass
        assert table is not None and table.evaluate("el => el.isConnected")

        created = server.api("POST", "/rollouts", json={"input": {"question": "live?"}, "mode": "test"})
        new_row = tab.locator(f'tr[data-rollout-id="{created["rollout_id"]}"]')
        expect(new_row).to_be_visible()
        expect(new_row.locator(".badge")).to_have_text("preparing")
    finally:
        tab.context.close()
    assert errors == [], errors


def test_connection_indicator_flips_when_the_server_stops(browser: Browser, server: StoreProcess) -> None:
    tab, errors = _new_page(browser, {"refreshSeconds": 1})
    try:
        tab.goto(f"{server.url}/#token={TOKEN}")
        indicator = tab.locator("#connection")
        expect(indicator).to_have_attribute("data-state", "connected")
        expect(tab.locator("tr[data-rollout-id]").first).to_be_visible()
        server.stop()
        expect(indicator).to_have_attribute("data-state", "disconnected")
        expect(indicator).to_have_text("Server unreachable")
        expect(tab.locator("#banner")).to_contain_text("Cannot reach the store server")
        expect(tab.locator("tr[data-rollout-id]").first).to_be_visible()  # the last data stays on screen
        shot(tab, "disconnected")
        server.start()
        expect(indicator).to_have_attribute("data-state", "connected")
        expect(tab.locator("#banner")).to_be_hidden()
    finally:
        tab.context.close()
        if server.process is None:
            server.start()
    assert errors == [], errors


def test_rollouts_show_their_run_and_filter_by_it(page: Page, server: StoreProcess) -> None:
    """Runs sharing the store (issue 40): a Run column, and a run filter listing the runs, the latest first."""
    runs = ["alpha.py 2026-12-02 10:00:00", "beta.py 2026-12-02 10:00:01"]
    requests = [{"input": {"n": i}, "metadata": {"agl_run": runs[i % 2]}} for i in range(4)]
    created = server.api("POST", "/queues/rollouts/enqueue", json={"rollouts": requests})
    of_beta = {r["rollout_id"] for r in created if r["metadata"]["agl_run"] == runs[1]}
    page.click('a[data-nav="workers"]')
    page.click('a[data-nav="rollouts"]')
    options = page.locator("#rollout-run option")
    expect(options.first).to_have_text("all runs")
    assert set(options.all_inner_texts()[1:3]) == set(runs)  # the latest first (these started together)
    page.select_option("#rollout-run", runs[1])
    assert set(wait_for_rows(page, 2)) == of_beta
    assert "run=beta.py" in page.url
    expect(page.locator("tr[data-rollout-id] .run-name").first).to_have_text(runs[1])
    shot(page, "rollouts-filtered-by-run")
    page.select_option("#rollout-run", "")
    wait_for_rows(page, 20)
