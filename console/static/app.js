// The agentworker console: a project's tasks, live from the project stream;
// a task's timeline (its own stream, resumed with Last-Event-ID after a
// drop), result, error and changes; the project's files, inbox, usage and
// runs;
// and the controls. Everything shown is read from the server; the project
// and token are kept in localStorage and the selected task in the URL, so
// a reload shows the same page.
import { Timeline, FileTree, TaskList, STAGES, CONTROLS, age, money, diffLineClass, callLines } from "./state.js";
import { Client, enc, filePath, tokenClaims, describeToken } from "./api.js";
import { renderBoard, redrawBoard, onCardClick, onBroadcast, onReview, graphFields, clearGraphFields, showRelations, statusText, cascade, cascadeText, ask } from "./board.js";
import { openAgents, reloadOnRefusal, agentName } from "./agents.js";
import { daySeries, drawRunsChart, runRows, duration } from "./runs.js";
import { renderChanges, renderGeneral, selectLine } from "./review.js";
import { renderMarkdown, isMarkdown } from "./markdown.js";
import { $, el } from "./dom.js";

const store = window.localStorage;

let client = null;
let project = "";
const tasks = new TaskList();
let projectSource = null;
let inboxItems = [];
let current = null; // the selected task as last read
let source = null;
let lastSeq = 0;
let applied = 0; // events applied, for the reconnect check: equals lastSeq when none was skipped
const timeline = new Timeline(100);
const tree = new FileTree();
const streams = new Map(); // messageId → text

// ---- start-up: credentials from localStorage, or from a link ----

// A link's token is taken as is only by a page that holds none. It never
// replaces a stored token unless the person confirms the project it opens:
// a link could otherwise swap whose project the next prompt goes to.
let pending = null; // { project, token } of a link, awaiting that choice
{
  const params = new URLSearchParams(location.search);
  const linkToken = params.get("token");
  const linkProject = params.get("project");
  const stored = store.getItem("token");
  if (linkToken !== null && stored && linkToken !== stored) {
    pending = { project: linkProject || "", token: linkToken };
  } else {
    if (linkToken !== null) store.setItem("token", linkToken);
    if (linkProject !== null) store.setItem("project", linkProject);
  }
  $("project").value = store.getItem("project") || "";
  $("token").value = store.getItem("token") || "";
  if (linkToken !== null) {
    // Keep the token out of the address bar and the history.
    history.replaceState(null, "", `${location.pathname}?project=${enc($("project").value)}${location.hash}`);
  }
  if (pending) showSwitch();
}

// showSwitch asks whether to enter the project of a link's token, saying
// which project and subject each token is for.
function showSwitch() {
  const theirs = describeToken(pending.token);
  const mine = describeToken(store.getItem("token") || "");
  $("switch-text").textContent = `A link asks to open project ${pending.project || "(none)"} ${theirs}. ` +
    `You are in project ${store.getItem("project") || "(none)"} ${mine}. Enter the link's project? ` +
    "Until you do, everything you type goes to your project.";
  $("switch").hidden = false;
}

$("switch-confirm").addEventListener("click", () => {
  const p = pending;
  pending = null;
  $("switch").hidden = true;
  $("project").value = p.project;
  $("token").value = p.token;
  open(p.project, p.token);
});

$("switch-cancel").addEventListener("click", () => {
  pending = null;
  $("switch").hidden = true;
});

// showIdentity says which project the page uses and whom its token names.
function showIdentity(p, token) {
  const c = tokenClaims(token);
  $("identity").textContent = `Project ${p} ${describeToken(token)}`;
  document.body.dataset.subject = (c && c.sub) || "";
}

for (const s of STAGES) $("stages").append(el("li", { textContent: s, data: { stage: s } }));

for (const nav of document.querySelectorAll("nav.tabs")) {
  nav.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-tab]");
    if (b) showTab(nav, b.dataset.tab);
  });
}

