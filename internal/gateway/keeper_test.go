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

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// chatTurn is a chat completion request the scripted upstream answers with turn.
func chatTurn(turn upstream.Turn) map[string]any {
	return map[string]any{
		"model":              gatewaytest.Model,
		"messages":           []map[string]any{{"role": "user", "content": "next?"}},
		upstream.ScriptField: turn,
	}
}

func faultOf(s v1alpha1.RunAttemptStatus, scope v1alpha1.FaultScope, kind string) (v1alpha1.Fault, bool) {
	for _, f := range s.Faults {
		if f.Scope == scope && f.Kind == kind {
			return f, true
		}
	}
	return v1alpha1.Fault{}, false
}

// Coalesced facts (steps, advice, faults, checkpoint, usage, calls,
// heartbeat) are written together: none is written before the flush
// interval ends, and an urgent fact (finish) writes all of them at once, in
// one write.
func TestCoalescedWrites(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{FlushInterval: time.Hour})
	for i := range 25 {
		g.Expect(as(t, e, "POST", self("/steps"), map[string]any{"progress": i%2 == 0}).status).To(Equal(http.StatusOK))
	}
	g.Expect(as(t, e, "POST", self("/advice"), `{"source":"reviewer","kind":"Continue"}`).status).To(Equal(http.StatusNoContent))
	g.Expect(as(t, e, "POST", self("/faults"), `{"scope":"Tool","kind":"Timeout","retryable":true,"message":"http.get timed out"}`).status).
		To(Equal(http.StatusNoContent))
	g.Expect(as(t, e, "PUT", self("/checkpoint"), `{"checkpoint":"{\"step\":25}"}`).status).To(Equal(http.StatusNoContent))
	g.Expect(as(t, e, "POST", gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "ok", Tokens: 10})).status).
		To(Equal(http.StatusOK))
	call := admit(t, e, "http.get", map[string]any{"url": "u"})
	g.Expect(call.WriteAhead).To(BeFalse(), "a read needs no write-ahead record")
	g.Expect(as(t, e, "POST", self("/toolcalls/"+call.ID+"/outcome"), `{}`).status).To(Equal(http.StatusNoContent))
	g.Consistently(e.Writes.Load, 100*time.Millisecond, apiPoll).Should(BeZero(), "nothing is written before the interval ends")

	g.Expect(as(t, e, "POST", self("/finish"), `{}`).status).To(Equal(http.StatusOK))
	g.Expect(e.Writes.Load()).To(Equal(int64(1)), "one write for all of them, done before the answer")
	s := e.Status()
	g.Expect(s.Steps).To(Equal(int64(25)))
	g.Expect(s.LastProgressStep).To(Equal(int64(25)))
	g.Expect(s.Usage).To(Equal(v1alpha1.Usage{ModelRequests: 1, ToolCalls: 1, Tokens: 10}))
	g.Expect(s.Advice).To(ConsistOf(v1alpha1.Advice{Source: "reviewer", Kind: "Continue", Count: 1}))
	g.Expect(s.Faults).To(ConsistOf(v1alpha1.Fault{Scope: v1alpha1.FaultScopeTool, Kind: "Timeout", Retryable: true, Count: 1,
		LastMessage: "http.get timed out"}))
	g.Expect(s.Calls).To(HaveLen(1))
	g.Expect(s.Checkpoint).To(Equal(`{"step":25}`))
	g.Expect(s.FinishProposed).To(BeTrue())
	g.Expect(s.HeartbeatTime).NotTo(BeNil())
	g.Expect(s.ObservedGeneration).To(Equal(int64(1)))
}

// With a short flush interval a burst of facts is written in far fewer
// writes than facts, and nothing new means no write.
func TestCoalescedWritesOnTheInterval(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{FlushInterval: 50 * time.Millisecond})
	for range 100 {
		g.Expect(as(t, e, "POST", self("/steps"), `{"progress":true}`).status).To(Equal(http.StatusOK))
	}
	g.Eventually(func() int64 { return e.Status().Steps }, apiWait, apiPoll).Should(Equal(int64(100)))
	writes := e.Writes.Load()
	g.Expect(writes).To(BeNumerically("<=", 20), "100 steps, far fewer writes")
	g.Consistently(e.Writes.Load, 200*time.Millisecond, apiPoll).Should(Equal(writes), "nothing new, nothing written")
}

