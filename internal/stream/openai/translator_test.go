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

package openai

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/stream"
)

const prefix = "survey-a1/3"

// Transcripts as providers stream them (ids, fingerprints and usage kept),
// each as the gateway relays it: "data:" lines, a blank line between events.

// textStream is OpenAI's plain answer: a role chunk with empty content, the
// content chunks, a finish chunk with an empty delta, the usage chunk
// (stream_options.include_usage) whose choices are empty, then [DONE].
const textStream = `data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[{"index":0,"delta":{"content":"Three"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[{"index":0,"delta":{"content":" sources"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[{"index":0,"delta":{"content":" agree."},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":4,"total_tokens":23,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

`

// toolStream is OpenAI's answer with text, then two parallel tool calls,
// one after the other: the first fragment of each carries index, id, type
// and function.name with empty arguments; the arguments follow in pieces.
const toolStream = `data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"content":"Searching"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"content":" now."},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"http_get","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"url\":\"https://"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"example.org\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Kz0QWnM1","type":"function","function":{"name":"search","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"q\": \"agui\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-BD1","object":"chat.completion.chunk","created":1742000000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_b38e740b47","choices":[],"usage":{"prompt_tokens":81,"completion_tokens":40,"total_tokens":121}}

data: [DONE]

`

// interleavedStream has two tool calls whose fragments interleave by index
// (as some OpenAI-compatible servers send them), the second without an id.
const interleavedStream = `data: {"id":"x1","object":"chat.completion.chunk","created":1742000001,"model":"qwen3-32b","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]},"finish_reason":null}]}

data: {"id":"x1","object":"chat.completion.chunk","created":1742000001,"model":"qwen3-32b","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"type":"function","function":{"name":"list_dir","arguments":"{\"pa"}}]},"finish_reason":null}]}

data: {"id":"x1","object":"chat.completion.chunk","created":1742000001,"model":"qwen3-32b","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]},"finish_reason":null}]}

data: {"id":"x1","object":"chat.completion.chunk","created":1742000001,"model":"qwen3-32b","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"th\":\"/src\"}"}},{"index":0,"function":{"arguments":"\"a.go\"}"}}]},"finish_reason":null}]}

data: {"id":"x1","object":"chat.completion.chunk","created":1742000001,"model":"qwen3-32b","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

`

// reasoningStream is DeepSeek's reasoner: reasoning_content first (the
// first chunk's is empty), then content, then a tool call.
const reasoningStream = `data: {"id":"d1","object":"chat.completion.chunk","created":1742000002,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"d1","object":"chat.completion.chunk","created":1742000002,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"The user wants"},"logprobs":null,"finish_reason":null}]}

data: {"id":"d1","object":"chat.completion.chunk","created":1742000002,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" sources."},"logprobs":null,"finish_reason":null}]}

data: {"id":"d1","object":"chat.completion.chunk","created":1742000002,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"content":"Let me search.","reasoning_content":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"d1","object":"chat.completion.chunk","created":1742000002,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0_5c1f","type":"function","function":{"name":"search","arguments":"{\"q\":\"agui\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"d1","object":"chat.completion.chunk","created":1742000002,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":60,"total_tokens":90,"completion_tokens_details":{"reasoning_tokens":40}}}

data: [DONE]

`

// openRouterStream names its reasoning "reasoning" (as OpenRouter and vLLM
// do) and sends a keep-alive comment.
const openRouterStream = `: OPENROUTER PROCESSING

data: {"id":"gen-1","provider":"Groq","model":"qwen/qwen3-32b","object":"chat.completion.chunk","created":1742000003,"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hm"},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}

data: {"id":"gen-1","provider":"Groq","model":"qwen/qwen3-32b","object":"chat.completion.chunk","created":1742000003,"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"m."},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}

data: {"id":"gen-1","provider":"Groq","model":"qwen/qwen3-32b","object":"chat.completion.chunk","created":1742000003,"choices":[{"index":0,"delta":{"role":"assistant","content":"Yes.","reasoning":null},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}

data: {"id":"gen-1","provider":"Groq","model":"qwen/qwen3-32b","object":"chat.completion.chunk","created":1742000003,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop","native_finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}

data: [DONE]

`

