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
	"strings"
)

// Wire names of the Responses API and chat completions.
const (
	fieldTools              = "tools"
	fieldToolChoice         = "tool_choice"
	keyStatus               = "status"
	fieldStore              = "store"
	keyRole                 = "role"
	roleUser                = "user"
	fieldMetadata           = "metadata"
	fieldTopP               = "top_p"
	roleTool                = "tool"
	keyResponse             = "response"
	keyLogprobs             = "logprobs"
	keyItemID               = "item_id"
	keyOutputIndex          = "output_index"
	keyContentIndex         = "content_index"
	keyDelta                = "delta"
	itemFunctionCall        = "function_call"
	evCompleted             = "response.completed"
	evIncomplete            = "response.incomplete"
	itemMessage             = "message"
	itemReasoning           = "reasoning"
	roleAssistant           = "assistant"
	fieldInstructions       = "instructions"
	fieldBackground         = "background"
	fieldPreviousResponseID = "previous_response_id"
	fieldTemperature        = "temperature"
	valueAuto               = "auto"
	fieldParallelToolCalls  = "parallel_tool_calls"
	typeFunction            = "function"
	keyName                 = jName
	formatJSONSchema        = "json_schema"
	keyArguments            = "arguments"
	partOutputText          = "output_text"
	keyError                = "error"
	statusIncomplete        = "incomplete"
	keyAnnotations          = "annotations"
	outcomeStreamCut        = "stream_cut"
	roleSystem              = "system"
	fieldStream             = "stream"
)

// The run's stream events of a Responses answer: the answer is read as the
// chat completion (or chunk) it amounts to and given to the same translator
// as the chat door's (openai.Translator), so the run stream shows the same
// text, reasoning and tool call blocks whichever door the request came
// through.

type chunkCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments,omitempty"`
	} `json:"function"`
}

type chunkDelta struct {
	Content          string      `json:"content,omitempty"`
	ReasoningContent string      `json:"reasoning_content,omitempty"`
	ToolCalls        []chunkCall `json:"tool_calls,omitempty"`
}

func asChunk(d chunkDelta, finish string) []byte {
	c := map[string]any{"index": 0, keyDelta: d}
	if finish != "" {
		c["finish_reason"] = finish
	}
	raw, _ := json.Marshal(map[string]any{wireChoices: []any{c}})
	return raw
}

// responseItem is the part of a Responses output item the run stream reads.
type responseItem struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// responseEventAsChunk is the chat chunk a Responses stream event amounts
// to (nil: none).
func responseEventAsChunk(payload []byte) []byte {
	var ev struct {
		Type        string        `json:"type"`
		Delta       string        `json:"delta"`
		OutputIndex int           `json:"output_index"`
		Item        *responseItem `json:"item"`
	}
	if json.Unmarshal(payload, &ev) != nil {
		return nil
	}
	switch ev.Type {
	case "response.output_text.delta":
		return asChunk(chunkDelta{Content: ev.Delta}, "")
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		return asChunk(chunkDelta{ReasoningContent: ev.Delta}, "")
	case "response.output_item.added":
		if ev.Item == nil || ev.Item.Type != itemFunctionCall {
			return nil
		}
		c := chunkCall{Index: ev.OutputIndex, ID: ev.Item.CallID}
		c.Function.Name, c.Function.Arguments = ev.Item.Name, ev.Item.Arguments
		return asChunk(chunkDelta{ToolCalls: []chunkCall{c}}, "")
	case "response.function_call_arguments.delta":
		c := chunkCall{Index: ev.OutputIndex}
		c.Function.Arguments = ev.Delta
		return asChunk(chunkDelta{ToolCalls: []chunkCall{c}}, "")
	case evCompleted, evIncomplete, "response.failed":
		return asChunk(chunkDelta{}, "stop")
	}
	return nil
}

// responseAsCompletion is the chat completion a Responses answer amounts to.
func responseAsCompletion(raw []byte) []byte {
	var r struct {
		Output []responseItem `json:"output"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return nil
	}
	var text, reasoning strings.Builder
	var calls []chunkCall
	for i, it := range r.Output {
		switch it.Type {
		case itemMessage:
			for _, p := range it.Content {
				text.WriteString(p.Text + p.Refusal)
			}
		case itemReasoning:
			for _, p := range it.Summary {
				reasoning.WriteString(p.Text)
			}
		case itemFunctionCall:
			c := chunkCall{Index: i, ID: it.CallID}
			c.Function.Name, c.Function.Arguments = it.Name, it.Arguments
			calls = append(calls, c)
		}
	}
	msg := map[string]any{keyRole: roleAssistant, argContent: text.String(), "reasoning_content": reasoning.String()}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	out, _ := json.Marshal(map[string]any{wireChoices: []any{map[string]any{"index": 0, itemMessage: msg}}})
	return out
}