function showTab(nav, tab) {
  for (const b of nav.querySelectorAll("button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const p of nav.parentElement.querySelectorAll(":scope > .pane")) p.hidden = p.dataset.pane !== tab;
  if (tab === "changes" && current) loadChanges(current.id);
  if (tab === "logs" && client) searchLogs(false);
  if (tab === "docs" && client) loadDocs(false);
}

// say shows a message; code is the refusal's error code, kept for
// machines in data-code.
function say(text, code = "") {
  $("message").textContent = text;
  if (code) $("message").dataset.code = code;
  else delete $("message").dataset.code;
}

// guarded runs an action and shows its failure instead of throwing.
async function guarded(fn) {
  try {
    return await fn();
  } catch (err) {
    // A fetch that got no answer at all throws a TypeError.
    if (err instanceof TypeError) say("The server did not answer (it is down, or the network is): try again in a moment.");
    else say(String(err.message || err), err.code || "");
    return undefined;
  }
}

// debounce runs fn(key) once, ms after the last call for that key.
function debounce(fn, ms) {
  const timers = new Map();
  return (key = "") => {
    clearTimeout(timers.get(key));
    timers.set(key, setTimeout(() => { timers.delete(key); fn(key); }, ms));
  };
}

$("creds-form").addEventListener("submit", (e) => {
  e.preventDefault();
  open($("project").value.trim(), $("token").value.trim());
});


// ---- the project ----

async function open(p, token) {
  store.setItem("project", p);
  store.setItem("token", token);
  const url = new URL(location.href);
  if (url.searchParams.get("project") !== p) {
    url.searchParams.set("project", p);
    history.replaceState(null, "", url);
  }
  if (p !== project && project) { // another project: forget the old one's task
    if (source) source.close();
    current = null;
    $("task-view").hidden = true;
    $("task-empty").hidden = false;
    history.replaceState(null, "", `${location.pathname}${location.search}`);
  }
  client = new Client(token);
  project = p;
  showIdentity(p, token);
  say("");
  tasks.clear();
  document.body.dataset.project = p;
  const head = await guarded(loadTasks);
  if (head === undefined) return;
  signedIn(true);
  followProject(head);
  openAgents(client, p, redrawBoard);
  loadFiles();
  loadInbox();
  loadUsage();
  loadRuns();
  loadDocs(false);
  const selected = new URLSearchParams(location.hash.slice(1)).get("task");
  if (selected) select(selected);
}

const tasksPath = () => `/v1/projects/${enc(project)}/tasks`;

// loadTasks reads the newest page of tasks and returns the project
// stream's position when it was read.
async function loadTasks() {
  const page = await client.get(`${tasksPath()}?limit=50`);
  tasks.reset(page.tasks);
  $("older").hidden = page.tasks.length < 50;
  renderTasks();
  return page.cursor;
}

$("older").addEventListener("click", () => guarded(async () => {
  const rows = tasks.rows();
  const page = await client.get(`${tasksPath()}?limit=50&before=${enc(rows[rows.length - 1].id)}`);
  for (const t of page.tasks) tasks.upsert(t);
  $("older").hidden = page.tasks.length < 50;
  renderTasks();
}));

const reloadTasks = debounce(() => guarded(loadTasks), 100);
const refreshTask = debounce((id) => guarded(async () => {
  const t = await client.get(`/v1/tasks/${enc(id)}`);
  if (tasks.upsert(t)) renderTasks();
  if (current && current.id === id) showTask(t);
}), 100);
const refreshProject = debounce(() => { loadFiles(); loadInbox(); loadUsage(); loadRuns(); }, 200);

// followProject keeps the list live: an event of an unknown task reads the
// list again, a phase or stage change reads its task again.
function followProject(after) {
  if (projectSource) projectSource.close();
  projectSource = new EventSource(client.eventsURL(`/v1/projects/${enc(project)}/events`, after));
  setConn("project-conn", "connecting");
  projectSource.onopen = () => setConn("project-conn", "live");
  projectSource.onerror = () => setConn("project-conn", projectSource.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
  projectSource.addEventListener("expired", expired);
  projectSource.addEventListener("revoked", revoked);
  projectSource.onmessage = (m) => {
    const ev = JSON.parse(m.data);
    if (!ev.task_id) return;
    const { unknown, stale } = tasks.noteEvent(ev);
    if (unknown) reloadTasks();
    else if (stale) refreshTask(ev.task_id);
    if (ev.type === "progress" && ev.payload && ev.payload.kind === "iteration_start") renderTasks();
    if (ev.type === "agent_phase") refreshProject();
  };
}

// expired stops both streams when the server says the token expired
// (reconnecting with it would only be refused).
function expired() {
  endStreams("expired", "The token expired: paste a new one and press Open.");
}

// revoked stops both streams when the server says an operator revoked the
// token.
function revoked() {
  endStreams("revoked", "The token was revoked: paste a new one and press Open.");
}

function endStreams(state, message) {
  if (projectSource) projectSource.close();
  if (source) source.close();
  setConn("project-conn", state);
  setConn("conn", state);
  say(message);
}

function setConn(id, state) {
  $(id).textContent = state;
  $(id).className = `conn ${state}`;
  document.body.dataset[id === "conn" ? "conn" : "projectConn"] = state;
}

function renderTasks() {
  const rows = tasks.rows();
  $("task-count").textContent = `(${rows.length})`;
  $("tasks").replaceChildren(...rows.map((t) => {
    const tr = el("tr", { class: "task-row", data: { id: t.id, status: t.status } },
      el("td", {}, el("span", { class: `badge ${t.status}${t.pause_pending ? " pausing" : ""}`, textContent: statusText(t) })),
      el("td", { textContent: t.type }),
      el("td", { class: "prompt", textContent: t.title || t.prompt, title: t.prompt }),
      el("td", { class: "age", textContent: age(t.created_at), data: { created: t.created_at } }),
      el("td", { class: "iterations", textContent: String(t.iterations || 0) }),
      el("td", { class: "cost", textContent: money(t.cost_usd), title: `${(t.tokens_in || 0) + (t.tokens_out || 0)} tokens` }));
    if (current && current.id === t.id) tr.classList.add("selected");
    tr.addEventListener("click", () => select(t.id));
    return tr;
  }));
  renderUsageTasks();
  renderBoard(rows, current ? current.id : "");
}

onCardClick((id) => select(id));
onReview(review);
// The board's picked tasks, one command through the broadcast route.
onBroadcast(async (command, ids) => {
  const res = await client.post(`/v1/projects/${enc(project)}/tasks/broadcast/${enc(command)}`, { task_ids: ids });
  return res.counts;
});

setInterval(() => {
  for (const td of document.querySelectorAll("#tasks td.age")) td.textContent = age(td.dataset.created);
}, 5000);

$("task-form").addEventListener("submit", (e) => {
  e.preventDefault();
  guarded(async () => {
    const t = await client.post(`/v1/projects/${enc(project)}/tasks`, { type: $("type").value, prompt: $("prompt").value, ...graphFields() }).catch(reloadOnRefusal);
    $("prompt").value = "";
    clearGraphFields();
    tasks.upsert(t);
    renderTasks();
    select(t.id);
  });
});

// ---- the selected task ----


async function select(id) {
  say(""); // a refusal was about what was open before
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("task") !== id) {
    hash.set("task", id);
    history.replaceState(null, "", `#${hash}`);
  }
  const t = await guarded(() => client.get(`/v1/tasks/${enc(id)}`));
  if (!t) return;
  current = t;
  tasks.upsert(t);
  renderTasks();
  $("task-view").hidden = false;
  $("task-empty").hidden = true;
  document.body.dataset.task = id;
  showTask(t);
  watch(id);
}

// treeSpend is the spend of the task's tree (its root and every
// descendant, deleted ones included) beside its own, when it is part of one.
function treeSpend(t) {
  const tree = t.tree;
  if (!tree || tree.tasks < 2) return "";
  return ` · tree of ${tree.tasks} tasks: ${tree.tokens_in + tree.tokens_out} tokens · ${money(tree.cost_usd)}`;
}

function showTask(t) {
  current = t;
  $("task-title").textContent = `${t.type} · ${t.prompt}`;
  $("task-badge").textContent = statusText(t);
  $("task-badge").className = `badge ${t.status}${t.pause_pending ? " pausing" : ""}`;
  document.body.dataset.taskStatus = t.status;
  const times = [`created ${age(t.created_at)} ago`, t.finished_at ? `finished ${age(t.finished_at)} ago` : ""].filter(Boolean);
  $("task-meta").textContent = `${t.id} · attempt ${t.attempt} · ${t.iterations || 0} iterations · ${(t.tokens_in || 0) + (t.tokens_out || 0)} tokens · ${money(t.cost_usd)}${treeSpend(t)} · ${times.join(" · ")}${t.trace_id ? ` · trace ${t.trace_id}` : ""}`;
  for (const [action, statuses] of Object.entries(CONTROLS)) $(action).disabled = !statuses.includes(t.status);
  $("review-form").hidden = t.status !== "review";
  if (t.status !== "review") closeComment();
  // The Changes tab follows the task: a new version of it (a revision
  // staged, a set applied) is read again.
  if (!$("pane-changes").hidden && changesShown !== `${t.id}@${t.version}`) loadChanges(t.id);
  const summary = t.result && t.result.summary;
  $("result-summary").textContent = summary || (t.result ? "" : "No result yet.");
  $("result-json").textContent = t.result ? JSON.stringify(t.result, null, 2) : "";
  $("error-box").hidden = !t.error;
  $("error-text").textContent = t.error ? `${t.error.code || ""}: ${t.error.message || ""}\n\n${JSON.stringify(t.error, null, 2)}` : "";
  renderTaskInbox();
  showRelations(t);
}

for (const action of Object.keys(CONTROLS)) {
  $(action).addEventListener("click", () => guarded(async () => {
    const id = current.id;
    if (action === "cancel") {
      const more = cascade(tasks.rows(), [id]);
      if (more.length && !(await ask(`Cancel this task? ${cascadeText(more.length)}`, `Cancel ${more.length + 1} tasks`))) return;
    }
    const res = await client.post(`/v1/tasks/${enc(id)}/${action}`);
    say(res.pending ? `${action}: requested; the task stops at its next iteration` : "");
    refreshTask(id);
  }));
}

// A comment names a line of the diff: clicking a line of the revision
// under review highlights it and opens the comment box under it. The model
// gets the comments made since its revision with the next reject's
// feedback.
let commentOn = null;
$("changes").addEventListener("click", (ev) => {
  const row = ev.target.closest(".line[data-line]");
  if (!row || !current || current.status !== "review") return;
  commentOn = { path: row.closest(".file-diff").dataset.path, line: Number(row.dataset.line) };
  $("comment-where").textContent = `Comment on ${commentOn.path}, line ${commentOn.line}`;
  selectLine($("changes"), row, $("comment-form"));
  $("comment-body").focus();
});
$("comment-cancel").addEventListener("click", closeComment);
$("comment-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  guarded(async () => {
    const id = current.id;
    await client.post(`/v1/tasks/${enc(id)}/comments`, { body: $("comment-body").value, ...commentOn });
    $("comment-body").value = "";
    closeComment();
    loadChanges(id);
  });
});

