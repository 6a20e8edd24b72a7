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

// Package grafana_test checks the dashboard against the binaries: every
// metric its PromQL names is one the operator or the gateway registers, and
// config/monitoring has a ServiceMonitor that scrapes the binary that does.
package grafana_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/internal/controller"
	"github.com/agentrun-dev/agentrun/internal/gateway"
)

// describer is a Registerer that records the names of what is registered
// on it (a vector with no series yet is described all the same).
type describer struct {
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		d.add(desc)
	}
	return nil
}

func (d *describer) add(desc *prometheus.Desc) {
	if m := fqName.FindStringSubmatch(desc.String()); m != nil {
		d.names[m[1]] = true
	}
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return false }

// exported is every metric name the operator and the gateway register.
func exported(t *testing.T) map[string]bool {
	d := &describer{names: map[string]bool{}}
	d.MustRegister(controller.Collectors()...)
	d.add(controller.PhaseCollectorDesc())
	if _, err := gateway.New(gateway.Options{Client: fake.NewClientBuilder().Build(),
		Authenticator: gateway.StaticTokens{}, Registry: d}); err != nil {
		t.Fatal(err)
	}
	if len(d.names) < 20 {
		t.Fatalf("only %d metrics registered: %v", len(d.names), d.names)
	}
	return d.names
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// seriesName is the metric a selector names: a histogram's or summary's
// _bucket, _sum and _count series are its own.
func seriesName(name string, known map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && known[base] {
			return base
		}
	}
	return name
}

func TestDashboardNamesOnlyExportedMetrics(t *testing.T) {
	known := exported(t)
	raw, err := os.ReadFile("agentrun-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	// Grafana's variables, as the panels use them.
	vars := strings.NewReplacer("$namespace", ".*", "${namespace}", ".*")
	promql := parser.NewParser(parser.Options{})
	queries := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			expr, err := promql.ParseExpr(vars.Replace(tg.Expr))
			if err != nil {
				t.Errorf("panel %q: %q does not parse: %v", p.Title, tg.Expr, err)
				continue
			}
			names := 0
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					names++
					if !known[seriesName(vs.Name, known)] {
						t.Errorf("panel %q: metric %q is not exported by the operator or the gateway", p.Title, vs.Name)
					}
				}
				return nil
			})
			if names == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
		}
	}
	for _, v := range d.Templating.List {
		if m := regexp.MustCompile(`label_values\(([a-z_:]+),`).FindStringSubmatch(v.Definition); m != nil && !known[m[1]] {
			t.Errorf("variable query %q names %q, which is not exported", v.Definition, m[1])
		}
	}
	if queries < 15 {
		t.Errorf("%d queries, want the dashboard's every panel (at least 15)", queries)
	}
}
