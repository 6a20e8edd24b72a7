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

// Package monitoring_test builds config/monitoring with kustomize and checks
// that Prometheus verifies the operator's and the gateways' metrics
// certificates: each ServiceMonitor trusts cert-manager's CA, selects and
// names the one Service the certificate is issued for, and the manager and
// the gateway serve that certificate over HTTPS on the port the Service
// reaches, with the RBAC their scrapers' authentication needs.
package monitoring_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func build(t *testing.T, dir string) map[string]*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, r := range res.Resources() {
		raw, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		out[u.GetKind()+"/"+u.GetName()] = u
	}
	return out
}

func str(t *testing.T, u *unstructured.Unstructured, path ...string) string {
	s, _, err := unstructured.NestedString(u.Object, path...)
	if err != nil && t != nil {
		t.Helper()
		t.Fatal(err)
	}
	return s
}

// A scrape target of config/monitoring: its ServiceMonitor, the Service it
// selects, the Certificate issued for that Service, and the workload that
// serves it.
type target struct {
	monitor, service, cert, workload string
}

var targets = map[string]target{
	"operator": {
		monitor: "ServiceMonitor/agentrun-controller-manager-metrics-monitor", service: "Service/agentrun-controller-manager-metrics-service",
		cert: "Certificate/agentrun-metrics-certs", workload: "Deployment/agentrun-controller-manager",
	},
	"gateway": {
		monitor: "ServiceMonitor/agentrun-gateway-metrics-monitor", service: "Service/agentrun-gateway-metrics",
		cert: "Certificate/agentrun-gateway-metrics-cert", workload: "DaemonSet/agentrun-gateway",
	},
}

func TestServiceMonitorVerifiesTheMetricsCertificate(t *testing.T) {
	objs := build(t, ".")
	for name, tc := range targets {
		t.Run(name, func(t *testing.T) {
			sm, svc, cert, dep := objs[tc.monitor], objs[tc.service], objs[tc.cert], objs[tc.workload]
			if sm == nil || svc == nil || cert == nil || dep == nil {
				t.Fatalf("config/monitoring lacks one of %s, %s, %s, %s", tc.monitor, tc.service, tc.cert, tc.workload)
			}
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(eps) != 1 {
				t.Fatalf("%d endpoints, want 1", len(eps))
			}
			ep := &unstructured.Unstructured{Object: eps[0].(map[string]any)}
			if skip, found, _ := unstructured.NestedBool(ep.Object, "tlsConfig", "insecureSkipVerify"); found && skip {
				t.Error("tlsConfig.insecureSkipVerify is true")
			}
			if str(t, ep, "scheme") != "https" {
				t.Errorf("scheme %q, want https", str(t, ep, "scheme"))
			}
			server := str(t, ep, "tlsConfig", "serverName")
			if want := svc.GetName() + "." + svc.GetNamespace() + ".svc"; server != want {
				t.Errorf("tlsConfig.serverName %q, want the metrics Service's %q", server, want)
			}
			dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			if !slices.Contains(dns, server) {
				t.Errorf("the metrics certificate is issued for %v, not for serverName %q", dns, server)
			}
			secret := str(t, cert, "spec", "secretName")
			if got := str(t, ep, "tlsConfig", "ca", "secret", "name"); got != secret || str(t, ep, "tlsConfig", "ca", "secret", "key") != "ca.crt" {
				t.Errorf("tlsConfig.ca is %q, want the certificate's Secret %q (ca.crt)", got, secret)
			}
			if sm.GetNamespace() != svc.GetNamespace() {
				t.Errorf("the ServiceMonitor is in %q, the Service and the CA Secret in %q", sm.GetNamespace(), svc.GetNamespace())
			}
			// It selects that Service and no other (the gateway's agent
			// Service has the same app.kubernetes.io/name).
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			for k, u := range objs {
				if u.GetKind() == "Service" && u.GetNamespace() == sm.GetNamespace() && matches(sel, u.GetLabels()) != (k == tc.service) {
					t.Errorf("selector %v: selects %s is %v", sel, k, k != tc.service)
				}
			}

			// The workload serves that certificate over HTTPS on the port
			// the Service's endpoint port reaches.
			containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
			c := containers[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-path=") }) {
				t.Errorf("the %s's args %v lack --metrics-cert-path", name, args)
			}
			if slices.Contains(args, "--metrics-secure=false") {
				t.Errorf("the %s serves its metrics over plain HTTP (--metrics-secure=false)", name)
			}
			vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
			if !slices.ContainsFunc(vols, func(v any) bool {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName")
				return name == secret
			}) {
				t.Errorf("the %s mounts no volume of Secret %q", name, secret)
			}
			bind := ""
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, "--metrics-bind-address="); ok {
					bind = v
				}
			}
			_, bindPort, _ := strings.Cut(bind, ":")
			if got := containerPort(t, c, servicePort(t, svc, str(t, ep, "port"))); got != bindPort {
				t.Errorf("the Service's port %q reaches container port %s, the metrics are served on %q (--metrics-bind-address)",
					str(t, ep, "port"), got, bind)
			}

			// Its service account may authenticate and authorize the scrapers.
			sa, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "serviceAccountName")
			for _, res := range []string{"authentication.k8s.io/tokenreviews", "authorization.k8s.io/subjectaccessreviews"} {
				if !mayCreate(objs, dep.GetNamespace(), sa, res) {
					t.Errorf("service account %s may not create %s (the metrics' authentication filter needs it)", sa, res)
				}
			}
		})
	}
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// servicePort is the targetPort of svc's port named name.
func servicePort(t *testing.T, svc *unstructured.Unstructured, name string) string {
	t.Helper()
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	for _, p := range ports {
		p := p.(map[string]any)
		if p["name"] == name {
			return fmt.Sprint(p["targetPort"])
		}
	}
	t.Fatalf("Service %s has no port named %q", svc.GetName(), name)
	return ""
}

// containerPort is the number of c's port target (a name or a number).
func containerPort(t *testing.T, c map[string]any, target string) string {
	t.Helper()
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, p := range ports {
		p := p.(map[string]any)
		if n := fmt.Sprint(p["containerPort"]); p["name"] == target || n == target {
			return n
		}
	}
	if _, err := strconv.Atoi(target); err == nil {
		return target
	}
	t.Fatalf("container %v has no port %q", c["name"], target)
	return ""
}

// mayCreate says whether a ClusterRoleBinding gives service account
// namespace/sa create on group/resource.
func mayCreate(objs map[string]*unstructured.Unstructured, namespace, sa, groupResource string) bool {
	group, resource, _ := strings.Cut(groupResource, "/")
	for _, b := range objs {
		if b.GetKind() != "ClusterRoleBinding" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		if !slices.ContainsFunc(subjects, func(s any) bool {
			m := s.(map[string]any)
			return m["kind"] == "ServiceAccount" && m["name"] == sa && m["namespace"] == namespace
		}) {
			continue
		}
		role := objs["ClusterRole/"+str(nil, b, "roleRef", "name")]
		if role == nil {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			groups, _, _ := unstructured.NestedStringSlice(r, "apiGroups")
			resources, _, _ := unstructured.NestedStringSlice(r, "resources")
			verbs, _, _ := unstructured.NestedStringSlice(r, "verbs")
			if slices.Contains(groups, group) && slices.Contains(resources, resource) && slices.Contains(verbs, "create") {
				return true
			}
		}
	}
	return false
}
