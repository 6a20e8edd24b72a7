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
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The heartbeat of an attempt the gateway governs (status.liveness) is the
// gateway's Lease, silentSince once the gateway found the attempt silent,
// the new holder's acquireTime after a gateway restart, and the last status
// write when the Lease is gone; the heartbeat timeout (60s) counts from it,
// and the run is woken exactly when it would expire. Attempts that report
// heartbeatTime themselves keep working as before.
func TestGatewayLiveness(t *testing.T) {
	const lease, me, old = "agentrun-system/agentrun-gateway-node-a", "gw-a_1", "gw-a_0"
	governed := func(since time.Duration, silent *time.Duration) v1alpha1.RunAttemptStatus {
		lv := &v1alpha1.AttemptLiveness{Gateway: lease, Holder: me, Since: *mt(since)}
		if silent != nil {
			lv.SilentSince = mt(*silent)
		}
		return v1alpha1.RunAttemptStatus{Liveness: lv}
	}
	held := func(renew time.Duration) GatewayLease {
		return GatewayLease{Found: true, Holder: me, AcquireTime: at(0), RenewTime: at(renew)}
	}
	d := func(x time.Duration) *time.Duration { return &x }
	type want struct {
		failed  bool
		requeue time.Duration // when not failed
		message string        // when failed
	}
	cases := map[string]struct {
		now     time.Duration
		status  v1alpha1.RunAttemptStatus
		lease   GatewayLease
		written time.Duration // FactsWritten
		want    want
	}{
		"held Lease renewed 2s ago: alive, woken when a renewal 2s ago would expire": {
			now: 10 * time.Minute, status: governed(time.Second, nil), lease: held(10*time.Minute - 2*time.Second),
			want: want{requeue: 58 * time.Second},
		},
		"the gateway stopped renewing: alive until a minute after its last renewal": {
			now: 3*time.Minute + 59*time.Second, status: governed(time.Second, nil), lease: held(3 * time.Minute),
			want: want{requeue: time.Second},
		},
		"the gateway stopped renewing a minute ago: failed": {
			now: 4 * time.Minute, status: governed(time.Second, nil), lease: held(3 * time.Minute),
			want: want{failed: true, message: "no heartbeat for 1m0s (timeout 1m0s)"},
		},
		"silent since 5m, Lease fresh: the timeout counts from silentSince": {
			now: 5*time.Minute + 30*time.Second, status: governed(time.Second, d(5*time.Minute)),
			lease: held(5*time.Minute + 29*time.Second),
			want:  want{requeue: 30 * time.Second},
		},
		"silent for a minute, Lease fresh: failed": {
			now: 6 * time.Minute, status: governed(time.Second, d(5*time.Minute)), lease: held(6*time.Minute - time.Second),
			want: want{failed: true, message: "no heartbeat for 1m0s (timeout 1m0s)"},
		},
		"the gateway restarted (another holder) at 7m: alive until 8m": {
			now: 7*time.Minute + 30*time.Second, status: governed(time.Second, nil),
			lease: GatewayLease{Found: true, Holder: "gw-a_2", AcquireTime: at(7 * time.Minute), RenewTime: at(7*time.Minute + 29*time.Second)},
			want:  want{requeue: 30 * time.Second},
		},
		"the gateway restarted at 7m and the agent never called it: failed at 8m": {
			now: 8 * time.Minute, status: governed(time.Second, nil),
			lease: GatewayLease{Found: true, Holder: "gw-a_2", AcquireTime: at(7 * time.Minute), RenewTime: at(8*time.Minute - time.Second)},
			want:  want{failed: true, message: "no heartbeat for 1m0s"},
		},
		"taken over a second ago, before the new process renewed its Lease: alive": {
			now: 9 * time.Minute,
			status: v1alpha1.RunAttemptStatus{Liveness: &v1alpha1.AttemptLiveness{
				Gateway: lease, Holder: me, Since: *mt(9*time.Minute - time.Second)}},
			lease: GatewayLease{Found: true, Holder: old, AcquireTime: at(0), RenewTime: at(2 * time.Minute)},
			want:  want{requeue: 59 * time.Second},
		},
		"the Lease is gone: the last status write is the heartbeat": {
			now: 2*time.Minute + 59*time.Second, status: governed(time.Minute, nil), written: 2 * time.Minute,
			want: want{requeue: time.Second},
		},
		"the Lease is gone a minute after the last write: failed": {
			now: 3 * time.Minute, status: governed(time.Minute, nil), written: 2 * time.Minute,
			want: want{failed: true, message: "no heartbeat for 1m0s"},
		},
		"a renewal in the future (clock skew) counts as now": {
			now: 4 * time.Minute, status: governed(time.Second, nil), lease: held(9 * time.Minute),
			want: want{requeue: time.Minute},
		},
		"heartbeatTime without liveness (an agent that reports it): as before": {
			now: 89 * time.Second, status: v1alpha1.RunAttemptStatus{HeartbeatTime: mt(30 * time.Second)},
			want: want{requeue: time.Second},
		},
		"heartbeatTime without liveness, a minute old: failed": {
			now: 90 * time.Second, status: v1alpha1.RunAttemptStatus{HeartbeatTime: mt(30 * time.Second)},
			want: want{failed: true, message: "no heartbeat for 1m0s"},
		},
		"a Lease of an attempt the gateway does not govern is not read": {
			now: 90 * time.Second, status: v1alpha1.RunAttemptStatus{HeartbeatTime: mt(30 * time.Second)},
			lease: held(90 * time.Second),
			want:  want{failed: true, message: "no heartbeat for 1m0s"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			a := fact(1, c.status)
			a.Lease = c.lease
			if c.written > 0 {
				a.FactsWritten = at(c.written)
			}
			in := runningAt(c.now, a)
			in.Attempts[0].Status.HeartbeatTime = c.status.HeartbeatTime // runningAt makes it fresh
			in.Spec.Budget.Deadline.Duration = time.Hour
			dec := Decide(in)
			got := want{failed: dec.Status.Phase == recovering}
			if got.failed {
				got.message = c.want.message
				if !strings.Contains(dec.Status.Message, c.want.message) {
					got.message = dec.Status.Message
				}
			} else {
				got.requeue = dec.RequeueAfter
			}
			if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("decision (-want +got):\n%s\nmessage: %s", diff, dec.Status.Message)
			}
		})
	}
}
