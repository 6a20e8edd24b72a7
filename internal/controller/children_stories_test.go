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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// podTokens authenticates a token "<namespace>/<pod>" as that pod, read
// from the API server: the gateway's TokenReview in a cluster.
type podTokens struct{}

func (podTokens) Authenticate(ctx context.Context, token string) (gateway.Identity, error) {
	ns, name, ok := strings.Cut(token, "/")
	pod := &corev1.Pod{}
	if !ok || k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod) != nil {
		return gateway.Identity{}, gateway.ErrUnauthenticated
	}
	return gateway.Identity{Username: "system:serviceaccount:" + ns + ":agentrun-runner", Namespace: ns,
		PodName: name, PodUID: string(pod.UID)}, nil
}

// treeWorld is a world whose policy lets runs have children and whose
// session runs in Auto mode (report.publish auto-approved), with a real agentrun-gateway in front of the
// API server: parents ask it for children as attempt pods do.
type treeWorld struct {
	*world
	url string
}

func newTreeWorld(children v1alpha1.ChildrenPolicy) *treeWorld {
	GinkgoHelper()
	w := &treeWorld{world: newWorld()}
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &v1alpha1.RuntimePolicy{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "p"}, p); err != nil {
			return err
		}
		p.Spec.Children = &children
		p.Spec.MaxMode, p.Spec.AutoApprove = v1alpha1.ModeAuto, []string{gatewayapi.ToolReportPublish}
		p.Spec.Tools = []v1alpha1.Tool{
			{Name: "http.get", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
			{Name: gatewayapi.ToolReportPublish, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectWrite},
			{Name: gatewayapi.ToolRunSpawn, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
			{Name: gatewayapi.ToolRunChildren, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
		}
		return k8sClient.Update(ctx, p)
	})).To(Succeed())
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &v1alpha1.Session{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: w.session}, s); err != nil {
			return err
		}
		s.Spec.Mode = v1alpha1.ModeAuto
		return k8sClient.Update(ctx, s)
	})).To(Succeed())
	g, err := gateway.New(gateway.Options{Client: k8sClient, APIReader: k8sClient, Authenticator: podTokens{},
		FlushInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, PodWait: 5 * time.Second,
		Registry: prometheus.NewRegistry()})
	Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(g.Handler())
	DeferCleanup(func() {
		srv.Close()
		_ = g.Shutdown(context.Background())
	})
	w.url = srv.URL
	return w
}

// call sends an agent API request as attempt pod "<run>-<n>" and decodes
// the answer into out; it returns the status and the error body.
func (w *treeWorld) call(run string, n int, method, path string, in, out any) (int, gatewayapi.ErrorBody) {
	GinkgoHelper()
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		Expect(err).NotTo(HaveOccurred())
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.url+gatewayapi.PathPrefix+path, body)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+w.ns+"/"+attemptName(run, n))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var eb gatewayapi.ErrorBody
	if resp.StatusCode >= 300 {
		_ = json.Unmarshal(raw, &eb)
	} else if out != nil && len(raw) > 0 {
		Expect(json.Unmarshal(raw, out)).To(Succeed(), string(raw))
	}
	return resp.StatusCode, eb
}

// spawn asks, as the parent's attempt n, for a child named name with mr
// model requests and 2 tool calls.
func (w *treeWorld) spawn(parent string, n int, name string, mr int64) (int, gatewayapi.ErrorBody) {
	var c gatewayapi.Child
	return w.call(parent, n, http.MethodPost, "/self/children", gatewayapi.ChildRequest{Name: name, Task: "look into " + name,
		Budget: gatewayapi.ChildBudget{ModelRequests: mr, ToolCalls: 2}}, &c)
}