// twoChoicesStream asked for n=2: only choice 0 is translated.
const twoChoicesStream = `data: {"id":"c2","object":"chat.completion.chunk","created":1742000004,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","created":1742000004,"model":"gpt-4o-mini","choices":[{"index":1,"delta":{"content":"Other"},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","created":1742000004,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Kept"},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","created":1742000004,"model":"gpt-4o-mini","choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}

data: {"id":"c2","object":"chat.completion.chunk","created":1742000004,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: [DONE]

`

// cutStream stops mid-answer: reasoning done, text open, a tool call's
// arguments half sent, no finish_reason, no [DONE].
const cutStream = `data: {"id":"cut","object":"chat.completion.chunk","created":1742000005,"model":"deepseek-chat","choices":[{"index":0,"delta":{"role":"assistant","content":"Fetching"},"finish_reason":null}]}

data: {"id":"cut","object":"chat.completion.chunk","created":1742000005,"model":"deepseek-chat","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_cut","type":"function","function":{"name":"http_get","arguments":"{\"url\":"}}]},"finish_reason":null}]}

`

func TestChunkStreams(t *testing.T) {
	cases := []struct {
		name       string
		transcript string
		endErr     error
		want       []string
	}{{
		name:       "text",
		transcript: textStream,
		want: []string{
			"STEP_STARTED " + prefix,
			"TEXT_MESSAGE_START survey-a1/3/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 "Three"`,
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 " sources"`,
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 " agree."`,
			"TEXT_MESSAGE_END survey-a1/3/text-1",
			"STEP_FINISHED " + prefix,
		},
	}, {
		name:       "text then sequential tool calls",
		transcript: toolStream,
		want: []string{
			"STEP_STARTED " + prefix,
			"TEXT_MESSAGE_START survey-a1/3/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 "Searching"`,
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 " now."`,
			"TEXT_MESSAGE_END survey-a1/3/text-1",
			"TOOL_CALL_START call_DdmO9pD3xa9XTPNJ32zg2hcA name=http_get parent=survey-a1/3/text-1",
			`TOOL_CALL_ARGS call_DdmO9pD3xa9XTPNJ32zg2hcA "{\"url\":\"https://"`,
			`TOOL_CALL_ARGS call_DdmO9pD3xa9XTPNJ32zg2hcA "example.org\"}"`,
			"TOOL_CALL_START call_Kz0QWnM1 name=search parent=survey-a1/3/text-1",
			`TOOL_CALL_ARGS call_Kz0QWnM1 "{\"q\": \"agui\"}"`,
			"TOOL_CALL_END call_DdmO9pD3xa9XTPNJ32zg2hcA",
			"TOOL_CALL_END call_Kz0QWnM1",
			"STEP_FINISHED " + prefix,
		},
	}, {
		name:       "interleaved tool calls",
		transcript: interleavedStream,
		want: []string{
			"STEP_STARTED " + prefix,
			"TOOL_CALL_START call_a name=read_file parent=",
			"TOOL_CALL_START survey-a1/3/call-1 name=list_dir parent=",
			`TOOL_CALL_ARGS survey-a1/3/call-1 "{\"pa"`,
			`TOOL_CALL_ARGS call_a "{\"path\":"`,
			`TOOL_CALL_ARGS survey-a1/3/call-1 "th\":\"/src\"}"`,
			`TOOL_CALL_ARGS call_a "\"a.go\"}"`,
			"TOOL_CALL_END call_a",
			"TOOL_CALL_END survey-a1/3/call-1",
			"STEP_FINISHED " + prefix,
		},
	}, {
		name:       "reasoning then text then a tool call",
		transcript: reasoningStream,
		want: []string{
			"STEP_STARTED " + prefix,
			"REASONING_START survey-a1/3/reasoning-1",
			"REASONING_MESSAGE_START survey-a1/3/reasoning-1",
			`REASONING_MESSAGE_CONTENT survey-a1/3/reasoning-1 "The user wants"`,
			`REASONING_MESSAGE_CONTENT survey-a1/3/reasoning-1 " sources."`,
			"REASONING_MESSAGE_END survey-a1/3/reasoning-1",
			"REASONING_END survey-a1/3/reasoning-1",
			"TEXT_MESSAGE_START survey-a1/3/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 "Let me search."`,
			"TEXT_MESSAGE_END survey-a1/3/text-1",
			"TOOL_CALL_START call_0_5c1f name=search parent=survey-a1/3/text-1",
			`TOOL_CALL_ARGS call_0_5c1f "{\"q\":\"agui\"}"`,
			"TOOL_CALL_END call_0_5c1f",
			"STEP_FINISHED " + prefix,
		},
	}, {
		name:       "reasoning field (OpenRouter, vLLM)",
		transcript: openRouterStream,
		want: []string{
			"STEP_STARTED " + prefix,
			"REASONING_START survey-a1/3/reasoning-1",
			"REASONING_MESSAGE_START survey-a1/3/reasoning-1",
			`REASONING_MESSAGE_CONTENT survey-a1/3/reasoning-1 "Hm"`,
			`REASONING_MESSAGE_CONTENT survey-a1/3/reasoning-1 "m."`,
			"REASONING_MESSAGE_END survey-a1/3/reasoning-1",
			"REASONING_END survey-a1/3/reasoning-1",
			"TEXT_MESSAGE_START survey-a1/3/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 "Yes."`,
			"TEXT_MESSAGE_END survey-a1/3/text-1",
			"STEP_FINISHED " + prefix,
		},
	}, {
		name:       "choice 0 only",
		transcript: twoChoicesStream,
		want: []string{
			"STEP_STARTED " + prefix,
			"TEXT_MESSAGE_START survey-a1/3/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 "Kept"`,
			"TEXT_MESSAGE_END survey-a1/3/text-1",
			"STEP_FINISHED " + prefix,
		},
	}, {
		name:       "cut stream",
		transcript: cutStream,
		endErr:     io.ErrUnexpectedEOF,
		want: []string{
			"STEP_STARTED " + prefix,
			"TEXT_MESSAGE_START survey-a1/3/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 "Fetching"`,
			"TEXT_MESSAGE_END survey-a1/3/text-1",
			"TOOL_CALL_START call_cut name=http_get parent=survey-a1/3/text-1",
			`TOOL_CALL_ARGS call_cut "{\"url\":"`,
			"TOOL_CALL_END call_cut",
			`CUSTOM agentrun.dev/stream-cut {"reason":"unexpected EOF"}`,
			"STEP_FINISHED " + prefix,
		},
	}, {
		name:       "ended without finish_reason",
		transcript: strings.Join(strings.Split(textStream, "\n\n")[:3], "\n\n"),
		want: []string{
			"STEP_STARTED " + prefix,
			"TEXT_MESSAGE_START survey-a1/3/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 "Three"`,
			`TEXT_MESSAGE_CONTENT survey-a1/3/text-1 " sources"`,
			"TEXT_MESSAGE_END survey-a1/3/text-1",
			"STEP_FINISHED " + prefix,
		},
	}, {
		name: "empty answer",
		want: []string{"STEP_STARTED " + prefix, "STEP_FINISHED " + prefix},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := translate(New(Options{IDPrefix: prefix, Now: clock}), tc.transcript, tc.endErr)
			if err := checkStream(got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, describeAll(got)); d != "" {
				t.Errorf("events (-want +got):\n%s", d)
			}
		})
	}
}

