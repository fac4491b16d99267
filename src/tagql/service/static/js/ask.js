// The ask page: pick a database or collection, ask, watch the stages stream in, edit and re-run the SQL,
// page through the rows, download them, chart them, say whether the answer was right. Follow-ups stay in
// the thread (conversation_id, when the server offers one).

import { ApiError, api, askStream, download, h, saveBlob, showError } from "./api.js";
import { renderChart } from "./chart.js";

const PAGE = 25;
const STAGES = { queued: "queued", routed: "routed", statements: "knowledge", plan: "plan", sql: "SQL",
  rows: "rows", answer: "answer", done: "done" };
const form = document.getElementById("ask");
const select = document.getElementById("target");
const questionBox = document.getElementById("question");
const tagBox = document.getElementById("tag");
const threadEl = document.getElementById("thread");
const pageError = document.getElementById("page-error");
const threadStatus = document.getElementById("thread-status");
const askButton = document.getElementById("ask-button");
let kinds = {};
let conversationId = null;
let turnCount = 0;
let busy = false;

async function loadTargets() {
  try {
    const { databases } = await api("GET", "/v1/databases");
    kinds = Object.fromEntries(databases.map((d) => [d.name, d]));
    const dbs = databases.filter((d) => d.kind === "database");
    const colls = databases.filter((d) => d.kind === "collection");
    select.replaceChildren();
    if (dbs.length) {
      select.append(h("optgroup", { label: "Databases" },
        dbs.map((d) => h("option", { value: d.name }, `${d.name} (${d.dialect}, ${d.tables.length} tables)`))));
    }
    if (colls.length) {
      select.append(h("optgroup", { label: "Collections (routed)" },
        colls.map((d) => h("option", { value: d.name }, `${d.name} (${d.databases.length} databases)`))));
    }
    const last = sessionStorage.getItem("tagql-target");
    if (last && kinds[last]) select.value = last;
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) showError(pageError, e.message);
  }
}

select.addEventListener("change", () => {
  sessionStorage.setItem("tagql-target", select.value);
  newThread("New thread (the database changed).");
});

function newThread(message) {
  conversationId = null;
  threadStatus.textContent = message || "New thread.";
}

document.getElementById("new-thread").addEventListener("click", () => {
  newThread();
  threadEl.replaceChildren();
  questionBox.focus();
});

questionBox.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    form.requestSubmit();
  }
});

form.addEventListener("submit", (e) => {
  e.preventDefault();
  const question = questionBox.value.trim();
  if (!question || !select.value || busy) return;
  const turn = new Turn(question, select.value, tagBox.checked ? "tag" : "sql");
  threadEl.append(turn.el);
  questionBox.value = "";
  turn.run({});
});

function fmt(s) {
  return s === undefined || s === null ? "?" : `${Number(s).toFixed(s < 0.1 ? 2 : 1)} s`;
}

function describeTimings(t, tokens) {
  const parts = [];
  const named = [["route_s", "route"], ["retrieve_s", "knowledge"], ["synthesize_s", "sql"], ["execute_s", "run"],
    ["answer_s", "answer"]];
  for (const [k, label] of named) if (k in (t || {})) parts.push(`${label} ${fmt(t[k])}`);
  let text = `${fmt((t || {}).total_s)}${parts.length ? ` (${parts.join(", ")})` : ""}`;
  if (tokens && tokens.calls !== undefined) {
    text += `; ${tokens.calls} LM call${tokens.calls === 1 ? "" : "s"}, ${tokens.prompt_tokens || 0}+${tokens.completion_tokens || 0} tokens`;
  }
  return text;
}

function cell(v) {
  if (v === null || v === undefined) return h("td", { class: "null" }, "NULL");
  if (typeof v === "number") return h("td", { class: "num" }, String(v));
  return h("td", {}, typeof v === "object" ? JSON.stringify(v) : String(v));
}

