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
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

func TestAuthorityWait(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	spec := v1alpha1.RunAttemptSpec{RunPhase: v1alpha1.PhaseRunning}
	g.Expect(authorityWait(spec, now, time.Second)).To(Equal(DefaultAuthorityWait), "no deadline, no policy value: the default")
	spec.Policy.AuthorityWait = &metav1.Duration{Duration: 5 * time.Second}
	g.Expect(authorityWait(spec, now, time.Second)).To(Equal(5 * time.Second))
	spec.Policy.AuthorityWait = &metav1.Duration{}
	g.Expect(authorityWait(spec, now, time.Second)).To(BeZero(), "0s: answer at once")
	spec.Policy.AuthorityWait = nil
	spec.Deadline = &metav1.Time{Time: now.Add(10 * time.Second)}
	g.Expect(authorityWait(spec, now, time.Second)).To(Equal(9*time.Second), "never past the deadline, less the call's own time")
	spec.Deadline = &metav1.Time{Time: now.Add(500 * time.Millisecond)}
	g.Expect(authorityWait(spec, now, time.Second)).To(BeZero())
}

func TestHoldBackoffAndHoldable(t *testing.T) {
	g := NewWithT(t)
	g.Expect([]time.Duration{holdBackoff(0), holdBackoff(1), holdBackoff(2), holdBackoff(3), holdBackoff(9)}).To(Equal(
		[]time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second}))
	unavailable := fmt.Errorf("%w: down", chain.ErrUnavailable)
	g.Expect(holdable(&chain.Refusal{Err: unavailable})).To(BeTrue())
	g.Expect(holdable(&chain.Refusal{Err: unavailable, Dispatched: true})).To(BeFalse(), "the call ran: never again")
	g.Expect(holdable(&chain.Refusal{Err: unavailable, Veto: true})).To(BeFalse())
	g.Expect(holdable(&chain.Refusal{Err: errors.New("bad arguments")})).To(BeFalse(), "it would fail the same way again")
	g.Expect(holdable(nil)).To(BeFalse())

	g.Expect(holdsFor(&chain.Call{Kind: chain.KindModel})).To(BeTrue())
	g.Expect(holdsFor(&chain.Call{Kind: chain.KindTool, Effect: v1alpha1.EffectNone})).To(BeTrue())
	g.Expect(holdsFor(&chain.Call{Kind: chain.KindTool, Effect: v1alpha1.EffectExternal})).To(BeFalse(),
		"a side effect is answered at once: a stray held effect must never land behind an agent that moved on")
	g.Expect(holdsFor(&chain.Call{Kind: chain.KindTool, Effect: v1alpha1.EffectWrite})).To(BeFalse())
}
