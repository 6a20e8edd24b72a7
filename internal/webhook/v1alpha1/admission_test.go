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
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "adm-"}}
	Expect(admin.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

//go:fix inline

// minimalPolicy is the source document's "minimal" chain.
func minimalPolicy(ns string) *v1.RuntimePolicy {
	return &v1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: v1.RuntimePolicySpec{
			Interceptors: []v1.Interceptor{
				{Name: "auth", Class: v1.ClassSecurity, Role: v1.RoleAuthentication, Phase: v1.InterceptorPre, Priority: 10, OnError: v1.PostureDeny, Veto: new(true)},
				{Name: "rate_limit", Class: v1.ClassResource, Role: v1.RoleIdentityConsumer, Phase: v1.InterceptorPre, Priority: 20, OnError: v1.PostureDeny, Veto: new(true)},
				{Name: "redact", Class: v1.ClassSecurity, Role: v1.RoleRedaction, Phase: v1.InterceptorPost, Priority: 50, OnError: v1.PostureDeny},
				{Name: "audit", Class: v1.ClassObservability, Role: v1.RoleAudit, Phase: v1.InterceptorPost, Priority: 90, OnError: v1.PostureAllow, Buffered: true},
			},
			Tools: []v1.Tool{
				{Name: "http.get", Risk: v1.RiskLow, Effect: v1.EffectNone},
				{Name: "notes.write", Risk: v1.RiskLow, Effect: v1.EffectWrite, Idempotent: true},
				{Name: "report.publish", Risk: v1.RiskHigh, Effect: v1.EffectExternal},
			},
			AutoApprove: []string{"notes.write"},
			MaxMode:     v1.ModeAuto,
			Limits:      v1.RunLimits{MaxModelRequests: ptr.To[int64](100), MaxSteps: ptr.To[int32](50)},
		},
	}
}

func newSession(ns, name string) *v1.Session {
	return &v1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.SessionSpec{PolicyRef: v1.LocalObjectReference{Name: "p"}},
	}
}

func newRun(ns, name string) *v1.ResearchRun {
	return &v1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ResearchRunSpec{
			SessionRef: v1.LocalObjectReference{Name: "s"},
			Goal:       "survey",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "agent", Image: "research-agent"}},
			}},
			Budget: v1.Budget{ModelRequests: 10, ToolCalls: 10, OutputReserve: v1.OutputReserve{ModelRequests: 2}},
		},
	}
}

// setup creates the minimal policy and session "s" in a new namespace.
func setup() string {
	GinkgoHelper()
	ns := newNamespace()
	Expect(admin.Create(ctx, minimalPolicy(ns))).To(Succeed())
	Expect(admin.Create(ctx, newSession(ns, "s"))).To(Succeed())
	return ns
}

func rejected(err error, parts ...string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the write was admitted; want a rejection mentioning %q", parts)
	for _, p := range parts {
		Expect(err.Error()).To(ContainSubstring(p))
	}
}

