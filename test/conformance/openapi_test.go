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
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

type openAPIDoc struct {
	OpenAPI    string                               `json:"openapi"`
	Paths      map[string]map[string]map[string]any `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	raw, err := os.ReadFile("../../api/openapi/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("api/openapi/gateway.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi %q; want 3.1.x", doc.OpenAPI)
	}
	return doc
}

// handlerRoutes lists the routes internal/gateway's Handler() registers, read
// from its mux.Handle("METHOD "+prefix+"/path", ...) lines.
func handlerRoutes(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("../../internal/gateway/gateway.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	i := strings.Index(body, "func (g *Gateway) Handler() http.Handler {")
	if i < 0 {
		t.Fatal("internal/gateway/gateway.go has no Handler(); update this test")
	}
	body = body[i:]
	body = body[:strings.Index(body, "\n}\n")]
	prefixes := map[string]string{
		"gatewayapi.ModelPathPrefix": gatewayapi.ModelPathPrefix,
		"gatewayapi.PathPrefix":      gatewayapi.PathPrefix,
		"p":                          gatewayapi.PathPrefix + "/self",
	}
	if !strings.Contains(body, `p := gatewayapi.PathPrefix + "/self"`) {
		t.Fatal(`Handler() no longer sets p := gatewayapi.PathPrefix + "/self"; update this test`)
	}
	re := regexp.MustCompile(`mux\.Handle\("([A-Z]+) "\+([A-Za-z.]+)(?:\+"([^"]*)")?,`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		prefix, ok := prefixes[m[2]]
		if !ok {
			t.Fatalf("route %q uses prefix %s this test does not know", m[0], m[2])
		}
		out = append(out, m[1]+" "+prefix+m[3])
	}
	// The tool door is one MCP endpoint for every method (the MCP handler
	// answers 405 to all but POST): documented as its POST.
	if strings.Contains(body, "mux.Handle(gatewayapi.MCPPath,") {
		out = append(out, "POST "+gatewayapi.MCPPath)
	}
	if n := strings.Count(body, "mux.Handle("); n != len(out) {
		t.Fatalf("parsed %d of %d mux.Handle lines; update this test's pattern", len(out), n)
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIRoutes fails when a route of the gateway's Handler() is missing
// from api/openapi/gateway.yaml, or the document has one the gateway does not serve.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	served := handlerRoutes(t)
	if len(served) < 10 {
		t.Fatalf("found only %d routes in Handler(): %v", len(served), served)
	}
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("the gateway serves %s, which api/openapi/gateway.yaml does not document", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("api/openapi/gateway.yaml documents %s, which the gateway does not serve", r)
		}
	}
}

// TestOpenAPISchemas fails when a wire type's JSON fields (pkg/gatewayapi)
// and its schema's properties differ.
func TestOpenAPISchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{
		"Attempt": gatewayapi.Attempt{}, "StepRequest": gatewayapi.StepRequest{}, "StepResponse": gatewayapi.StepResponse{},
		"FaultRequest": gatewayapi.FaultRequest{}, "AdviceRequest": gatewayapi.AdviceRequest{},
		"CheckpointRequest": gatewayapi.CheckpointRequest{}, "ToolCallRequest": gatewayapi.ToolCallRequest{},
		"ToolCall": gatewayapi.ToolCall{}, "ToolOutcomeRequest": gatewayapi.ToolOutcomeRequest{},
		"ReportPlanRequest": gatewayapi.ReportPlanRequest{}, "PublishRequest": gatewayapi.PublishRequest{},
		"Report": gatewayapi.Report{}, "SettleResponse": gatewayapi.SettleResponse{},
		"ErrorBody": gatewayapi.ErrorBody{}, "Error": gatewayapi.Error{},
		"ChildRequest": gatewayapi.ChildRequest{}, "ChildBudget": gatewayapi.ChildBudget{}, "Child": gatewayapi.Child{},
		"ChildReport": gatewayapi.ChildReport{}, "ChildList": gatewayapi.ChildList{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var fields []string
		rt := reflect.TypeOf(v)
		for f := range rt.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				fields = append(fields, tag)
			}
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		slices.Sort(fields)
		slices.Sort(props)
		if !slices.Equal(fields, props) {
			t.Errorf("schema %s has properties %v; gatewayapi.%s has JSON fields %v", name, props, rt.Name(), fields)
		}
		for _, r := range s.Required {
			if !slices.Contains(fields, r) {
				t.Errorf("schema %s requires %q, which is not a field", name, r)
			}
		}
	}
}
