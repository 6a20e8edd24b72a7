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
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// BenchmarkChatPassthroughLateTurn is what the chat door does to a large
// request it passes through, apart from the network: parse it (fields,
// messages, the conversation's fingerprint), take its prompt's shape, and
// encode it again for the provider (model, max_tokens, stream_options
// rewritten). The request is Claude Code's late turn as a chat request
// (about 160 KB): how much of the door's time on a large-context agent is
// JSON decoding and re-encoding.
func BenchmarkChatPassthroughLateTurn(b *testing.B) {
	c, e := parseMessages(post(lateTurn(b, "claude-code-session.json", jMessages)))
	if e != nil {
		b.Fatal(e.body.Message)
	}
	t, e := translateMessagesToChat(c)
	if e != nil {
		b.Fatal(e.body.Message)
	}
	chat := t.body("m", 128000)
	m := v1alpha1.Model{Name: "m"}
	b.SetBytes(int64(len(chat)))
	for b.Loop() {
		r, e := parseChat(post(chat))
		if e != nil {
			b.Fatal(e.body.Message)
		}
		if shapeOfItems(r.model, len(r.body), r.fields, jMessages, r.msgs) == nil {
			b.Fatal("no shape")
		}
		_, _ = r.upstreamBody(m, 4096)
	}
}
