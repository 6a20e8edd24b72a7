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

package agent_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

// N facts recorded within one flush interval make one status write.
func TestCoalescedWrites(t *testing.T) {
	e := newEnv(t, nil)
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
	ctx := e.start(a)
	e.g.Expect(e.writes.Load()).To(Equal(int64(1)), "Start writes a first heartbeat")

	for i := range 5 {
		a.Step(i%2 == 0)
	}
	a.RecordAdvice("reviewer", "Continue")
	a.RecordFault(v1.FaultScopeTool, "Timeout", true, "http.get timed out")
	e.g.Expect(a.ModelRequest(ctx, "m", func(context.Context) (int64, error) { return 10, nil })).To(Succeed())
	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).NotTo(HaveOccurred())
	a.SetPublication(3, 1, "configmap/survey-report")
	e.g.Expect(a.SetCheckpoint(`{"step":5}`)).To(Succeed())
	e.g.Consistently(e.writes.Load, 50*time.Millisecond, poll).Should(Equal(int64(1)), "nothing is written before the interval ends")

	e.clock.Step(agent.DefaultFlushInterval)
	e.g.Eventually(e.writes.Load, wait, poll).Should(Equal(int64(2)))
	e.g.Consistently(e.writes.Load, 50*time.Millisecond, poll).Should(Equal(int64(2)), "one write for all of them")

	s := e.status()
	e.g.Expect(s.Steps).To(Equal(int64(5)))
	e.g.Expect(s.LastProgressStep).To(Equal(int64(5)))
	e.g.Expect(s.Usage).To(Equal(v1.Usage{ModelRequests: 1, ToolCalls: 1, Tokens: 10}))
	e.g.Expect(s.Advice).To(HaveLen(1))
	e.g.Expect(s.Faults).To(HaveLen(1))
	e.g.Expect(s.Calls).To(HaveLen(1))
	e.g.Expect(s.Publication).To(Equal(v1.Publication{BlocksPlanned: 3, BlocksCommitted: 1, Location: "configmap/survey-report"}))
	e.g.Expect(s.Checkpoint).To(Equal(`{"step":5}`))
	e.g.Expect(s.ObservedGeneration).To(Equal(int64(1)))
	e.g.Expect(s.HeartbeatTime.Time).To(BeTemporally("==", t0.Add(time.Second)))

	// Nothing new: the next interval writes nothing.
	e.clock.Step(agent.DefaultFlushInterval)
	e.g.Consistently(e.writes.Load, 50*time.Millisecond, poll).Should(Equal(int64(2)))
}

// With nothing else to write, a heartbeat is written every heartbeatInterval;
// a change of the interval on the RunAttempt takes effect.
func TestHeartbeat(t *testing.T) {
	e := newEnv(t, nil)
	a := e.newAgent(nil)
	e.start(a)
	hb := func() time.Time { return e.status().HeartbeatTime.Time }
	e.g.Expect(hb()).To(BeTemporally("==", t0))

	e.clock.Step(9 * time.Second)
	e.g.Consistently(e.writes.Load, 50*time.Millisecond, poll).Should(Equal(int64(1)))
	e.clock.Step(time.Second)
	e.g.Eventually(hb, wait, poll).Should(BeTemporally("==", t0.Add(10*time.Second)))
	e.clock.Step(10 * time.Second)
	e.g.Eventually(hb, wait, poll).Should(BeTemporally("==", t0.Add(20*time.Second)))

	e.updateSpec(func(s *v1.RunAttemptSpec) { s.HeartbeatInterval = &metav1.Duration{Duration: 3 * time.Second} })
	e.g.Eventually(func() time.Duration { return a.Spec().HeartbeatInterval.Duration }, wait, poll).Should(Equal(3 * time.Second))
	e.clock.Step(3 * time.Second)
	e.g.Eventually(hb, wait, poll).Should(BeTemporally("==", t0.Add(23*time.Second)))
}

// Conflicts (another writer changed the object) are retried by re-reading
// and re-applying the local facts: no fact is lost.
func TestConflictRetryKeepsFacts(t *testing.T) {
	e := newEnv(t, nil)
	a := e.newAgent(nil)
	e.start(a)

	// The operator changes the spec behind the agent's back, and the API
	// server also answers the next three writes with a conflict.
	e.updateSpec(func(s *v1.RunAttemptSpec) {
		s.Directives = []v1.Directive{{Type: v1.DirectiveDegrade, Gate: v1.GateSteps}}
	})
	e.conflicts.Store(3)
	a.Step(true)
	a.Step(false)
	a.RecordFault(v1.FaultScopeProvider, "RateLimited", true, "429")
	e.flush(a)
	e.g.Expect(e.injected.Load()).To(Equal(int64(3)))

	s := e.get()
	e.g.Expect(s.Status.Steps).To(Equal(int64(2)))
	e.g.Expect(s.Status.LastProgressStep).To(Equal(int64(1)))
	e.g.Expect(faultCount(s.Status, v1.FaultScopeProvider, "RateLimited")).To(Equal(int64(1)))
	e.g.Expect(s.Spec.Directives).To(HaveLen(1), "the status write never clobbers the operator's spec")
	e.g.Expect(a.HasDirective(v1.DirectiveDegrade)).To(BeTrue(), "the re-read also refreshed the agent's spec")
}