// chunk builds a chat.completion.chunk whose choice 0 has the given delta
// (JSON) and finish_reason ("" for null).
func chunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `data: {"id":"t","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` +
		delta + `,"finish_reason":` + f + `}]}` + "\n\n"
}

func TestChunkEdges(t *testing.T) {
	cases := []struct {
		name   string
		chunks []string
		want   []string
	}{{
		name: "a tool call's name after its id: arguments held until the START",
		chunks: []string{
			chunk(`{"tool_calls":[{"index":0,"id":"call_late","type":"function","function":{"arguments":"{\"a\""}}]}`, ""),
			chunk(`{"tool_calls":[{"index":0,"function":{"name":"late","arguments":":1}"}}]}`, ""),
			chunk(`{}`, "tool_calls"),
		},
		want: []string{
			"STEP_STARTED p",
			"TOOL_CALL_START call_late name=late parent=",
			`TOOL_CALL_ARGS call_late "{\"a\":1}"`,
			"TOOL_CALL_END call_late",
			"STEP_FINISHED p",
		},
	}, {
		name: "a tool call that never gets a name is not sent",
		chunks: []string{
			chunk(`{"tool_calls":[{"index":0,"id":"call_x","function":{"arguments":"{}"}}]}`, ""),
			chunk(`{}`, "tool_calls"),
		},
		want: []string{"STEP_STARTED p", "STEP_FINISHED p"},
	}, {
		name: "a reused provider id gets a prefix id",
		chunks: []string{
			chunk(`{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"a","arguments":""}},{"index":1,"id":"call_1","function":{"name":"b","arguments":""}}]}`, "tool_calls"),
		},
		want: []string{
			"STEP_STARTED p",
			"TOOL_CALL_START call_1 name=a parent=",
			"TOOL_CALL_START p/call-1 name=b parent=",
			"TOOL_CALL_END call_1",
			"TOOL_CALL_END p/call-1",
			"STEP_FINISHED p",
		},
	}, {
		name: "text after a tool call opens a new message; reasoning after text closes it",
		chunks: []string{
			chunk(`{"content":"A"}`, ""),
			chunk(`{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}`, ""),
			chunk(`{"content":"B"}`, ""),
			chunk(`{"reasoning_content":"R"}`, ""),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}`, ""),
			chunk(`{"tool_calls":[{"index":1,"id":"d","function":{"name":"g"}}]}`, "tool_calls"),
		},
		want: []string{
			"STEP_STARTED p",
			"TEXT_MESSAGE_START p/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT p/text-1 "A"`,
			"TEXT_MESSAGE_END p/text-1",
			"TOOL_CALL_START c name=f parent=p/text-1",
			`TOOL_CALL_ARGS c "{"`,
			"TEXT_MESSAGE_START p/text-2 role=assistant",
			`TEXT_MESSAGE_CONTENT p/text-2 "B"`,
			"TEXT_MESSAGE_END p/text-2",
			"REASONING_START p/reasoning-1",
			"REASONING_MESSAGE_START p/reasoning-1",
			`REASONING_MESSAGE_CONTENT p/reasoning-1 "R"`,
			`TOOL_CALL_ARGS c "}"`,
			"REASONING_MESSAGE_END p/reasoning-1",
			"REASONING_END p/reasoning-1",
			"TOOL_CALL_START d name=g parent=p/text-2",
			"TOOL_CALL_END c",
			"TOOL_CALL_END d",
			"STEP_FINISHED p",
		},
	}, {
		name: "reasoning_content wins over reasoning when both are sent",
		chunks: []string{
			chunk(`{"reasoning_content":"once","reasoning":"once"}`, "stop"),
		},
		want: []string{
			"STEP_STARTED p",
			"REASONING_START p/reasoning-1",
			"REASONING_MESSAGE_START p/reasoning-1",
			`REASONING_MESSAGE_CONTENT p/reasoning-1 "once"`,
			"REASONING_MESSAGE_END p/reasoning-1",
			"REASONING_END p/reasoning-1",
			"STEP_FINISHED p",
		},
	}, {
		name: "garbage, [DONE], empty and odd shapes yield nothing",
		chunks: []string{
			"data: [DONE]\n\n",
			"data: {not json\n\n",
			"data: \n\n",
			"data: 42\n\n",
			`data: {"choices":"no"}` + "\n\n",
			chunk(`{}`, ""),
			chunk(`{"content":null,"reasoning":{"effort":"high"},"tool_calls":[]}`, ""),
			chunk(`{"role":"assistant","content":""}`, ""),
		},
		want: []string{"STEP_STARTED p", "STEP_FINISHED p"},
	}, {
		name: "content as parts",
		chunks: []string{
			chunk(`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, "stop"),
		},
		want: []string{
			"STEP_STARTED p",
			"TEXT_MESSAGE_START p/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT p/text-1 "ab"`,
			"TEXT_MESSAGE_END p/text-1",
			"STEP_FINISHED p",
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := translate(New(Options{IDPrefix: "p", Now: clock}), strings.Join(tc.chunks, ""), nil)
			if err := checkStream(got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, describeAll(got)); d != "" {
				t.Errorf("events (-want +got):\n%s", d)
			}
		})
	}
}

