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

// Command bench runs the agentrun operator and the Kubernetes Job controller,
// one after the other, each on a fresh local control plane (the envtest
// toolchain's etcd and kube-apiserver), drives both with the same fake kubelet
// and agent, and writes docs/benchmarks.md and docs/benchmarks.json.
//
//	go run ./test/bench                      # the default set (see -h; prints its expected duration)
//	go run ./test/bench -quick -no-write     # a short smoke of every workload
//	go run ./test/bench -trials 1 -sizes 200 -workloads burst -no-write   # a quick look
//	go run ./test/bench -systems agentrun -workloads live -live-sizes 50 -trials 1 -no-write
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "operator" {
		if err := runOperatorMode(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "operator mode: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		logf("bench: %v", err)
		stopAllChildren()
		os.Exit(1)
	}
}

func run() error {
	var (
		sizes        = flag.String("sizes", "200,1000,5000", "burst sizes N (comma-separated)")
		large        = flag.Bool("large", false, "also run a burst of N = 5000 (in the default -sizes already)")
		quick        = flag.Bool("quick", false, "a short smoke of every workload: 1 trial, serial 20, bursts of 200, rates 10,20, live M = 50 for 20s; explicit flags still win")
		rates        = flag.String("rates", "10,20,40,80,160", "stepped arrival rates, runs per second")
		window       = flag.Duration("window", 8*time.Second, "length of each arrival-rate step")
		trials       = flag.Int("trials", 1, "trials of each workload and system (the default set fits in 30 minutes with 1; -trials 3 gives medians with their spread in about an hour)")
		heavyTrials  = flag.Int("heavy-trials", 1, "trials of the heavy workloads (bursts of N ≥ 5000, live runs): the first ones only")
		systemsFlag  = flag.String("systems", "job,agentrun", "systems to run")
		workloadFlag = flag.String("workloads", "serial,burst,stepped,ceiling,live", "workloads to run")
		serialN      = flag.Int("serial", 50, "runs in the serial workload (one at a time, idle plane)")
		whSizes      = flag.String("webhook-sizes", "200", "burst sizes also run with the admission webhooks installed (agentrun; empty: none)")
		whSerial     = flag.Bool("webhook-serial", true, "also run the serial workload with the admission webhooks installed (agentrun)")
		liveSizes    = flag.String("live-sizes", "250,500,1000,2000", "live workload: M, runs alive at once, stepped up until a step fails")
		liveWindow   = flag.Duration("live-window", 60*time.Second, "live workload: how long all M runs are alive together (the measurement window)")
		liveEvery    = flag.Duration("live-interval", 2*time.Second, "live workload: each run's model-call period")
		liveTools    = flag.Int("live-tools", 3, "live workload: tool calls per run in the window")
		liveRate     = flag.Int("live-rate", 25, "live workload: runs created per second in the ramp, and finished per second after the window")
		liveP99      = flag.Duration("live-p99", time.Second, "live workload: a step is sustained while the terminal-fact → phase p99 stays under this")
		liveWH       = flag.Bool("live-webhooks", true, "live workload: with the admission webhooks and policies installed, as a real install")
		liveUpLat    = flag.Duration("live-upstream-latency", 20*time.Millisecond, "live workload: the fake upstream's fixed latency")
		gatewayBin   = flag.String("gateway-bin", "", "use this agentrun-gateway binary instead of building ./cmd/gateway")
		estimate     = flag.Bool("estimate", false, "print the workloads and the expected duration, and run nothing")
		workers      = flag.Int("workers", 5, "concurrent syncs for both peers (--run-workers, --concurrent-job-syncs)")
		qps          = flag.Float64("qps", 1000, "client QPS for both peers (--kube-api-qps); high enough that neither peer's client-side limiter binds")
		burstQ       = flag.Int("burst", 2000, "client burst for both peers (--kube-api-burst)")
		driverW      = flag.Int("driver-workers", 16, "driver (kubelet + agent) workers")
		creators     = flag.Int("creators", 32, "concurrent creates in the driver")
		warmup       = flag.Int("warmup", 5, "unmeasured warm-up runs before each measurement")
		runTimeout   = flag.Duration("run-timeout", 5*time.Minute, "longest wait for a workload's runs to finish (a burst waits at least 200 ms per run)")
		maxTotal     = flag.Duration("max-total", 90*time.Minute, "the whole benchmark stops after this")
		ceilDur      = flag.Duration("ceiling-duration", 8*time.Second, "length of each ceiling measurement")
		ceilW        = flag.Int("ceiling-workers", 32, "concurrent clients in the ceiling measurement")
		assets       = flag.String("assets", "", "directory with etcd, kube-apiserver, kube-controller-manager (default $KUBEBUILDER_ASSETS or setup-envtest's store)")
		rootFlag     = flag.String("root", "", "repository root (default: found from the working directory)")
		operatorBin  = flag.String("operator-bin", "", "use this manager binary instead of building ./cmd")
		outMD        = flag.String("out", "docs/benchmarks.md", "markdown report, relative to the root")
		outJSON      = flag.String("json", "docs/benchmarks.json", "raw figures, relative to the root")
		noWrite      = flag.Bool("no-write", false, "print the summary only; write no files")
		keep         = flag.Bool("keep", false, "keep the temporary directory (logs of every process)")
		profileDir   = flag.String("profile-dir", "", "write CPU profiles of the apiserver and the operator (run from this program's operator mode, with pprof) for each workload, and the report, into this directory instead of docs/")
		profileSecs  = flag.Int("profile-seconds", 10, "length of each CPU profile")
		traceRuns    = flag.Int("trace", 0, "write the watch timeline of the first N measured runs of each workload (to -profile-dir, else the kept temporary directory)")
		render       = flag.String("render", "", "only re-render the markdown report (-out) from this JSON file of an earlier run; runs nothing")
		operatorArgs = flag.String("operator-args", "", "extra arguments for the agentrun manager (space-separated), e.g. --zap-log-level=debug")
	)
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{
			"sizes": "200", "serial": "20", "trials": "1", "rates": "10,20", "live-sizes": "50", "live-window": "20s",
			"ceiling-duration": "3s",
		} {
			if !set[name] {
				_ = flag.Set(name, v)
			}
		}
	}
	if *traceRuns > 0 && *profileDir == "" {
		*keep = true // the traces are written into the temporary directory
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))

	root, err := findRoot(*rootFlag)
	if err != nil {
		return err
	}
	if *render != "" {
		rep, err := loadReport(*render)
		if err != nil {
			return err
		}
		rep.summarize()
		out := *outMD
		if !filepath.IsAbs(out) {
			out = filepath.Join(root, out)
		}
		if err := os.WriteFile(out, []byte(rep.markdown(existingAnalysis(out))), 0o644); err != nil {
			return err
		}
		logf("rendered %s from %s", out, *render)
		return nil
	}
	if *assets == "" {
		*assets = defaultAssets()
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(*assets, bin)); err != nil {
			return fmt.Errorf("%s not found in %q: run `WITH_CONTROLLER_MANAGER=1 hack/envtest-toolchain.sh` and pass its output as -assets or KUBEBUILDER_ASSETS", bin, *assets)
		}
	}
	systems := splitList(*systemsFlag)
	for _, s := range systems {
		if s != sysJob && s != sysAgentrun {
			return fmt.Errorf("unknown system %q", s)
		}
	}
	wls := sets.New(splitList(*workloadFlag)...)
	var workloads []workload
	if wls.Has("serial") && *serialN > 0 {
		workloads = append(workloads, workload{Kind: "serial", N: *serialN})
	}
	if wls.Has("burst") {
		ns, err := splitInts(*sizes)
		if err != nil {
			return fmt.Errorf("-sizes: %w", err)
		}
		if *large && !slices.Contains(ns, 5000) {
			ns = append(ns, 5000)
		}
		for _, n := range ns {
			workloads = append(workloads, workload{Kind: "burst", N: n})
		}
	}
	if slices.Contains(systems, sysAgentrun) {
		// The same workloads with the admission webhooks installed, as a
		// real install has them (agentrun only).
		if wls.Has("serial") && *whSerial && *serialN > 0 {
			workloads = append(workloads, workload{Kind: "serial", N: *serialN, Webhooks: true})
		}
		if wls.Has("burst") && *whSizes != "" {
			ns, err := splitInts(*whSizes)
			if err != nil {
				return fmt.Errorf("-webhook-sizes: %w", err)
			}
			for _, n := range ns {
				workloads = append(workloads, workload{Kind: "burst", N: n, Webhooks: true})
			}
		}
	}
	if wls.Has("stepped") {
		rs, err := splitInts(*rates)
		if err != nil {
			return fmt.Errorf("-rates: %w", err)
		}
		if *window < 2*time.Second {
			return fmt.Errorf("-window must be at least 2s")
		}
		workloads = append(workloads, workload{Kind: "stepped", Rates: rs, Window: *window})
	}
	if wls.Has("live") && slices.Contains(systems, sysAgentrun) {
		ms, err := splitInts(*liveSizes)
		if err != nil {
			return fmt.Errorf("-live-sizes: %w", err)
		}
		if *liveRate < 1 || *liveEvery <= 0 || *liveWindow < time.Second {
			return fmt.Errorf("-live-rate must be at least 1, -live-interval positive and -live-window at least 1s")
		}
		workloads = append(workloads, workload{Kind: "live", Webhooks: *liveWH, Live: &liveSettings{
			Sizes: ms, Window: *liveWindow, Interval: *liveEvery, ToolCalls: *liveTools, Rate: *liveRate,
			P99Limit: *liveP99, UpstreamLatency: *liveUpLat,
		}})
	}
	if *trials < 1 {
		return fmt.Errorf("-trials must be at least 1")
	}

	// Stop on Ctrl-C or SIGTERM: cancel everything, stop every child. A
	// second signal kills the children at once and exits.
	ctx, cancel := context.WithTimeout(context.Background(), *maxTotal)
	defer cancel()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		logf("got %v: stopping (again to kill at once)", s)
		cancel()
		<-sig
		killEverything()
		os.Exit(130)
	}()
	defer stopAllChildren()

	tmp, err := os.MkdirTemp("", "agentrun-bench-")
	if err != nil {
		return err
	}
	if *keep {
		logf("logs in %s", tmp)
	} else {
		defer func() { _ = os.RemoveAll(tmp) }()
	}

	o := &options{
		root: root, assets: *assets, tmp: tmp, operatorBin: *operatorBin,
		peer:          peerConfig{Workers: *workers, QPS: *qps, Burst: *burstQ},
		driverWorkers: *driverW, creators: *creators, warmup: *warmup, runTimeout: *runTimeout,
		ceilingDuration: *ceilDur, ceilingWorkers: *ceilW,
		profileSeconds: *profileSecs,
		operatorArgs:   strings.Fields(*operatorArgs),
		traceRuns:      *traceRuns,
		gatewayBin:     *gatewayBin,
	}
	if *profileDir != "" {
		if o.profileDir, err = filepath.Abs(*profileDir); err != nil {
			return err
		}
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
		// Figures from a profiling run (operator mode, profilers on) are
		// not the benchmark's: they go next to the profiles.
		*outMD, *outJSON = filepath.Join(o.profileDir, "benchmarks.md"), filepath.Join(o.profileDir, "benchmarks.json")
	}
	hasLive := slices.ContainsFunc(workloads, func(w workload) bool { return w.Kind == "live" })
	expected := expectedDuration(workloads, systems, wls.Has("ceiling"), *trials, *heavyTrials, o)
	logf("expected duration on a fresh 2-core machine: about %.0f min (%d trials, heavy workloads in %d; the estimate assumes the runs/s of docs/benchmarks.md)",
		expected.Minutes(), *trials, min(*heavyTrials, *trials))
	if *estimate {
		for _, wl := range workloads {
			fmt.Println(wl.name(), map[bool]string{true: "(heavy)", false: ""}[wl.heavy()])
		}
		fmt.Printf("expected: %.1f min\n", expected.Minutes())
		return nil
	}
	rep := &report{
		Started:  time.Now(),
		Machine:  machineInfo(*assets),
		Settings: settings{Peer: o.peer, DriverWorkers: o.driverWorkers, Creators: o.creators, Warmup: o.warmup, Trials: *trials, HeavyTrials: min(*heavyTrials, *trials), Workloads: workloads, CeilingWorkers: o.ceilingWorkers, CeilingDurationS: o.ceilingDuration.Seconds(), ExpectedMinutes: expected.Minutes()},
		Command:  commandLine(),
		Source:   sourceInfo(root),
	}
	if o.operatorBin != "" {
		if _, err := os.Stat(o.operatorBin); err != nil {
			return fmt.Errorf("-operator-bin: %w", err)
		}
	}
	began := time.Now()
	if slices.Contains(systems, sysAgentrun) && o.operatorBin == "" && o.profileDir == "" {
		logf("building the operator (go build ./cmd)")
		t := time.Now()
		if o.operatorBin, err = buildOperator(ctx, root, tmp); err != nil {
			return err
		}
		rep.BuildSeconds = time.Since(t).Seconds()
		logf("built in %.1fs", rep.BuildSeconds)
	}
	if hasLive && o.gatewayBin == "" {
		logf("building agentrun-gateway (go build ./cmd/gateway)")
		t := time.Now()
		if o.gatewayBin, err = buildBinary(ctx, root, tmp, "./cmd/gateway", "gateway"); err != nil {
			return err
		}
		rep.BuildSeconds += time.Since(t).Seconds()
	} else if hasLive {
		if _, err := os.Stat(o.gatewayBin); err != nil {
			return fmt.Errorf("-gateway-bin: %w", err)
		}
	}

	var failures []string
	for trial := 1; trial <= *trials; trial++ {
		if wls.Has("ceiling") {
			logf("trial %d: ceiling (plain client, %d concurrent status patches)", trial, o.ceilingWorkers)
			c, err := ceiling(ctx, o, trial)
			if err != nil {
				if ctx.Err() != nil {
					return finish(rep, root, *outMD, *outJSON, *noWrite, began, ctx.Err())
				}
				failures = append(failures, fmt.Sprintf("trial %d ceiling: %v", trial, err))
				logf("  ceiling failed: %v", err)
			} else {
				rep.Ceilings = append(rep.Ceilings, *c)
				logf("  pod status %.0f/s, RunAttempt status %.0f/s", c.PodStatusPerS, c.AttemptStatusPerS)
			}
		}
		for _, wl := range workloads {
			if wl.heavy() && trial > *heavyTrials {
				continue
			}
			if wl.Kind == "live" {
				logf("trial %d: %s agentrun (M = %v, %s window, a model call every %s)", trial, wl.name(), wl.Live.Sizes, wl.Live.Window, wl.Live.Interval)
				steps, err := live(ctx, o, wl, trial)
				rep.Live = append(rep.Live, steps...)
				if err != nil {
					if ctx.Err() != nil {
						return finish(rep, root, *outMD, *outJSON, *noWrite, began, ctx.Err())
					}
					failures = append(failures, fmt.Sprintf("trial %d %s: %v", trial, wl.name(), err))
					logf("  failed: %v", err)
				}
				continue
			}
			order := systems
			if trial%2 == 0 { // alternate who goes first
				order = reversed(systems)
			}
			if wl.Webhooks {
				order = []string{sysAgentrun} // the Job controller has no webhooks
			}
			for _, sys := range order {
				logf("trial %d: %s %s", trial, wl.name(), sys)
				res, err := runOne(ctx, o, sys, wl, trial)
				if res != nil && res.N > 0 {
					rep.Trials = append(rep.Trials, *res)
					logf("  %d/%d terminal in %.1fs: %.1f runs/s; fact→terminal p50 %.0f ms p99 %.0f ms; controller writes/run %.2f (+%.2f events); CPU %.2f s/1000 runs; RSS %.0f MiB",
						res.Terminal, res.N, res.DurationS, res.Throughput, res.LatencyP50Ms, res.LatencyP99Ms,
						res.NonEventPerRun, res.EventsPerRun, res.PeerCPUPer1000, res.PeerPeakRSSMiB)
					if res.DriverErrors > 0 {
						logf("  driver errors: %d (first: %s)", res.DriverErrors, res.DriverFirstErr)
					}
				}
				if err != nil {
					if ctx.Err() != nil {
						return finish(rep, root, *outMD, *outJSON, *noWrite, began, ctx.Err())
					}
					failures = append(failures, fmt.Sprintf("trial %d %s %s: %v", trial, wl.name(), sys, err))
					logf("  failed: %v", err)
				}
			}
		}
	}
	rep.Failures = failures
	return finish(rep, root, *outMD, *outJSON, *noWrite, began, nil)
}

