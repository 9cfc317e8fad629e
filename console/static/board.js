// The project's board: its tasks in columns by status, each card with its
// short id, title, agent, priority and dependencies; and the task form's
// graph fields (agent, priority, dependencies). It draws the task list the
// page keeps live, so the board moves as the list does. Every value is
// rendered as text.
import { agentList, agentName } from "./agents.js";
import { $, el } from "./dom.js";

// COLUMNS are the board's columns and the statuses each holds: paused and
// waiting for an answer apart from review (a build waiting for approval).
export const COLUMNS = [
  { key: "waiting", title: "Waiting", statuses: ["waiting"] },
  { key: "queued", title: "Queued", statuses: ["queued"] },
  { key: "running", title: "Running", statuses: ["running"] },
  { key: "held", title: "Paused / needs input", statuses: ["paused", "awaiting_input", "awaiting_approval"] },
  { key: "review", title: "Review", statuses: ["review"] },
  { key: "succeeded", title: "Succeeded", statuses: ["succeeded"] },
  { key: "failed", title: "Failed / blocked", statuses: ["failed", "blocked"] },
  { key: "cancelled", title: "Cancelled", statuses: ["cancelled"] },
];

export const shortId = (id) => id.slice(0, 8);
// title is the title a plan gave the task, else its prompt's first line.
export const title = (t) => t.title || (t.prompt || "").split("\n", 1)[0];
// statusText is a task's status as a person reads it: a running task whose
// pause is pending is "pausing…".
export const statusText = (t) => (t.status === "running" && t.pause_pending ? "pausing…" : t.status);

// columnOf is the key of the column a status goes in.
export function columnOf(status) {
  const c = COLUMNS.find((col) => col.statuses.includes(status));
  return c ? c.key : "queued";
}

// boardColumns groups tasks by column, each column by priority (1 first),
// then oldest first: the order a worker would start them in. The children
// of one plan stay together, under the first of them in that order.
export function boardColumns(rows) {
  const cols = new Map(COLUMNS.map((c) => [c.key, []]));
  for (const t of rows) cols.get(columnOf(t.status)).push(t);
  const order = (a, b) => (a.priority || 2) - (b.priority || 2) || (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0);
  for (const [key, list] of cols) {
    list.sort(order);
    const groups = new Map(); // parent id (or own id) → tasks, in first-seen order
    for (const t of list) {
      const g = t.parent_task_id || t.id;
      if (!groups.has(g)) groups.set(g, []);
      groups.get(g).push(t);
    }
    cols.set(key, [...groups.values()].flat());
  }
  return cols;
}

// cascade is the open tasks a cancel of ids takes with it: their
// unfinished children (cancelled) and the tasks depending on any of
// these (blocked), through any number of steps.
export function cascade(rows, ids) {
  const open = new Set(["waiting", "queued", "running", "paused", "awaiting_input", "review"]);
  const hit = new Set(ids);
  const blocked = new Set();
  for (let grew = true; grew;) {
    grew = false;
    for (const t of rows) {
      if (hit.has(t.id) || !open.has(t.status)) continue;
      if ((t.depends_on || []).some((d) => hit.has(d)) || hit.has(t.parent_task_id)) {
        hit.add(t.id);
        blocked.add(t.id);
        grew = true;
      }
    }
  }
  return [...blocked];
}

// cascadeText says how many more tasks a cancel takes with it.
export function cascadeText(n) {
  return `${n} more task${n === 1 ? " goes" : "s go"} with it: unfinished children are cancelled, tasks waiting on a cancelled one blocked.`;
}

// ask shows the page's confirmation with text and resolves to whether the
// person confirmed.
export function ask(text, yes) {
  return new Promise((resolve) => {
    $("confirm-text").textContent = text;
    $("confirm-yes").textContent = yes;
    $("confirm").hidden = false;
    const done = (ok) => {
      $("confirm").hidden = true;
      $("confirm-yes").onclick = $("confirm-no").onclick = null;
      resolve(ok);
    };
    $("confirm-yes").onclick = () => done(true);
    $("confirm-no").onclick = () => done(false);
    $("confirm-yes").focus();
  });
}

// picked holds the ids of the cards ticked for a command to many tasks at
// once (pause, cancel, retry).
const picked = new Set();
let onCommand = async () => ({});

