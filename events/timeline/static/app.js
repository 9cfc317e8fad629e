// Activity Timeline: submits a task to the gateway and follows its events
// with EventSource (which resumes with Last-Event-ID after a drop).
import { Timeline, FileTree, STAGES } from "./state.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const store = window.sessionStorage;

$("project").value = params.get("project") || store.getItem("project") || "";
$("token").value = params.get("token") || store.getItem("token") || "";
if (params.has("token")) history.replaceState(null, "", location.pathname); // keep the token out of the address bar

const timeline = new Timeline(100);
const tree = new FileTree();
let source = null;
let lastSeq = 0;
let applied = 0; // events applied, for the reconnect check: equals lastSeq when none was skipped
const streams = new Map(); // messageId → text

for (const s of STAGES) {
  const li = document.createElement("li");
  li.textContent = s;
  li.dataset.stage = s;
  $("stages").append(li);
}

function creds() {
  const project = $("project").value.trim();
  const token = $("token").value.trim();
  store.setItem("project", project);
  store.setItem("token", token);
  return { project, token };
}

$("task-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const { project, token } = creds();
  $("message").textContent = "";
  let resp;
  try {
    resp = await fetch(`/v1/projects/${encodeURIComponent(project)}/tasks`, {
      method: "POST",
      headers: { "Authorization": `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ type: $("type").value, prompt: $("prompt").value }),
    });
  } catch (err) {
    $("message").textContent = `submit failed: ${err}`;
    return;
  }
  if (!resp.ok) {
    $("message").textContent = `submit failed: ${resp.status} ${(await resp.text()).trim()}`;
    return;
  }
  const task = await resp.json();
  watch(task.id, token);
});

$("watch").addEventListener("click", () => {
  const id = $("watch-task").value.trim();
  if (id) watch(id, creds().token);
});

function reset() {
  if (source) source.close();
  timeline.clear();
  tree.clear();
  streams.clear();
  lastSeq = 0;
  applied = 0;
  $("timeline").replaceChildren();
  $("stream").textContent = "";
  $("status").textContent = "";
  $("status").className = "";
  $("iteration").textContent = "";
  $("bar-fill").style.width = "0";
  for (const li of $("stages").children) li.className = "";
  renderTree();
}

function watch(taskId, token) {
  reset();
  document.body.dataset.task = taskId;
  const url = `/v1/tasks/${encodeURIComponent(taskId)}/events?access_token=${encodeURIComponent(token)}`;
  source = new EventSource(url);
  setConn("connecting");
  source.onopen = () => setConn("live");
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      setConn("closed");
      if (!$("status").textContent) $("message").textContent = "stream refused (check the token and project)";
    } else {
      setConn("reconnecting");
    }
  };
  source.onmessage = (m) => {
    const ev = JSON.parse(m.data);
    if (ev.seq <= lastSeq) { // already applied: never expected, counted to prove it
      document.body.dataset.duplicates = Number(document.body.dataset.duplicates || 0) + 1;
      return;
    }
    lastSeq = ev.seq;
    applied++;
    document.body.dataset.lastSeq = lastSeq;
    document.body.dataset.applied = applied;
    apply(ev);
  };
}

function setConn(state) {
  $("conn").textContent = state;
  $("conn").className = `conn ${state}`;
  document.body.dataset.conn = state;
}

function apply(ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "progress":
      progress(p);
      break;
    case "file_update":
      tree.apply(p);
      renderTree();
      break;
    case "agent_phase":
      if (["completed", "failed", "cancelled"].includes(p.phase)) {
        $("status").textContent = p.phase;
        $("status").className = p.phase;
        document.body.dataset.status = p.phase;
        if (p.phase === "completed") $("bar-fill").style.width = "100%";
        if (p.phase !== "failed") source.close(); // a failed task may be retried
        if (p.phase !== "failed") setConn("done");
      }
      break;
  }
  if (ev.type === "progress" && ["stream_delta", "thinking", "tool_start", "tool_complete"].includes(p.kind)) {
    $("event-count").textContent = `(${lastSeq} events)`;
    return; // shown elsewhere, not as timeline rows
  }
  timeline.add(ev);
  renderTimeline();
  $("event-count").textContent = `(${lastSeq} events, ${timeline.events.length} kept)`;
}

function progress(p) {
  switch (p.kind) {
    case "stage_enter":
    case "stage_exit": {
      const i = STAGES.indexOf(p.stage);
      for (const li of $("stages").children) {
        const j = STAGES.indexOf(li.dataset.stage);
        if (j < i || (j === i && p.kind === "stage_exit")) li.className = "done";
        else if (j === i) li.className = "active";
      }
      if (i >= 0) $("bar-fill").style.width = `${Math.round(((i + (p.kind === "stage_exit" ? 1 : 0.5)) / STAGES.length) * 100)}%`;
      break;
    }
    case "iteration_start":
      $("iteration").textContent = `iteration ${p.iteration}${p.totalIterations ? "/" + p.totalIterations : ""}`;
      break;
    case "stream_delta":
      streams.set(p.messageId, (streams.get(p.messageId) || "") + (p.delta || ""));
      renderStream();
      break;
    case "stream_complete":
      streams.set(p.messageId, p.content || "");
      renderStream();
      break;
  }
}

function renderStream() {
  $("stream").textContent = [...streams.values()].join("\n\n");
}

function describe(ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "agent_phase": return { cls: "phase", text: `${p.phase}${p.action ? " " + p.action : ""}${p.status ? " · " + p.status : ""}${p.summary ? ": " + p.summary : ""}` };
    case "tool_call": return { cls: `tool${p.success ? "" : " failed"}`, text: `› ${p.toolName}${p.fromPath ? ` ${p.fromPath} → ${p.toPath}` : p.argsSummary ? `(${p.argsSummary})` : ""} ${p.success ? "✓" : "✗"} ${p.resultSummary || ""}` };
    case "file_update": return { cls: "file", text: p.op === "move" ? `• move ${p.fromPath} → ${p.toPath}` : `• ${p.op} ${p.path}` };
    case "self_repair": return { cls: "warning", text: `⚠ self-repair attempt ${p.attemptNumber}/${p.maxAttempts} (${p.result}): ${p.trigger}` };
    case "error": return { cls: "error", text: `✖ ${p.errorType}: ${p.message}${p.recoverable ? " (recoverable)" : ""}` };
    case "log": return { cls: p.level === "error" ? "error" : p.level === "warn" ? "log warning" : "log", text: `${p.level}: ${p.message}` };
    case "progress":
      if (p.kind === "stage_enter") return { cls: "phase stage", text: `▶ ${p.stage}` };
      if (p.kind === "stage_exit") return { cls: "progress", text: `■ ${p.stage} done` };
      if (p.kind === "iteration_start") return { cls: "progress", text: `iteration ${p.iteration}` };
      if (p.kind === "stream_complete") return { cls: "progress", text: `model said ${p.totalLength} bytes` };
      return { cls: "progress", text: p.kind };
  }
  return { cls: "log", text: ev.type };
}

function renderTimeline() {
  const ol = $("timeline");
  const items = timeline.events.map((ev) => {
    const li = document.createElement("li");
    const d = describe(ev);
    li.className = d.cls;
    li.dataset.seq = ev.seq;
    li.dataset.type = ev.type;
    li.textContent = d.text;
    return li;
  });
  ol.replaceChildren(...items);
  ol.scrollTop = ol.scrollHeight;
}

function renderTree() {
  const root = { dirs: new Map(), files: [] };
  for (const path of tree.paths()) {
    const parts = path.split("/");
    let node = root;
    for (const dir of parts.slice(0, -1)) {
      if (!node.dirs.has(dir)) node.dirs.set(dir, { dirs: new Map(), files: [] });
      node = node.dirs.get(dir);
    }
    node.files.push(path);
  }
  const build = (node) => {
    const ul = document.createElement("ul");
    for (const [name, child] of [...node.dirs].sort()) {
      const li = document.createElement("li");
      li.className = "dir";
      li.textContent = `${name}/`;
      li.append(build(child));
      ul.append(li);
    }
    for (const path of node.files.sort()) {
      const li = document.createElement("li");
      li.className = "file-node";
      if (path === tree.selected) li.classList.add("selected");
      if (tree.movedTo.has(path)) li.classList.add("moved");
      li.dataset.path = path;
      li.textContent = path.split("/").pop();
      li.addEventListener("click", () => {
        tree.selected = path;
        renderTree();
      });
      ul.append(li);
    }
    return ul;
  };
  $("tree").replaceChildren(build(root));
  $("selected").textContent = tree.selected || "—";
}