// closeComment puts the comment box away (back outside the diff, which is
// redrawn) and unmarks its line.
function closeComment() {
  commentOn = null;
  $("comment-form").hidden = true;
  $("pane-changes").append($("comment-form"));
  for (const r of $("changes").querySelectorAll(".line.selected")) r.classList.remove("selected");
}

// review approves a task in review, or opens it to say what to change
// (a reject without feedback discards the build).
async function review(id, verdict) {
  if (verdict === "approve") {
    await guarded(async () => {
      await client.post(`/v1/tasks/${enc(id)}/approve`);
      say("");
      refreshTask(id);
      loadInbox();
    });
    return;
  }
  await select(id);
  $("feedback").focus();
}

// A reject with feedback revises the build; without, it discards it.
$("review-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  guarded(async () => {
    const id = current.id;
    await client.post(`/v1/tasks/${enc(id)}/reject`, { feedback: $("feedback").value });
    $("feedback").value = "";
    refreshTask(id);
    loadInbox();
  });
});

function reset() {
  if (source) source.close();
  timeline.clear();
  tree.clear();
  streams.clear();
  lastSeq = 0;
  applied = 0;
  delete document.body.dataset.status;
  delete document.body.dataset.duplicates;
  $("timeline").replaceChildren();
  $("stream").textContent = "";
  $("status").textContent = "";
  $("status").className = "";
  $("iteration").textContent = "";
  $("event-count").textContent = "";
  $("bar-fill").style.width = "0";
  for (const li of $("stages").children) li.className = "";
  renderTree();
}

