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
// that Prometheus verifies the operator's metrics certificate: the
// ServiceMonitor trusts cert-manager's CA, names the Service the
// certificate is issued for, and the manager serves that certificate.
package monitoring_test

import (
	"encoding/json"
	"slices"
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
	t.Helper()
	s, _, err := unstructured.NestedString(u.Object, path...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServiceMonitorVerifiesTheMetricsCertificate(t *testing.T) {
	objs := build(t, ".")
	sm, svc := objs["ServiceMonitor/agentrun-controller-manager-metrics-monitor"], objs["Service/agentrun-controller-manager-metrics-service"]
	cert, dep := objs["Certificate/agentrun-metrics-certs"], objs["Deployment/agentrun-controller-manager"]
	if sm == nil || svc == nil || cert == nil || dep == nil {
		t.Fatalf("config/monitoring lacks the ServiceMonitor, the metrics Service, its Certificate or the manager")
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
	// The manager serves that certificate.
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-path=") }) {
		t.Errorf("the manager's args %v lack --metrics-cert-path", args)
	}
	vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
	if !slices.ContainsFunc(vols, func(v any) bool {
		name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName")
		return name == secret
	}) {
		t.Errorf("the manager mounts no volume of Secret %q", secret)
	}
}
