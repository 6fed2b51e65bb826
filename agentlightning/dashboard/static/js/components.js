// Small building blocks shared by the pages: an element builder, formatters, badges, tables, pagination,
// filter chips, a JSON view and the detail drawer. No framework: pages build DOM and swap it in one step.

import { serverNow } from "./api.js";

/** Create an element: h("a", {href: "#", class: "x", onclick: fn, dataset: {id: 1}}, "text", child). */
export function h(tag, attrs = {}, ...children) {
  const isSvg = ["svg", "g", "path", "line", "rect", "circle", "text", "title", "polyline"].includes(tag);
  const el = isSvg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "style" && typeof value === "object") Object.assign(el.style, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "value" && !isSvg) el.value = value;
    else if (key === "checked" || key === "selected" || key === "disabled") el[key] = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace the children of `container` only when `data` differs from what it shows now (no flicker). */
export function renderIfChanged(container, data, build) {
  const fingerprint = JSON.stringify(data);
  if (container.dataset.fingerprint === fingerprint) return false;
  container.dataset.fingerprint = fingerprint;
  container.replaceChildren(build(data));
  return true;
}

// ---- formatting ----

export const fmt = {
  time(seconds) {
    if (seconds === null || seconds === undefined) return "\u2014";
    const date = new Date(seconds * 1000);
    const today = new Date();
    const sameDay = date.toDateString() === today.toDateString();
    const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
    if (sameDay) return time;
    return `${date.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
  },
  fullTime(seconds) {
    if (seconds === null || seconds === undefined) return "\u2014";
    return new Date(seconds * 1000).toISOString().replace("T", " ").replace("Z", " UTC");
  },
  duration(seconds) {
    if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "\u2014";
    const s = Math.max(0, seconds);
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 60) return `${s < 10 ? s.toFixed(2) : s.toFixed(1)} s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.round((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d ${Math.round((s % 86400) / 3600)}h`;
  },
  age(seconds) {
    if (seconds === null || seconds === undefined) return "never";
    return `${fmt.duration(serverNow() - seconds)} ago`;
  },
  reward(value) {
    if (value === null || value === undefined) return "\u2014";
    return Math.abs(value) >= 1000 ? fmt.number(value, 1) : value.toFixed(3);
  },
  number(value, digits = 0) {
    if (value === null || value === undefined || Number.isNaN(value)) return "\u2014";
    return Number(value).toLocaleString([], { maximumFractionDigits: digits, minimumFractionDigits: digits });
  },
  percent(value) {
    if (value === null || value === undefined) return "\u2014";
    return `${Number(value).toFixed(0)}%`;
  },
  bytes(value) {
    if (value === null || value === undefined) return "\u2014";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let v = value;
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
  },
  short(id, keep = 12) {
    if (!id) return "\u2014";
    return id.length > keep + 3 ? `${id.slice(0, keep)}\u2026` : id;
  },
};

// ---- times that keep moving: updated in place every second, so tables need no re-render ----

/** Text showing the time elapsed since `seconds` (server clock), kept current by `tickLiveTimes`. */
export function elapsedSince(seconds, { prefix = "", suffix = "", staleAfter = null, attrs = {} } = {}) {
  const el = h("span", { ...attrs, class: ["live-time", attrs.class], dataset: { since: seconds, prefix, suffix, staleAfter: staleAfter ?? "" } });
  updateLiveTime(el);
  return el;
}

function updateLiveTime(el) {
  const elapsed = serverNow() - Number(el.dataset.since);
  el.textContent = `${el.dataset.prefix}${fmt.duration(elapsed)}${el.dataset.suffix}`;
  if (el.dataset.staleAfter) el.classList.toggle("stale", elapsed > Number(el.dataset.staleAfter));
}

export function tickLiveTimes() {
  document.querySelectorAll(".live-time[data-since]").forEach(updateLiveTime);
}

/** "12 s ago", kept current. */
export function ago(seconds, options = {}) {
  if (seconds === null || seconds === undefined) return h("span", { class: "muted" }, "never");
  return elapsedSince(seconds, { suffix: " ago", ...options });
}

// ---- small pieces ----

export function badge(status, extraClass = "") {
  return h("span", { class: ["badge", `status-${status || "none"}`, extraClass] }, status || "none");
}

export function modeTag(mode) {
  return mode ? h("span", { class: ["tag", `mode-${mode}`] }, mode) : h("span", { class: "muted" }, "\u2014");
}

export function rewardCell(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "\u2014");
  const cls = value > 0 ? "reward-pos" : value < 0 ? "reward-neg" : "reward-zero";
  return h("span", { class: ["reward", cls] }, fmt.reward(value));
}

export function link(href, text, attrs = {}) {
  return h("a", { href, ...attrs }, text);
}

export function empty(text, detail = "") {
  return h("div", { class: "empty" }, h("div", { class: "empty-title" }, text), detail && h("div", {}, detail));
}

export function errorBox(error) {
  return h("div", { class: "error-box" }, h("strong", {}, "Could not load: "), error.message || String(error));
}

export function card(title, body, actions = null, attrs = {}) {
  return h(
    "section",
    { class: "card", ...attrs },
    title && h("header", { class: "card-header" }, h("h2", {}, title), actions && h("div", { class: "card-actions" }, actions)),
    h("div", { class: "card-body" }, body),
  );
}

export function stat(label, value, hint = "", attrs = {}) {
  return h(
    "div",
    { class: "stat", ...attrs },
    h("div", { class: "stat-label" }, label),
    h("div", { class: "stat-value" }, value),
    hint && h("div", { class: "stat-hint" }, hint),
  );
}

/** Key/value rows; values may be nodes or text. */
export function kvTable(entries, attrs = {}) {
  return h(
    "table",
    { class: "kv", ...attrs },
    h(
      "tbody",
      {},
      entries.map(([key, value]) =>
        h("tr", {}, h("th", {}, key), h("td", {}, value instanceof Node ? value : formatValue(value))),
      ),
    ),
  );
}

export function formatValue(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "null");
  if (typeof value === "object") return jsonView(value);
  const text = String(value);
  if (text.includes("\n") || text.length > 120) return h("pre", { class: "text-block" }, text);
  return text;
}

/** Pretty JSON with light syntax colouring. */
export function jsonView(value) {
  const text = JSON.stringify(value, null, 2);
  const pre = h("pre", { class: "json" });
  const pattern = /("(?:\\.|[^"\\])*")(\s*:)?|\b(true|false|null)\b|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    pre.append(text.slice(last, match.index));
    const [whole, str, colon, literal, number] = match;
    if (str) {
      pre.append(h("span", { class: colon ? "json-key" : "json-string" }, str));
      if (colon) pre.append(colon);
    } else if (literal) pre.append(h("span", { class: "json-literal" }, literal));
    else if (number) pre.append(h("span", { class: "json-number" }, number));
    last = match.index + whole.length;
  }
  pre.append(text.slice(last));
  return pre;
}

// ---- table, sorting, pagination, filters ----

/**
 * A data table. columns: [{key, label, render(row), sortable, class}]; sort: {by, order};
 * onSort(key); onRowClick(row); rowAttrs(row) -> extra attributes for the <tr>.
 */
export function dataTable({ columns, rows, sort = null, onSort = null, onRowClick = null, rowAttrs = null, emptyText = "Nothing here yet." }) {
  const head = h(
    "tr",
    {},
    columns.map((col) => {
      const active = sort && sort.by === col.key;
      const arrow = active ? (sort.order === "asc" ? " \u25B2" : " \u25BC") : "";
      return h(
        "th",
        {
          class: [col.class, col.sortable && "sortable", active && "sorted"],
          onclick: col.sortable && onSort ? () => onSort(col.key) : null,
          title: col.sortable ? `Sort by ${col.label}` : null,
          dataset: { key: col.key },
        },
        col.label,
        arrow && h("span", { class: "sort-arrow" }, arrow),
      );
    }),
  );
  const body = rows.length
    ? rows.map((row) =>
        h(
          "tr",
          {
            class: onRowClick && "clickable",
            onclick: onRowClick
              ? (event) => {
                  if (event.target.closest("a,button,input,select")) return;
                  onRowClick(row);
                }
              : null,
            ...(rowAttrs ? rowAttrs(row) : {}),
          },
          columns.map((col) => h("td", { class: col.class, dataset: { col: col.key } }, col.render ? col.render(row) : formatValue(row[col.key]))),
        ),
      )
    : [h("tr", { class: "empty-row" }, h("td", { colspan: columns.length }, emptyText))];
  return h("div", { class: "table-wrap" }, h("table", { class: "data" }, h("thead", {}, head), h("tbody", {}, body)));
}

export function pagination({ total, limit, offset, onChange, pageSizes = [10, 20, 50, 100], onPageSize = null }) {
  const page = Math.floor(offset / limit) + 1;
  const pages = Math.max(1, Math.ceil(total / limit));
  const first = total === 0 ? 0 : offset + 1;
  const last = Math.min(offset + limit, total);
  return h(
    "div",
    { class: "pagination" },
    h("span", { class: "page-info" }, `${fmt.number(first)}\u2013${fmt.number(last)} of ${fmt.number(total)}`),
    onPageSize &&
      h(
        "label",
        { class: "page-size" },
        "Rows ",
        h(
          "select",
          { onchange: (e) => onPageSize(Number(e.target.value)), "aria-label": "Rows per page" },
          pageSizes.map((size) => h("option", { value: size, selected: size === limit }, size)),
        ),
      ),
    h("button", { class: "btn small", disabled: page <= 1, onclick: () => onChange(0), title: "First page" }, "\u00AB"),
    h("button", { class: "btn small", disabled: page <= 1, onclick: () => onChange(offset - limit), "aria-label": "Previous page" }, "\u2039 Prev"),
    h("span", { class: "page-number" }, `Page ${page} / ${pages}`),
    h("button", { class: "btn small", disabled: page >= pages, onclick: () => onChange(offset + limit), "aria-label": "Next page" }, "Next \u203A"),
    h("button", { class: "btn small", disabled: page >= pages, onclick: () => onChange((pages - 1) * limit), title: "Last page" }, "\u00BB"),
  );
}

/** Toggle chips for a multi-select filter; an empty selection means "all". */
export function chips({ label, options, selected, onChange, counts = null, name }) {
  const set = new Set(selected);
  return h(
    "div",
    { class: "chips", role: "group", "aria-label": label, dataset: { filter: name } },
    h("span", { class: "chips-label" }, label),
    options.map((option) =>
      h(
        "button",
        {
          class: ["chip", set.has(option) && "active", `chip-${option}`],
          "aria-pressed": set.has(option) ? "true" : "false",
          dataset: { value: option },
          onclick: () => {
            if (set.has(option)) set.delete(option);
            else set.add(option);
            onChange([...set]);
          },
        },
        option,
        counts && counts[option] !== undefined && h("span", { class: "chip-count" }, fmt.number(counts[option])),
      ),
    ),
  );
}

export function tabs(items, active, onSelect) {
  return h(
    "div",
    { class: "tabs", role: "tablist" },
    items.map(({ key, label }) =>
      h(
        "button",
        { class: ["tab", key === active && "active"], role: "tab", "aria-selected": key === active ? "true" : "false", dataset: { tab: key }, onclick: () => onSelect(key) },
        label,
      ),
    ),
  );
}

// ---- the drawer: details of a span, a worker... ----

let drawerEl = null;

export function openDrawer(title, body, { subtitle = "" } = {}) {
  closeDrawer();
  drawerEl = h(
    "div",
    { class: "drawer-backdrop", onclick: (e) => e.target === drawerEl && closeDrawer() },
    h(
      "aside",
      { class: "drawer", role: "dialog", "aria-label": title },
      h(
        "header",
        { class: "drawer-header" },
        h("div", {}, h("h2", {}, title), subtitle && h("div", { class: "drawer-subtitle" }, subtitle)),
        h("button", { class: "btn icon", onclick: closeDrawer, "aria-label": "Close", title: "Close (Esc)" }, "\u2715"),
      ),
      h("div", { class: "drawer-body" }, body),
    ),
  );
  document.body.append(drawerEl);
}

export function closeDrawer() {
  if (drawerEl) drawerEl.remove();
  drawerEl = null;
}

document.addEventListener("keydown", (event) => {
  if (event.key === "Escape") closeDrawer();
});

/** Debounce a function (for search boxes). */
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
