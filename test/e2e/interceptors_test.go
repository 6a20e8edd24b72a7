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
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
)

// The fake tool server of these stories: lookup (Low risk, no effect,
// auto-approved) is the call under test; gate.wait (High risk, asked for in
// every mode) holds the agent at an approval while the test breaks or mends
// something. Its auth runs before the wait, so what the test changes meets
// the calls after it.
const interceptorTools = `tools:
- name: lookup
  inputSchema: {type: object, properties: {q: {type: string}}, required: [q]}
- name: gate.wait
  inputSchema: {type: object, properties: {step: {type: string}}}
`

// interceptorWorld is newWorld (the sample chain: auth, rate_limit, redact,
// audit) with the fake's two tools, and the fake's GET /calls URL.
func interceptorWorld(name string, mutate ...func(*v1.RuntimePolicy)) (*world, string) {
	GinkgoHelper()
	mcpURL, callsURL := startFakeTools(name, interceptorTools)
	w := newWorld(func(p *v1.RuntimePolicy) {
		for _, m := range mutate {
			m(p)
		}
		p.Spec.ToolServers = []v1.ToolServer{{Name: "fake", URL: mcpURL}}
		p.Spec.Tools = append(p.Spec.Tools,
			v1.Tool{Name: "lookup", Server: "fake", Risk: v1.RiskLow, Effect: v1.EffectNone},
			v1.Tool{Name: "gate.wait", Server: "fake", Risk: v1.RiskHigh, Effect: v1.EffectNone})
		p.Spec.AutoApprove = append(p.Spec.AutoApprove, "lookup")
	})
	return w, callsURL
}

// Scripts of the two stories.
const (
	// Holds at an approval (TokenReviews are made to fail meanwhile), then
	// looks up twice, publishes and finishes.
	scriptAuthOutage = `
plan: [Overview]
turns:
- tools: [{name: gate.wait, args: {step: before-the-outage}}]
- tools: [{name: lookup, args: {q: during-the-outage}}]
- tools: [{name: lookup, args: {q: after-the-outage}}]
- tools: [{name: report.publish, args: {section: Overview, content: "Looked up after the outage."}}]
- finish: true
`
	// Looks up (the audit log cannot be written), holds at an approval
	// (the log is mended meanwhile), publishes and finishes.
	scriptAuditOutage = `
plan: [Overview]
turns:
- tools: [{name: lookup, args: {q: while-audit-is-down}}]
- tools: [{name: gate.wait, args: {step: audit-mended}}]
- tools: [{name: report.publish, args: {section: Overview, content: "Audited after all."}}]
- finish: true
`
)

// fakeCalls returns the fake's calls of tool, and their arguments' q.
func fakeCalls(callsURL, tool string) (int, []string) {
	GinkgoHelper()
	resp, err := http.Get(callsURL + "?tool=" + tool)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	var rep toolserver.CallsReport
	Expect(json.NewDecoder(resp.Body).Decode(&rep)).To(Succeed())
	var qs []string
	for _, c := range rep.Calls {
		var args struct {
			Q string `json:"q"`
		}
		Expect(json.Unmarshal(c.Arguments, &args)).To(Succeed())
		qs = append(qs, args.Q)
	}
	return rep.Total, qs
}

// gatewayMetric sums the samples of the gateway's metric name whose labels
// include every one of labels (name="value" pairs).
func gatewayMetric(name string, labels ...string) float64 {
	GinkgoHelper()
	return metricAt(st.GatewayMetricsURL, name, labels...)
}

// metricAt sums the samples of metric name at a metrics endpoint whose
// labels include every one of labels.
func metricAt(url, name string, labels ...string) float64 {
	GinkgoHelper()
	resp, err := http.Get(url)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		series := line[:sp]
		match := true
		for _, l := range labels {
			if !strings.Contains(series, l) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		Expect(err).NotTo(HaveOccurred(), "metric line %q", line)
		sum += v
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return sum
}

// auditLines returns the audit log's records of namespace ns (none while
// the log is not a readable file).
func auditLines(ns string) []map[string]any {
	GinkgoHelper()
	data, err := os.ReadFile(st.AuditLog)
	if err != nil {
		return nil
	}
	var out []map[string]any
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		rec := map[string]any{}
		Expect(json.Unmarshal([]byte(line), &rec)).To(Succeed(), "audit line %q", line)
		if rec["namespace"] == ns {
			out = append(out, rec)
		}
	}
	return out
}

// auditedTools is auditLines without the model requests (the chain audits
// those too).
func auditedTools(ns string) []map[string]any {
	var out []map[string]any
	for _, rec := range auditLines(ns) {
		if rec["kind"] == "Tool" {
			out = append(out, rec)
		}
	}
	return out
}

