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

package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMoneyParseAndString(t *testing.T) {
	cases := map[string]struct {
		in   string
		want Money
		out  string
		err  string
	}{
		"two decimals":         {in: "5.00", want: 5_000_000, out: "5.00"},
		"whole":                {in: "3", want: 3_000_000, out: "3.00"},
		"micro":                {in: "0.000125", want: 125, out: "0.000125"},
		"largest":              {in: "999999999999.999999", want: MaxMoney, out: "999999999999.999999"},
		"seven decimals":       {in: "0.0000001", err: "at most 12 integer and 6 fractional digits"},
		"negative":             {in: "-1.00", err: "not a decimal amount"},
		"exponent":             {in: "1e3", err: "not a decimal amount"},
		"thirteen digits":      {in: "1000000000000", err: "not a decimal amount"},
		"trailing dot":         {in: "5.", err: "not a decimal amount"},
		"empty":                {in: "", err: "not a decimal amount"},
		"a unit like Quantity": {in: "5Mi", err: "not a decimal amount"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMoney(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseMoney(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || got.String() != tc.out {
				t.Fatalf("ParseMoney(%q) = %d (%s), %v; want %d (%s)", tc.in, got, got, err, tc.want, tc.out)
			}
		})
	}
}

func TestMoneyJSON(t *testing.T) {
	var u Usage
	if err := json.Unmarshal([]byte(`{"cost":"1.25"}`), &u); err != nil || u.Cost != 1_250_000 {
		t.Fatalf("decoded %+v, %v", u, err)
	}
	b, _ := json.Marshal(Usage{Tokens: 3, Cost: 125})
	if string(b) != `{"tokens":3,"cost":"0.000125"}` {
		t.Errorf("encoded %s", b)
	}
	if b, _ := json.Marshal(Usage{Tokens: 3}); string(b) != `{"tokens":3}` {
		t.Errorf("a zero cost is omitted, encoded %s", b)
	}
	if err := json.Unmarshal([]byte(`{"cost":1.25}`), &u); err == nil || !strings.Contains(err.Error(), "decimal string") {
		t.Errorf("a JSON number must be refused naming the rule, got %v", err)
	}
}

func TestTokenCost(t *testing.T) {
	cases := map[string]struct {
		tokens int64
		price  string
		want   Money
	}{
		"a million tokens at the price":           {tokens: 1_000_000, price: "3.00", want: 3_000_000},
		"1000 tokens at 3.00/M is 0.003":          {tokens: 1000, price: "3.00", want: 3000},
		"one token at 0.15/M rounds up":           {tokens: 1, price: "0.15", want: 1},
		"exact thirds do not drift":               {tokens: 333_333, price: "3.00", want: 999_999},
		"no tokens cost nothing":                  {tokens: 0, price: "3.00", want: 0},
		"free model":                              {tokens: 5000, price: "0", want: 0},
		"overflow saturates at the largest sum":   {tokens: 1 << 62, price: "999999999999", want: MaxMoney},
		"large but exact: 1e12 tokens at 75.00/M": {tokens: 1_000_000_000_000, price: "75.00", want: 75_000_000_000_000},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := ParseMoney(tc.price)
			if err != nil {
				t.Fatal(err)
			}
			if got := TokenCost(tc.tokens, p); got != tc.want {
				t.Errorf("TokenCost(%d, %s) = %d micro-units, want %d", tc.tokens, tc.price, got, tc.want)
			}
		})
	}
}
