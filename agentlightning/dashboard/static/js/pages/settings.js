// Settings: which server to read, the bearer token, how often pages refresh, and what the server reports.

import * as api from "../api.js";
import { card, fmt, h, kvTable, renderIfChanged } from "../components.js";

const INTERVALS = [0, 2, 5, 10, 30, 60];
const PAGE_SIZES = [10, 20, 50, 100];

export function createPage(ctx) {
  ctx.setTitle("Settings");
  const settings = api.loadSettings();
  const message = h("div", { class: "form-message", id: "settings-message", role: "status" });
  const serverInput = h("input", { id: "server-url", type: "text", inputmode: "url", spellcheck: "false", value: settings.serverUrl, placeholder: window.location.origin, "aria-label": "Server address" });
  const tokenInput = h("input", { id: "settings-token", type: "password", placeholder: api.getToken() ? "\u2022\u2022\u2022\u2022\u2022\u2022 (saved)" : "none", "aria-label": "Bearer token" });
  const remember = h("input", { type: "checkbox", id: "settings-remember", checked: true });
  const interval = h(
    "select",
    { id: "refresh-interval", "aria-label": "Auto-refresh interval" },
    INTERVALS.map((s) => h("option", { value: s, selected: Number(settings.refreshSeconds) === s }, s ? `every ${s} s` : "off")),
  );
  const pageSize = h(
    "select",
    { id: "page-size", "aria-label": "Rows per page" },
    PAGE_SIZES.map((n) => h("option", { value: n, selected: Number(settings.pageSize) === n }, String(n))),
  );
  const infoHolder = h("div");

  function say(text, ok = true) {
    message.textContent = text;
    message.className = `form-message ${ok ? "ok" : "bad"}`;
  }

  async function save(event) {
    event.preventDefault();
    const url = serverInput.value.trim();
    if (url && !/^https?:\/\//.test(url)) {
      say(`"${url}" is not an http(s) URL; use e.g. http://127.0.0.1:4747, or leave it empty for this server.`, false);
      return;
    }
    api.saveSettings({ serverUrl: url, refreshSeconds: Number(interval.value), pageSize: Number(pageSize.value) });
    if (tokenInput.value.trim()) api.setToken(tokenInput.value.trim(), remember.checked);
    tokenInput.value = "";
    try {
      await api.info();
      say(`Saved. Connected to ${api.serverUrl()}.`);
    } catch (error) {
      say(`Saved, but ${error.message}.`, false);
    }
    window.dispatchEvent(new Event("agl-settings-changed"));
  }

  function forgetToken() {
    api.setToken("");
    tokenInput.placeholder = "none";
    say("Token removed from this browser.");
  }

  const form = h(
    "form",
    { class: "settings-form", onsubmit: save },
    h("label", { for: "server-url" }, "Server address"),
    serverInput,
    h("div", { class: "hint" }, "Leave empty to use the server that serves this page. Another server must allow this origin (agl store --cors-origin)."),
    h("label", { for: "settings-token" }, "Bearer token"),
    h("div", { class: "row" }, tokenInput, h("button", { class: "btn", type: "button", onclick: forgetToken }, "Forget token")),
    h("label", { class: "checkbox" }, remember, " Remember in this browser (otherwise only for this tab)"),
    h("label", { for: "refresh-interval" }, "Auto-refresh"),
    interval,
    h("label", { for: "page-size" }, "Rows per page"),
    pageSize,
    h("div", { class: "form-actions" }, h("button", { class: "btn primary", type: "submit", id: "settings-save" }, "Save"), message),
  );

  const element = h("div", { class: "page settings-page two-col" }, card("Dashboard settings", form), infoHolder);

  async function refresh() {
    try {
      const [info, overview] = await Promise.all([api.info(), api.overview()]);
      const statistics = overview.statistics || {};
      const entries = [
        ["Server", api.serverUrl()],
        ["Version", info.version],
        ["Store", statistics.name || info.store],
        ["Server time", fmt.fullTime(info.server_time)],
        ["Clock offset", `${(api.connection.serverOffset >= 0 ? "+" : "") + api.connection.serverOffset.toFixed(2)} s vs this browser`],
        ...Object.entries(statistics)
          .filter(([k]) => k !== "name")
          .map(([k, v]) => [k.replace(/_/g, " "), k === "uptime" ? fmt.duration(v) : k.endsWith("bytes") ? fmt.bytes(v) : fmt.number(v)]),
      ];
      renderIfChanged(infoHolder, entries.filter(([k]) => k !== "Server time" && k !== "Clock offset" && k !== "uptime"), () => card("Server", kvTable(entries), null, { id: "server-info" }));
    } catch (error) {
      renderIfChanged(infoHolder, { error: error.message }, () => card("Server", h("div", { class: "error-box" }, error.message)));
    }
  }

  return { element, refresh };
}
