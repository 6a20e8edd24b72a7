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

package main

import (
	"strings"
	"testing"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestProviderAPIFlagTakesTheModelAPIs(t *testing.T) {
	for _, want := range []v1.ModelAPI{v1.ModelAPIOpenAIChat, v1.ModelAPIOpenAIResponses, v1.ModelAPIAnthropicMessages} {
		got, err := parseProviderAPI(string(want))
		if err != nil || got != want {
			t.Errorf("parseProviderAPI(%q) = %q, %v; want %q", want, got, err, want)
		}
	}
}

func TestProviderAPIFlagRefusesOtherValuesNamingTheFlagAndTheValues(t *testing.T) {
	for _, bad := range []string{"", "openaichat", "Responses", "anthropic"} {
		_, err := parseProviderAPI(bad)
		if err == nil {
			t.Fatalf("parseProviderAPI(%q) succeeded", bad)
		}
		for _, want := range []string{"--provider-api", "OpenAIChat, OpenAIResponses, AnthropicMessages"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("parseProviderAPI(%q): %q does not name %q", bad, err, want)
			}
		}
	}
}

func TestProviderModelCarriesTheProvidersAPI(t *testing.T) {
	o := options{providerURL: "https://api.anthropic.com/v1", providerName: "claude-x",
		providerAPI: v1.ModelAPIAnthropicMessages}
	m := providerModel(o, map[string]any{"name": "k", "key": "api-key"})
	if m["api"] != "AnthropicMessages" || m["baseURL"] != o.providerURL || m["upstreamModel"] != "claude-x" ||
		m["apiKeySecretRef"] == nil {
		t.Errorf("providerModel = %v", m)
	}
	if _, ok := providerModel(o, nil)["apiKeySecretRef"]; ok {
		t.Error("a provider without a key file gets no apiKeySecretRef")
	}
}
