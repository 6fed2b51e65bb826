// Training: how rewards evolve (train / val, by rollout index or time), how fast rollouts finish, and the
// mean reward of each resources version (each prompt an optimizer tried). Runs sharing the store (each
// `fit` tags its rollouts with its run name) are shown one at a time: the latest, or the one picked.
// GRPO / RFT also publish where each step's generated tokens went (trained, discarded by reason, in flight)
// and the staleness of the samples it trained on: the "Tokens per step" card.

import * as api from "../api.js";
import { card, chips, dataTable, empty, errorBox, fmt, h, modeTag, renderIfChanged, rewardCell, stat } from "../components.js";
import { lineChart, stackedBarChart } from "../charts.js";

const MODES = ["train", "val", "test"];
const COLORS = { train: "#2563eb", val: "#ea580c", test: "#16a34a", none: "#64748b" };
const SMOOTHING = [1, 5, 10, 20, 50];

function movingAverage(points, window) {
  if (window <= 1) return points;
  const out = [];
  let sum = 0;
  for (let i = 0; i < points.length; i += 1) {
    sum += points[i].y;
    if (i >= window) sum -= points[i - window].y;
    const n = Math.min(i + 1, window);
    out.push({ x: points[i].x, y: sum / n, title: `${points[i].label}: mean of last ${n} = ${fmt.reward(sum / n)}` });
  }
  return out;
}

// The points of a mode as separate passes: validation and test rollouts of different resources (a greedy and
// a sampled pass, two prompts) are never averaged together, so each resources id is its own series when a
// few are; with more (a prompt search), one series per mode. Training stays one series: its resources change
// as the policy does. `[[resourcesId or null, points]]`.
const MAX_PASSES = 4;
function passesOf(mode, points) {
  if (mode === "train") return points.length ? [[null, points]] : [];
  const byResources = new Map();
  for (const p of points) {
    const id = p.resources_id || "";
    if (!byResources.has(id)) byResources.set(id, []);
    byResources.get(id).push(p);
  }
  if (byResources.size <= 1 || byResources.size > MAX_PASSES) return points.length ? [[null, points]] : [];
  return [...byResources.entries()].map(([id, list]) => [id || "no resources", list]);
}

// Runs among the points, the most recently active first; "" stands for rollouts no run tagged.
function runsOf(points) {
  const last = new Map();
  for (const p of points) last.set(p.run || "", Math.max(last.get(p.run || "") || 0, p.end_time));
  return [...last.entries()].sort((a, b) => b[1] - a[1]).map(([run]) => run);
}

// A step's discard reasons with tokens, largest first: "tied 120 · truncated 40".
function discardsOf(step) {
  return Object.keys(step)
    .filter((k) => k.startsWith("tokens/discarded/") && step[k] > 0)
    .map((k) => [k.slice("tokens/discarded/".length), step[k]])
    .sort((a, b) => b[1] - a[1]);
}

// A step's staleness histogram (samples by how many updates behind the learner their policy was), as bars.
function stalenessCell(step) {
  const bins = Object.keys(step)
    .filter((k) => k.startsWith("staleness_"))
    .map((k) => [Number(k.slice("staleness_".length)), step[k]])
    .sort((a, b) => a[0] - b[0]);
  if (!bins.length) return h("span", { class: "muted" }, "\u2014");
  const most = Math.max(...bins.map(([, n]) => n), 1);
  return h(
    "span",
    { class: "staleness-bars", title: bins.map(([behind, n]) => `${n} samples ${behind} updates behind`).join("\n") },
    bins.map(([behind, n]) =>
      h("span", { class: "staleness-bin", dataset: { behind } }, h("span", { class: "staleness-bar", style: `height:${Math.max(2, (n / most) * 16)}px` }), `${behind}:${fmt.number(n)}`),
    ),
  );
}

function mean(values) {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
}

