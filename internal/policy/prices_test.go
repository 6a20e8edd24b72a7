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

package policy

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func priced(currency string, prices ...*v1alpha1.ModelPrices) *v1alpha1.RuntimePolicy {
	p := &v1alpha1.RuntimePolicy{}
	p.Name, p.Spec.Currency = "p1", currency
	for i, pr := range prices {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: []string{"fast", "deep"}[i], BaseURL: "https://x", Prices: pr})
	}
	return p
}

func TestPrices(t *testing.T) {
	price := &v1alpha1.ModelPrices{Input: 3_000_000, Output: 15_000_000}
	five := v1alpha1.Money(5_000_000)
	cases := map[string]struct {
		policy *v1alpha1.RuntimePolicy
		budget v1alpha1.Budget
		want   string // "" for no error; else a substring of the only error
	}{
		"prices in a named currency": {policy: priced("USD", price, price), budget: v1alpha1.Budget{Cost: &five}},
		"prices without a currency": {policy: priced("", price),
			want: `spec.currency: Required value: spec.models[0] (fast) has prices, so the policy must name their currency`},
		"no prices, no cost budget: nothing to say": {policy: priced("", nil)},
		"a cost budget under a policy without currency": {policy: priced("", nil), budget: v1alpha1.Budget{Cost: &five},
			want: `spec.budget.cost: Invalid value: "5.00": RuntimePolicy "p1" names no currency (spec.currency)`},
		"a cost budget with a model unpriced": {policy: priced("EUR", price, nil), budget: v1alpha1.Budget{Cost: &five},
			want: `RuntimePolicy "p1" has no prices for model "deep" (spec.models[].prices), so a run under it cannot budget cost`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := append(Validate(&tc.policy.Spec), CostErrors(tc.budget, tc.policy)...)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Fatalf("want no error, got %v", errs)
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Fatalf("want one error containing %q, got %v", tc.want, errs)
			}
		})
	}
}
