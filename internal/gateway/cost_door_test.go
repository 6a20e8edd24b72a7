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
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// usd reads an amount for a test.
func usd(s string) v1alpha1.Money {
	m, err := v1alpha1.ParseMoney(s)
	if err != nil {
		panic(err)
	}
	return m
}

// priced gives the attempt's first model prices of 3.00 in, 15.00 out and
// 0.30 a cache read, per million tokens, in USD.
func priced(ra *v1alpha1.RunAttempt) {
	ra.Spec.Policy.Currency = "USD"
	ra.Spec.Policy.Models[0].Prices = &v1alpha1.ModelPrices{Input: usd("3.00"), Output: usd("15.00"), CacheRead: new(usd("0.30"))}
}

func TestModelDoorChargesTheCostOfTheReportedUsage(t *testing.T) {
	g := NewWithT(t)
	e, _ := modelEnv(t, priced)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token,
		chat("scripted", `,"agentrun_scripted":{"say":"ok","tokens":1000,"cachedTokens":400}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	// 500 prompt tokens (400 of them cached) and 500 completion tokens:
	// 100×3.00 + 400×0.30 + 500×15.00 per million.
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(
		v1alpha1.Usage{ModelRequests: 1, Tokens: 1000, Cost: usd("0.00792")}), "without a cost grant, cost is counted all the same")
}

func TestModelDoorReservesCostSoNoRequestCrossesTheCostGrant(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) {
		priced(ra)
		ra.Spec.Grant.Cost = new(usd("0.02"))
	})
	// max_tokens is lowered so that the prompt's bound (its bytes) at the
	// dearest prompt price and the completion at the output price fit what
	// is left, and no further than it must.
	bound := func(body []byte, completion int64) v1alpha1.Money {
		return v1alpha1.CostOf(v1alpha1.TokensAt{Tokens: int64(len(body)), Price: usd("3.00")},
			v1alpha1.TokensAt{Tokens: completion, Price: usd("15.00")})
	}
	lowered := func(body []byte, left v1alpha1.Money) {
		sent, _ := rec.last()
		mt, ok := sent["max_tokens"].(float64)
		g.Expect(ok).To(BeTrue())
		g.Expect(mt).To(BeNumerically(">", 0))
		g.Expect(bound(body, int64(mt))).To(BeNumerically("<=", left))
		g.Expect(bound(body, int64(mt)+1)).To(BeNumerically(">", left), "lowered no further than it must")
	}
	body := chat("scripted", `,"agentrun_scripted":{"say":"ok","tokens":1000}`)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	lowered(body, usd("0.02"))
	g.Eventually(func() v1alpha1.Money { return e.Status().Usage.Cost }).Should(Equal(usd("0.009")), "500×3.00 + 500×15.00 per million")

	body = chat("scripted", `,"max_tokens":5000,"agentrun_scripted":{"say":"ok","tokens":10}`)
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	lowered(body, usd("0.011"))
	g.Eventually(func() v1alpha1.Money { return e.Status().Usage.Cost }).Should(Equal(usd("0.00909")), "settled on the reported usage")

	// A prompt whose bound alone costs more than is left is refused before
	// dispatch, like one beyond the token grant, and the refusal is the
	// attempt's exhaustion in the Cost unit. (A new conversation: one that
	// extended the first would be bounded by its charge.)
	big := []byte(`{"model":"scripted","messages":[{"role":"user","content":"` + strings.Repeat("x", 4000) + `"}]}`)
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, big)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	eb := errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(eb.Message).To(ContainSubstring("working budget exhausted at a cost of 0.00909/0.02"))
	x := e.Status().GrantExhausted
	g.Expect(x).NotTo(BeNil())
	g.Expect(*x).To(And(HaveField("Unit", v1alpha1.BudgetUnitCost), HaveField("Used", BeEquivalentTo(9090)),
		HaveField("Granted", BeEquivalentTo(20000))))
}

func TestModelDoorRefusesAnUnpricedModelUnderACostGrant(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.Cost = new(usd("1.00")) })
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	eb := errorBody(g, resp)
	g.Expect(eb.Message).To(ContainSubstring("model scripted has no prices (spec.models[].prices of the policy), and this run budgets cost"))
	g.Expect(rec.bodies).To(BeEmpty(), "nothing was dispatched")
}

// TestModelDoorNeverSpendsBeyondTheCostGrantUnderRace: clients racing the
// last of a cost grant are served exactly what fits, and the cost charged
// never crosses it.
func TestModelDoorNeverSpendsBeyondTheCostGrantUnderRace(t *testing.T) {
	g := NewWithT(t)
	const clients, each = 16, 10
	grant := usd("0.05")
	e, _ := modelEnv(t, func(ra *v1alpha1.RunAttempt) {
		priced(ra)
		ra.Spec.Grant.ModelRequests = clients * each
		ra.Spec.Grant.Cost = &grant
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(50))
	})
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token,
					chat("scripted", `,"agentrun_scripted":{"say":"ok","tokens":100}`))
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// A request costs at most 50×3.00 + 50×15.00 per million (0.0009):
	// without the cost grant all 160 would be served, for about 0.144.
	g.Expect(ok.Load()).To(And(BeNumerically(">", 0), BeNumerically("<", clients*each)))
	g.Eventually(func() int64 { return e.Status().Usage.ModelRequests }).Should(Equal(ok.Load()))
	g.Consistently(func() v1alpha1.Money { return e.Status().Usage.Cost }, "200ms").Should(
		And(BeNumerically("<=", grant), BeNumerically(">", grant/2)), "the grant is spent, and never crossed")
	t.Logf("%d of %d requests served, costing %s of a grant of %s", ok.Load(), clients*each, e.Status().Usage.Cost, grant)
}
