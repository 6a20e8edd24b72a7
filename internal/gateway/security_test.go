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

package gateway

import (
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/pkg/permission"
)

type postures struct {
	mu  sync.Mutex
	got []*v1alpha1.SecurityPosture
}

func (p *postures) notify(_ types.NamespacedName, x *v1alpha1.SecurityPosture) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, x)
}

func (p *postures) list() []*v1alpha1.SecurityPosture {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*v1alpha1.SecurityPosture(nil), p.got...)
}

var policyKey = types.NamespacedName{Namespace: "team", Name: "research"}

func degradedCfg(posture v1alpha1.DegradedPosture) v1alpha1.SecurityDegraded {
	return v1alpha1.SecurityDegraded{ErrorRate: 50, Window: &metav1.Duration{Duration: 10 * time.Second},
		MinCalls: 4, Posture: posture}
}

// auth fails: from minCalls calls at errorRate the policy is degraded, and
// it recovers one full window after the threshold was last reached, even
// without further calls (the recovery timer).
func TestSecurityTrackerDegradesAndRecovers(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	var seen postures
	tr := newSecurityTracker(clk, seen.notify)
	obs := tr.observer(policyKey, degradedCfg(v1alpha1.PostureConfirmAll))
	call := func(name string, class v1alpha1.InterceptorClass, outcome string) {
		obs(chain.Observation{Kind: chain.KindTool, Interceptor: name, Class: class, Phase: v1alpha1.InterceptorPre, Outcome: outcome})
	}

	// Three failures of four needed calls: minCalls is not reached.
	for range 3 {
		call("auth", v1alpha1.ClassSecurity, chain.OutcomeError)
	}
	g.Expect(tr.current(policyKey)).To(BeNil())
	// A model request's auth never counts (the door's token cache answers
	// it), nor does a Resource interceptor's failure.
	for range 10 {
		obs(chain.Observation{Kind: chain.KindModel, Interceptor: "auth", Class: v1alpha1.ClassSecurity,
			Outcome: chain.OutcomeError})
	}
	for range 10 {
		call("rate_limit", v1alpha1.ClassResource, chain.OutcomeError)
	}
	g.Expect(tr.current(policyKey)).To(BeNil())
	// A veto is an answer: 3 failures of 4 calls (75%) degrade.
	call("auth", v1alpha1.ClassSecurity, chain.OutcomeVeto)
	p := tr.current(policyKey)
	g.Expect(p).NotTo(BeNil())
	g.Expect(p.Posture).To(Equal(v1alpha1.PostureConfirmAll))
	g.Expect(p.Interceptor).To(Equal("auth"))
	g.Expect(p.ErrorRate).To(Equal(int32(75)))
	g.Expect(p.Message).To(ContainSubstring("Security interceptor auth failed 75% of its calls within 10s"))
	g.Expect(seen.list()).To(HaveLen(1))

	// Successes after the failures: the first two still reach the
	// threshold (3 of 5, 3 of 6), so the window runs from them.
	clk.Step(5 * time.Second)
	for range 4 {
		call("auth", v1alpha1.ClassSecurity, chain.OutcomeOK)
	}
	g.Expect(tr.current(policyKey)).NotTo(BeNil())
	clk.Step(5 * time.Second)
	g.Expect(tr.current(policyKey)).NotTo(BeNil(), "the failures left the window, but the last breach is 5s old")

	// A full window after the last breach, with no call at all: normal
	// again, told by the recovery timer.
	clk.Step(5 * time.Second)
	g.Eventually(seen.list).Should(HaveLen(2))
	g.Expect(seen.list()[1]).To(BeNil())
	g.Expect(tr.current(policyKey)).To(BeNil())
}

// A breach keeps the posture: the window runs from the last one.
func TestSecurityTrackerWindowRunsFromTheLastBreach(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	var seen postures
	tr := newSecurityTracker(clk, seen.notify)
	obs := tr.observer(policyKey, degradedCfg(v1alpha1.PostureDenyWrites))
	fail := func() {
		obs(chain.Observation{Kind: chain.KindTool, Interceptor: "auth", Class: v1alpha1.ClassSecurity, Outcome: chain.OutcomeError})
	}
	for range 4 {
		fail()
	}
	g.Expect(tr.current(policyKey)).NotTo(BeNil())
	clk.Step(8 * time.Second)
	fail() // 5 of 5 in the window: a new breach
	clk.Step(8 * time.Second)
	g.Expect(tr.current(policyKey)).NotTo(BeNil(), "only 8s since the last breach")
	clk.Step(2 * time.Second)
	g.Expect(tr.current(policyKey)).To(BeNil())
	g.Expect(seen.list()).To(HaveLen(2))
}

func TestDegradedAdmission(t *testing.T) {
	write := v1alpha1.Tool{Name: "notes.write", Effect: v1alpha1.EffectWrite, Risk: v1alpha1.RiskMedium}
	read := v1alpha1.Tool{Name: "web.search", Effect: v1alpha1.EffectNone, Risk: v1alpha1.RiskLow}
	allow := permission.Result{Verdict: permission.Allow, Reason: "auto-approved"}
	deny := permission.Result{Verdict: permission.Deny, Reason: "Plan denies writes"}
	confirmAll := &v1alpha1.SecurityPosture{Posture: v1alpha1.PostureConfirmAll, Message: "auth fails"}
	denyWrites := &v1alpha1.SecurityPosture{Posture: v1alpha1.PostureDenyWrites, Message: "auth fails"}
	tests := map[string]struct {
		posture     *v1alpha1.SecurityPosture
		tool        v1alpha1.Tool
		in          permission.Result
		wantVerdict permission.Verdict
		wantCode    string
	}{
		"normal: unchanged":                       {nil, write, allow, permission.Allow, ""},
		"ConfirmAll: an allowed write confirms":   {confirmAll, write, allow, permission.Confirm, ""},
		"ConfirmAll: a read is unaffected":        {confirmAll, read, allow, permission.Allow, ""},
		"ConfirmAll: a denied write stays denied": {confirmAll, write, deny, permission.Deny, ""},
		"DenyWrites: a write is refused":          {denyWrites, write, allow, "", gatewayapi.CodeSecurityDegraded},
		"DenyWrites: a read is unaffected":        {denyWrites, read, allow, permission.Allow, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			v, e := degradedAdmission(tc.posture, tc.tool, tc.in)
			if tc.wantCode != "" {
				g.Expect(e).To(HaveOccurred())
				g.Expect(e.body.Code).To(Equal(tc.wantCode))
				g.Expect(e.body.Message).To(ContainSubstring("auth fails"))
				return
			}
			g.Expect(e).NotTo(HaveOccurred())
			g.Expect(v.Verdict).To(Equal(tc.wantVerdict))
			if tc.wantVerdict == permission.Confirm {
				g.Expect(v.Reason).To(ContainSubstring("posture ConfirmAll"))
			}
		})
	}
}
