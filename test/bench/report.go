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

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

type machine struct {
	CPUs          int    `json:"cpus"`
	CPUModel      string `json:"cpuModel"`
	MemoryGiB     string `json:"memoryGiB"`
	OS            string `json:"os"`
	Kernel        string `json:"kernel"`
	Go            string `json:"go"`
	KubeAPIServer string `json:"kubeAPIServer"`
	KCM           string `json:"kubeControllerManager"`
	Etcd          string `json:"etcd"`
	LoadAtStart   string `json:"loadAverageAtStart"`
}

type settings struct {
	Peer             peerConfig `json:"peers"`
	DriverWorkers    int        `json:"driverWorkers"`
	Creators         int        `json:"creators"`
	Warmup           int        `json:"warmupRuns"`
	Trials           int        `json:"trials"`
	HeavyTrials      int        `json:"heavyTrials,omitempty"`
	Workloads        []workload `json:"workloads"`
	ExpectedMinutes  float64    `json:"expectedMinutes,omitempty"`
	CeilingWorkers   int        `json:"ceilingWorkers"`
	CeilingDurationS float64    `json:"ceilingDurationSeconds"`
}

type report struct {
	Started      time.Time        `json:"started"`
	TotalSeconds float64          `json:"totalSeconds"`
	BuildSeconds float64          `json:"buildSeconds"`
	Command      string           `json:"command"`
	Source       string           `json:"source"`
	Machine      machine          `json:"machine"`
	Settings     settings         `json:"settings"`
	Trials       []trialResult    `json:"trials"`
	Ceilings     []ceilingResult  `json:"ceilings"`
	Live         []liveStepResult `json:"live,omitempty"`
	Failures     []string         `json:"failures,omitempty"`
	Summary      []wlSummary      `json:"summary"`
	Ceiling      *ceilSummary     `json:"ceilingSummary,omitempty"`
}

