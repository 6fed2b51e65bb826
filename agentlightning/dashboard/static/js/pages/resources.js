// Resources: every version of the named resources (prompt templates, LLM endpoints), their contents, and a
// diff between two versions (e.g. the prompt an optimizer started from and the one it found).

import * as api from "../api.js";
import { card, dataTable, empty, errorBox, fmt, h, jsonView, kvTable, pagination, renderIfChanged } from "../components.js";
import { diffView } from "../diff.js";

/** A resource as text, for display and diffs: templates as themselves, anything else as JSON. */
export function resourceText(resource) {
  if (!resource) return "";
  if (resource.resource_type === "prompt_template") return resource.template;
  return JSON.stringify(resource, null, 2);
}

function resourceView(name, resource) {
  const type = resource.resource_type || "resource";
  let body;
  if (type === "prompt_template") {
    // Extra fields an algorithm attached (GEPA's front: val_score, front_examples, parents, best).
    const extras = Object.entries(resource).filter(([key]) => !["resource_type", "template", "engine"].includes(key));
    body = [
      h("div", { class: "muted small" }, `engine: ${resource.engine}`),
      extras.length ? h("div", { class: "resource-extras" }, kvTable(extras.map(([key, value]) => [key, typeof value === "object" ? JSON.stringify(value) : String(value)]))) : null,
      h("pre", { class: "template" }, resource.template),
    ];
  } else if (type === "llm" || type === "proxy_llm") {
    body = kvTable([
      ["Endpoint", h("code", {}, resource.endpoint)],
      ["Model", resource.model],
      ["API key", resource.api_key ? "\u2022\u2022\u2022\u2022 (set)" : "\u2014"],
      ["Sampling", resource.sampling_parameters && Object.keys(resource.sampling_parameters).length ? resource.sampling_parameters : "\u2014"],
    ]);
  } else {
    body = jsonView(resource);
  }
  return h("div", { class: "resource", dataset: { name } }, h("div", { class: "resource-title" }, h("strong", {}, name), h("span", { class: ["tag", `type-${type}`] }, type)), body);
}

function label(update) {
  return `${update.resources_id} v${update.version}`;
}

function comparison(before, after) {
  const names = [...new Set([...Object.keys(before.resources), ...Object.keys(after.resources)])].sort();
  return names.map((name) => {
    const a = before.resources[name];
    const b = after.resources[name];
    const state = !a ? "added" : !b ? "removed" : resourceText(a) === resourceText(b) ? "unchanged" : "changed";
    return h(
      "div",
      { class: ["diff-block", `diff-${state}`], dataset: { name, state } },
      h("div", { class: "resource-title" }, h("strong", {}, name), h("span", { class: ["tag", `diff-state-${state}`] }, state)),
      state === "unchanged" ? null : diffView(resourceText(a), resourceText(b)),
    );
  });
}