// onBroadcast sets what a command button does with the picked ids; fn
// answers the broadcast's counts by outcome.
export function onBroadcast(fn) {
  onCommand = fn;
  for (const b of document.querySelectorAll("#board-actions button")) {
    b.addEventListener("click", async () => {
      const ids = [...picked];
      if (!ids.length) return;
      const cmd = b.dataset.command;
      if (cmd === "cancel") {
        const more = cascade(lastRows, ids);
        if (more.length && !(await ask(`Cancel ${ids.length} task${ids.length === 1 ? "" : "s"}? ${cascadeText(more.length)}`, `Cancel ${ids.length + more.length} tasks`))) return;
      }
      $("board-result").textContent = `${cmd}…`;
      try {
        const counts = await onCommand(cmd, ids);
        const parts = Object.entries(counts || {}).map(([k, n]) => `${n} ${k}`);
        $("board-result").textContent = `${cmd}: ${parts.join(", ") || "nothing to do"}`;
        document.body.dataset.broadcast = cmd;
        picked.clear();
        // A card drawn before its box was ticked is kept by the redraw:
        // its box is unticked here.
        for (const box of $("board").querySelectorAll("input.card-pick:checked")) box.checked = false;
        redrawBoard();
      } catch (e) {
        $("board-result").textContent = e.message;
      }
    });
  }
}

function showPicked() {
  $("board-picked").textContent = `${picked.size} selected`;
  for (const b of document.querySelectorAll("#board-actions button")) b.disabled = picked.size === 0;
}

let lastRows = [];
let lastSelected = "";
let onSelect = () => {};
let shownTask = null; // the task whose relations the task view shows

// onCardClick sets what clicking a card does.
export function onCardClick(fn) {
  onSelect = fn;
}

// renderBoard draws the board and the dependency picker from the task
// list; selected is the id of the selected task.
export function renderBoard(rows, selected = "") {
  lastRows = rows;
  lastSelected = selected;
  const cols = boardColumns(rows);
  $("board-count").textContent = `(${rows.length})`;
  if (!$("board").children.length) {
    $("board").append(...COLUMNS.map((c) => el("section", { class: `board-col ${c.key}`, data: { column: c.key } },
      el("h3", {}, c.title, " ", el("small")), el("ol"))));
  }
  const cards = new Map();
  for (const c of COLUMNS) {
    const list = cols.get(c.key);
    const col = $("board").querySelector(`[data-column="${c.key}"]`);
    col.querySelector("h3 small").textContent = `(${list.length})`;
    const want = list.map((t) => cardOf(t, selected, cards));
    const ol = col.querySelector("ol");
    // A column whose cards did not change is left alone: a card under the
    // pointer is not replaced while it is being clicked.
    if (want.length !== ol.children.length || want.some((li, i) => ol.children[i] !== li)) ol.replaceChildren(...want);
  }
  shownCards = cards;
  // A ticked task that left the list is no longer picked.
  for (const id of picked) if (!cards.has(id)) picked.delete(id);
  showPicked();
  renderPicker(rows);
  renderParentSelect(rows);
}

let shownCards = new Map(); // task id → { key, li }

// cardOf is a task's card: the one shown, when what it shows is the same.
function cardOf(t, selected, cards) {
  const key = JSON.stringify([t.status, t.pause_pending, t.priority, t.prompt, t.title, t.parent_task_id, t.agent_id && agentName(t.agent_id), t.depends_on, t.id === selected, picked.has(t.id)]);
  const prev = shownCards.get(t.id);
  const li = prev && prev.key === key ? prev.li : card(t, selected);
  cards.set(t.id, { key, li });
  return li;
}

// nameOf names a task by its title when the list holds it, else by its
// short id.
function nameOf(id) {
  const t = lastRows.find((r) => r.id === id);
  return t ? `${title(t).slice(0, 40)} · ${shortId(id)}` : shortId(id);
}

// redraw draws the board again from the last list (the agents changed).
export function redrawBoard() {
  renderBoard(lastRows, lastSelected);
  renderAgentSelect();
  if (shownTask) showRelations(shownTask);
}

