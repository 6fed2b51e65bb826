// Talking to the store server: settings, bearer token, connection state, and one function per endpoint.

const SETTINGS_KEY = "agl.dashboard.settings";
const TOKEN_KEY = "agl.dashboard.token";
const API = "/v1/agl";

const DEFAULT_SETTINGS = { serverUrl: "", refreshSeconds: 5, pageSize: 20 };

export class ApiError extends Error {
  constructor(status, detail, errorType = "") {
    super(detail);
    this.status = status;
    this.detail = detail;
    this.errorType = errorType;
  }
}

// ---- settings and token ----

export function loadSettings() {
  try {
    const stored = JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}");
    return { ...DEFAULT_SETTINGS, ...stored };
  } catch {
    return { ...DEFAULT_SETTINGS };
  }
}

export function saveSettings(changes) {
  const settings = { ...loadSettings(), ...changes };
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
  emit();
  return settings;
}

/** Base URL of the store server: the configured address, or the server that served this page. */
export function serverUrl() {
  const configured = (loadSettings().serverUrl || "").trim().replace(/\/+$/, "");
  return configured || window.location.origin;
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY) || "";
}

/** Keep the token in localStorage (`remember`) or only for this tab (sessionStorage); "" forgets it. */
export function setToken(token, remember = true) {
  localStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
  if (token) (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token);
  emit();
}

/** Move a `token=...` found in the URL fragment into storage and drop it from the address bar. */
export function adoptTokenFromFragment() {
  const hash = window.location.hash;
  const match = hash.match(/[#?&]token=([^&]*)/);
  if (!match) return false;
  setToken(decodeURIComponent(match[1]), true);
  let rest = hash.replace(/([#?&])token=[^&]*&?/, "$1").replace(/[?&]$/, "");
  if (rest === "#" || rest === "") rest = "#/rollouts";
  history.replaceState(null, "", window.location.pathname + window.location.search + rest);
  return true;
}

// ---- connection state ----

export const connection = {
  state: "connecting", // connecting | connected | disconnected | unauthorized
  detail: "",
  lastSuccess: null, // Date.now() of the last answered request
  serverOffset: 0, // server clock minus browser clock, in seconds
};

const listeners = new Set();

export function onChange(listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function emit() {
  for (const listener of listeners) listener(connection);
}

function setState(state, detail = "") {
  const changed = connection.state !== state || connection.detail !== detail;
  connection.state = state;
  connection.detail = detail;
  if (state === "connected") connection.lastSuccess = Date.now();
  if (changed || state === "connected") emit();
}

/** Seconds since the epoch on the server's clock (used for ages and running durations). */
export function serverNow() {
  return Date.now() / 1000 + connection.serverOffset;
}

// ---- requests ----

function buildUrl(path, params) {
  const url = new URL(serverUrl() + API + path);
  for (const [key, value] of Object.entries(params || {})) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) value.forEach((item) => url.searchParams.append(key, item));
    else url.searchParams.set(key, value);
  }
  return url.toString();
}

export async function request(path, params = {}, { signal } = {}) {
  const headers = { Accept: "application/json" };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch(buildUrl(path, params), { headers, signal, cache: "no-store" });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    setState("disconnected", `cannot reach ${serverUrl()}`);
    throw new ApiError(0, `cannot reach the store server at ${serverUrl()}`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (response.status === 401) {
    setState("unauthorized", token ? "the server rejected the token" : "this server requires a token");
    throw new ApiError(401, (body && body.detail) || "unauthorized", "AuthenticationError");
  }
  setState("connected");
  if (!response.ok) {
    throw new ApiError(response.status, (body && body.detail) || `HTTP ${response.status}`, body && body.error_type);
  }
  return body;
}

// ---- endpoints ----

export async function info() {
  const started = Date.now() / 1000;
  const result = await request("/dashboard/info");
  const ended = Date.now() / 1000;
  connection.serverOffset = result.server_time - (started + ended) / 2;
  return result;
}

export const overview = () => request("/dashboard/overview");
export const rollouts = (params) => request("/dashboard/rollouts", params);
export const rollout = (rolloutId) => request(`/rollouts/${encodeURIComponent(rolloutId)}`);
export const attempts = (rolloutId) => request(`/rollouts/${encodeURIComponent(rolloutId)}/attempts`);
export const spans = (rolloutId, attemptId, limit = 5000) =>
  request("/spans", { rollout_id: rolloutId, attempt_id: attemptId, limit, sort_by: "sequence_id" });
export const triplets = (rolloutId, attemptId) =>
  request(`/rollouts/${encodeURIComponent(rolloutId)}/triplets`, { attempt_id: attemptId });
export const resources = (params) => request("/resources", params);
export const workers = (params) => request("/workers", params);
export const dashboardWorkers = (params) => request("/dashboard/workers", params);
export const rewards = (params) => request("/analytics/rewards", params);
export const throughput = (params) => request("/analytics/throughput", params);
export const tokens = () => request("/analytics/tokens");
