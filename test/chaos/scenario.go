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
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
)

// Scenario is one row of docs/reliability.md.
type Scenario struct {
	Name  string
	Title string
	// Runs is the least number of runs made; runs keep being made while
	// faults are still due.
	Runs int
	// MinFaults is the least number of faults injected; faults keep coming
	// while runs are still being made.
	MinFaults int
	Injector  Injector
	// KnownDivergence, when set, names the known issues that make runs of
	// this scenario end unlike the baseline; the short version (make test)
	// then logs those misses instead of failing on them (the invariants
	// still fail it). The full version fails on every miss.
	KnownDivergence string
}

// Scenarios returns the scenarios, full or short-sized.
func Scenarios(full bool) []Scenario {
	n := func(short, long int) int {
		if full {
			return long
		}
		return short
	}
	leaderEvery := 30 * time.Second
	if !full {
		leaderEvery = 10 * time.Second
	}
	all := []Scenario{
		{Name: "operator-kill", Title: "operator SIGKILLed every 2–5 s (one replica, no leader election)",
			Runs: n(24, 500), MinFaults: n(3, 1), Injector: operatorKill{lo: 2 * time.Second, hi: 5 * time.Second}},
		{Name: "leader-kill", Title: fmt.Sprintf("two replicas with leader election, the leader SIGKILLed every %s", leaderEvery),
			Runs: n(12, 120), MinFaults: n(1, 10), Injector: leaderKill{every: leaderEvery}},
		{Name: "gateway-kill", Title: "gateway SIGKILLed every 3–8 s",
			KnownDivergence: "a kill loses up to a flush interval of counts and does not replay a call in flight; " +
				"an agent that starts while the gateway is down exits (docs/reliability.md)",
			Runs: n(12, 150), MinFaults: n(2, 20), Injector: gatewayKill{lo: 3 * time.Second, hi: 8 * time.Second}},
		{Name: "api-faults", Title: "operator ↔ API server proxy: 30% of writes 409, 5% 500, 0–100 ms latency, watches cut every 5–20 s",
			Runs: n(18, 200), MinFaults: 1, Injector: apiFaults{rules: stack.FaultRules{
				ConflictRate: 0.30, ErrorRate: 0.05, MaxLatency: 100 * time.Millisecond,
				WatchCutMin: 5 * time.Second, WatchCutMax: 20 * time.Second,
			}}},
		{Name: "apiserver-restart",
			KnownDivergence: "an agent that starts while the API server is away exits; the local node is slow to " +
				"start pods after a restart (docs/reliability.md)",
			Title: "kube-apiserver stopped 1–3 s and started again (etcd kept), watches cut every 2–8 s " +
				"and half of the resumed ones answered 410 Gone",
			// Fewer runs than the other scenarios: with a restart every
			// ~13 s the local node is slow to start pods, and runs are made
			// at a few per minute.
			Runs: n(12, 36), MinFaults: n(3, 20), Injector: apiserverRestart{
				lo: 4 * time.Second, hi: 8 * time.Second, downLo: time.Second, downHi: 3 * time.Second,
				rules: stack.FaultRules{WatchCutMin: 2 * time.Second, WatchCutMax: 8 * time.Second, ExpireRate: 0.5},
			}},
	}
	return all
}