function card(t, selected) {
  const deps = t.depends_on || [];
  const li = el("li", { class: "card", data: { id: t.id, status: t.status, priority: String(t.priority || 2) } },
    el("div", { class: "card-head" },
      pickBox(t.id),
      el("code", { class: "card-id", textContent: shortId(t.id) }),
      el("span", { class: `prio p${t.priority || 2}`, textContent: `P${t.priority || 2}` }),
      el("span", { class: `badge ${t.status}${t.pause_pending ? " pausing" : ""}`, textContent: statusText(t) })),
    el("div", { class: "card-title", textContent: title(t), title: t.prompt }),
    el("div", { class: "card-agent meta", textContent: t.agent_id ? agentName(t.agent_id) : "default agent" }));
  if (t.parent_task_id) {
    li.classList.add("child");
    const parent = lastRows.find((r) => r.id === t.parent_task_id);
    li.append(el("div", { class: "card-parent meta", textContent: `↳ part of ${parent ? title(parent) : shortId(t.parent_task_id)}` }));
  }
  if (deps.length) {
    li.append(el("div", { class: "card-deps meta" }, "after ",
      ...deps.map((d) => el("span", { class: "dep", textContent: nameOf(d), title: d, data: { id: d } }))));
  }
  if (t.status === "review") {
    const button = (verdict, text, tip) => {
      const b = el("button", { type: "button", class: `card-${verdict}`, textContent: text, title: tip });
      b.addEventListener("click", (e) => {
        e.stopPropagation();
        onVerdict(t.id, verdict);
      });
      return b;
    };
    li.append(el("div", { class: "card-review" }, el("span", { class: "meta", textContent: "waiting for your review" }),
      button("approve", "Approve", "apply the build's changes"), button("reject", "Reject…", "open the task to say what to change")));
  }
  if (t.id === selected) li.classList.add("selected");
  li.addEventListener("click", () => onSelect(t.id));
  return li;
}

let onVerdict = () => {};

// onReview sets what a review card's Approve and Reject do: fn(id,
// "approve" or "reject").
export function onReview(fn) {
  onVerdict = fn;
}

// pickBox ticks a card for a command to many tasks; it does not open the task.
function pickBox(id) {
  const box = el("input", { type: "checkbox", class: "card-pick", checked: picked.has(id), title: "select for pause, cancel or retry" });
  box.addEventListener("click", (e) => {
    e.stopPropagation();
    if (box.checked) picked.add(id);
    else picked.delete(id);
    showPicked();
  });
  return box;
}

// ---- the task form's graph fields ----

// renderAgentSelect lists the project's agents, keeping the choice; a
// disabled agent is shown but cannot be chosen.
export function renderAgentSelect() {
  const sel = $("agent");
  const chosen = sel.value;
  sel.replaceChildren(el("option", { value: "", textContent: "default agent" }),
    ...agentList().map((a) => el("option", { value: a.id, textContent: a.status === "enabled" ? a.name : `${a.name} (disabled)`, disabled: a.status !== "enabled" })));
  sel.value = [...sel.options].some((o) => o.value === chosen && !o.disabled) ? chosen : "";
}

// renderPicker lists the tasks a new one may depend on. It runs on every
// change of a task: the choices stay in place, element and all, and only
// their status changes, so a tick is never lost to a redraw.
function renderPicker(rows) {
  const box = $("depends-on");
  const labels = [...box.querySelectorAll("label.dep-choice")];
  const same = labels.length === rows.length && rows.every((t, i) => labels[i].dataset.id === t.id);
  if (!same) { // a task came or went: the elements of the others are moved, not made again
    const shown = new Map(labels.map((l) => [l.dataset.id, l]));
    box.replaceChildren(...rows.map((t) => shown.get(t.id) || el("label", { class: "dep-choice", data: { id: t.id } },
      el("input", { type: "checkbox", value: t.id }),
      el("code", { textContent: shortId(t.id) }), ` ${title(t)} `, el("span", { class: "badge" }))));
    if (!rows.length) box.append(el("span", { class: "meta", textContent: "no tasks yet" }));
  }
  rows.forEach((t, i) => {
    const badge = box.children[i].querySelector(".badge");
    badge.textContent = t.status;
    badge.className = `badge ${t.status}`;
  });
  countDeps();
}