export function createPage(ctx) {
  ctx.setTitle("Resources");
  const state = {
    offset: Math.max(0, Number(ctx.query.get("offset")) || 0),
    limit: Number(api.loadSettings().pageSize) || 20,
    selected: ctx.query.get("id") || null,
    before: null,
    after: null,
  };
  let page = null;
  let extra = null; // the selected update when it is not on this page
  let serial = 0;
  const listHolder = h("div");
  const detailHolder = h("div");
  const diffHolder = h("div");
  const element = h("div", { class: "page resources-page" }, listHolder, h("div", { class: "two-col" }, detailHolder, diffHolder));

  const byId = () => new Map([...(extra ? [extra] : []), ...(page ? page.items : [])].map((u) => [u.resources_id, u]));

  function render() {
    const items = page.items;
    const latestId = state.offset === 0 && items.length ? items[0].resources_id : null;
    if (!state.selected && items.length) state.selected = items[0].resources_id;
    renderIfChanged(listHolder, { page, selected: state.selected }, () =>
      card(
        "Resource versions",
        items.length
          ? [
              dataTable({
                columns: [
                  {
                    key: "resources_id",
                    label: "Resources",
                    render: (u) => h("span", {}, h("span", { class: "mono" }, u.resources_id), u.resources_id === latestId ? h("span", { class: "badge status-succeeded small" }, "latest") : null),
                  },
                  { key: "version", label: "Version", class: "num", render: (u) => `v${u.version}` },
                  { key: "contents", label: "Contents", render: (u) => Object.entries(u.resources).map(([name, r]) => h("span", { class: ["tag", `type-${r.resource_type}`] }, `${name}: ${r.resource_type}`)) },
                  { key: "create_time", label: "Created", render: (u) => fmt.time(u.create_time) },
                  { key: "update_time", label: "Updated", render: (u) => h("span", { title: fmt.fullTime(u.update_time) }, fmt.time(u.update_time)) },
                ],
                rows: items,
                onRowClick: (u) => {
                  state.selected = u.resources_id;
                  ctx.setQuery({ id: u.resources_id, offset: state.offset || "" });
                  render();
                },
                rowAttrs: (u) => ({ class: ["clickable", u.resources_id === state.selected && "selected"], dataset: { resourcesId: u.resources_id } }),
              }),
              pagination({ total: page.total, limit: state.limit, offset: state.offset, onChange: (offset) => ((state.offset = Math.max(0, offset)), ctx.setQuery({ offset: state.offset || "" }), refresh()) }),
            ]
          : empty("No resources yet.", "Algorithms publish prompt templates and LLM endpoints with store.add_resources / update_resources."),
      ),
    );
    const map = byId();
    const selected = map.get(state.selected);
    renderIfChanged(detailHolder, { selected }, () =>
      selected
        ? card(
            `Contents of ${label(selected)}`,
            Object.entries(selected.resources).map(([name, r]) => resourceView(name, r)),
            null,
            { id: "resource-detail" },
          )
        : h("div"),
    );
    renderDiff(items, map);
  }

  function renderDiff(items, map) {
    if (items.length + (extra ? 1 : 0) < 2) {
      renderIfChanged(diffHolder, { none: true }, () => card("Compare versions", h("div", { class: "muted" }, "Two or more resource versions are needed for a diff.")));
      return;
    }
    const ids = [...map.keys()];
    if (!map.has(state.after)) state.after = map.has(state.selected) ? state.selected : ids[0];
    if (!map.has(state.before) || state.before === state.after) {
      const after = map.get(state.after);
      const older = items.filter((u) => u.resources_id !== state.after && u.update_time <= after.update_time);
      state.before = (older[0] || items.find((u) => u.resources_id !== state.after)).resources_id;
    }
    const before = map.get(state.before);
    const after = map.get(state.after);
    const picker = (value, onChange, name) =>
      h(
        "select",
        { onchange: (e) => onChange(e.target.value), "aria-label": name, name },
        ids.map((id) => h("option", { value: id, selected: id === value }, label(map.get(id)))),
      );
    renderIfChanged(diffHolder, { before, after }, () =>
      card(
        "Compare versions",
        [
          h(
            "div",
            { class: "diff-pickers" },
            picker(state.before, (v) => ((state.before = v), renderDiff(items, byId())), "diff-before"),
            h("span", { class: "arrow" }, "\u2192"),
            picker(state.after, (v) => ((state.after = v), renderDiff(items, byId())), "diff-after"),
          ),
          h("div", { class: "diff-list", id: "resource-diff" }, comparison(before, after)),
        ],
      ),
    );
  }

  async function refresh() {
    const mine = ++serial;
    try {
      const result = await api.resources({ sort_by: "update_time", sort_order: "desc", limit: state.limit, offset: state.offset });
      let selectedUpdate = null;
      if (state.selected && !result.items.some((u) => u.resources_id === state.selected)) {
        selectedUpdate = await api.request(`/resources/${encodeURIComponent(state.selected)}`).catch(() => null);
      }
      if (mine !== serial) return;
      page = result;
      extra = selectedUpdate;
      render();
    } catch (error) {
      if (mine === serial && !page) renderIfChanged(listHolder, { error: error.message }, () => errorBox(error));
    }
  }

  return { element, refresh };
}
