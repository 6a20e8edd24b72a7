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
	"cmp"
	"slices"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Resolve returns the chain in the order runtimes apply it, ordered by phase
// (Pre, then Around, then Post), then priority ascending, then registration
// index (the position in interceptors) ascending. The order is total, so the
// result is deterministic. Constraints (requires, before, after) and roles do
// not affect it; Validate checks them against it. An interceptor with an
// unknown phase sorts after Post (Validate rejects it).
func Resolve(interceptors []v1alpha1.Interceptor) []v1alpha1.ResolvedInterceptor {
	if len(interceptors) == 0 {
		return nil
	}
	out := make([]v1alpha1.ResolvedInterceptor, len(interceptors))
	for i, ic := range interceptors {
		out[i] = v1alpha1.ResolvedInterceptor{
			Name:              ic.Name,
			Class:             ic.Class,
			Phase:             ic.Phase,
			Priority:          ic.Priority,
			OnError:           ic.OnError,
			Veto:              ic.Veto != nil && *ic.Veto,
			Role:              ic.Role,
			Buffered:          ic.Buffered,
			Enforcement:       ic.Enforcement,
			Timeout:           ic.Timeout,
			RegistrationIndex: int32(i),
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.ResolvedInterceptor) int {
		return cmp.Or(
			cmp.Compare(phaseRank(a.Phase), phaseRank(b.Phase)),
			cmp.Compare(a.Priority, b.Priority),
			cmp.Compare(a.RegistrationIndex, b.RegistrationIndex),
		)
	})
	return out
}

// phaseRank orders phases: Pre, Around, Post, then anything unknown.
func phaseRank(p v1alpha1.InterceptorPhase) int {
	switch p {
	case v1alpha1.InterceptorPre:
		return 0
	case v1alpha1.InterceptorAround:
		return 1
	case v1alpha1.InterceptorPost:
		return 2
	}
	return 3
}
