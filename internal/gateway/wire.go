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

// Wire names the model doors and their translations share (chat
// completions, Responses, Messages).
const (
	wireChoices       = "choices"
	wireContentFilter = "content_filter"
	wireImageURL      = "image_url"
	wireInput         = "input"
	wireLength        = "length"
	wireRefusal       = "refusal"
	wireRequired      = "required"
	wireNone          = "none"
	wireURL           = "url"
	wireDeveloper     = "developer"
	wireToolCalls     = "tool_calls"
	wireToolCallID    = "tool_call_id"
	wireReasoning     = "reasoning_content"
	wireEffort        = "reasoning_effort"
	wireStreamOptions = "stream_options"
	wireMessageStart  = "message_start"
	wireMessageDelta  = "message_delta"
	wireCacheKey      = "prompt_cache_key"
	wireInclude       = "include"
	wireClientMeta    = "client_metadata"
)