// as returns a client that impersonates user.
func as(user string, groups ...string) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(adminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

var _ = Describe("RuntimePolicy admission", func() {
	It("accepts the source document's minimal chain and resolves it in order", func() {
		ns := newNamespace()
		Expect(admin.Create(ctx, minimalPolicy(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			p := &v1.RuntimePolicy{}
			g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "p"}, p)).To(Succeed())
			var names []string
			for _, r := range p.Status.ResolvedChain {
				names = append(names, r.Name)
			}
			g.Expect(names).To(Equal([]string{"auth", "rate_limit", "redact", "audit"}))
		}, timeout, interval).Should(Succeed())
	})

	DescribeTable("rejects a chain that breaks a rule, naming the interceptor, field and rule",
		func(mutate func(*v1.RuntimePolicySpec), parts ...string) {
			p := minimalPolicy(newNamespace())
			mutate(&p.Spec)
			rejected(admin.Create(ctx, p), parts...)
		},
		Entry("fail-open security", func(s *v1.RuntimePolicySpec) { s.Interceptors[2].OnError = v1.PostureAllow },
			"spec.interceptors[2].onError", `interceptor "redact"`, "must fail closed"),
		Entry("Pre without explicit veto", func(s *v1.RuntimePolicySpec) { s.Interceptors[1].Veto = nil },
			"spec.interceptors[1].veto", `interceptor "rate_limit"`, "veto explicitly"),
		Entry("auth moved after logging (a migration that reorders registration)", func(s *v1.RuntimePolicySpec) {
			s.Interceptors = append(s.Interceptors, v1.Interceptor{Name: "log", Class: v1.ClassObservability, Role: v1.RoleLogging,
				Phase: v1.InterceptorPre, Priority: 5, OnError: v1.PostureAllow, Veto: new(false)})
		}, `interceptor "log"`, `"auth"`),
		Entry("rate limit before auth", func(s *v1.RuntimePolicySpec) { s.Interceptors[1].Priority = 5 },
			`"rate_limit"`, `"auth"`),
		Entry("audit before redact", func(s *v1.RuntimePolicySpec) { s.Interceptors[3].Priority = 40 },
			`"audit"`, `"redact"`),
		Entry("unknown requires", func(s *v1.RuntimePolicySpec) { s.Interceptors[1].Requires = []string{"authn"} },
			"spec.interceptors[1].requires[0]", `"authn"`),
		Entry("High-risk tool in autoApprove", func(s *v1.RuntimePolicySpec) { s.AutoApprove = append(s.AutoApprove, "report.publish") },
			"spec.autoApprove[1]", "High risk"),
		Entry("a write that no tool server serves", func(s *v1.RuntimePolicySpec) {
			s.Tools = append(s.Tools, v1.Tool{Name: "files.write", Risk: v1.RiskMedium, Effect: v1.EffectWrite})
		}, "spec.tools[3].server", `tool "files.write" (effect Write)`, "must name the spec.toolServers entry that serves it"),
		Entry("a server that is not declared", func(s *v1.RuntimePolicySpec) {
			s.ToolServers = []v1.ToolServer{{Name: "tickets", URL: "https://tickets.example.com/mcp"}}
			s.Tools = append(s.Tools, v1.Tool{Name: "mail.send", Risk: v1.RiskMedium, Effect: v1.EffectExternal, Server: "mail"})
		}, "spec.tools[3].server", `server "mail" is not an entry of spec.toolServers`),
		Entry("a built-in tool with a server", func(s *v1.RuntimePolicySpec) {
			s.ToolServers = []v1.ToolServer{{Name: "tickets", URL: "https://tickets.example.com/mcp"}}
			s.Tools[2].Server = "tickets"
		}, "spec.tools[2].server", `tool "report.publish" is built into the gateway`),
		Entry("a preview that writes", func(s *v1.RuntimePolicySpec) { s.Tools[1].Preview = true },
			"spec.tools[1].preview", "only an effect-None tool can be a preview"),
		Entry("two tool servers of one name", func(s *v1.RuntimePolicySpec) {
			s.ToolServers = []v1.ToolServer{{Name: "tickets", URL: "https://a.example.com/mcp"}, {Name: "tickets", URL: "https://b.example.com/mcp"}}
		}, "spec.toolServers[1]", "Duplicate value"),
	)

	It("refuses an interceptor the gateway does not implement, listing those it does", func() {
		p := minimalPolicy(newNamespace())
		p.Spec.Interceptors = append(p.Spec.Interceptors, v1.Interceptor{Name: "quota", Class: v1.ClassResource,
			Phase: v1.InterceptorPre, Priority: 30, OnError: v1.PostureDeny, Veto: new(true)})
		rejected(admin.Create(ctx, p), "spec.interceptors[4].name", `interceptor "quota"`,
			"the gateway does not implement it", "audit (Post), auth (Pre), rate_limit (Pre), redact (Pre or Post)",
			"enforcement: Agent")

		wrongPhase := minimalPolicy(newNamespace())
		wrongPhase.Spec.Interceptors[3].Phase = v1.InterceptorAround
		rejected(admin.Create(ctx, wrongPhase), "spec.interceptors[3].phase", `interceptor "audit"`, "only in phase Post")
	})

	It("admits an interceptor the agent enforces, and keeps the mark in the resolved chain", func() {
		p := minimalPolicy(newNamespace())
		p.Spec.Interceptors = append(p.Spec.Interceptors, v1.Interceptor{Name: "quota", Class: v1.ClassResource,
			Phase: v1.InterceptorPre, Priority: 30, OnError: v1.PostureDeny, Veto: new(true), Enforcement: v1.EnforcementAgent})
		Expect(admin.Create(ctx, p)).To(Succeed())
		Eventually(func(g Gomega) {
			got := &v1.RuntimePolicy{}
			g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, got)).To(Succeed())
			enforcement := map[string]v1.InterceptorEnforcement{}
			for _, r := range got.Status.ResolvedChain {
				enforcement[r.Name] = r.Enforcement
			}
			g.Expect(enforcement).To(HaveKeyWithValue("quota", v1.EnforcementAgent))
			g.Expect(enforcement).To(HaveKeyWithValue("auth", v1.EnforcementGateway), "the API server defaults Gateway")
		}, timeout, interval).Should(Succeed())

		security := minimalPolicy(newNamespace())
		security.Spec.Interceptors[0].Enforcement = v1.EnforcementAgent
		rejected(admin.Create(ctx, security), "spec.interceptors[0].enforcement", `interceptor "auth"`,
			"Security-class interceptors must be enforced by the Gateway")
	})

	It("refuses an interceptor timeout out of bounds", func() {
		p := minimalPolicy(newNamespace())
		p.Spec.Interceptors[3].Timeout = &metav1.Duration{Duration: 2 * time.Minute}
		rejected(admin.Create(ctx, p), "spec.interceptors[3].timeout", `interceptor "audit"`, "between 1ms and 1m0s")
	})

	It("accepts tools served by declared tool servers", func() {
		p := minimalPolicy(newNamespace())
		p.Spec.ToolServers = []v1.ToolServer{{Name: "tickets", Service: &v1.ServiceReference{Name: "tickets"}}}
		p.Spec.Tools = append(p.Spec.Tools,
			v1.Tool{Name: "ticket.create", Risk: v1.RiskMedium, Effect: v1.EffectExternal, Server: "tickets"},
			v1.Tool{Name: "ticket.diff", Risk: v1.RiskLow, Effect: v1.EffectNone, Server: "tickets", Preview: true})
		Expect(admin.Create(ctx, p)).To(Succeed())
	})

	It("resolves equal priorities by registration order, deterministically", func() {
		ns := newNamespace()
		a := minimalPolicy(ns)
		a.Name = "a"
		a.Spec.Interceptors = append(a.Spec.Interceptors,
			v1.Interceptor{Name: "trace", Class: v1.ClassObservability, Phase: v1.InterceptorPost, Priority: 95, OnError: v1.PostureAllow,
				Enforcement: v1.EnforcementAgent},
			v1.Interceptor{Name: "metrics", Class: v1.ClassObservability, Phase: v1.InterceptorPost, Priority: 95, OnError: v1.PostureAllow,
				Enforcement: v1.EnforcementAgent})
		b := a.DeepCopy()
		b.Name = "b"
		n := len(b.Spec.Interceptors)
		b.Spec.Interceptors[n-2], b.Spec.Interceptors[n-1] = b.Spec.Interceptors[n-1], b.Spec.Interceptors[n-2]
		Expect(admin.Create(ctx, a)).To(Succeed())
		Expect(admin.Create(ctx, b)).To(Succeed())
		tail := func(name string) []string {
			p := &v1.RuntimePolicy{}
			Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)).To(Succeed())
			var out []string
			for _, r := range p.Status.ResolvedChain {
				out = append(out, r.Name)
			}
			if len(out) < 2 {
				return nil
			}
			return out[len(out)-2:]
		}
		Eventually(func() []string { return tail("a") }, timeout, interval).Should(Equal([]string{"trace", "metrics"}))
		Eventually(func() []string { return tail("b") }, timeout, interval).Should(Equal([]string{"metrics", "trace"}))
	})
})

