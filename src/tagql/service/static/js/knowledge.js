// The knowledge page: a database's statements with their review state and data check, adding one (expert),
// the review queue (reviewer: approve / reject / edit with a note), the verified examples, and the
// unresolved-expressions queue when the server has it.

import { ApiError, api, h, showError } from "./api.js";

const dbSelect = document.getElementById("kb-db");
const statusSelect = document.getElementById("kb-status");
const pageError = document.getElementById("page-error");
const tbody = document.querySelector("#statements tbody");
const examplesBody = document.querySelector("#examples tbody");
const count = document.getElementById("st-count");
const unresolvedSection = document.getElementById("unresolved-section");
const unresolvedList = document.getElementById("unresolved");

function db() {
  return encodeURIComponent(dbSelect.value);
}

function guard(e) {
  if (!(e instanceof ApiError && e.status === 401)) showError(pageError, e.message);
}

async function loadDatabases() {
  try {
    const { databases } = await api("GET", "/v1/databases");
    const names = databases.filter((d) => d.kind === "database").map((d) => d.name);
    dbSelect.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
    const wanted = new URLSearchParams(location.search).get("database") || sessionStorage.getItem("tagql-target");
    if (wanted && names.includes(wanted)) dbSelect.value = wanted;
    await refresh();
  } catch (e) {
    guard(e);
  }
}

async function refresh() {
  showError(pageError, "");
  if (!dbSelect.value) return;
  await Promise.all([loadStatements(), loadExamples(), loadUnresolved()]);
}

function reviewCell(st) {
  const id = `note-${st.id}`;
  const note = h("input", { id, placeholder: "note (why)", "aria-label": `Review note for statement ${st.id}` });
  const status = h("span", { class: "hint", "aria-live": "polite" });
  const act = async (action, extra) => {
    try {
      await api("POST", `/v1/databases/${db()}/statements/${st.id}/review`, { action, note: note.value || null, ...extra });
      await loadStatements();
    } catch (e) {
      status.textContent = e.message;
    }
  };
  const edit = () => {
    const text = h("input", { value: st.text, "aria-label": `Phrase of statement ${st.id}` });
    const sql = h("input", { value: st.sql, class: "mono", "aria-label": `SQL of statement ${st.id}` });
    const box = h("div", { class: "review" }, text, sql,
      h("div", { class: "btns" },
        h("button", { type: "button", class: "small", onclick: () => act("edit", { text: text.value, sql: sql.value }) }, "Save edit"),
        h("button", { type: "button", class: "secondary small", onclick: () => loadStatements() }, "Cancel")));
    cell.replaceChildren(box, note, status);
    text.focus();
  };
  const cell = h("div", { class: "review" }, note, h("div", { class: "btns" },
    st.status !== "approved" ? h("button", { type: "button", class: "good small", onclick: () => act("approve") }, "Approve") : null,
    st.status !== "rejected" ? h("button", { type: "button", class: "bad small", onclick: () => act("reject") }, "Reject") : null,
    h("button", { type: "button", class: "secondary small", onclick: edit }, "Edit")), status);
  return cell;
}

async function loadStatements() {
  try {
    const q = statusSelect.value ? `?status=${encodeURIComponent(statusSelect.value)}` : "";
    const { statements } = await api("GET", `/v1/databases/${db()}/statements${q}`);
    count.textContent = `(${statements.length})`;
    tbody.replaceChildren(...statements.map((st) => h("tr", { "data-id": st.id },
      h("td", {}, String(st.id)),
      h("td", {}, st.text, st.nl ? h("div", { class: "hint" }, st.nl) : null),
      h("td", {}, h("code", {}, st.sql)),
      h("td", {}, h("span", { class: `status-${st.status}` }, st.status)),
      h("td", {}, st.reason || "✓ no objection"),
      h("td", {}, st.author || ""),
      h("td", {}, reviewCell(st)))));
    if (!statements.length) tbody.append(h("tr", {}, h("td", { colspan: 7, class: "hint" }, "No statements yet.")));
  } catch (e) {
    guard(e);
  }
}