func TestLifecycleCalls(t *testing.T) {
	tr := New(Options{IDPrefix: "p", Now: clock})
	// No Start: the first chunk starts the step.
	got := describeAll(tr.Chunk([]byte(`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`)))
	want := []string{"STEP_STARTED p", "TEXT_MESSAGE_START p/text-1 role=assistant", `TEXT_MESSAGE_CONTENT p/text-1 "hi"`}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("first chunk (-want +got):\n%s", d)
	}
	if evs := tr.Start(); evs != nil {
		t.Errorf("Start after the step started = %v, want nil", describeAll(evs))
	}
	if evs := tr.Chunk([]byte("[DONE]")); evs != nil {
		t.Errorf("[DONE] = %v, want nil", describeAll(evs))
	}
	got = describeAll(tr.End(nil))
	if d := cmp.Diff([]string{"TEXT_MESSAGE_END p/text-1", "STEP_FINISHED p"}, got); d != "" {
		t.Errorf("End (-want +got):\n%s", d)
	}
	for name, evs := range map[string][]stream.Event{
		"End":        tr.End(errors.New("again")),
		"Chunk":      tr.Chunk([]byte(`{"choices":[{"index":0,"delta":{"content":"late"}}]}`)),
		"Completion": tr.Completion([]byte(`{"choices":[{"index":0,"message":{"content":"late"}}]}`)),
	} {
		if evs != nil {
			t.Errorf("%s after End = %v, want nil", name, describeAll(evs))
		}
	}
}

