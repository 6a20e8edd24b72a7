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
	"io"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
)

// addedSeconds is the sample count and sum of the gateway's added time
// (agentrun_gateway_added_seconds) through door.
func addedSeconds(g Gomega, e *gatewaytest.Env, door string) (uint64, float64) {
	families, err := e.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, mf := range families {
		if mf.GetName() != "agentrun_gateway_added_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "door" && l.GetValue() == door {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// Every model door observes the time the gateway itself adds, apart from
// its provider's: with a provider that takes 150 ms, each door's observation
// is one sample, well under the provider's time, streamed or not, passed
// through or translated (here every door meets a chat provider).
func TestAddedSecondsCoversEveryDoorAndLeavesOutTheProvidersTime(t *testing.T) {
	const providerLatency = 150 * time.Millisecond
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = 100 }})
	e.Upstream.Latency = providerLatency
	turn := `"agentrun_scripted":{"say":"a short answer","tokens":20}`
	doors := map[string]struct{ path, body string }{
		"chat":      {"/v1/chat/completions", `{"model":"` + gatewaytest.Model + `","messages":[{"role":"user","content":"hi"}],` + turn},
		"responses": {"/v1/responses", `{"model":"` + gatewaytest.Model + `","input":"hi",` + turn},
		"messages": {"/v1/messages", `{"model":"` + gatewaytest.Model + `","max_tokens":64,` +
			`"messages":[{"role":"user","content":"hi"}],` + turn},
	}
	for door, d := range doors {
		for _, stream := range []string{`}`, `,"stream":true}`} {
			before, sumBefore := addedSeconds(g, e, door)
			start := time.Now()
			resp := e.Do(http.MethodPost, d.path, gatewaytest.Token, []byte(d.body+stream))
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			took := time.Since(start)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK), door+stream)
			after, sumAfter := addedSeconds(g, e, door)
			g.Expect(after-before).To(Equal(uint64(1)), "one observation through the %s door (%s)", door, stream)
			added := time.Duration((sumAfter - sumBefore) * float64(time.Second))
			g.Expect(took).To(BeNumerically(">=", providerLatency), door+stream)
			g.Expect(added).To(BeNumerically("<", took-providerLatency+time.Millisecond),
				"the %s door's added time (%s) leaves out the provider's %s of the request's %s", door, added, providerLatency, took)
		}
	}
}
