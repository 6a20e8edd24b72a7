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

import (
	"slices"
	"testing"
)

func TestOtelEnvPassesOnlyOpenTelemetrySettings(t *testing.T) {
	got := otelEnv([]string{"PATH=/bin", "OTEL_TRACES_EXPORTER=console", "HOME=/root",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "XOTEL_NOT=1"})
	want := []string{"OTEL_TRACES_EXPORTER=console", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}
	if !slices.Equal(got, want) {
		t.Fatalf("otelEnv = %v, want %v", got, want)
	}
}