async function loadExamples() {
  try {
    const { examples } = await api("GET", `/v1/databases/${db()}/examples`);
    examplesBody.replaceChildren(...examples.map((ex) => h("tr", {},
      h("td", {}, ex.question), h("td", {}, h("code", {}, ex.sql)))));
    if (!examples.length) examplesBody.append(h("tr", {}, h("td", { colspan: 2, class: "hint" }, "None yet: say an answer was correct, or correct its SQL, on the Ask page.")));
  } catch (e) {
    guard(e);
  }
}

async function loadUnresolved() {
  // phrases of failed, empty or wrong answers that no statement covers, most asked first (expert role)
  try {
    const { phrases } = await api("GET", `/v1/databases/${db()}/unresolved`);
    unresolvedSection.hidden = false;
    unresolvedList.replaceChildren(...phrases.map((it) => {
      const outcomes = Object.entries(it.outcomes || {}).map(([k, n]) => `${k} ${n}`).join(", ");
      const status = h("span", { class: "hint", "aria-live": "polite" });
      return h("li", { "data-phrase": it.phrase },
        h("strong", {}, it.phrase), " ",
        h("span", { class: "hint" }, `${it.count} question${it.count === 1 ? "" : "s"}${outcomes ? ` (${outcomes})` : ""}`),
        h("ul", {}, (it.questions || []).slice(0, 5).map((q) => h("li", {}, q.question,
          q.outcome ? h("span", { class: "hint" }, ` — ${q.outcome}${q.error ? `: ${q.error}` : ""}`) : null))),
        h("div", { class: "btns" },
          h("button", {
            type: "button", class: "secondary small",
            onclick: () => {
              document.getElementById("add-text").value = it.phrase;
              const first = (it.questions || [])[0];
              if (first && !document.getElementById("add-nl").value) {
                document.getElementById("add-nl").value = `In "${first.question}", "${it.phrase}" means: `;
              }
              document.getElementById("add-h").scrollIntoView();
              document.getElementById("add-sql").focus();
            },
          }, "Write a statement for this"), " ",
          h("button", {
            type: "button", class: "secondary small",
            onclick: async () => {
              try {
                await api("POST", `/v1/databases/${db()}/unresolved/dismiss`, { phrase: it.phrase });
                await loadUnresolved();
              } catch (e) {
                status.textContent = e.message;
              }
            },
          }, "Dismiss"), " ", status));
    }));
    if (!phrases.length) unresolvedList.append(h("li", { class: "hint" }, "Nothing unresolved."));
  } catch (e) {
    unresolvedSection.hidden = false;
    unresolvedList.replaceChildren(h("li", { class: "hint" }, e.message));
  }
}

document.getElementById("add").addEventListener("submit", async (e) => {
  e.preventDefault();
  const status = document.getElementById("add-status");
  const body = {
    text: document.getElementById("add-text").value.trim(),
    sql: document.getElementById("add-sql").value.trim(),
    nl: document.getElementById("add-nl").value.trim(),
  };
  try {
    const { statement } = await api("POST", `/v1/databases/${db()}/statements`, body);
    status.className = "ok-msg";
    status.textContent = `Proposed as #${statement.id}${statement.reason ? ` — data check: ${statement.reason}` : ""}. A reviewer approves it below.`;
    e.target.reset();
    document.getElementById("structure-status").textContent = "";
    await loadStatements();
  } catch (err) {
    status.className = "hint";
    status.textContent = err.message;
  }
});

document.getElementById("structure").addEventListener("click", async (e) => {
  const button = e.currentTarget;
  const status = document.getElementById("structure-status");
  const nl = document.getElementById("add-nl").value.trim();
  if (!nl) {
    status.textContent = "Write the statement in plain words first.";
    document.getElementById("add-nl").focus();
    return;
  }
  button.disabled = true;
  status.textContent = "The model is structuring it…";
  try {
    const r = await api("POST", `/v1/databases/${db()}/statements/structure`, { nl });
    document.getElementById("add-text").value = r.text;
    document.getElementById("add-sql").value = r.sql;
    status.textContent = r.problem
      ? `Check this: ${r.problem}. Fix the phrase or SQL, then Propose.`
      : "Proposed by the model: check the phrase and SQL, then Propose.";
    document.getElementById("add-text").focus();
  } catch (err) {
    status.textContent = err.message;
  } finally {
    button.disabled = false;
  }
});

dbSelect.addEventListener("change", refresh);
statusSelect.addEventListener("change", loadStatements);
loadDatabases();
