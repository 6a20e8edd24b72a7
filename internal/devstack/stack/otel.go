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

package stack

import "strings"

// otelEnv is the OpenTelemetry part of environ (OTEL_*), which the operator
// and the gateway are started with, so that tracing configured for the stack
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER=console, …) reaches the
// processes that emit the spans (internal/tracing reads these variables).
func otelEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}