// Result is one scenario's figures.
type Result struct {
	Name     string    `json:"name"`
	Title    string    `json:"title"`
	Mode     string    `json:"mode"`
	Started  time.Time `json:"started"`
	WallSecs float64   `json:"wallSeconds"`
	// Commit is the commit this scenario's binaries were built from (rows
	// of one report may come from runs at different commits).
	Commit   string   `json:"commit,omitempty"`
	Faults   int      `json:"faults"`
	FaultLog []string `json:"faultLog,omitempty"`
	Runs     int      `json:"runs"`
	Matching int      `json:"matchingBaseline"`
	Mismatch []string `json:"mismatches,omitempty"`
	NotEnded []string `json:"notTerminated,omitempty"`
	// CountsLost counts the mismatches that ended as the baseline (reason,
	// settlement, attempts) with lower usage counts: counts lost, none added.
	CountsLost int `json:"sameEndCountsLost"`
	// Stalled says the faults ended early: no run was made for a minute
	// (every session full of runs that did not end).
	Stalled bool               `json:"stalled,omitempty"`
	ByKind  map[Kind]KindTally `json:"byKind"`
	// ExtraAttempts sums, over runs, the attempts beyond the baseline's.
	ExtraAttempts int `json:"extraAttempts"`
	// DoubleCounted sums, over runs, |ledger − attempts' own usage| in budget
	// units (model requests + tool calls + tokens), per attempt and in total.
	DoubleCounted int64 `json:"doubleCountedUnits"`
	// DoubleCountedRuns names the runs whose totals disagree.
	DoubleCountedRuns []string `json:"doubleCountedRuns,omitempty"`
	// ToolDispatchedTwice counts tool calls (one unique ticket per run) the
	// tool server received more than once.
	ToolDispatchedTwice int `json:"toolDispatchedTwice"`
	// ModelDispatched is what the scripted upstream served; ModelCounted the
	// sum of the runs' used model requests.
	ModelDispatched int64  `json:"modelDispatched"`
	ModelCounted    int64  `json:"modelCounted"`
	Breaks          Breaks `json:"breaks"`
	// ConvergeSecs is the time from the end of the last fault to the last
	// run's completionTime (0 when every run had ended before).
	ConvergeSecs float64          `json:"convergeSeconds"`
	Unplanned    int              `json:"unplannedRestarts"`
	Proxy        stack.ProxyStats `json:"proxy"`
	APIRestarts  int              `json:"apiserverRestarts"`
}

// KindTally counts one kind's runs and how many matched the baseline.
type KindTally struct {
	Runs     int `json:"runs"`
	Matching int `json:"matching"`
}

// Failures lists what misses a target (100% baseline, every other count 0).
func (r *Result) Failures() []string {
	return append(r.BaselineMisses(), r.InvariantBreaks()...)
}

// BaselineMisses lists the runs that did not end as the baseline.
func (r *Result) BaselineMisses() []string {
	var out []string
	if r.Matching != r.Runs {
		out = append(out, fmt.Sprintf("%d of %d runs differ from the baseline: %s", r.Runs-r.Matching, r.Runs,
			strings.Join(head(append(slices.Clone(r.NotEnded), r.Mismatch...), 10), "; ")))
	}
	if r.ExtraAttempts > 0 {
		out = append(out, fmt.Sprintf("%d attempts beyond the baseline", r.ExtraAttempts))
	}
	return out
}

