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

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestEffectiveGrant(t *testing.T) {
	reserve := &v1alpha1.Usage{ModelRequests: 2, ToolCalls: 1, Tokens: 500}
	cases := map[string]struct {
		grant v1alpha1.Grant
		base  *v1alpha1.Usage
		want  v1alpha1.Grant
	}{
		"running: the spec's grant": {
			grant: v1alpha1.Grant{ModelRequests: 10, ToolCalls: 5},
			base:  &v1alpha1.Usage{ModelRequests: 9},
			want:  v1alpha1.Grant{ModelRequests: 10, ToolCalls: 5},
		},
		"finalizing without a recorded base: the spec's grant": {
			grant: v1alpha1.Grant{ModelRequests: 6, ToolCalls: 3, FinalizeOnly: true, Reserve: reserve},
			want:  v1alpha1.Grant{ModelRequests: 6, ToolCalls: 3, FinalizeOnly: true, Reserve: reserve},
		},
		"finalizing: the reserve on top of a base above the operator's count": {
			grant: v1alpha1.Grant{ModelRequests: 6, ToolCalls: 3, Tokens: ptr.To[int64](1500), FinalizeOnly: true, Reserve: reserve},
			base:  &v1alpha1.Usage{ModelRequests: 7, ToolCalls: 2, Tokens: 1200},
			want:  v1alpha1.Grant{ModelRequests: 9, ToolCalls: 3, Tokens: ptr.To[int64](1700), FinalizeOnly: true, Reserve: reserve},
		},
		"finalizing: never below the spec's grant": {
			grant: v1alpha1.Grant{ModelRequests: 6, ToolCalls: 3, FinalizeOnly: true, Reserve: reserve},
			base:  &v1alpha1.Usage{ModelRequests: 1},
			want:  v1alpha1.Grant{ModelRequests: 6, ToolCalls: 3, FinalizeOnly: true, Reserve: reserve},
		},
		"finalizing without a token budget: tokens stay unbudgeted": {
			grant: v1alpha1.Grant{ModelRequests: 6, FinalizeOnly: true, Reserve: reserve},
			base:  &v1alpha1.Usage{ModelRequests: 6, Tokens: 9000},
			want:  v1alpha1.Grant{ModelRequests: 8, ToolCalls: 1, FinalizeOnly: true, Reserve: reserve},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, EffectiveGrant(tc.grant, tc.base)); diff != "" {
				t.Errorf("EffectiveGrant (-want +got):\n%s", diff)
			}
		})
	}
}
