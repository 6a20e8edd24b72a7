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

package helm

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/test/utils"
)

// The namespace config/default installs into, and the release the tests render.
const (
	defaultNamespace = "agentrun-system"
	releaseName      = "agentrun"
)

// helmLabels are the labels the chart adds to every object's metadata and
// kustomize's "managed-by" label: the one documented difference in content
// (docs/operations.md#helm). Selectors and pod templates carry no such label
// on either side, so they are compared as they are.
var helmLabels = []string{
	"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart",
}

// clusterScoped are the kinds config/default holds that have no namespace:
// kustomize's namespace transformer still writes one on the ones it does not
// know (ValidatingAdmissionPolicy and its binding), which the API server
// ignores; the chart writes none.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true,
}

// renderChart renders charts/agentrun as `helm template --include-crds`
// does for a release named agentrun in namespace, with values over the
// chart's defaults: the CRDs of crds/ first, then the templates.
func renderChart(namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(filepath.Join(utils.ProjectRoot(), "charts", "agentrun"))
	if err != nil {
		return nil, fmt.Errorf("loading the chart: %w", err)
	}
	vals, err := util.ToRenderValues(ch, values, common.ReleaseOptions{
		Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, crd := range ch.CRDObjects() {
		objs, err := decode(crd.Filename, crd.File.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if strings.HasSuffix(name, ".yaml") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		objs, err := decode(name, []byte(files[name]))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// buildKustomize runs `kustomize build dir` through the kustomize API.
func buildKustomize(dir string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	data, err := resMap.AsYaml()
	if err != nil {
		return nil, err
	}
	return decode(dir, data)
}

// decode reads every object of a multi-document YAML stream.
func decode(source string, data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for i, doc := range strings.Split("\n"+string(data), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", source, i, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out, nil
}

// key names an object as the comparison does: group, kind, namespace, name.
func key(u *unstructured.Unstructured) string {
	ns := u.GetNamespace()
	if clusterScoped[u.GetKind()] {
		ns = ""
	}
	return fmt.Sprintf("%s %s %s/%s", u.GroupVersionKind().Group, u.GetKind(), ns, u.GetName())
}

// normalised is u without the documented differences: Helm's and
// kustomize's labels, and a namespace on a cluster-scoped object.
func normalised(u *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy()
	if clusterScoped[c.GetKind()] {
		c.SetNamespace("")
	}
	if labels := c.GetLabels(); labels != nil {
		for _, l := range helmLabels {
			delete(labels, l)
		}
		c.SetLabels(labels)
		if len(labels) == 0 {
			unstructured.RemoveNestedField(c.Object, "metadata", "labels")
		}
	}
	return c.Object
}

// compare reports every difference between the objects kustomize built and
// the ones the chart rendered, after normalisation: an object missing from
// the chart, one only the chart has, and content that differs.
func compare(kustomized, rendered []*unstructured.Unstructured) []string {
	want, got := map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	var problems []string
	for _, set := range []struct {
		objs []*unstructured.Unstructured
		into map[string]*unstructured.Unstructured
		from string
	}{{kustomized, want, "config/default"}, {rendered, got, "the chart"}} {
		for _, u := range set.objs {
			k := key(u)
			if _, dup := set.into[k]; dup {
				problems = append(problems, fmt.Sprintf("%s: %s twice", set.from, k))
			}
			set.into[k] = u
		}
	}
	for _, k := range sortedKeys(want) {
		g, ok := got[k]
		if !ok {
			problems = append(problems, "missing from the chart: "+k)
			continue
		}
		if d := cmp.Diff(normalised(want[k]), normalised(g)); d != "" {
			problems = append(problems, fmt.Sprintf("%s differs (-config/default +chart):\n%s", k, d))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			problems = append(problems, "only in the chart: "+k)
		}
	}
	return problems
}

func sortedKeys(m map[string]*unstructured.Unstructured) []string {
	return slices.Sorted(maps.Keys(m))
}

// withoutNamespaceObject splits config/default's objects into its Namespace
// and the rest: the chart leaves the release's namespace to
// `helm install --create-namespace` unless namespace.create is set.
func withoutNamespaceObject(objs []*unstructured.Unstructured) (*unstructured.Unstructured, []*unstructured.Unstructured) {
	var ns *unstructured.Unstructured
	rest := slices.DeleteFunc(slices.Clone(objs), func(u *unstructured.Unstructured) bool {
		if u.GetKind() == "Namespace" {
			ns = u
			return true
		}
		return false
	})
	return ns, rest
}

// The chart with its default values renders what config/default builds.
func TestChartRendersConfigDefault(t *testing.T) {
	kustomized, err := buildKustomize(filepath.Join(utils.ProjectRoot(), "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := renderChart(defaultNamespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	nsObj, rest := withoutNamespaceObject(kustomized)
	if nsObj == nil || nsObj.GetName() != defaultNamespace {
		t.Fatalf("config/default builds no Namespace %s (got %v)", defaultNamespace, nsObj)
	}
	if len(rest) < 60 {
		t.Fatalf("config/default built %d objects: the comparison would prove little", len(rest))
	}
	for _, p := range compare(rest, rendered) {
		t.Error(p)
	}
	if t.Failed() {
		t.Log("config/default and charts/agentrun differ: change the chart's templates with config/ " +
			"(docs/operations.md#helm), or the comparison's documented normalisation if it is one of those")
	}
	t.Logf("compared %d objects of config/default with the chart's", len(rest))

	// With namespace.create the chart renders config/default's Namespace too.
	withNS, err := renderChart(defaultNamespace, map[string]any{"namespace": map[string]any{"create": true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range compare(kustomized, withNS) {
		t.Errorf("namespace.create=true: %s", p)
	}
}

// With monitoring.serviceMonitors the chart renders what config/monitoring
// builds: config/default plus the operator's and the gateways' verified-TLS
// ServiceMonitors, the operator serving cert-manager's metrics certificate
// and that certificate issued for its Service.
func TestChartRendersConfigMonitoring(t *testing.T) {
	kustomized, err := buildKustomize(filepath.Join(utils.ProjectRoot(), "config", "monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := renderChart(defaultNamespace, map[string]any{"monitoring": map[string]any{"serviceMonitors": true}})
	if err != nil {
		t.Fatal(err)
	}
	_, rest := withoutNamespaceObject(kustomized)
	monitors := 0
	for _, u := range rendered {
		if u.GetKind() == "ServiceMonitor" {
			monitors++
		}
	}
	if monitors != 2 {
		t.Errorf("the chart renders %d ServiceMonitors, want the operator's and the gateways'", monitors)
	}
	for _, p := range compare(rest, rendered) {
		t.Error(strings.ReplaceAll(p, "config/default", "config/monitoring"))
	}
}

// The comparison itself fails on a missing object, an extra one and a
// changed field, so a chart that falls behind config/default is caught.
func TestCompareCatchesDrift(t *testing.T) {
	// The chart's own objects stand for config/default's here, so that
	// this test checks the comparison alone, whatever config/ holds.
	rendered, err := renderChart(defaultNamespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	idx := slices.IndexFunc(rendered, func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "ValidatingAdmissionPolicy" && u.GetName() == "agentrun-session-status-authority"
	})
	if idx < 0 {
		t.Fatal("the chart renders no ValidatingAdmissionPolicy agentrun-session-status-authority")
	}
	missing := slices.Delete(slices.Clone(rendered), idx, idx+1)
	changed := slices.Clone(rendered)
	changed[idx] = rendered[idx].DeepCopy()
	if err := unstructured.SetNestedField(changed[idx].Object, "Ignore", "spec", "failurePolicy"); err != nil {
		t.Fatal(err)
	}
	extra := append(slices.Clone(rendered), rendered[idx].DeepCopy())
	extra[len(extra)-1].SetName("agentrun-extra")

	for name, tc := range map[string]struct {
		chart []*unstructured.Unstructured
		want  string
	}{
		"missing": {missing, "missing from the chart: admissionregistration.k8s.io ValidatingAdmissionPolicy " +
			"/agentrun-session-status-authority"},
		"changed": {changed, "ValidatingAdmissionPolicy /agentrun-session-status-authority differs"},
		"extra":   {extra, "only in the chart: admissionregistration.k8s.io ValidatingAdmissionPolicy /agentrun-extra"},
	} {
		t.Run(name, func(t *testing.T) {
			problems := compare(rendered, tc.chart)
			if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
				t.Errorf("compare reported %q, want one problem containing %q", problems, tc.want)
			}
		})
	}
}

// A name prefix that would make invalid object names fails the render with
// a message naming the value and the rule.
func TestChartRefusesAnInvalidNamePrefix(t *testing.T) {
	for _, prefix := range []string{"Agentrun-", "agentrun", "-a-", "a-very-long-prefix-of-thirty-c-"} {
		_, err := renderChart(defaultNamespace, map[string]any{"namePrefix": prefix})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("namePrefix %q: ", prefix)) {
			t.Errorf("namePrefix %q: got %v, want an error naming the value", prefix, err)
		}
	}
	if _, err := renderChart(defaultNamespace, map[string]any{"namePrefix": ""}); err != nil {
		t.Errorf("an empty namePrefix (unprefixed names): %v", err)
	}
}

// values.schema.json refuses a misspelt or mistyped value instead of
// rendering the defaults in its place.
func TestChartRefusesUnknownAndMistypedValues(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"misspelt": {map[string]any{"nameprefix": "ar-"}, "additional properties 'nameprefix' not allowed"},
		"mistyped": {map[string]any{"manager": map[string]any{"replicas": "two"}}, "at '/manager/replicas': got string, want integer"},
		"mistyped endpoint": {map[string]any{"tracing": map[string]any{"otlpEndpoint": 4318}},
			"at '/tracing/otlpEndpoint': got number, want string"},
		"misspelt pprof": {map[string]any{"pprof": map[string]any{"address": ":8082"}}, "additional properties 'address' not allowed"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := renderChart(defaultNamespace, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// An optional component turned off leaves no object of its own and no
// reference to it in the others (a gateway that mounted the stream's client
// certificate without the stream would never start).
func TestChartOptionalComponents(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		absent string
	}{
		"no stream": {map[string]any{"stream": map[string]any{"enabled": false}}, "stream"},
		"no tools":  {map[string]any{"tools": map[string]any{"enabled": false}}, "agentrun-tools"},
		"no network policies": {map[string]any{"networkPolicies": map[string]any{"enabled": false}},
			"kind: NetworkPolicy"},
		"no disruption budget": {map[string]any{"manager": map[string]any{
			"podDisruptionBudget": map[string]any{"enabled": false}}}, "kind: PodDisruptionBudget"},
		// Neither a Certificate or an Issuer nor the injection annotation.
		"no cert-manager": {map[string]any{"certManager": map[string]any{"enabled": false}}, "cert-manager.io"},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := renderChart(defaultNamespace, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range objs {
				if u.GetKind() == "CustomResourceDefinition" {
					continue
				}
				data, err := yaml.Marshal(u.Object)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(data), tc.absent) {
					t.Errorf("%s still holds %q", key(u), tc.absent)
				}
			}
		})
	}
}

// tracing.otlpEndpoint and pprof.bindAddress render --otlp-endpoint and
// --pprof-bind-address for the manager and the gateway; unset (the
// defaults, which TestChartRendersConfigDefault holds equal to
// config/default), neither flag is rendered.
func TestChartTracingAndPprofValues(t *testing.T) {
	want := []string{"--otlp-endpoint=http://otel-collector.observability:4318", "--pprof-bind-address=127.0.0.1:8082"}
	for name, tc := range map[string]struct {
		values map[string]any
		want   []string
	}{
		"set": {map[string]any{
			"tracing": map[string]any{"otlpEndpoint": "http://otel-collector.observability:4318"},
			"pprof":   map[string]any{"bindAddress": "127.0.0.1:8082"},
		}, want},
		"defaults": {nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := renderChart(defaultNamespace, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			for _, workload := range []string{"Deployment/agentrun-controller-manager", "DaemonSet/agentrun-gateway"} {
				idx := slices.IndexFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind()+"/"+u.GetName() == workload })
				if idx < 0 {
					t.Fatalf("the chart renders no %s", workload)
				}
				containers, _, _ := unstructured.NestedSlice(objs[idx].Object, "spec", "template", "spec", "containers")
				args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
				var got []string
				for _, a := range args {
					if strings.HasPrefix(a, "--otlp-endpoint") || strings.HasPrefix(a, "--pprof-bind-address") {
						got = append(got, a)
					}
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("%s's tracing and pprof flags (-want +got):\n%s", workload, d)
				}
			}
		})
	}
}

// tools.clusterCIDRs renders --cluster-cidr for agentrun-tools and excepts
// each CIDR from its egress NetworkPolicy's ipBlock of the same family.
func TestChartToolsClusterCIDRs(t *testing.T) {
	objs, err := renderChart(defaultNamespace, map[string]any{
		"tools": map[string]any{"clusterCIDRs": []any{"203.0.113.0/24", "2001:db8:42::/56"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	find := func(kindName string) *unstructured.Unstructured {
		idx := slices.IndexFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind()+"/"+u.GetName() == kindName })
		if idx < 0 {
			t.Fatalf("the chart renders no %s", kindName)
		}
		return objs[idx]
	}
	containers, _, _ := unstructured.NestedSlice(find("Deployment/agentrun-tools").Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	var got []string
	for _, a := range args {
		if strings.HasPrefix(a, "--cluster-cidr") {
			got = append(got, a)
		}
	}
	if d := cmp.Diff([]string{"--cluster-cidr=203.0.113.0/24", "--cluster-cidr=2001:db8:42::/56"}, got); d != "" {
		t.Errorf("agentrun-tools' --cluster-cidr flags (-want +got):\n%s", d)
	}
	egress, _, _ := unstructured.NestedSlice(find("NetworkPolicy/agentrun-tools-egress").Object, "spec", "egress")
	to, _, _ := unstructured.NestedSlice(egress[1].(map[string]any), "to")
	for i, want := range []string{"203.0.113.0/24", "2001:db8:42::/56"} {
		except, _, _ := unstructured.NestedStringSlice(to[i].(map[string]any), "ipBlock", "except")
		if !slices.Contains(except, want) {
			t.Errorf("ipBlock %d excepts %v, not %s", i, except, want)
		}
	}
}
