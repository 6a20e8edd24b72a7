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

// Decide turns the facts of one run into its next status and the actions
// that bring the world there. It is pure: same input, same decision.
func Decide(in Input) Decision {
	d, _ := decide(in)
	return d
}

// decide is Decide that also names the rung that decided, for tests: the
// facts are folded once, the first rung whose rule matches gives the
// verdict, and enact turns it into the Decision.
func decide(in Input) (Decision, string) {
	f := newFacts(in)
	for _, r := range ladder {
		if v, ok := r.decide(f); ok {
			return enact(f, v), r.name
		}
		if r.next != nil {
			f = r.next(f)
		}
	}
	panic("lifecycle: the steady rule always matches")
}

// rule is one rung of the ladder: it reads the facts and returns a verdict,
// or no match. A rung that does not match may hand the rungs below it other
// facts (next): the Queue rung hands them the session holder as started.
type rule struct {
	name   string
	decide func(*facts) (verdict, bool)
	next   func(*facts) *facts
}

// ladder is the precedence of the decision, first match wins. It is the only
// place the order is written down; doc.go explains it.
var ladder = []rule{
	{"Terminated", absorbing, nil},            // absorbing: the decision stands, late facts are counted
	{"Stopping", stoppingLatch, nil},          // an earlier pass decided to end: wait for the pod
	{"Cancel", cancel, nil},                   // spec.stop: Cancel
	{"Blocked", blocked, nil},                 // Pending: its session or policy is not there or not ready
	{"Queue", queue, startIfHolder},           // Pending/Queued: wait, QueueFull, QueueTimeout, or start
	{"HardDeadline", hardDeadline, nil},       // deadline + finalizationGrace, any active phase
	{"FactGrace", factGrace, nil},             // the pod stopped: wait for the gateway's last facts
	{"AttemptFailed", attemptFailed, nil},     // unsafe, finalizing, gate, recover, exhausted
	{"PolicyViolation", policyViolation, nil}, // counters back, usage above grant
	{"Finish", finishOrSettle, nil},           // finish proposed, publication settled
	{"Gates", gates, nil},                     // a gate at its hard limit
	{"Steady", steady, nil},                   // keep working: grant, directives
}
