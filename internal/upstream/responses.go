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

package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"
)

// Wire names.
const (
	keyStatus        = "status"
	keyName          = "name"
	keyResponse      = "response"
	keyObject        = "object"
	keyRole          = "role"
	keyText          = "text"
	keyOutputIndex   = "output_index"
	keySummaryIndex  = "summary_index"
	statusInProgress = "in_progress"
	keyModel         = "model"
	statusCompleted  = "completed"
	keyContent       = "content"
	keyType          = "type"
	partSummaryText  = "summary_text"
	keyMessage       = "message"
	roleAssistant    = "assistant"
	keyItem          = "item"
	keyItemID        = "item_id"
	keyPart          = "part"
	keyDelta         = "delta"
	keyContentIndex  = "content_index"
	keyLogprobs      = "logprobs"
)

// The OpenAI Responses API (POST /responses), streaming and not: the same
// scripted turns as chat completions, answered as a response object (output
// items: reasoning, message, function_call) or as its event stream
// (response.created … response.completed), with usage and its details
// (input_tokens_details.cached_tokens, output_tokens_details.reasoning_tokens).

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Stream          bool            `json:"stream"`
	MaxOutputTokens int64           `json:"max_output_tokens"`
	Turn            *Turn           `json:"agentrun_scripted"`
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, "invalid_request", "malformed JSON: "+err.Error())
		return
	}
	s.mu.Lock()
	s.models = append(s.models, req.Model)
	if len(s.models) > maxLogged {
		s.models = s.models[len(s.models)-maxLogged:]
	}
	s.mu.Unlock()
	if s.Latency > 0 {
		time.Sleep(s.Latency)
	}
	turn := req.Turn
	if turn == nil {
		turn = s.prompted(body)
	}
	if turn == nil {
		turn = defaultTurn(request{Messages: lastInput(req.Input)}, len(body))
	}
	if e := turn.Error; e != nil {
		writeTurnError(w, e)
		return
	}
	completion := turn.Tokens / 2
	prompt := turn.Tokens - completion
	if req.MaxOutputTokens > 0 && completion > req.MaxOutputTokens {
		completion = req.MaxOutputTokens
	}
	u := map[string]any{
		"input_tokens": prompt, "input_tokens_details": map[string]any{"cached_tokens": min(turn.CachedTokens, prompt)},
		"output_tokens": completion, "output_tokens_details": map[string]any{"reasoning_tokens": min(turn.ReasoningTokens, completion)},
		"total_tokens": prompt + completion,
	}
	n := s.Requests.Load()
	resp := map[string]any{
		"id": fmt.Sprintf("resp_%d", n), keyObject: keyResponse, "created_at": time.Now().Unix(), keyStatus: statusInProgress,
		keyModel: req.Model, "output": []any{}, "usage": nil, "error": nil, "incomplete_details": nil,
	}
	items := responseItems(turn, n)
	if !req.Stream {
		resp[keyStatus], resp["output"], resp["usage"] = statusCompleted, items, u
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
		return
	}
	s.streamResponse(w, turn, resp, items, u)
}

// lastInput is the request's input as chat messages, for the default turn:
// a string input is one user message; of an item list, the last item.
func lastInput(raw json.RawMessage) []json.RawMessage {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		m, _ := json.Marshal(map[string]string{keyRole: "user", keyContent: text})
		return []json.RawMessage{m}
	}
	var items []json.RawMessage
	_ = json.Unmarshal(raw, &items)
	return items
}

// responseItems are the output items of a turn: its reasoning, its text and
// its function calls.
func responseItems(turn *Turn, n int64) []map[string]any {
	var items []map[string]any
	if turn.Think != "" {
		items = append(items, map[string]any{keyType: itemReasoning, "id": fmt.Sprintf("rs_%d", n),
			"summary": []any{map[string]any{keyType: partSummaryText, keyText: turn.Think}}})
	}
	if turn.Say != "" || len(turn.Tools) == 0 {
		items = append(items, map[string]any{keyType: keyMessage, "id": fmt.Sprintf("msg_%d", n), keyStatus: statusCompleted,
			keyRole: roleAssistant, keyContent: []any{outputText(turn.Say)}})
	}
	for i, tc := range turn.Tools {
		c := wireCall(tc, nil)
		item := map[string]any{keyType: itemFunctionCall, "id": fmt.Sprintf("fc_%d_%d", n, i), keyStatus: statusCompleted,
			"call_id": tc.ID, keyName: tc.Name, "arguments": c.Function.Arguments}
		if tc.Namespace != "" {
			item["namespace"] = tc.Namespace
		}
		items = append(items, item)
	}
	return items
}