// stat is the median and the spread (min, max) over trials.
type stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func statOf(xs []float64) stat {
	if len(xs) == 0 {
		return stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

type sysSummary struct {
	System        string          `json:"system"`
	Complete      bool            `json:"allRunsTerminal"`
	Throughput    stat            `json:"runsPerSecond"`
	LatP50        stat            `json:"factToTerminalP50Ms"`
	LatP99        stat            `json:"factToTerminalP99Ms"`
	E2EP50        stat            `json:"createToTerminalP50Ms"`
	E2EP99        stat            `json:"createToTerminalP99Ms"`
	FinalizeP99   stat            `json:"finishToFinalizingP99Ms"`
	OperatorP99   stat            `json:"operatorFactToDecisionP99Ms"`
	WritesPerRun  stat            `json:"controllerWritesPerRun"`
	NonEvent      stat            `json:"controllerWritesPerRunWithoutEvents"`
	Events        stat            `json:"controllerEventWritesPerRun"`
	DriverPerRun  stat            `json:"driverWritesPerRun"`
	WritesPerSec  stat            `json:"apiserverWritesPerSecond"`
	CPUPer1000    stat            `json:"controllerCPUSecondsPer1000Runs"`
	RSS           stat            `json:"controllerPeakRSSMiB"`
	APICPUPer1000 stat            `json:"apiserverCPUSecondsPer1000Runs"`
	EtcdCPU       stat            `json:"etcdCPUSecondsPer1000Runs"`
	EtcdWAL       stat            `json:"etcdWALBytesPerRun"`
	EtcdDisk      stat            `json:"etcdDiskWriteBytesPerRun"`
	BusyCores     stat            `json:"machineBusyCores"`
	APICores      stat            `json:"apiserverCores"`
	EtcdCores     stat            `json:"etcdCores"`
	PeerCores     stat            `json:"controllerCores"`
	DriverCores   stat            `json:"driverCores"`
	OtherCores    stat            `json:"otherProcessesCores"`
	ReadsPerRun   stat            `json:"apiserverReadsPerRun"`
	Conflicts     stat            `json:"conflictsPerRun"`
	WebhookCalls  stat            `json:"admissionWebhookCallsPerRun"`
	Reconciles    map[string]stat `json:"reconcilesPerRun,omitempty"`
	ReconcileMs   map[string]stat `json:"reconcileMeanMs,omitempty"`
	QueueWaitMs   map[string]stat `json:"queueWaitMeanMs,omitempty"`
	Sustained     stat            `json:"sustainedRate"`
	ByKey         map[string]stat `json:"controllerWritesPerRunByRequest"`
	ObjectBytes   map[string]stat `json:"objectBytes"`
	Steps         []stepSummary   `json:"steps,omitempty"`
}

type stepSummary struct {
	Rate          int  `json:"rate"`
	Trials        int  `json:"trials"`
	GrewIn        int  `json:"grewInTrials"`
	CompletedPerS stat `json:"completedPerSecondSecondHalf"`
	BacklogEnd    stat `json:"backlogEnd"`
	Slope         stat `json:"backlogSlopePerSecond"`
	LatP99        stat `json:"factToTerminalP99Ms"`
	E2EP99        stat `json:"createToTerminalP99Ms"`
}

type wlSummary struct {
	Workload string                 `json:"workload"`
	Systems  map[string]*sysSummary `json:"systems"`
}

type ceilSummary struct {
	PodStatusPerS     stat `json:"podStatusPatchesPerSecond"`
	AttemptStatusPerS stat `json:"runAttemptStatusPatchesPerSecond"`
	RunStatusPerS     stat `json:"researchRunStatusPatchesPerSecond"`
	PodCPUPerK        stat `json:"podApiserverCPUSecondsPer1000Patches"`
	AttemptCPUPerK    stat `json:"runAttemptApiserverCPUSecondsPer1000Patches"`
	RunCPUPerK        stat `json:"researchRunApiserverCPUSecondsPer1000Patches"`
}

func (r *report) summarize() {
	r.Summary = nil
	var order []string
	by := map[string]map[string][]trialResult{}
	for _, t := range r.Trials {
		if by[t.Workload] == nil {
			by[t.Workload] = map[string][]trialResult{}
			order = append(order, t.Workload)
		}
		by[t.Workload][t.System] = append(by[t.Workload][t.System], t)
	}
	for _, wl := range order {
		ws := wlSummary{Workload: wl, Systems: map[string]*sysSummary{}}
		for sys, ts := range by[wl] {
			s := &sysSummary{System: sys, Complete: true, ByKey: map[string]stat{}, ObjectBytes: map[string]stat{}}
			col := func(f func(trialResult) float64) stat {
				var xs []float64
				for _, t := range ts {
					xs = append(xs, f(t))
				}
				return statOf(xs)
			}
			for _, t := range ts {
				if t.Terminal != t.N || t.TimedOut {
					s.Complete = false
				}
			}
			s.Throughput = col(func(t trialResult) float64 { return t.Throughput })
			s.LatP50 = col(func(t trialResult) float64 { return t.LatencyP50Ms })
			s.LatP99 = col(func(t trialResult) float64 { return t.LatencyP99Ms })
			s.E2EP50 = col(func(t trialResult) float64 { return t.E2EP50Ms })
			s.E2EP99 = col(func(t trialResult) float64 { return t.E2EP99Ms })
			s.FinalizeP99 = col(func(t trialResult) float64 { return t.FinalizeP99Ms })
			s.OperatorP99 = col(func(t trialResult) float64 { return t.OperatorFactP99Ms })
			s.WritesPerRun = col(func(t trialResult) float64 { return t.ControllerPerRun })
			s.NonEvent = col(func(t trialResult) float64 { return t.NonEventPerRun })
			s.Events = col(func(t trialResult) float64 { return t.EventsPerRun })
			s.DriverPerRun = col(func(t trialResult) float64 { return t.DriverPerRun })
			s.WritesPerSec = col(func(t trialResult) float64 { return t.TotalWritesPerSec })
			s.CPUPer1000 = col(func(t trialResult) float64 { return t.PeerCPUPer1000 })
			s.RSS = col(func(t trialResult) float64 { return t.PeerPeakRSSMiB })
			s.APICPUPer1000 = col(func(t trialResult) float64 { return t.APICPUPer1000 })
			s.EtcdCPU = col(func(t trialResult) float64 { return t.EtcdCPUPer1000 })
			s.EtcdWAL = col(func(t trialResult) float64 { return t.EtcdWALBytesRun })
			s.EtcdDisk = col(func(t trialResult) float64 { return t.EtcdDiskBytesRun })
			s.Sustained = col(func(t trialResult) float64 { return float64(t.SustainedRate) })
			s.BusyCores = col(func(t trialResult) float64 { return t.MachineBusyCores })
			s.APICores = col(func(t trialResult) float64 { return t.APICores })
			s.EtcdCores = col(func(t trialResult) float64 { return t.EtcdCores })
			s.PeerCores = col(func(t trialResult) float64 { return t.PeerCores })
			s.DriverCores = col(func(t trialResult) float64 { return t.DriverCores })
			s.OtherCores = col(func(t trialResult) float64 { return t.OtherCores })
			s.WebhookCalls = col(func(t trialResult) float64 { return t.WebhookCallsPerRun })
			s.Conflicts = col(func(t trialResult) float64 {
				sum := 0.0
				for _, v := range t.ConflictsPerRun {
					sum += v
				}
				return sum
			})
			s.Reconciles, s.ReconcileMs, s.QueueWaitMs = map[string]stat{}, map[string]stat{}, map[string]stat{}
			for _, c := range []string{"researchrun", "session"} {
				if ts[0].ReconcilesPerRun[c] == 0 {
					continue
				}
				s.Reconciles[c] = col(func(t trialResult) float64 { return t.ReconcilesPerRun[c] })
				s.ReconcileMs[c] = col(func(t trialResult) float64 { return t.ReconcileMeanMs[c] })
				s.QueueWaitMs[c] = col(func(t trialResult) float64 { return t.QueueWaitMeanMs[c] })
			}
			s.ReadsPerRun = col(func(t trialResult) float64 {
				sum := 0.0
				for _, v := range t.APIReadsPerRun {
					sum += v
				}
				return sum
			})
			keys := map[string]bool{}
			for _, t := range ts {
				for k := range t.ControllerWrites {
					keys[k] = true
				}
			}
			for k := range keys {
				s.ByKey[k] = col(func(t trialResult) float64 { return t.ControllerWrites[k] / float64(max(t.Terminal, 1)) })
			}
			kinds := map[string]bool{}
			for _, t := range ts {
				for k := range t.ObjectBytes {
					kinds[k] = true
				}
			}
			for k := range kinds {
				s.ObjectBytes[k] = col(func(t trialResult) float64 { return t.ObjectBytes[k] })
			}
			rates := map[int][]stepResult{}
			var rateOrder []int
			for _, t := range ts {
				for _, st := range t.Steps {
					if rates[st.Rate] == nil {
						rateOrder = append(rateOrder, st.Rate)
					}
					rates[st.Rate] = append(rates[st.Rate], st)
				}
			}
			slices.Sort(rateOrder)
			for _, rate := range rateOrder {
				sts := rates[rate]
				c := func(f func(stepResult) float64) stat {
					var xs []float64
					for _, st := range sts {
						xs = append(xs, f(st))
					}
					return statOf(xs)
				}
				ss := stepSummary{Rate: rate, Trials: len(sts)}
				for _, st := range sts {
					if st.Grew {
						ss.GrewIn++
					}
				}
				ss.CompletedPerS = c(func(s stepResult) float64 { return s.CompletedPerS })
				ss.BacklogEnd = c(func(s stepResult) float64 { return float64(s.BacklogEnd) })
				ss.Slope = c(func(s stepResult) float64 { return s.BacklogSlope })
				ss.LatP99 = c(func(s stepResult) float64 { return s.LatencyP99Ms })
				ss.E2EP99 = c(func(s stepResult) float64 { return s.E2EP99Ms })
				s.Steps = append(s.Steps, ss)
			}
			ws.Systems[sys] = s
		}
		r.Summary = append(r.Summary, ws)
	}
	if len(r.Ceilings) > 0 {
		var pods, atts, runs, podCPU, attCPU, runCPU []float64
		for _, c := range r.Ceilings {
			pods = append(pods, c.PodStatusPerS)
			atts = append(atts, c.AttemptStatusPerS)
			runs = append(runs, c.RunStatusPerS)
			podCPU = append(podCPU, c.PodAPICPUPerK)
			attCPU = append(attCPU, c.AttemptAPICPUPerK)
			runCPU = append(runCPU, c.RunAPICPUPerK)
		}
		r.Ceiling = &ceilSummary{
			PodStatusPerS: statOf(pods), AttemptStatusPerS: statOf(atts), RunStatusPerS: statOf(runs),
			PodCPUPerK: statOf(podCPU), AttemptCPUPerK: statOf(attCPU), RunCPUPerK: statOf(runCPU),
		}
	}
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// f formats a stat as "median [min–max]" with the given precision.
func f(s stat, prec int) string {
	if s.N == 0 {
		return "–"
	}
	m, lo, hi := strconvF(s.Median, prec), strconvF(s.Min, prec), strconvF(s.Max, prec)
	if s.N == 1 || lo == hi {
		return m
	}
	return fmt.Sprintf("%s [%s–%s]", m, lo, hi)
}

func strconvF(v float64, prec int) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func ratio(a, b stat) string {
	if a.N == 0 || b.N == 0 || b.Median == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a.Median/b.Median)
}

const analysisBegin = "<!-- analysis:begin -->"
const analysisEnd = "<!-- analysis:end -->"

// existingAnalysis keeps the hand-written analysis of a previous report.
func existingAnalysis(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	i, j := strings.Index(s, analysisBegin), strings.Index(s, analysisEnd)
	if i < 0 || j < i {
		return ""
	}
	return strings.TrimSpace(s[i+len(analysisBegin) : j])
}

var sysTitle = map[string]string{sysJob: "Job controller", sysAgentrun: "agentrun"}

func (r *report) markdown(analysis string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks: agentrun and the Kubernetes Job controller\n\n")
	w("<!-- Generated by `make bench` (test/bench). Everything outside the analysis markers is rewritten on every run. -->\n\n")
	w("The benchmark runs the agentrun operator and, as its peer, the Kubernetes Job controller " +
		"(`kube-controller-manager --controllers=job`) one after the other, each on a fresh local control plane " +
		"(the envtest toolchain's etcd and kube-apiserver, built from source), never at the same time. " +
		"Both get the same client QPS and burst and the same number of concurrent syncs, and both run as separate processes " +
		"with a system:masters kubeconfig. One driver (test/bench) plays kubelet and agent for both, from watches, with a bounded worker pool:\n\n")
	w("- **Job**: one single-pod Job per run (`completions: 1`). The driver marks the pod Running, then Succeeded with a terminated container (exit 0), as a kubelet would. Terminal = condition `Complete` seen on a watch.\n")
	w("- **agentrun**: one ResearchRun per run, each in its own Session (the Sessions and one RuntimePolicy are created before the clock starts). The driver marks the attempt pod Running, writes the RunAttempt facts an agent writes (3 steps, usage, `finishProposed`), waits for `Finalizing` on the RunAttempt, writes the settled publication (`Complete`), then marks the pod Succeeded. Terminal = `status.phase: Terminated` seen on a watch.\n\n")
	w("Workloads: **serial**, one run at a time on an otherwise idle plane (the next is created when the previous is terminal); **burst**, N runs created at once; **stepped**, runs offered at rising rates for a fixed window each, stopping after the first step whose backlog grew (by more than a tenth of the rate per second over the second half of the window, or creation fell more than 1 s behind); then the backlog drains. ")
	w("Admission webhooks are not installed for either peer in these (the manager runs with `ENABLE_WEBHOOKS=false`); the workloads marked *with webhooks* rerun agentrun as a real install has it: config/webhook's Validating and MutatingWebhookConfigurations installed with a serving certificate the benchmark generates (envtest's, with its caBundle) and config/webhook's kustomize patches (internal/devstack/webhookpatch), the manager serving them, and config/admission-policy's ValidatingAdmissionPolicies in force (the benchmark waits until the API server refuses a RunAttempt create by an identity other than the operator's; the manager runs as the operator's service account, the RunAttempt facts are written as agentrun-gateway's). ")
	w("**live**: M runs alive at once (each in its own Session), each agent making one model call every %s through a real agentrun-gateway process (cmd/gateway, plain HTTP on loopback, its own identity, TokenReview of each pod-bound token) to a fake upstream (internal/upstream, %s fixed latency) in the driver, one step report per call and %d agent-dispatched tool calls (`http.get`, admitted and reported through the gateway's agent API) per run, for a %s window once all M are alive; runs are created at %d/s, and after the window each run finishes through the gateway at %d/s (finish → Finalizing on the RunAttempt → settle → pod Succeeded). M steps up on a fresh plane each, stopping after the first step not sustained (every run alive and terminal, finishProposed → Finalizing and pod Succeeded → Terminated p99 both under %s, under 1%% model-call errors).\n\n",
		liveOr(r, func(l *liveSettings) string { return l.Interval.String() }), liveOr(r, func(l *liveSettings) string { return l.UpstreamLatency.String() }),
		liveOrInt(r, func(l *liveSettings) int { return l.ToolCalls }), liveOr(r, func(l *liveSettings) string { return l.Window.String() }),
		liveOrInt(r, func(l *liveSettings) int { return l.Rate }), liveOrInt(r, func(l *liveSettings) int { return l.Rate }),
		liveOr(r, func(l *liveSettings) string { return l.P99Limit.String() }))
	w("Figures:\n\n")
	w("- **runs/s**: runs driven to terminal per second, from the first create to the last terminal status seen.\n")
	w("- **fact → terminal**: from the driver sending the terminal fact (the pod's Succeeded status, the last fact either system needs) to the terminal status arriving on the driver's watch.\n")
	w("- **create → terminal**: from the create request (or, in the stepped workload, the scheduled arrival) to the terminal status on the watch.\n")
	w("- **controller writes per run**: the difference of the apiserver's `apiserver_request_total` (verbs POST, PUT, PATCH, DELETE) before and after the workload, minus the driver's own writes, which it counts per resource and verb; the apiserver's lease heartbeats are left out. Events are shown apart.\n")
	w("- **CPU, RSS**: the controller process's utime+stime (`/proc/<pid>/stat`) over the workload, per 1,000 runs, and its peak RSS (`VmHWM`); the apiserver's and etcd's CPU the same way. **etcd WAL bytes**: `etcd_disk_wal_write_bytes_total`; **etcd disk bytes**: `write_bytes` of `/proc/<etcd>/io`.\n")
	w("- **ceiling**: status patches per second that a plain client (%d concurrent requests, no rate limit) gets from the same stack, for pod, RunAttempt and ResearchRun status, on a fresh plane with no controller, and the apiserver CPU each costs.\n",
		r.Settings.CeilingWorkers)
	w("- **agentrun rows**: reconciles, reconcile time and work-queue wait come from the operator's own metrics endpoint.\n")
	w("- **live runs**: figures over the window, when all M runs are alive: *stored writes* are the apiserver's write requests (all clients) less those that store nothing (TokenReviews, access reviews, token requests), per second and per live run per second; *per live run-minute* divides by M × the window in minutes; operator and gateway CPU is cores (CPU-seconds per second) per 1,000 live runs, their RSS is `VmRSS` at the window's end and its growth over the idle plane's, per 1,000 live runs. *Terminal-fact → phase* is finishProposed (the gateway's answer to the finish) → Finalizing on the RunAttempt, and pod Succeeded → Terminated on the ResearchRun, in the finish phase. **Ceiling-bound M** = RunAttempt status patches/s of the ceiling workload ÷ stored writes per live run per second: the live runs the stack's own write ceiling would carry.\n\n")
	w("`-profile-dir DIR` adds CPU profiles of the apiserver and the operator for each workload; `-trace N` writes the watch timeline of the first N runs of each workload; `go run ./test/bench -h` lists every option.\n\n")
	w("Each figure is the median over trials, with the spread `[min–max]`. Each trial starts a fresh control plane per system and workload, runs %d unmeasured warm-up runs, waits until the watches are quiet, then measures.\n\n", r.Settings.Warmup)

	w("## Machine and settings\n\n")
	w("| | |\n|---|---|\n")
	m := r.Machine
	w("| CPU | %d × %s |\n", m.CPUs, m.CPUModel)
	w("| Memory | %s GiB |\n", m.MemoryGiB)
	w("| OS | %s, Linux %s |\n", m.OS, m.Kernel)
	w("| Go | %s |\n", m.Go)
	w("| Kubernetes | kube-apiserver %s, kube-controller-manager %s; etcd %s |\n", m.KubeAPIServer, m.KCM, m.Etcd)
	w("| Load average at start | %s |\n", m.LoadAtStart)
	w("| Started | %s |\n", r.Started.UTC().Format(time.RFC3339))
	w("| Duration | %.1f min (operator build %.0f s) |\n", r.TotalSeconds/60, r.BuildSeconds)
	w("| Peers | %d concurrent syncs (`--run-workers` / `--concurrent-job-syncs`), client QPS %g, burst %d (`--kube-api-qps`, `--kube-api-burst`) for both |\n",
		r.Settings.Peer.Workers, r.Settings.Peer.QPS, r.Settings.Peer.Burst)
	w("| Driver | %d workers, %d concurrent creates, no client-side rate limit |\n", r.Settings.DriverWorkers, r.Settings.Creators)
	w("| Trials | %d |\n", r.Settings.Trials)
	w("| Operator source | %s |\n", r.Source)
	w("| Command | `%s` (`make bench`) |\n\n", r.Command)

	var sysOrder = []string{sysJob, sysAgentrun}
	get := func(ws wlSummary, sys string) *sysSummary {
		if s := ws.Systems[sys]; s != nil {
			return s
		}
		return &sysSummary{}
	}
	w("## Results\n\n")
	for _, ws := range r.Summary {
		if strings.HasSuffix(ws.Workload, webhookSuffix) {
			continue // in the webhooks section below
		}
		j, a := get(ws, sysJob), get(ws, sysAgentrun)
		title := ws.Workload
		if n, ok := strings.CutPrefix(title, "burst-"); ok {
			title = "Burst of N = " + n + " single-pod runs"
		} else if n, ok := strings.CutPrefix(title, "serial-"); ok {
			title = "One run at a time on an idle plane (" + n + " runs)"
		} else {
			title = "Stepped arrival rate (whole workload)"
		}
		w("### %s\n\n", title)
		if (j.Throughput.N > 0 && !j.Complete) || (a.Throughput.N > 0 && !a.Complete) {
			w("> Not every run reached terminal in every trial (Job complete: %v, agentrun complete: %v); see the JSON.\n\n", j.Complete, a.Complete)
		}
		w("| | Job controller | agentrun | agentrun ÷ Job |\n|---|---|---|---|\n")
		row := func(name string, js, as stat, prec int) {
			w("| %s | %s | %s | %s |\n", name, f(js, prec), f(as, prec), ratio(as, js))
		}
		if ws.Workload == "stepped" {
			row("highest rate without a growing backlog (runs/s)", j.Sustained, a.Sustained, 0)
		}
		row("runs/s to terminal", j.Throughput, a.Throughput, 1)
		row("fact → terminal p50 (ms)", j.LatP50, a.LatP50, 1)
		row("fact → terminal p99 (ms)", j.LatP99, a.LatP99, 1)
		row("create → terminal p50 (ms)", j.E2EP50, a.E2EP50, 0)
		row("create → terminal p99 (ms)", j.E2EP99, a.E2EP99, 0)
		row("controller writes per run, without events", j.NonEvent, a.NonEvent, 2)
		row("controller event writes per run", j.Events, a.Events, 2)
		row("controller writes per run, total", j.WritesPerRun, a.WritesPerRun, 2)
		row("driver (kubelet + agent) writes per run", j.DriverPerRun, a.DriverPerRun, 2)
		row("apiserver writes/s, all clients", j.WritesPerSec, a.WritesPerSec, 0)
		row("controller CPU-seconds per 1,000 runs", j.CPUPer1000, a.CPUPer1000, 2)
		row("controller peak RSS (MiB)", j.RSS, a.RSS, 0)
		row("apiserver CPU-seconds per 1,000 runs", j.APICPUPer1000, a.APICPUPer1000, 1)
		row("etcd CPU-seconds per 1,000 runs", j.EtcdCPU, a.EtcdCPU, 1)
		row("etcd WAL bytes per run", j.EtcdWAL, a.EtcdWAL, 0)
		row("etcd disk write bytes per run", j.EtcdDisk, a.EtcdDisk, 0)
		row("apiserver reads (GET, LIST) per run, all clients", j.ReadsPerRun, a.ReadsPerRun, 2)
		row("writes answered 409 Conflict per run, all clients", j.Conflicts, a.Conflicts, 2)
		row(fmt.Sprintf("machine CPU busy during the workload (cores of %d)", r.Machine.CPUs), j.BusyCores, a.BusyCores, 2)
		row("… of which kube-apiserver", j.APICores, a.APICores, 2)
		row("… of which etcd", j.EtcdCores, a.EtcdCores, 2)
		row("… of which the controller", j.PeerCores, a.PeerCores, 2)
		row("… of which the driver", j.DriverCores, a.DriverCores, 2)
		row("… of which other processes on the machine", j.OtherCores, a.OtherCores, 2)
		if a.FinalizeP99.N > 0 {
			w("| agentrun: finishProposed → Finalizing on the RunAttempt, p99 (ms) | | %s | |\n", f(a.FinalizeP99, 1))
		}
		for _, c := range []string{"researchrun", "session"} {
			if st, ok := a.Reconciles[c]; ok {
				w("| agentrun: %s reconciles per run; mean reconcile; mean wait in the work queue (ms) | | %s; %s ms; %s ms | |\n", c,
					f(st, 1), f(a.ReconcileMs[c], 1), f(a.QueueWaitMs[c], 0))
			}
		}
		if a.OperatorP99.N > 0 && a.OperatorP99.Median > 0 {
			w("| agentrun: operator's own `agentrun_fact_to_decision_seconds` p99 (ms, from buckets) | | %s | |\n", f(a.OperatorP99, 1))
		}
		if r.Ceiling != nil && r.Ceiling.PodStatusPerS.Median > 0 {
			share := func(s *sysSummary) string {
				if s.WritesPerSec.N == 0 {
					return "–"
				}
				return fmt.Sprintf("%.0f%%", 100*s.WritesPerSec.Median/r.Ceiling.PodStatusPerS.Median)
			}
			w("| apiserver writes/s as a share of the pod-status ceiling | %s | %s | |\n", share(j), share(a))
		}
		w("\n")
		if ws.Workload == "stepped" {
			for _, sys := range sysOrder {
				s := ws.Systems[sys]
				if s == nil || len(s.Steps) == 0 {
					continue
				}
				w("%s, per step (window %s):\n\n", sysTitle[sys], stepWindow(r.Settings.Workloads))
				w("| offered runs/s | trials | completed/s (2nd half) | backlog at end | backlog slope (runs/s) | fact → terminal p99 (ms) | create → terminal p99 (ms) | backlog grew in |\n|---|---|---|---|---|---|---|---|\n")
				for _, st := range s.Steps {
					w("| %d | %d | %s | %s | %s | %s | %s | %d of %d |\n", st.Rate, st.Trials, f(st.CompletedPerS, 1), f(st.BacklogEnd, 0),
						f(st.Slope, 1), f(st.LatP99, 0), f(st.E2EP99, 0), st.GrewIn, st.Trials)
				}
				w("\n")
			}
		}
	}
	r.webhookTables(w)
	r.liveTables(w)
	if r.Ceiling != nil {
		w("### Ceiling of the stack (plain client, no controller)\n\n")
		w("| | status patches/s | apiserver CPU-seconds per 1,000 patches |\n|---|---|---|\n")
		w("| pod status (strategic merge patch) | %s | %s |\n", f(r.Ceiling.PodStatusPerS, 0), f(r.Ceiling.PodCPUPerK, 2))
		w("| RunAttempt status (merge patch) | %s | %s |\n", f(r.Ceiling.AttemptStatusPerS, 0), f(r.Ceiling.AttemptCPUPerK, 2))
		w("| ResearchRun status (merge patch; CEL transition rules) | %s | %s |\n\n", f(r.Ceiling.RunStatusPerS, 0), f(r.Ceiling.RunCPUPerK, 2))
	}

	// Writes by request for the largest burst.
	var big *wlSummary
	for i := range r.Summary {
		if strings.HasPrefix(r.Summary[i].Workload, "burst-") && !strings.HasSuffix(r.Summary[i].Workload, webhookSuffix) {
			big = &r.Summary[i]
		}
	}
	if big != nil {
		w("### Controller writes per run by request (%s)\n\n", strings.Replace(big.Workload, "burst-", "burst, N = ", 1))
		w("| system | request | writes per run |\n|---|---|---|\n")
		for _, sys := range sysOrder {
			s := big.Systems[sys]
			if s == nil {
				continue
			}
			m := map[string]float64{}
			for k, v := range s.ByKey {
				m[k] = v.Median
			}
			for _, k := range writeKeysSorted(m) {
				if m[k] < 0.005 {
					continue
				}
				w("| %s | `%s` | %s |\n", sysTitle[sys], k, f(s.ByKey[k], 2))
			}
		}
		w("\n")
		w("Mean size of the objects at the end (JSON, managedFields included), bytes:\n\n| system | kind | bytes |\n|---|---|---|\n")
		for _, sys := range sysOrder {
			s := big.Systems[sys]
			if s == nil {
				continue
			}
			kinds := make([]string, 0, len(s.ObjectBytes))
			for k := range s.ObjectBytes {
				kinds = append(kinds, k)
			}
			slices.Sort(kinds)
			for _, k := range kinds {
				w("| %s | %s | %s |\n", sysTitle[sys], k, f(s.ObjectBytes[k], 0))
			}
		}
		w("\n")
	}

	w("## Targets\n\n")
	w("Reported, not asserted.\n\n| target | result |\n|---|---|\n")
	r.targetRows(w, get)
	w("\n")
	if len(r.Failures) > 0 {
		w("## Failures\n\n")
		for _, f := range r.Failures {
			w("- %s\n", strings.ReplaceAll(f, "\n", " "))
		}
		w("\n")
	}
	w("## Analysis\n\n%s\n", analysisBegin)
	if analysis == "" {
		analysis = "_(not written yet)_"
	}
	w("%s\n%s\n\n", analysis, analysisEnd)
	w("Raw figures, per trial: [benchmarks.json](benchmarks.json).\n")
	return b.String()
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func stepWindow(wls []workload) string {
	for _, w := range wls {
		if w.Kind == "stepped" {
			return w.Window.String()
		}
	}
	return ""
}

func (r *report) shortSummary() string {
	var b strings.Builder
	for _, ws := range r.Summary {
		fmt.Fprintf(&b, "%s:\n", ws.Workload)
		for _, sys := range []string{sysJob, sysAgentrun} {
			s := ws.Systems[sys]
			if s == nil {
				continue
			}
			fmt.Fprintf(&b, "  %-9s %s runs/s, fact→terminal p50 %s ms p99 %s ms, writes/run %s (events %s), CPU %s s/1000, RSS %s MiB",
				sys, f(s.Throughput, 1), f(s.LatP50, 1), f(s.LatP99, 1), f(s.WritesPerRun, 2), f(s.Events, 2), f(s.CPUPer1000, 2), f(s.RSS, 0))
			if ws.Workload == "stepped" {
				fmt.Fprintf(&b, ", sustained %s runs/s", f(s.Sustained, 0))
			}
			b.WriteString("\n")
		}
	}
	if r.Ceiling != nil {
		fmt.Fprintf(&b, "ceiling: pod status %s/s, RunAttempt status %s/s\n", f(r.Ceiling.PodStatusPerS, 0), f(r.Ceiling.AttemptStatusPerS, 0))
	}
	b.WriteString(r.liveShort())
	return b.String()
}

func machineInfo(assets string) machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && k == "MemTotal" {
				var kib float64
				_, _ = fmt.Sscanf(strings.TrimSpace(v), "%f", &kib)
				m.MemoryGiB = fmt.Sprintf("%.1f", kib/1024/1024)
			}
		}
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAtStart = strings.Join(f[:3], " ")
		}
	}
	m.KubeAPIServer = binVersion(filepath.Join(assets, "kube-apiserver"), "--version")
	m.KCM = binVersion(filepath.Join(assets, "kube-controller-manager"), "--version")
	m.Etcd = binVersion(filepath.Join(assets, "etcd"), "--version")
	return m
}

// binVersion returns the version a binary prints.
func binVersion(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(out.String(), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "Kubernetes "); ok {
			return v
		}
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return v
		}
	}
	return strings.TrimSpace(out.String())
}

// sourceInfo says which code the operator was built from.
func sourceInfo(root string) string {
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	head := git("rev-parse", "--short", "HEAD")
	if head == "" {
		return "unknown (not a git checkout)"
	}
	dirty := git("status", "--porcelain", "--", "api", "cmd", "internal", "config", "go.mod")
	if dirty == "" {
		return "commit " + head
	}
	return fmt.Sprintf("commit %s with uncommitted changes in %d files (api, cmd, internal, config, go.mod)", head, len(strings.Split(dirty, "\n")))
}

// loadReport reads a report written by writeJSON, for -render.
func loadReport(path string) (*report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &report{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
