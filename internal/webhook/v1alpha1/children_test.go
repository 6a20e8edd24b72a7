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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

var _ = Describe("Child runs", func() {
	It("lets only agentrun-gateway create a run that claims a parent, and nobody change the claim", func() {
		ns := setup()
		parent := newRun(ns, "p")
		Expect(admin.Create(ctx, parent)).To(Succeed())
		child := func() *v1alpha1.ResearchRun {
			c := newRun(ns, "p-c")
			c.Spec.Parent = &v1alpha1.ParentRef{Name: "p", UID: string(parent.UID), Attempt: 1, Root: "p", Depth: 1}
			return c
		}

		By("a user who may create runs cannot make one a child to spend a parent's budget")
		rejected(as("mallory", "system:masters").Create(ctx, child()),
			"only agentrun-gateway creates child runs", "mallory may not")

		By("the gateway, after carving the child's budget, creates it")
		gatewayCfg, err := testEnv.AddUser(envtestUser(gatewayUser), adminConfig)
		Expect(err).NotTo(HaveOccurred())
		gatewayClient, err := client.New(gatewayCfg.Config(), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		c := child()
		Expect(gatewayClient.Create(ctx, c)).To(Succeed())

		By("nobody moves a child to another parent, or makes it a root")
		moved := c.DeepCopy()
		moved.Spec.Parent.Name, moved.Spec.Parent.UID = "q", "another-uid"
		rejected(admin.Patch(ctx, moved, client.MergeFrom(c)), "spec.parent is immutable")
		orphaned := c.DeepCopy()
		orphaned.Spec.Parent = nil
		rejected(admin.Patch(ctx, orphaned, client.MergeFrom(c)), "spec.parent is immutable")
		adopted := parent.DeepCopy()
		adopted.Spec.Parent = &v1alpha1.ParentRef{Name: "p-c", UID: string(c.UID), Attempt: 1, Root: "p-c", Depth: 1}
		rejected(admin.Patch(ctx, adopted, client.MergeFrom(parent)), "spec.parent is immutable")
	})
})
