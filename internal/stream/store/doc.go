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

// Package store persists a run's stream in NATS JetStream and reads it back.
//
// One JetStream stream (AGENTRUN_EVENTS by default) holds every run; each run
// is one subject, agentrun.events.<namespace>.<name> (Subject escapes the
// characters a subject token cannot hold). The per-run sequence is ours, not
// JetStream's (whose sequence is per stream): Publish assigns seq = the
// subject's last seq + 1, learning the last one from the stream the first time
// it sees a run (so a restarted producer continues where it stopped), and
// publishes with two guards:
//
//   - Nats-Expected-Last-Subject-Sequence = the JetStream sequence of the
//     subject's last message as this publisher knows it: a second producer of
//     the same run (the gateway and the status watcher both write a run) that
//     raced ahead makes the publish fail, and Publish re-reads the subject's
//     last event and takes the next seq — no two events share a seq, none is
//     lost;
//   - Nats-Msg-Id = <namespace>/<name>/<seq>: a retried publish within the
//     duplicate window is stored once.
//
// A publish whose answer was lost is retried with the same bytes; if it had
// landed, the retry finds it as the subject's last event and returns its seq.
//
// The store runs NATS in process (Embedded, a real server with a file store
// directory) or connects to an external NATS URL. Producer puts a bounded,
// never-blocking buffer in front of Publish for callers on a run's hot path.
package store
