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
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// TestFactsAfterTerminatedAreRefused: once the run is Terminated nothing the
// agent reports can change it; a superseded attempt's facts still count.
func TestFactsAfterTerminatedAreRefused(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{})
	routes := []struct{ method, path, body string }{
		{http.MethodPost, "/agentrun/v1/self/steps", `{"progress":true}`},
		{http.MethodPost, "/agentrun/v1/self/heartbeat", ``},
		{http.MethodPost, "/agentrun/v1/self/faults", `{"scope":"Tool","kind":"Timeout"}`},
		{http.MethodPost, "/agentrun/v1/self/advice", `{"source":"reviewer","kind":"Continue"}`},
		{http.MethodPut, "/agentrun/v1/self/checkpoint", `{"checkpoint":"c"}`},
		{http.MethodPost, "/agentrun/v1/self/finish", `{}`},
		{http.MethodPost, "/agentrun/v1/self/settle", `{}`},
	}
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Superseded = true })
	resp := e.Do(http.MethodPost, "/agentrun/v1/self/steps", gatewaytest.Token, []byte(`{"progress":true}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "a superseded attempt's facts are still accepted")
	_ = resp.Body.Close()

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase = v1alpha1.PhaseTerminated })
	for _, r := range routes {
		var body []byte
		if r.body != "" {
			body = []byte(r.body)
		}
		resp := e.Do(r.method, r.path, gatewaytest.Token, body)
		g.Expect(resp.StatusCode).To(Equal(http.StatusConflict), "%s %s", r.method, r.path)
		g.Expect(errorBody(g, resp).Code).To(Equal(gatewayapi.CodeRunTerminated), "%s %s", r.method, r.path)
	}
	g.Expect(e.Status().Publication.Settled).To(BeFalse(), "no settlement after the end")
}

// TestATokenOfAPodOnAnotherNodeIsRefused: one gateway per node, so a run's
// counts are never split between instances.
func TestATokenOfAPodOnAnotherNodeIsRefused(t *testing.T) {
	g := NewWithT(t)
	c := fake.NewClientBuilder().WithScheme(gatewaytest.Scheme()).WithObjects(gatewaytest.Attempt()).
		WithStatusSubresource(&v1alpha1.RunAttempt{}).Build()
	id := gateway.Identity{Username: "system:serviceaccount:team:agentrun-runner", Namespace: gatewaytest.Namespace,
		PodName: gatewaytest.RunAttempt, PodUID: gatewaytest.PodUID}
	here, there := id, id
	here.NodeName, there.NodeName = "node-a", "node-b"
	gw, err := gateway.New(gateway.Options{Client: c, NodeName: "node-a", Registry: prometheus.NewRegistry(),
		Authenticator: gateway.StaticTokens{"here": here, "there": there}})
	g.Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	get := func(token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/agentrun/v1/self", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		return resp
	}
	resp := get("there")
	g.Expect(resp.StatusCode).To(Equal(http.StatusMisdirectedRequest))
	eb := errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeWrongNode))
	g.Expect(eb.Message).To(ContainSubstring("runs on node node-b"))
	resp = get("here")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
}

// TestCrashOverrunsTheGrantOnlyWithoutDurableAdmission: coalesced counts of
// the last flush interval die with a crashed gateway, so its successor admits
// those requests again; with durable admission no crash lets a run cross its
// grant.
func TestCrashOverrunsTheGrantOnlyWithoutDurableAdmission(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(map[bool]string{false: "coalesced", true: "durable"}[durable], func(t *testing.T) {
			g := NewWithT(t)
			e := gatewaytest.Start(t, gatewaytest.Options{
				FlushInterval:    time.Hour, // nothing coalesced is written before the crash
				DurableAdmission: durable,
				Mutate:           func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = 2 },
			})
			served := func(n int) (ok int) {
				for range n {
					resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
					if resp.StatusCode == http.StatusOK {
						ok++
					}
					_ = resp.Body.Close()
				}
				return ok
			}
			g.Expect(served(2)).To(Equal(2))
			e.Crash()
			e.RestartWithFlush(20 * time.Millisecond)
			again := served(3)
			if durable {
				g.Expect(again).To(BeZero(), "the grant holds across the crash")
				g.Expect(e.Upstream.Requests.Load()).To(BeEquivalentTo(2))
			} else {
				g.Expect(again).To(Equal(2), "the lost counts were admitted again: at most one flush interval's")
			}
		})
	}
}

// TestTheReserveIsServedOnTopOfTheGatewaysOwnCount: the operator finalized
// on the usage it had seen (grant = that + the reserve) while the gateway was
// still admitting research calls under the running grant; the reserve is not
// eaten by them.
func TestTheReserveIsServedOnTopOfTheGatewaysOwnCount(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 4, ToolCalls: 3}
		ra.Spec.Mode = v1alpha1.ModeFull
		ra.Spec.Policy.Tools[2].Risk = v1alpha1.RiskMedium // report.publish runs without an approval in Full
	}})
	call := func(tool string) int {
		resp := e.Do(http.MethodPost, "/agentrun/v1/self/toolcalls", gatewaytest.Token,
			[]byte(`{"tool":"`+tool+`","arguments":{"section":"A","content":"x","n":`+strconv.Itoa(int(e.Writes.Load()))+`}}`))
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	g.Expect(call("http.get")).To(Equal(http.StatusOK))
	g.Expect(call("http.get")).To(Equal(http.StatusOK))
	// The operator decides on 2 tool calls: grant 2 + reserve 1 …
	decided := v1alpha1.Grant{ModelRequests: 5, ToolCalls: 3, FinalizeOnly: true,
		Reserve: &v1alpha1.Usage{ModelRequests: 1, ToolCalls: 1}}
	// … while a third research call is admitted under the running grant.
	g.Expect(call("http.get")).To(Equal(http.StatusOK))
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase, s.Grant = v1alpha1.PhaseFinalizing, decided })

	g.Expect(call("http.get")).To(Equal(http.StatusTooManyRequests), "research is over")
	g.Expect(call("report.publish")).To(Equal(http.StatusOK), "the reserve's tool call, on top of the 3 admitted")
	g.Expect(call("report.publish")).To(Equal(http.StatusTooManyRequests), "and no more")
}

// TestARefusalOnTheGrantWaitsForItsCounts: the agent stops at a grant
// refusal and waits for the operator, who decides the exhaustion from the
// written counts. A refusal is therefore answered only once the counts it
// was decided on are durable: a gateway killed right after it cannot come
// back a count short with the run waiting for its deadline (chaos suite,
// gateway-kill). A repeated refusal writes nothing more.
func TestARefusalOnTheGrantWaitsForItsCounts(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{
		FlushInterval: time.Hour, // nothing coalesced is written unless something forces it
		Mutate: func(ra *v1alpha1.RunAttempt) {
			ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 2, ToolCalls: 1}
		},
	})
	model := func() reply {
		return as(t, e, http.MethodPost, gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "ok", Tokens: 3}))
	}
	g.Expect(model().status).To(Equal(http.StatusOK))
	g.Expect(model().status).To(Equal(http.StatusOK))
	admit(t, e, "http.get", map[string]any{"url": "https://example.com/a"})
	g.Expect(e.Status().Usage.ModelRequests).To(BeZero(), "the admissions are coalesced: nothing written yet")

	r := model()
	g.Expect(r.status).To(Equal(http.StatusTooManyRequests))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(e.Status().Usage).To(Equal(v1alpha1.Usage{ModelRequests: 2, ToolCalls: 1, Tokens: 6}),
		"the refusal was answered after the counts it was decided on were written")

	raw, _ := json.Marshal(map[string]any{"url": "https://example.com/b"})
	tr := as(t, e, http.MethodPost, self("/toolcalls"), gatewayapi.ToolCallRequest{Tool: "http.get", Arguments: raw})
	g.Expect(tr.status).To(Equal(http.StatusTooManyRequests))
	g.Expect(tr.errBody().Code).To(Equal(gatewayapi.CodeGrantExhausted))

	writes := e.Writes.Load()
	for range 5 {
		g.Expect(model().status).To(Equal(http.StatusTooManyRequests))
	}
	g.Expect(e.Writes.Load()).To(Equal(writes), "refusals on counts already written cost no write")

	e.Crash()
	e.RestartWithFlush(20 * time.Millisecond)
	g.Expect(model().status).To(Equal(http.StatusTooManyRequests), "the successor resumes from the written counts")
	g.Expect(e.Upstream.Requests.Load()).To(BeEquivalentTo(2))
}

// TestTheReserveIsServedOnceAcrossARestart: the usage the reserve is served
// on top of is a fact the gateway records durably when it first serves the
// reserve, not a value a restarted gateway re-derives from its own count (it
// would then serve the whole reserve again on top of what the first process
// served from it). Issue 29, reproduced by a review: a finalize-only grant of
// 2 served 2 requests, then 2 more after a restart.
func TestTheReserveIsServedOnceAcrossARestart(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{
		FlushInterval: 20 * time.Millisecond,
		Mutate:        func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = 3 },
	})
	model := func() int {
		return as(t, e, http.MethodPost, gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "ok", Tokens: 3})).status
	}
	g.Expect(model()).To(Equal(http.StatusOK))
	g.Expect(model()).To(Equal(http.StatusOK))
	// The operator finalizes on those 2 requests with a reserve of 2.
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.RunPhase = v1alpha1.PhaseFinalizing
		s.Grant = v1alpha1.Grant{ModelRequests: 4, ToolCalls: 1, FinalizeOnly: true,
			Reserve: &v1alpha1.Usage{ModelRequests: 2}}
	})
	g.Expect(model()).To(Equal(http.StatusOK), "the reserve's first request")
	g.Expect(model()).To(Equal(http.StatusOK), "the reserve's second request")
	g.Expect(model()).To(Equal(http.StatusTooManyRequests), "the reserve is used up")
	g.Eventually(func() int64 { return e.Status().Usage.ModelRequests }).Should(BeEquivalentTo(4), "the counts are written")
	g.Expect(e.Status().FinalizeBase).To(Equal(&v1alpha1.Usage{ModelRequests: 2, Tokens: 6}),
		"the base the reserve is served on is on the RunAttempt")

	e.Crash()
	e.Restart()
	g.Expect(model()).To(Equal(http.StatusTooManyRequests), "a restarted gateway does not serve the reserve again")
	g.Expect(e.Upstream.Requests.Load()).To(BeEquivalentTo(4))
}
