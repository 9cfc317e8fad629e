// The agentworker /v1 API as the console uses it: bearer-token requests,
// refusals turned into exceptions that say what to do (errors.js), and
// EventSource URLs (EventSource cannot send headers, so the token goes in
// the access_token parameter).

import { explain } from "./errors.js";

// APIError is a refusal: its message is the sentence a person reads (what
// to do), code the server's error code, detail the server's own message.
export class APIError extends Error {
  constructor(status, code, detail) {
    super(explain(status, code, detail));
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

export class Client {
  constructor(token) {
    this.token = token;
  }

  async request(method, path, body) {
    const headers = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!resp.ok) {
      const err = data && data.error;
      const code = typeof err === "object" && err ? err.code : typeof err === "string" ? err : "";
      const msg = typeof err === "object" && err ? err.message : text.trim() || resp.statusText;
      throw new APIError(resp.status, code, msg);
    }
    return data;
  }

  get(path) {
    return this.request("GET", path);
  }

  post(path, body = {}) {
    return this.request("POST", path, body);
  }

  eventsURL(path, after) {
    const q = new URLSearchParams({ access_token: this.token });
    if (after) q.set("after", after);
    return `${path}?${q}`;
  }
}

// enc encodes one path segment; path encodes a project file path segment by
// segment, keeping its slashes.
export const enc = encodeURIComponent;
export const filePath = (p) => p.split("/").map(enc).join("/");

// tokenClaims reads a JWT's claims for display, without checking them (the
// server does); null when it is not a JWT.
export function tokenClaims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const bin = atob(part.padEnd(Math.ceil(part.length / 4) * 4, "="));
    const claims = JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0))));
    return claims && typeof claims === "object" ? claims : null;
  } catch {
    return null;
  }
}

// describeToken says whom a token names and what it may open, e.g. "as
// operator (token for project 7b0c…)".
export function describeToken(token) {
  const c = tokenClaims(token);
  if (!c) return "(the token is not a JWT)";
  // Named as the audit log names the bearer: its subject, else its role,
  // else "api".
  const who = typeof c.sub === "string" && c.sub ? `as ${c.sub}` : typeof c.role === "string" && c.role ? `as role:${c.role}` : "as api (the token names no subject)";
  if (c.role === "service_role") return `${who} (service token: every project)`;
  const projects = Array.isArray(c.projects) ? c.projects.filter((p) => typeof p === "string") : [];
  return `${who} (token for ${projects.length === 1 ? "project" : "projects"} ${projects.join(", ") || "none"})`;
}
