// Workers: every runner that sent a heartbeat, what it is doing, and the health stats it reported.

import * as api from "../api.js";
import { ago, badge, card, chips, dataTable, empty, errorBox, fmt, h, jsonView, kvTable, openDrawer, pagination, renderIfChanged } from "../components.js";

// The status the page shows (and filters and counts by): busy and idle only while heartbeats arrive.
const STATUSES = ["busy", "idle", "offline", "unknown"];
const STALE_SECONDS = 60;

function stats(worker) {
  return worker.heartbeat_stats || {};
}

function usage(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "\u2014");
  const pct = Math.max(0, Math.min(100, Number(value)));
  return h("div", { class: "meter", title: `${pct.toFixed(1)}%` }, h("div", { class: ["meter-fill", pct > 90 ? "hot" : pct > 70 ? "warm" : ""], style: { width: `${pct}%` } }), h("span", {}, fmt.percent(pct)));
}

// The store keeps a worker's last status after its process ends; the server reads silence as offline.
function shownStatus(worker) {
  return worker.shown_status || worker.status;
}

function heartbeat(worker) {
  if (!worker.last_heartbeat_time) return h("span", { class: "muted" }, "never");
  return ago(worker.last_heartbeat_time, { staleAfter: STALE_SECONDS, attrs: { class: "heartbeat", title: fmt.fullTime(worker.last_heartbeat_time) } });
}

function workerDetails(worker) {
  const s = stats(worker);
  const gpus = Array.isArray(s.gpus) ? s.gpus : [];
  return h(
    "div",
    {},
    kvTable([
      ["Status", shownStatus(worker) === worker.status ? badge(worker.status) : [badge("offline"), ` (last reported ${worker.status})`]],
      ["Last heartbeat", worker.last_heartbeat_time ? `${fmt.age(worker.last_heartbeat_time)} (${fmt.fullTime(worker.last_heartbeat_time)})` : "never"],
      ["Current rollout", worker.current_rollout_id ? h("a", { href: `#/rollouts/${encodeURIComponent(worker.current_rollout_id)}` }, worker.current_rollout_id) : "\u2014"],
      ["Current attempt", worker.current_attempt_id || "\u2014"],
      ["Last dequeue", worker.last_dequeue_time ? fmt.age(worker.last_dequeue_time) : "\u2014"],
      ["Last busy", worker.last_busy_time ? fmt.age(worker.last_busy_time) : "\u2014"],
      ["Last idle", worker.last_idle_time ? fmt.age(worker.last_idle_time) : "\u2014"],
      ["Host", s.hostname || "\u2014"],
      ["CPU", s.cpu ? `${fmt.percent(s.cpu.usage_percent)} of ${s.cpu.logical_cores} cores` : "\u2014"],
      ["Memory", s.memory ? `${fmt.percent(s.memory.usage_percent)} (${fmt.bytes(s.memory.used_bytes)} of ${fmt.bytes(s.memory.total_bytes)})` : "\u2014"],
      ["Process", s.process ? `pid ${s.process.pid}, ${fmt.bytes(s.process.rss_bytes)} RSS, ${s.process.num_threads} threads` : "\u2014"],
      ...gpus.map((g) => [`GPU ${g.index}`, `${g.name}: ${fmt.percent(g.utilization_percent)} util, ${g.memory_used_mb}/${g.memory_total_mb} MB`]),
    ]),
    h("h3", {}, "Heartbeat stats"),
    worker.heartbeat_stats ? jsonView(worker.heartbeat_stats) : h("div", { class: "muted" }, "No stats reported."),
  );
}

export function createPage(ctx) {
  ctx.setTitle("Workers");
  const state = { status: [], offset: 0, limit: Number(api.loadSettings().pageSize) || 20 };
  let data = null;
  let counts = null;
  let serial = 0;
  const filterHolder = h("div", { class: "toolbar" });
  const tableHolder = h("div");
  const element = h("div", { class: "page workers-page" }, filterHolder, tableHolder);

  const columns = [
    { key: "worker_id", label: "Worker", render: (w) => h("span", { class: "mono" }, w.worker_id) },
    { key: "status", label: "Status", render: (w) => badge(shownStatus(w)) },
    { key: "last_heartbeat_time", label: "Heartbeat", render: heartbeat },
    {
      key: "current_rollout_id",
      label: "Current rollout",
      render: (w) => (w.current_rollout_id ? h("a", { href: `#/rollouts/${encodeURIComponent(w.current_rollout_id)}`, class: "mono" }, w.current_rollout_id) : h("span", { class: "muted" }, "\u2014")),
    },
    { key: "cpu", label: "CPU", render: (w) => usage(stats(w).cpu && stats(w).cpu.usage_percent) },
    { key: "memory", label: "Memory", render: (w) => usage(stats(w).memory && stats(w).memory.usage_percent) },
    { key: "host", label: "Host", render: (w) => stats(w).hostname || h("span", { class: "muted" }, "\u2014") },
    { key: "last_dequeue_time", label: "Last dequeue", render: (w) => (w.last_dequeue_time ? ago(w.last_dequeue_time) : h("span", { class: "muted" }, "\u2014")) },
  ];

  function render() {
    renderIfChanged(filterHolder, { counts, status: state.status }, () =>
      chips({
        label: "Status",
        name: "status",
        options: STATUSES,
        selected: state.status,
        counts,
        onChange: (status) => {
          state.status = status;
          state.offset = 0;
          refresh();
        },
      }),
    );
    renderIfChanged(tableHolder, data, () =>
      card(
        null,
        data.total === 0 && !state.status.length
          ? empty("No workers yet.", "Runners register here with their first heartbeat (store.update_worker).")
          : [
              dataTable({
                columns,
                rows: data.items,
                onRowClick: (w) => openDrawer(`Worker ${w.worker_id}`, workerDetails(w)),
                rowAttrs: (w) => ({ dataset: { workerId: w.worker_id } }),
                emptyText: "No worker has this status.",
              }),
              pagination({ total: data.total, limit: state.limit, offset: state.offset, onChange: (offset) => ((state.offset = Math.max(0, offset)), refresh()) }),
            ],
      ),
    );
  }

  async function refresh() {
    const mine = ++serial;
    try {
      const [result] = await Promise.all([
        api.dashboardWorkers({ status_in: state.status, sort_by: "worker_id", sort_order: "asc", limit: state.limit, offset: state.offset }),
      ]);
      if (mine !== serial) return;
      data = result;
      counts = result.status_counts;
      render();
    } catch (error) {
      if (mine === serial && !data) renderIfChanged(tableHolder, { error: error.message }, () => errorBox(error));
    }
  }

  return { element, refresh };
}