// InvariantBreaks lists what must never happen under any fault: two pods of
// one run, double counting, a tool call dispatched twice, two active runs of
// a session, a fact lost, more model requests counted than served.
func (r *Result) InvariantBreaks() []string {
	var out []string
	if n := len(r.Breaks.PodOverlaps); n > 0 {
		out = append(out, fmt.Sprintf("%d pod overlaps: %s", n, strings.Join(head(r.Breaks.PodOverlaps, 5), "; ")))
	}
	if r.DoubleCounted > 0 {
		msg := fmt.Sprintf("%d budget units double-counted", r.DoubleCounted)
		if len(r.DoubleCountedRuns) > 0 {
			msg += ": " + strings.Join(head(slices.Clone(r.DoubleCountedRuns), 5), "; ")
		}
		out = append(out, msg)
	}
	if r.ToolDispatchedTwice > 0 {
		out = append(out, fmt.Sprintf("%d tool calls dispatched twice", r.ToolDispatchedTwice))
	}
	if n := len(r.Breaks.SessionOverlaps); n > 0 {
		out = append(out, fmt.Sprintf("%d session overlaps: %s", n, strings.Join(head(r.Breaks.SessionOverlaps, 5), "; ")))
	}
	if n := len(r.Breaks.FactsLost); n > 0 {
		out = append(out, fmt.Sprintf("%d facts lost: %s", n, strings.Join(head(r.Breaks.FactsLost, 5), "; ")))
	}
	if r.ModelCounted > r.ModelDispatched {
		out = append(out, fmt.Sprintf("%d model requests counted, %d dispatched", r.ModelCounted, r.ModelDispatched))
	}
	return out
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

// Baseline is each kind's fault-free outcome.
type Baseline map[Kind]Outcome

// Run plays one scenario on the plant in namespace ns and measures it
// against base (nil: this is the baseline itself; the outcomes are returned).
func Run(ctx context.Context, p *Plant, sc Scenario, ns string, base Baseline, mode string) (*Result, map[string]Outcome, error) {
	env := p.env
	res := &Result{Name: sc.Name, Title: sc.Title, Mode: mode, Started: time.Now().UTC(), ByKind: map[Kind]KindTally{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := NewWorld(ctx, env, ns)
	if err != nil {
		return nil, nil, err
	}
	upstreamBefore := p.St.Upstream.Requests.Load()
	proxyBefore := p.Proxy.Stats()
	apiBefore := p.API.Restarts()
	unplannedBefore := p.Unplanned()
	start := time.Now()

	if sc.Injector != nil {
		if err := sc.Injector.Setup(ctx, p); err != nil {
			return nil, nil, fmt.Errorf("setting up %s: %w", sc.Name, err)
		}
	}
	var created atomic.Int64
	var injectorDone atomic.Bool
	if sc.Injector == nil {
		injectorDone.Store(true)
	}
	feederDone := make(chan error, 1)
	go func() { feederDone <- feed(ctx, w, sc.Runs, &created, &injectorDone) }()

	var lastFault time.Time
	if sc.Injector != nil {
		madeAt, made := time.Now(), created.Load()
		for created.Load() < int64(sc.Runs) || res.Faults < sc.MinFaults {
			if n := created.Load(); n != made {
				madeAt, made = time.Now(), n
			}
			if res.Faults >= sc.MinFaults && time.Since(madeAt) > stallAfter {
				// Every session holds runs that do not end: more faults
				// would only keep the scenario going.
				res.Stalled = true
				env.logf("%s: no run made for %s after %d faults; ending the faults", sc.Name, stallAfter, res.Faults)
				break
			}
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(sc.Injector.Wait()):
			}
			what, err := sc.Injector.Fault(ctx, p)
			if err != nil {
				return nil, nil, fmt.Errorf("fault %d of %s: %w", res.Faults+1, sc.Name, err)
			}
			res.Faults++
			if what != "" {
				res.FaultLog = append(res.FaultLog, fmt.Sprintf("%s +%.1fs %s", time.Now().UTC().Format("15:04:05"),
					time.Since(start).Seconds(), what))
				env.logf("%s: fault %d: %s (%d runs made)", sc.Name, res.Faults, what, created.Load())
			}
		}
		if err := sc.Injector.Teardown(ctx, p); err != nil {
			return nil, nil, fmt.Errorf("tearing down %s: %w", sc.Name, err)
		}
		lastFault = time.Now()
		injectorDone.Store(true)
	}
	if err := <-feederDone; err != nil {
		return nil, nil, err
	}
	names, kinds := w.Created()
	env.logf("%s: %d runs made, %d faults; waiting for every run to end", sc.Name, len(names), res.Faults)
	// A run that has not ended this long after the last fault is reported
	// as not ended (and the scenario goes on).
	waitAll(ctx, w, names, waitAfterFaults(mode))
	// The gateway writes facts every flush interval; let the last ones land.
	time.Sleep(time.Second)
	res.WallSecs = time.Since(start).Seconds()

	outcomes, err := measure(ctx, p, w, names, res)
	if err != nil {
		return nil, nil, err
	}
	res.Runs = len(names)
	for _, n := range names {
		k := kinds[n]
		t := res.ByKind[k]
		t.Runs++
		o, ended := outcomes[n]
		switch {
		case !ended:
			res.NotEnded = append(res.NotEnded, n+" did not end")
		case base == nil:
			t.Matching++
		case o.Equal(base[k]):
			t.Matching++
		default:
			res.Mismatch = append(res.Mismatch, fmt.Sprintf("%s: %s (baseline %s)", n, o, base[k]))
			if o.SameEndFewerCounts(base[k]) {
				res.CountsLost++
			}
		}
		if ended && base != nil && o.Attempts > base[k].Attempts {
			res.ExtraAttempts += o.Attempts - base[k].Attempts
		}
		res.ByKind[k] = t
	}
	for _, t := range res.ByKind {
		res.Matching += t.Matching
	}
	if !lastFault.IsZero() {
		var last time.Time
		for _, n := range names {
			if t := w.Checker.TerminalTime(n); t.After(last) {
				last = t
			}
		}
		res.ConvergeSecs = max(0, last.Sub(lastFault).Seconds())
	}
	res.ModelDispatched = p.St.Upstream.Requests.Load() - upstreamBefore
	res.Breaks = w.Checker.Breaks()
	res.Unplanned = p.Unplanned() - unplannedBefore
	res.APIRestarts = p.API.Restarts() - apiBefore
	after := p.Proxy.Stats()
	res.Proxy = stack.ProxyStats{
		Requests: after.Requests - proxyBefore.Requests, Writes: after.Writes - proxyBefore.Writes,
		Conflicts: after.Conflicts - proxyBefore.Conflicts, Errors: after.Errors - proxyBefore.Errors,
		Watches: after.Watches - proxyBefore.Watches, WatchesCut: after.WatchesCut - proxyBefore.WatchesCut,
		Expired: after.Expired - proxyBefore.Expired,
	}
	return res, outcomes, nil
}

func waitAfterFaults(string) time.Duration { return 3 * time.Minute }

// stallAfter ends a scenario's faults once it made no run for this long
// (every session full of runs that do not end).
const stallAfter = time.Minute

// feed makes runs, at most two unfinished per session (one active, one
// queued), until runs are made and the injector is done.
func feed(ctx context.Context, w *World, runs int, created *atomic.Int64, injectorDone *atomic.Bool) error {
	i := 0
	for {
		if injectorDone.Load() && (i >= runs || stalled(w)) {
			return nil
		}
		name, err := w.Create(ctx, i, 2)
		if err != nil {
			return err
		}
		w.Act(ctx)
		if name != "" {
			i++
			created.Store(int64(i))
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stalled says whether no session has room for another run.
func stalled(w *World) bool {
	for _, ss := range w.sessions {
		for _, s := range ss {
			if w.unfinished(s) < 2 {
				return false
			}
		}
	}
	return true
}

// waitAll waits until every run was seen Terminated, answering approvals.
func waitAll(ctx context.Context, w *World, names []string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		w.Act(ctx)
		left := 0
		for _, n := range names {
			if !w.Checker.Terminated(n) {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// measure reads every run's end and its attempts, and the tool server's calls.
func measure(ctx context.Context, p *Plant, w *World, names []string, res *Result) (map[string]Outcome, error) {
	c := p.St.Client
	var runs v1alpha1.ResearchRunList
	var attempts v1alpha1.RunAttemptList
	if err := retry(ctx, func() error { return c.List(ctx, &runs, client.InNamespace(w.NS)) }); err != nil {
		return nil, err
	}
	if err := retry(ctx, func() error { return c.List(ctx, &attempts, client.InNamespace(w.NS)) }); err != nil {
		return nil, err
	}
	byRun := map[string][]v1alpha1.RunAttempt{}
	for _, ra := range attempts.Items {
		byRun[ra.Labels[v1alpha1.LabelRun]] = append(byRun[ra.Labels[v1alpha1.LabelRun]], ra)
	}
	out := map[string]Outcome{}
	for _, run := range runs.Items {
		res.ModelCounted += run.Status.Budget.Used.ModelRequests
		if run.Status.Phase != v1alpha1.PhaseTerminated {
			continue
		}
		o := Outcome{Reason: run.Status.Reason, Settlement: run.Status.Settlement, Attempts: len(byRun[run.Name])}
		own := map[int32]v1alpha1.Usage{}
		var sumAttempts v1alpha1.Usage
		for _, ra := range byRun[run.Name] {
			n, _ := strconv.Atoi(ra.Labels[v1alpha1.LabelAttempt])
			own[int32(n)] = ra.Status.Usage
			sumAttempts = add(sumAttempts, ra.Status.Usage)
		}
		var sumLedger v1alpha1.Usage
		for _, l := range run.Status.Ledger {
			o.Ledger = append(o.Ledger, LedgerEntry{Attempt: l.Attempt, ModelRequests: l.Used.ModelRequests,
				ToolCalls: l.Used.ToolCalls, Tokens: l.Used.Tokens})
			res.DoubleCounted += units(l.Used, own[l.Attempt])
			sumLedger = add(sumLedger, l.Used)
		}
		slices.SortFunc(o.Ledger, func(a, b LedgerEntry) int { return int(a.Attempt - b.Attempt) })
		res.DoubleCounted += units(sumLedger, run.Status.Budget.Used) + units(sumLedger, sumAttempts)
		if d := units(sumLedger, run.Status.Budget.Used) + units(sumLedger, sumAttempts); d > 0 {
			res.DoubleCountedRuns = append(res.DoubleCountedRuns, fmt.Sprintf("%s: ledger %+v, budget.used %+v, attempts' own %+v",
				run.Name, sumLedger, run.Status.Budget.Used, sumAttempts))
		}
		out[run.Name] = o
	}
	dupes, err := toolDupes(ctx, p.St.ToolsCallsURL, w.NS)
	if err != nil {
		return nil, err
	}
	res.ToolDispatchedTwice = dupes
	_ = names
	return out, nil
}

func add(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: a.ModelRequests + b.ModelRequests, ToolCalls: a.ToolCalls + b.ToolCalls,
		Tokens: a.Tokens + b.Tokens}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// units is |a − b| summed over the budget's units.
func units(a, b v1alpha1.Usage) int64 {
	return abs(a.ModelRequests-b.ModelRequests) + abs(a.ToolCalls-b.ToolCalls) + abs(a.Tokens-b.Tokens)
}

// toolDupes counts the calls of this namespace's tickets that the tool server
// received more than once (each run files one ticket with a unique title).
func toolDupes(ctx context.Context, callsURL, ns string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, callsURL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading the tool server's calls: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var rep toolserver.CallsReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return 0, err
	}
	count := map[string]int{}
	for _, c := range rep.Calls {
		var args struct {
			Title string `json:"title"`
		}
		if json.Unmarshal(c.Arguments, &args) != nil || !strings.HasPrefix(args.Title, ns+"/") {
			continue
		}
		count[c.Tool+" "+args.Title]++
	}
	dupes := 0
	for _, n := range count {
		if n > 1 {
			dupes += n - 1
		}
	}
	return dupes, nil
}

// BaselineFrom derives each kind's outcome from a fault-free pass; two runs
// of one kind that disagree make the baseline itself nondeterministic.
func BaselineFrom(outcomes map[string]Outcome) (Baseline, []string) {
	base := Baseline{}
	var disagree []string
	names := make([]string, 0, len(outcomes))
	for n := range outcomes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		k, o := Kind(n[:strings.LastIndexByte(n, '-')]), outcomes[n]
		if b, ok := base[k]; ok && !b.Equal(o) {
			disagree = append(disagree, fmt.Sprintf("%s: %s, earlier run of the kind %s", n, o, b))
			continue
		}
		base[k] = o
	}
	return base, disagree
}
