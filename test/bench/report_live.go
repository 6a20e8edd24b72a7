/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package main

// The report's sections for the webhook variants, the live-runs workload
// and the Targets table.

import (
	"fmt"
	"slices"
	"strings"
)

type writer func(format string, args ...any)

// liveSet is the live workload's settings, if it ran.
func (r *report) liveSet() *liveSettings {
	for _, wl := range r.Settings.Workloads {
		if wl.Kind == "live" && wl.Live != nil {
			return wl.Live
		}
	}
	return nil
}

func liveOr(r *report, f func(*liveSettings) string) string {
	if l := r.liveSet(); l != nil {
		return f(l)
	}
	return "–"
}

func liveOrInt(r *report, f func(*liveSettings) int) int {
	if l := r.liveSet(); l != nil {
		return f(l)
	}
	return 0
}

// webhookTables compares each workload run with the admission webhooks
// installed with the same workload without them (agentrun).
func (r *report) webhookTables(w writer) {
	byName := map[string]wlSummary{}
	for _, ws := range r.Summary {
		byName[ws.Workload] = ws
	}
	for _, ws := range r.Summary {
		base, ok := strings.CutSuffix(ws.Workload, webhookSuffix)
		if !ok {
			continue
		}
		with := ws.Systems[sysAgentrun]
		if with == nil {
			continue
		}
		without := &sysSummary{}
		if b, ok := byName[base]; ok && b.Systems[sysAgentrun] != nil {
			without = b.Systems[sysAgentrun]
		}
		title := base
		if n, ok := strings.CutPrefix(base, "burst-"); ok {
			title = "a burst of N = " + n
		} else if n, ok := strings.CutPrefix(base, "serial-"); ok {
			title = "one run at a time on an idle plane (" + n + " runs)"
		}
		w("### agentrun with the admission webhooks installed: %s\n\n", title)
		if !with.Complete {
			w("> Not every run reached terminal in every trial with webhooks; see the JSON.\n\n")
		}
		w("| | without webhooks | with webhooks | with ÷ without |\n|---|---|---|---|\n")
		row := func(name string, a, b stat, prec int) {
			w("| %s | %s | %s | %s |\n", name, f(a, prec), f(b, prec), ratio(b, a))
		}
		row("runs/s to terminal", without.Throughput, with.Throughput, 1)
		row("fact → terminal p50 (ms)", without.LatP50, with.LatP50, 1)
		row("fact → terminal p99 (ms)", without.LatP99, with.LatP99, 1)
		row("create → terminal p50 (ms)", without.E2EP50, with.E2EP50, 0)
		row("create → terminal p99 (ms)", without.E2EP99, with.E2EP99, 0)
		row("finishProposed → Finalizing on the RunAttempt, p99 (ms)", without.FinalizeP99, with.FinalizeP99, 1)
		row("admission webhook calls per run (apiserver's count)", without.WebhookCalls, with.WebhookCalls, 2)
		row("controller writes per run, total", without.WritesPerRun, with.WritesPerRun, 2)
		row("apiserver writes/s, all clients", without.WritesPerSec, with.WritesPerSec, 0)
		row("controller CPU-seconds per 1,000 runs (webhook server included)", without.CPUPer1000, with.CPUPer1000, 2)
		row("controller peak RSS (MiB)", without.RSS, with.RSS, 0)
		row("apiserver CPU-seconds per 1,000 runs", without.APICPUPer1000, with.APICPUPer1000, 1)
		row(fmt.Sprintf("machine CPU busy during the workload (cores of %d)", r.Machine.CPUs), without.BusyCores, with.BusyCores, 2)
		w("\n")
	}
}

// liveView is the live workload's results, by M.
type liveView struct {
	sizes  []int
	byM    map[int][]liveStepResult
	trials int
	// largest is the largest M sustained in every trial that ran the
	// workload (0: none).
	largest int
	// ref is the step the per-run figures come from: the largest sustained
	// M, else the smallest M.
	ref              int
	writesPerRunPerS stat
	ceilingM         float64
	share            float64
}