// A graceful stop (Shutdown) writes what is pending.
func TestShutdownWritesPendingFacts(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{FlushInterval: time.Hour})
	for range 3 {
		as(t, e, "POST", self("/steps"), `{}`)
	}
	g.Expect(e.Writes.Load()).To(BeZero())
	ctx, cancel := context.WithTimeout(context.Background(), apiWait)
	defer cancel()
	g.Expect(e.Gateway.Shutdown(ctx)).To(Succeed())
	g.Expect(e.Status().Steps).To(Equal(int64(3)))
}

// Conflicts (the operator changed the RunAttempt since the gateway read it,
// or the API server says so) are retried by re-reading the RunAttempt and
// re-applying the facts: no fact is lost, the operator's spec is never
// clobbered, and the re-read refreshes the gateway's view.
func TestConflictRetryKeepsFacts(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{FlushInterval: time.Hour})
	g.Expect(as(t, e, "GET", self(""), nil).status).To(Equal(http.StatusOK))

	// The operator changes the spec; the gateway's informer has not told it yet.
	ra := e.Get()
	ra.Spec.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveDegrade, Gate: v1alpha1.GateSteps}}
	ra.Generation++
	g.Expect(e.Client.Update(context.Background(), ra)).To(Succeed())
	as(t, e, "POST", self("/steps"), `{"progress":true}`)
	as(t, e, "POST", self("/steps"), `{"progress":false}`)
	as(t, e, "POST", self("/faults"), `{"scope":"Provider","kind":"RateLimited","retryable":true,"message":"429"}`)
	g.Expect(as(t, e, "POST", self("/finish"), `{}`).status).To(Equal(http.StatusOK))
	g.Expect(e.Metric("agentrun_gateway_status_writes_total", map[string]string{"result": "conflict"})).To(Equal(1.0))

	fresh := e.Get()
	g.Expect(fresh.Status.Steps).To(Equal(int64(2)))
	g.Expect(fresh.Status.LastProgressStep).To(BeZero(), "a claim of progress is not evidence")
	g.Expect(fresh.Status.FinishProposed).To(BeTrue())
	f, ok := faultOf(fresh.Status, v1alpha1.FaultScopeProvider, "RateLimited")
	g.Expect(ok).To(BeTrue())
	g.Expect(f.Count).To(Equal(int64(1)))
	g.Expect(fresh.Spec.Directives).To(HaveLen(1), "the status write never clobbers the operator's spec")
	g.Expect(fresh.Status.ObservedGeneration).To(Equal(fresh.Generation))
	var view gatewayapi.Attempt
	as(t, e, "GET", self(""), nil).into(t, &view)
	g.Expect(view.Directives).To(HaveLen(1), "the re-read refreshed the gateway's view")

	// The API server answers the next three writes with a conflict.
	e.Conflicts.Store(3)
	as(t, e, "POST", self("/steps"), `{"progress":true}`)
	g.Expect(as(t, e, "POST", self("/faults"), `{"scope":"Agent","kind":"Stuck","escalate":true}`).status).To(Equal(http.StatusNoContent))
	g.Expect(e.Conflicts.Load()).To(BeZero())
	g.Expect(e.Metric("agentrun_gateway_status_writes_total", map[string]string{"result": "conflict"})).To(Equal(4.0))
	s := e.Status()
	g.Expect(s.Steps).To(Equal(int64(3)))
	g.Expect(s.LastProgressStep).To(BeZero(), "claims of progress are not evidence")
	f, _ = faultOf(s, v1alpha1.FaultScopeAgent, "Stuck")
	g.Expect(f.Escalated).To(BeTrue())
	_, ok = faultOf(s, v1alpha1.FaultScopeProvider, "RateLimited")
	g.Expect(ok).To(BeTrue())
}

