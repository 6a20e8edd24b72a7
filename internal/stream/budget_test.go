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

package stream

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Within its budget a run streams everything; past it, deltas are dropped,
// finals pass with their content cut, and one marker comes first.
func TestBudgetDropsDeltasAndCutsFinalsPastItsBound(t *testing.T) {
	delta := func(s string) Event { return Event{Type: TextMessageContent, MessageID: "m", Delta: s} }
	result := func(s string) Event {
		return Event{Type: ToolCallResult, ToolCallID: "c", MessageID: "c/r", Content: s}
	}
	long := strings.Repeat("r", 4*BudgetFinalBytes)
	tests := map[string]struct {
		max        int64
		in         []Event
		wantTypes  []string
		wantDrop   int64
		wantMaxLen int // of any content
	}{
		"unbounded": {max: 0, in: []Event{delta(long), result(long)},
			wantTypes: []string{"TEXT_MESSAGE_CONTENT", "TOOL_CALL_RESULT"}, wantMaxLen: len(long)},
		"within": {max: 1 << 20, in: []Event{delta("a"), result(long), delta("b")},
			wantTypes: []string{"TEXT_MESSAGE_CONTENT", "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT"}, wantMaxLen: len(long)},
		"a delta past it": {max: 1000, in: []Event{delta("a"), delta(long), delta("b"), result("ok")},
			wantTypes: []string{"TEXT_MESSAGE_CONTENT", "CUSTOM", "TOOL_CALL_RESULT"}, wantDrop: 2, wantMaxLen: 2},
		"a final past it is cut": {max: 1000, in: []Event{result(long), delta("x"), result(long)},
			wantTypes: []string{"CUSTOM", "TOOL_CALL_RESULT", "TOOL_CALL_RESULT"}, wantDrop: 1, wantMaxLen: BudgetFinalBytes},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := Budget{Max: tc.max}
			var types []string
			maxLen := 0
			for _, ev := range tc.in {
				for _, out := range b.Admit(ev) {
					types = append(types, string(out.Type))
					if out.Type == Custom && out.Name != EventBudgetExceeded {
						t.Errorf("custom event %q", out.Name)
					}
					maxLen = max(maxLen, len(out.Content))
				}
			}
			if d := cmp.Diff(tc.wantTypes, types); d != "" {
				t.Errorf("types (-want +got):\n%s", d)
			}
			if b.Dropped() != tc.wantDrop {
				t.Errorf("dropped %d, want %d", b.Dropped(), tc.wantDrop)
			}
			if maxLen != tc.wantMaxLen {
				t.Errorf("longest content %d, want %d", maxLen, tc.wantMaxLen)
			}
		})
	}
}