// auditedLookups returns the q of each audited lookup of namespace ns.
func auditedLookups(ns string) []string {
	var qs []string
	for _, rec := range auditLines(ns) {
		if rec["tool"] != "lookup" {
			continue
		}
		args, _ := rec["arguments"].(map[string]any)
		q, _ := args["q"].(string)
		qs = append(qs, q)
	}
	return qs
}

var _ = Describe("The policy's interceptor chain in the gateway", func() {
	BeforeEach(func() {
		Expect(st.APIFaults).NotTo(BeNil(), "the suite's stack runs the gateway behind the API fault proxy")
		Expect(st.AuditLog).NotTo(BeEmpty())
	})

	It("holds a call through a TokenReview outage, then serves it once: the agent never sees it", func() {
		w, callsURL := interceptorWorld("auth-hold")
		w.script("script", scriptAuthOutage)
		w.run("hold", imageResearchAgent, agentArgs("script"), func(r *v1.ResearchRun) {
			r.Spec.Gates.NoProgressLimit = 10
		})
		id := w.awaiting("hold", 1)
		recovered := gatewayMetric("agentrun_gateway_authority_holds_total", `result="recovered"`)
		st.APIFaults.FailNextTokenReviews(2)
		DeferCleanup(func() { st.APIFaults.FailNextTokenReviews(0) })
		w.approve("hold", id)

		run := w.terminated("hold", v1.ReasonCompleted, v1.SettlementComplete)
		total, qs := fakeCalls(callsURL, "lookup")
		Expect(total).To(Equal(2))
		Expect(qs).To(Equal([]string{"during-the-outage", "after-the-outage"}), "each call dispatched once")
		Expect(gatewayMetric("agentrun_gateway_tool_calls_total", `namespace="`+w.ns+`"`, `tool="lookup"`, `outcome="refused"`)).
			To(BeZero(), "the outage was held, not answered")
		Expect(gatewayMetric("agentrun_gateway_authority_holds_total", `result="recovered"`) - recovered).To(BeNumerically(">=", 1))
		for _, f := range w.attempt("hold", 1).Status.Faults {
			Expect(f.Kind).NotTo(Equal("InterceptorFailed"), "no refusal, no fault")
		}
		ledgerConsistent(w, run)
	})

	It("with authorityWait 0s, fails closed on a security interceptor's error: a TokenReview outage dispatches nothing, with a reason, a fault and a metric, and the agent asks again", func() {
		w, callsURL := interceptorWorld("auth-outage", func(p *v1.RuntimePolicy) {
			p.Spec.AuthorityWait = &metav1.Duration{} // answer the outage at once
		})
		w.script("script", scriptAuthOutage)
		w.run("outage", imageResearchAgent, agentArgs("script"), func(r *v1.ResearchRun) {
			r.Spec.Gates.NoProgressLimit = 10
		})
		// The agent waits at gate.wait's approval; its auth is behind it.
		id := w.awaiting("outage", 1)

		By("TokenReviews fail: the auth interceptor re-checks every tool call's token, so the next call meets the outage")
		denials := gatewayMetric("agentrun_gateway_interceptor_denials_total", `interceptor="auth"`)
		authErrors := gatewayMetric("agentrun_gateway_interceptor_calls_total", `interceptor="auth"`, `outcome="error"`)
		_, failedBefore := st.APIFaults.TokenReviews()
		// Exactly the next TokenReview fails, then they pass again: the
		// door's own cache (the suite's --token-cache-ttl=10m) needs none
		// meanwhile, so the one that fails is auth's for the next call.
		st.APIFaults.FailNextTokenReviews(1)
		DeferCleanup(func() { st.APIFaults.FailNextTokenReviews(0) })
		w.approve("outage", id)

		var fault v1.Fault
		Eventually(func(g Gomega) {
			faults := w.attempt("outage", 1).Status.Faults
			i := -1
			for j, f := range faults {
				if f.Kind == "InterceptorFailed" {
					i = j
				}
			}
			g.Expect(i).NotTo(Equal(-1), "faults: %+v", faults)
			fault = faults[i]
		}, timeout, interval).Should(Succeed())
		Expect(fault.Scope).To(Equal(v1.FaultScopeAgent))
		Expect(fault.Count).To(BeEquivalentTo(1))
		Expect(fault.Escalated).To(BeFalse(), "a refusal is a local fault")
		Expect(fault.LastMessage).To(And(
			HavePrefix("tool/lookup refused: "),
			ContainSubstring("interceptor auth (Security, fail closed) failed: "),
			ContainSubstring("TokenReview")))
		_, failed := st.APIFaults.TokenReviews()
		Expect(failed - failedBefore).To(BeEquivalentTo(1))
		Expect(gatewayMetric("agentrun_gateway_interceptor_denials_total", `interceptor="auth"`)-denials).
			To(BeEquivalentTo(1), "the denial is counted")
		Expect(gatewayMetric("agentrun_gateway_interceptor_calls_total", `interceptor="auth"`, `outcome="error"`)-authErrors).
			To(BeEquivalentTo(1), "auth's error is counted")

		By("TokenReviews pass again: the call asked again is dispatched once; the refused try never was")
		run := w.terminated("outage", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.attempts("outage")).To(Equal([]int{1}), "the refusal is not an attempt's failure")
		total, qs := fakeCalls(callsURL, "lookup")
		Expect(total).To(Equal(2))
		Expect(qs).To(Equal([]string{"during-the-outage", "after-the-outage"}), "the call met the outage, was asked again and dispatched once")
		Expect(gatewayMetric("agentrun_gateway_tool_calls_total", `namespace="`+w.ns+`"`, `tool="lookup"`, `outcome="refused"`)).
			To(BeEquivalentTo(1))
		Expect(gatewayMetric("agentrun_gateway_tool_calls_total", `namespace="`+w.ns+`"`, `tool="lookup"`, `outcome="ok"`)).
			To(BeEquivalentTo(2))
		Expect(run.Status.Gates.LocalFaults).To(BeNumerically(">=", 1))
		Expect(w.report("outage").Data).To(HaveKeyWithValue("01-overview.md", "Looked up after the outage."))
		ledgerConsistent(w, run)

		By("the agent was told why, in the tool error's words, and asked again")
		logs, err := kubectl("logs", "-n", w.ns, attemptName("outage", 1))
		Expect(err).NotTo(HaveOccurred(), logs)
		Expect(logs).To(And(ContainSubstring("interceptor auth (Security, fail closed) failed"),
			ContainSubstring("dispatched nothing for now; asking again")))
	})

	It("fails open on an observability interceptor's error: the call is served while the audit log is unwritable, and its line is resent", func() {
		w, callsURL := interceptorWorld("audit-outage")
		w.script("script", scriptAuditOutage)

		By("the audit log becomes a directory: every write fails (EISDIR)")
		// The earlier specs' lines are kept beside it.
		if err := os.Rename(st.AuditLog, st.AuditLog+".before-"+w.ns); err != nil {
			Expect(os.IsNotExist(err)).To(BeTrue(), "moving the audit log aside: %v", err)
		}
		Expect(os.Mkdir(st.AuditLog, 0o755)).To(Succeed())
		DeferCleanup(func() {
			if fi, err := os.Stat(st.AuditLog); err == nil && fi.IsDir() {
				Expect(os.Remove(st.AuditLog)).To(Succeed())
			}
		})
		w.run("unaudited", imageResearchAgent, agentArgs("script"), nil)
		// The agent waits at gate.wait's approval, after its lookup.
		id := w.awaiting("unaudited", 1)

		By("the lookup was dispatched and answered: the call never waits on audit's sink")
		total, qs := fakeCalls(callsURL, "lookup")
		Expect(total).To(Equal(1))
		Expect(qs).To(Equal([]string{"while-audit-is-down"}))
		Expect(gatewayMetric("agentrun_gateway_tool_calls_total", `namespace="`+w.ns+`"`, `tool="lookup"`, `outcome="ok"`)).
			To(BeEquivalentTo(1))
		// Audit's writer keeps the line and writes it again until the sink
		// takes it (the queue, not the call, holds it).
		Expect(auditedLookups(w.ns)).To(BeEmpty(), "nothing could be written yet")
		for _, f := range w.attempt("unaudited", 1).Status.Faults {
			Expect(f.Kind).NotTo(Equal("InterceptorRefused"), "a fail-open interceptor refuses nothing: %+v", f)
		}

		By("the audit log is a file again: the kept line is written, nothing was lost")
		Expect(os.Remove(st.AuditLog)).To(Succeed())
		Eventually(func() []string { return auditedLookups(w.ns) }, timeout, interval).
			Should(Equal([]string{"while-audit-is-down"}))
		rec := auditedTools(w.ns)[0]
		Expect(rec).To(And(HaveKeyWithValue("run", "unaudited"), HaveKeyWithValue("attempt", attemptName("unaudited", 1)),
			HaveKeyWithValue("tool", "lookup"), HaveKeyWithValue("outcome", "ok")))
		Expect(rec).NotTo(HaveKey("token"))

		w.approve("unaudited", id)
		run := w.terminated("unaudited", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.attempts("unaudited")).To(Equal([]int{1}))
		ledgerConsistent(w, run)
		// Every tool call the run made is in the log once, in order, and
		// every model request once (those the outage buffered, resent).
		Eventually(func() []string {
			var tools []string
			for _, rec := range auditedTools(w.ns) {
				tools = append(tools, rec["tool"].(string))
			}
			return tools
		}, timeout, interval).Should(Equal([]string{"lookup", "gate.wait", "report.publish"}))
		Eventually(func() int64 {
			return int64(len(auditLines(w.ns)) - len(auditedTools(w.ns)))
		}, timeout, interval).Should(Equal(run.Status.Budget.Used.ModelRequests), "one line per model request")
	})
})