func (r *report) liveView() *liveView {
	if len(r.Live) == 0 {
		return nil
	}
	v := &liveView{byM: map[int][]liveStepResult{}}
	best := map[int]int{} // trial → largest sustained M
	trials := map[int]bool{}
	for _, s := range r.Live {
		if v.byM[s.M] == nil {
			v.sizes = append(v.sizes, s.M)
		}
		v.byM[s.M] = append(v.byM[s.M], s)
		trials[s.Trial] = true
		if s.Sustained && s.M > best[s.Trial] {
			best[s.Trial] = s.M
		}
	}
	slices.Sort(v.sizes)
	v.trials = len(trials)
	v.largest = -1
	for t := range trials {
		if v.largest < 0 || best[t] < v.largest {
			v.largest = best[t]
		}
	}
	v.ref = v.largest
	if v.ref <= 0 {
		v.ref = v.sizes[0]
	}
	v.writesPerRunPerS = v.col(v.ref, func(s liveStepResult) float64 { return s.WritesPerRunPerS })
	if r.Ceiling != nil && r.Ceiling.AttemptStatusPerS.Median > 0 && v.writesPerRunPerS.Median > 0 {
		v.ceilingM = r.Ceiling.AttemptStatusPerS.Median / v.writesPerRunPerS.Median
		v.share = float64(max(v.largest, 0)) / v.ceilingM
	}
	return v
}

func (v *liveView) col(m int, f func(liveStepResult) float64) stat {
	var xs []float64
	for _, s := range v.byM[m] {
		xs = append(xs, f(s))
	}
	return statOf(xs)
}

// liveTables writes the live workload's per-step table, its capacity
// figures and its writes by request.
func (r *report) liveTables(w writer) {
	v := r.liveView()
	if v == nil {
		return
	}
	set := r.liveSet()
	wh := "without"
	if len(r.Live) > 0 && r.Live[0].Webhooks {
		wh = "with"
	}
	w("### Live runs: M alive at once, a model call every %s through agentrun-gateway (%s the admission webhooks)\n\n",
		liveOr(r, func(l *liveSettings) string { return l.Interval.String() }), wh)
	w("| | %s |\n|---|%s\n", strings.Join(mapInts(v.sizes, func(m int) string { return fmt.Sprintf("M = %d", m) }), " | "),
		strings.Repeat("---|", len(v.sizes)))
	row := func(name string, prec int, get func(liveStepResult) float64) {
		cells := mapInts(v.sizes, func(m int) string { return f(v.col(m, get), prec) })
		w("| %s | %s |\n", name, strings.Join(cells, " | "))
	}
	w("| sustained (trials) | %s |\n", strings.Join(mapInts(v.sizes, func(m int) string {
		n := 0
		for _, s := range v.byM[m] {
			if s.Sustained {
				n++
			}
		}
		return fmt.Sprintf("%d of %d", n, len(v.byM[m]))
	}), " | "))
	row("runs alive at the window's start", 0, func(s liveStepResult) float64 { return float64(s.Alive) })
	row("first create → all alive (s)", 1, func(s liveStepResult) float64 { return s.RampS })
	row("model calls/s through the gateway (window)", 0, func(s liveStepResult) float64 { return s.ModelCallsPerS })
	row("model call p50, via the gateway (ms)", 1, func(s liveStepResult) float64 { return s.ModelP50Ms })
	row("model call p99, via the gateway (ms)", 1, func(s liveStepResult) float64 { return s.ModelP99Ms })
	row("failed model calls (window)", 0, func(s liveStepResult) float64 { return float64(s.ModelErrors) })
	row("tool calls (window)", 0, func(s liveStepResult) float64 { return float64(s.ToolCalls) })
	row("apiserver stored writes/s, all clients", 1, func(s liveStepResult) float64 { return s.StoredWritesPerS })
	row("stored writes per live run per second", 3, func(s liveStepResult) float64 { return s.WritesPerRunPerS })
	row("apiserver CPU-ms per live run-minute", 1, func(s liveStepResult) float64 { return s.APICPUMsPerRunMin })
	row("etcd CPU-ms per live run-minute", 1, func(s liveStepResult) float64 { return s.EtcdCPUMsPerRunMin })
	row("operator CPU (cores) per 1,000 live runs", 2, func(s liveStepResult) float64 { return s.OperatorCoresPerK })
	row("operator RSS at the window's end (MiB)", 0, func(s liveStepResult) float64 { return s.OperatorRSSMiB })
	row("operator RSS growth per 1,000 live runs (MiB)", 0, func(s liveStepResult) float64 { return s.OperatorRSSPerK })
	row("gateway CPU (cores) per 1,000 live runs", 2, func(s liveStepResult) float64 { return s.GatewayCoresPerK })
	row("gateway RSS at the window's end (MiB)", 0, func(s liveStepResult) float64 { return s.GatewayRSSMiB })
	row("gateway RSS growth per 1,000 live runs (MiB)", 0, func(s liveStepResult) float64 { return s.GatewayRSSPerK })
	row(fmt.Sprintf("machine CPU busy in the window (cores of %d)", r.Machine.CPUs), 2, func(s liveStepResult) float64 { return s.MachineBusyCores })
	row("… of which kube-apiserver", 2, func(s liveStepResult) float64 { return s.APICores })
	row("… of which etcd", 2, func(s liveStepResult) float64 { return s.EtcdCores })
	row("… of which the operator", 2, func(s liveStepResult) float64 { return s.OperatorCores })
	row("… of which the gateway", 2, func(s liveStepResult) float64 { return s.GatewayCores })
	row("… of which the driver (agents, upstream, kubelet)", 2, func(s liveStepResult) float64 { return s.DriverCores })
	row("finishProposed → Finalizing p50 (ms)", 1, func(s liveStepResult) float64 { return s.FinalizeP50Ms })
	row("finishProposed → Finalizing p99 (ms)", 1, func(s liveStepResult) float64 { return s.FinalizeP99Ms })
	row("pod Succeeded → Terminated p50 (ms)", 1, func(s liveStepResult) float64 { return s.TerminalP50Ms })
	row("pod Succeeded → Terminated p99 (ms)", 1, func(s liveStepResult) float64 { return s.TerminalP99Ms })
	w("\n")
	for _, m := range v.sizes {
		for _, s := range v.byM[m] {
			if s.FailReason != "" {
				w("- M = %d, trial %d not sustained: %s.\n", m, s.Trial, s.FailReason)
			}
			if s.Error != "" {
				w("- M = %d, trial %d: %s\n", m, s.Trial, strings.ReplaceAll(s.Error, "\n", " "))
			}
		}
	}
	if v.largest > 0 {
		w("\n**Largest M sustained: %d** (terminal-fact → phase p99 under %s in every trial). ", v.largest, set.P99Limit)
	} else {
		w("\n**No M sustained** (the smallest step, M = %d, failed). ", v.sizes[0])
	}
	if v.ceilingM > 0 {
		w("Ceiling-bound M = RunAttempt status patches/s of the ceiling workload (%s) ÷ stored writes per live run per second (%s at M = %d) = **%.0f**; the largest M sustained is **%.0f%%** of it.\n\n",
			f(r.Ceiling.AttemptStatusPerS, 0), f(v.writesPerRunPerS, 3), v.ref, v.ceilingM, 100*v.share)
	} else {
		w("(No ceiling measured in this run: no ceiling-bound M.)\n\n")
	}

	// Writes by request at the reference step.
	keys := map[string]bool{}
	for _, s := range v.byM[v.ref] {
		for k := range s.WritesPerRunMin {
			keys[k] = true
		}
	}
	med := map[string]float64{}
	for k := range keys {
		med[k] = v.col(v.ref, func(s liveStepResult) float64 { return s.WritesPerRunMin[k] }).Median
	}
	w("Write requests per live run-minute by request, all clients, in the window (M = %d); * stores nothing (reviews, token requests); leases include the API server's own identity Lease (about 6 writes a minute in all) beside the gateway's liveness Lease:\n\n", v.ref)
	w("| request | per live run-minute | of which the driver (kubelet, agents' tokens) |\n|---|---|---|\n")
	for _, k := range writeKeysSorted(med) {
		mark := ""
		if isNotStored(k) {
			mark = " *"
		}
		w("| `%s`%s | %s | %s |\n", k, mark, f(v.col(v.ref, func(s liveStepResult) float64 { return s.WritesPerRunMin[k] }), 2),
			f(v.col(v.ref, func(s liveStepResult) float64 { return s.DriverPerRunMin[k] }), 2))
	}
	w("\n")
}

