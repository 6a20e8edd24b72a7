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

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentrun-dev/agentrun/internal/devstack/node"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
	"github.com/agentrun-dev/agentrun/test/utils"
)

const image = "ghcr.io/agentrun-dev/research-agent:chaos"

// TestChaos is the chaos suite. It runs only when AGENTRUN_CHAOS is set:
//
//	AGENTRUN_CHAOS=short go test ./test/chaos/ -v                # the short version (make test)
//	AGENTRUN_CHAOS=full AGENTRUN_CHAOS_WRITE=1 go test ./test/chaos/ -v -timeout 3h   # make chaos
//
// AGENTRUN_CHAOS=render rewrites docs/reliability.md from docs/reliability.json.
// AGENTRUN_CHAOS_SCENARIOS picks scenarios by name (comma-separated);
// AGENTRUN_CHAOS_WRITE=1 merges the results into docs/reliability.json and
// rewrites docs/reliability.md.
func TestChaos(t *testing.T) {
	mode := os.Getenv("AGENTRUN_CHAOS")
	if mode == "render" { // rewrite docs/reliability.md from docs/reliability.json, running nothing
		root := utils.ProjectRoot()
		rep, err := LoadReport(filepath.Join(root, "docs", "reliability.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.Save(filepath.Join(root, "docs", "reliability.json"), filepath.Join(root, "docs", "reliability.md")); err != nil {
			t.Fatal(err)
		}
		return
	}
	if mode == "" {
		t.Skip("the chaos suite runs with AGENTRUN_CHAOS=short (make test) or AGENTRUN_CHAOS=full (make chaos)")
	}
	if mode != "short" && mode != "full" {
		t.Fatalf("AGENTRUN_CHAOS=%q: want short or full", mode)
	}
	full := mode == "full"
	scenarios := Scenarios(full)
	if sel := os.Getenv("AGENTRUN_CHAOS_SCENARIOS"); sel != "" {
		want := strings.Split(sel, ",")
		known := map[string]bool{}
		for _, sc := range scenarios {
			known[sc.Name] = true
		}
		for _, n := range want {
			if !known[n] {
				t.Fatalf("AGENTRUN_CHAOS_SCENARIOS: no scenario %q", n)
			}
		}
		scenarios = slices.DeleteFunc(scenarios, func(sc Scenario) bool { return !slices.Contains(want, sc.Name) })
	}
	ctx := t.Context()
	plant, env := startPlant(ctx, t, full)
	baseRuns := 6
	if full {
		baseRuns = 12
	}
	res, outcomes, err := Run(ctx, plant, Scenario{Name: "baseline", Runs: baseRuns}, "chaos-baseline", nil, mode)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NotEnded) > 0 {
		t.Fatalf("the fault-free baseline did not end: %v", res.NotEnded)
	}
	base, disagree := BaselineFrom(outcomes)
	for _, k := range Kinds {
		env.logf("baseline %-9s %s", k, base[k])
	}
	if len(disagree) > 0 {
		t.Errorf("the fault-free baseline is not deterministic: %v", disagree)
	}

	root := utils.ProjectRoot()
	jsonPath, mdPath := filepath.Join(root, "docs", "reliability.json"), filepath.Join(root, "docs", "reliability.md")
	write := os.Getenv("AGENTRUN_CHAOS_WRITE") == "1"
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			res, _, err := Run(ctx, plant, sc, "chaos-"+sc.Name, base, mode)
			if err != nil {
				t.Fatal(err)
			}
			env.logf("%s: %d runs, %d faults, baseline %d/%d, extra attempts %d, pod overlaps %d, double-counted %d, "+
				"tools twice %d, session overlaps %d, facts lost %d, model served/counted %d/%d, converged %.1fs, wall %.0fs",
				sc.Name, res.Runs, res.Faults, res.Matching, res.Runs, res.ExtraAttempts, len(res.Breaks.PodOverlaps),
				res.DoubleCounted, res.ToolDispatchedTwice, len(res.Breaks.SessionOverlaps), len(res.Breaks.FactsLost),
				res.ModelDispatched, res.ModelCounted, res.ConvergeSecs, res.WallSecs)
			if write {
				rep, err := LoadReport(jsonPath)
				if err != nil {
					t.Fatal(err)
				}
				rep.Baseline, rep.BaselineRuns, rep.BaselineDisagree = base, baseRuns, disagree
				rep.Machine, rep.Commit = machine(), commit(root)
				res.Commit = rep.Commit
				rep.Results[sc.Name+"/"+mode] = res
				if err := rep.Save(jsonPath, mdPath); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range res.BaselineMisses() {
				if !full && sc.KnownDivergence != "" {
					t.Logf("known divergence (%s): %s", sc.KnownDivergence, f)
					continue
				}
				t.Error(f)
			}
			for _, f := range res.InvariantBreaks() {
				t.Error(f)
			}
		})
	}
}