function csvOf(columns, rows) {
  const q = (v) => {
    const s = v === null || v === undefined ? "" : String(v);
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [columns, ...rows].map((r) => r.map(q).join(",")).join("\r\n") + "\r\n";
}

class Turn {
  constructor(question, target, method) {
    this.n = ++turnCount;
    this.question = question;
    this.target = target;
    this.method = method;
    this.answer = null;
    const id = (s) => `t${this.n}-${s}`;
    this.ids = id;
    this.stages = h("ul", { class: "stages", "aria-label": "progress" });
    this.error = h("div", { class: "error", role: "alert", hidden: true });
    this.routing = h("div", { class: "routing" });
    this.progress = h("div", { class: "progress", "aria-live": "polite" });
    this.knowledge = h("div");
    this.plan = h("div");
    this.answerText = h("p", { class: "answer-text", "aria-live": "polite" });
    this.sqlBox = h("textarea", { id: id("sql"), class: "sql", rows: 3, spellcheck: "false" });
    this.runButton = h("button", { type: "button", class: "secondary", onclick: () => this.rerun() }, "Run SQL");
    this.stopButton = h("button", { type: "button", class: "secondary", hidden: true, onclick: () => this.stop() }, "Stop");
    this.sqlNote = h("span", { class: "hint", "aria-live": "polite" });
    // the SQL editor appears with the first SQL (or a failure that is not a routing question)
    this.sqlField = h("div", { class: "field", hidden: true }, h("label", { for: id("sql") }, "SQL"), this.sqlBox);
    this.runButton.hidden = true;
    this.result = h("div", { class: "result" });
    this.chart = h("div", { class: "chart-box" });
    this.meta = h("p", { class: "meta" });
    this.feedback = h("div", { class: "feedback", hidden: true });
    this.el = h("section", { class: "turn", "aria-labelledby": id("q") },
      h("h2", { id: id("q") }, question),
      h("p", { class: "meta" }, `${target} · ${method === "tag" ? "reasoning over rows (TAG)" : "SQL"}`),
      this.stages, this.error, this.routing, this.progress, this.knowledge, this.plan, this.answerText,
      this.sqlField, h("div", { class: "row actions" }, this.runButton, this.stopButton, this.sqlNote),
      this.result, this.chart, this.meta, this.feedback);
  }

  stage(name, text, failed) {
    const li = h("li", { class: failed ? "failed" : "done" }, text || STAGES[name] || name);
    this.stages.append(li);
  }

  fail(message) {
    showError(this.error, message);
  }

  stop() {
    if (this.abort) this.abort.abort();
  }

  async run(extra) {
    busy = true;
    askButton.disabled = true;
    this.stopButton.hidden = false;
    this.abort = new AbortController();
    const isCollection = (kinds[this.target] || {}).kind === "collection";
    const body = { question: this.question, method: this.method, ...extra };
    body[isCollection ? "collection" : "database"] = this.target;
    if (conversationId) body.conversation_id = conversationId;
    this.ended = false;
    try {
      await askStream(body, (name, data) => this.onEvent(name, data), this.abort.signal);
      if (!this.ended) {
        this.stage("error", "cut off", true);
        this.fail("The server closed the stream before the answer; ask again.");
      }
    } catch (e) {
      if (e.name === "AbortError") {
        this.stage("error", "stopped", true);
        this.fail("Stopped: the server stops the question at its next stage.");
      } else {
        this.stage("error", "failed", true);
        this.fail(e.message);
        this.showSql();
      }
    } finally {
      busy = false;
      askButton.disabled = false;
      this.stopButton.hidden = true;
    }
  }

  onEvent(name, data) {
    if (name === "done" || name === "error") this.ended = true;
    if (name === "queued") {
      this.stage(name, data.ahead ? `queued (${data.ahead} ahead)` : "started");
    } else if (name === "routed") {
      this.stage(name, `routed to ${data.chosen.database}`);
      this.showCandidates(data.candidates, data.chosen.database, false);
    } else if (name === "statements") {
      this.stage(name, `${data.statements.length} statement${data.statements.length === 1 ? "" : "s"}`);
      this.showStatements(data.statements);
    } else if (name === "plan") {  // sent when made, then again as it ran
      if (!this.planStaged) this.stage(name);
      this.planStaged = true;
      this.showPlan(data);
    } else if (name === "progress") {
      this.showProgress(data);
    } else if (name === "sql") {
      this.stage(name);
      this.sqlBox.value = data.sql;
      this.showSql();
    } else if (name === "rows") {
      this.stage(name, `${data.rows.length} row${data.rows.length === 1 ? "" : "s"}`);
      this.showRows(data.columns, data.rows, data.truncated, true);
    } else if (name === "answer") {
      this.stage(name);
      this.answerText.textContent = data.answer;
    } else if (name === "done") {
      this.stage(name);
      this.done(data);
    } else if (name === "error") {
      this.stage(name, "failed", true);
      this.fail(data.error);
      if (data.candidates && data.candidates.length) this.showCandidates(data.candidates, null, true);
      else this.showSql();
    }
  }

  showSql() {
    this.sqlField.hidden = false;
    this.runButton.hidden = false;
  }

  done(answer) {
    this.answer = answer;
    if (answer.conversation_id) {
      conversationId = answer.conversation_id;
      threadStatus.textContent = "Thread continues.";
    }
    if (!this.sqlBox.value && answer.sql) this.sqlBox.value = answer.sql;
    this.showSql();
    if (!this.answerText.textContent) this.answerText.textContent = answer.answer;
    this.meta.textContent = describeTimings(answer.timings, answer.tokens);
    if (answer.notes && answer.notes.length) this.meta.append(h("br"), `Notes: ${answer.notes.join("; ")}`);
    this.showFeedback();
  }

  showCandidates(candidates, chosen, unsure) {
    const list = h("ul", { class: "candidates" });
    for (const c of candidates) {
      const picked = c.database === chosen;
      list.append(h("li", {},
        h("strong", {}, c.database),
        h("span", { class: "tables" }, `tables: ${(c.tables || []).join(", ") || "—"}`),
        c.confidence !== null && c.confidence !== undefined ? h("span", { class: "hint" }, `confidence ${(c.confidence * 100).toFixed(0)}%`) : null,
        picked ? h("span", { class: "ok-msg" }, "answered here")
          : h("button", { type: "button", class: unsure ? "" : "secondary small", onclick: () => this.pick(c.database) },
            unsure ? `Use ${c.database}` : `Answer on ${c.database} instead`)));
    }
    const title = unsure ? "Which database is it about?" : "Routed among";
    this.routing.replaceChildren(unsure ? h("h3", {}, title) : h("details", {}, h("summary", {}, `${title} ${candidates.length} candidates`), list));
    if (unsure) {
      this.routing.append(list);
      const first = list.querySelector("button");
      if (first) first.focus();
    }
  }

  pick(database) {
    // the pick is sent with the question again; the server answers on it and records it with the answer
    for (const el of [this.stages, this.error, this.routing, this.progress, this.knowledge, this.plan, this.result, this.chart, this.feedback]) {
      el.replaceChildren();
    }
    this.error.hidden = true;
    this.answerText.textContent = "";
    this.meta.textContent = "";
    this.sqlBox.value = "";
    this.progressBars = {};
    this.stage("pick", `picked ${database}`);
    this.run({ pick: database });
  }

  showStatements(statements) {
    if (!statements.length) {
      this.knowledge.replaceChildren();
      return;
    }
    this.knowledge.replaceChildren(h("details", { class: "statements" },
      h("summary", {}, `Domain knowledge used (${statements.length})`),
      h("ul", {}, statements.map((s) => h("li", {}, h("q", {}, s.text), s.sql ? " refers to " : "", s.sql ? h("code", {}, s.sql) : "")))));
  }

  showPlan(plan) {
    const ops = plan.operators || [];
    this.plan.replaceChildren(h("details", { open: true },
      h("summary", {}, `Plan: ${ops.length} LM operator${ops.length === 1 ? "" : "s"}`),
      plan.sql ? h("pre", {}, plan.sql) : null,
      h("ol", {}, ops.map((op) => h("li", {}, Object.entries(op).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(" · "))))));
  }

  showProgress(p) {
    this.progressBars = this.progressBars || {};
    let bar = this.progressBars[p.operator];
    if (!bar) {
      const id = this.ids(`op${Object.keys(this.progressBars).length}`);
      bar = { meter: h("progress", { id, max: 1, value: 0 }), text: h("span") };
      this.progressBars[p.operator] = bar;
      this.progress.append(h("div", {}, h("label", { for: id }, `${p.operator} `), bar.meter, " ", bar.text));
    }
    bar.meter.max = p.total || 1;
    bar.meter.value = p.done;
    bar.text.textContent = `${p.done} / ${p.total} rows judged`;
  }

  showRows(columns, rows, truncated, fromAnswer) {
    this.current = { columns, rows, fromAnswer };
    let page = 0;
    const pages = Math.max(1, Math.ceil(rows.length / PAGE));
    const tbody = h("tbody");
    const label = h("span", { "aria-live": "polite" });
    const prev = h("button", { type: "button", class: "secondary small", onclick: () => show(page - 1) }, "Previous");
    const next = h("button", { type: "button", class: "secondary small", onclick: () => show(page + 1) }, "Next");
    const show = (p) => {
      page = Math.min(Math.max(p, 0), pages - 1);
      tbody.replaceChildren(...rows.slice(page * PAGE, (page + 1) * PAGE).map((r) => h("tr", {}, r.map(cell))));
      const first = rows.length ? page * PAGE + 1 : 0;
      label.textContent = `rows ${first}–${Math.min(rows.length, (page + 1) * PAGE)} of ${rows.length}${truncated ? " (capped)" : ""}`;
      prev.disabled = page === 0;
      next.disabled = page >= pages - 1;
    };
    const table = h("table", { class: "grid" },
      h("caption", { class: "visually-hidden" }, "Result rows"),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))), tbody);
    const csv = h("button", { type: "button", class: "secondary small", onclick: () => this.csv() }, "Download CSV");
    this.result.replaceChildren(h("div", { class: "table-wrap" }, table),
      h("div", { class: "pager" }, prev, next, label, csv));
    show(0);
    renderChart(this.chart, columns, rows, this.ids("chart")).catch((e) => {
      this.chart.replaceChildren(h("p", { class: "hint" }, `No chart: ${e.message}`));
    });
  }

  async csv() {
    try {
      if (this.current.fromAnswer && this.answer && this.answer.id) {
        await download(`/v1/answers/${encodeURIComponent(this.answer.id)}.csv`, `${this.answer.id}.csv`);
      } else {
        saveBlob(new Blob([csvOf(this.current.columns, this.current.rows)], { type: "text/csv" }), "result.csv");
      }
    } catch (e) {
      this.fail(e.message);
    }
  }

  async rerun() {
    const sql = this.sqlBox.value.trim();
    if (!sql) return;
    this.error.hidden = true;
    this.sqlNote.textContent = "running…";
    const isCollection = (kinds[this.target] || {}).kind === "collection";
    const body = { sql };
    if (isCollection) {
      body.collection = this.target;
      body.database = this.answer ? this.answer.database : undefined;
    } else {
      body.database = this.target;
    }
    try {
      const r = await api("POST", "/v1/sql", body);
      this.sqlNote.textContent = `ran your SQL: ${r.rows.length} row${r.rows.length === 1 ? "" : "s"}${r.notes && r.notes.length ? ` (${r.notes.join("; ")})` : ""}`;
      this.showRows(r.columns, r.rows, r.truncated, r.sql === (this.answer || {}).sql);
    } catch (e) {
      this.sqlNote.textContent = "";
      this.fail(e.message);
    }
  }

  showFeedback() {
    if (!this.answer || !this.answer.id) return;
    const status = h("span", { class: "hint", "aria-live": "polite" });
    const send = async (body, what) => {
      try {
        const r = await api("POST", `/v1/answers/${encodeURIComponent(this.answer.id)}/feedback`, body);
        status.className = "ok-msg";
        status.textContent = r.verified_example_id ? `${what}: saved as a verified example for ${this.answer.database}.` : `${what}: thank you.`;
      } catch (e) {
        status.className = "hint";
        status.textContent = e.message;
      }
    };
    this.feedback.replaceChildren(
      h("span", { class: "label" }, "Was this right? "),
      h("button", { type: "button", class: "good small", onclick: () => send({ correct: true }, "Correct") }, "Correct"),
      " ",
      h("button", { type: "button", class: "bad small", onclick: () => send({ correct: false }, "Not correct") }, "Not correct"),
      " ",
      h("button", {
        type: "button", class: "secondary small",
        onclick: () => {
          const sql = this.sqlBox.value.trim();
          if (!sql || sql === this.answer.sql) {
            status.textContent = "Edit the SQL above first, then save it as the correction.";
            this.sqlBox.focus();
            return;
          }
          send({ correct: false, sql }, "Corrected SQL");
        },
      }, "Save my SQL as the correction"),
      " ", status);
    this.feedback.hidden = false;
  }
}

loadTargets();