// While the API server is unreachable coalesced facts are accepted and
// kept; an urgent request (an escalation, a finish, a write-ahead record)
// is answered 503 not_persisted at once, and a side effect is not admitted.
// Once the API server is back every kept fact is written.
func TestAPIServerDownKeepsFacts(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{})
	g.Expect(as(t, e, "POST", self("/steps"), `{}`).status).To(Equal(http.StatusOK))
	g.Eventually(func() int64 { return e.Status().Steps }, apiWait, apiPoll).Should(Equal(int64(1)))

	e.Down.Store(true)
	g.Expect(as(t, e, "POST", self("/steps"), `{"progress":true}`).status).To(Equal(http.StatusOK))
	g.Expect(as(t, e, "POST", self("/advice"), `{"source":"reviewer","kind":"NeedsChanges"}`).status).To(Equal(http.StatusNoContent))
	for _, tc := range []struct{ method, path, body, says string }{
		{"POST", self("/faults"), `{"scope":"Provider","kind":"Unauthorized","escalate":true,"message":"bad key"}`, "escalation was recorded but is not yet durable"},
		{"POST", self("/finish"), `{}`, "finish proposal was recorded but is not yet durable"},
		{"POST", self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"x"}}`, "must not be dispatched"},
		{"POST", self("/settle"), `{}`, "settlement was recorded but is not yet durable"},
	} {
		r := as(t, e, tc.method, tc.path, tc.body)
		g.Expect(r.status).To(Equal(http.StatusServiceUnavailable), tc.path)
		g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeNotPersisted), tc.path)
		g.Expect(r.errBody().Message).To(ContainSubstring(tc.says))
		g.Expect(r.errBody().Message).To(ContainSubstring("connection refused"), "the answer says why")
	}
	// A read goes on: nothing needs persisting before it.
	read := admit(t, e, "http.get", map[string]any{"url": "u"})
	g.Expect(as(t, e, "POST", self("/toolcalls/"+read.ID+"/outcome"), `{}`).status).To(Equal(http.StatusNoContent))
	g.Expect(e.Metric("agentrun_gateway_status_writes_total", map[string]string{"result": "error"})).To(BeNumerically(">", 0))
	g.Expect(e.Status().Steps).To(Equal(int64(1)), "nothing reached the API server")

	e.Down.Store(false)
	g.Eventually(func(g Gomega) {
		s := e.Status()
		g.Expect(s.Steps).To(Equal(int64(2)))
		g.Expect(s.LastProgressStep).To(Equal(int64(2)))
		g.Expect(s.Advice).To(ConsistOf(v1alpha1.Advice{Source: "reviewer", Kind: "NeedsChanges", Count: 1}))
		f, ok := faultOf(s, v1alpha1.FaultScopeProvider, "Unauthorized")
		g.Expect(ok).To(BeTrue(), "the escalation was kept")
		g.Expect(f.Escalated).To(BeTrue())
		g.Expect(s.FinishProposed).To(BeTrue(), "the finish proposal was kept")
		g.Expect(s.Publication.Settled).To(BeTrue(), "the settlement was kept")
		g.Expect(s.InFlight).To(BeEmpty(), "the refused side effect's record is withdrawn")
		g.Expect(s.Usage.ToolCalls).To(Equal(int64(2)), "counted conservatively from the admission on")
	}, apiWait, apiPoll).Should(Succeed())
}

// Every status version the API server holds has counters no lower than the
// one before, whatever happens meanwhile: conflicts, an unreachable API
// server, a gateway crash and restart.
func TestCountersNeverGoBackwards(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 1000, ToolCalls: 1000}
	}})
	w, err := e.Client.Watch(t.Context(), &v1alpha1.RunAttemptList{}, client.InNamespace(gatewaytest.Namespace))
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	var seen []v1alpha1.RunAttemptStatus
	go func() {
		for ev := range w.ResultChan() {
			if ra, ok := ev.Object.(*v1alpha1.RunAttempt); ok && ev.Type == watch.Modified {
				mu.Lock()
				seen = append(seen, ra.Status)
				mu.Unlock()
			}
		}
	}()

	work := func(n int) {
		for i := range n {
			as(t, e, "POST", self("/steps"), map[string]any{"progress": i%3 == 0})
			as(t, e, "POST", self("/faults"), `{"scope":"Tool","kind":"Timeout"}`)
			as(t, e, "POST", gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "ok", Tokens: 3}))
			c := admit(t, e, "notes.write", map[string]any{"text": fmt.Sprint(i)})
			as(t, e, "POST", self("/toolcalls/"+c.ID+"/outcome"), `{}`)
		}
	}
	work(5)
	e.Conflicts.Store(4)
	work(5)
	e.Down.Store(true)
	for range 5 {
		as(t, e, "POST", self("/steps"), `{}`)
	}
	e.Down.Store(false)
	work(3)
	e.Crash()
	e.Restart()
	work(3)
	g.Eventually(func() int64 { return e.Status().Steps }, apiWait, apiPoll).Should(BeNumerically(">=", 16))
	g.Eventually(func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }, apiWait, apiPoll).Should(BeNumerically(">", 5))

	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(seen); i++ {
		prev, cur := seen[i-1], seen[i]
		g.Expect(cur.Steps).To(BeNumerically(">=", prev.Steps), "steps, version %d", i)
		g.Expect(cur.LastProgressStep).To(BeNumerically(">=", prev.LastProgressStep), "lastProgressStep, version %d", i)
		g.Expect(cur.Usage.ModelRequests).To(BeNumerically(">=", prev.Usage.ModelRequests), "modelRequests, version %d", i)
		g.Expect(cur.Usage.ToolCalls).To(BeNumerically(">=", prev.Usage.ToolCalls), "toolCalls, version %d", i)
		g.Expect(cur.Usage.Tokens).To(BeNumerically(">=", prev.Usage.Tokens), "tokens, version %d", i)
		for _, pf := range prev.Faults {
			f, ok := faultOf(cur, pf.Scope, pf.Kind)
			g.Expect(ok).To(BeTrue(), "fault %s/%s dropped at version %d", pf.Scope, pf.Kind, i)
			g.Expect(f.Count).To(BeNumerically(">=", pf.Count))
		}
		for _, pc := range prev.Calls {
			for _, c := range cur.Calls {
				if c.Fingerprint == pc.Fingerprint {
					g.Expect(c.Count).To(BeNumerically(">=", pc.Count))
				}
			}
		}
	}
}

// A restarted gateway resumes from the RunAttempt status: nothing written is
// counted twice, a crash loses at most the coalesced facts recorded since
// the last write (never a write-ahead record), a call admitted before the
// crash can still report its outcome, and the grant holds against what the
// status says was used.
func TestRestartResumesFromStatus(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{
		FlushInterval: time.Hour, // only urgent facts are written before the crash
		Mutate: func(ra *v1alpha1.RunAttempt) {
			ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 2, ToolCalls: 10}
		},
	})
	for range 3 {
		as(t, e, "POST", self("/steps"), `{"progress":true}`)
	}
	g.Expect(as(t, e, "POST", gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "ok", Tokens: 7})).status).
		To(Equal(http.StatusOK))
	// The write-ahead record is urgent: it writes everything above with it.
	call := admit(t, e, "notes.write", map[string]any{"text": "x"})
	g.Expect(call.WriteAhead).To(BeTrue())
	s := e.Status()
	g.Expect(s.Steps).To(Equal(int64(3)))
	g.Expect(s.Usage).To(Equal(v1alpha1.Usage{ModelRequests: 1, ToolCalls: 1, Tokens: 7}))
	g.Expect(s.InFlight).To(ConsistOf(HaveField("ID", call.ID)))

	// Coalesced facts after the last write: lost in the crash.
	as(t, e, "POST", self("/steps"), `{}`)
	as(t, e, "POST", self("/steps"), `{}`)
	g.Expect(as(t, e, "POST", self("/toolcalls/"+call.ID+"/outcome"), `{}`).status).To(Equal(http.StatusNoContent))
	writes := e.Writes.Load()
	e.Crash()
	g.Consistently(e.Writes.Load, 100*time.Millisecond, apiPoll).Should(Equal(writes), "a crashed gateway writes nothing more")
	s = e.Status()
	g.Expect(s.Steps).To(Equal(int64(3)))
	g.Expect(s.InFlight).To(ConsistOf(HaveField("ID", call.ID)), "the outcome was lost: the record says the effect may have happened")

	e.RestartWithFlush(20 * time.Millisecond)
	var step gatewayapi.StepResponse
	as(t, e, "POST", self("/steps"), `{}`).into(t, &step)
	g.Expect(step.Step).To(Equal(int64(4)), "resumed from the status: not counted twice, the unwritten two lost")
	var view gatewayapi.Attempt
	as(t, e, "GET", self(""), nil).into(t, &view)
	g.Expect(view.Used).To(Equal(v1alpha1.Usage{ModelRequests: 1, ToolCalls: 1, Tokens: 7}))
	g.Expect(view.LastProgressStep).To(Equal(int64(3)))

	// The call admitted by the crashed gateway is known by its record.
	g.Expect(as(t, e, "POST", self("/toolcalls/"+call.ID+"/outcome"), `{}`).status).To(Equal(http.StatusNoContent))
	g.Eventually(func() []v1alpha1.InFlightEffect { return e.Status().InFlight }, apiWait, apiPoll).Should(BeEmpty())

	// The grant holds: one model request of two was used before the crash.
	g.Expect(as(t, e, "POST", gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "ok", Tokens: 5})).status).
		To(Equal(http.StatusOK))
	r := as(t, e, "POST", gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "never", Tokens: 5}))
	g.Expect(r.status).To(Equal(http.StatusTooManyRequests))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(r.errBody().Message).To(ContainSubstring("2/2 model requests"))
	g.Expect(e.Upstream.Requests.Load()).To(Equal(int64(2)))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }, apiWait, apiPoll).
		Should(Equal(v1alpha1.Usage{ModelRequests: 2, ToolCalls: 1, Tokens: 12}))
}

// Facts stay bounded whatever the agent reports, and no occurrence is
// lost: fault and advice kinds beyond the bound are counted in one Other
// entry (an escalation there too), status.calls is the top-K by count,
// messages are cut.
func TestBoundedFacts(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.ToolCalls = 1000
	}})
	fault := func(kind string, escalate bool, msg string) {
		raw, _ := json.Marshal(gatewayapi.FaultRequest{Scope: v1alpha1.FaultScopeTool, Kind: kind, Escalate: escalate, Message: msg})
		g.Expect(as(t, e, "POST", self("/faults"), string(raw)).status).To(Equal(http.StatusNoContent))
	}
	for i := range 40 {
		fault(fmt.Sprintf("Kind%d", i), false, "boom")
	}
	fault("Kind0", false, strings.Repeat("é", 600))
	fault("Kind77", true, "the last straw")
	for i := range 20 {
		as(t, e, "POST", self("/advice"), map[string]any{"source": "reviewer", "kind": fmt.Sprintf("Advice%d", i)})
	}
	for i := range 100 {
		for range 1 + i%3 { // some fingerprints are called more often
			c := admit(t, e, "http.get", map[string]any{"url": fmt.Sprintf("u%d", i)})
			as(t, e, "POST", self("/toolcalls/"+c.ID+"/outcome"), `{}`)
		}
	}
	g.Eventually(func() int64 { return e.Status().Usage.ToolCalls }, apiWait, apiPoll).Should(Equal(int64(34 + 33*2 + 33*3)))
	s := e.Status()
	g.Expect(s.Faults).To(HaveLen(32))
	var total int64
	for _, f := range s.Faults {
		total += f.Count
	}
	g.Expect(total).To(Equal(int64(42)), "every occurrence is counted")
	other, ok := faultOf(s, v1alpha1.FaultScopeAgent, "Other")
	g.Expect(ok).To(BeTrue())
	g.Expect(other.Count).To(Equal(int64(40 - 31 + 1)))
	g.Expect(other.Escalated).To(BeTrue(), "an escalation is never lost")
	g.Expect(other.LastMessage).To(ContainSubstring("Tool/Kind77: the last straw"))
	k0, _ := faultOf(s, v1alpha1.FaultScopeTool, "Kind0")
	g.Expect(k0.Count).To(Equal(int64(2)))
	g.Expect(len(k0.LastMessage)).To(BeNumerically("<=", 512))
	g.Expect(strings.ToValidUTF8(k0.LastMessage, "?")).To(Equal(k0.LastMessage), "cut on a rune boundary")
	g.Expect(s.Advice).To(HaveLen(16))
	g.Expect(s.Calls).To(HaveLen(32))
	for _, c := range s.Calls {
		g.Expect(c.Count).To(Equal(int64(3)), "the top-K are the most repeated calls")
	}
}
