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
	"encoding/json"
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestTokenUsePricesEachKindOfToken(t *testing.T) {
	usd := func(s string) v1alpha1.Money {
		m, err := v1alpha1.ParseMoney(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	p := &v1alpha1.ModelPrices{Input: usd("3.00"), Output: usd("15.00"), CacheWrite: new(usd("3.75")), CacheRead: new(usd("0.30"))}
	cases := map[string]struct {
		use   func() (tokenUse, bool)
		total int64
		cost  string
	}{
		"chat: cached prompt tokens are cache reads": {
			use: func() (tokenUse, bool) {
				u := &wireUsage{PromptTokens: 500, CompletionTokens: 500, TotalTokens: 1000}
				u.PromptTokensDetails.CachedTokens = 400
				return u.charged()
			},
			// 100×3 + 400×0.30 + 500×15 micro-units.
			total: 1000, cost: "0.00792",
		},
		"chat as read from the wire, direct and translated": {
			use: func() (tokenUse, bool) {
				const raw = `{"prompt_tokens":500,"completion_tokens":500,"total_tokens":1000,"prompt_tokens_details":{"cached_tokens":400}}`
				var w wireUsage
				var c chatUsage
				if json.Unmarshal([]byte(raw), &w) != nil || json.Unmarshal([]byte(raw), &c) != nil {
					return tokenUse{}, false
				}
				wu, _ := w.charged()
				cu, ok := c.charged()
				return cu, ok && wu == cu
			},
			total: 1000, cost: "0.00792",
		},
		"chat: a total above its parts is charged, as output": {
			use: func() (tokenUse, bool) {
				return (&wireUsage{PromptTokens: 10, CompletionTokens: 10, TotalTokens: 30}).charged()
			},
			total: 30, cost: "0.00033",
		},
		"responses: cached input tokens are cache reads": {
			use: func() (tokenUse, bool) {
				u := &responsesUsage{InputTokens: 1000, OutputTokens: 0, TotalTokens: 1000}
				u.InputTokensDetails.CachedTokens = 1000
				return u.charged()
			},
			total: 1000, cost: "0.0003",
		},
		"messages: cache writes and reads on top of the input": {
			use: func() (tokenUse, bool) {
				return (&messagesUsage{InputTokens: 1, CacheCreationInputTokens: 1000, CacheReadInputTokens: 1000, OutputTokens: 1}).charged()
			},
			// 1×3 + 1000×3.75 + 1000×0.30 + 1×15 micro-units.
			total: 2002, cost: "0.004068",
		},
		"one token rounds up to a micro-unit": {
			use:   func() (tokenUse, bool) { return (&messagesUsage{InputTokens: 1}).charged() },
			total: 1, cost: "0.000003",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u, ok := tc.use()
			if !ok || u.total() != tc.total || u.cost(p).String() != tc.cost {
				t.Errorf("charged %+v (%v): %d tokens costing %s, want %d costing %s", u, ok, u.total(), u.cost(p), tc.total, tc.cost)
			}
		})
	}
}
