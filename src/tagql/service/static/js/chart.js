// Charts of a result: POST /v1/chart proposes the chart (tagql.service.charts: bar, line, scatter or none,
// from the column types and value counts); the user switches type and columns; Vega-Lite draws it as SVG.
// vega, vega-lite and vega-embed are bundled with the package (../vendor/vega) and loaded on first use only.

import { api, h } from "./api.js";

const VENDOR = "/ui/static/vendor/vega/";
const SCRIPTS = ["vega.min.js", "vega-lite.min.js", "vega-embed.min.js"];
const SAMPLE_BYTES = 48000; // the chart request stays well under the server's body limit
const MARK_NAMES = { bar: "Bar", line: "Line", point: "Scatter", none: "No chart" };
let loading = null;

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = h("script", { src });
    s.onload = resolve;
    s.onerror = () => reject(new Error(`could not load ${src}`));
    document.head.append(s);
  });
}

export function loadVega() {
  if (!loading) {
    loading = (async () => {
      for (const name of SCRIPTS) await loadScript(VENDOR + name);
      return window.vegaEmbed;
    })();
  }
  return loading;
}

function sample(columns, rows) {
  // enough rows for the types and value counts, short cells, under the body limit
  let take = rows.slice(0, 2000).map((r) => r.map((v) => (typeof v === "string" && v.length > 80 ? v.slice(0, 80) : v)));
  while (take.length > 20 && JSON.stringify({ columns, rows: take }).length > SAMPLE_BYTES) {
    take = take.filter((_, i) => i % 2 === 0);
  }
  return take;
}

function records(rows) {
  return rows.map((r) => Object.fromEntries(r.map((v, i) => [`c${i}`, v])));
}

/** Draw the proposed chart of (columns, rows) into `box`, with controls to change it. */
export async function renderChart(box, columns, rows, idPrefix) {
  box.replaceChildren();
  if (!columns.length || rows.length < 2) return;
  const base = { columns, rows: sample(columns, rows) };
  let proposal = await api("POST", "/v1/chart", base);
  const typeSel = h("select", { id: `${idPrefix}-mark` });
  const xSel = h("select", { id: `${idPrefix}-x` });
  const ySel = h("select", { id: `${idPrefix}-y` });
  for (const m of proposal.marks) typeSel.append(h("option", { value: m }, MARK_NAMES[m] || m));
  for (const c of proposal.columns) {
    xSel.append(h("option", { value: c.name }, c.name));
    ySel.append(h("option", { value: c.name }, c.name));
  }
  const view = h("div", { class: "chart", role: "img", "aria-label": "chart of the result" });
  const note = h("p", { class: "hint", "aria-live": "polite" });
  const controls = h("div", { class: "chart-controls" },
    h("div", { class: "field" }, h("label", { for: typeSel.id }, "Chart"), typeSel),
    h("div", { class: "field" }, h("label", { for: xSel.id }, "X axis"), xSel),
    h("div", { class: "field" }, h("label", { for: ySel.id }, "Y axis"), ySel));
  box.append(h("h3", { class: "visually-hidden" }, "Chart"), controls, note, view);

  async function draw() {
    typeSel.value = proposal.mark || "none";
    if (proposal.x) xSel.value = proposal.x;
    if (proposal.y) ySel.value = proposal.y;
    xSel.disabled = ySel.disabled = !proposal.spec;
    view.replaceChildren();
    if (!proposal.spec) {
      note.textContent = "No chart fits this result (it needs a category, a time or a number beside a number); pick a type to draw one anyway.";
      view.setAttribute("aria-label", "no chart");
      return;
    }
    note.textContent = "";
    view.setAttribute("aria-label", `${MARK_NAMES[proposal.mark]} chart: ${proposal.y} by ${proposal.x}`);
    const embed = await loadVega();
    const spec = { ...proposal.spec, data: { values: records(rows) } };
    // ast: Vega's expression interpreter instead of generated code, so the page's CSP needs no 'unsafe-eval'
    await embed(view, spec, { actions: false, renderer: "svg", ast: true, defaultStyle: false });
  }

  async function change(which) {
    const ask = { ...base, mark: typeSel.value };
    if (which !== "mark" || proposal.spec) {
      ask.x = xSel.value;
      ask.y = ySel.value;
    }
    try {
      proposal = await api("POST", "/v1/chart", ask);
      await draw();
    } catch (e) {
      note.textContent = e.message;
    }
  }
  typeSel.addEventListener("change", () => change("mark"));
  xSel.addEventListener("change", () => change("x"));
  ySel.addEventListener("change", () => change("y"));
  await draw();
}