// startPlant builds the binaries and starts the local stack in bin/chaos,
// with the operator behind the fault proxy.
func startPlant(ctx context.Context, t *testing.T, full bool) (*Plant, *Env) {
	t.Helper()
	root := utils.ProjectRoot()
	dir := filepath.Join(root, "bin", "chaos")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := os.Stderr
	ctrllog.SetLogger(zap.New(zap.WriteTo(out), zap.Level(zapcore.ErrorLevel)))
	assets, err := stack.Toolchain(ctx, root, out)
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{}
	for _, b := range []struct{ name, pkg string }{
		{"manager", "./cmd"}, {"gateway", "./cmd/gateway"}, {"research-agent", "./cmd/research-agent"},
		{"agentrun-tools", "./cmd/agentrun-tools"},
	} {
		bins[b.name] = filepath.Join(dir, b.name)
		if err := stack.GoBuild(ctx, root, b.pkg, bins[b.name], out); err != nil {
			t.Fatal(err)
		}
	}
	fake := filepath.Join(dir, "tools-fake.yaml")
	if err := os.WriteFile(fake, []byte(ToolsFakeConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := stack.Start(ctx, stack.Options{
		Root: root, Assets: assets, Dir: dir,
		OperatorBinary: bins["manager"], GatewayBinary: bins["gateway"],
		GatewayArgs:     []string{"--flush-interval=100ms"},
		ToolsBinary:     bins["agentrun-tools"],
		ToolsFakeConfig: fake,
		ToolsArgs:       []string{"--http-get=false"},
		Images:          node.ImageMap{{Match: "research-agent", Binary: bins["research-agent"]}},
		Out:             out,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	proxy, err := st.RouteOperatorThroughProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	api, err := st.APIServerControl()
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{St: st, Image: image, AgentArgs: []string{"--provider=scripted", "--rate-limit-interval=100ms"},
		SessionsAuto: 4, SessionsHigh: 2, Out: out}
	if full {
		env.SessionsAuto, env.SessionsHigh = 8, 4
	}
	plant := &Plant{St: st, Proxy: proxy, API: api, env: env}
	pctx, pcancel := context.WithCancel(ctx)
	t.Cleanup(pcancel) // before st.Stop (cleanups run last-in first-out)
	plant.Supervise(pctx)
	env.logf("stack up in %s; logs in %s", dir, st.LogDir)
	return plant, env
}

func machine() string {
	host, _ := os.Hostname()
	cpu := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s, host %s, %s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH,
		runtime.Version(), host, time.Now().UTC().Format("2006-01-02"))
}

// commit names the commit under test: AGENTRUN_CHAOS_COMMIT (for a run from
// an exported tree), else git's HEAD with "+dirty" for local changes.
func commit(root string) string {
	if c := os.Getenv("AGENTRUN_CHAOS_COMMIT"); c != "" {
		return c
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}
