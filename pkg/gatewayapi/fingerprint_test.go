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

package gatewayapi

import "testing"

// An approval is bound to the tool and the exact arguments, never to the
// agent-chosen context (issue 25 item 1): two contexts give one action id
// for the same arguments, and different arguments never share one whatever
// the contexts; the hash part is 128 bits.
func TestActionIDIgnoresTheCallersContext(t *testing.T) {
	small := []byte(`{"amount":1,"to":"ops"}`)
	big := []byte(`{"amount":99999,"to":"eve"}`)
	if ActionID("wire.send", small) == ActionID("wire.send", big) {
		t.Fatal("different arguments share an action id")
	}
	a, err := ActionIDOf("wire.send", map[string]any{"to": "ops", "amount": 1})
	if err != nil {
		t.Fatal(err)
	}
	if a != ActionID("wire.send", small) {
		t.Fatalf("ActionIDOf %q != ActionID %q", a, ActionID("wire.send", small))
	}
	if got := len(a) - len("wire.send-"); got != 32 {
		t.Fatalf("hash part has %d hex digits, want 32", got)
	}
	if ActionID("wire.send", small) == ActionID("wire.sent", small) {
		t.Fatal("the tool is not part of the action id")
	}
}
