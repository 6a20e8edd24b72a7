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

package v1alpha1

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// rbacMatrix is every (group, resource) × verb the golden test asks about.
var rbacMatrix = struct {
	resources [][2]string
	verbs     []string
}{
	resources: [][2]string{
		{"agentrun.dev", "researchruns"}, {"agentrun.dev", "researchruns/status"},
		{"agentrun.dev", "runattempts"}, {"agentrun.dev", "runattempts/status"},
		{"agentrun.dev", "sessions"}, {"agentrun.dev", "sessions/status"}, {"agentrun.dev", "sessions/finalizers"},
		{"agentrun.dev", "runtimepolicies"}, {"agentrun.dev", "runtimepolicies/status"},
		{"", "pods"}, {"", "configmaps"}, {"", "secrets"}, {"", "serviceaccounts"},
		{"rbac.authorization.k8s.io", "rolebindings"}, {"rbac.authorization.k8s.io", "clusterroles"},
		{"authentication.k8s.io", "tokenreviews"}, {"authorization.k8s.io", "subjectaccessreviews"},
		{"networking.k8s.io", "networkpolicies"},
		{"events.k8s.io", "events"},
	},
	verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "bind"},
}

// allowed asks the API server, with SubjectAccessReviews, what user may do in
// namespace, as sorted "verb group/resource" lines.
func allowed(user string, groups []string, namespace string) []string {
	GinkgoHelper()
	var out []string
	for _, gr := range rbacMatrix.resources {
		resource, sub, _ := strings.Cut(gr[1], "/")
		for _, verb := range rbacMatrix.verbs {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: namespace, Verb: verb, Group: gr[0], Resource: resource, Subresource: sub,
				},
			}}
			if resource == "clusterroles" {
				sar.Spec.ResourceAttributes.Namespace = ""
				sar.Spec.ResourceAttributes.Name = "agentrun-runner"
			}
			Expect(admin.Create(ctx, sar)).To(Succeed())
			if sar.Status.Allowed {
				out = append(out, fmt.Sprintf("%s %s/%s", verb, gr[0], gr[1]))
			}
		}
	}
	slices.Sort(out)
	return out
}

var _ = Describe("RBAC", func() {
	It("grants the runner nothing, and the operator and the gateway exactly the checked-in allow-list", func() {
		ns := setup()
		Expect(admin.Create(ctx, newRun(ns, "r"))).To(Succeed())
		// The operator binds the runner role when it starts the first attempt.
		Eventually(func() error {
			return admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "r-1"}, &corev1.Pod{})
		}, timeout, interval).Should(Succeed())

		got := map[string][]string{
			"runner":   allowed("system:serviceaccount:"+ns+":agentrun-runner", []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}, ns),
			"operator": allowed(operatorUser, []string{"system:serviceaccounts", "system:serviceaccounts:agentrun-system"}, ns),
			"gateway":  allowed(gatewayUser, []string{"system:serviceaccounts", "system:serviceaccounts:agentrun-system"}, ns),
		}
		golden := filepath.Join("testdata", "rbac-allowlist.yaml")
		if os.Getenv("UPDATE_GOLDEN") == "1" {
			data, err := yaml.Marshal(got)
			Expect(err).NotTo(HaveOccurred())
			Expect(os.WriteFile(golden, data, 0o644)).To(Succeed())
		}
		data, err := os.ReadFile(golden)
		Expect(err).NotTo(HaveOccurred(), "run with UPDATE_GOLDEN=1 to write %s, then review it", golden)
		want := map[string][]string{}
		Expect(yaml.Unmarshal(data, &want)).To(Succeed())
		Expect(got).To(Equal(want), "RBAC drifted from %s; review the change and update it with UPDATE_GOLDEN=1", golden)

		// Spot checks that keep the allow-list honest.
		// Attempt pods need no RBAC at all: they talk only to the gateway.
		Expect(got["runner"]).To(BeEmpty())
		Expect(got["gateway"]).To(ContainElement("update agentrun.dev/runattempts/status"))
		Expect(got["gateway"]).NotTo(ContainElement("update agentrun.dev/runattempts"))
		Expect(got["gateway"]).NotTo(ContainElement("update agentrun.dev/researchruns/status"))
		Expect(got["gateway"]).To(ContainElement("get /secrets"), "the gateway alone reads provider keys")
		Expect(got["operator"]).NotTo(ContainElement("get /secrets"))
	})
})

