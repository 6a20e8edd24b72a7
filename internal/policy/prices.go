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
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// RulePricesCurrency: a policy whose models have prices names their
// currency.
const RulePricesCurrency Rule = "pricesCurrency"

// validatePrices: prices are amounts in the policy's currency, so a policy
// whose models carry prices names it. (The amounts' form is the API's
// schema: a decimal string, e.g. "3.00".)
func validatePrices(spec *v1alpha1.RuntimePolicySpec, specPath *field.Path) field.ErrorList {
	if spec.Currency != "" {
		return nil
	}
	for i, m := range spec.Models {
		if m.Prices != nil {
			return field.ErrorList{field.Required(specPath.Child("currency"), fmt.Sprintf(
				"spec.models[%d] (%s) has prices, so the policy must name their currency (an ISO 4217 code such as USD)", i, m.Name)).
				WithOrigin(RulePricesCurrency)}
		}
	}
	return nil
}

// CostErrors says why a run budgeting cost (spec.budget.cost) cannot under
// policy p: its cost could not be counted unless every model it may use has
// prices in a named currency.
func CostErrors(b v1alpha1.Budget, p *v1alpha1.RuntimePolicy) field.ErrorList {
	if b.Cost == nil {
		return nil
	}
	path := field.NewPath("spec", "budget", "cost")
	if p.Spec.Currency == "" {
		return field.ErrorList{field.Invalid(path, b.Cost.String(), fmt.Sprintf(
			"RuntimePolicy %q names no currency (spec.currency), so a run under it cannot budget cost", p.Name))}
	}
	for _, m := range p.Spec.Models {
		if m.Prices == nil {
			return field.ErrorList{field.Invalid(path, b.Cost.String(), fmt.Sprintf(
				"RuntimePolicy %q has no prices for model %q (spec.models[].prices), so a run under it cannot budget cost",
				p.Name, m.Name))}
		}
	}
	return nil
}
