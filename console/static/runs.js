// The runs view: the project's runs per UTC day by status, as stacked bars
// in an inline SVG drawn here (no library, nothing fetched but the
// summary), beside each group's tokens, cost, durations and rate-limit
// waits. Text goes in as textContent, never as markup.
import { money } from "./state.js";

const SVG = "http://www.w3.org/2000/svg";

// RUN_STATUSES orders a bar's segments, bottom up (sql/runs.go).
export const RUN_STATUSES = ["succeeded", "failed", "cancelled", "interrupted", "retry_scheduled", "running", "queued"];

// daySeries folds the summary's groups (per day, agent, status and error
// code) into one entry per UTC day of the window, oldest first: the days
// without runs are there too, so the bars keep the calendar's spacing.
export function daySeries(groups, days, today = new Date()) {
  const byDay = new Map();
  const end = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate());
  for (let i = days - 1; i >= 0; i--) {
    const day = new Date(end - i * 86400000).toISOString().slice(0, 10);
    byDay.set(day, { day, runs: 0, statuses: {}, tokens: 0, cost: 0, waitMs: 0, maxMs: 0 });
  }
  for (const g of groups) {
    const d = byDay.get(g.day);
    if (!d) continue; // outside the window (a clock at the day's edge)
    d.runs += g.runs;
    d.statuses[g.status] = (d.statuses[g.status] || 0) + g.runs;
    d.tokens += g.tokens_in + g.tokens_out;
    d.cost += g.cost_usd;
    d.waitMs += g.rate_limit_wait_ms || 0;
    d.maxMs = Math.max(d.maxMs, g.max_ms);
  }
  return [...byDay.values()];
}

// duration renders milliseconds for a person.
export function duration(ms) {
  if (!ms) return "0s";
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)}s`;
  return `${Math.floor(ms / 60000)}m${String(Math.round((ms % 60000) / 1000)).padStart(2, "0")}s`;
}

function svg(tag, attrs = {}, text = "") {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text) e.textContent = text;
  return e;
}

// drawRunsChart draws series (daySeries) into the <svg> element: a bar per
// day, a segment per status with its count in data-runs and a tooltip,
// the day axis and the largest day's count, and a legend of the statuses
// present.
export function drawRunsChart(root, series) {
  const W = 320, H = 150, left = 24, right = 4, top = 8, bottom = 34;
  const plotW = W - left - right, plotH = H - top - bottom;
  const max = Math.max(1, ...series.map((d) => d.runs));
  const step = plotW / Math.max(1, series.length);
  const barW = Math.max(1, step * 0.75);
  root.setAttribute("viewBox", `0 0 ${W} ${H}`);
  root.setAttribute("role", "img");
  const parts = [
    svg("line", { class: "axis", x1: left, y1: top + plotH, x2: W - right, y2: top + plotH }),
    svg("text", { class: "tick", x: left - 3, y: top + 4, "text-anchor": "end" }, String(max)),
    svg("text", { class: "tick", x: left - 3, y: top + plotH, "text-anchor": "end" }, "0"),
  ];
  const present = new Set();
  series.forEach((d, i) => {
    const x = left + i * step + (step - barW) / 2;
    let y = top + plotH;
    for (const status of RUN_STATUSES) {
      const n = d.statuses[status] || 0;
      if (!n) continue;
      present.add(status);
      const h = (n / max) * plotH;
      y -= h;
      const rect = svg("rect", { class: `run-bar ${status}`, x: x.toFixed(2), y: y.toFixed(2), width: barW.toFixed(2), height: h.toFixed(2),
        "data-day": d.day, "data-status": status, "data-runs": n });
      rect.append(svg("title", {}, `${d.day} · ${status}: ${n} run${n === 1 ? "" : "s"}`));
      parts.push(rect);
    }
    // A label every week, and on the last day (flush with the plot's end).
    if ((series.length - 1 - i) % 7 === 0) {
      const last = i === series.length - 1;
      parts.push(svg("text", { class: "tick", x: (last ? W - right : x + barW / 2).toFixed(2), y: top + plotH + 11,
        "text-anchor": last ? "end" : "middle" }, d.day.slice(5)));
    }
  });
  let lx = left;
  for (const status of RUN_STATUSES.filter((s) => present.has(s))) {
    parts.push(svg("rect", { class: `run-bar ${status} legend`, x: lx, y: H - 10, width: 7, height: 7 }));
    const label = svg("text", { class: "tick", x: lx + 9, y: H - 3 }, status);
    parts.push(label);
    lx += 14 + status.length * 5;
  }
  root.replaceChildren(...parts);
  root.dataset.days = String(series.length);
  root.dataset.runs = String(series.reduce((n, d) => n + d.runs, 0));
}

// runRows are the table's rows: one per group, newest day first, as the
// summary returns them; agentName names a group's agent (by id). Six
// narrow columns, so that the table fits the side panel: the error code
// under the status, the tokens under the cost, the rate-limit wait under
// the durations.
export function runRows(groups, el, agentName) {
  const small = (cls, text) => el("small", { class: cls, textContent: text });
  return groups.map((g) => el("tr", { class: "run-group", data: { day: g.day, status: g.status } },
    el("td", { textContent: g.day.slice(5) }),
    el("td", { class: "agent", textContent: g.agent_id ? agentName(g.agent_id) : "default" }),
    el("td", {}, el("span", { class: `badge ${g.status}`, textContent: g.status }),
      ...(g.error_code ? [el("br"), small("code", g.error_code)] : [])),
    el("td", { class: "num", textContent: String(g.runs), title: `${g.retries} retr${g.retries === 1 ? "y" : "ies"}` }),
    el("td", { class: "num" }, money(g.cost_usd), el("br"), small("tokens", `${g.tokens_in + g.tokens_out} tok`)),
    el("td", { class: "num", title: `average ${duration(g.avg_ms)}, p95 ${duration(g.p95_ms)}, max ${duration(g.max_ms)}` },
      `${duration(g.avg_ms)} avg`, el("br"), small("spread", `p95 ${duration(g.p95_ms)}, max ${duration(g.max_ms)}`), el("br"),
      small("wait", g.rate_limit_wait_ms ? `waited ${duration(g.rate_limit_wait_ms)}` : "no wait"))));
}