// Directives reach the agent loop through an accessor, a channel and a callback.
func TestDirectivesSurfaced(t *testing.T) {
	e := newEnv(t, nil)
	got := make(chan []v1.Directive, 4)
	a := e.newAgent(func(a *agent.Agent) {
		a.OnDirectives(func(d []v1.Directive) { got <- d })
	})
	e.start(a)
	e.g.Eventually(got, wait).Should(Receive(BeEmpty()), "the initial (empty) set")

	e.updateSpec(func(s *v1.RunAttemptSpec) {
		s.Directives = []v1.Directive{{Type: v1.DirectiveDegrade, Gate: v1.GateBudget, Message: "6/8 model requests"}}
	})
	e.g.Eventually(got, wait).Should(Receive(ConsistOf(HaveField("Type", v1.DirectiveDegrade))))
	e.g.Expect(a.HasDirective(v1.DirectiveDegrade)).To(BeTrue())
	e.g.Expect(a.HasDirective(v1.DirectiveCompress)).To(BeFalse())

	e.updateSpec(func(s *v1.RunAttemptSpec) {
		s.Directives = append(s.Directives, v1.Directive{Type: v1.DirectiveCompress, Gate: v1.GateBudget})
	})
	var latest []v1.Directive
	e.g.Eventually(func() int {
		select {
		case latest = <-a.DirectiveUpdates():
		default:
		}
		return len(latest)
	}, wait, poll).Should(Equal(2))
	e.g.Expect(a.HasDirective(v1.DirectiveCompress)).To(BeTrue())
}

// Terminated, superseded or deleted: the attempt's context is cancelled
// with a cause that says stop cleanly.
func TestStopCancelsContext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		do    func(e *env)
		cause error
	}{
		{"terminated", func(e *env) {
			e.updateSpec(func(s *v1.RunAttemptSpec) { s.RunPhase = v1.PhaseTerminated; s.Grant = v1.Grant{} })
		}, agent.ErrTerminated},
		{"superseded", func(e *env) {
			e.updateSpec(func(s *v1.RunAttemptSpec) { s.Superseded = true })
		}, agent.ErrSuperseded},
		{"deleted", func(e *env) {
			e.g.Expect(e.c.Delete(context.Background(), e.get())).To(Succeed())
		}, agent.ErrRunAttemptDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
			ctx := e.start(a)
			tc.do(e)
			e.g.Eventually(ctx.Done(), wait).Should(BeClosed())
			e.g.Expect(context.Cause(ctx)).To(MatchError(tc.cause))
			e.g.Expect(agent.Stopped(context.Cause(ctx))).To(BeTrue())
			_, err := a.CallTool(context.Background(), "http.get", nil)
			e.g.Expect(agent.Stopped(err)).To(BeTrue(), "no new work once stopped")
			closeCtx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			e.g.Expect(a.Close(closeCtx)).To(Succeed())
		})
	}

	// Started on an attempt that is already over: the context is cancelled at once.
	e := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.RunPhase = v1.PhaseTerminated })
	ctx := e.start(e.newAgent(nil))
	e.g.Expect(context.Cause(ctx)).To(MatchError(agent.ErrTerminated))
}

// Facts stay bounded whatever the agent does, and no occurrence is lost.
func TestBoundedFacts(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.Grant.ToolCalls = 1000 })
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
	ctx := e.start(a)

	for i := range 40 {
		a.RecordFault(v1.FaultScopeTool, fmt.Sprintf("Kind%d", i), false, "boom")
	}
	a.RecordFault(v1.FaultScopeTool, "Kind0", false, "again")
	for i := range 20 {
		a.RecordAdvice("reviewer", fmt.Sprintf("Advice%d", i))
	}
	for i := range 100 {
		n := 1 + i%3 // some fingerprints are called more often
		for range n {
			_, err := a.CallTool(ctx, "http.get", map[string]any{"url": fmt.Sprintf("u%d", i)})
			e.g.Expect(err).NotTo(HaveOccurred())
		}
	}
	e.flush(a)
	s := e.status()
	e.g.Expect(s.Faults).To(HaveLen(agent.MaxFaults))
	var total int64
	for _, f := range s.Faults {
		total += f.Count
	}
	e.g.Expect(total).To(Equal(int64(41)))
	e.g.Expect(faultCount(s, v1.FaultScopeAgent, "Other")).To(Equal(int64(40 - 31)))
	e.g.Expect(s.Advice).To(HaveLen(agent.MaxAdvice))
	e.g.Expect(s.Calls).To(HaveLen(agent.MaxCalls))
	for _, c := range s.Calls {
		e.g.Expect(c.Count).To(Equal(int64(3)), "the top-K are the most repeated calls")
	}
	e.g.Expect(a.SetCheckpoint(string(make([]byte, agent.MaxCheckpoint+1)))).To(HaveOccurred())
}

