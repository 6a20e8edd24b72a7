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

// Package stream owns the run stream's event model: the AG-UI event
// vocabulary (github.com/ag-ui-protocol/ag-ui, @ag-ui/core 1.0.0) that
// existing agent frontends consume, plus two fields AG-UI lacks — the run the
// event belongs to (namespace/name) and a per-run sequence number, from 1,
// with no gaps, that a reconnecting client resumes from.
//
// Events are either final (every block's START and END, tool results, state,
// RUN_*, STEP_*, CUSTOM: never dropped) or deltas (TEXT_MESSAGE_CONTENT,
// REASONING_MESSAGE_CONTENT, TOOL_CALL_ARGS: consecutive deltas of one block
// may be merged into one, which keeps their concatenated text and the order
// of everything else). The store (internal/stream/store) persists and replays
// them; the SSE handler (internal/stream/sse) serves them. The stream is a
// side path: it never takes part in a run's termination decision.
package stream
