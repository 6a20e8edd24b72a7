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

// Package policy owns the operator-side reading of a RuntimePolicy: the one
// resolved order of its interceptor chain (Resolve) and the admission rules
// that reject a chain or tool catalogue that would fail silently at run time
// (Validate).
//
// The order is decided by (phase, priority, registration index) and nothing
// else: Pre runs before Around before Post, lower priority first within a
// phase, and registration order only breaks ties. Runtimes apply the resolved
// order exactly and never sort again. The ordering constraints an interceptor
// declares (requires, before, after) and the built-in assertions derived from
// roles never reorder the chain: they are assertions that Validate checks
// against the resolved order, so that a wrong order fails at admission rather
// than silently at run time (rate limiting every caller in one bucket because
// it ran before authentication, auditing content before it was redacted).
// A constraint that holds only because of registration order (both ends in
// the same phase with the same priority) is rejected as well: a migration or
// a generator that reorders the list would break it without a sound.
//
// The catalogue rules say who serves each tool: a built-in tool
// (report.publish, notes.write) is served by the gateway itself and names no
// server; any other tool that writes (effect Write or External) names the
// spec.toolServers entry that serves it, so its calls go through the
// gateway's MCP door; a named server must be declared; and only an
// effect-None tool may be a preview (Plan mode calls previews). An
// effect-None tool without a server runs in the agent's own process.
//
// The tier rules keep a policy's tiers (limits by task type) consistent:
// defaultTier names a tier, a tier's defaults are within its caps, and caps
// and defaults are within spec.limits. ResolveTier and TierFields are how
// the ResearchRun webhooks read a run's tier: which tier, which default,
// which cap.
//
// Validate, Resolve and ResolveTier are pure. The RuntimePolicy validating
// webhook calls Validate and rejects on any error; the RuntimePolicy
// controller writes Resolve's output to status.resolvedChain and Validate's
// verdict to the Valid condition.
package policy
