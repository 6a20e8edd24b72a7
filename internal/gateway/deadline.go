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
	"fmt"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// callWindow is when a call admitted at now must be over: the run's
// deadline while it runs, its hard deadline (the deadline plus the
// finalization grace: only the reserve's time) while it finalizes; the zero
// time when the attempt carries no deadline. A call that would start with
// less than minLeft is refused: it is not started, so nothing is counted.
// Pure: the caller passes the clock's now.
func callWindow(spec v1alpha1.RunAttemptSpec, now time.Time, minLeft time.Duration) (time.Time, *apiError) {
	end, what := spec.Deadline, "deadline"
	if isFinalizing(spec) && spec.HardDeadline != nil {
		end, what = spec.HardDeadline, "hard deadline (its deadline plus the finalization grace)"
	}
	if end == nil {
		return time.Time{}, nil
	}
	if left := end.Sub(now); left < minLeft {
		e := errGrant(gatewayapi.CodeDeadlineReached, fmt.Sprintf(
			"the run's %s is at %s, %s from now: less than the %s a call needs, so it is not started; the operator finalizes the run or ends it",
			what, end.UTC().Format(time.RFC3339), left.Round(time.Millisecond), minLeft))
		e.fault = "DeadlineReached"
		return end.Time, e
	}
	return end.Time, nil
}

// boundedTimeout is the timeout of a call that must be over by until (the
// zero time: no bound) and by max, counted from now.
func boundedTimeout(max time.Duration, until, now time.Time) time.Duration {
	if until.IsZero() {
		return max
	}
	return min(max, until.Sub(now))
}
