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
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// TestTheRunsDeadlineReachesEveryCall: a call runs to its own timeout and
// never past the run's deadline, which the tool server is told; a call that
// would start with less than the minimum left is not started; while the run
// finalizes only the reserve's time (the hard deadline) counts. Issue 30:
// a run with 20 s left could start a 10-minute call.
func TestTheRunsDeadlineReachesEveryCall(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	e, u := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ToolServers[0].Timeout = &metav1.Duration{Duration: 10 * time.Minute}
		ra.Spec.Deadline = &metav1.Time{Time: now.Add(3 * time.Second)}
		ra.Spec.HardDeadline = &metav1.Time{Time: now.Add(time.Hour)}
	})
	cs := connectDoor(t, e, gatewaytest.Token)

	start := time.Now()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ticket.create", Arguments: map[string]any{"title": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(ContainSubstring("the time left before the run's deadline"))
	g.Expect(time.Since(start)).To(BeNumerically("<", time.Minute), "the hanging call ends at the run's deadline, not the server's 10m")
	calls := u.fake.Calls()
	g.Expect(calls).To(HaveLen(1))
	told, perr := time.Parse(time.RFC3339Nano, calls[0].Deadline)
	g.Expect(perr).NotTo(HaveOccurred(), "the tool server is told the deadline in _meta: %q", calls[0].Deadline)
	g.Expect(told).To(BeTemporally("==", now.Add(3*time.Second).Truncate(time.Second)), "the deadline as the RunAttempt holds it (whole seconds)")
	g.Expect(calls[0].HeaderDeadline).To(Equal(calls[0].Deadline), "and in the Agentrun-Deadline header")

	// Past the deadline: nothing is started, nothing counted.
	g.Eventually(time.Now).Should(BeTemporally(">", now.Add(3*time.Second)))
	used := e.Status().Usage
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "late"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(ContainSubstring(gatewayapi.CodeDeadlineReached))
	g.Expect(u.count("search")).To(BeZero())
	m := as(t, e, http.MethodPost, gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "late"}))
	g.Expect(m.status).To(Equal(http.StatusTooManyRequests))
	g.Expect(m.errBody().Code).To(Equal(gatewayapi.CodeDeadlineReached))
	g.Consistently(func() v1alpha1.Usage { return e.Status().Usage }, 200*time.Millisecond).Should(Equal(used), "refused calls count nothing")

	// Finalizing: the reserve's time is the hard deadline's.
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.RunPhase, s.Grant.FinalizeOnly = v1alpha1.PhaseFinalizing, true
	})
	g.Expect(as(t, e, http.MethodPost, gatewayapi.ModelPathPrefix+"/chat/completions", chatTurn(upstream.Turn{Say: "wrap up"})).status).
		To(Equal(http.StatusOK), "a finalizing run may call until its hard deadline")
}
