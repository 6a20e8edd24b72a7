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

package webhookpatch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var configWebhook = filepath.Join("..", "..", "..", "config", "webhook")

type op struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

func TestPlanOfConfigWebhook(t *testing.T) {
	plan, err := Plan(configWebhook)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	conditions := map[string]string{} // webhook configuration kind -> its matchConditions, as JSON
	for _, o := range plan {
		got = append(got, o.Source+" -> "+o.Kind+"/"+o.Name)
		var ops []op
		if err := json.Unmarshal(o.Patch, &ops); err != nil {
			t.Fatalf("%s: %v", o.Source, err)
		}
		if !strings.Contains(o.Source, "match_conditions") {
			continue
		}
		// The patch names the webhook it means before it adds to it.
		want := map[string]string{
			"ValidatingWebhookConfiguration": `"vresearchrun-v1alpha1.kb.io"`,
			"MutatingWebhookConfiguration":   `"mresearchrun-v1alpha1.kb.io"`,
		}[o.Kind]
		if len(ops) != 2 || ops[0].Op != "test" || ops[0].Path != "/webhooks/0/name" || string(ops[0].Value) != want ||
			ops[1].Op != "add" || ops[1].Path != "/webhooks/0/matchConditions" {
			t.Errorf("%s: want a test of /webhooks/0/name = %s, then an add of /webhooks/0/matchConditions; got %+v", o.Source, want, ops)
			continue
		}
		conditions[o.Kind] = string(ops[1].Value)
	}
	want := []string{
		"validating_namespace_selector_patch.yaml -> ValidatingWebhookConfiguration/validating-webhook-configuration",
		"mutating_namespace_selector_patch.yaml -> MutatingWebhookConfiguration/mutating-webhook-configuration",
		"validating_match_conditions_patch.yaml -> ValidatingWebhookConfiguration/validating-webhook-configuration",
		"mutating_match_conditions_patch.yaml -> MutatingWebhookConfiguration/mutating-webhook-configuration",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	v, m := conditions["ValidatingWebhookConfiguration"], conditions["MutatingWebhookConfiguration"]
	if v == "" || v != m {
		t.Errorf("the validating and the mutating ResearchRun webhooks must skip the same requests:\n%s\n%s", v, m)
	}
}

func TestPlanRefusesWhatItCannotApply(t *testing.T) {
	for name, kustomization := range map[string]string{
		"a label selector":       "resources: [m.yaml]\npatches:\n- path: p.yaml\n  target: {kind: ValidatingWebhookConfiguration, labelSelector: a=b}\n",
		"a strategic merge":      "resources: [m.yaml]\npatches:\n- path: smp.yaml\n  target: {kind: ValidatingWebhookConfiguration}\n",
		"a target matching none": "resources: [m.yaml]\npatches:\n- path: p.yaml\n  target: {kind: ValidatingWebhookConfiguration, name: other}\n",
		"an unknown field":       "resources: [m.yaml]\nreplacements: []\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for file, body := range map[string]string{
				"kustomization.yaml": kustomization,
				"m.yaml":             "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: v}\nwebhooks: []\n",
				"p.yaml":             "- op: add\n  path: /webhooks/-\n  value: {}\n",
				"smp.yaml":           "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: v}\n",
			} {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := Plan(dir); err == nil {
				t.Error("Plan accepted a kustomization it would not apply as kustomize does")
			}
		})
	}
}
