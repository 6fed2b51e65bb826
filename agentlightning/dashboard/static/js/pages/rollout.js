// One rollout: its task and config, its attempts, and for the chosen attempt the span tree and the
// triplets a trainer would extract (with the adapter's report of what it left out).

import * as api from "../api.js";
import { ago, badge, card, dataTable, elapsedSince, empty, errorBox, fmt, h, jsonView, modeTag, openDrawer, renderIfChanged, rewardCell, stat, tabs } from "../components.js";
import { spanDetails, spanWaterfall } from "../spantree.js";

const FINISHED_ATTEMPT = new Set(["succeeded", "failed", "timeout", "unresponsive"]);

export function createPage(ctx) {
  const rolloutId = ctx.params[0];
  ctx.setTitle(`Rollout ${rolloutId}`);
  const state = {
    attemptId: ctx.query.get("attempt") || null,
    tab: ctx.query.get("tab") === "triplets" ? "triplets" : "spans",
    collapsed: new Set(),
    selectedSpan: null,
  };
  let rollout = null;
  let attempts = [];
  let detail = null; // {key, spans, triplets, error}
  let serial = 0;

  const headerHolder = h("div");
  const attemptsHolder = h("div");
  const attemptHolder = h("div");
  const element = h(
    "div",
    { class: "page rollout-page" },
    h("div", { class: "breadcrumb" }, h("a", { href: "#/rollouts" }, "Rollouts"), h("span", {}, " / "), h("span", { class: "mono" }, rolloutId)),
    headerHolder,
    attemptsHolder,
    attemptHolder,
  );

  function selectedAttempt() {
    return attempts.find((a) => a.attempt_id === state.attemptId) || attempts[attempts.length - 1] || null;
  }

  function syncQuery() {
    const latest = attempts[attempts.length - 1];
    ctx.setQuery({ attempt: latest && state.attemptId === latest.attempt_id ? "" : state.attemptId, tab: state.tab === "spans" ? "" : state.tab });
  }

  function renderHeader() {
    const r = rollout;
    const attempt = selectedAttempt();
    // Running time from the first attempt's start: the wait in the queue before it is shown apart.
    const first = attempts[0];
    const began = first && first.start_time ? first.start_time : null;
    const duration = r.end_time ? r.end_time - (began || r.start_time) : null;
    const waited = began ? `waited ${fmt.duration(Math.max(0, began - r.start_time))} in the queue` : "in the queue";
    const finalReward = detail && detail.triplets ? detail.triplets.final_reward : undefined;
    const view = { r, attempts: attempts.length, finalReward };
    renderIfChanged(headerHolder, view, () =>
      card(
        null,
        h(
          "div",
          { class: "rollout-header" },
          h("div", { class: "title-row" }, h("h2", { class: "mono" }, r.rollout_id), badge(r.status), r.mode ? modeTag(r.mode) : null),
          h(
            "div",
            { class: "stats" },
            stat("Attempts", String(attempts.length), r.config ? `max ${r.config.max_attempts}` : ""),
            stat("Started", fmt.time(r.start_time), fmt.fullTime(r.start_time)),
            stat(
              "Duration",
              duration !== null ? fmt.duration(duration) : began ? elapsedSince(began, { suffix: "\u2026" }) : elapsedSince(r.start_time, { prefix: "waiting " }),
              r.end_time ? `ended ${fmt.time(r.end_time)}; ${waited}` : began ? `not finished; ${waited}` : "not started",
            ),
            stat("Final reward", finalReward === undefined ? "\u2026" : rewardCell(finalReward), attempt ? `attempt #${attempt.sequence_id}` : ""),
            stat("Resources", r.resources_id ? h("a", { href: `#/resources?id=${encodeURIComponent(r.resources_id)}`, class: "mono" }, fmt.short(r.resources_id, 16)) : "\u2014"),
          ),
          h(
            "div",
            { class: "rollout-io" },
            h("details", { open: true }, h("summary", {}, "Input"), jsonView(r.input)),
            h("details", {}, h("summary", {}, "Config"), jsonView(r.config)),
            r.metadata && Object.keys(r.metadata).length ? h("details", {}, h("summary", {}, "Metadata"), jsonView(r.metadata)) : null,
          ),
          r.metadata && r.metadata.llm_spans === 0
            ? h("div", { class: "notice zero-llm-spans" }, h("strong", {}, "Zero LLM spans: "), r.metadata.llm_spans_hint || "this rollout was given an LLM but no LLM call was captured.")
            : null,
        ),
      ),
    );
  }

  function renderAttempts() {
    const chosen = selectedAttempt();
    const view = { attempts, chosen: chosen && chosen.attempt_id };
    renderIfChanged(attemptsHolder, view, () =>
      card(
        `Attempts (${attempts.length})`,
        attempts.length
          ? dataTable({
              columns: [
                { key: "sequence_id", label: "#", render: (a) => `#${a.sequence_id}` },
                { key: "attempt_id", label: "Attempt", render: (a) => h("span", { class: "mono" }, a.attempt_id) },
                { key: "status", label: "Status", render: (a) => badge(a.status) },
                { key: "worker_id", label: "Worker", render: (a) => (a.worker_id ? h("span", { class: "mono small" }, a.worker_id) : h("span", { class: "muted" }, "\u2014")) },
                { key: "start_time", label: "Started", render: (a) => fmt.time(a.start_time) },
                { key: "duration", label: "Duration", class: "num", render: (a) => (a.end_time ? fmt.duration(a.end_time - a.start_time) : elapsedSince(a.start_time, { suffix: "\u2026" })) },
                { key: "last_heartbeat_time", label: "Last heartbeat", render: (a) => (a.last_heartbeat_time ? ago(a.last_heartbeat_time) : h("span", { class: "muted" }, "\u2014")) },
              ],
              rows: attempts,
              onRowClick: (a) => {
                state.attemptId = a.attempt_id;
                state.selectedSpan = null;
                state.collapsed = new Set();
                syncQuery();
                refresh();
              },
              rowAttrs: (a) => ({ class: ["clickable", chosen && a.attempt_id === chosen.attempt_id && "selected"], dataset: { attemptId: a.attempt_id } }),
            })
          : empty("No attempt yet.", "The rollout is waiting in the queue for a runner."),
      ),
    );
  }

  function openSpan(span) {
    state.selectedSpan = span.span_id;
    renderAttempt();
    openDrawer(span.name, spanDetails(span), { subtitle: `span ${span.span_id} \u00B7 sequence ${span.sequence_id}` });
  }

  function renderAttempt() {
    const attempt = selectedAttempt();
    if (!attempt) {
      attemptHolder.replaceChildren();
      attemptHolder.dataset.fingerprint = "";
      return;
    }
    const view = { detail, tab: state.tab, collapsed: [...state.collapsed], selected: state.selectedSpan };
    renderIfChanged(attemptHolder, view, () => {
      const nSpans = detail && detail.spans ? detail.spans.items.length : null;
      const nTriplets = detail && detail.triplets ? detail.triplets.triplets.length : null;
      const tabBar = tabs(
        [
          { key: "spans", label: `Span tree${nSpans !== null ? ` (${nSpans})` : ""}` },
          { key: "triplets", label: `Triplets${nTriplets !== null ? ` (${nTriplets})` : ""}` },
        ],
        state.tab,
        (tab) => {
          state.tab = tab;
          syncQuery();
          renderAttempt();
        },
      );
      let body;
      const failure = failureNotice(attempt);
      if (!detail) body = h("div", { class: "loading" }, "Loading\u2026");
      else if (detail.error) body = errorBox(detail.error);
      else if (state.tab === "spans") body = spansView();
      else body = tripletsView(detail.triplets, detail.spans.items);
      return card(`Attempt #${attempt.sequence_id}`, [failure, tabBar, h("div", { class: "tab-body" }, body)], h("span", { class: "mono small muted" }, attempt.attempt_id));
    });
  }

  // Why the attempt failed, on top of its card: the error the runner recorded (with the traceback one click
  // away), or how the store ended it. The exception span stays in the tree as well.
  function failureNotice(attempt) {
    if (!["failed", "timeout", "unresponsive"].includes(attempt.status)) return null;
    const spans = detail && detail.spans ? detail.spans.items : [];
    const exception = [...spans].reverse().find((s) => s.name === "agentlightning.exception");
    const attrs = exception ? exception.attributes || {} : {};
    const message = attrs["agentlightning.exception.summary"] || (attrs["exception.type"] ? `${attrs["exception.type"]}: ${String(attrs["exception.message"] || "").split("\n")[0]}` : null);
    let text = message;
    if (!text && attempt.status === "timeout") text = "the attempt ran past its RolloutConfig.timeout_seconds";
    if (!text && attempt.status === "unresponsive") text = "the runner stopped sending heartbeats (RolloutConfig.unresponsive_seconds)";
    if (!text) text = detail ? "no error was recorded" : "\u2026";
    return h(
      "div",
      { class: "notice failure-notice" },
      h("strong", {}, `Attempt ${attempt.status}: `),
      h("span", { class: "failure-text" }, text),
      attrs["exception.stacktrace"] ? h("details", {}, h("summary", {}, "Traceback"), h("pre", { class: "traceback" }, attrs["exception.stacktrace"])) : null,
    );
  }

  function spansView() {
    const items = detail.spans.items;
    if (!items.length) return empty("No spans recorded for this attempt.", "Spans appear as the agent runs (tracer, emit_* helpers, LLM calls).");
    const truncated = detail.spans.total > items.length ? h("div", { class: "notice" }, `Showing the first ${items.length} of ${detail.spans.total} spans.`) : null;
    const actions = h(
      "div",
      { class: "tree-actions" },
      h("button", { class: "btn small", onclick: () => ((state.collapsed = new Set()), renderAttempt()) }, "Expand all"),
      h("button", { class: "btn small", onclick: () => ((state.collapsed = new Set(items.filter((s) => items.some((c) => c.parent_id === s.span_id)).map((s) => s.span_id))), renderAttempt()) }, "Collapse all"),
      h("span", { class: "legend-inline" }, ["agent", "llm", "tool", "reward", "error", "other"].map((k) => h("span", { class: "legend-item" }, h("span", { class: ["kind-dot", `kind-${k}`] }), k))),
    );
    return [
      truncated,
      actions,
      spanWaterfall(items, {
        collapsed: state.collapsed,
        selected: state.selectedSpan,
        onSelect: openSpan,
        onToggle: (id) => {
          if (state.collapsed.has(id)) state.collapsed.delete(id);
          else state.collapsed.add(id);
          renderAttempt();
        },
      }),
    ];
  }

  function tripletsView(result, spans) {
    const report = result.report;
    const bySpan = new Map(spans.map((s) => [s.span_id, s]));
    const drops = Object.entries(report.drop_counts || {});
    const summary = h(
      "div",
      { class: ["report", report.n_llm_spans > 0 && report.n_triplets === 0 ? "report-bad" : report.dropped.length || report.unmatched_rewards.length ? "report-warn" : "report-ok"] },
      h(
        "div",
        { class: "report-line" },
        h("strong", {}, `${report.n_triplets} triplet${report.n_triplets === 1 ? "" : "s"}`),
        ` from ${report.n_llm_spans} LLM span${report.n_llm_spans === 1 ? "" : "s"} in ${report.n_spans} span${report.n_spans === 1 ? "" : "s"} (${result.adapter})`,
        report.n_reward_spans ? ` \u00B7 ${report.n_reward_spans} reward span${report.n_reward_spans === 1 ? "" : "s"}` : "",
      ),
      drops.length ? h("div", { class: "report-chips" }, "Not kept as triplets: ", drops.map(([reason, n]) => h("span", { class: "tag drop" }, `${reason} \u00D7 ${n}`))) : null,
      report.n_triplets_without_token_ids ? h("div", {}, `${report.n_triplets_without_token_ids} triplet(s) without token ids`) : null,
      report.warnings.map((w) => h("div", { class: "report-warning" }, w)),
    );
    const dropped = report.dropped.length
      ? h(
          "div",
          { class: "drop-report" },
          h("h3", {}, "Dropped or merged LLM spans"),
          dataTable({
            columns: [
              { key: "name", label: "Span", render: (d) => h("a", { href: "#", onclick: (e) => (e.preventDefault(), bySpan.has(d.span_id) && openSpan(bySpan.get(d.span_id))) }, d.name) },
              { key: "sequence_id", label: "Seq", class: "num" },
              { key: "reason", label: "Reason", render: (d) => h("span", { class: "tag drop" }, d.reason) },
              { key: "detail", label: "Detail", render: (d) => d.detail || (d.merged_into ? `merged into ${d.merged_into}` : "") },
            ],
            rows: report.dropped,
          }),
        )
      : null;
    const unmatched = report.unmatched_rewards.length
      ? h(
          "div",
          { class: "drop-report" },
          h("h3", {}, "Rewards not attached to any triplet"),
          dataTable({
            columns: [
              { key: "span_id", label: "Span", render: (u) => h("span", { class: "mono" }, u.span_id) },
              { key: "value", label: "Reward", class: "num", render: (u) => rewardCell(u.value) },
              { key: "detail", label: "Why" },
            ],
            rows: report.unmatched_rewards,
          }),
        )
      : null;
    const drift = report.token_drift.length
      ? h(
          "div",
          { class: "notice" },
          `Token drift: the prompt of turn(s) ${report.token_drift.map((d) => `${d.turn + 1} (${(d.cause || "other").replace("_", " ")})`).join(", ")} does not extend the previous turn's tokens, so trajectory training starts a new row there. Breaks by cause: ${Object.entries(report.break_counts || {}).map(([cause, count]) => `${cause.replace("_", " ")} ${count}`).join(", ")}.`,
        )
      : null;
    const cards = result.triplets.length
      ? result.triplets.map((t, i) => tripletCard(t, i, bySpan))
      : [empty("No triplets.", report.n_llm_spans ? "LLM spans were found but none became a triplet; see the report above." : "No LLM call was recorded in this attempt.")];
    return [summary, dropped, unmatched, drift, h("div", { class: "triplets" }, cards)];
  }

  function tripletCard(triplet, index, bySpan) {
    const meta = triplet.metadata || {};
    const promptIds = (triplet.prompt && triplet.prompt.token_ids) || [];
    const responseIds = (triplet.response && triplet.response.token_ids) || [];
    const span = bySpan.get(meta.span_id);
    return h(
      "article",
      { class: "triplet", dataset: { index } },
      h(
        "header",
        { class: "triplet-header" },
        h("strong", {}, `Turn ${index + 1}`),
        h("span", { class: "triplet-reward" }, "reward ", rewardCell(triplet.reward)),
        h("span", { class: "tag" }, `prompt ${promptIds.length} tokens`),
        h("span", { class: "tag" }, `response ${responseIds.length} tokens`),
        meta.agent_name ? h("span", { class: "tag mode-agent" }, `agent ${meta.agent_name}`) : null,
        span ? h("a", { href: "#", class: "triplet-span", onclick: (e) => (e.preventDefault(), openSpan(span)) }, `${meta.span_name || span.name} \u2197`) : null,
      ),
      h(
        "div",
        { class: "triplet-body" },
        h("div", { class: "triplet-side" }, h("h4", {}, "Prompt"), messagesView(triplet.prompt && triplet.prompt.raw_content)),
        h("div", { class: "triplet-side" }, h("h4", {}, "Response"), messagesView(triplet.response && triplet.response.raw_content)),
      ),
      h(
        "details",
        { class: "token-ids" },
        h("summary", {}, "Token ids"),
        h("div", { class: "token-row" }, h("span", { class: "muted" }, "prompt "), h("code", {}, promptIds.join(" ") || "none")),
        h("div", { class: "token-row" }, h("span", { class: "muted" }, "response "), h("code", {}, responseIds.join(" ") || "none")),
      ),
    );
  }

  async function loadDetail(attempt) {
    const key = `${attempt.attempt_id}|${attempt.status}|${attempt.end_time}`;
    // A finished attempt's spans no longer change: fetch them once.
    if (detail && detail.key === key && FINISHED_ATTEMPT.has(attempt.status) && !detail.error) return;
    try {
      const [spans, triplets] = await Promise.all([api.spans(rolloutId, attempt.attempt_id), api.triplets(rolloutId, attempt.attempt_id)]);
      detail = { key, spans, triplets };
    } catch (error) {
      if (!detail || detail.key !== key) detail = { key, error: { message: error.message } };
    }
  }

  async function refresh() {
    const mine = ++serial;
    try {
      const [r, a] = await Promise.all([api.rollout(rolloutId), api.attempts(rolloutId)]);
      if (mine !== serial) return;
      rollout = r;
      attempts = a.items;
      const attempt = selectedAttempt();
      if (detail && attempt && !detail.key.startsWith(`${attempt.attempt_id}|`)) detail = null;
      renderHeader();
      renderAttempts();
      if (attempt) {
        renderAttempt();
        await loadDetail(attempt);
        if (mine !== serial) return;
        renderHeader();
        renderAttempt();
      }
    } catch (error) {
      if (mine !== serial || rollout) return;
      const message = error.status === 404 ? `Rollout ${rolloutId} does not exist in this store.` : error.message;
      renderIfChanged(headerHolder, { error: message }, () => errorBox({ message }));
    }
  }

  return { element, refresh };
}

/** Chat messages (role + content) when the value looks like them, else JSON. */
function messagesView(value) {
  if (value === null || value === undefined) return h("div", { class: "muted" }, "Not recorded.");
  if (typeof value === "string") return h("pre", { class: "message-content" }, value);
  const list = Array.isArray(value) ? value : typeof value === "object" && Object.keys(value).every((k) => /^\d+$/.test(k)) ? Object.values(value) : null;
  if (!list) return jsonView(value);
  return h(
    "div",
    { class: "messages" },
    list.map((item) => {
      const message = item && typeof item === "object" && item.message ? item.message : item;
      if (!message || typeof message !== "object") return h("pre", { class: "message-content" }, String(message));
      const role = message.role || "message";
      const extra = message.tool_calls ? jsonView(message.tool_calls) : null;
      return h("div", { class: ["message", `role-${role}`] }, h("div", { class: "message-role" }, role), h("pre", { class: "message-content" }, contentText(message.content)), extra);
    }),
  );
}

function contentText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part && part.type === "text" ? part.text : part && part.type === "image_url" ? "[image]" : JSON.stringify(part))).join("\n");
  }
  return JSON.stringify(content, null, 2);
}
