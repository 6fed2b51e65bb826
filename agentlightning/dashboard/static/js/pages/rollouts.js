// Rollouts: every task the store knows, filtered by status, mode and run, searchable by id, sortable, paged.

import * as api from "../api.js";
import { badge, chips, dataTable, debounce, elapsedSince, empty, errorBox, fmt, h, modeTag, pagination, renderIfChanged, rewardCell } from "../components.js";

const STATUSES = ["queuing", "preparing", "running", "succeeded", "failed", "requeuing", "cancelled"];
const MODES = ["train", "val", "test"];
const SORTABLE = ["rollout_id", "status", "mode", "start_time", "end_time"];

function listParam(query, key, allowed) {
  return (query.get(key) || "").split(",").filter((v) => allowed.includes(v));
}

export function createPage(ctx) {
  ctx.setTitle("Rollouts");
  const q = ctx.query;
  const state = {
    status: listParam(q, "status", STATUSES),
    mode: listParam(q, "mode", MODES),
    run: q.get("run") || "", // "": every run
    search: q.get("q") || "",
    sortBy: SORTABLE.includes(q.get("sort")) ? q.get("sort") : "start_time",
    order: q.get("order") === "asc" ? "asc" : "desc",
    limit: Number(q.get("limit")) || Number(api.loadSettings().pageSize) || 20,
    offset: Math.max(0, Number(q.get("offset")) || 0),
  };
  let serial = 0;
  let data = null;

  const search = h("input", {
    type: "search",
    class: "search",
    id: "rollout-search",
    placeholder: "Search rollout id\u2026",
    value: state.search,
    "aria-label": "Search rollout id",
    oninput: debounce((e) => update({ search: e.target.value.trim(), offset: 0 }), 250),
  });
  const filters = h("div", { class: "filters" });
  const tableHolder = h("div", { class: "table-holder" });
  const pagerHolder = h("div", { class: "pager-holder" });
  const element = h(
    "div",
    { class: "page rollouts-page" },
    h("div", { class: "toolbar" }, search, filters),
    h("section", { class: "card" }, tableHolder, pagerHolder),
  );

  function update(changes) {
    Object.assign(state, changes);
    ctx.setQuery({
      status: state.status,
      mode: state.mode,
      run: state.run,
      q: state.search,
      sort: state.sortBy === "start_time" ? "" : state.sortBy,
      order: state.order === "desc" ? "" : state.order,
      offset: state.offset || "",
      limit: state.limit === Number(api.loadSettings().pageSize) ? "" : state.limit,
    });
    refresh();
  }

  // Runs that share the store (each `fit` tags its rollouts with its run name), the latest first.
  function runFilter(runs) {
    if (!runs.length) return null;
    const options = state.run && !runs.includes(state.run) ? [state.run, ...runs] : runs;
    return h(
      "label",
      { class: "chips" },
      h("span", { class: "chips-label" }, "Run"),
      h(
        "select",
        { id: "rollout-run", "aria-label": "Run", onchange: (e) => update({ run: e.target.value, offset: 0 }) },
        h("option", { value: "", selected: !state.run }, "all runs"),
        options.map((run) => h("option", { value: run, selected: run === state.run }, run)),
      ),
    );
  }

  function renderFilters(counts, runs) {
    renderIfChanged(filters, { counts, runs, status: state.status, mode: state.mode, run: state.run }, () =>
      h(
        "div",
        { class: "filter-row" },
        chips({ label: "Status", name: "status", options: STATUSES, selected: state.status, counts, onChange: (status) => update({ status, offset: 0 }) }),
        chips({ label: "Mode", name: "mode", options: MODES, selected: state.mode, onChange: (mode) => update({ mode, offset: 0 }) }),
        runFilter(runs),
      ),
    );
  }

  const columns = [
    {
      key: "rollout_id",
      label: "Rollout",
      sortable: true,
      render: (r) =>
        h("div", { class: "cell-main" }, h("a", { href: `#/rollouts/${encodeURIComponent(r.rollout_id)}`, class: "mono" }, r.rollout_id), h("div", { class: "cell-sub", title: r.input_preview }, r.input_preview)),
    },
    {
      key: "status",
      label: "Status",
      sortable: true,
      // A failed rollout says why, in its row: the error its latest attempt recorded.
      render: (r) => (r.error ? h("div", { class: "cell-main" }, badge(r.status), h("div", { class: "cell-sub row-error", title: r.error }, r.error)) : badge(r.status)),
    },
    { key: "mode", label: "Mode", sortable: true, render: (r) => modeTag(r.mode) },
    { key: "n_attempts", label: "Attempts", class: "num", render: (r) => (r.n_attempts ? String(r.n_attempts) : h("span", { class: "muted" }, "0")) },
    { key: "worker", label: "Worker", render: (r) => (r.latest_attempt && r.latest_attempt.worker_id ? h("span", { class: "mono small clip", title: r.latest_attempt.worker_id }, r.latest_attempt.worker_id) : h("span", { class: "muted" }, "\u2014")) },
    { key: "run", label: "Run", render: (r) => (r.run ? h("span", { class: "small run-name clip", title: r.run }, r.run) : h("span", { class: "muted" }, "\u2014")) },
    { key: "start_time", label: "Started", sortable: true, render: (r) => h("span", { title: fmt.fullTime(r.start_time) }, fmt.time(r.start_time)) },
    {
      key: "duration",
      label: "Duration",
      class: "num",
      // Running time: from the first attempt's start, so the wait in the queue is not counted (it is the tooltip).
      render: (r) => {
        const waited = r.queue_wait !== null && r.queue_wait !== undefined ? `; waited ${fmt.duration(r.queue_wait)} in the queue` : "";
        if (r.duration !== null) return h("span", { title: `ran ${fmt.duration(r.duration)}${waited}` }, fmt.duration(r.duration));
        if (r.status === "queuing" || r.status === "requeuing" || !r.run_started) {
          return elapsedSince(r.start_time, { prefix: "waiting ", attrs: { class: "muted", title: "time since enqueued" } });
        }
        return elapsedSince(r.run_started, { suffix: "\u2026", attrs: { class: "muted running-time", title: `running for${waited}` } });
      },
    },
    { key: "final_reward", label: "Final reward", class: "num", render: (r) => rewardCell(r.final_reward) },
  ];

  function render() {
    renderFilters(data.status_counts, data.runs || []);
    const view = { ...data, status_counts: undefined, runs: undefined, sortBy: state.sortBy, order: state.order };
    renderIfChanged(tableHolder, view, () =>
      data.total === 0 && !state.status.length && !state.mode.length && !state.run && !state.search
        ? empty("No rollouts yet.", "Rollouts appear here as soon as an algorithm enqueues them (Trainer.fit, store.enqueue_rollout).")
        : dataTable({
            columns,
            rows: data.items,
            sort: { by: state.sortBy, order: state.order },
            onSort: (key) => update({ sortBy: key, order: state.sortBy === key && state.order === "desc" ? "asc" : "desc", offset: 0 }),
            onRowClick: (r) => ctx.navigate(`#/rollouts/${encodeURIComponent(r.rollout_id)}`),
            rowAttrs: (r) => ({ dataset: { rolloutId: r.rollout_id, status: r.status } }),
            emptyText: "No rollout matches these filters.",
          }),
    );
    renderIfChanged(pagerHolder, { total: data.total, limit: state.limit, offset: state.offset }, () =>
      pagination({
        total: data.total,
        limit: state.limit,
        offset: state.offset,
        onChange: (offset) => update({ offset: Math.max(0, offset) }),
        onPageSize: (limit) => update({ limit, offset: 0 }),
      }),
    );
  }

  async function refresh() {
    const mine = ++serial;
    try {
      const result = await api.rollouts({
        status_in: state.status,
        mode_in: state.mode,
        run_in: state.run ? [state.run] : [],
        rollout_id_contains: state.search,
        sort_by: state.sortBy,
        sort_order: state.order,
        limit: state.limit,
        offset: state.offset,
      });
      if (mine !== serial) return;
      if (result.total > 0 && state.offset >= result.total) {
        update({ offset: Math.floor((result.total - 1) / state.limit) * state.limit });
        return;
      }
      data = result;
      render();
    } catch (error) {
      if (mine === serial && !data) renderIfChanged(tableHolder, { error: error.message }, () => errorBox(error));
    }
  }

  return { element, refresh };
}