export function createPage(ctx) {
  ctx.setTitle("Training");
  const q = ctx.query;
  const state = {
    axis: q.get("x") === "time" ? "time" : "index",
    smoothing: SMOOTHING.includes(Number(q.get("smooth"))) ? Number(q.get("smooth")) : 10,
    modes: (q.get("mode") || "").split(",").filter((m) => MODES.includes(m)),
    run: q.get("run"), // null: follow the latest run; "all": every run merged
  };
  let data = null;
  let serial = 0;
  const statsHolder = h("div");
  const controlsHolder = h("div", { class: "toolbar" });
  const rewardHolder = h("div");
  const throughputHolder = h("div");
  const versionsHolder = h("div");
  const tokensHolder = h("div");
  const element = h("div", { class: "page training-page" }, statsHolder, controlsHolder, rewardHolder, throughputHolder, tokensHolder, versionsHolder);

  function update(changes) {
    Object.assign(state, changes);
    ctx.setQuery({ x: state.axis === "time" ? "time" : "", smooth: state.smoothing === 10 ? "" : state.smoothing, mode: state.modes, run: state.run || "" });
    render();
  }

  // The run shown: the one picked, else the latest; null shows every run merged.
  function chosenRun() {
    const runs = runsOf(data.rewards.items);
    if (state.run === "all" || runs.length === 0) return null;
    return state.run !== null && runs.includes(state.run) ? state.run : runs[0];
  }

  function inRun(points) {
    const run = chosenRun();
    return run === null ? points : points.filter((p) => (p.run || "") === run);
  }

  function rewarded(points) {
    return points.filter((p) => p.final_reward !== null && p.final_reward !== undefined);
  }

  function renderStats() {
    const counts = data.overview.rollouts_by_status;
    const finished = counts.succeeded + counts.failed + counts.cancelled;
    const byMode = (mode) => rewarded(inRun(data.rewards.items).filter((p) => p.mode === mode)).map((p) => p.final_reward);
    const train = byMode("train");
    const val = byMode("val");
    const recent = data.throughput.buckets.slice(-10);
    const recentCount = recent.reduce((sum, b) => sum + b.succeeded + b.failed + b.cancelled, 0);
    const perMinute = recent.length ? (recentCount / (recent.length * data.throughput.bucket_seconds)) * 60 : null;
    // Workers that stopped sending heartbeats (e.g. after the run ended) count as offline, not idle.
    const live = data.overview.live_workers_by_status || data.overview.workers_by_status;
    const workers = { busy: live.busy, idle: live.idle, offline: data.overview.workers_offline || 0, unknown: data.overview.workers_by_status.unknown };
    // Validation rounds are compared, never pooled: the card shows the latest round and the first for reference.
    const rounds = inRun(data.rewards.val_rounds || []).filter((r) => r.mean_reward !== null);
    const latest = rounds.length ? rounds[rounds.length - 1] : null;
    const valHint = !latest
      ? "no val rewards"
      : rounds.length > 1
        ? `latest of ${rounds.length} validations (${latest.rewarded} rollouts) \u00B7 first ${fmt.reward(rounds[0].mean_reward)}`
        : `one validation (${latest.rewarded} rollouts)`;
    const view = { counts, train: mean(train.slice(-50)), val: latest ? latest.mean_reward : null, valHint, perMinute, workers, nTrain: train.length, nVal: val.length };
    renderIfChanged(statsHolder, view, () =>
      h(
        "div",
        { class: "stats stat-cards" },
        stat("Finished rollouts", fmt.number(finished), finished ? `${fmt.number((counts.succeeded / finished) * 100, 0)}% succeeded \u00B7 ${counts.failed} failed` : "none yet", { dataset: { stat: "finished" } }),
        stat("In flight", fmt.number(counts.running + counts.preparing), `${fmt.number(counts.queuing + counts.requeuing)} queued`, { dataset: { stat: "inflight" } }),
        stat("Train reward", view.train === null ? "\u2014" : fmt.reward(view.train), view.nTrain ? `mean of last ${Math.min(50, view.nTrain)} of ${view.nTrain}` : "no train rewards", { dataset: { stat: "train" } }),
        stat("Val reward", view.val === null ? "\u2014" : fmt.reward(view.val), view.valHint, { dataset: { stat: "val" } }),
        stat("Throughput", perMinute === null ? "\u2014" : `${fmt.number(perMinute, 1)}/min`, "recently finished", { dataset: { stat: "throughput" } }),
        stat("Workers", `${workers.busy} busy`, `${workers.idle} idle \u00B7 ${workers.offline} offline \u00B7 ${workers.unknown} unknown`, { dataset: { stat: "workers" } }),
      ),
    );
  }

  function runSelect() {
    const runs = runsOf(data.rewards.items);
    if (runs.length < 2) return null;
    const chosen = chosenRun();
    return h(
      "label",
      { class: "inline-select" },
      "Run ",
      h(
        "select",
        { id: "run-select", onchange: (e) => update({ run: e.target.value }) },
        runs.map((run, i) => h("option", { value: run, selected: run === chosen }, `${run || "rollouts of no run"}${i === 0 ? " (latest)" : ""}`)),
        h("option", { value: "all", selected: chosen === null }, `all ${runs.length} runs, merged`),
      ),
    );
  }

  function renderControls() {
    renderIfChanged(controlsHolder, { ...state, runs: runsOf(data.rewards.items), chosen: chosenRun() }, () =>
      h(
        "div",
        { class: "filter-row" },
        runSelect(),
        chips({ label: "Mode", name: "mode", options: MODES, selected: state.modes, onChange: (modes) => update({ modes }) }),
        h(
          "div",
          { class: "segmented", role: "group", "aria-label": "X axis" },
          h("span", { class: "chips-label" }, "X axis"),
          ["index", "time"].map((axis) =>
            h("button", { class: ["chip", state.axis === axis && "active"], dataset: { axis }, onclick: () => update({ axis }) }, axis === "index" ? "Rollout index" : "Time"),
          ),
        ),
        h(
          "label",
          { class: "inline-select" },
          "Smoothing ",
          h(
            "select",
            { id: "smoothing", onchange: (e) => update({ smoothing: Number(e.target.value) }) },
            SMOOTHING.map((n) => h("option", { value: n, selected: n === state.smoothing }, n === 1 ? "off" : `${n} rollouts`)),
          ),
        ),
      ),
    );
  }

  function renderRewards() {
    const modes = state.modes.length ? state.modes : MODES;
    const series = [];
    for (const mode of modes) {
      const ofMode = rewarded(inRun(data.rewards.items).filter((p) => (p.mode || "none") === mode));
      passesOf(mode, ofMode).forEach(([resourcesId, passPoints], pass) => {
        const name = resourcesId === null ? mode : `${mode} \u00b7 ${resourcesId}`;
        const key = resourcesId === null ? mode : `${mode}-${resourcesId}`;
        const points = passPoints.map((p, i) => ({
          x: state.axis === "index" ? i + 1 : p.end_time,
          y: p.final_reward,
          label: `${name} #${i + 1}`,
          title: `${p.rollout_id} (${name} #${i + 1})\nreward ${fmt.reward(p.final_reward)}\nfinished ${fmt.time(p.end_time)}`,
        }));
        const dashed = pass > 0;
        series.push({ key: `${key}-raw`, name: `${name} (each rollout)`, color: COLORS[mode], points, style: "points", legend: state.smoothing > 1 });
        series.push({ key, name: state.smoothing > 1 ? `${name} (moving average)` : name, color: COLORS[mode], points: movingAverage(points, state.smoothing), dots: state.smoothing <= 1, dashed });
      });
    }
    const view = { series: series.map((s) => [s.key, s.points.length, s.points.at(-1)]), axis: state.axis, smoothing: state.smoothing, total: data.rewards.total, run: chosenRun() };
    renderIfChanged(rewardHolder, view, () =>
      card(
        "Reward",
        lineChart({
          series,
          height: 300,
          xLabel: state.axis === "index" ? "rollout index (per mode, in finishing order)" : "finish time",
          yLabel: "final reward",
          xFormat: state.axis === "index" ? (x) => fmt.number(x) : (x) => fmt.time(x),
          xInteger: state.axis === "index",
          emptyText: "No finished rollout has a reward yet. Rewards come from emit_reward or a float returned by the agent.",
        }),
        h("span", { class: "muted small" }, data.rewards.total > data.rewards.items.length ? `latest ${data.rewards.items.length} of ${data.rewards.total} finished rollouts` : `${data.rewards.total} finished rollouts`),
        { id: "reward-chart" },
      ),
    );
  }

  function renderThroughput() {
    const t = data.throughput;
    renderIfChanged(throughputHolder, t, () =>
      card(
        "Throughput",
        stackedBarChart({
          buckets: t.buckets.map((b) => ({ x: b.start, label: `${fmt.time(b.start)} (+${fmt.duration(t.bucket_seconds)})`, values: b })),
          stacks: [
            { key: "succeeded", name: "succeeded", color: "#16a34a" },
            { key: "failed", name: "failed", color: "#dc2626" },
            { key: "cancelled", name: "cancelled", color: "#94a3b8" },
          ],
          xFormat: (x) => fmt.time(x),
          height: 200,
          yLabel: "rollouts",
          xLabel: `finished per ${fmt.duration(t.bucket_seconds)}`,
          emptyText: "No rollout has finished yet.",
        }),
        null,
        { id: "throughput-chart" },
      ),
    );
  }

  function renderVersions() {
    const groups = new Map();
    for (const p of rewarded(inRun(data.rewards.items))) {
      const key = `${p.resources_id || "none"}|${p.mode || "none"}`;
      if (!groups.has(key)) groups.set(key, { resources_id: p.resources_id, mode: p.mode, rewards: [], first: p.end_time, last: p.end_time });
      const g = groups.get(key);
      g.rewards.push(p.final_reward);
      g.last = Math.max(g.last, p.end_time);
      g.first = Math.min(g.first, p.end_time);
    }
    const rows = [...groups.values()].sort((a, b) => a.first - b.first).map((g) => ({ ...g, n: g.rewards.length, mean: mean(g.rewards) }));
    renderIfChanged(versionsHolder, rows, () =>
      card(
        "Reward by resources version",
        rows.length
          ? dataTable({
              columns: [
                { key: "resources_id", label: "Resources", render: (g) => (g.resources_id ? h("a", { href: `#/resources?id=${encodeURIComponent(g.resources_id)}`, class: "mono" }, fmt.short(g.resources_id, 15)) : h("span", { class: "muted" }, "none")) },
                { key: "mode", label: "Mode", render: (g) => modeTag(g.mode) },
                { key: "n", label: "Rollouts", class: "num" },
                { key: "mean", label: "Mean reward", class: "num", render: (g) => rewardCell(g.mean) },
                { key: "last", label: "Last finished", render: (g) => fmt.time(g.last) },
              ],
              rows,
            })
          : empty("No rewards yet."),
        null,
        { id: "versions-table" },
      ),
    );
  }

  function renderTokens() {
    const report = data.tokens || { steps: [] };
    const rows = [...report.steps].reverse(); // latest step first
    renderIfChanged(tokensHolder, report, () =>
      rows.length
        ? card(
            `Tokens per step (${report.algorithm || "algorithm"})`,
            dataTable({
              columns: [
                { key: "step", label: "Step", class: "num" },
                { key: "tokens/generated", label: "Generated", class: "num", render: (s) => fmt.number(s["tokens/generated"]) },
                { key: "tokens/trained", label: "Trained", class: "num", render: (s) => fmt.number(s["tokens/trained"]) },
                { key: "tokens/discarded", label: "Discarded", class: "num", render: (s) => fmt.number(s["tokens/discarded"]) },
                { key: "reasons", label: "Discarded by reason", render: (s) => discardsOf(s).map(([reason, n]) => `${reason} ${fmt.number(n)}`).join(" \u00B7 ") || "\u2014" },
                { key: "tokens/in_flight", label: "In flight (end)", class: "num", render: (s) => fmt.number(s["tokens/in_flight"]) },
                { key: "staleness", label: "Staleness (updates behind: samples)", render: stalenessCell },
                {
                  key: "tokens/unaccounted",
                  label: "Closes",
                  render: (s) => (s["tokens/unaccounted"] === 0 ? h("span", { class: "ok" }, "\u2713") : h("span", { class: "bad", title: "generated \u2260 trained + discarded + \u0394 in flight" }, `\u2717 ${fmt.number(s["tokens/unaccounted"])}`)),
                },
              ],
              rows,
            }),
            h("span", { class: "muted small" }, "generated = trained + discarded + (in flight at the end \u2212 at the start), checked by the algorithm every step"),
            { id: "tokens-table" },
          )
        : h("div"),
    );
  }

  function render() {
    if (!data) return;
    renderStats();
    renderControls();
    renderRewards();
    renderThroughput();
    renderTokens();
    renderVersions();
  }

  async function refresh() {
    const mine = ++serial;
    try {
      const [overview, rewards, throughput, tokens] = await Promise.all([
        api.overview(),
        api.rewards({ limit: 2000 }),
        api.throughput({ limit: 2000 }),
        api.tokens().catch(() => ({ steps: [] })), // an older store server has no token report
      ]);
      if (mine !== serial) return;
      data = { overview, rewards, throughput, tokens };
      render();
    } catch (error) {
      if (mine === serial && !data) renderIfChanged(statsHolder, { error: error.message }, () => errorBox(error));
    }
  }

  return { element, refresh };
}
