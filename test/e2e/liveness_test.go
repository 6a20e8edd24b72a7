//go:build e2e

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

package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

var _ = Describe("The gateway's liveness Lease", func() {
	It("vouches for a run's attempt: the attempt names the Lease, whose holder renews it", func() {
		w := newWorld(nil)
		w.script("script", scriptComplete)
		w.run("alive", imageResearchAgent, agentArgs("script"), nil)
		w.terminated("alive", v1.ReasonCompleted, v1.SettlementComplete)

		lv := w.attempt("alive", 1).Status.Liveness
		Expect(lv).NotTo(BeNil(), "the gateway governs the attempt's liveness")
		ns, name, ok := strings.Cut(lv.Gateway, "/")
		Expect(ok).To(BeTrue())
		Expect(ns).To(Equal("agentrun-system"))
		Expect(name).To(HavePrefix("agentrun-gateway-"))
		l := &coordinationv1.Lease{}
		Expect(st.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, l)).To(Succeed())
		Expect(*l.Spec.HolderIdentity).To(Equal(lv.Holder))
		first := l.Spec.RenewTime.Time
		Eventually(func(g Gomega) {
			g.Expect(st.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, l)).To(Succeed())
			g.Expect(l.Spec.RenewTime.After(first)).To(BeTrue())
		}, 15*time.Second, 200*time.Millisecond).Should(Succeed(), "the gateway renews its Lease")
	})
})