func TestFingerprintCanonical(t *testing.T) {
	g := NewWithT(t)
	type args struct {
		URL   string `json:"url"`
		Depth int    `json:"depth"`
	}
	a, err := agent.Fingerprint("http.get", args{URL: "https://x.org/?a=1&b=<2>", Depth: 2}, "")
	g.Expect(err).NotTo(HaveOccurred())
	b, _ := agent.Fingerprint("http.get", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"}, "")
	c, _ := agent.Fingerprint("http.get", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"}, "section:intro")
	d, _ := agent.Fingerprint("http.post", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"}, "")
	g.Expect(a).To(Equal(b), "key order and Go representation do not matter")
	g.Expect(a).To(HaveLen(32))
	g.Expect(a).To(MatchRegexp("^[0-9a-f]{32}$"))
	g.Expect(c).NotTo(Equal(a), "context is part of the fingerprint")
	g.Expect(d).NotTo(Equal(a), "so is the tool")
	canon, _ := agent.CanonicalJSON(map[string]any{"b": []any{2, 1}, "a": map[string]any{"z": 1, "y": "&"}})
	g.Expect(string(canon)).To(Equal(`{"a":{"y":"&","z":1},"b":[2,1]}`))
	g.Expect(agent.IdempotencyKey("survey", a)).To(Equal(agent.IdempotencyKey("survey", b)), "stable across attempts")
	g.Expect(agent.IdempotencyKey("other", a)).NotTo(Equal(agent.IdempotencyKey("survey", a)))
	_, err = agent.Fingerprint("x", func() {}, "")
	g.Expect(err).To(HaveOccurred())
}

// The SDK reads its identity from the pod's environment.
func TestConfigFromEnv(t *testing.T) {
	g := NewWithT(t)
	t.Setenv(v1.EnvNamespace, "team")
	t.Setenv(v1.EnvRunAttempt, "")
	t.Setenv(v1.EnvRun, "survey")
	t.Setenv(v1.EnvAttempt, "2")
	t.Setenv(agent.EnvKubeconfig, "/tmp/kubeconfig")
	cfg := agent.ConfigFromEnv()
	g.Expect(cfg.Namespace).To(Equal("team"))
	g.Expect(cfg.RunAttempt).To(Equal("survey-2"))
	g.Expect(cfg.Kubeconfig).To(Equal("/tmp/kubeconfig"))
	t.Setenv(v1.EnvRunAttempt, "survey-3")
	g.Expect(agent.ConfigFromEnv().RunAttempt).To(Equal("survey-3"))

	_, err := agent.New(agent.Config{})
	g.Expect(err).To(MatchError(ContainSubstring(v1.EnvNamespace)))
	g.Expect(err).To(MatchError(ContainSubstring(v1.EnvRunAttempt)))

	// No client, no kubeconfig, not in a pod: Start says so.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	a, err := agent.New(agent.Config{Namespace: "team", RunAttempt: "survey-1"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.Start(context.Background())
	g.Expect(err).To(MatchError(ContainSubstring("not in a pod")))
	g.Expect(errors.Is(err, agent.ErrClosed)).To(BeFalse())
}

// In a pod, the agent writes nothing until the operator has recorded the
// pod on the RunAttempt (only that pod's token may write the status), and
// refuses a RunAttempt that names another pod.
func TestStartWaitsForItsPod(t *testing.T) {
	e := newEnv(t, nil)
	a, err := agent.New(agent.Config{Client: e.c, Clock: e.clock, Namespace: testNS, RunAttempt: testAttempt, PodUID: "pod-1"})
	e.g.Expect(err).NotTo(HaveOccurred())
	started := make(chan error, 1)
	go func() {
		_, err := a.Start(context.Background())
		started <- err
	}()
	e.g.Eventually(e.clock.HasWaiters, wait, poll).Should(BeTrue())
	e.g.Expect(e.writes.Load()).To(BeZero())
	e.updateSpec(func(s *v1.RunAttemptSpec) { s.PodUID = "pod-1" })
	e.clock.Step(agent.DefaultPollInterval)
	e.g.Eventually(started, wait).Should(Receive(BeNil()))
	e.g.Expect(e.writes.Load()).To(Equal(int64(1)))
	closeCtx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	e.g.Expect(a.Close(closeCtx)).To(Succeed())

	other := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.PodUID = "pod-0" })
	a, _ = agent.New(agent.Config{Client: other.c, Clock: other.clock, Namespace: testNS, RunAttempt: testAttempt, PodUID: "pod-1"})
	_, err = a.Start(context.Background())
	other.g.Expect(err).To(MatchError(ContainSubstring("belongs to pod pod-0, not to this pod (pod-1)")))
	other.g.Expect(other.writes.Load()).To(BeZero())
}
