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

package policy

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestWarningsNameAProviderKeySentInClearText(t *testing.T) {
	key := &v1alpha1.SecretKeyRef{Name: "k", Key: "key"}
	spec := &v1alpha1.RuntimePolicySpec{Models: []v1alpha1.Model{
		{Name: "tls", BaseURL: "https://api.example.com/v1", APIKeySecretRef: key},
		{Name: "local", BaseURL: "http://127.0.0.1:11434/v1", APIKeySecretRef: key},
		{Name: "localhost", BaseURL: "http://localhost:8080/v1", APIKeySecretRef: key},
		{Name: "v6", BaseURL: "http://[::1]:8080/v1", APIKeySecretRef: key},
		{Name: "keyless", BaseURL: "http://ollama.models.svc:11434/v1"},
		{Name: "clear", BaseURL: "http://llm.models.svc/v1", APIKeySecretRef: key},
	}}
	got := Warnings(spec)
	if len(got) != 1 || !strings.Contains(got[0], "spec.models[5].baseURL") || !strings.Contains(got[0], `model "clear"`) {
		t.Fatalf("Warnings = %q; want one, for spec.models[5] (clear)", got)
	}
}
