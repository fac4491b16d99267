// The REST API as the pages use it: JSON calls, the SSE form of POST /v1/ask (fetch + a stream reader:
// EventSource cannot POST), the bearer token (sessionStorage, this tab only) and a safe element builder.
// Data is only ever put into the page as text (textContent), never parsed as HTML.

const TOKEN_KEY = "tagql-token";

export class ApiError extends Error {
  constructor(message, status, body) {
    super(message);
    this.status = status;
    this.body = body || {};
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers(extra) {
  const h = { ...extra };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function failure(res) {
  let body = {};
  try {
    body = await res.json();
  } catch {
    body = {};
  }
  const message = body.error || `the server answered ${res.status} ${res.statusText}`;
  const err = new ApiError(message, res.status, body);
  if (res.status === 401) showLogin(message);
  return err;
}

export async function api(method, path, body) {
  const init = { method, headers: headers({ Accept: "application/json" }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch {
    throw new ApiError("the server cannot be reached; is tagql serve running?", 0);
  }
  if (!res.ok) throw await failure(res);
  const data = await res.json();
  if (data && data.ok === false) throw new ApiError(data.error, data.status || res.status, data);
  return data;
}

/** Download a path (e.g. an answer's CSV) with the token, as a file named `name`. */
export async function download(path, name) {
  let res;
  try {
    res = await fetch(path, { headers: headers({}) });
  } catch {
    throw new ApiError("the server cannot be reached; is tagql serve running?", 0);
  }
  if (!res.ok) throw await failure(res);
  saveBlob(await res.blob(), name);
}

export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** POST /v1/ask as server-sent events: calls onEvent(name, data) per event; resolves when the stream ends. */
export async function askStream(body, onEvent, signal) {
  let res;
  try {
    res = await fetch("/v1/ask", {
      method: "POST",
      headers: headers({ Accept: "text/event-stream", "Content-Type": "application/json" }),
      body: JSON.stringify(body),
      signal,
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError("the server cannot be reached; is tagql serve running?", 0);
  }
  if (!res.ok) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue; // keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") name = val;
        else if (field === "data") data.push(val);
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

/** An element with attributes (on* keys become listeners) and children (strings become text nodes). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function showError(where, message) {
  where.textContent = message;
  where.hidden = !message;
}

export function showLogin(message) {
  const form = document.getElementById("login");
  if (!form || !form.hidden) return;
  document.getElementById("login-why").textContent = token()
    ? `${message}. Sign in with another token.`
    : "This server needs a token.";
  form.hidden = false;
  document.getElementById("main").hidden = true;
  document.getElementById("login-token").focus();
}

function initLogin() {
  const form = document.getElementById("login");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("login-token").value.trim());
    location.reload();
  });
  const who = document.getElementById("who");
  if (token()) {
    who.append(
      h("span", {}, "Signed in with a token"),
      h("button", {
        type: "button", class: "secondary small",
        onclick: () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); },
      }, "Sign out"),
    );
  }
}

initLogin();