var _ = Describe("ResearchRun admission", func() {
	var ns string
	BeforeEach(func() { ns = setup() })

	It("accepts a run within the policy", func() {
		Expect(admin.Create(ctx, newRun(ns, "ok"))).To(Succeed())
	})

	DescribeTable("rejects a run with a clear error naming the field and the rule",
		func(mutate func(*v1.ResearchRun), parts ...string) {
			run := newRun(ns, "bad")
			mutate(run)
			rejected(admin.Create(ctx, run), parts...)
		},
		Entry("missing session", func(r *v1.ResearchRun) { r.Spec.SessionRef.Name = "nope" }, "spec.sessionRef.name", "Session does not exist"),
		Entry("budget above the policy cap", func(r *v1.ResearchRun) { r.Spec.Budget.ModelRequests = 500 }, "spec.budget.modelRequests", "maxModelRequests"),
		Entry("gates above the policy cap", func(r *v1.ResearchRun) { r.Spec.Gates.MaxSteps = 80 }, "spec.gates.maxSteps", "maxSteps"),
		Entry("reserve not smaller than the budget", func(r *v1.ResearchRun) { r.Spec.Budget.OutputReserve.ModelRequests = 10 },
			"spec.budget.outputReserve.modelRequests", "must be smaller"),
		Entry("a cost reserve with no cost budget", func(r *v1.ResearchRun) { r.Spec.Budget.OutputReserve.Cost = 500_000 },
			"spec.budget.cost", "needs a cost budget"),
		Entry("a cost reserve not smaller than the cost budget", func(r *v1.ResearchRun) {
			r.Spec.Budget.Cost = new(v1.Money(1_000_000))
			r.Spec.Budget.OutputReserve.Cost = 1_000_000
		}, "spec.budget.outputReserve.cost", "must be smaller than spec.budget.cost (1.00)"),
		Entry("a cost budget under a policy without prices", func(r *v1.ResearchRun) { r.Spec.Budget.Cost = new(v1.Money(1_000_000)) },
			"spec.budget.cost", "names no currency (spec.currency), so a run under it cannot budget cost"),
		Entry("no container", func(r *v1.ResearchRun) { r.Spec.Template.Spec.Containers = nil },
			"spec.template.spec.containers", "at least one container"),
		Entry("a privileged container", func(r *v1.ResearchRun) {
			r.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		}, "privileged", "restricted Pod Security Standard"),
	)

	It("admits a cost budget under a policy naming its currency, and keeps it immutable", func() {
		p := &v1.RuntimePolicy{}
		Eventually(func() error {
			if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p); err != nil {
				return err
			}
			p.Spec.Currency = "USD"
			return admin.Update(ctx, p)
		}, timeout, interval).Should(Succeed())
		run := newRun(ns, "costly")
		run.Spec.Budget.Cost = new(v1.Money(5_000_000))
		run.Spec.Budget.OutputReserve.Cost = 500_000
		Expect(admin.Create(ctx, run)).To(Succeed())
		// The operator writes the run's status meanwhile: retry on conflicts.
		Eventually(func(g Gomega) {
			cur := &v1.ResearchRun{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
			cur.Spec.Budget.Cost = new(v1.Money(9_000_000))
			g.Expect(admin.Update(ctx, cur)).To(MatchError(And(ContainSubstring("spec.budget.cost"),
				ContainSubstring("is immutable after creation"))))
		}, timeout, interval).Should(Succeed())

		Eventually(func() error {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			p.Spec.Limits.MaxCost = new(v1.Money(2_000_000))
			return admin.Update(ctx, p)
		}, timeout, interval).Should(Succeed())
		over := newRun(ns, "over")
		over.Spec.Budget.Cost = new(v1.Money(2_000_001))
		rejected(admin.Create(ctx, over), "spec.budget.cost", `exceeds the RuntimePolicy "p" limit maxCost (2.00)`)
		rejected(admin.Create(ctx, newRun(ns, "unbudgeted")), "spec.budget.cost", `RuntimePolicy "p" caps cost (maxCost 2.00), so the run must budget it`)
	})

	It("rejects a misspelt field in the pod template instead of dropping it", func() {
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(fmt.Sprintf(`
apiVersion: agentrun.dev/v1alpha1
kind: ResearchRun
metadata: {name: typo, namespace: %s}
spec:
  sessionRef: {name: s}
  goal: g
  template: {spec: {containers: [{name: agent, image: a, imagePullPolcy: Always}]}}
  budget: {modelRequests: 10, toolCalls: 5}
`, ns)), &u.Object)).To(Succeed())
		rejected(admin.Create(ctx, u), "spec.template", "imagePullPolcy")
	})

	It("keeps the pod template immutable by meaning, not bytes", func() {
		run := newRun(ns, "imm")
		Expect(admin.Create(ctx, run)).To(Succeed())
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &v1.ResearchRun{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(run), cur)).To(Succeed())
			cur.Spec.Template.Spec.Containers[0].Image = "other"
			return admin.Update(ctx, cur)
		})).To(MatchError(ContainSubstring("spec.template: Forbidden: is immutable")))
	})

	It("stamps an approval with the impersonated approver and refuses a forged one", func() {
		run := newRun(ns, "appr")
		Expect(admin.Create(ctx, run)).To(Succeed())
		alice := as("alice", "system:masters")
		patch := []byte(`{"spec":{"approvals":[{"actionID":"publish-1","decision":"Approve","comment":"ship it"}]}}`)
		Expect(alice.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
		got := &v1.ResearchRun{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(run), got)).To(Succeed())
		Expect(got.Spec.Approvals).To(HaveLen(1))
		Expect(got.Spec.Approvals[0].Approver).To(Equal("alice"))
		Expect(got.Spec.Approvals[0].Time).NotTo(BeNil())

		forged := []byte(`{"spec":{"approvals":[{"actionID":"publish-1","decision":"Approve","comment":"ship it","approver":"alice","time":"` +
			got.Spec.Approvals[0].Time.UTC().Format("2006-01-02T15:04:05Z") + `"},{"actionID":"publish-2","decision":"Approve","approver":"the-ceo"}]}}`)
		rejected(alice.Patch(ctx, run, client.RawPatch(types.MergePatchType, forged)), "spec.approvals[1].approver", "the-ceo")

		backdated := []byte(`[{"op":"add","path":"/spec/approvals/-","value":{"actionID":"publish-3","decision":"Approve",` +
			`"approver":"alice","time":"2020-01-01T00:00:00Z"}}]`)
		rejected(alice.Patch(ctx, run, client.RawPatch(types.JSONPatchType, backdated)), "spec.approvals[1].time", "not the time of this request")

		// JSON-patch append works from the first approval on (approvals defaults to []).
		fresh := newRun(ns, "appr-json")
		Expect(admin.Create(ctx, fresh)).To(Succeed())
		appendOne := []byte(`[{"op":"add","path":"/spec/approvals/-","value":{"actionID":"a-1","decision":"Deny"}}]`)
		Expect(alice.Patch(ctx, fresh, client.RawPatch(types.JSONPatchType, appendOne))).To(Succeed())
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(fresh), got)).To(Succeed())
		Expect(got.Spec.Approvals).To(ConsistOf(HaveField("Approver", "alice")))
	})
})

