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
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The gateway's securityPosture fact of the working attempt becomes the
// run's status.securityPosture and SecurityDegraded condition, with an
// event on each change; it never changes the phase.
func TestSecurityPosture(t *testing.T) {
	posture := &v1alpha1.SecurityPosture{Posture: v1alpha1.PostureConfirmAll, Since: mt(5 * time.Minute),
		Interceptor: "auth", ErrorRate: 60, Message: "Security interceptor auth failed 60% of its calls within 10s"}
	degraded := v1alpha1.RunAttemptStatus{Steps: 2, LastProgressStep: 2, SecurityPosture: posture}
	normal := v1alpha1.RunAttemptStatus{Steps: 2, LastProgressStep: 2}
	wasDegraded := func(in *Input) {
		in.Status.SecurityPosture = posture.DeepCopy()
		in.Status.Conditions = append(in.Status.Conditions, cond(v1alpha1.ConditionSecurityDegraded,
			metav1.ConditionTrue, v1alpha1.EventReasonSecurityDegraded, "earlier", 0))
	}
	now := 7 * time.Minute
	tests := map[string]struct {
		in        Input
		condition string // "" : no condition
		events    []string
		posture   bool
	}{
		"never degraded: no condition, no event": {in: runningAt(now, fact(1, normal))},
		"degraded: condition True, a warning": {in: runningAt(now, fact(1, degraded)),
			condition: "True/SecurityDegraded", events: []string{"Warning/SecurityDegraded"}, posture: true},
		"still degraded: no second event": {in: with(runningAt(now, fact(1, degraded)), wasDegraded),
			condition: "True/SecurityDegraded", posture: true},
		"recovered: condition False, a Normal event": {in: with(runningAt(now, fact(1, normal)), wasDegraded),
			condition: "False/SecurityRecovered", events: []string{"Normal/SecurityRecovered"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, rung := decide(tc.in)
			if rung != rungSteady || d.Status.Phase != running {
				t.Fatalf("rung %s, phase %s: the posture must not change the phase", rung, d.Status.Phase)
			}
			got := ""
			if c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionSecurityDegraded); c != nil {
				got = fmt.Sprintf("%s/%s", c.Status, c.Reason)
				if c.Status == metav1.ConditionTrue && c.Message != posture.Message {
					t.Errorf("condition message %q, want the posture's", c.Message)
				}
			}
			if got != tc.condition {
				t.Errorf("condition %q, want %q", got, tc.condition)
			}
			var evs []string
			for _, e := range d.Events {
				if e.Reason == v1alpha1.EventReasonSecurityDegraded || e.Reason == v1alpha1.EventReasonSecurityRecovered {
					evs = append(evs, e.Type+"/"+e.Reason)
				}
			}
			if diff := cmp.Diff(tc.events, evs); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if (d.Status.SecurityPosture != nil) != tc.posture {
				t.Errorf("status.securityPosture %v, want set=%v", d.Status.SecurityPosture, tc.posture)
			}
		})
	}
}
