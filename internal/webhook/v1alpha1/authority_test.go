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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
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
		{"authentication.k8s.io", "tokenreviews"}, {"networking.k8s.io", "networkpolicies"},
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

var _ = Describe("Webhook outage", Serial, func() {
	It("fails closed for protected writes while kube-system is unaffected", func() {
		// Point every webhook at a port nobody listens on, as if the
		// operator's webhook server were down.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		dead := "https://" + l.Addr().String()
		Expect(l.Close()).To(Succeed())

		list := &admissionv1.ValidatingWebhookConfigurationList{}
		Expect(admin.List(ctx, list)).To(Succeed())
		var saved []admissionv1.ValidatingWebhookConfiguration
		for i := range list.Items {
			cfg := &list.Items[i]
			if !strings.Contains(cfg.Webhooks[0].Name, "kb.io") {
				continue
			}
			saved = append(saved, *cfg.DeepCopy())
			for j := range cfg.Webhooks {
				path := ""
				if u := cfg.Webhooks[j].ClientConfig.URL; u != nil {
					if k := strings.Index(*u, "/validate"); k >= 0 {
						path = (*u)[k:]
					}
				}
				cfg.Webhooks[j].ClientConfig.URL = new(dead + path)
				cfg.Webhooks[j].ClientConfig.Service = nil
			}
			Expect(admin.Update(ctx, cfg)).To(Succeed())
		}
		Expect(saved).NotTo(BeEmpty())
		DeferCleanup(func() {
			for i := range saved {
				cur := &admissionv1.ValidatingWebhookConfiguration{}
				Expect(admin.Get(ctx, client.ObjectKeyFromObject(&saved[i]), cur)).To(Succeed())
				cur.Webhooks = saved[i].Webhooks
				Expect(admin.Update(ctx, cur)).To(Succeed())
			}
		})

		ns := newNamespace()
		p := minimalPolicy(ns)
		Eventually(func() error { return admin.Create(ctx, p.DeepCopy()) }, timeout, interval).Should(
			MatchError(ContainSubstring("failed calling webhook")), "a protected write must fail closed")

		inSystem := minimalPolicy("kube-system")
		inSystem.Name = "outage-probe"
		Expect(admin.Create(ctx, inSystem)).To(Succeed(), "kube-system is excluded from agentrun's webhooks")
		Expect(admin.Delete(ctx, inSystem)).To(Succeed())
		Expect(admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"}})).To(Succeed(),
			"writes agentrun does not guard are unaffected")
	})
})