// publish publishes a section as the parent does: admit report.publish,
// then write the section.
func (w *treeWorld) publish(run string, n int, section, content string) {
	GinkgoHelper()
	args, _ := json.Marshal(map[string]string{"section": section, "content": content})
	var call gatewayapi.ToolCall
	code, eb := w.call(run, n, http.MethodPost, "/self/toolcalls", gatewayapi.ToolCallRequest{Tool: gatewayapi.ToolReportPublish, Arguments: args}, &call)
	Expect(code).To(Equal(http.StatusOK), "%+v", eb)
	code, eb = w.call(run, n, http.MethodPost, "/self/report/sections",
		gatewayapi.PublishRequest{CallID: call.ID, Section: section, Content: content}, nil)
	Expect(code).To(Equal(http.StatusOK), "%+v", eb)
}

// children lists the parent's children as its attempt n reads them.
func (w *treeWorld) children(run string, n int) []gatewayapi.Child {
	GinkgoHelper()
	var list gatewayapi.ChildList
	code, eb := w.call(run, n, http.MethodGet, "/self/children", nil, &list)
	Expect(code).To(Equal(http.StatusOK), "%+v", eb)
	return list.Children
}

// rootBudget is a root of 20 model requests and 10 tool calls, reserve 2/2.
func rootBudget(r *v1alpha1.ResearchRun) {
	r.Spec.Budget = v1alpha1.Budget{ModelRequests: 20, ToolCalls: 10, OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2}}
}