// watch follows a task's events; EventSource reconnects by itself with
// Last-Event-ID, so the page applies every event once.
function watch(taskId) {
  reset();
  const es = new EventSource(client.eventsURL(`/v1/tasks/${enc(taskId)}/events`));
  source = es;
  setConn("conn", "connecting");
  es.onopen = () => setConn("conn", "live");
  es.onerror = () => {
    if (es !== source) return;
    setConn("conn", es.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
  };
  es.addEventListener("expired", expired);
  es.addEventListener("revoked", revoked);
  es.onmessage = (m) => {
    if (es !== source) return;
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

function apply(ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "progress":
      progress(p);
      break;
    case "file_update":
      tree.apply(p);
      renderTree();
      if (!$("pane-changes").hidden) reloadChanges(ev.task_id);
      break;
    case "agent_phase":
      if (["completed", "failed", "cancelled", "blocked", "paused", "awaiting_input", "awaiting_approval", "review"].includes(p.phase)) {
        $("status").textContent = p.phase;
        $("status").className = p.phase;
        document.body.dataset.status = p.phase;
        if (p.phase === "completed") $("bar-fill").style.width = "100%";
        refreshTask(ev.task_id);
        if (!$("pane-changes").hidden) loadChanges(ev.task_id);
        loadInbox();
      }
      break;
  }
  if (ev.type === "progress" && ["stream_delta", "thinking", "tool_start", "tool_complete"].includes(p.kind)) {
    $("event-count").textContent = `(${lastSeq} events)`;
    return; // shown elsewhere, not as timeline rows
  }
  timeline.add(ev);
  renderTimeline();
  $("event-count").textContent = timeline.events.length < lastSeq ? `(${lastSeq} events; the last ${timeline.events.length} shown)` : `(${lastSeq} events)`;
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

// waitText renders a wait in milliseconds as seconds or minutes.
function waitText(ms) {
  const s = Math.round((ms || 0) / 1000);
  return s < 120 ? `${s}s` : `${Math.round(s / 60)} min`;
}

function renderStream() {
  $("stream").textContent = [...streams.values()].join("\n\n");
}

function describe(ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "agent_phase": return { cls: "phase", text: `${p.phase}${p.action ? " " + p.action : ""}${p.status ? " · " + p.status : ""}${p.summary ? ": " + p.summary : ""}` };
    case "tool_call": return { cls: `tool${p.success ? "" : " failed"}`, text: `› ${p.toolName}${p.fromPath ? ` ${p.fromPath} → ${p.toPath}` : p.argsSummary ? `(${p.argsSummary})` : ""} ${p.success ? "✓" : "✗"}${p.exitCode ? ` exit ${p.exitCode}` : ""} ${p.resultSummary || ""}` };
    case "file_update": return { cls: "file", text: p.op === "move" ? `• move ${p.fromPath} → ${p.toPath}` : `• ${p.op} ${p.path}` };
    case "self_repair": return { cls: "warning", text: `⚠ self-repair attempt ${p.attemptNumber}/${p.maxAttempts} (${p.result}): ${p.trigger}` };
    case "error": return { cls: "error", text: `✖ ${p.errorType}: ${p.message}${p.recoverable ? " (recoverable)" : ""}` };
    case "log": return { cls: p.level === "error" ? "error" : p.level === "warn" ? "log warning" : "log", text: `${p.level}: ${p.message}` };
    case "progress":
      if (p.kind === "stage_enter") return { cls: "phase stage", text: `▶ ${p.stage}` };
      if (p.kind === "stage_exit") return { cls: "progress", text: `■ ${p.stage} done` };
      if (p.kind === "iteration_start") return { cls: "progress", text: `iteration ${p.iteration}` };
      if (p.kind === "stream_complete") return { cls: "progress", text: `model said ${p.totalLength} bytes` };
      if (p.kind === "rate_limit_wait") return { cls: "progress warning", text: `⏳ waiting for the provider's rate limit (about ${waitText(p.duration)})` };
      return { cls: "progress", text: p.kind };
  }
  return { cls: "log", text: ev.type };
}

function renderTimeline() {
  const ol = $("timeline");
  ol.replaceChildren(...timeline.events.map((ev) => {
    const d = describe(ev);
    return el("li", { class: d.cls, textContent: d.text, data: { seq: ev.seq, type: ev.type } });
  }));
  ol.scrollTop = ol.scrollHeight;
}

// treeList renders slash-separated paths as nested lists; leaf(path) makes
// a file's item.
function treeList(paths, leaf) {
  const root = { dirs: new Map(), files: [] };
  for (const path of paths) {
    let node = root;
    for (const dir of path.split("/").slice(0, -1)) {
      if (!node.dirs.has(dir)) node.dirs.set(dir, { dirs: new Map(), files: [] });
      node = node.dirs.get(dir);
    }
    node.files.push(path);
  }
  const build = (node) => el("ul", {},
    ...[...node.dirs].sort(([a], [b]) => (a < b ? -1 : 1)).map(([name, child]) => el("li", { class: "dir", textContent: `${name}/` }, build(child))),
    ...node.files.sort().map(leaf));
  return build(root);
}

function renderTree() {
  $("tree").replaceChildren(treeList(tree.paths(), (path) => {
    const li = el("li", { class: "file-node", textContent: path.split("/").pop(), data: { path } });
    if (path === tree.selected) li.classList.add("selected");
    if (tree.movedTo.has(path)) li.classList.add("moved");
    li.addEventListener("click", () => {
      tree.selected = path;
      renderTree();
    });
    return li;
  }));
  $("selected").textContent = tree.selected || "—";
}

// ---- changes of a build ----

let changesShown = ""; // task id @ version of the changes shown
let changesAsked = 0; // an answer to an earlier read is dropped

async function loadChanges(id) {
  const asked = ++changesAsked;
  const version = current && current.id === id ? current.version : 0;
  const [cs, cm] = await Promise.all([guarded(() => client.get(`/v1/tasks/${enc(id)}/changes`)),
    guarded(() => client.get(`/v1/tasks/${enc(id)}/comments`))]);
  if (!cs || !cm || !current || current.id !== id || asked !== changesAsked) return;
  changesShown = `${id}@${version}`;
  const inReview = current.status === "review";
  const what = { none: "This task changed no files.",
    open: inReview ? "Waiting for your review: these changes are staged, not applied. Approve applies them; Reject with feedback asks for a revision."
      : "Staged, not applied yet: the build is still working.",
    applying: "Being applied.", applied: "Applied to the project.", discarded: "Discarded: the project was left as it was." };
  $("changes-status").textContent = what[cs.status] || cs.status;
  document.body.dataset.changes = cs.status;
  document.body.dataset.changesVersion = String(version);
  const where = commentOn;
  const box = $("comment-body");
  const typing = document.activeElement === box;
  const [from, to] = [box.selectionStart, box.selectionEnd];
  closeComment();
  const general = renderChanges($("changes"), cs.files, cm.comments);
  renderGeneral($("comments"), general);
  $("comments-box").hidden = !general.length;
  // The line being commented on stays open across a redraw while it is
  // still in the diff.
  const row = where && [...$("changes").querySelectorAll(`.file-diff .line[data-line="${where.line}"]`)]
    .find((r) => r.closest(".file-diff").dataset.path === where.path);
  if (row && inReview) {
    commentOn = where;
    selectLine($("changes"), row, $("comment-form"));
    // Moving the box took its focus: whoever was typing types on.
    if (typing) {
      box.focus();
      box.setSelectionRange(from, to);
    }
  }
}
const reloadChanges = debounce((id) => { if (current && current.id === id) loadChanges(id); }, 300);

// ---- project files ----

async function loadFiles() {
  const res = await guarded(() => client.get(`/v1/projects/${enc(project)}/files`));
  if (!res) return;
  const shown = $("file-name").textContent;
  $("files").replaceChildren(treeList(res.files.map((f) => f.path), (path) => {
    const li = el("li", { class: "file-node", textContent: path.split("/").pop(), data: { path } });
    if (path === shown) li.classList.add("selected");
    li.addEventListener("click", () => showFile(path));
    return li;
  }));
  if (shown && res.files.some((f) => f.path === shown)) showFile(shown);
}

async function showFile(path) {
  const f = await guarded(() => client.get(`/v1/projects/${enc(project)}/files/${filePath(path)}`));
  if (!f) return;
  $("file-name").textContent = path;
  for (const li of $("files").querySelectorAll("li.file-node")) li.classList.toggle("selected", li.dataset.path === path);
  const md = !f.binary && isMarkdown(path);
  $("file-view").textContent = md ? "" : f.binary ? `binary file, ${f.size} bytes` : f.content;
  $("file-md").hidden = !md;
  if (md) renderMarkdown($("file-md"), f.content);
  else $("file-md").replaceChildren();
}

// ---- documents ----

// The project's documents index: title, type, mandatory and, when its front
// matter was ignored, why; Refresh reads the project's files again. A
// document opens rendered as Markdown.
let docsNext = "";

async function loadDocs(more) {
  const q = new URLSearchParams({ limit: "100" });
  if (more && docsNext) q.set("after", docsNext);
  const res = await guarded(() => client.get(`/v1/projects/${enc(project)}/docs?${q}`));
  if (!res) return;
  const rows = res.documents.map((d) => {
    const tr = el("tr", { class: `doc-row${d.problem ? " problem" : ""}`, data: { path: d.path } },
      el("td", {}, el("span", { class: "doc-title", textContent: d.title || d.path }), el("br"), el("small", { class: "meta", textContent: d.path }),
        ...(d.problem ? [el("br"), el("small", { class: "doc-problem", textContent: `front matter ignored: ${d.problem}` })] : [])),
      el("td", { textContent: d.doc_type || "" }),
      el("td", {}, d.mandatory ? el("span", { class: "badge mandatory", textContent: "mandatory" }) : ""));
    tr.addEventListener("click", () => showDoc(d.path, d.title));
    return tr;
  });
  if (more) $("docs").append(...rows);
  else $("docs").replaceChildren(...rows);
  docsNext = res.next || "";
  $("docs-more").hidden = !docsNext;
  const n = $("docs").children.length;
  $("docs-count").textContent = n ? `(${n}${docsNext ? "+" : ""})` : "";
  if (!n) $("docs").replaceChildren(el("tr", {}, el("td", { colSpan: 3, class: "meta", textContent: "No documents indexed yet: press Refresh to read the project's files." })));
  document.body.dataset.docs = String(res.documents.length ? n : 0);
}

async function showDoc(path, title) {
  const f = await guarded(() => client.get(`/v1/projects/${enc(project)}/files/${filePath(path)}`));
  if (!f) return;
  $("doc-name").textContent = title ? `${title} · ${path}` : path;
  for (const tr of $("docs").querySelectorAll("tr.doc-row")) tr.classList.toggle("selected", tr.dataset.path === path);
  if (f.binary) $("doc-view").textContent = `binary file, ${f.size} bytes`;
  else if (isMarkdown(path)) renderMarkdown($("doc-view"), f.content);
  else $("doc-view").replaceChildren(el("pre", { textContent: f.content }));
  document.body.dataset.doc = path;
}

$("docs-more").addEventListener("click", () => loadDocs(true));
$("docs-refresh").addEventListener("click", () => guarded(async () => {
  $("docs-status").textContent = "Reading the project's files…";
  const st = await client.post(`/v1/projects/${enc(project)}/docs/index`);
  $("docs-status").textContent = `${st.documents} document${st.documents === 1 ? "" : "s"}: ${st.read} read again, ${st.removed} removed` +
    (st.skipped ? `, ${st.skipped} past the limit left out` : "") + ".";
  await loadDocs(false);
}));

// ---- inbox ----

async function loadInbox() {
  const res = await guarded(() => client.get(`/v1/projects/${enc(project)}/inbox`));
  if (!res) return;
  inboxItems = res.items;
  $("inbox-count").textContent = inboxItems.length ? `(${inboxItems.length})` : "";
  if (inboxItems.length) renderItems($("inbox"), inboxItems);
  else $("inbox").replaceChildren(el("p", { class: "meta", textContent: "Nothing waits for you." }));
  renderTaskInbox();
}

function renderTaskInbox() {
  // The task view's own review form stands for its review item.
  renderItems($("task-inbox"), current ? inboxItems.filter((i) => i.task_id === current.id && i.kind !== "review_requested") : []);
}

// renderItems shows items in box, keeping the element of every item shown
// already: the lists are redrawn on every phase change of the project, and
// an answer being typed must survive that (an open item never changes).
function renderItems(box, items) {
  const shown = new Map([...box.children].filter((c) => c.dataset.id).map((c) => [c.dataset.id, c]));
  const ids = items.map((i) => String(i.id));
  if (ids.length === box.children.length && ids.every((id, k) => box.children[k].dataset.id === id)) return;
  box.replaceChildren(...items.map((i) => shown.get(String(i.id)) || inboxItem(i)));
}

// inboxItem renders an open item: a question gets an answer box (answering
// requeues the task), anything else a close button.
function inboxItem(item) {
  const div = el("div", { class: `inbox-item ${item.reason}`, data: { id: item.id, task: item.task_id || "" } },
    el("strong", { textContent: item.title || item.reason }),
    el("p", { textContent: item.content }));
  const isQuestion = item.kind === "await_user_input" && item.reason === "question";
  if (item.kind === "review_requested" && item.task_id) {
    div.querySelector("strong").textContent = "Waiting for your review";
    const approve = el("button", { type: "button", class: "approve", textContent: "Approve" });
    approve.addEventListener("click", () => review(item.task_id, "approve"));
    const reject = el("button", { type: "button", class: "reject", textContent: "Reject…", title: "open the task to say what to change" });
    reject.addEventListener("click", () => review(item.task_id, "reject"));
    div.append(el("div", { class: "review-actions" }, approve, reject));
  } else if (item.reason === "tool_approval" && item.task_id) {
    const calls = el("div", { class: "tool-calls" });
    div.append(calls);
    loadCalls(item.task_id, calls);
  } else if (isQuestion) {
    const input = el("input", { class: "answer", placeholder: "Your answer" });
    const form = el("form", { class: "answer-form" }, input, el("button", { type: "submit", textContent: "Answer" }));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      guarded(async () => {
        await client.post(`/v1/tasks/${enc(item.task_id)}/answer`, { answer: input.value });
        loadInbox();
        refreshTask(item.task_id);
      });
    });
    div.append(form);
  } else {
    const b = el("button", { type: "button", class: "close", textContent: "Close" });
    b.addEventListener("click", () => guarded(async () => {
      await client.post(`/v1/inbox/${enc(item.id)}/close`);
      loadInbox();
    }));
    div.append(b);
  }
  if (item.task_id) {
    const link = el("a", { href: "#", class: "task-link", textContent: "open task" });
    link.addEventListener("click", (e) => { e.preventDefault(); select(item.task_id); });
    div.append(" ", link);
  }
  return div;
}