// warningRecorder keeps the admission warnings a client was sent.
type warningRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

var _ = Describe("Approval admission", func() {
	It("admits a decision that changes nothing, with a warning saying so", func() {
		ns := setup()
		run := newRun(ns, "gated")
		Expect(admin.Create(ctx, run)).To(Succeed())

		By("the gateway lists a call that waits, and the operator mirrors it on the run")
		gatewayCfg, err := testEnv.AddUser(envtestUser(gatewayUser), adminConfig)
		Expect(err).NotTo(HaveOccurred())
		gateway, err := client.New(gatewayCfg.Config(), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			ra := &v1.RunAttempt{}
			if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gated-1"}, ra); err != nil {
				return err
			}
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			expires := metav1.NewTime(now.Add(15 * time.Minute))
			ra.Status.AwaitingApproval = []v1.ApprovalRequest{{ActionID: "a1", Tool: "report.publish", Risk: v1.RiskHigh,
				RequestedAt: &now, ExpiresAt: &expires}}
			return gateway.Status().Update(ctx, ra)
		}, timeout, interval).Should(Succeed())
		Eventually(func() []v1.ApprovalRequest { return runOf(ns, "gated").Status.PendingApprovals }, timeout, interval).Should(
			ConsistOf(HaveField("ActionID", "a1")))

		warnings := &warningRecorder{}
		cfg := rest.CopyConfig(adminConfig)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:masters", "system:authenticated"}}
		cfg.WarningHandler = warnings
		alice, err := client.New(cfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		appendOne := func(id string) {
			GinkgoHelper()
			patch := []byte(fmt.Sprintf(`[{"op":"add","path":"/spec/approvals/-","value":{"actionID":%q,"decision":"Approve"}}]`, id))
			Expect(alice.Patch(ctx, run, client.RawPatch(types.JSONPatchType, patch))).To(Succeed())
		}

		By("a decision for the waiting call: admitted, stamped, no warning")
		appendOne("a1")
		Expect(warnings.take()).To(BeEmpty())

		By("a decision for a call nothing waits on: admitted, stamped, with a warning")
		appendOne("zz")
		Expect(warnings.take()).To(ConsistOf(
			"approval of zz changes nothing: no call of this run waits on it (already dispatched, refused or expired)"))
		got := runOf(ns, "gated")
		Expect(got.Spec.Approvals).To(HaveExactElements(
			And(HaveField("ActionID", "a1"), HaveField("Approver", "alice"), HaveField("Time", Not(BeNil()))),
			And(HaveField("ActionID", "zz"), HaveField("Approver", "alice"), HaveField("Time", Not(BeNil())))))
	})
})

