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
	"encoding/json"
	"testing"
)

// The input of an agent's third turn, as @openai/agents and openai-agents
// send it: each turn's function calls, then their outputs. Each turn is its
// own assistant message, followed by its tool messages; calls of one turn
// (parallel calls) share one.
func TestTranslateInputKeepsEachTurnsFunctionCallsApart(t *testing.T) {
	input := `[
	 {"role":"user","content":"goal"},
	 {"type":"function_call","call_id":"c1","name":"notes_write","arguments":"{}"},
	 {"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"noted"}]},
	 {"type":"function_call","call_id":"c2","name":"lookup","arguments":"{}"},
	 {"type":"function_call","call_id":"c3","name":"lookup","arguments":"{}"},
	 {"type":"function_call_output","call_id":"c2","output":"a"},
	 {"type":"function_call_output","call_id":"c3","output":"b"}]`
	msgs, e := translateInput(nil, json.RawMessage(input))
	if e != nil {
		t.Fatalf("translateInput: %+v", *e)
	}
	var got []string
	for _, m := range msgs {
		role := m[keyRole].(string)
		if tc, ok := m["tool_calls"].([]map[string]any); ok {
			for _, c := range tc {
				role += " " + c["id"].(string)
			}
		}
		if id, ok := m["tool_call_id"].(string); ok {
			role += " " + id
		}
		got = append(got, role)
	}
	want := []string{"user", "assistant c1", "tool c1", "assistant c2 c3", "tool c2", "tool c3"}
	if len(got) != len(want) {
		t.Fatalf("messages %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("messages %q, want %q", got, want)
		}
	}
}