// loadCalls shows a task's calls that wait for approval in box, each with
// its arguments (a write or a patch as a diff), approve, and deny with a
// message the model reads.
async function loadCalls(taskId, box) {
  const res = await guarded(() => client.get(`/v1/tasks/${enc(taskId)}/tool-calls`));
  if (!res) return;
  const pending = res.tool_calls.filter((c) => c.status === "pending");
  box.replaceChildren(...pending.map((c) => {
    const diff = el("pre", { class: "diff call-diff" },
      ...callLines(c.tool_name, c.arguments).map((l) => el("span", { class: diffLineClass(l), textContent: l })));
    const message = el("input", { class: "deny-message", placeholder: "Why not (the agent reads it)" });
    const answer = (verb, body) => guarded(async () => {
      await client.post(`/v1/tasks/${enc(taskId)}/tool-calls/${enc(c.tool_call_id)}/${verb}`, body);
      // The item stays open (and its element kept) until the last answer.
      loadCalls(taskId, box);
      loadInbox();
      refreshTask(taskId);
    });
    const approve = el("button", { type: "button", class: "approve-call", textContent: "Approve" });
    approve.addEventListener("click", () => answer("approve", {}));
    const deny = el("button", { type: "button", class: "deny-call", textContent: "Deny" });
    deny.addEventListener("click", () => answer("deny", { message: message.value }));
    return el("div", { class: "tool-call", data: { call: c.tool_call_id } },
      el("strong", { textContent: c.tool_name }), c.reason ? el("span", { class: "meta", textContent: ` — ${c.reason}` }) : "",
      diff, message, approve, deny);
  }));
}