// isNotStored is notStored for a request's rendered key ("VERB resource.group/sub").
func isNotStored(key string) bool {
	_, res, _ := strings.Cut(key, " ")
	res, sub, _ := strings.Cut(res, "/")
	name, group, _ := strings.Cut(res, ".")
	return notStored(reqKey{Resource: name, Group: group, Subresource: sub})
}

func mapInts(xs []int, f func(int) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// targetRows writes the Targets table's rows: the design's, and issue 14's.
func (r *report) targetRows(w writer, get func(wlSummary, string) *sysSummary) {
	for _, ws := range r.Summary {
		base, wh := strings.CutSuffix(ws.Workload, webhookSuffix)
		if strings.HasPrefix(base, "serial-") {
			a := get(ws, sysAgentrun)
			if a.LatP99.N == 0 {
				continue
			}
			if wh {
				w("| idle: fact → terminal p99 under 100 ms with the admission webhooks installed (issue 14) | %s: %.1f ms, one run at a time (worst trial %.1f ms) |\n",
					verdict(a.LatP99.Median < 100), a.LatP99.Median, a.LatP99.Max)
			} else {
				w("| design (brief §9): fact → phase decision p99 under 100 ms on an idle control plane | %s: %.1f ms, one run at a time (worst trial %.1f ms) |\n",
					verdict(a.LatP99.Median < 100), a.LatP99.Median, a.LatP99.Max)
			}
			continue
		}
		if !strings.HasPrefix(base, "burst-") || wh {
			continue
		}
		j, a := get(ws, sysJob), get(ws, sysAgentrun)
		n := strings.TrimPrefix(base, "burst-")
		if j.Throughput.N > 0 && a.Throughput.N > 0 {
			x := a.Throughput.Median / j.Throughput.Median
			stretch := ""
			if x >= 1.5 {
				stretch = "; stretch 1.5× met"
			}
			w("| burst N = %s: agentrun runs/s ≥ 1.0× the Job controller's (stretch 1.5×) | %s: %.1f vs %.1f runs/s (%.2f×%s) |\n", n, verdict(x >= 1),
				a.Throughput.Median, j.Throughput.Median, x, stretch)
		}
		if n == "200" && a.LatP99.N > 0 && j.LatP99.N > 0 {
			w("| burst N = 200: fact → terminal p99 no worse than the Job controller's | %s: %.1f vs %.1f ms |\n",
				verdict(a.LatP99.Median <= j.LatP99.Median), a.LatP99.Median, j.LatP99.Median)
		}
		if j.WritesPerRun.N > 0 && a.WritesPerRun.N > 0 {
			w("| burst N = %s: controller writes per run, events included, ≤ the Job controller's | %s: %.2f vs %.2f (events %.2f vs %.2f) |\n", n,
				verdict(a.WritesPerRun.Median <= j.WritesPerRun.Median), a.WritesPerRun.Median, j.WritesPerRun.Median, a.Events.Median, j.Events.Median)
		}
		if j.APICPUPer1000.N > 0 && a.APICPUPer1000.N > 0 && j.APICPUPer1000.Median > 0 {
			x := a.APICPUPer1000.Median / j.APICPUPer1000.Median
			w("| burst N = %s: apiserver CPU per run ≤ 1.5× the Job controller's | %s: %.1f vs %.1f ms per run (%.2f×) |\n", n,
				verdict(x <= 1.5), a.APICPUPer1000.Median, j.APICPUPer1000.Median, x)
		}
	}
	v := r.liveView()
	if v == nil {
		return
	}
	steps := mapInts(v.sizes, func(m int) string {
		ok := len(v.byM[m]) > 0
		for _, s := range v.byM[m] {
			ok = ok && s.Sustained
		}
		return fmt.Sprintf("%d %s", m, map[bool]string{true: "sustained", false: "not"}[ok])
	})
	w("| live runs: ≥ 1,000 alive at once with terminal-fact → phase p99 under 1 s | %s: largest M sustained %d (steps: %s) |\n",
		verdict(v.largest >= 1000), max(v.largest, 0), strings.Join(steps, ", "))
	if v.ceilingM > 0 {
		w("| live runs: the largest M sustained ≥ 50%% of the ceiling-bound figure | %s: %d of %.0f (%.0f%%; %.3f stored writes per live run per s) |\n",
			verdict(v.share >= 0.5), max(v.largest, 0), v.ceilingM, 100*v.share, v.writesPerRunPerS.Median)
	}
}

// liveShort is the live workload's line in the short summary.
func (r *report) liveShort() string {
	v := r.liveView()
	if v == nil {
		return ""
	}
	var b strings.Builder
	for _, m := range v.sizes {
		p99 := v.col(m, func(s liveStepResult) float64 { return max(s.FinalizeP99Ms, s.TerminalP99Ms) })
		fmt.Fprintf(&b, "live M=%d: %s stored writes per run per s, apiserver %s CPU-ms per run-minute, operator %s and gateway %s cores per 1000, worst fact p99 %s ms\n",
			m, f(v.col(m, func(s liveStepResult) float64 { return s.WritesPerRunPerS }), 3),
			f(v.col(m, func(s liveStepResult) float64 { return s.APICPUMsPerRunMin }), 1),
			f(v.col(m, func(s liveStepResult) float64 { return s.OperatorCoresPerK }), 2),
			f(v.col(m, func(s liveStepResult) float64 { return s.GatewayCoresPerK }), 2), f(p99, 0))
	}
	fmt.Fprintf(&b, "live: largest M sustained %d; ceiling-bound M %.0f\n", max(v.largest, 0), v.ceilingM)
	return b.String()
}
