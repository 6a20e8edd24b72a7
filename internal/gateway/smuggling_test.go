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
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
)

// Security review 25, item 3: one request must not cross the token grant.

// A key that folds to max_tokens (a Kelvin sign for the k) is not the key
// the gateway rewrites, but encoding/json — and every provider built on it —
// reads it as max_tokens, and the later of the two wins.
func TestModelDoorRefusesAKeyThatFoldsToAControlledOne(t *testing.T) {
	for name, extra := range map[string]string{
		"kelvin sign":  `,"max_to\u212aens":1000000`,
		"upper case":   `,"MAX_TOKENS":1000000`,
		"long s":       `,"\u017ftream":true`,
		"stream usage": `,"stream":true,"stream_options":{"include_u\u017fage":false}`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) {
				ra.Spec.Grant.Tokens = new(int64(10000))
				ra.Spec.Policy.Models[0].MaxTokens = new(int64(500))
			})
			resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", extra))
			g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
			eb := errorBody(g, resp)
			g.Expect(eb.Message).To(ContainSubstring("case folding"))
			sent, _ := rec.last()
			g.Expect(sent).To(BeNil(), "nothing is dispatched")
			g.Expect(e.Status().Usage.ModelRequests).To(BeZero(), "a refused request is not counted")
		})
	}
}

// n completions may each generate max_tokens: the reservation covers all of
// them, and n is bounded.
func TestModelDoorReservesEveryChoice(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(10000))
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(1000))
	})
	body := chat("scripted", `,"n":16,"agentrun_scripted":{"say":"ok","tokens":10}`)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ := rec.last()
	g.Expect(sent["max_tokens"]).To(BeNumerically(">", 0))
	g.Expect(16*sent["max_tokens"].(float64)+float64(len(body))).To(BeNumerically("<=", 10000),
		"16 choices of max_tokens each fit the grant with the prompt")

	for _, n := range []string{"17", "0", "-1", `"2"`} {
		resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", `,"n":`+n))
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "n %s", n)
		g.Expect(errorBody(g, resp).Param).To(Equal("n"))
	}
}

// lyingUsage answers every chat completion with the given usage JSON.
type lyingUsage string

func (u lyingUsage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]`+string(u)+`}`)
}

// A usage of zero, a negative one or none at all is no report: the request
// is charged its reservation, never nothing.
func TestModelDoorChargesTheReservationWhenTheUsageIsNoReport(t *testing.T) {
	for name, usage := range map[string]string{
		"zero":       `,"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`,
		"negative":   `,"usage":{"prompt_tokens":5,"completion_tokens":-100000,"total_tokens":-99995}`,
		"missing":    ``,
		"total only": `,"usage":{"prompt_tokens":40,"completion_tokens":60,"total_tokens":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			up := httptest.NewServer(lyingUsage(usage))
			t.Cleanup(up.Close)
			e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
				ra.Spec.Grant.Tokens = new(int64(10000))
				ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
				ra.Spec.Policy.Models[0].MaxTokens = new(int64(100))
			}})
			body := chat("scripted", "")
			resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, body)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			_ = resp.Body.Close()
			want := int64(len(body)) + 100 // the reservation: prompt bound + max_tokens
			if name == "total only" {
				want = 100 // the parts, not a total below their sum
			}
			g.Eventually(func() int64 { return e.Status().Usage.Tokens }).Should(Equal(want))
		})
	}
}