// ---- logs ----

// The project's log events matching the search box, newest first; Older
// reads the next page from the cursor.
let logsNext = "";
let logsAsked = 0; // an answer to an earlier search is dropped

async function searchLogs(more) {
  const asked = ++logsAsked;
  const q = new URLSearchParams({ limit: "50" });
  if ($("log-q").value.trim()) q.set("q", $("log-q").value.trim());
  if ($("log-level").value) q.set("level", $("log-level").value);
  if (more && logsNext) q.set("before", logsNext);
  const res = await guarded(() => client.get(`/v1/projects/${enc(project)}/logs?${q}`));
  if (!res || asked !== logsAsked) return;
  const items = res.logs.map((l) => {
    const li = el("li", { class: `log-entry ${l.level}`, data: { id: String(l.id) } },
      el("span", { class: "meta", textContent: `${l.created_at.slice(0, 19).replace("T", " ")} ${l.level} ` }),
      el("span", { class: "log-message", textContent: l.message }));
    if (l.task_id) {
      const link = el("a", { href: "#", class: "task-link", textContent: ` ${l.task_id.slice(0, 8)}` });
      link.addEventListener("click", (e) => { e.preventDefault(); select(l.task_id); });
      li.append(link);
    }
    return li;
  });
  if (more) $("logs").append(...items);
  else $("logs").replaceChildren(...items);
  logsNext = res.next || "";
  $("log-more").hidden = !logsNext;
  document.body.dataset.logs = String($("logs").children.length);
}