func TestDefaults(t *testing.T) {
	evs := New(Options{}).End(nil)
	if err := evs[0].Validate(); err != nil || evs[0].StepName != DefaultStepName || evs[0].Timestamp == 0 {
		t.Errorf("default step = %+v (%v), want %q stamped by time.Now", evs[0], err, DefaultStepName)
	}
	evs = New(Options{StepName: "plan", IDPrefix: "a/1/", Now: clock}).Completion([]byte(`{"choices":[{"message":{"content":"x"}}]}`))
	if got := describeAll(evs); got[0] != "STEP_STARTED plan" || got[1] != "TEXT_MESSAGE_START a/1/text-1 role=assistant" {
		t.Errorf("events = %v", got)
	}
}

// deepSeekCompletion is a non-streamed answer with reasoning, text and two
// tool calls (the second's arguments an object, as some compatible servers
// send them), plus a second choice.
const deepSeekCompletion = `{
  "id": "930c60df-bf64-41c9-a88e-3ec75f81e00e",
  "object": "chat.completion",
  "created": 1742000010,
  "model": "deepseek-reasoner",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Searching two ways.",
        "reasoning_content": "Two searches are better than one.",
        "tool_calls": [
          {"id": "call_0_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"agui events\"}"}},
          {"id": "call_1_b", "type": "function", "function": {"name": "fetch", "arguments": {"url": "https://example.org"}}}
        ]
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    },
    {"index": 1, "message": {"role": "assistant", "content": "ignored"}, "finish_reason": "stop"}
  ],
  "usage": {"prompt_tokens": 20, "completion_tokens": 50, "total_tokens": 70},
  "system_fingerprint": "fp_5417b77867_prod0225"
}`

