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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Steps and progress are what the gateway sees, not what the agent says
// (issue 30, item 1), so StepLimit and NoProgress bind an agent that only
// uses the doors and one that always claims progress:
//
//   - a step is a model turn the gateway served: every dispatched model
//     request counts (usage.modelRequests); steps an agent reports on
//     POST /self/steps may add detail (a step without a model turn) but
//     never lower the count — status.steps is the larger of the two;
//   - progress is a tool call with a fingerprint not seen before in the
//     attempt (a published section included: its content is in the
//     fingerprint), or a model answer that repeats none of the attempt's
//     last recentAnswers answers. An agent's progress claim is ignored.
//
// recentAnswers is how many answers a new one is compared with. They are
// kept in memory only: after a gateway restart the first answer counts as
// progress, which errs on the side of the run.
const recentAnswers = 8

// stepCount is the attempt's steps: the larger of the model turns served
// and the steps the agent reported.
func (f *facts) stepCount() int64 { return max(f.steps, f.usage.ModelRequests) }

// noteProgress records progress at the current step.
func (f *facts) noteProgress() { f.lastProgressStep = f.stepCount() }

// noteAnswer records a model answer by its digest: progress unless it
// repeats one of the recent answers. An empty digest (an answer with no
// content, or one the gateway could not read) is not progress.
func (f *facts) noteAnswer(digest string) {
	if !isNewAnswer(f.answers, digest) {
		return
	}
	f.answers = append(f.answers, digest)
	if len(f.answers) > recentAnswers {
		f.answers = slices.Delete(f.answers, 0, len(f.answers)-recentAnswers)
	}
	f.noteProgress()
}

// isNewAnswer says whether an answer with digest is progress: it has
// content and repeats none of recent.
func isNewAnswer(recent []string, digest string) bool {
	return digest != "" && !slices.Contains(recent, digest)
}

// noteAnswer records a model answer's digest (see facts.noteAnswer).
func (k *keeper) noteAnswer(digest string) {
	k.record(func() { k.facts.noteAnswer(digest) })
}

// answerDigest gathers what a model answer says — its text, its refusal,
// and the names and arguments of the tools it calls, by index — and hashes
// nothing that changes between two answers saying the same (ids,
// timestamps, usage, how a stream cut it into fragments).
type answerDigest struct {
	text, refusal strings.Builder
	tools         map[int]*digestTool
}

type digestTool struct{ name, args strings.Builder }

func newAnswerDigest() *answerDigest { return &answerDigest{tools: map[int]*digestTool{}} }

func (d *answerDigest) tool(i int) *digestTool {
	t := d.tools[i]
	if t == nil {
		t = &digestTool{}
		d.tools[i] = t
	}
	return t
}

// sum is the digest, or "" if the answer said nothing.
func (d *answerDigest) sum() string {
	if d == nil || d.text.Len() == 0 && d.refusal.Len() == 0 && len(d.tools) == 0 {
		return ""
	}
	h := sha256.New()
	field := func(s string) {
		_, _ = fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	field(d.text.String())
	field(d.refusal.String())
	idx := slices.Sorted(maps.Keys(d.tools))
	for _, i := range idx {
		field(d.tools[i].name.String())
		field(d.tools[i].args.String())
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// chatToolCall is what a digest reads of a chat tool call.
type chatToolCall struct {
	Index    int `json:"index"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatCompletionDigest is the digest of a non-streamed chat completion.
func chatCompletionDigest(raw []byte) string {
	var c struct {
		Choices []struct {
			Message struct {
				Content   any            `json:"content"`
				Refusal   string         `json:"refusal"`
				ToolCalls []chatToolCall `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return ""
	}
	d := newAnswerDigest()
	n := 0
	for _, ch := range c.Choices {
		d.text.WriteString(contentText(ch.Message.Content))
		d.refusal.WriteString(ch.Message.Refusal)
		for _, tc := range ch.Message.ToolCalls {
			t := d.tool(n)
			t.name.WriteString(tc.Function.Name)
			t.args.WriteString(tc.Function.Arguments)
			n++
		}
	}
	return d.sum()
}

// contentText is a message content's text: a string, or the text of its
// parts.
func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var s strings.Builder
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					s.WriteString(t)
				}
			}
		}
		return s.String()
	}
	return ""
}

// chatChunk adds a streamed chat chunk's content to the digest: text and
// arguments are joined in the order their fragments come, a tool call's by
// its index.
func (d *answerDigest) chatChunk(payload []byte) {
	if d == nil {
		return
	}
	var c struct {
		Choices []struct {
			Delta struct {
				Content   string         `json:"content"`
				Refusal   string         `json:"refusal"`
				ToolCalls []chatToolCall `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return
	}
	for _, ch := range c.Choices {
		d.text.WriteString(ch.Delta.Content)
		d.refusal.WriteString(ch.Delta.Refusal)
		for _, tc := range ch.Delta.ToolCalls {
			t := d.tool(tc.Index)
			t.name.WriteString(tc.Function.Name)
			t.args.WriteString(tc.Function.Arguments)
		}
	}
}