func outputText(text string) map[string]any {
	return map[string]any{keyType: "output_text", keyText: text, "annotations": []any{}}
}

// streamResponse sends the response as its event stream: created and
// in_progress, each item added, its content in deltas, done, and the
// completed response with its usage.
func (s *Server) streamResponse(w http.ResponseWriter, turn *Turn, resp map[string]any, items []map[string]any, u map[string]any) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	seq := 0
	send := func(typ string, ev map[string]any) {
		ev[keyType], ev["sequence_number"] = typ, seq
		seq++
		raw, _ := json.Marshal(ev)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, raw)
		if fl != nil {
			fl.Flush()
		}
	}
	send("response.created", map[string]any{keyResponse: resp})
	send("response.in_progress", map[string]any{keyResponse: resp})
	pause := time.Duration(turn.ChunkDelayMS) * time.Millisecond
	for i, item := range items {
		id := item["id"]
		added := maps.Clone(item)
		switch item[keyType] {
		case itemReasoning:
			added["summary"] = []any{}
			send("response.output_item.added", map[string]any{keyOutputIndex: i, keyItem: added})
			send("response.reasoning_summary_part.added", map[string]any{keyItemID: id, keyOutputIndex: i, keySummaryIndex: 0,
				keyPart: map[string]any{keyType: partSummaryText, keyText: ""}})
			for _, part := range chunks(turn.Think) {
				time.Sleep(pause)
				send("response.reasoning_summary_text.delta", map[string]any{keyItemID: id, keyOutputIndex: i, keySummaryIndex: 0,
					keyDelta: part})
			}
			send("response.reasoning_summary_text.done", map[string]any{keyItemID: id, keyOutputIndex: i, keySummaryIndex: 0,
				keyText: turn.Think})
			send("response.reasoning_summary_part.done", map[string]any{keyItemID: id, keyOutputIndex: i, keySummaryIndex: 0,
				keyPart: map[string]any{keyType: partSummaryText, keyText: turn.Think}})
		case keyMessage:
			added[keyContent], added[keyStatus] = []any{}, statusInProgress
			send("response.output_item.added", map[string]any{keyOutputIndex: i, keyItem: added})
			send("response.content_part.added", map[string]any{keyItemID: id, keyOutputIndex: i, keyContentIndex: 0,
				keyPart: outputText("")})
			for _, part := range chunks(turn.Say) {
				time.Sleep(pause)
				send("response.output_text.delta", map[string]any{keyItemID: id, keyOutputIndex: i, keyContentIndex: 0,
					keyDelta: part, keyLogprobs: []any{}})
			}
			send("response.output_text.done", map[string]any{keyItemID: id, keyOutputIndex: i, keyContentIndex: 0,
				keyText: turn.Say, keyLogprobs: []any{}})
			send("response.content_part.done", map[string]any{keyItemID: id, keyOutputIndex: i, keyContentIndex: 0,
				keyPart: outputText(turn.Say)})
		case itemFunctionCall:
			added["arguments"], added[keyStatus] = "", statusInProgress
			send("response.output_item.added", map[string]any{keyOutputIndex: i, keyItem: added})
			send("response.function_call_arguments.delta", map[string]any{keyItemID: id, keyOutputIndex: i,
				keyDelta: item["arguments"]})
			send("response.function_call_arguments.done", map[string]any{keyItemID: id, keyOutputIndex: i,
				"arguments": item["arguments"]})
		}
		send("response.output_item.done", map[string]any{keyOutputIndex: i, keyItem: item})
	}
	resp[keyStatus], resp["output"], resp["usage"] = statusCompleted, items, u
	send("response.completed", map[string]any{keyResponse: resp})
}
