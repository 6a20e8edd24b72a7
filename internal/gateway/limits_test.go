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

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
)

// Security review 25, item 5: an urgent fact the API server already holds
// drives no write. 300 repeated finishes and 300 repeated escalations of one
// fault made 600 status writes; now the first of each is written, the rest
// are durable already (finish) or counted with the next flush (an
// escalation already escalated, as retryable). An escalation that changes
// what the operator acts on (its retryability) is urgent again.
func TestUnchangedUrgentFactsAreNotWrittenAgain(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{FlushInterval: time.Hour})
	for range 300 {
		g.Expect(as(t, e, "POST", self("/finish"), `{}`).status).To(Equal(http.StatusOK))
	}
	g.Expect(e.Writes.Load()).To(Equal(int64(1)), "one finish is written; the other 299 say nothing new")
	g.Expect(e.Status().FinishProposed).To(BeTrue())

	esc := `{"scope":"Provider","kind":"QuotaExceeded","retryable":true,"escalate":true,"message":"429"}`
	for range 300 {
		g.Expect(as(t, e, "POST", self("/faults"), esc).status).To(Equal(http.StatusNoContent))
	}
	g.Expect(e.Writes.Load()).To(Equal(int64(2)), "the first escalation is written at once; repeats wait for the flush")
	f, _ := faultOf(e.Status(), v1alpha1.FaultScopeProvider, "QuotaExceeded")
	g.Expect(f).To(Equal(v1alpha1.Fault{Scope: v1alpha1.FaultScopeProvider, Kind: "QuotaExceeded", Count: 1,
		Retryable: true, Escalated: true, LastMessage: "429"}))

	g.Expect(as(t, e, "POST", self("/faults"),
		`{"scope":"Provider","kind":"QuotaExceeded","retryable":false,"escalate":true,"message":"quota gone"}`).status).
		To(Equal(http.StatusNoContent))
	g.Expect(e.Writes.Load()).To(Equal(int64(3)), "an escalation that is no longer retryable is news: written at once")
	f, _ = faultOf(e.Status(), v1alpha1.FaultScopeProvider, "QuotaExceeded")
	g.Expect(f).To(Equal(v1alpha1.Fault{Scope: v1alpha1.FaultScopeProvider, Kind: "QuotaExceeded", Count: 301,
		Retryable: false, Escalated: true, LastMessage: "quota gone"}), "no count was lost")
	g.Expect(e.Metric("agentrun_gateway_status_writes_skipped_total", nil)).To(BeNumerically(">=", 299))
}
