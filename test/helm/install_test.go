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
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/test/utils"
)

const (
	timeout  = 30 * time.Second
	interval = 100 * time.Millisecond
)

// serviceAccount is how the API server names a service account's requests,
// with the groups it gives them.
func serviceAccount(namespace, name string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

// A platform team installs the chart into its own namespace with its own
// name prefix. The API server takes every object the chart renders, and the
// ValidatingAdmissionPolicies follow the rename: the renamed operator and
// gateway service accounts, with the RBAC the chart binds to them, write
// what they own; the names config/default uses no longer carry that
// authority, even for a cluster admin.
func TestNonDefaultInstallOnAPIServer(t *testing.T) {
	const ns, prefix = "research-ops", "ar-"
	g := NewWithT(t)
	ctx := context.Background()

	objs, err := renderChart(ns, map[string]any{"namePrefix": prefix, "namespace": map[string]any{"create": true}})
	g.Expect(err).NotTo(HaveOccurred())
	for _, u := range objs {
		data, err := yaml.Marshal(u.Object)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(data)).NotTo(ContainSubstring("agentrun-system"), "%s still names config/default's namespace", key(u))
		if u.GetKind() != "CustomResourceDefinition" {
			g.Expect(u.GetName()).To(Or(HavePrefix(prefix), Equal(ns)), "%s has no prefix %q", key(u), prefix)
		}
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(utils.ProjectRoot(), "charts", "agentrun", "crds")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: utils.EnvtestAssets(),
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	as := func(who rest.ImpersonationConfig) client.Client {
		c := rest.CopyConfig(cfg)
		c.Impersonate = who
		cl, err := client.New(c, client.Options{Scheme: scheme})
		g.Expect(err).NotTo(HaveOccurred())
		return cl
	}

	// The Namespace first (it is the chart's own template here), then the
	// rest in the chart's order. Not applied: the CRDs (envtest installed
	// crds/), cert-manager's kinds (no cert-manager here), and the webhook
	// configurations (no webhook server here: they would refuse every write;
	// the admission suite in internal/webhook tests the webhooks).
	applied := 0
	for _, kind := range []string{"Namespace", ""} {
		for _, u := range objs {
			switch {
			case kind != "" && u.GetKind() != kind, kind == "" && u.GetKind() == "Namespace":
				continue
			case u.GetKind() == "CustomResourceDefinition",
				u.GetKind() == "MutatingWebhookConfiguration", u.GetKind() == "ValidatingWebhookConfiguration":
				continue
			}
			err := admin.Create(ctx, u.DeepCopy())
			if meta.IsNoMatchError(err) && u.GroupVersionKind().Group == "cert-manager.io" {
				continue
			}
			g.Expect(err).NotTo(HaveOccurred(), "creating %s", key(u))
			applied++
		}
	}
	t.Logf("the API server took %d objects of the chart rendered for namespace %s, prefix %s", applied, ns, prefix)

	operator := as(serviceAccount(ns, prefix+"controller-manager"))
	gateway := as(serviceAccount(ns, prefix+"gateway"))
	// The names config/default gives the two, as cluster admins: RBAC lets
	// them do anything, so a refusal is the admission policies'.
	oldOperator := as(rest.ImpersonationConfig{UserName: "system:serviceaccount:agentrun-system:agentrun-controller-manager",
		Groups: []string{"system:masters", "system:authenticated"}})
	oldGateway := as(rest.ImpersonationConfig{UserName: "system:serviceaccount:agentrun-system:agentrun-gateway",
		Groups: []string{"system:masters", "system:authenticated"}})

	const team = "team-a"
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}})).To(Succeed())
	session := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "research"},
		Spec: v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "default"}}}
	g.Expect(admin.Create(ctx, session)).To(Succeed())
	writeSessionStatus := func(c client.Client, activeRun string) error {
		s := &v1alpha1.Session{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(session), s); err != nil {
			return err
		}
		s.Status.ActiveRun = activeRun
		return c.Status().Update(ctx, s)
	}
	refusedByPolicy := func(err error, says string) {
		t.Helper()
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a refusal, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring(says))
	}

	// The policies take effect once the API server has loaded them.
	g.Eventually(func() error { return writeSessionStatus(oldOperator, "forged") }, timeout, interval).Should(
		MatchError(ContainSubstring("Session status (the active run, the queue, the mode history) is written only " +
			"by the agentrun operator; system:serviceaccount:agentrun-system:agentrun-controller-manager may not write it")))

	t.Run("the renamed operator writes session status and RunAttempts", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(writeSessionStatus(operator, "run-1")).To(Succeed())
		ra := &v1alpha1.RunAttempt{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "run-1-1"},
			Spec: v1alpha1.RunAttemptSpec{RunName: "run-1", Attempt: 1}}
		g.Expect(operator.Create(ctx, ra)).To(Succeed())
		ra.Spec.Goal = "survey"
		g.Expect(operator.Update(ctx, ra)).To(Succeed())
	})

	t.Run("the renamed gateway writes a RunAttempt's facts and its run's report", func(t *testing.T) {
		g := NewWithT(t)
		ra := &v1alpha1.RunAttempt{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: team, Name: "run-1-1"}, ra)).To(Succeed())
		ra.Status.Steps = 3
		g.Expect(gateway.Status().Update(ctx, ra)).To(Succeed())
		g.Expect(gateway.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "run-1-report",
			Labels: map[string]string{"agentrun.dev/run": "run-1"}}})).To(Succeed())
		err := gateway.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "notes"}})
		refusedByPolicy(err, "agentrun-gateway may only create or update report ConfigMaps, named <run>-report and "+
			"labelled agentrun.dev/run=<run>; notes (no run label) is not one")
	})

	t.Run("config/default's names no longer carry the operator's or the gateway's authority", func(t *testing.T) {
		g := NewWithT(t)
		err := oldOperator.Create(ctx, &v1alpha1.RunAttempt{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "run-1-2"},
			Spec: v1alpha1.RunAttemptSpec{RunName: "run-1", Attempt: 2}})
		refusedByPolicy(err, "RunAttempts are written only by the agentrun operator (spec carries grants and "+
			"directives); system:serviceaccount:agentrun-system:agentrun-controller-manager may not create them")

		ra := &v1alpha1.RunAttempt{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: team, Name: "run-1-1"}, ra)).To(Succeed())
		ra.Status.Steps = 99
		refusedByPolicy(oldGateway.Status().Update(ctx, ra), "RunAttempt status (the attempt's facts) is written only by "+
			"agentrun-gateway, which counts what it dispatched, or by the operator; "+
			"system:serviceaccount:agentrun-system:agentrun-gateway may not write it")

		// gateway-report-authority matches the renamed gateway only: another
		// user's ConfigMaps are RBAC's business.
		g.Expect(oldGateway.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "notes"}})).
			To(Succeed())
	})

	t.Run("nobody else writes session status, even a cluster admin", func(t *testing.T) {
		alice := as(rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:masters", "system:authenticated"}})
		refusedByPolicy(writeSessionStatus(alice, "forged"), "alice may not write it")
	})
}
