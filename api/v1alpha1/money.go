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
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// MoneyPattern is the form of an amount of money on the wire: a decimal
// string of at most 12 integer digits and 6 fractional ones, e.g. "5.00".
const MoneyPattern = `^[0-9]{1,12}(\.[0-9]{1,6})?$`

// MaxMoney is the largest amount MoneyPattern can write.
const MaxMoney = Money(999_999_999_999_999_999)

// MicrosPerUnit is how many micro-units make one unit of the currency.
const MicrosPerUnit = 1_000_000

// Money is an amount in the policy's currency, held as an integer count of
// micro-units (millionths) so that adding, subtracting and comparing are
// exact; on the wire it is a decimal string ("5.00", "0.000125"). Floats are
// never used for money: 0.1 has no exact binary form, and a budget compared
// in floats can be crossed by rounding.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=19
// +kubebuilder:validation:Pattern=`^[0-9]{1,12}(\.[0-9]{1,6})?$`
type Money int64

// ParseMoney reads a decimal amount of MoneyPattern's form.
func ParseMoney(s string) (Money, error) {
	whole, frac, dotted := strings.Cut(s, ".")
	if whole == "" || len(whole) > 12 || (dotted && (frac == "" || len(frac) > 6)) ||
		strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal amount with at most 12 integer and 6 fractional digits, e.g. \"5.00\"", s)
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	return Money(w*MicrosPerUnit + f), nil
}

// String is the amount as a decimal with no trailing zeros beyond two
// fractional digits: "5.00", "0.000125", "-1.50".
func (m Money) String() string {
	sign, v := "", int64(m)
	if v < 0 {
		sign, v = "-", -v
	}
	frac := strings.TrimRight(fmt.Sprintf("%06d", v%MicrosPerUnit), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%s", sign, v/MicrosPerUnit, frac)
}

// MarshalJSON writes the amount as a decimal string.
func (m Money) MarshalJSON() ([]byte, error) { return json.Marshal(m.String()) }

// UnmarshalJSON reads a decimal string.
func (m *Money) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("an amount of money is a decimal string, e.g. \"5.00\": %w", err)
	}
	v, err := ParseMoney(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ModelPrices are a model's prices per million tokens, in the policy's
// currency (spec.currency).
type ModelPrices struct {
	// input is the price of a million prompt tokens (those neither written
	// to nor read from the provider's cache).
	// +required
	Input Money `json:"input"`
	// output is the price of a million completion tokens.
	// +required
	Output Money `json:"output"`
	// cacheWrite is the price of a million prompt tokens written to the
	// provider's cache. Unset: the input price.
	// +optional
	CacheWrite *Money `json:"cacheWrite,omitempty"`
	// cacheRead is the price of a million prompt tokens read from the
	// provider's cache. Unset: the input price.
	// +optional
	CacheRead *Money `json:"cacheRead,omitempty"`
}

// TokensAt is a number of tokens at a price per million tokens.
type TokensAt struct {
	Tokens int64
	Price  Money
}

// CostOf is what the tokens cost: the exact sum of tokens times price,
// rounded up once to the next micro-unit (so rounding never lets spending
// cross a limit, and a bound on each count bounds the cost). It saturates
// at MaxMoney; negative counts or prices count as zero.
func CostOf(items ...TokensAt) Money {
	sum, term := new(big.Int), new(big.Int)
	for _, it := range items {
		if it.Tokens > 0 && it.Price > 0 {
			sum.Add(sum, term.Mul(big.NewInt(it.Tokens), big.NewInt(int64(it.Price))))
		}
	}
	q, r := sum.QuoRem(sum, big.NewInt(1_000_000), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > int64(MaxMoney) {
		return MaxMoney
	}
	return Money(q.Int64())
}

// TokenCost is what n tokens cost at price per million tokens (CostOf).
func TokenCost(n int64, price Money) Money { return CostOf(TokensAt{Tokens: n, Price: price}) }
