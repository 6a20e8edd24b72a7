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

// Package openai translates an OpenAI chat-completions answer — a stream of
// chat.completion.chunk payloads (the SSE "data:" lines, up to
// "data: [DONE]") or one non-streamed chat.completion body — into run-stream
// events (internal/stream): a STEP_STARTED, reasoning, text and tool-call
// blocks with their start / delta / end lifecycle, and a STEP_FINISHED.
//
// A Translator is pure: it reads no clock but Options.Now, does no I/O and
// never fails. Input it cannot parse yields no events. Every event it returns
// passes (*stream.Event).Validate, every block it opens it closes exactly
// once (at the latest in End), and no delta precedes its block's start.
//
// Only choice 0 is translated. Reasoning comes from delta.reasoning_content
// or, when that is empty, delta.reasoning (DeepSeek, OpenRouter, vLLM); text
// from delta.content; tool calls from delta.tool_calls, keyed by their index.
//
// Block ids start with Options.IDPrefix: "<prefix>/reasoning-<n>",
// "<prefix>/text-<n>", and "<prefix>/call-<n>" for a tool call the provider
// gave no id (a provider's own tool-call id is kept, so that the tool door's
// TOOL_CALL_RESULT can refer to it, unless this answer already used it).
//
// With Options.Redact set, a tool call's arguments are held until the call
// closes and sent as one TOOL_CALL_ARGS delta of Redact(whole arguments): a
// secret split across the provider's fragments is then seen whole by the
// redactor, and no part of it reaches an event. Redacting each fragment, or
// batches of fragments, cannot give that guarantee: a fragment ending in
// "sk-abc" is harmless alone, and once sent it cannot be taken back.
package openai
