// State of the Activity Timeline, free of the DOM.

// The runner's stages, in order (handlers/runner.go).
export const STAGES = ["claim", "load_context", "assemble_prompt", "agent_loop", "final_response", "write_result", "cleanup"];

// moveKey identifies the two halves of one move: the move_file tool_call
// and its file_update with op "move".
function moveKey(ev) {
  const p = ev.payload || {};
  if (ev.type === "tool_call" && p.toolName === "move_file" && p.success) return `${ev.task_id}|${p.fromPath}|${p.toPath}`;
  if (ev.type === "file_update" && p.op === "move") return `${ev.task_id}|${p.fromPath}|${p.toPath}`;
  return null;
}

// Timeline keeps the latest `limit` events. The halves of a move are evicted
// together, never one without the other, and the latest move is kept even
// when older than the limit.
export class Timeline {
  constructor(limit) {
    this.limit = limit;
    this.clear();
  }

  clear() {
    this.events = [];
    this.groupOf = new Map(); // event → move group id
    this.open = new Map(); // move key → group waiting for its other half
    this.nextGroup = 1;
    this.latestMove = 0;
  }

  add(ev) {
    const key = moveKey(ev);
    if (key !== null) {
      let group = this.open.get(key);
      if (group === undefined) {
        group = this.nextGroup++;
        this.open.set(key, group);
      } else {
        this.open.delete(key); // both halves seen
      }
      this.groupOf.set(ev, group);
      this.latestMove = group;
    }
    this.events.push(ev);
    this.trim();
  }

  trim() {
    while (this.events.length > this.limit) {
      const victim = this.events.find((ev) => this.groupOf.get(ev) === undefined || this.groupOf.get(ev) !== this.latestMove);
      if (victim === undefined) return; // only the latest move is left
      const group = this.groupOf.get(victim);
      this.events = this.events.filter((ev) => ev !== victim && (group === undefined || this.groupOf.get(ev) !== group));
      if (group !== undefined) {
        for (const [k, g] of this.open) if (g === group) this.open.delete(k);
      }
    }
    for (const ev of this.groupOf.keys()) if (!this.events.includes(ev)) this.groupOf.delete(ev);
  }
}

// FileTree is the set of files a task's file_update events describe; the
// selected file follows a move.
export class FileTree {
  constructor() {
    this.clear();
  }

  clear() {
    this.files = new Set();
    this.movedTo = new Set();
    this.selected = null;
  }

  apply(p) {
    switch (p.op) {
      case "create":
      case "update":
        this.files.add(p.path);
        break;
      case "delete":
        this.files.delete(p.path);
        if (this.selected === p.path) this.selected = null;
        break;
      case "move": {
        const from = p.fromPath, to = p.toPath || p.path;
        this.files.delete(from);
        this.movedTo.delete(from);
        this.files.add(to);
        this.movedTo.add(to);
        if (this.selected === from) this.selected = to;
        break;
      }
    }
  }

  paths() {
    return [...this.files];
  }
}

// The task statuses each control applies to (the task state machine).
export const CONTROLS = {
  cancel: ["queued", "running", "paused", "awaiting_input", "awaiting_approval", "waiting", "review"],
  pause: ["queued", "running", "waiting"],
  resume: ["paused"],
  retry: ["failed", "blocked", "cancelled"],
  approve: ["review"],
};

// TaskList is a project's tasks as the server last described them, newest
// first. Events of the project stream only say which task to read again;
// the rows always come from the server.
export class TaskList {
  constructor() {
    this.clear();
  }

  clear() {
    this.byId = new Map();
  }

  // reset replaces the list with a page read from the server, keeping
  // rows newer than the page (created while it was read).
  reset(rows) {
    const oldest = rows.length ? rows[rows.length - 1].created_at : "";
    for (const [id, t] of this.byId) if (t.created_at < oldest) this.byId.delete(id);
    for (const r of rows) this.upsert(r);
  }

  upsert(row) {
    const prev = this.byId.get(row.id);
    // A late answer never overwrites a newer state of the row.
    if (prev && prev.version > row.version) return false;
    this.byId.set(row.id, { ...prev, ...row });
    return true;
  }

  has(id) {
    return this.byId.has(id);
  }

  get(id) {
    return this.byId.get(id);
  }

  // noteEvent applies what an event of the project stream tells without
  // asking the server (the iteration in progress) and reports whether the
  // task is unknown (the list must be read again) or its row is stale.
  noteEvent(ev) {
    const row = this.byId.get(ev.task_id);
    if (!row) return { unknown: true, stale: false };
    const p = ev.payload || {};
    if (ev.type === "progress" && p.kind === "iteration_start" && p.iteration > (row.iterations || 0)) row.iterations = p.iteration;
    const stale = ev.type === "agent_phase" || (ev.type === "progress" && ["stage_enter", "iteration_start"].includes(p.kind));
    return { unknown: false, stale };
  }

  rows() {
    return [...this.byId.values()].sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0));
  }
}

// age renders the time since iso as "42s", "5m", "3h" or "2d".
export function age(iso, now = Date.now()) {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

// money renders US dollars with enough digits for model prices.
export function money(usd) {
  if (!usd) return "$0";
  return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toPrecision(2)}`;
}

// diffLineClass is the style of one line of a unified diff.
export function diffLineClass(line) {
  if (line.startsWith("+++ ") || line.startsWith("--- ")) return "meta";
  if (line.startsWith("@@")) return "hunk";
  if (line.startsWith("+")) return "add";
  if (line.startsWith("-")) return "del";
  if (line.startsWith("\\")) return "meta";
  return "ctx";
}

// diffRows numbers the lines of a unified diff on both sides: each row has
// its class, its text, its line in the old file (del and ctx) and in the
// new file (add and ctx); headers have neither.
export function diffRows(diff) {
  const rows = [];
  let oldNo = 0;
  let newNo = 0;
  for (const line of diff.split("\n").slice(0, -1)) {
    const cls = diffLineClass(line);
    const row = { cls, text: line, old: 0, new: 0 };
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(line);
    if (hunk) {
      oldNo = Number(hunk[1]);
      newNo = Number(hunk[2]);
    } else if (cls === "add") row.new = newNo++;
    else if (cls === "del") row.old = oldNo++;
    else if (cls === "ctx") {
      row.old = oldNo++;
      row.new = newNo++;
    }
    rows.push(row);
  }
  return rows;
}

// callLines shows a tool call that waits for approval as diff lines: a
// write as the content it adds, an edit as the text it removes and adds,
// a patch as itself; any other call as its arguments, indented.
export function callLines(name, args) {
  let a;
  try {
    a = JSON.parse(args);
  } catch {
    return [args];
  }
  const lines = (prefix, text) => String(text ?? "").replace(/\n$/, "").split("\n").map((l) => prefix + l);
  switch (name) {
    case "write_file":
      return [`+++ ${a.path}`, ...lines("+", a.content)];
    case "edit_file":
      if (typeof a.old_string === "string" || typeof a.new_string === "string") {
        return [`--- ${a.path}`, `+++ ${a.path}`, ...lines("-", a.old_string), ...lines("+", a.new_string)];
      }
      break;
    case "apply_patch":
      return lines("", a.patch);
  }
  return JSON.stringify(a, null, 2).split("\n");
}