var _ = Describe("Child runs under one root budget", func() {
	It("carves three children; two finish, one fails, and the parent completes with two sections", func() {
		w := newTreeWorld(v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 3, MaxConcurrent: 3})
		w.run("root", rootBudget)
		w.start("root", 1)
		code, eb := w.call("root", 1, http.MethodPut, "/self/report/plan", gatewayapi.ReportPlanRequest{Sections: []string{"a", "b"}}, nil)
		Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		for _, c := range []string{"a", "b", "c"} {
			code, eb := w.spawn("root", 1, c, 4)
			Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		}
		By("a fourth child is refused by the policy's fan-out, by name")
		code, eb = w.spawn("root", 1, "d", 1)
		Expect(code).To(Equal(http.StatusTooManyRequests))
		Expect(eb.Error.Param).To(Equal("children.maxChildren"))

		By("the children run in their parent's session slot, owned by it, labelled with it")
		for _, c := range []string{"root-a", "root-b", "root-c"} {
			w.start(c, 1)
			child := w.get(c)
			Expect(metav1.IsControlledBy(child, w.get("root"))).To(BeTrue())
			Expect(child.Labels).To(HaveKeyWithValue(v1alpha1.LabelRoot, "root"))
			Expect(child.Spec.Parent).To(HaveValue(HaveField("Depth", int32(1))))
		}
		Eventually(func() v1alpha1.Usage { return w.get("root").Status.Budget.Used }, timeout, interval).Should(
			Equal(v1alpha1.Usage{ModelRequests: 12, ToolCalls: 6}), "three carves of 4 requests and 2 tool calls are the root's, spent")

		By("two children finish, one fails")
		w.agent("root-a", 1, func(s *v1alpha1.RunAttemptStatus) { s.Usage = v1alpha1.Usage{ModelRequests: 2, ToolCalls: 1} })
		w.finish("root-a", 1, v1alpha1.SettlementComplete)
		w.agent("root-b", 1, func(s *v1alpha1.RunAttemptStatus) { s.Usage = v1alpha1.Usage{ModelRequests: 3} })
		w.finish("root-b", 1, v1alpha1.SettlementComplete)
		w.agent("root-c", 1, func(s *v1alpha1.RunAttemptStatus) {
			s.Usage = v1alpha1.Usage{ModelRequests: 1}
			s.Faults = []v1alpha1.Fault{{Scope: v1alpha1.FaultScopeAgent, Kind: "Crashed", Count: 1, Escalated: true,
				LastMessage: "the sub-task's source is gone"}}
		})
		w.eventually("root-a", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		w.eventually("root-b", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		w.eventually("root-c", v1alpha1.PhaseTerminated, v1alpha1.ReasonAgentFailed)

		By("what the children did not use is back with the root; the failure did not touch it")
		Eventually(func() v1alpha1.Usage { return w.get("root").Status.Budget.Used }, timeout, interval).Should(
			Equal(v1alpha1.Usage{ModelRequests: 6, ToolCalls: 1}))
		Expect(w.get("root").Status.Phase).To(Equal(v1alpha1.PhaseRunning))
		kids := w.children("root", 1)
		Expect(kids).To(HaveLen(3))
		ended := map[string]v1alpha1.Reason{}
		for _, k := range kids {
			Expect(k.Ended).To(BeTrue())
			ended[k.Name] = k.Reason
		}
		Expect(ended).To(Equal(map[string]v1alpha1.Reason{"root-a": v1alpha1.ReasonCompleted, "root-b": v1alpha1.ReasonCompleted,
			"root-c": v1alpha1.ReasonAgentFailed}))
		var grant gatewayapi.Attempt
		w.call("root", 1, http.MethodGet, "/self", nil, &grant)
		Expect(grant.Grant.ModelRequests).To(Equal(int64(18-6)), "the working 18 less the 6 its children used")

		By("the parent publishes two sections from its children's work and completes")
		w.publish("root", 1, "a", "what child a found")
		w.publish("root", 1, "b", "what child b found")
		code, eb = w.call("root", 1, http.MethodPost, "/self/finish", struct{}{}, nil)
		Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		w.eventually("root", v1alpha1.PhaseFinalizing, v1alpha1.ReasonCompleted)
		var settled gatewayapi.SettleResponse
		code, eb = w.call("root", 1, http.MethodPost, "/self/settle", struct{}{}, &settled)
		Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		Expect(settled.BlocksCommitted).To(Equal(int32(2)))
		w.exited("root", 1)
		run := w.eventually("root", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementComplete))
		// The watch that records phases may trail the read above.
		Eventually(func() []v1alpha1.Phase { return w.phaseSequence("root") }, timeout, interval).Should(
			Equal([]v1alpha1.Phase{v1alpha1.PhaseRunning, v1alpha1.PhaseFinalizing, v1alpha1.PhaseTerminated}),
			"a child's failure never ends its parent")
	})

	It("lets children race for the last of the budget: exactly the budget is spent", func() {
		w := newTreeWorld(v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 20, MaxConcurrent: 20})
		w.run("root", func(r *v1alpha1.ResearchRun) {
			r.Spec.Budget = v1alpha1.Budget{ModelRequests: 12, ToolCalls: 12, OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2}}
		})
		w.start("root", 1)
		var wg sync.WaitGroup
		codes := make([]int, 12)
		params := make([]string, 12)
		for i := range codes {
			wg.Go(func() {
				defer GinkgoRecover()
				c, eb := w.spawn("root", 1, fmt.Sprintf("r%d", i), 2)
				codes[i], params[i] = c, eb.Error.Param
			})
		}
		wg.Wait()
		var admitted []string
		for i, c := range codes {
			if c == http.StatusOK {
				admitted = append(admitted, fmt.Sprintf("root-r%d", i))
			} else {
				Expect(c).To(Equal(http.StatusTooManyRequests))
				Expect(params[i]).To(Equal("modelRequests"), "a refusal names the unit that does not fit")
			}
		}
		Expect(admitted).To(HaveLen(5), "5 children of 2 requests fill the working 10; the other 7 are refused")
		Expect(w.get("root").Status.Phase).To(Equal(v1alpha1.PhaseRunning), "a parent whose children hold its budget waits for them")

		By("every child spends its whole budget")
		for _, c := range admitted {
			w.start(c, 1)
			// Its last request, its finish and its settled report in one
			// write: spent to the last request, it proposed to finish.
			w.agent(c, 1, func(s *v1alpha1.RunAttemptStatus) {
				s.Usage, s.Steps, s.LastProgressStep = v1alpha1.Usage{ModelRequests: 2, ToolCalls: 2}, 2, 2
				s.FinishProposed = true
				s.Publication = v1alpha1.Publication{BlocksPlanned: 1, BlocksCommitted: 1, Settlement: v1alpha1.SettlementComplete, Settled: true}
			})
			w.exited(c, 1)
			w.eventually(c, v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		}
		run := w.eventually("root", v1alpha1.PhaseFinalizing, v1alpha1.ReasonBudgetExhausted)
		Expect(run.Status.Budget.Used).To(Equal(v1alpha1.Usage{ModelRequests: 10, ToolCalls: 10}))

		By("the root finalizes from its own reserve, never carved")
		code, eb := w.call("root", 1, http.MethodPost, "/self/settle", struct{}{}, nil)
		Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		w.exited("root", 1)
		run = w.eventually("root", v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted)
		var tree int64
		for _, c := range admitted {
			tree += w.get(c).Status.Budget.Used.ModelRequests
		}
		Expect(tree).To(Equal(int64(10)), "the children spent the working allowance, no more")
		Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically("<=", 12), "the tree never spends beyond the root's budget")
	})

	It("finalizes a parent's children when its deadline passes", func() {
		w := newTreeWorld(v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 2, MaxConcurrent: 2})
		w.run("root", func(r *v1alpha1.ResearchRun) {
			rootBudget(r)
			r.Spec.Budget.Deadline = &metav1.Duration{Duration: 6 * time.Second}
			r.Spec.Budget.FinalizationGrace = &metav1.Duration{Duration: time.Minute}
		})
		w.start("root", 1)
		var c gatewayapi.Child
		code, eb := w.call("root", 1, http.MethodPost, "/self/children", gatewayapi.ChildRequest{Name: "slow", Task: "a long read",
			Budget: gatewayapi.ChildBudget{ModelRequests: 4, ToolCalls: 2, OutputReserve: v1alpha1.OutputReserve{ModelRequests: 1}}}, &c)
		Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		Expect(w.get("root-slow").Spec.Budget.Deadline.Duration).To(BeNumerically("<=", 66*time.Second),
			"a child never runs past its parent's hard deadline (deadline plus grace)")
		w.start("root-slow", 1)
		w.eventually("root", v1alpha1.PhaseFinalizing, v1alpha1.ReasonDeadlineExceeded)
		Eventually(func(g Gomega) {
			child := w.get("root-slow")
			g.Expect(child.Spec.Stop).To(Equal(v1alpha1.StopFinalize))
			g.Expect(child.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationStopCause, "its parent run root is finalizing (DeadlineExceeded)"))
			g.Expect(child.Status.Phase).To(Equal(v1alpha1.PhaseFinalizing))
			g.Expect(child.Status.Reason).To(Equal(v1alpha1.ReasonFinalizeRequested))
			g.Expect(child.Status.Message).To(ContainSubstring("finalize requested because its parent run root is finalizing"))
		}, timeout, interval).Should(Succeed())

		By("the parent ends: its children are cancelled")
		code, eb = w.call("root", 1, http.MethodPost, "/self/settle", struct{}{}, nil)
		Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		w.exited("root", 1)
		w.eventually("root", v1alpha1.PhaseTerminated, v1alpha1.ReasonDeadlineExceeded)
		child := w.eventually("root-slow", v1alpha1.PhaseTerminated, "")
		Expect(child.Spec.Stop).To(Equal(v1alpha1.StopCancel))
	})

	It("never lets a child outlive its deleted root", func() {
		w := newTreeWorld(v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 2, MaxConcurrent: 2})
		w.run("root", rootBudget)
		w.start("root", 1)
		code, eb := w.spawn("root", 1, "orphan", 4)
		Expect(code).To(Equal(http.StatusOK), "%+v", eb)
		w.start("root-orphan", 1)
		child := w.get("root-orphan")
		Expect(child.OwnerReferences).To(ConsistOf(HaveField("UID", w.get("root").UID)),
			"owned by the root: the garbage collector deletes the tree with it (test/e2e)")

		By("envtest runs no garbage collector: the child's own pass cancels it when its parent is gone")
		Expect(k8sClient.Delete(ctx, w.get("root"))).To(Succeed())
		child = w.eventually("root-orphan", v1alpha1.PhaseTerminated, v1alpha1.ReasonCancelled)
		Expect(child.Status.Message).To(ContainSubstring("its parent run root was deleted"))
	})
})
