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

package lifecycle

import "github.com/agentrun-dev/agentrun/api/v1alpha1"

// EffectiveGrant is the grant an attempt is held to: its spec's grant and,
// once it finalizes, at least its reserve on top of base, the usage the
// gateway recorded when it first served the attempt as finalizing
// (status.finalizeBase). Calls the gateway admitted under the running grant
// after the operator's decision therefore do not eat the reserve, and the
// reserve is served once: base is a recorded fact, never re-derived. That
// never exceeds the budget: base was within the working allowance.
//
// One formula, two callers: the gateway admits by it, and the decider judges
// an attempt's reported usage by it (overGrant).
func EffectiveGrant(g v1alpha1.Grant, base *v1alpha1.Usage) v1alpha1.Grant {
	if base == nil || g.Reserve == nil || !g.FinalizeOnly {
		return g
	}
	r := *g.Reserve
	g.ModelRequests = max(g.ModelRequests, base.ModelRequests+r.ModelRequests)
	g.ToolCalls = max(g.ToolCalls, base.ToolCalls+r.ToolCalls)
	if g.Tokens != nil {
		t := max(*g.Tokens, base.Tokens+r.Tokens)
		g.Tokens = &t
	}
	if g.Cost != nil {
		c := max(*g.Cost, base.Cost+r.Cost)
		g.Cost = &c
	}
	return g
}
