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

	. "github.com/onsi/gomega"
)

func TestAnswerDigest(t *testing.T) {
	g := NewWithT(t)
	a := chatCompletionDigest([]byte(`{"id":"x1","created":1,"choices":[{"message":{"role":"assistant","content":"hi",` +
		`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}],"usage":{"total_tokens":3}}`))
	b := chatCompletionDigest([]byte(`{"id":"x2","created":2,"choices":[{"message":{"role":"assistant","content":"hi",` +
		`"tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}],"usage":{"total_tokens":7}}`))
	c := chatCompletionDigest([]byte(`{"choices":[{"message":{"content":"hi","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":2}"}}]}}]}`))
	g.Expect(a).NotTo(BeEmpty())
	g.Expect(a).To(Equal(b), "ids, times and usage are not what an answer says")
	g.Expect(a).NotTo(Equal(c), "other arguments are another answer")
	g.Expect(chatCompletionDigest([]byte(`{"choices":[{"message":{"content":""}}]}`))).To(BeEmpty(), "an empty answer says nothing")
	g.Expect(chatCompletionDigest([]byte(`not json`))).To(BeEmpty())
	parts := chatCompletionDigest([]byte(`{"choices":[{"message":{"content":[{"type":"text","text":"hi"}],` +
		`"tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`))
	g.Expect(parts).To(Equal(a), "content parts are their text")

	d := newAnswerDigest()
	d.chatChunk([]byte(`{"id":"s","choices":[{"delta":{"content":"hi"}}]}`))
	d.chatChunk([]byte(`{"id":"s","choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_3","function":{"name":"f","arguments":""}}]}}]}`))
	d.chatChunk([]byte(`{"id":"s","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}}]}`))
	d.chatChunk([]byte(`{"id":"s","choices":[],"usage":{"total_tokens":3}}`))
	g.Expect(d.sum()).To(Equal(a), "a streamed answer in these fragments digests as the whole one")
	g.Expect(newAnswerDigest().sum()).To(BeEmpty())

	g.Expect(isNewAnswer(nil, a)).To(BeTrue())
	g.Expect(isNewAnswer([]string{c, a}, a)).To(BeFalse())
	g.Expect(isNewAnswer(nil, "")).To(BeFalse())
}
