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
