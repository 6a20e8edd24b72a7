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

package conformance_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/test/conformance"
)

// The manifest's environment reaches each model door the way its clients
// build the URL: the OpenAI SDKs append /chat/completions and /responses to
// $OPENAI_BASE_URL, the Anthropic SDKs /v1/messages to $ANTHROPIC_BASE_URL
// (the examples' Python and TypeScript tests share their scenarios through it).
func TestManifestEnvReachesEveryModelDoor(t *testing.T) {
	s := start(t, conformance.Config{})
	m := s.Manifest
	client := s.Env.Server.Client()
	for _, door := range []struct{ url, body, want string }{
		{m.Env[gatewayapi.EnvOpenAIBaseURL] + "/chat/completions",
			`{"model":"` + m.Model + `","messages":[{"role":"user","content":"hi"}]}`, "chat.completion"},
		{m.Env[gatewayapi.EnvOpenAIBaseURL] + "/responses", `{"model":"` + m.Model + `","input":"hi"}`, "response"},
		{m.Env[gatewayapi.EnvAnthropicBaseURL] + "/v1/messages",
			`{"model":"` + m.Model + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, "message"},
	} {
		req, err := http.NewRequest(http.MethodPost, door.url, strings.NewReader(door.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+m.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", door.url, err)
		}
		var got struct {
			Object string `json:"object"`
			Type   string `json:"type"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || (got.Object != door.want && got.Type != door.want) {
			t.Errorf("POST %s: HTTP %d, object %q type %q (%v); want 200 %q", door.url, resp.StatusCode, got.Object,
				got.Type, err, door.want)
		}
	}
}
