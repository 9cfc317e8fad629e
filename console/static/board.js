// The project's board: its tasks in columns by status, each card with its
// short id, title, agent, priority and dependencies; and the task form's
// graph fields (agent, priority, dependencies). It draws the task list the
// page keeps live, so the board moves as the list does. Every value is
// rendered as text.
import { agentList, agentName } from "./agents.js";

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k === "data") Object.assign(e.dataset, v);
    else e[k] = v;
  }
  e.append(...children);
  return e;
};

// COLUMNS are the board's columns and the statuses each holds: review
// holds the tasks that wait for a person (a build to review, a question, a
// pause).
export const COLUMNS = [
  { key: "waiting", title: "Waiting", statuses: ["waiting"] },
  { key: "queued", title: "Queued", statuses: ["queued"] },
  { key: "running", title: "Running", statuses: ["running"] },
  { key: "review", title: "Review", statuses: ["review", "awaiting_input", "awaiting_approval", "paused"] },
  { key: "succeeded", title: "Succeeded", statuses: ["succeeded"] },
  { key: "failed", title: "Failed / blocked", statuses: ["failed", "blocked"] },
  { key: "cancelled", title: "Cancelled", statuses: ["cancelled"] },
];

export const shortId = (id) => id.slice(0, 8);
// title is a task's first line of prompt.
export const title = (t) => (t.prompt || "").split("\n", 1)[0];

// columnOf is the key of the column a status goes in.
export function columnOf(status) {
  const c = COLUMNS.find((col) => col.statuses.includes(status));
  return c ? c.key : "queued";
}

// boardColumns groups tasks by column, each column by priority (1 first),
// then oldest first: the order a worker would start them in.
export function boardColumns(rows) {
  const cols = new Map(COLUMNS.map((c) => [c.key, []]));
  for (const t of rows) cols.get(columnOf(t.status)).push(t);
  for (const list of cols.values()) {
    list.sort((a, b) => (a.priority || 2) - (b.priority || 2) || (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0));
  }
  return cols;
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
      $("board-result").textContent = `${cmd}…`;
      try {
        const counts = await onCommand(cmd, ids);
        const parts = Object.entries(counts || {}).map(([k, n]) => `${n} ${k}`);
        $("board-result").textContent = `${cmd}: ${parts.join(", ") || "nothing to do"}`;
        document.body.dataset.broadcast = cmd;
        picked.clear();
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
}

let shownCards = new Map(); // task id → { key, li }

// cardOf is a task's card: the one shown, when what it shows is the same.
function cardOf(t, selected, cards) {
  const key = JSON.stringify([t.status, t.priority, t.prompt, t.agent_id && agentName(t.agent_id), t.depends_on, t.id === selected, picked.has(t.id)]);
  const prev = shownCards.get(t.id);
  const li = prev && prev.key === key ? prev.li : card(t, selected);
  cards.set(t.id, { key, li });
  return li;
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
      el("span", { class: `badge ${t.status}`, textContent: t.status })),
    el("div", { class: "card-title", textContent: title(t), title: t.prompt }),
    el("div", { class: "card-agent meta", textContent: t.agent_id ? agentName(t.agent_id) : "default agent" }));
  if (deps.length) {
    li.append(el("div", { class: "card-deps meta" }, "after ",
      ...deps.map((d) => el("code", { class: "dep", textContent: shortId(d), data: { id: d } }))));
  }
  if (t.id === selected) li.classList.add("selected");
  li.addEventListener("click", () => onSelect(t.id));
  return li;
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

// graphFields is what the task form adds to a new task's body.
export function graphFields() {
  const body = { priority: Number($("priority").value) };
  if ($("agent").value) body.agent_id = $("agent").value;
  const deps = [...$("depends-on").querySelectorAll("input:checked")].map((i) => i.value);
  if (deps.length) body.depends_on = deps;
  return body;
}

// showRelations shows a task's agent, priority and relations (from GET
// /v1/tasks/{id}) in the task view; a related task opens on a click.
export function showRelations(t) {
  shownTask = t;
  const link = (id) => {
    const a = el("a", { href: "#", class: "task-ref", textContent: shortId(id), data: { id } });
    a.addEventListener("click", (e) => { e.preventDefault(); onSelect(id); });
    return a;
  };
  const part = (label, ids) => (ids && ids.length ? [` · ${label} `, ...ids.flatMap((id, i) => (i ? [" ", link(id)] : [link(id)]))] : []);
  $("task-relations").replaceChildren(
    `agent ${t.agent_id ? agentName(t.agent_id) : "default"} · priority ${t.priority || 2}`,
    ...(t.parent_task_id ? [" · part of ", link(t.parent_task_id)] : []),
    ...part("after", t.depends_on), ...part("before", t.dependents), ...part("children", t.children));
}

// clearGraphFields unticks the dependencies after a task is created; the
// agent and priority stay for the next one.
export function clearGraphFields() {
  for (const i of $("depends-on").querySelectorAll("input:checked")) i.checked = false;
  countDeps();
}
