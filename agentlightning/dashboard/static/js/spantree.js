// The span tree of one attempt as a waterfall: parent/child rows with timing bars, and a detail view.

import { fmt, h, jsonView, kvTable } from "./components.js";

const REWARD_VALUE_KEY = "agentlightning.reward.0.value";

/** Primary reward carried by a span, or null (same conventions as agentlightning.emitter.reward). */
export function rewardOf(span) {
  const attrs = span.attributes || {};
  if (typeof attrs[REWARD_VALUE_KEY] === "number") return attrs[REWARD_VALUE_KEY];
  if ((span.name === "agentlightning.reward" || span.name === "agentlightning.annotation") && typeof attrs.reward === "number") {
    return attrs.reward;
  }
  return null;
}

/** What a span is, for its colour: reward, llm, error, agent, tool or other. */
export function spanKind(span) {
  if (rewardOf(span) !== null) return "reward";
  if (span.name === "agentlightning.exception" || (span.status && span.status.status_code === "ERROR")) return "error";
  const attrs = span.attributes || {};
  const keys = Object.keys(attrs);
  if (keys.some((k) => k.startsWith("gen_ai.") || k.startsWith("llm.")) || /openai|chat\.completion|llm|litellm/i.test(span.name)) {
    return "llm";
  }
  if (span.name.startsWith("agentlightning.")) return "other"; // messages, objects, operations
  if (/tool/i.test(span.name) || keys.some((k) => k.startsWith("tool."))) return "tool";
  if (/(^|[._\s])agent([._\s]|$)/i.test(span.name) || "agent.name" in attrs) return "agent";
  return "other";
}

/** Roots of the parent/child forest (spans whose parent is unknown are roots; cycles are broken). */
export function buildTree(spans) {
  const nodes = new Map(spans.map((span) => [span.span_id, { span, children: [], depth: 0 }]));
  const roots = [];
  for (const node of nodes.values()) {
    const parent = node.span.parent_id ? nodes.get(node.span.parent_id) : null;
    if (parent && parent !== node) parent.children.push(node);
    else roots.push(node);
  }
  const order = (a, b) => (a.span.start_time ?? 0) - (b.span.start_time ?? 0) || a.span.sequence_id - b.span.sequence_id;
  const seen = new Set();
  const visit = (node, depth) => {
    seen.add(node);
    node.depth = depth;
    node.children.sort(order);
    node.children = node.children.filter((child) => !seen.has(child));
    node.children.forEach((child) => visit(child, depth + 1));
  };
  roots.sort(order).forEach((root) => visit(root, 0));
  for (const node of nodes.values()) {
    if (!seen.has(node)) {
      roots.push(node); // part of a parent cycle: show it at the top level
      visit(node, 0);
    }
  }
  return roots;
}

function timeWindow(spans) {
  const starts = spans.map((s) => s.start_time).filter(Number.isFinite);
  const ends = spans.map((s) => s.end_time ?? s.start_time).filter(Number.isFinite);
  if (!starts.length) return [0, 1];
  const start = Math.min(...starts);
  const end = Math.max(...ends, start + 1e-3);
  return [start, end];
}

/**
 * The waterfall. state: {collapsed: Set of span ids, selected: span id}; onSelect(span); onToggle(spanId).
 */
