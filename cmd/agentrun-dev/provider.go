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
	"fmt"
	"slices"
	"strings"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// providerAPIs are the values of --provider-api: the wire APIs a
// RuntimePolicy model entry's spec.models[].api accepts.
var providerAPIs = []v1.ModelAPI{v1.ModelAPIOpenAIChat, v1.ModelAPIOpenAIResponses, v1.ModelAPIAnthropicMessages}

// parseProviderAPI is --provider-api's value as a ModelAPI, or an error
// naming the flag and the values it takes.
func parseProviderAPI(s string) (v1.ModelAPI, error) {
	if api := v1.ModelAPI(s); slices.Contains(providerAPIs, api) {
		return api, nil
	}
	names := make([]string, len(providerAPIs))
	for i, api := range providerAPIs {
		names[i] = string(api)
	}
	return "", fmt.Errorf("--provider-api %q: must be one of %s (the API the --provider-url provider speaks)",
		s, strings.Join(names, ", "))
}

// providerModel is the model entry "real" that --provider-url adds to every
// sample policy; keyRef names the Secret holding its key, or is nil.
func providerModel(o options, keyRef map[string]any) map[string]any {
	m := map[string]any{"name": "real", "baseURL": o.providerURL, "upstreamModel": o.providerName,
		"api": string(o.providerAPI)}
	if keyRef != nil {
		m["apiKeySecretRef"] = keyRef
	}
	return m
}
