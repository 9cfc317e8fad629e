package bench

import (
	"fmt"
	"strings"
)

// Markdown renders the report as a table with the project's targets.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s  \nStore: %s%s\n\n", r.Machine, r.StoreName, map[bool]string{true: " (quick run)"}[r.Quick])
	b.WriteString("| measure | agentworker | raw River | target |\n|---|---|---|---|\n")
	pc := func(p Percentiles) string { return fmt.Sprintf("p50 %.2f / p95 %.2f / p99 %.2f", p.P50, p.P95, p.P99) }
	row := func(name, ours, river, target string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, ours, river, target)
	}
	row("insert → handler start (ms)", pc(r.LatencyMS), pc(r.RiverLatencyMS), fmt.Sprintf("≤ 1.2× River (now %.2f×)", r.LatencyRatio))
	row(fmt.Sprintf("throughput, %d tasks (per s)", r.Tasks), fmt.Sprintf("%.0f", r.TasksPerS),
		fmt.Sprintf("no-op %.0f; same writes %.0f", r.RiverJobsPerS, r.RiverSameWritesPerS),
		fmt.Sprintf("≥ 0.8× same writes (now %.2f×), ≥ 1,000/s", ratio(r.TasksPerS, r.RiverSameWritesPerS)))
	row("events written (per s)", fmt.Sprintf("%.0f", r.EventsWrittenPerS), "", "")
	row("write → LISTEN receipt (ms)", pc(r.EventReceiptMS), "", "p99 < 20")
	row("write → SSE receipt (ms)", pc(r.SSEReceiptMS), "", "p99 < 20")
	row("context build, 200 / 2,000 files (ms)", fmt.Sprintf("%.1f / %.1f", r.ContextBuildMS.Files200, r.ContextBuildMS.Files2000), "", "2,000 files < 500")
	row("read_file (ms)", pc(r.ToolCallMS.Read), "", "p99 < 50")
	row("search_files (ms)", pc(r.ToolCallMS.Search), "", "p99 < 50")
	row("edit_file (ms)", pc(r.ToolCallMS.Edit), "", "p99 < 50")
	row("agent loop overhead per iteration (ms)", fmt.Sprintf("%.2f", r.LoopOverheadMS), "", "< 2")
	row("RSS with 1 / 10 / 100 tasks (MB)", fmt.Sprintf("%.0f / %.0f / %.0f", r.RSSMB.Tasks1, r.RSSMB.Tasks10, r.RSSMB.Tasks100), "", "")
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}