var _ = Describe("Session admission", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		Expect(admin.Create(ctx, minimalPolicy(ns))).To(Succeed())
	})

	It("audits a mode switch with the requester's name, and refuses one without a reason or above the ceiling", func() {
		s := newSession(ns, "s")
		s.Spec.Mode = v1.ModePlan
		Expect(admin.Create(ctx, s)).To(Succeed())
		bob := as("bob", "system:masters")

		noReason := []byte(`{"spec":{"mode":"Edit"}}`)
		rejected(bob.Patch(ctx, s, client.RawPatch(types.MergePatchType, noReason)), "modeChangeReason", "requires")

		aboveCeiling := []byte(`{"spec":{"mode":"Full","modeChangeReason":"need everything"}}`)
		rejected(bob.Patch(ctx, s, client.RawPatch(types.MergePatchType, aboveCeiling)), "spec.mode", "maxMode Auto")

		ok := []byte(`{"spec":{"mode":"Edit","modeChangeReason":"drafting the report"}}`)
		Expect(bob.Patch(ctx, s, client.RawPatch(types.MergePatchType, ok))).To(Succeed())
		Eventually(func(g Gomega) {
			got := &v1.Session{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
			g.Expect(got.Status.ModeHistory).NotTo(BeEmpty())
			last := got.Status.ModeHistory[len(got.Status.ModeHistory)-1]
			g.Expect(last.By).To(Equal("bob"))
			g.Expect(last.From).To(Equal(v1.ModePlan))
			g.Expect(last.To).To(Equal(v1.ModeEdit))
			g.Expect(last.Reason).To(Equal("drafting the report"))
			g.Expect(got.Status.Mode).To(Equal(v1.ModeEdit))
		}, timeout, interval).Should(Succeed())

		forge := []byte(`{"metadata":{"annotations":{"agentrun.dev/mode-change":"{\"to\":\"Full\",\"by\":\"the-ceo\"}"}}}`)
		rejected(bob.Patch(ctx, s, client.RawPatch(types.MergePatchType, forge)), "agentrun.dev/mode-change", "stamped by the admission webhook")
	})

	It("strips a mode-change stamp forged at creation, and refuses removing the mode", func() {
		s := newSession(ns, "forger")
		s.Annotations = map[string]string{v1.AnnotationModeChange: `{"to":"Full","by":"the-ceo","time":"2020-01-01T00:00:00Z"}`}
		Expect(admin.Create(ctx, s)).To(Succeed())
		got := &v1.Session{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		Expect(got.Annotations).NotTo(HaveKey(v1.AnnotationModeChange))

		moded := newSession(ns, "moded")
		moded.Spec.Mode = v1.ModeEdit
		Expect(admin.Create(ctx, moded)).To(Succeed())
		rejected(admin.Patch(ctx, moded, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/mode"}]`))),
			"spec.mode", "cannot be removed once set")
	})

	It("refuses a queue timeout of 0 (none) when the policy bounds timeouts", func() {
		p := &v1.RuntimePolicy{}
		Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "p"}, p)).To(Succeed())
		Expect(p.Spec.Queue.MaxTimeout).NotTo(BeNil(), "the CRD defaults queue.maxTimeout")
		s := newSession(ns, "forever")
		s.Spec.Queue.Timeout = &metav1.Duration{}
		rejected(admin.Create(ctx, s), "spec.queue.timeout", "must be positive")
	})

	It("refuses a session whose policy does not exist", func() {
		s := newSession(ns, "orphan")
		s.Spec.PolicyRef.Name = "missing"
		rejected(admin.Create(ctx, s), "spec.policyRef.name", "RuntimePolicy does not exist")
	})
})

