// The project's agents: the list, and an editor that creates, edits (with
// the version it read, so a concurrent edit is refused, not overwritten),
// disables and deletes them. The server's refusals are shown as it words
// them. Every value is rendered as text.
import { enc } from "./api.js";
import { $, el } from "./dom.js";

let client = null;
let project = "";
let agents = []; // as last read, by name
let editing = null; // the agent in the editor as last read; null: a new one
let changed = () => {};

// agentList is the agents as last read.
export const agentList = () => agents;

// agentName names an agent by id: its name, else its short id (an agent
// deleted since, or not read yet).
export function agentName(id) {
  const a = agents.find((x) => x.id === id);
  return a ? a.name : id.slice(0, 8);
}

// reloadOnRefusal reads the agents again when the server refused a task's
// agent (disabled or deleted since the list was read), and passes the
// refusal on.
export function reloadOnRefusal(err) {
  if (err.code === "INVALID_ASSIGNEE") loadAgents();
  throw err;
}

// openAgents starts the agents' part of the page for a project; onChange
// runs after every read of the list.
export function openAgents(c, p, onChange) {
  client = c;
  project = p;
  changed = onChange;
  edit(null);
  return loadAgents();
}

export async function loadAgents() {
  try {
    const res = await client.get(`/v1/projects/${enc(project)}/agents`);
    agents = res.agents;
  } catch (err) {
    refuse(err);
    return;
  }
  render();
  changed();
}

function render() {
  $("agents-count").textContent = agents.length ? `(${agents.length})` : "";
  $("agents").replaceChildren(...agents.map((a) => {
    const li = el("li", { class: `agent-row ${a.status}`, data: { id: a.id, status: a.status, version: String(a.version) } },
      el("strong", { class: "agent-name", textContent: a.name }),
      " ", el("span", { class: `badge ${a.status === "enabled" ? "succeeded" : "cancelled"}`, textContent: a.status }),
      el("span", { class: "meta", textContent: ` v${a.version}${a.model ? " · " + a.model : ""}${a.review ? " · review" : ""}` }),
      el("div", { class: "agent-role", textContent: a.role }));
    if (editing && editing.id === a.id) li.classList.add("selected");
    li.addEventListener("click", () => edit(a));
    return li;
  }));
  if (!agents.length) $("agents").replaceChildren(el("li", { class: "meta", textContent: "No agents yet: tasks run as the default agent." }));
}

// edit fills the editor with an agent (null: a new one).
function edit(a) {
  editing = a;
  const f = $("agent-form");
  f.reset();
  $("agent-error").textContent = "";
  delete $("agent-error").dataset.code;
  $("agent-editor-title").textContent = a ? `Edit ${a.name}` : "New agent";
  $("agent-form").dataset.id = a ? a.id : "";
  $("agent-form").dataset.version = a ? String(a.version) : "";
  if (a) {
    f.elements.name.value = a.name;
    f.elements.role.value = a.role;
    f.elements.model.value = a.model || "";
    f.elements.persona.value = a.persona;
    f.elements.tools.value = a.tools === null ? "" : a.tools.join(", ");
    f.elements.enabled.checked = a.status === "enabled";
    f.elements.review.checked = !!a.review;
  }
  $("agent-save").textContent = a ? "Save" : "Create agent";
  $("agent-disable").hidden = !a;
  $("agent-disable").textContent = a && a.status === "disabled" ? "Enable" : "Disable";
  $("agent-delete").hidden = !a;
  render();
}

// refuse shows a refusal of the server in the editor.
function refuse(err) {
  $("agent-error").textContent = String(err.message || err);
  $("agent-error").dataset.code = err.code || "";
}

async function write(fn) {
  $("agent-error").textContent = "";
  delete $("agent-error").dataset.code;
  try {
    const a = await fn();
    await loadAgents();
    edit(a ? agents.find((x) => x.id === a.id) || null : null);
  } catch (err) {
    refuse(err);
    loadAgents(); // the list shows the version that won; the editor keeps what was typed
  }
}

// fields reads the editor; an empty tools box means every tool (null).
function fields() {
  const f = $("agent-form").elements;
  const tools = f.tools.value.split(",").map((s) => s.trim()).filter(Boolean);
  return { name: f.name.value, role: f.role.value, model: f.model.value, persona: f.persona.value,
    tools: tools.length ? tools : null, status: f.enabled.checked ? "enabled" : "disabled", review: f.review.checked };
}

$("agent-form").addEventListener("submit", (e) => {
  e.preventDefault();
  write(() => (editing
    ? client.request("PATCH", `/v1/agents/${enc(editing.id)}`, { ...fields(), expected_version: editing.version })
    : client.post(`/v1/projects/${enc(project)}/agents`, fields())));
});

$("agent-new").addEventListener("click", () => edit(null));

$("agent-disable").addEventListener("click", () => {
  const a = editing;
  write(() => client.request("PATCH", `/v1/agents/${enc(a.id)}`,
    { status: a.status === "disabled" ? "enabled" : "disabled", expected_version: a.version }));
});

$("agent-delete").addEventListener("click", () => {
  const a = editing;
  write(async () => {
    await client.request("DELETE", `/v1/agents/${enc(a.id)}?expected_version=${a.version}`);
    return null;
  });
});