function countDeps() {
  const n = $("depends-on").querySelectorAll("input:checked").length;
  $("deps-count").textContent = n ? `(${n})` : "";
}
$("depends-on").addEventListener("change", countDeps);

// graphFields is what the task form adds to a new task's body: its agent,
// priority, dependencies, parent and input (review for a build, expand for
// a plan, a budget, allowed paths). The server checks every value.
export function graphFields() {
  const body = { priority: Number($("priority").value) };
  if ($("agent").value) body.agent_id = $("agent").value;
  const deps = [...$("depends-on").querySelectorAll("input:checked")].map((i) => i.value);
  if (deps.length) body.depends_on = deps;
  if ($("parent").value) body.parent_task_id = $("parent").value;
  const input = taskInput($("type").value);
  if (Object.keys(input).length) body.input = input;
  return body;
}

// taskInput reads the form's input fields for a task of type.
function taskInput(type) {
  const input = {};
  if (type === "build" && $("in-review").checked) input.review = true;
  if (type === "plan" && $("in-expand").checked) input.expand = true;
  const budget = {};
  for (const [id, key] of [["budget-tokens", "max_tokens"], ["budget-cost", "max_cost_usd"], ["budget-iterations", "max_iterations"]]) {
    const v = $(id).value.trim();
    if (v !== "") budget[key] = Number(v);
  }
  if (Object.keys(budget).length) input.budget = budget;
  const paths = $("allowed-paths").value.split(/[,\n]/).map((p) => p.trim()).filter(Boolean);
  if (paths.length) input.allowed_paths = paths;
  return input;
}

// showInputFields shows the input fields of the chosen type and sums up
// what is set.
function showInputFields() {
  const type = $("type").value;
  for (const l of $("input-fields").querySelectorAll("[data-for]")) l.hidden = l.dataset.for !== type;
  const input = taskInput(type);
  const parts = [...Object.keys(input).map((k) => k.replace("_", " ")), ...($("parent").value ? ["parent"] : [])];
  $("input-summary").textContent = parts.length ? `(${parts.join(", ")})` : "";
}
$("type").addEventListener("change", showInputFields);
$("task-input").addEventListener("input", showInputFields);
$("task-input").addEventListener("change", showInputFields);
showInputFields();

// renderParentSelect lists the tasks a new one may be part of, keeping the
// choice while the task is listed.
function renderParentSelect(rows) {
  const sel = $("parent");
  const chosen = sel.value;
  const want = rows.map((t) => `${t.id}|${title(t)}`).join("\n");
  if (sel.dataset.rows !== want) {
    sel.dataset.rows = want;
    sel.replaceChildren(el("option", { value: "", textContent: "no parent task" }),
      ...rows.map((t) => el("option", { value: t.id, textContent: `${shortId(t.id)} · ${t.type} · ${title(t).slice(0, 60)}` })));
    sel.value = rows.some((t) => t.id === chosen) ? chosen : "";
  }
}

// showRelations shows a task's agent, priority and relations (from GET
// /v1/tasks/{id}) in the task view; a related task opens on a click.
export function showRelations(t) {
  shownTask = t;
  const link = (id) => {
    const a = el("a", { href: "#", class: "task-ref", textContent: nameOf(id), title: id, data: { id } });
    a.addEventListener("click", (e) => { e.preventDefault(); onSelect(id); });
    return a;
  };
  const part = (label, ids) => (ids && ids.length ? [` · ${label} `, ...ids.flatMap((id, i) => (i ? [" ", link(id)] : [link(id)]))] : []);
  $("task-relations").replaceChildren(
    `agent ${t.agent_id ? agentName(t.agent_id) : "default"} · priority ${t.priority || 2}`,
    ...(t.parent_task_id ? [" · part of ", link(t.parent_task_id)] : []),
    ...part("after", t.depends_on), ...part("before", t.dependents), ...part("children", t.children));
}

// clearGraphFields unticks the dependencies and clears the input after a
// task is created; the agent and priority stay for the next one.
export function clearGraphFields() {
  for (const i of $("depends-on").querySelectorAll("input:checked")) i.checked = false;
  countDeps();
  for (const id of ["in-review", "in-expand"]) $(id).checked = false;
  for (const id of ["budget-tokens", "budget-cost", "budget-iterations", "allowed-paths", "parent"]) $(id).value = "";
  showInputFields();
}