// tokenConfig returns a rest.Config authenticated by a token of the runner
// service account, bound to pod (or to nothing when pod is nil).
func tokenConfig(ns string, pod *corev1.Pod) *rest.Config {
	GinkgoHelper()
	cfg := rest.AnonymousClientConfig(adminConfig)
	cfg.BearerToken = podToken(ns, pod)
	return cfg
}

// podToken is a token of the runner service account, bound to pod when it
// is set, for the audiences given (none: the API server's own).
func podToken(ns string, pod *corev1.Pod, audiences ...string) string {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(adminConfig)
	Expect(err).NotTo(HaveOccurred())
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600), Audiences: audiences}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	var tr *authenticationv1.TokenRequest
	Eventually(func() (err error) { // the operator creates the account with the first attempt
		tr, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agentrun-runner", req, metav1.CreateOptions{})
		return err
	}, timeout, interval).Should(Succeed())
	return tr.Status.Token
}

// token returns a client authenticated like tokenConfig.
func token(ns string, pod *corev1.Pod) client.Client {
	GinkgoHelper()
	c, err := client.New(tokenConfig(ns, pod), client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

var _ = Describe("Authority over state", func() {
	It("lets exactly the allowed identities write each part of the state", func() {
		ns := setup()
		// A second session so two attempts (two pods) exist at once.
		Expect(admin.Create(ctx, newSession(ns, "s2"))).To(Succeed())
		mine, other := newRun(ns, "mine"), newRun(ns, "other")
		other.Spec.SessionRef.Name = "s2"
		Expect(admin.Create(ctx, mine)).To(Succeed())
		Expect(admin.Create(ctx, other)).To(Succeed())

		podOf := func(run string) *corev1.Pod {
			pod := &corev1.Pod{}
			Eventually(func(g Gomega) {
				g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: run + "-1"}, pod)).To(Succeed())
				ra := &v1.RunAttempt{}
				g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: run + "-1"}, ra)).To(Succeed())
				g.Expect(ra.Spec.PodUID).To(Equal(string(pod.UID)))
			}, timeout, interval).Should(Succeed())
			return pod
		}
		myPod, otherPod := podOf("mine"), podOf("other")

		operatorCfg, err := testEnv.AddUser(envtestUser(operatorUser), adminConfig)
		Expect(err).NotTo(HaveOccurred())
		operatorClient, err := client.New(operatorCfg.Config(), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())

		gatewayCfg, err := testEnv.AddUser(envtestUser(gatewayUser), adminConfig)
		Expect(err).NotTo(HaveOccurred())
		gatewayClient, err := client.New(gatewayCfg.Config(), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		gatewayAudience := rest.AnonymousClientConfig(adminConfig)
		gatewayAudience.BearerToken = podToken(ns, myPod, "agentrun-gateway")
		gatewayTokenClient, err := client.New(gatewayAudience, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())

		// Attempt pods get no API-server token at all; these rows show that
		// even a token someone minted for the pod could not write facts.
		creds := map[string]client.Client{
			"own pod token":       token(ns, myPod),
			"other pod token":     token(ns, otherPod),
			"unbound SA token":    token(ns, nil),
			"pod's gateway token": gatewayTokenClient,
			"ordinary user":       as("mallory", "system:masters"),
			"operator":            operatorClient,
			"gateway":             gatewayClient,
		}
		writes := map[string]func(c client.Client) error{
			"RunAttempt status": func(c client.Client) error {
				ra := &v1.RunAttempt{}
				if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "mine-1"}, ra); err != nil {
					return err
				}
				ra.Status.Steps++
				return c.Status().Update(ctx, ra)
			},
			"RunAttempt spec": func(c client.Client) error {
				ra := &v1.RunAttempt{}
				if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "mine-1"}, ra); err != nil {
					return err
				}
				ra.Spec.Grant.ModelRequests = 1000
				return c.Update(ctx, ra)
			},
			"ResearchRun status": func(c client.Client) error {
				run := &v1.ResearchRun{}
				if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "mine"}, run); err != nil {
					return err
				}
				run.Status.Message = "forged"
				return c.Status().Update(ctx, run)
			},
			"Session status": func(c client.Client) error {
				s := &v1.Session{}
				if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "s"}, s); err != nil {
					return err
				}
				s.Status.ActiveRun = "forged"
				return c.Status().Update(ctx, s)
			},
			"RuntimePolicy status": func(c client.Client) error {
				// A dry run decides exactly as the write would, and keeps the status.
				p := &v1.RuntimePolicy{}
				if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "p"}, p); err != nil {
					return err
				}
				for i := range p.Status.ResolvedChain {
					p.Status.ResolvedChain[i].OnError = v1.PostureAllow
				}
				return c.Status().Update(ctx, p, client.DryRunAll)
			},
			"RunAttempt delete": func(c client.Client) error {
				// A dry run decides exactly as a delete would, and keeps the attempt.
				ra := &v1.RunAttempt{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine-1"}}
				return c.Delete(ctx, ra, client.DryRunAll)
			},
		}
		writes["report ConfigMap"] = func(c client.Client) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine-report",
				Labels: map[string]string{v1.LabelRun: "mine"}}}
			return c.Create(ctx, cm, client.DryRunAll)
		}
		writes["another run's report name"] = func(c client.Client) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-report",
				Labels: map[string]string{v1.LabelRun: "mine"}}}
			return c.Create(ctx, cm, client.DryRunAll)
		}
		writes["other ConfigMap"] = func(c client.Client) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings",
				Labels: map[string]string{v1.LabelRun: "mine"}}}
			return c.Create(ctx, cm, client.DryRunAll)
		}
		allowed := map[string]map[string]bool{
			"operator": {"RunAttempt status": true, "RunAttempt spec": true, "ResearchRun status": true, "RunAttempt delete": true, "RuntimePolicy status": true,
				"Session status": true, "report ConfigMap": true, "other ConfigMap": true, "another run's report name": true},
			"gateway":       {"RunAttempt status": true, "report ConfigMap": true},
			"ordinary user": {"report ConfigMap": true, "other ConfigMap": true, "another run's report name": true},
		}
		for who, c := range creds {
			for what, write := range writes {
				var err error
				for range 5 { // conflicts with the operator's own writes are retried
					if err = write(c); !apierrors.IsConflict(err) {
						break
					}
				}
				if allowed[who][what] {
					Expect(err).NotTo(HaveOccurred(), "%s must be able to write %s", who, what)
				} else {
					Expect(err).To(HaveOccurred(), "%s must not be able to write %s", who, what)
					Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsUnauthorized(err)).To(BeTrue(),
						"%s writing %s: %v", who, what, err)
				}
			}
		}
	})
})