// webhooksDown points every agentrun webhook, validating and mutating, at a
// port nobody listens on, as if the operator's webhook server were down (the
// endpoint refuses connections; failurePolicy Fail), until the spec ends. It
// returns once the API server calls the dead endpoints.
func webhooksDown(probeNamespace string) {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	dead := "https://" + l.Addr().String()
	Expect(l.Close()).To(Succeed())
	redirect := func(cc *admissionv1.WebhookClientConfig) {
		path := ""
		if cc.URL != nil {
			u, err := url.Parse(*cc.URL)
			Expect(err).NotTo(HaveOccurred())
			path = u.Path
		}
		cc.URL = new(dead + path)
		cc.Service = nil
	}

	vlist := &admissionv1.ValidatingWebhookConfigurationList{}
	Expect(admin.List(ctx, vlist)).To(Succeed())
	mlist := &admissionv1.MutatingWebhookConfigurationList{}
	Expect(admin.List(ctx, mlist)).To(Succeed())
	var saved []client.Object
	for i := range vlist.Items {
		cfg := &vlist.Items[i]
		if !strings.Contains(cfg.Webhooks[0].Name, "kb.io") {
			continue
		}
		saved = append(saved, cfg.DeepCopy())
		for j := range cfg.Webhooks {
			redirect(&cfg.Webhooks[j].ClientConfig)
		}
		Expect(admin.Update(ctx, cfg)).To(Succeed())
	}
	for i := range mlist.Items {
		cfg := &mlist.Items[i]
		if !strings.Contains(cfg.Webhooks[0].Name, "kb.io") {
			continue
		}
		saved = append(saved, cfg.DeepCopy())
		for j := range cfg.Webhooks {
			redirect(&cfg.Webhooks[j].ClientConfig)
		}
		Expect(admin.Update(ctx, cfg)).To(Succeed())
	}
	Expect(saved).To(HaveLen(2))
	DeferCleanup(func() {
		for _, o := range saved {
			Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := o.DeepCopyObject().(client.Object)
				if err := admin.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
					return err
				}
				switch c := cur.(type) {
				case *admissionv1.ValidatingWebhookConfiguration:
					c.Webhooks = o.(*admissionv1.ValidatingWebhookConfiguration).Webhooks
				case *admissionv1.MutatingWebhookConfiguration:
					c.Webhooks = o.(*admissionv1.MutatingWebhookConfiguration).Webhooks
				}
				return admin.Update(ctx, cur)
			})).To(Succeed())
		}
	})

	// The API server's webhook informers pick the change up shortly. A
	// dry-run label change of a Session passes through msession (mutating)
	// first: once that names the dead mutating webhook, both are dead.
	p := minimalPolicy(probeNamespace)
	p.Name = "outage-probe"
	Eventually(func() error { return admin.Create(ctx, p.DeepCopy(), client.DryRunAll) }, timeout, interval).Should(
		MatchError(ContainSubstring(`failed calling webhook "vruntimepolicy-v1alpha1.kb.io"`)))
	s := newSession(probeNamespace, "outage-probe")
	Eventually(func() error { return admin.Create(ctx, s.DeepCopy(), client.DryRunAll) }, timeout, interval).Should(
		MatchError(ContainSubstring(`failed calling webhook "msession-v1alpha1.kb.io"`)))
}

