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

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// The egress policy lives in the tenant's namespace, where the built-in edit
// role may delete or change it: every attempt start (every ensure) restores
// it, not only a namespace's first.
func TestRunnersRestoreTheEgressPolicyAtEveryAttempt(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).Build()
	ctx := context.Background()
	want := AttemptEgressPolicy("agentrun-system")
	r := &runners{egress: want, ready: map[string]bool{}}
	key := client.ObjectKey{Namespace: "team", Name: want.Name}
	if err := r.ensure(ctx, c, c, "team", "agentrun-runner"); err != nil {
		t.Fatal(err)
	}

	np := &networkingv1.NetworkPolicy{}
	if err := c.Get(ctx, key, np); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	if err := r.ensure(ctx, c, c, "team", "agentrun-runner"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, np); err != nil {
		t.Fatalf("a deleted egress policy is not back at the next attempt: %v", err)
	}

	np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{}) // allow everything
	if err := c.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	if err := r.ensure(ctx, c, c, "team", "agentrun-runner"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, np); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(np.Spec, want.Spec) {
		t.Errorf("a widened egress policy is not restored at the next attempt:\n%s", cmp.Diff(want.Spec, np.Spec))
	}
}

func TestExtraEgressPolicies(t *testing.T) {
	attempt := map[string]string{"app.kubernetes.io/managed-by": "agentrun", "app.kubernetes.io/name": "research-agent", "team": "a"}
	egress := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	ingress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	allowAll := []networkingv1.NetworkPolicyEgressRule{{}}
	np := func(name string, sel map[string]string, types []networkingv1.PolicyType, rules []networkingv1.NetworkPolicyEgressRule) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: types, Egress: rules}}
	}
	ours := *AttemptEgressPolicy("agentrun-system")
	tests := map[string]struct {
		policies []networkingv1.NetworkPolicy
		want     []string
	}{
		"only ours":                        {policies: []networkingv1.NetworkPolicy{ours}},
		"every pod of the namespace, open": {policies: []networkingv1.NetworkPolicy{ours, np("allow-all", nil, egress, allowAll)}, want: []string{"allow-all"}},
		"the team's pods, open":            {policies: []networkingv1.NetworkPolicy{np("team-a", map[string]string{"team": "a"}, egress, allowAll)}, want: []string{"team-a"}},
		"policy types left to the server":  {policies: []networkingv1.NetworkPolicy{np("implied", nil, nil, allowAll)}, want: []string{"implied"}},
		"another team's pods":              {policies: []networkingv1.NetworkPolicy{np("team-b", map[string]string{"team": "b"}, egress, allowAll)}},
		"deny only (no egress rule)":       {policies: []networkingv1.NetworkPolicy{np("deny", nil, egress, nil)}},
		"ingress only":                     {policies: []networkingv1.NetworkPolicy{np("in", nil, ingress, allowAll)}},
		"sorted": {policies: []networkingv1.NetworkPolicy{np("z", nil, egress, allowAll), np("a", nil, egress, allowAll)},
			want: []string{"a", "z"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ExtraEgressPolicies(tc.policies, attempt, ours.Name)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("extra egress policies (-want +got):\n%s", diff)
			}
		})
	}
}