var _ = Describe("RuntimePolicy status authority", func() {
	It("refuses a status patch that turns a Security interceptor fail-open, from anyone but the operator", func() {
		ns := setup()
		p := &v1.RuntimePolicy{}
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "p"}, p)).To(Succeed())
			g.Expect(p.Status.ResolvedChain).To(ContainElement(HaveField("Name", "redact")))
		}, timeout, interval).Should(Succeed())
		forged := p.DeepCopy()
		for i := range forged.Status.ResolvedChain {
			if forged.Status.ResolvedChain[i].Class == v1.ClassSecurity {
				forged.Status.ResolvedChain[i].OnError = v1.PostureAllow
			}
		}
		// A user whom RBAC allows everything (system:masters) is refused by
		// the admission policy, naming the rule.
		err := as("alice", "system:masters").Status().Patch(ctx, forged, client.MergeFrom(p))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		rejected(err, "runtimepolicy-status-authority",
			"RuntimePolicy status (the resolved interceptor chain, Valid) is written only by the agentrun operator; alice may not write it")
		got := &v1.RuntimePolicy{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
		Expect(got.Status.ResolvedChain).To(Equal(p.Status.ResolvedChain), "the refused patch changed nothing")
	})
})

func envtestUser(name string) envtest.User {
	return envtest.User{Name: name, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
}
