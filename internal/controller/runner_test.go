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

package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestRunnersPrepareANamespace: the runner account (no token automounted, no
// role), the gateway's CA (updated when it rotates) and the egress policy.
func TestRunnersPrepareANamespace(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).Build()
	ctx := context.Background()
	r := &runners{caConfigMap: "agentrun-gateway-ca", ca: []byte("CA-1"), egress: AttemptEgressPolicy("agentrun-system"), ready: map[string]bool{}}
	if err := r.ensure(ctx, c, c, "team", "agentrun-runner"); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "agentrun-runner"}, sa); err != nil {
		t.Fatal(err)
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("runner account automounts an API token: %v", sa.AutomountServiceAccountToken)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "agentrun-gateway-ca"}, cm); err != nil || cm.Data["ca.crt"] != "CA-1" {
		t.Fatalf("CA ConfigMap = %v, %v", cm.Data, err)
	}
	np := &networkingv1.NetworkPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "agentrun-attempt-egress"}, np); err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Egress) != 2 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeEgress {
		t.Errorf("egress policy = %+v, want two rules (gateway, DNS)", np.Spec)
	}

	// A rotated CA is kept current by a new operator process.
	r2 := &runners{caConfigMap: "agentrun-gateway-ca", ca: []byte("CA-2"), ready: map[string]bool{}}
	if err := r2.ensure(ctx, c, c, "team", "agentrun-runner"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "agentrun-gateway-ca"}, cm); err != nil || cm.Data["ca.crt"] != "CA-2" {
		t.Errorf("CA after rotation = %v, %v", cm.Data, err)
	}
}
