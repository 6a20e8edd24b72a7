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

package agent

import "net/http"

// EnvTraceparent is the variable an attempt pod gets when the operator
// traces: the W3C traceparent of the run's root span.
const EnvTraceparent = "TRACEPARENT"

// traceparent hands the run's trace context to the gateway: h gets
// Config.Traceparent unless it carries a traceparent already (an agent that
// traces itself sends its own span).
func (a *Agent) traceparent(h http.Header) {
	if a.cfg.Traceparent != "" && h.Get("traceparent") == "" {
		h.Set("traceparent", a.cfg.Traceparent)
	}
}
