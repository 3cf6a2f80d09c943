#include "server/chat_page.h"

namespace lumen::server {

namespace {

// Kept small and dependency-free on purpose: the page must work offline and from the binary
// alone. Element ids are stable: tests drive the page through them.
constexpr std::string_view kPage = R"LUMEN_PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Lumen chat</title>
<style>
  :root { --bg:#f6f7f9; --fg:#1d2330; --muted:#6b7385; --user:#dbe8ff; --bot:#ffffff; --accent:#2f6fed; }
  * { box-sizing: border-box; }
  body { margin:0; font:15px/1.5 system-ui, sans-serif; background:var(--bg); color:var(--fg);
         display:flex; flex-direction:column; height:100vh; }
  header { display:flex; gap:1em; align-items:center; padding:.6em 1em; background:#fff; border-bottom:1px solid #dde1e8; }
  header h1 { font-size:1.05em; margin:0; }
  header .info { color:var(--muted); font-size:.9em; }
  header .spacer { flex:1; }
  header input { width:12em; }
  #messages { flex:1; overflow-y:auto; padding:1em; display:flex; flex-direction:column; gap:.7em; }
  .msg { max-width:80%; padding:.55em .8em; border-radius:10px; white-space:pre-wrap; word-wrap:break-word; }
  .msg.user { align-self:flex-end; background:var(--user); }
  .msg.assistant { align-self:flex-start; background:var(--bot); border:1px solid #e3e6ec; min-height:2em; }
  .msg.error { align-self:center; background:#ffe3e3; color:#8a1c1c; }
  .msg .note { display:block; color:var(--muted); font-size:.8em; margin-top:.3em; }
  form { display:flex; gap:.5em; padding:.7em 1em; background:#fff; border-top:1px solid #dde1e8; }
  textarea { flex:1; resize:none; height:3.2em; font:inherit; padding:.4em; }
  button { font:inherit; padding:0 1.1em; border-radius:6px; border:1px solid var(--accent); background:var(--accent); color:#fff; cursor:pointer; }
  button:disabled { opacity:.45; cursor:default; }
  #stop { background:#fff; color:var(--accent); }
  label { color:var(--muted); font-size:.85em; }
  label input { width:4.5em; }
</style>
</head>
<body data-state="idle">
<header>
  <h1>Lumen</h1>
  <span class="info">model: <span id="model-name">…</span></span>
  <span class="info" id="speed"></span>
  <span class="spacer"></span>
  <label>max tokens <input id="max-tokens" type="number" min="1" value="256"></label>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.8"></label>
  <input id="api-key" type="password" placeholder="API key (if set)" autocomplete="off">
  <button id="clear" type="button">New chat</button>
</header>
<div id="messages" aria-live="polite"></div>
<form id="composer">
  <textarea id="input" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let controller = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const el = document.createElement("div");
  el.className = "msg " + role;
  el.textContent = text;
  $("messages").appendChild(el);
  el.scrollIntoView({ block: "end" });
  return el;
}

function setBusy(busy) {
  document.body.dataset.state = busy ? "streaming" : "idle";
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function loadModel() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    const body = await res.json();
    $("model-name").textContent = res.ok ? body.data[0].id : "(" + body.error.message + ")";
  } catch (e) {
    $("model-name").textContent = "(unreachable)";
  }
}

// Yields the JSON payload of every "data:" event of an SSE body.
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;  // comments (keep-alives) and other fields
        const data = line.slice(6);
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const el = addMessage("assistant", "");
  const note = document.createElement("span");
  note.className = "note";
  let reply = "", pieces = 0, tokens = null, first = null, reason = null;
  controller = new AbortController();
  setBusy(true);
  const started = performance.now();
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({
        messages: history, stream: true, stream_options: { include_usage: true },
        max_tokens: Math.max(1, parseInt($("max-tokens").value, 10) || 256),
        temperature: Math.max(0, parseFloat($("temperature").value) || 0),
      }),
    });
    if (!res.ok) {
      const body = await res.json().catch(() => null);
      throw new Error(body && body.error ? body.error.message : "HTTP " + res.status);
    }
    for await (const chunk of events(res)) {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) reason = choice.finish_reason;
      if (choice.delta && choice.delta.content) {
        if (first === null) first = performance.now();
        reply += choice.delta.content;
        pieces += 1;
        el.textContent = reply;
        el.scrollIntoView({ block: "end" });
      }
    }
    el.dataset.finish = reason || "";
  } catch (e) {
    if (e.name === "AbortError") {
      el.dataset.finish = "stopped";
      note.textContent = "stopped";
    } else {
      el.dataset.finish = "error";
      addMessage("error", String(e.message || e));
    }
  } finally {
    controller = null;
    setBusy(false);
    // The assistant turn stays in the history even when stopped, so the turns alternate.
    history.push({ role: "assistant", content: reply });
    const n = tokens !== null ? tokens : pieces;
    const seconds = (performance.now() - (first !== null ? first : started)) / 1000;
    if (n > 0 && seconds > 0) {
      const rate = (n / seconds).toFixed(1);
      $("speed").textContent = n + " tokens, " + rate + " tokens/s";
      note.textContent = (note.textContent ? note.textContent + " · " : "") + n + " tokens · " + rate + " tokens/s";
    }
    if (note.textContent) el.appendChild(note);
  }
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  history.length = 0;
  $("messages").replaceChildren();
  $("speed").textContent = "";
});
$("api-key").addEventListener("change", loadModel);
loadModel();
</script>
</body>
</html>
)LUMEN_PAGE";

}  // namespace

std::string_view chat_page_html() { return kPage; }

}  // namespace lumen::server
