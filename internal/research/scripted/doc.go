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

// Package scripted is the research agent's scripted provider: it plays a
// Script of model turns and injected faults (docs/script-format.md) for
// tests, demos and the local stack. cmd/research-agent uses it for
// --provider=scripted (--script, --script-env); the research tests and the
// agent stories use it in-process.
//
// It plugs into the research agent through research.Config.Hooks only
// (Harness.Configure sets them): the provider, built once the agent started
// (it needs the attempt number, for faults limited to one attempt), sends
// each answer as a chat completion through the gateway to the scripted
// upstream (internal/upstream), which plays it back; a turn's crash or hang
// uses the Session's Crash and Hang; a tool call's fault is applied by the
// BeforeToolCall hook. It is not part of the public API: a real agent has a
// real model and a real world to fail.
package scripted
