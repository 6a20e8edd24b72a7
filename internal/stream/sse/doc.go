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

// Package sse serves a run's stream over Server-Sent Events:
//
//	GET /apis/stream.agentrun.dev/v1/namespaces/{namespace}/researchruns/{name}/events
//
// Each event is one SSE message — id: its per-run seq, event: its AG-UI type,
// data: its JSON. A client that reconnects with Last-Event-ID (or ?after=N)
// gets exactly the events after it; a new one gets a STATE_SNAPSHOT first
// (its id is the last event the snapshot includes), then the live tail.
// ?format=jsonl exports the whole retained trajectory as JSON lines and ends.
//
// Each subscriber has a bounded queue between the store and its connection.
// When it fills, adjacent deltas of one block are merged (never reordered,
// no text lost); finals are never dropped: if finals alone overflow it, the
// subscriber's stream ends with a CUSTOM agentrun.dev/reconnect event telling
// it to reconnect with its Last-Event-ID. A slow client therefore holds at
// most its queue's bound and never slows another.
//
// Authorization is the injected Authorizer's (the real one — TokenReview and
// SubjectAccessReview for get researchruns — comes with the gateway wiring).
package sse