func TestCompletion(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []string
	}{{
		name: "reasoning, text and tool calls",
		body: deepSeekCompletion,
		want: []string{
			"STEP_STARTED p",
			"REASONING_START p/reasoning-1",
			"REASONING_MESSAGE_START p/reasoning-1",
			`REASONING_MESSAGE_CONTENT p/reasoning-1 "Two searches are better than one."`,
			"REASONING_MESSAGE_END p/reasoning-1",
			"REASONING_END p/reasoning-1",
			"TEXT_MESSAGE_START p/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT p/text-1 "Searching two ways."`,
			"TEXT_MESSAGE_END p/text-1",
			"TOOL_CALL_START call_0_a name=search parent=p/text-1",
			`TOOL_CALL_ARGS call_0_a "{\"q\":\"agui events\"}"`,
			"TOOL_CALL_START call_1_b name=fetch parent=p/text-1",
			`TOOL_CALL_ARGS call_1_b "{\"url\":\"https://example.org\"}"`,
			"TOOL_CALL_END call_0_a",
			"TOOL_CALL_END call_1_b",
			"STEP_FINISHED p",
		},
	}, {
		name: "OpenAI text",
		body: `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I assist you today?","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29},"service_tier":"default"}`,
		want: []string{
			"STEP_STARTED p",
			"TEXT_MESSAGE_START p/text-1 role=assistant",
			`TEXT_MESSAGE_CONTENT p/text-1 "Hello! How can I assist you today?"`,
			"TEXT_MESSAGE_END p/text-1",
			"STEP_FINISHED p",
		},
	}, {
		name: "OpenAI tool call without content",
		body: `{"id":"chatcmpl-abc","object":"chat.completion","created":1741569952,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_12345xyz","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris, France\"}"}}],"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}]}`,
		want: []string{
			"STEP_STARTED p",
			"TOOL_CALL_START call_12345xyz name=get_weather parent=",
			`TOOL_CALL_ARGS call_12345xyz "{\"location\":\"Paris, France\"}"`,
			"TOOL_CALL_END call_12345xyz",
			"STEP_FINISHED p",
		},
	}, {
		name: "not a completion",
		body: `<html>502 Bad Gateway</html>`,
		want: []string{"STEP_STARTED p", "STEP_FINISHED p"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(Options{IDPrefix: "p", Now: clock})
			got := append(tr.Start(), tr.Completion([]byte(tc.body))...)
			got = append(got, tr.End(nil)...)
			if err := checkStream(got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, describeAll(got)); d != "" {
				t.Errorf("events (-want +got):\n%s", d)
			}
		})
	}
}

// TestRedactSplitSecret: secrets split across the provider's argument
// fragments — where redacting each fragment finds nothing — never reach an
// event; the call's arguments are Redact of the whole.
func TestRedactSplitSecret(t *testing.T) {
	fragments := []string{
		`{"url":"https://api.example.org/v1","headers":{"X-Note":"Bear`,
		`er abcdEFGH1234ijklMNOP"},"key":"sk-pr`,
		`oj-AbCdEfGhIjKl`,
		`MnOpQrStUvWx","pad":"` + strings.Repeat("x", 300) + `","aws":"AKIAIOSF`,
		`ODNN7EXAMPLE"}`,
	}
	full := strings.Join(fragments, "")
	for _, f := range fragments {
		if chain.RedactText(f) != f {
			t.Fatalf("fixture: fragment %q holds a whole secret; the test needs split ones", f)
		}
	}
	want := chain.RedactText(full)
	if want == full || strings.Count(want, chain.Redacted) != 3 {
		t.Fatalf("fixture: RedactText(full) = %s, want three secrets found", want)
	}
	for _, cut := range []bool{false, true} {
		tr := New(Options{IDPrefix: "p", Now: clock, Redact: chain.RedactText})
		var sse strings.Builder
		sse.WriteString(chunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_s","type":"function","function":{"name":"http_get","arguments":""}}]}`, ""))
		for _, f := range fragments {
			sse.WriteString(chunk(`{"tool_calls":[{"index":0,"function":{"arguments":`+quote(f)+`}}]}`, ""))
		}
		var endErr error
		if cut {
			endErr = io.ErrUnexpectedEOF
		} else {
			sse.WriteString(chunk(`{}`, "tool_calls"))
		}
		got := translate(tr, sse.String(), endErr)
		if err := checkStream(got); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(map[string][]string{"call_s": {want}}, toolArgs(got)); d != "" {
			t.Errorf("cut=%v: arguments (-want +got):\n%s", cut, d)
		}
		for _, ev := range got {
			for _, leak := range []string{"abcdEFGH", "AbCdEfGh", "MnOpQrSt", "AKIAIOSF", "ODNN7EXAMPLE"} {
				if strings.Contains(ev.Delta, leak) {
					t.Errorf("cut=%v: %s leaks %q", cut, describe(ev), leak)
				}
			}
		}
	}
}

// TestNoRedactStreamsFragments: without Redact, each fragment is its own
// delta, as it came.
func TestNoRedactStreamsFragments(t *testing.T) {
	got := translate(New(Options{IDPrefix: "p", Now: clock}), toolStream, nil)
	want := map[string][]string{
		"call_DdmO9pD3xa9XTPNJ32zg2hcA": {`{"url":"https://`, `example.org"}`},
		"call_Kz0QWnM1":                 {`{"q": "agui"}`},
	}
	if d := cmp.Diff(want, toolArgs(got)); d != "" {
		t.Errorf("arguments (-want +got):\n%s", d)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