export function spanWaterfall(spans, { collapsed, selected, onSelect, onToggle }) {
  const roots = buildTree(spans);
  const [t0, t1] = timeWindow(spans);
  const total = t1 - t0;
  const rows = [];
  const walk = (node) => {
    const { span } = node;
    const kind = spanKind(span);
    const reward = rewardOf(span);
    const start = span.start_time ?? t0;
    const end = span.end_time ?? start;
    const left = ((start - t0) / total) * 100;
    const width = Math.max(0.4, ((end - start) / total) * 100);
    const isCollapsed = collapsed.has(span.span_id);
    const hasChildren = node.children.length > 0;
    rows.push(
      h(
        "div",
        {
          class: ["span-row", `kind-${kind}`, selected === span.span_id && "selected"],
          role: "treeitem",
          "aria-level": node.depth + 1,
          "aria-expanded": hasChildren ? String(!isCollapsed) : null,
          dataset: { spanId: span.span_id, name: span.name, depth: node.depth },
          onclick: () => onSelect(span),
        },
        h(
          "div",
          { class: "span-label", style: { paddingLeft: `${8 + node.depth * 18}px` } },
          hasChildren
            ? h(
                "button",
                {
                  class: "caret",
                  "aria-label": isCollapsed ? "Expand" : "Collapse",
                  onclick: (event) => {
                    event.stopPropagation();
                    onToggle(span.span_id);
                  },
                },
                isCollapsed ? "\u25B8" : "\u25BE",
              )
            : h("span", { class: "caret-spacer" }),
          h("span", { class: ["kind-dot", `kind-${kind}`], title: kind }),
          h("span", { class: "span-name", title: span.name }, span.name),
          hasChildren && isCollapsed && h("span", { class: "span-hidden" }, `+${countDescendants(node)}`),
          reward !== null && h("span", { class: "span-reward" }, `reward ${fmt.reward(reward)}`),
          span.status && span.status.status_code === "ERROR" && h("span", { class: "badge status-failed small" }, "error"),
        ),
        h(
          "div",
          { class: "span-timeline" },
          h("div", { class: ["span-bar", `kind-${kind}`], style: { left: `${left}%`, width: `${Math.min(width, 100 - left)}%` }, title: `${fmt.duration(end - start)} (starts +${fmt.duration(start - t0)})` }),
        ),
        h("div", { class: "span-duration" }, fmt.duration(end - start)),
      ),
    );
    if (!isCollapsed) node.children.forEach(walk);
  };
  roots.forEach(walk);
  const header = h(
    "div",
    { class: "span-row span-header" },
    h("div", { class: "span-label" }, `Span (${spans.length})`),
    h("div", { class: "span-timeline span-axis" }, [0, 0.25, 0.5, 0.75, 1].map((f) => h("span", { style: { left: `${f * 100}%` } }, fmt.duration(f * total)))),
    h("div", { class: "span-duration" }, "Duration"),
  );
  return h("div", { class: "waterfall", role: "tree", "aria-label": "Span tree" }, header, rows);
}

function countDescendants(node) {
  return node.children.reduce((sum, child) => sum + 1 + countDescendants(child), 0);
}

/** Everything about one span, for the drawer. */
export function spanDetails(span) {
  const status = span.status || {};
  const attrs = span.attributes || {};
  const keys = Object.keys(attrs).sort();
  const resourceAttrs = (span.resource && span.resource.attributes) || {};
  return h(
    "div",
    { class: "span-details" },
    kvTable([
      ["Name", span.name],
      ["Kind", spanKind(span)],
      ["Status", `${status.status_code || "UNSET"}${status.description ? ` \u2014 ${status.description}` : ""}`],
      ["Start", fmt.fullTime(span.start_time)],
      ["End", fmt.fullTime(span.end_time)],
      ["Duration", fmt.duration((span.end_time ?? span.start_time) - span.start_time)],
      ["Sequence id", span.sequence_id],
      ["Span id", h("code", {}, span.span_id)],
      ["Parent id", span.parent_id ? h("code", {}, span.parent_id) : "\u2014"],
      ["Trace id", h("code", {}, span.trace_id)],
    ]),
    h("h3", {}, `Attributes (${keys.length})`),
    keys.length ? kvTable(keys.map((k) => [k, attrs[k]]), { class: "kv attributes" }) : h("div", { class: "muted" }, "No attributes."),
    span.events && span.events.length ? [h("h3", {}, `Events (${span.events.length})`), jsonView(span.events)] : null,
    span.links && span.links.length ? [h("h3", {}, `Links (${span.links.length})`), jsonView(span.links)] : null,
    Object.keys(resourceAttrs).length ? [h("h3", {}, "Resource"), kvTable(Object.entries(resourceAttrs))] : null,
  );
}
