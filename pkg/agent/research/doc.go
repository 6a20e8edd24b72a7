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

// Package research is the reference research agent of agentrun, built on the
// agent SDK (pkg/agent): plan → tool calls → notes → publish sections →
// settle. cmd/research-agent is a thin main around Run; tests run Run
// in-process against a fake or real API server (Config.Agent takes a
// client.Client or a rest.Config).
//
// The model provider is OpenAI, which speaks the OpenAI-compatible
// chat-completions wire format with tool calls through the gateway's model
// door, or any Provider. Hooks let a harness play the model and inject
// faults: internal/research/scripted plays a script of model turns and
// faults (docs/script-format.md) for tests and demos through them, and is
// no part of this package's API. Sections are published into
// the run's report ConfigMap (<run>-report, labelled agentrun.dev/run and
// owned by the ResearchRun), and the settlement reported is what that
// ConfigMap actually holds.
package research
