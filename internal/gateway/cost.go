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
	"fmt"
	"math"
	"math/big"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Cost in money. A model's prices (spec.models[].prices, per million
// tokens) turn tokens into cost, counted exactly in micro-units of the
// policy's currency (v1alpha1.Money; never a float). Like tokens, a request
// is reserved before dispatch and settled after: it reserves its token
// bound at the dearest prompt price and the output price, so it cannot
// cross a cost grant, and it is charged the usage the provider reports
// (input, cache write, cache read and output, each at its price), or its
// reservation when the provider reports none.

// tokenUse is what a provider reported a request used, by how each token
// is priced.
type tokenUse struct {
	input, cacheWrite, cacheRead, output int64
}

// total is the tokens charged to the token budget.
func (u tokenUse) total() int64 { return u.input + u.cacheWrite + u.cacheRead + u.output }

// cost is what u costs at p (nil: the model has no prices, cost nothing).
func (u tokenUse) cost(p *v1alpha1.ModelPrices) v1alpha1.Money {
	if p == nil {
		return 0
	}
	return v1alpha1.CostOf(
		v1alpha1.TokensAt{Tokens: u.input, Price: p.Input},
		v1alpha1.TokensAt{Tokens: u.cacheWrite, Price: priceOr(p.CacheWrite, p.Input)},
		v1alpha1.TokensAt{Tokens: u.cacheRead, Price: priceOr(p.CacheRead, p.Input)},
		v1alpha1.TokensAt{Tokens: u.output, Price: p.Output})
}

func priceOr(p *v1alpha1.Money, def v1alpha1.Money) v1alpha1.Money {
	if p == nil {
		return def
	}
	return *p
}

// promptPrice is the dearest price a prompt token may be charged at: a
// prompt's bound is reserved at it, whatever the cache does.
func promptPrice(p *v1alpha1.ModelPrices) v1alpha1.Money {
	return max(p.Input, priceOr(p.CacheWrite, p.Input), priceOr(p.CacheRead, p.Input))
}

// costBound is the cost reserved for a request of at most prompt prompt
// tokens and completion completion tokens.
func costBound(p *v1alpha1.ModelPrices, prompt, completion int64) v1alpha1.Money {
	if p == nil {
		return 0
	}
	return v1alpha1.CostOf(v1alpha1.TokensAt{Tokens: prompt, Price: promptPrice(p)},
		v1alpha1.TokensAt{Tokens: completion, Price: p.Output})
}

// completionRoom is the most completion tokens a request whose prompt may
// use prompt tokens can generate with its cost bound within left: the
// largest n with costBound(p, prompt, n) <= left, or -1 when the prompt
// alone does not fit (math.MaxInt64 when output is free).
func completionRoom(p *v1alpha1.ModelPrices, prompt int64, left v1alpha1.Money) int64 {
	room := new(big.Int).Mul(big.NewInt(int64(max(left, 0))), big.NewInt(v1alpha1.MicrosPerUnit))
	room.Sub(room, new(big.Int).Mul(big.NewInt(max(prompt, 0)), big.NewInt(int64(promptPrice(p)))))
	switch {
	case left < 0 || room.Sign() < 0:
		return -1
	case p.Output <= 0:
		return math.MaxInt64
	}
	room.Quo(room, big.NewInt(int64(p.Output)))
	if !room.IsInt64() {
		return math.MaxInt64
	}
	return room.Int64()
}

// costRoomLocked checks a request against the attempt's cost grant and
// returns its max_tokens, lowered so that its cost bound fits what is left
// (mt <= 0: none asked for yet). A request refused here is refused like one
// beyond the token grant (grant_exhausted, or reserve_exhausted while
// finalizing), naming the cost.
func (k *keeper) costRoomLocked(gr v1alpha1.Grant, fin bool, model string, p *v1alpha1.ModelPrices,
	promptBound, choices, mt int64) (int64, *apiError) {
	if p == nil {
		return 0, errInvalid("model", fmt.Sprintf(
			"model %s has no prices (spec.models[].prices of the policy), and this run budgets cost: ask for a priced model", model))
	}
	used := k.facts.usage.Cost
	left := *gr.Cost - used - k.cost
	room := completionRoom(p, promptBound, left)
	if room >= 0 {
		room /= max(choices, 1)
	}
	if room < 1 {
		return 0, k.grantRefusalLocked(fin, v1alpha1.BudgetUnitCost, int64(used+k.cost), int64(*gr.Cost), fmt.Sprintf(
			"a cost of %s/%s (%s reserved by requests under way; this request's prompt may cost up to %s, and each of its %d choices "+
				"at least one token)", used, *gr.Cost, k.cost, costBound(p, promptBound, 0), max(choices, 1)))
	}
	if mt <= 0 {
		mt = DefaultMaxTokens
	}
	return min(mt, room), nil
}

// labelCurrency is the currency label of the cost metric.
const labelCurrency = "currency"

// newCostMetric is agentrun_gateway_cost_total. Prometheus counts in
// floats: the metric is for watching, the ledger (exact) for deciding.
func newCostMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_gateway_cost_total",
		Help: "Cost charged to attempts in the policy's currency (tokens the provider reported times the model's prices, " +
			"or the reservation when it reported none), by namespace, policy, model and currency.",
	}, []string{labelNamespace, labelPolicy, fieldModel, labelCurrency})
}

// chargedCost records what the request was charged in money: on the
// exchange (for its span) and in the cost metric.
func (x *exchange) chargedCost(cost v1alpha1.Money) {
	x.cost = cost
	if x.m.Prices == nil {
		return
	}
	x.k.mu.Lock()
	currency := x.k.obj.Spec.Policy.Currency
	x.k.mu.Unlock()
	x.g.metrics.cost.WithLabelValues(append(slices.Clone(x.labels), currency)...).Add(float64(cost) / v1alpha1.MicrosPerUnit)
}

// attrCost is a model request's cost, a decimal in the policy's currency
// (no semantic convention names it yet).
const attrCost = attribute.Key("agentrun.usage.cost")

// spanCost records what a priced request cost on its span.
func spanCost(span trace.Span, x *exchange) {
	if x.m.Prices != nil {
		span.SetAttributes(attrCost.String(x.cost.String()))
	}
}

// charged is what a translated chat usage charges (wireUsage.charged), with
// its cached prompt tokens priced as cache reads.
func (u *chatUsage) charged() (tokenUse, bool) {
	if u == nil {
		return tokenUse{}, false
	}
	w := u.wireUsage
	if u.PromptTokensDetails != nil {
		w.PromptTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	return w.charged()
}