$("log-search").addEventListener("submit", (e) => { e.preventDefault(); searchLogs(false); });
$("log-more").addEventListener("click", () => searchLogs(true));

// ---- usage ----

async function loadUsage() {
  const res = await guarded(() => client.get(`/v1/projects/${enc(project)}/usage?days=30`));
  if (!res) return;
  const t = res.total;
  $("usage-total").textContent = `Last ${res.days_requested} days: ${t.runs} runs, ${t.tokens_in + t.tokens_out} tokens, ${money(t.cost_usd)}`;
  $("usage-days").replaceChildren(...res.days.map((d) => el("tr", { class: "usage-day" },
    el("td", { textContent: d.day }), el("td", { textContent: String(d.runs) }),
    el("td", { textContent: String(d.tokens_in) }), el("td", { textContent: String(d.tokens_out) }),
    el("td", { textContent: money(d.cost_usd) }))));
}

// ---- runs ----

const runsDays = 30;

async function loadRuns() {
  const res = await guarded(() => client.get(`/v1/projects/${enc(project)}/runs/summary?days=${runsDays}`));
  if (!res) return;
  const series = daySeries(res.groups, res.days_requested);
  const sum = (f) => series.reduce((n, d) => n + f(d), 0);
  $("runs-total").textContent = `Last ${res.days_requested} days: ${sum((d) => d.runs)} runs, ${sum((d) => d.tokens)} tokens, ` +
    `${money(sum((d) => d.cost))}, ${duration(sum((d) => d.waitMs))} waiting for the provider's rate limit`;
  drawRunsChart($("runs-chart"), series);
  $("runs").replaceChildren(...runRows(res.groups, el, agentName));
  document.body.dataset.runs = $("runs-chart").dataset.runs;
}

function renderUsageTasks() {
  const top = tasks.rows().filter((t) => t.tokens_in + t.tokens_out > 0)
    .sort((a, b) => b.cost_usd - a.cost_usd || (b.tokens_in + b.tokens_out) - (a.tokens_in + a.tokens_out)).slice(0, 20);
  $("usage-tasks").replaceChildren(...top.map((t) => {
    const tr = el("tr", { class: "usage-task", data: { id: t.id } },
      el("td", { class: "prompt", textContent: `${t.type} · ${t.prompt}` }),
      el("td", { textContent: String(t.tokens_in + t.tokens_out) }), el("td", { textContent: money(t.cost_usd) }));
    tr.addEventListener("click", () => select(t.id));
    return tr;
  }));
}

// signedIn shows how to get a token until a project is open, and keeps
// Run disabled until then.
function signedIn(yes) {
  $("welcome").hidden = yes;
  $("submit").disabled = !yes;
  $("submit").title = yes ? "" : "open a project with a token first";
}

signedIn(false);
if ($("project").value && $("token").value) open($("project").value.trim(), $("token").value.trim());
