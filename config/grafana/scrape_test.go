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

package grafana_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/agentrun-dev/agentrun/internal/controller"
	"github.com/agentrun-dev/agentrun/internal/gateway"
)

// Every panel's metrics have a scrape source: config/monitoring (the
// install with Prometheus monitoring on) has a ServiceMonitor that selects
// a Service of the binary that registers them — the operator's for
// agentrun_* of the controller, the gateways' for agentrun_gateway_*.
func TestDashboardMetricsHaveAScrapeSource(t *testing.T) {
	operator := &describer{names: map[string]bool{}}
	operator.MustRegister(controller.Collectors()...)
	operator.add(controller.PhaseCollectorDesc())
	gw := &describer{names: map[string]bool{}}
	if _, err := gateway.New(gateway.Options{Client: fake.NewClientBuilder().Build(),
		Authenticator: gateway.StaticTokens{}, Registry: gw}); err != nil {
		t.Fatal(err)
	}
	binaries := map[string]map[string]bool{"/manager": operator.names, "/gateway": gw.names}
	scraped := scrapedBinaries(t, "../monitoring")

	raw, err := os.ReadFile("agentrun-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$namespace", ".*", "${namespace}", ".*")
	promql := parser.NewParser(parser.Options{})
	used := map[string]int{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr, err := promql.ParseExpr(vars.Replace(tg.Expr))
			if err != nil {
				continue // TestDashboardNamesOnlyExportedMetrics reports it
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				found := false
				for bin, names := range binaries {
					if names[seriesName(vs.Name, names)] {
						found = true
						used[bin]++
						if !scraped[bin] {
							t.Errorf("panel %q: metric %q is %s's, which no ServiceMonitor of config/monitoring scrapes",
								p.Title, vs.Name, bin)
						}
					}
				}
				if !found {
					t.Errorf("panel %q: metric %q is registered by neither binary", p.Title, vs.Name)
				}
				return nil
			})
		}
	}
	if used["/manager"] == 0 || used["/gateway"] == 0 {
		t.Errorf("the dashboard reads %d of the operator's metrics and %d of the gateway's: want both", used["/manager"], used["/gateway"])
	}
}

// scrapedBinaries builds dir and returns the commands of the workloads
// whose pods a ServiceMonitor's Service selects.
func scrapedBinaries(t *testing.T, dir string) map[string]bool {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		raw, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	matches := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	out := map[string]bool{}
	for _, sm := range objs {
		if sm.GetKind() != "ServiceMonitor" {
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		for _, svc := range objs {
			if svc.GetKind() != "Service" || svc.GetNamespace() != sm.GetNamespace() || !matches(sel, svc.GetLabels()) {
				continue
			}
			podSel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
			for _, w := range objs {
				if !slices.Contains([]string{"Deployment", "DaemonSet", "StatefulSet"}, w.GetKind()) ||
					w.GetNamespace() != svc.GetNamespace() {
					continue
				}
				podLabels, _, _ := unstructured.NestedStringMap(w.Object, "spec", "template", "metadata", "labels")
				if !matches(podSel, podLabels) {
					continue
				}
				containers, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
				for _, c := range containers {
					cmd, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "command")
					if len(cmd) > 0 {
						out[cmd[0]] = true
					}
				}
			}
		}
	}
	return out
}
