package bench

import (
	"fmt"
	"slices"
	"strings"
)

// Markdown renders the report as a table with the project's targets.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s  \nStore: %s%s\n\n", r.Machine, r.StoreName, map[bool]string{true: " (quick run)"}[r.Quick])
	b.WriteString("| measure | agentworker | raw River (tuned: MaxWorkers 1000, FetchCooldown 2 ms, FetchPollInterval 50 ms) | target |\n|---|---|---|---|\n")
	pc := func(p Percentiles) string { return fmt.Sprintf("p50 %.2f / p95 %.2f / p99 %.2f", p.P50, p.P95, p.P99) }
	row := func(name, ours, river, target string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, ours, river, target)
	}
	// Only the scenarios that ran (a report from before Scenarios: all).
	ran := func(name string) bool { return len(r.Scenarios) == 0 || slices.Contains(r.Scenarios, name) }
	if ran("latency") {
		row("insert → handler start (ms)", pc(r.LatencyMS), pc(r.RiverLatencyMS), fmt.Sprintf("p50 ≤ 1.2× tuned River (now %.2f×)", r.LatencyRatio))
	}
	if ran("throughput") {
		row(fmt.Sprintf("throughput, %d tasks (per s)", r.Tasks), fmt.Sprintf("%.0f", r.TasksPerS),
			fmt.Sprintf("no-op %.0f; same writes %.0f", r.RiverJobsPerS, r.RiverSameWritesPerS),
			fmt.Sprintf("≥ 0.8× same writes (now %.2f×), ≥ 1,000/s", ratio(r.TasksPerS, r.RiverSameWritesPerS)))
		if len(r.ThroughputRounds) > 1 {
			var ours, river []string
			for _, rd := range r.ThroughputRounds {
				ours = append(ours, fmt.Sprintf("%.0f", rd.TasksPerS))
				river = append(river, fmt.Sprintf("%.0f", rd.RiverSameWritesPerS))
			}
			row("throughput rounds, alternated (per s; the row above: their medians)", strings.Join(ours, ", "), "same writes "+strings.Join(river, ", "), "")
		}
		if c := r.ThroughputCPU; c.Ours != (CPUPerTask{}) {
			cpu := func(c CPUPerTask) string {
				s := fmt.Sprintf("%.2f + %.2f = %.2f", c.ProcessMS, c.PostgresMS, c.ProcessMS+c.PostgresMS)
				if c.StoreMS > 0 {
					s += fmt.Sprintf("; store %.2f", c.StoreMS)
				}
				if c.MachineMS > 0 {
					s += fmt.Sprintf("; machine %.2f", c.MachineMS)
				}
				return s
			}
			name, ours := "CPU per two-call build, process + Postgres (ms; ours: the worker and the scripted model it hosts)", cpu(c.Ours)
			if c.Ours.ModelApart {
				name = "CPU per two-call build, process + Postgres (ms; ours: the worker, the model in a process of its own)"
				ours += fmt.Sprintf(" (model %.2f)", c.Ours.ModelMS)
			}
			row(name, ours, "same writes "+cpu(c.RiverSameWrites), "worker + Postgres ≤ 3")
		}
	}
	if ran("events") {
		row("events written (per s)", fmt.Sprintf("%.0f", r.EventsWrittenPerS), "", "")
		row("write → LISTEN receipt (ms)", pc(r.EventReceiptMS), "", "p99 < 20")
		row("write → SSE receipt (ms)", pc(r.SSEReceiptMS), "", "p99 < 20")
		row("of which the write itself (ms)", pc(r.EventWriteMS), "", "")
	}
	if ran("storage") {
		row("context build, 200 / 2,000 files (ms)", fmt.Sprintf("%.1f / %.1f", r.ContextBuildMS.Files200, r.ContextBuildMS.Files2000), "", "2,000 files < 500")
		row("read_file (ms)", pc(r.ToolCallMS.Read), "", "p99 < 50")
		row("search_files warm (ms)", pc(r.ToolCallMS.Search), "", "p99 < 50")
		row("search_files cold, the first (ms)", fmt.Sprintf("%.1f", r.ToolCallMS.SearchCold), "", "")
		row("search_files 10 s after the last, the listing refreshed behind (ms)", pc(r.ToolCallMS.SearchStale), "", "p99 < 50")
		row("search_files past the listing's max age (ms)", pc(r.ToolCallMS.SearchRelisted), "", "")
		row("edit_file (ms)", pc(r.ToolCallMS.Edit), "", "p99 < 50")
	}
	if ran("loop") {
		row("agent loop overhead per iteration (ms)", fmt.Sprintf("%.2f", r.LoopOverheadMS), "", "< 2")
	}
	if tc := r.Tracing; tc.Receiver != "" {
		row("tracing off → on: loop overhead per iteration (ms); tasks per s",
			fmt.Sprintf("%.2f → %.2f (%.2f×); %.0f → %.0f (%.2f×)", tc.LoopOffMS, tc.LoopOnMS, tc.LoopRatio, tc.TasksPerSOff, tc.TasksPerSOn, tc.TasksPerSRatio),
			"", "loop ≤ 1.05×")
	}
	if ran("memory") {
		row("RSS with 1 / 10 / 100 tasks (MB)", fmt.Sprintf("%.0f / %.0f / %.0f", r.RSSMB.Tasks1, r.RSSMB.Tasks10, r.RSSMB.Tasks100), "", "")
	}
	if f := r.InFlight; ran("inflight") {
		row(fmt.Sprintf("%d tasks in flight, %.0f ms model: insert → done ÷ ideal", f.Tasks, f.ModelDelayMS),
			fmt.Sprintf("median %.2f× / p99 %.2f×", f.MedianRatio, f.P99Ratio), "", "median ≤ 1.25×")
		if ph := f.Phases; ph.Done.P50 > 0 {
			row("where the time goes: insert → handler start / first call / second call / done (s, p50; p99)",
				fmt.Sprintf("%.2f / %.2f / %.2f / %.2f; %.2f / %.2f / %.2f / %.2f", ph.Start.P50, ph.FirstCall.P50, ph.SecondCall.P50, ph.Done.P50,
					ph.Start.P99, ph.FirstCall.P99, ph.SecondCall.P99, ph.Done.P99), "", fmt.Sprintf("0 / 0 / %.2f / %.2f", f.IdealS/2, f.IdealS))
		}
		if c := f.CPU; c != (CPUPerTask{}) {
			row("CPU per task in flight, process (worker, model, listener) + Postgres (ms)", fmt.Sprintf("%.2f + %.2f = %.2f", c.ProcessMS, c.PostgresMS, c.ProcessMS+c.PostgresMS), "", "")
		}
		row("lock waiters (sampled, max / mean); on NOTIFY (max)", fmt.Sprintf("%d / %.1f; %d", f.LockWaitersMax, f.LockWaitersMean, f.NotifyLockWaitersMax), "", "none on NOTIFY")
		row("statements / round trips / commits per task (in flight)", fmt.Sprintf("%.1f / %.1f / %.1f", f.StatementsPerTask, f.RoundTripsPerTask, f.CommitsPerTask), "", "")
		row(fmt.Sprintf("event receipt while in flight, %.0f events/s (ms)", f.EventsPerS), pc(f.EventReceiptMS), "", "p99 < 20")
		if f.EventAfterCommitMS != (Percentiles{}) {
			row("of which the write / commit → receipt (ms)", pc(f.EventWriteMS)+"; "+pc(f.EventAfterCommitMS), "", "")
		}
	}
	if st := r.Steady; ran("steady") {
		row(fmt.Sprintf("event receipt at a steady %.0f events/s, %d tasks in flight (median; CPUs %.0f %% busy) (ms)", st.EventsPerS, st.InFlightMedian, 100*st.CPUBusy),
			pc(st.EventReceiptMS), "", "p99 < 20")
	}
	round := func(x ReplicaRound) string {
		return fmt.Sprintf("%.0f/s; %.1f / %.1f / %.1f ms; %.1f", x.TasksPerS, x.WorkerCPUMSPerTask, x.PostgresCPUMSPerTask, x.BenchCPUMSPerTask, x.CommitsPerTask)
	}
	scaled := func(run ReplicaRun) string {
		return round(run.ReplicaRound) + fmt.Sprintf("; scaling %.2f", run.Scaling)
	}
	for _, run := range r.Replicas.Runs {
		ours := scaled(run)
		if run.Cold != nil {
			ours += " (first round: " + round(*run.Cold) + ")"
		}
		row(fmt.Sprintf("%d serve process(es), %d tasks (per s; CPU ms per task: worker / Postgres / bench and model; commits)", run.Replicas, r.Replicas.Tasks),
			ours, "", "grows with replicas; CPU ≤ 5 ms")
	}
	if gr := r.Graph; gr.Chains > 0 {
		row(fmt.Sprintf("%d chains of %d dependent tasks, %d slots: dependency done → dependent start (ms)", gr.Chains, gr.ChainLength, gr.Concurrency),
			pc(gr.HandoffMS)+fmt.Sprintf("; an independent task's pickup meanwhile %s (on an idle worker %s)", pc(gr.PickupMS), pc(gr.IdlePickupMS)), "",
			fmt.Sprintf("p50 ≤ 1.2× the pickup meanwhile (now %.2f×)", gr.HandoffRatio))
		row(fmt.Sprintf("the same %d tasks: chained / independent (per s)", gr.Chains*gr.ChainLength),
			fmt.Sprintf("%.0f / %.0f", gr.TasksPerS, gr.FlatTasksPerS), "", "")
		if gr.Diamonds > 0 {
			row(fmt.Sprintf("%d diamonds (A; B, C after A; D after both), %d slots: dependency done → dependent start (ms)", gr.Diamonds, gr.Concurrency),
				"after A "+pc(gr.DiamondHandoffMS)+"; fan-in, after the later of B and C "+pc(gr.FanInHandoffMS)+
					fmt.Sprintf("; an independent task's pickup meanwhile %s; %.0f tasks/s", pc(gr.DiamondPickupMS), gr.DiamondTasksPerS), "", "")
		}
	}
	bd := r.Replicas.Bounded
	for _, run := range bd.Runs {
		row(fmt.Sprintf("%d serve process(es) bounded by their tasks (%d each, %.0f ms model), %d tasks", run.Replicas, bd.Concurrency, bd.ModelDelayMS, bd.Tasks),
			scaled(run), "", "grows with replicas")
	}
	pl := r.ProviderLimit
	for _, run := range pl.Runs {
		headers := "Retry-After only"
		if run.Headers {
			headers = "x-ratelimit headers"
		}
		row(fmt.Sprintf("%d serve process(es), %d builds against a %.0f requests/s provider (%s): failed; refused/answered; wall ÷ ideal", run.Replicas, pl.Tasks, pl.RPS, headers),
			fmt.Sprintf("%d; %d/%d (%.0f %%); %.1f s ÷ %.0f s = %.2f×", run.Failed, run.Refused, run.Answered, 100*run.RefusedRatio, run.WallS, run.IdealS, run.WallRatio),
			"", "0; ≤ 10 %; ≤ 1.3×")
	}
	if st := r.Storm; st.Tasks > 0 {
		for _, run := range []struct {
			name string
			run  ProviderLimitRun
		}{{"calm", st.Calm}, {fmt.Sprintf("%.0f %% refused at random", 100*st.Share), st.Storm}} {
			row(fmt.Sprintf("%d builds, one serve process, provider %s: failed; refused/answered; wall", st.Tasks, run.name),
				fmt.Sprintf("%d; %d/%d (%.2f×); %.1f s", run.run.Failed, run.run.Refused, run.run.Answered, run.run.RefusedRatio, run.run.WallS),
				"", "0; ≤ 2×")
		}
		row("storm wall less calm wall (s)", fmt.Sprintf("%.1f", st.ExtraS), "", "≤ 20")
	}
	fa := r.Fairness
	for _, run := range fa.Runs {
		cap := "no per-project cap"
		if run.Cap > 0 {
			cap = fmt.Sprintf("WORKER_PROJECT_MAX_RUNNING=%d", run.Cap)
		}
		row(fmt.Sprintf("one project's %d queued, WORKER_CONCURRENCY=%d, %.0f ms model, %s: another project's task insert → start (s); the backlog's tasks/s alone → beside it", fa.Backlog, fa.Concurrency, fa.ModelDelayMS, cap),
			fmt.Sprintf("p50 %.2f / p99 %.2f, %d of %d not started in a minute; %.2f → %.2f (%.0f %%)", run.StartS.P50, run.StartS.P99, run.Unstarted, run.Probes,
				run.AlonePerS, run.BesidePerS, 100*(ratio(run.BesidePerS, run.AlonePerS)-1)),
			"", "p99 ≤ 5 s; ≥ −10 %")
	}
	if ran("retention") {
		r.Retention.rows(row)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}