func finish(rep *report, root, outMD, outJSON string, noWrite bool, began time.Time, cause error) error {
	rep.TotalSeconds = time.Since(began).Seconds()
	if cause != nil {
		rep.Failures = append(rep.Failures, "stopped early: "+cause.Error())
	}
	rep.summarize()
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	outMD, outJSON = abs(outMD), abs(outJSON)
	md := rep.markdown(existingAnalysis(outMD))
	if cause != nil {
		// A stopped or timed-out benchmark leaves the last complete report alone.
		fmt.Print(rep.shortSummary())
		return cause
	}
	if noWrite {
		fmt.Println(md)
	} else {
		if err := os.WriteFile(outMD, []byte(md), 0o644); err != nil {
			return err
		}
		if err := rep.writeJSON(outJSON); err != nil {
			return err
		}
		logf("wrote %s and %s", outMD, outJSON)
		fmt.Print(rep.shortSummary())
	}
	if cause != nil {
		return cause
	}
	if len(rep.Failures) > 0 {
		return errors.New(strings.Join(rep.Failures, "; "))
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func splitInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// findRoot walks up from dir (or the working directory) to the go.mod of
// github.com/agentrun-dev/agentrun.
func findRoot(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	dir, _ = filepath.Abs(dir)
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/agentrun-dev/agentrun\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no github.com/agentrun-dev/agentrun go.mod above %s (use -root)", dir)
		}
	}
}

// defaultAssets is $KUBEBUILDER_ASSETS, else the newest entry of
// setup-envtest's store for this platform.
func defaultAssets() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".local", "share")
	}
	store := filepath.Join(base, "kubebuilder-envtest", "k8s")
	entries, _ := os.ReadDir(store)
	suffix := "-" + runtime.GOOS + "-" + runtime.GOARCH
	for _, e := range slices.Backward(entries) {
		if e.IsDir() && strings.HasSuffix(e.Name(), suffix) {
			return filepath.Join(store, e.Name())
		}
	}
	return store
}

func commandLine() string {
	args := []string{"go run ./test/bench"}
	flag.Visit(func(f *flag.Flag) {
		args = append(args, fmt.Sprintf("-%s=%s", f.Name, f.Value.String()))
	})
	return strings.Join(args, " ")
}