var _ = Describe("Webhook outage", Serial, func() {
	It("fails closed for protected writes while kube-system is unaffected", func() {
		ns := newNamespace()
		webhooksDown(ns)
		rejected(admin.Create(ctx, minimalPolicy(ns)), "failed calling webhook")

		inSystem := minimalPolicy("kube-system")
		inSystem.Name = "outage-probe"
		Expect(admin.Create(ctx, inSystem)).To(Succeed(), "kube-system is excluded from agentrun's webhooks")
		Expect(admin.Delete(ctx, inSystem)).To(Succeed())
		Expect(admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"}})).To(Succeed(),
			"writes agentrun does not guard are unaffected")
	})

	It("admits Cancel and Finalize, validated by the CRD alone, and nothing else of a run", func() {
		ns := setup()
		for _, name := range []string{"cancel", "raise", "ssa", "other"} {
			Expect(admin.Create(ctx, newRun(ns, name))).To(Succeed())
		}
		webhooksDown(ns)

		alice := as("alice", "system:masters")
		run := func(name string) *v1alpha1.ResearchRun {
			return &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		}
		merge := func(name, body string) error {
			return alice.Patch(ctx, run(name), client.RawPatch(types.MergePatchType, []byte(body)))
		}
		stopOf := func(name string) v1alpha1.StopRequest {
			got := run(name)
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
			return got.Spec.Stop
		}

		By("setting spec.stop: the API server admits it without calling a webhook")
		Expect(merge("cancel", `{"spec":{"stop":"Cancel"}}`)).To(Succeed())
		Expect(stopOf("cancel")).To(Equal(v1alpha1.StopCancel))
		Expect(merge("raise", `{"spec":{"stop":"Finalize"}}`)).To(Succeed())
		Expect(stopOf("raise")).To(Equal(v1alpha1.StopFinalize))
		Expect(merge("raise", `{"spec":{"stop":"Cancel"}}`)).To(Succeed(), "Finalize may be raised to Cancel")
		Expect(stopOf("raise")).To(Equal(v1alpha1.StopCancel))
		// kubectl apply --server-side of a manifest with only spec.stop:
		// managedFields change too, and are not compared.
		ssa := []byte(fmt.Sprintf(`{"apiVersion":"agentrun.dev/v1alpha1","kind":"ResearchRun",`+
			`"metadata":{"name":"ssa","namespace":%q},"spec":{"stop":"Finalize"}}`, ns))
		Expect(alice.Patch(ctx, run("ssa"), client.RawPatch(types.ApplyPatchType, ssa), client.FieldOwner("alice"))).To(Succeed())
		Expect(stopOf("ssa")).To(Equal(v1alpha1.StopFinalize))

		By("a stop the CRD does not allow: refused by the API server itself (schema and CEL)")
		rejected(merge("other", `{"spec":{"stop":"Abort"}}`), "spec.stop", `Unsupported value: "Abort"`)
		rejected(merge("cancel", `{"spec":{"stop":"Finalize"}}`), "may only change from Finalize to Cancel")
		rejected(merge("cancel", `{"spec":{"stop":null}}`), "failed calling webhook") // not a stop being set
		Expect(stopOf("cancel")).To(Equal(v1alpha1.StopCancel))

		By("anything else still needs the webhooks, and fails closed")
		for _, body := range []string{
			`{"spec":{"approvals":[{"actionID":"publish-1","decision":"Approve"}]}}`,                       // needs the approver stamp
			`{"spec":{"stop":"Cancel","approvals":[{"actionID":"publish-1","decision":"Approve"}]}}`,       // a stop with more
			`{"spec":{"stop":"Cancel","template":{"spec":{"containers":[{"name":"agent","image":"x"}]}}}}`, // a stop with a template change
			`{"spec":{"goal":"another goal"}}`,
			`{"metadata":{"labels":{"team":"a"}}}`, // metadata only: not a stop
		} {
			rejected(merge("other", body), "failed calling webhook")
		}
		rejected(admin.Create(ctx, newRun(ns, "new")), "failed calling webhook")
		Expect(stopOf("other")).To(BeEmpty())
	})
})
