// What a person reads when the server refuses: a sentence per error code
// saying what happened and what to do. The code itself stays on the error
// (and in the data-code of where it is shown) for machines and tests.

// ADVICE is the sentence for each code the API answers; detail says
// whether the server's own message adds what the sentence cannot know (the
// field, the file, the state): codes whose message is the database's own
// words leave it out.
export const ADVICE = {
  VALIDATION_ERROR: { say: "A value was refused: correct it and try again.", detail: true },
  UNAUTHORIZED: { say: "Your token was refused (expired, revoked, or not signed by this server): get a new one with `agentworker token --project <project> --subject <you>`, paste it and press Open." },
  FORBIDDEN: { say: "Your token does not cover this project or task: open a project it names, or get a token for this one." },
  NOT_FOUND: { say: "It is not there any more (deleted meanwhile): reload the list.", detail: true },
  TASK_NOT_FOUND: { say: "That task is not there any more: pick another one from the list." },
  METHOD_NOT_ALLOWED: { say: "The server does not offer this action: reload the page, the console may be out of date." },
  TASK_VERSION_CONFLICT: { say: "The task changed since you read it (someone else acted on it): it has been read again; check its state and try again." },
  ILLEGAL_TRANSITION: { say: "The task's state does not allow this any more (it moved on meanwhile): it has been read again; check its state.", detail: true },
  ANSWER_REQUIRED: { say: "The answer was empty: type one, then send it." },
  INTERNAL_ERROR: { say: "The server failed to do this: try again in a moment; if it keeps failing, the operator finds the cause in the server's log." },
  UNAVAILABLE: { say: "The server cannot answer this now (not configured, or its database or file store is unreachable): try again shortly, or ask the operator.", detail: true },
  SENSITIVE_FILE: { say: "This file may hold secrets, so the server does not show it: read it where the project is stored, if you may." },
  AGENT_VERSION_CONFLICT: { say: "Someone changed this agent since you opened it: the list shows their version; open it and make your change again." },
  TOO_MANY_STREAMS: { say: "Too many live views are open with this token: close other console tabs, then reload." },
  UNSUPPORTED_MEDIA_TYPE: { say: "The request was not sent as JSON: reload the page, the console may be out of date." },
  CHANGE_CONFLICT: { say: "A file changed in the project since the build read it, so nothing was applied and the task stays in review: reject with feedback to have it redone on the new version.", detail: true },
  INVALID_ASSIGNEE: { say: "That agent cannot take tasks (disabled, deleted, or of another project): choose another agent; the list has been read again." },
  INVALID_PARENT_TASK: { say: "The parent must be a task of this project: choose another parent." },
  INVALID_TASK_DEPENDENCY: { say: "A task may depend only on other tasks of this project, and never on itself through others: untick the dependency that makes the cycle or is gone." },
  TASK_HAS_DEPENDENTS: { say: "Other tasks depend on this one, so it cannot be removed: remove or re-plan them first." },
  AGENT_HAS_TASKS: { say: "This agent still has unfinished tasks, so it cannot be deleted: disable it instead, or wait until they finish." },
  MODEL_UNPRICED: { say: "That model has no price set (LLM_PRICES), so the server will not run it: choose a priced model, or ask the operator to price it.", detail: true },
  AGENT_NAME_TAKEN: { say: "This project already has an agent of that name: choose another name." },
};

// explain is the sentence for a refusal with code and the server's
// message; an unknown code shows the server's message with its code.
export function explain(status, code, message) {
  const a = ADVICE[code];
  if (!a) return `The server refused this (${code || status}): ${message}`;
  return a.detail && message ? `${a.say} ${message}` : a.say;
}
