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
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

func TestCallWindow(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	running := func(deadline, hard *metav1.Time) v1alpha1.RunAttemptSpec {
		return v1alpha1.RunAttemptSpec{RunPhase: v1alpha1.PhaseRunning, Deadline: deadline, HardDeadline: hard}
	}
	finalizing := func(deadline, hard *metav1.Time) v1alpha1.RunAttemptSpec {
		s := running(deadline, hard)
		s.RunPhase, s.Grant.FinalizeOnly = v1alpha1.PhaseFinalizing, true
		return s
	}
	cases := map[string]struct {
		spec     v1alpha1.RunAttemptSpec
		want     time.Time
		wantCode string
	}{
		"no deadline: no bound":                         {spec: running(nil, nil)},
		"running: bounded by the deadline":              {spec: running(at(20*time.Second), at(2*time.Minute)), want: now.Add(20 * time.Second)},
		"running: too close to the deadline":            {spec: running(at(500*time.Millisecond), at(2*time.Minute)), wantCode: gatewayapi.CodeDeadlineReached},
		"running: past the deadline":                    {spec: running(at(-time.Second), at(2*time.Minute)), wantCode: gatewayapi.CodeDeadlineReached},
		"finalizing: the reserve's time counts":         {spec: finalizing(at(-time.Second), at(time.Minute)), want: now.Add(time.Minute)},
		"finalizing: past the hard deadline":            {spec: finalizing(at(-3*time.Minute), at(-time.Minute)), wantCode: gatewayapi.CodeDeadlineReached},
		"finalizing without a hard deadline: the run's": {spec: finalizing(at(30*time.Second), nil), want: now.Add(30 * time.Second)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, e := callWindow(tc.spec, now, time.Second)
			switch {
			case tc.wantCode != "":
				if e == nil || e.body.Code != tc.wantCode || e.status != http.StatusTooManyRequests {
					t.Fatalf("callWindow = %v, %+v; want a 429 refusal %s", got, e, tc.wantCode)
				}
			case e != nil:
				t.Fatalf("callWindow refused: %s", e.body.Message)
			case !got.Equal(tc.want):
				t.Errorf("callWindow = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBoundedTimeout(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	if got := boundedTimeout(10*time.Minute, time.Time{}, now); got != 10*time.Minute {
		t.Errorf("no deadline: %s, want the call's own 10m", got)
	}
	if got := boundedTimeout(10*time.Minute, now.Add(20*time.Second), now); got != 20*time.Second {
		t.Errorf("20s left: %s, want 20s", got)
	}
	if got := boundedTimeout(5*time.Second, now.Add(20*time.Second), now); got != 5*time.Second {
		t.Errorf("a 5s call with 20s left: %s, want 5s", got)
	}
}
