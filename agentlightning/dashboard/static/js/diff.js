// Line diff of two texts (longest common subsequence), rendered as a unified diff with context.

import { h } from "./components.js";

const MAX_CELLS = 4_000_000;

/** Operations turning `before` into `after`: [{type: "same" | "del" | "add", text}]. */
export function diffLines(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  if (a.length * b.length > MAX_CELLS) {
    return [...a.map((text) => ({ type: "del", text })), ...b.map((text) => ({ type: "add", text }))];
  }
  const n = a.length;
  const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      ops.push({ type: "same", text: a[i] });
      i += 1;
      j += 1;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      ops.push({ type: "del", text: a[i] });
      i += 1;
    } else {
      ops.push({ type: "add", text: b[j] });
      j += 1;
    }
  }
  while (i < n) ops.push({ type: "del", text: a[i++] });
  while (j < m) ops.push({ type: "add", text: b[j++] });
  return ops;
}

/** A unified-diff view; unchanged runs longer than 2 * context lines are folded. */
export function diffView(before, after, { context = 3 } = {}) {
  const ops = diffLines(before, after);
  if (!ops.some((op) => op.type !== "same")) return h("div", { class: "diff-same" }, "No changes.");
  const rows = [];
  let oldNo = 0;
  let newNo = 0;
  for (let k = 0; k < ops.length; k += 1) {
    const op = ops[k];
    if (op.type === "same") {
      let end = k;
      while (end < ops.length && ops[end].type === "same") end += 1;
      const run = end - k;
      const head = k === 0 ? 0 : context;
      const tail = end === ops.length ? 0 : context;
      if (run > head + tail + 1) {
        for (let t = 0; t < head; t += 1) rows.push(line("same", ++oldNo, ++newNo, ops[k + t].text));
        const hidden = run - head - tail;
        rows.push(h("div", { class: "diff-line diff-fold" }, h("span", { class: "diff-no" }), h("span", { class: "diff-no" }), h("span", { class: "diff-text" }, `\u22EF ${hidden} unchanged line${hidden > 1 ? "s" : ""}`)));
        oldNo += hidden;
        newNo += hidden;
        for (let t = run - tail; t < run; t += 1) rows.push(line("same", ++oldNo, ++newNo, ops[k + t].text));
      } else {
        for (let t = 0; t < run; t += 1) rows.push(line("same", ++oldNo, ++newNo, ops[k + t].text));
      }
      k = end - 1;
    } else if (op.type === "del") {
      rows.push(line("del", ++oldNo, "", op.text));
    } else {
      rows.push(line("add", "", ++newNo, op.text));
    }
  }
  return h("div", { class: "diff" }, rows);
}

function line(type, oldNo, newNo, text) {
  const sign = type === "add" ? "+" : type === "del" ? "\u2212" : " ";
  return h(
    "div",
    { class: ["diff-line", `diff-${type}`] },
    h("span", { class: "diff-no" }, oldNo),
    h("span", { class: "diff-no" }, newNo),
    h("span", { class: "diff-text" }, h("span", { class: "diff-sign" }, sign), text),
  );
}
