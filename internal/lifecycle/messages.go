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
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// maxMessage is the API's bound on status.message.
const maxMessage = 2048

// dur prints a duration for people: whole seconds from one second up.
func dur(d time.Duration) string {
	if d >= time.Second || d <= -time.Second {
		d = d.Round(time.Second)
	}
	return d.String()
}

// detail appends a pod's or fault's own message, if any.
func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + textutil.Truncate(s, 256)
}

// count says "1 thing" or "n things".
func count(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// describeReserve says what a finalization may still spend.
func (f *facts) describeReserve(extra v1alpha1.Usage) string {
	var parts []string
	if extra.ModelRequests > 0 {
		parts = append(parts, count(extra.ModelRequests, "model request"))
	}
	if extra.ToolCalls > 0 {
		parts = append(parts, count(extra.ToolCalls, "tool call"))
	}
	if f.lim.tokens && extra.Tokens > 0 {
		parts = append(parts, count(extra.Tokens, "token"))
	}
	if f.lim.cost && extra.Cost > 0 {
		parts = append(parts, "a cost of "+extra.Cost.String())
	}
	if len(parts) == 0 {
		return "an empty reserve"
	}
	return "the reserve of " + strings.Join(parts, " and ")
}

// publicationStory tells what was durably published.
func (f *facts) publicationStory() string {
	pub, ok := f.latestPublication()
	if !ok || pub.BlocksCommitted == 0 && !pub.Settled {
		return "nothing published"
	}
	s := fmt.Sprintf("%d blocks published", pub.BlocksCommitted)
	if pub.BlocksPlanned > 0 {
		s = fmt.Sprintf("%d of %d blocks published", pub.BlocksCommitted, pub.BlocksPlanned)
	}
	if pub.Location != "" {
		s += " to " + pub.Location
	}
	return s
}

// unknownEffectsStory names the current attempt's side effects whose
// outcome the gateway could not know (a timeout, a lost connection, a
// gateway restart): a person should check them, since nobody else will.
func (f *facts) unknownEffectsStory() string {
	if !f.cur.exists {
		return ""
	}
	var names []string
	for _, r := range f.cur.facts.Status.InFlight {
		if r.Outcome == v1alpha1.OutcomeUnknown {
			names = append(names, r.Tool+" "+r.ID)
		}
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return "1 side effect has an unknown outcome, check it: " + names[0]
	}
	return fmt.Sprintf("%d side effects have an unknown outcome, check them: %s", len(names), strings.Join(names, ", "))
}

// settledFromFactsStory tells a publication the operator settled from the
// gateway's facts.
func (f *facts) settledFromFactsStory() string {
	pub, _ := f.latestPublication()
	s := fmt.Sprintf("the agent exited 0 without settling; settled from what the gateway published: %d/%d sections",
		pub.BlocksCommitted, pub.BlocksPlanned)
	if pub.Location != "" {
		s += " in " + pub.Location
	}
	return s
}

// runningMessage tells how far a working run is on attempt a.
func (f *facts) runningMessage(a attempt, directives []v1alpha1.Directive) string {
	w := f.lim.working()
	msg := fmt.Sprintf("attempt %d running: %d/%d model requests, %d/%d steps",
		a.n, f.used.ModelRequests, max(w.ModelRequests, 0), f.steps, f.lim.maxSteps)
	if len(directives) > 0 {
		parts := make([]string, 0, len(directives))
		for _, d := range directives {
			parts = append(parts, fmt.Sprintf("%s at %s", d.Type, d.Message))
		}
		msg += "; directives: " + strings.Join(parts, ", ")
	}
	return msg
}

// finalizeCause says who asked the run to finalize: the user (spec.stop) or
// the operator on the user's behalf (Input.StopCause: its parent run).
func finalizeCause(in Input) string {
	if in.StopCause != "" {
		return "finalize requested because " + in.StopCause
	}
	return "finalize requested (spec.stop: Finalize)"
}

// startingMessage tells that replacement attempt n is starting.
func (f *facts) startingMessage(n int32, story string) string {
	return fmt.Sprintf("%s; starting attempt %d of %d", story, n, f.lim.maxAttempts)
}

// cancelCause says who cancelled: the user (spec.stop) or the operator on
// the user's behalf (Input.StopCause).
func cancelCause(in Input) string {
	if in.StopCause != "" {
		return "cancelled because " + in.StopCause
	}
	return "cancelled (spec.stop: Cancel)"
}
