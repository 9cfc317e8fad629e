// A build's changes as a pull-request review shows them: one diff per file
// with line numbers on both sides, each line comment under its line, the
// line being commented on highlighted, and the comments no line of the
// diff holds listed apart. Every value is rendered as text.
import { diffRows } from "./state.js";
import { el } from "./dom.js";

function commentItem(c) {
  return el("li", { class: "comment", data: { path: c.path || "", line: String(c.line || "") } },
    el("span", { class: "comment-author", textContent: c.author }), " ",
    el("span", { class: "comment-body", textContent: c.body }));
}

// renderChanges draws files (GET /v1/tasks/{id}/changes) into box with
// comments (GET /v1/tasks/{id}/comments) at their lines, and returns the
// comments no line of the diff holds (on a file, the task, or a line of
// an earlier revision).
export function renderChanges(box, files, comments) {
  const placed = new Set();
  box.replaceChildren(...files.map((f) => {
    const title = f.op === "move" ? `${f.from_path} → ${f.path}` : f.path;
    const diff = el("div", { class: "diff", role: "table" });
    if (f.binary) diff.append(el("div", { class: "line meta" }, el("span", { class: "text", textContent: `binary file, ${f.size} bytes` })));
    else {
      const onFile = comments.filter((c) => c.path === f.path && c.line);
      for (const r of diffRows(f.diff || "")) {
        if (r.cls === "meta") continue; // the file's name is the heading
        const row = el("div", { class: `line ${r.cls}`, role: "row" },
          el("span", { class: "ln old", textContent: r.old ? String(r.old) : "" }),
          el("span", { class: "ln new", textContent: r.new ? String(r.new) : "" }),
          el("span", { class: "text", textContent: r.text }));
        if (r.old) row.dataset.old = String(r.old);
        // A line of the new version takes comments: its number is the one
        // the API checks and the model reads.
        if (r.new) row.dataset.line = String(r.new);
        diff.append(row);
        const here = r.new ? onFile.filter((c) => c.line === r.new) : [];
        if (here.length) {
          for (const c of here) placed.add(c);
          diff.append(el("ul", { class: "thread", data: { line: String(r.new) } }, ...here.map(commentItem)));
        }
      }
    }
    const note = f.before_known ? "" : " (earlier version not recorded: shown whole)";
    return el("div", { class: "file-diff", data: { path: f.path, op: f.op } },
      el("h4", {}, el("span", { class: `op ${f.op}`, textContent: f.op }), ` ${title}${note}`), diff);
  }));
  return comments.filter((c) => !placed.has(c));
}

// renderGeneral lists the comments not shown at a line.
export function renderGeneral(ul, comments) {
  ul.replaceChildren(...comments.map((c) => {
    const li = commentItem(c);
    if (c.path) li.prepend(el("code", { textContent: `${c.path}${c.line ? `:${c.line}` : ""}` }), " ");
    return li;
  }));
}

// selectLine highlights the line row of the diff and opens form under it
// (after the line's comments).
export function selectLine(box, row, form) {
  for (const r of box.querySelectorAll(".line.selected")) r.classList.remove("selected");
  row.classList.add("selected");
  const next = row.nextElementSibling;
  (next && next.classList.contains("thread") ? next : row).after(form);
  form.hidden = false;
}
