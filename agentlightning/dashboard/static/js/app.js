// The dashboard shell: hash routing, the auto-refresh loop, the connection indicator and the login dialog.

import * as api from "./api.js";
import { closeDrawer, fmt, tickLiveTimes } from "./components.js";

const ROUTES = [
  { pattern: /^\/rollouts\/([^/]+)$/, nav: "rollouts", load: () => import("./pages/rollout.js") },
  { pattern: /^\/rollouts\/?$/, nav: "rollouts", load: () => import("./pages/rollouts.js") },
  { pattern: /^\/training\/?$/, nav: "training", load: () => import("./pages/training.js") },
  { pattern: /^\/resources\/?$/, nav: "resources", load: () => import("./pages/resources.js") },
  { pattern: /^\/workers\/?$/, nav: "workers", load: () => import("./pages/workers.js") },
  { pattern: /^\/settings\/?$/, nav: "settings", load: () => import("./pages/settings.js") },
];

const $ = (id) => document.getElementById(id);
let current = null; // {page, path}
let routeSerial = 0;
let timer = null;
let ticking = false;
let loginDismissed = false;

function parseHash() {
  const raw = window.location.hash.replace(/^#/, "") || "/rollouts";
  const [path, queryString = ""] = raw.split("?");
  return { path: path.startsWith("/") ? path : `/${path}`, query: new URLSearchParams(queryString) };
}

/** Context handed to pages: where they are, and how to change the URL. */
function makeContext(path, query, params) {
  return {
    path,
    query,
    params,
    navigate(hash) {
      window.location.hash = hash;
    },
    /** Put page state in the URL without re-routing (shareable links, reload keeps filters). */
    setQuery(values) {
      const q = new URLSearchParams();
      for (const [key, value] of Object.entries(values)) {
        if (value === undefined || value === null || value === "" || (Array.isArray(value) && !value.length)) continue;
        q.set(key, Array.isArray(value) ? value.join(",") : String(value));
      }
      const text = q.toString();
      history.replaceState(null, "", `#${path}${text ? `?${text}` : ""}`);
    },
    setTitle(title) {
      $("page-title").textContent = title;
      document.title = `${title} \u00B7 Agent Lightning`;
    },
  };
}

async function route() {
  const serial = ++routeSerial;
  const { path, query } = parseHash();
  const match = ROUTES.map((r) => ({ r, m: path.match(r.pattern) })).find((x) => x.m);
  if (!match) {
    window.location.hash = "#/rollouts";
    return;
  }
  const module = await match.r.load();
  if (serial !== routeSerial) return; // another navigation won
  closeDrawer();
  if (current && current.page.destroy) current.page.destroy();
  const ctx = makeContext(path, query, match.m.slice(1).map(decodeURIComponent));
  const page = module.createPage(ctx);
  current = { page, path };
  $("view").replaceChildren(page.element);
  document.querySelectorAll(".nav-link").forEach((a) => a.classList.toggle("active", a.dataset.nav === match.r.nav));
  window.scrollTo(0, 0);
  await refresh(true);
}

/** Check the server (and the clock), then let the current page reload what it shows. */
async function refresh(force = false) {
  if (ticking && !force) return;
  ticking = true;
  $("refresh").classList.add("spinning");
  try {
    try {
      await api.info();
    } catch {
      // the indicator shows what went wrong; pages keep their last data
    }
    if (current && current.page.refresh && api.connection.state === "connected") await current.page.refresh();
  } finally {
    ticking = false;
    $("refresh").classList.remove("spinning");
  }
}

function schedule() {
  clearTimeout(timer);
  const seconds = Number(api.loadSettings().refreshSeconds) || 0;
  if (seconds <= 0) return;
  timer = setTimeout(async () => {
    if (!document.hidden) await refresh();
    schedule();
  }, seconds * 1000);
}

// ---- connection indicator, banner, login ----

const LABELS = {
  connecting: "Connecting\u2026",
  connected: "Connected",
  disconnected: "Server unreachable",
  unauthorized: "Token required",
};

function showConnection(conn) {
  const el = $("connection");
  el.dataset.state = conn.state;
  el.querySelector(".conn-label").textContent = LABELS[conn.state] || conn.state;
  el.title = conn.detail || `Connected to ${api.serverUrl()}`;
  const banner = $("banner");
  if (conn.state === "disconnected") {
    const seconds = Number(api.loadSettings().refreshSeconds) || 0;
    banner.textContent = `Cannot reach the store server at ${api.serverUrl()}. ${seconds ? `Retrying every ${seconds} s; ` : ""}what you see may be out of date.`;
    banner.hidden = false;
  } else {
    banner.hidden = true;
  }
  $("server-label").textContent = api.serverUrl().replace(/^https?:\/\//, "");
  if (conn.state === "unauthorized" && !loginDismissed) openLogin(conn.detail);
  if (conn.state === "connected") {
    loginDismissed = false;
    $("login").hidden = true;
  }
  showUpdated();
}

function showUpdated() {
  const last = api.connection.lastSuccess;
  $("updated").textContent = last ? `Updated ${fmt.duration((Date.now() - last) / 1000)} ago` : "";
}

function openLogin(detail) {
  const dialog = $("login");
  if (!dialog.hidden) return;
  const error = $("login-error");
  error.hidden = !api.getToken();
  error.textContent = api.getToken() ? `The server rejected the saved token (${detail}).` : "";
  dialog.hidden = false;
  $("token-input").focus();
}

async function submitLogin(event) {
  event.preventDefault();
  const token = $("token-input").value.trim();
  api.setToken(token, $("token-remember").checked);
  try {
    await api.info();
    $("token-input").value = "";
    $("login").hidden = true;
    await refresh(true);
  } catch (error) {
    const box = $("login-error");
    box.textContent = error.status === 401 ? "The server rejected this token." : error.message;
    box.hidden = false;
  }
}

function boot() {
  api.adoptTokenFromFragment();
  api.onChange(showConnection);
  $("login-form").addEventListener("submit", submitLogin);
  $("login-cancel").addEventListener("click", () => {
    loginDismissed = true;
    $("login").hidden = true;
  });
  $("connection").addEventListener("click", () => {
    if (api.connection.state === "unauthorized") {
      loginDismissed = false;
      openLogin(api.connection.detail);
    } else {
      refresh(true);
    }
  });
  $("refresh").addEventListener("click", () => refresh(true));
  window.addEventListener("hashchange", () => {
    api.adoptTokenFromFragment();
    route();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
  window.addEventListener("agl-settings-changed", () => {
    schedule();
    refresh(true);
  });
  setInterval(() => {
    showUpdated();
    tickLiveTimes();
  }, 1000);
  showConnection(api.connection);
  route();
  schedule();
}

boot();
