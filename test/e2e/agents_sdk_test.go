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
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// sdkAgent is an agent's command and the name its SDK offers the model a
// tool of the MCP door under.
type sdkAgent struct {
	command []string
	fn      func(tool string) string
}

// conversationModel plays the model of an unmodified agent, which sends no
// scripted turn of its own: each story's conversation (by URL prefix,
// /<story>/v1) answers turn i to a request whose messages hold i assistant
// turns, carried to the scripted upstream as its agentrun_scripted field.
// Past the script it answers the last turn again. It keeps every request.
type conversationModel struct {
	srv  *httptest.Server
	up   upstream.Server
	mu   sync.Mutex
	turn map[string][]upstream.Turn
	seen map[string][]modelRequest
}

// modelRequest is what the gateway forwarded: the tools it offered and the messages.
type modelRequest struct {
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
}

func (r modelRequest) toolNames() []string {
	out := []string{}
	for _, t := range r.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

func newConversationModel() *conversationModel {
	m := &conversationModel{turn: map[string][]upstream.Turn{}, seen: map[string][]modelRequest{}}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	return m
}

// script sets story's conversation; url is the base URL a policy's model names.
func (m *conversationModel) script(story string, turns ...upstream.Turn) (url string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.turn[story] = turns
	return m.srv.URL + "/" + story + "/v1"
}

func (m *conversationModel) requests(story string) []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelRequest(nil), m.seen[story]...)
}

func (m *conversationModel) serve(w http.ResponseWriter, r *http.Request) {
	story, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	body, _ := io.ReadAll(r.Body)
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/chat/completions") {
		var req modelRequest
		var raw map[string]any
		if json.Unmarshal(body, &req) != nil || json.Unmarshal(body, &raw) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		assistant := 0
		for _, msg := range req.Messages {
			if msg.Role == "assistant" {
				assistant++
			}
		}
		m.mu.Lock()
		m.seen[story] = append(m.seen[story], req)
		turns := m.turn[story]
		m.mu.Unlock()
		if len(turns) > 0 {
			raw[upstream.ScriptField] = turns[min(assistant, len(turns)-1)]
			body, _ = json.Marshal(raw)
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	m.up.ServeHTTP(w, r)
}

// An agent on @openai/agents (examples/openai-agents-ts) as the attempt
// pod: its model is the SDK's default, the gateway's Responses door
// (translated to the conversation model's Chat Completions), its tools the
// gateway's MCP door, where the built-ins (notes.write, report.publish) and a
// fake agentrun-tools process (ticket.lookup, ticket.create) are served.
var _ = Describe("An agent on @openai/agents", Ordered, Label("clients", "mcp"), func() {
	var (
		model    *conversationModel
		toolsURL string
		callsURL string
	)

	BeforeAll(func() {
		By("installing the clients' pinned dependencies (hack/test-clients.sh --setup)")
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "test-clients.sh"), "--setup")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
		Expect(cmd.Run()).To(Succeed())

		By("starting a fake agentrun-tools: ticket.lookup answers, ticket.create hangs")
		toolsURL, callsURL = startFakeTools("agents-sdk", `tools:
- name: ticket.lookup
  description: Look a ticket up.
  inputSchema: {type: object, properties: {id: {type: string}}, required: [id]}
  behavior: {result: "T-1: open, disk full on node-3"}
- name: ticket.create
  description: Open a ticket in the tracker.
  inputSchema: {type: object, properties: {title: {type: string}}, required: [title]}
  behavior: {hang: true}
`)

		model = newConversationModel()
		DeferCleanup(model.srv.Close)
	})

	// sdkWorld serves model "scripted" as story's conversation, the built-ins
	// and the fake's two tools (its calls time out after 2 s). Medium-risk
	// writes are auto-approved in Auto mode.
	sdkWorld := func(story string, turns []upstream.Turn, mutate func(*v1.RuntimePolicy)) *world {
		url := model.script(story, turns...)
		return newWorld(func(p *v1.RuntimePolicy) {
			p.Spec.Models = []v1.Model{{Name: "scripted", BaseURL: url}}
			p.Spec.ToolServers = []v1.ToolServer{{Name: "fake", URL: toolsURL, Timeout: &metav1.Duration{Duration: 2 * time.Second}}}
			p.Spec.Tools = []v1.Tool{
				{Name: "notes.write", Risk: v1.RiskLow, Effect: v1.EffectWrite, Idempotent: true},
				{Name: "report.publish", Risk: v1.RiskMedium, Effect: v1.EffectExternal},
				{Name: "ticket.lookup", Server: "fake", Risk: v1.RiskLow, Effect: v1.EffectNone},
				{Name: "ticket.create", Server: "fake", Risk: v1.RiskMedium, Effect: v1.EffectExternal},
			}
			p.Spec.AutoApprove = []string{"notes.write", "report.publish", "ticket.create"}
			if mutate != nil {
				mutate(p)
			}
		})
	}
	// agentRun runs `node examples/openai-agents-ts/agent.mjs` as the agent
	// container (a host process of the local node), one attempt.
	agentRun := func(w *world, name string, mutate func(*v1.ResearchRun)) {
		w.run(name, imageShell, nil, func(r *v1.ResearchRun) {
			r.Spec.Goal = "Find out why node-3 is failing and write it up."
			c := &r.Spec.Template.Spec.Containers[0]
			c.Command = []string{"node", filepath.Join(root, "examples", "openai-agents-ts", "agent.mjs")}
			c.Env = []corev1.EnvVar{{Name: "AGENTRUN_MODEL", Value: "scripted"}, {Name: "AGENTRUN_MAX_TURNS", Value: "8"}}
			r.Spec.Recovery = v1.Recovery{MaxAttempts: 1, Backoff: &metav1.Duration{}}
			if mutate != nil {
				mutate(r)
			}
		})
	}
	logs := podLogs
	fakeCalls := func(tool string) toolserver.CallsReport {
		GinkgoHelper()
		resp, err := http.Get(callsURL + "?tool=" + tool)
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		var rep toolserver.CallsReport
		Expect(json.NewDecoder(resp.Body).Decode(&rep)).To(Succeed())
		return rep
	}
	call := func(id, name string, args map[string]any) upstream.Turn {
		return upstream.Turn{Tools: []upstream.ToolCall{{ID: id, Name: name, Arguments: args}}, Tokens: 60}
	}
	say := func(text string) upstream.Turn { return upstream.Turn{Say: text, Tokens: 40} }
	toolMessages := func(reqs []modelRequest) []string {
		var out []string
		for _, msg := range reqs[len(reqs)-1].Messages {
			if msg.Role == "tool" {
				out = append(out, fmt.Sprint(msg.Content))
			}
		}
		return out
	}

	// The same stories for @openai/agents (TypeScript) and openai-agents
	// (Python), each in its default mode: the Responses API. The TypeScript
	// SDK offers the MCP door's tools to the model under _ names
	// (notes_write), the Python SDK under their own (notes.write).
	// (Functions: root is known once the suite started.)
	tsAgent := func() sdkAgent {
		return sdkAgent{[]string{"node", filepath.Join(root, "examples", "openai-agents-ts", "agent.mjs")},
			func(tool string) string { return strings.ReplaceAll(tool, ".", "_") }}
	}
	pyAgent := func() sdkAgent {
		return sdkAgent{[]string{filepath.Join(root, "bin", "venv", "bin", "python"),
			filepath.Join(root, "examples", "openai-python", "agents_sdk.py")}, func(tool string) string { return tool }}
	}
	command := func(cmd []string) func(*v1.ResearchRun) {
		return func(r *v1.ResearchRun) { r.Spec.Template.Spec.Containers[0].Command = cmd }
	}

	completeStory := func(story string, agent sdkAgent) {
		const finding = "node-3's disk is full: the log volume was never rotated."
		name := "sdk-" + story
		w := sdkWorld(story, []upstream.Turn{
			call("call_1", agent.fn("notes.write"), map[string]any{"section": "Findings", "text": finding}),
			call("call_2", agent.fn("report.publish"), map[string]any{"section": "Findings", "content": "## Why node-3 fails\n\n" + finding}),
			say("node-3 fails because its disk is full; the report says why."),
		}, nil)
		agentRun(w, name, command(agent.command))

		// The agent calls nothing of the agent API: its exit 0 is the finish,
		// and the operator settles from what report.publish published.
		run := w.terminated(name, v1.ReasonCompleted, v1.SettlementComplete)
		Expect(run.Status.Message).To(ContainSubstring("exited 0 after"), run.Status.Message)
		Expect(run.Status.Message).To(ContainSubstring("an implicit finish"), run.Status.Message)
		Expect(run.Status.Message).To(ContainSubstring("the agent exited 0 without settling; settled from what the gateway published: 1/1 sections"))
		Expect(apimeta.IsStatusConditionTrue(run.Status.Conditions, v1.ConditionSucceeded)).To(BeTrue())
		Expect(w.attempts(name)).To(Equal([]int{1}))
		out := logs(w, name)
		Expect(out).To(ContainSubstring(`agent: tools ["notes.write","report.publish","ticket.lookup","ticket.create"]`))
		Expect(out).To(ContainSubstring("node-3 fails because its disk is full"))
		Expect(out).NotTo(ContainSubstring("agent: settled"))

		cm := w.report(name)
		Expect(cm).NotTo(BeNil())
		Expect(w.sections(name)).To(HaveLen(1))
		Expect(cm.Data[w.sections(name)[0]]).To(ContainSubstring(finding))
		Expect(cm.Data).To(HaveKeyWithValue("notes.jsonl", ContainSubstring(finding)))

		// The model was offered the door's tools under the SDK's _ names; the
		// gateway saw the dotted ones, and counted two tool calls.
		reqs := model.requests(story)
		Expect(reqs).To(HaveLen(3))
		Expect(reqs[0].toolNames()).To(ConsistOf(agent.fn("notes.write"), agent.fn("report.publish"), agent.fn("ticket.lookup"), agent.fn("ticket.create")))
		Expect(toolMessages(reqs)).To(HaveExactElements(ContainSubstring("noted (1 notes)"), ContainSubstring(`published section "Findings"`)))
		w.factsSettled(name, 1)
		ra := w.attempt(name, 1)
		Expect(ra.Status.Usage.ToolCalls).To(BeEquivalentTo(2))
		Expect(ra.Status.Usage.ModelRequests).To(BeEquivalentTo(3))
		Expect(ra.Status.InFlight).To(BeEmpty())
		Expect(ra.Status.FinishProposed).To(BeFalse(), "the agent never proposed finish")
		Expect(ra.Status.Publication.Settled).To(BeFalse(), "nor settled")
		// The run was judged on the gateway's last facts (its coalesced usage
		// lands within a flush interval of the exit): the ledger is complete.
		Expect(run.Status.Budget.Used).To(Equal(ra.Status.Usage))
	}
	It("@openai/agents completes a run: notes.write and report.publish through the MCP door, in Auto mode", func() {
		completeStory("complete", tsAgent())
	})
	It("openai-agents (Python) completes a run: notes.write and report.publish through the MCP door, in Auto mode", func() {
		completeStory("py-complete", pyAgent())
	})

	// The working grant is two model requests; the script is longer, and
	// only publishes (while Finalizing the MCP door lists report.publish
	// alone), a new version of the section each turn. The agent is refused
	// 429 grant_exhausted, waits for Finalizing and runs once more from the
	// reserve (a new conversation: the script starts over) — or, when the
	// operator finalized first, goes on from the reserve — until 429
	// reserve_exhausted, and exits 0.
	overspendStory := func(story string, agent sdkAgent) {
		name := "sdk-" + story
		var turns []upstream.Turn
		for i := range 5 {
			turns = append(turns, call(fmt.Sprintf("call_%d", i), agent.fn("report.publish"),
				map[string]any{"section": "Findings", "content": fmt.Sprintf("node-3's disk is full (draft %d).", i)}))
		}
		w := sdkWorld(story, turns, nil)
		budget := v1.Budget{ModelRequests: 4, ToolCalls: 10, OutputReserve: v1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
			Deadline: &metav1.Duration{Duration: 5 * time.Minute}}
		agentRun(w, name, func(r *v1.ResearchRun) { command(agent.command)(r); r.Spec.Budget = budget })

		run := w.eventually(name, v1.PhaseTerminated, "")
		Expect(run.Status.Reason).To(Equal(v1.ReasonBudgetExhausted), "message: %s", run.Status.Message)
		Expect(run.Status.Settlement).To(BeElementOf(v1.SettlementPartial, v1.SettlementComplete))
		Expect(w.phaseSequence(name)).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		Expect(w.when(name, v1.PhaseFinalizing).Status.Budget.Used.ModelRequests).To(BeEquivalentTo(2))
		Expect(logs(w, name)).To(ContainSubstring("the output reserve is used up"))
		// Served: the working grant and the whole reserve, nothing beyond.
		w.factsSettled(name, 1)
		Expect(w.attemptUsage(name).ModelRequests).To(BeEquivalentTo(budget.ModelRequests))
		Expect(model.requests(story)).To(HaveLen(int(budget.ModelRequests)))
		Expect(w.sections(name)).To(HaveLen(1))
	}
	It("@openai/agents is refused at the grant and finalizes from the reserve: BudgetExhausted", func() {
		overspendStory("overspend", tsAgent())
	})
	It("openai-agents (Python) is refused at the grant and finalizes from the reserve: BudgetExhausted", func() {
		overspendStory("py-overspend", pyAgent())
	})

	It("in Plan mode sees and calls only effect-None tools", func() {
		w := sdkWorld("plan", []upstream.Turn{
			call("call_1", "ticket_lookup", map[string]any{"id": "T-1"}),
			say("Plan: rotate node-3's logs, then grow its volume."),
		}, nil)
		w.newSession("plan", v1.ModePlan)
		agentRun(w, "sdk-plan", func(r *v1.ResearchRun) { r.Spec.SessionRef.Name = "plan" })

		run := w.eventually("sdk-plan", v1.PhaseTerminated, "")
		out := logs(w, "sdk-plan")
		Expect(out).To(ContainSubstring(`agent: tools ["ticket.lookup"]`))
		Expect(out).To(ContainSubstring("Plan: rotate node-3's logs"))
		for _, req := range model.requests("plan") {
			Expect(req.toolNames()).To(Equal([]string{"ticket_lookup"}), "the model is offered no write in Plan mode")
		}
		Expect(toolMessages(model.requests("plan"))).To(HaveExactElements(ContainSubstring("T-1: open")))
		Expect(fakeCalls("ticket.lookup").Total).To(Equal(1))
		Expect(w.sections("sdk-plan")).To(BeEmpty())
		Expect(run.Status.Reason).To(Equal(v1.ReasonCompleted), "message: %s", run.Status.Message)
		Expect(run.Status.Settlement).To(Equal(v1.SettlementNone), "message: %s", run.Status.Message)
		Expect(run.Status.Message).To(ContainSubstring("settled from what the gateway published: 0/0 sections"))
	})

	It("waits for an approval of its High-risk report.publish, given with kubectl patch, then publishes", func() {
		w := sdkWorld("approval", []upstream.Turn{
			call("call_1", "report_publish", map[string]any{"section": "Findings", "content": "node-3's disk is full."}),
			say("Published after approval."),
		}, func(p *v1.RuntimePolicy) {
			p.Spec.Tools[1].Risk = v1.RiskHigh
			p.Spec.AutoApprove = []string{"notes.write", "ticket.create"}
		})
		agentRun(w, "sdk-approval", nil)

		var actionID string
		Eventually(func(g Gomega) {
			run := w.get("sdk-approval")
			g.Expect(run.Status.PendingApprovals).To(HaveLen(1))
			g.Expect(run.Status.PendingApprovals[0].Tool).To(Equal("report.publish"))
			g.Expect(run.Status.PendingApprovals[0].Risk).To(Equal(v1.RiskHigh))
			c := apimeta.FindStatusCondition(run.Status.Conditions, v1.ConditionAwaitingApproval)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			actionID = run.Status.PendingApprovals[0].ActionID
		}, timeout, interval).Should(Succeed())
		Expect(w.sections("sdk-approval")).To(BeEmpty(), "nothing is published before the approval")

		By("approving " + actionID + " with kubectl patch")
		out, err := kubectl("patch", "researchrun", "sdk-approval", "-n", w.ns, "--type=merge",
			"-p", fmt.Sprintf(`{"spec":{"approvals":[{"actionID":%q,"decision":"Approve"}]}}`, actionID))
		Expect(err).NotTo(HaveOccurred(), out)

		w.terminated("sdk-approval", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(w.sections("sdk-approval")).To(HaveLen(1))
		Expect(w.report("sdk-approval").Data[w.sections("sdk-approval")[0]]).To(ContainSubstring("node-3's disk is full."))
		run := w.get("sdk-approval")
		Expect(run.Status.PendingApprovals).To(BeEmpty())
		c := apimeta.FindStatusCondition(run.Status.Conditions, v1.ConditionAwaitingApproval)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(run.Status.Message).To(ContainSubstring("settled from what the gateway published: 1/1 sections"))
		Expect(logs(w, "sdk-approval")).To(ContainSubstring("Published after approval."))
		Expect(toolMessages(model.requests("approval"))).To(HaveExactElements(ContainSubstring(`published section "Findings"`)))
	})

	It("never repeats a non-idempotent call whose tool server timed out", func() {
		args := map[string]any{"title": "node-3: disk full"}
		w := sdkWorld("unknown", []upstream.Turn{
			call("call_1", "ticket_create", args),
			call("call_2", "ticket_create", args),
			say("The ticket may or may not exist; check the tracker."),
		}, nil)
		agentRun(w, "sdk-unknown", nil)

		run := w.eventually("sdk-unknown", v1.PhaseTerminated, "")
		out := logs(w, "sdk-unknown")
		Expect(out).To(ContainSubstring("check the tracker"))

		By("the fake got ticket.create exactly once")
		Expect(fakeCalls("ticket.create").Total).To(Equal(1))
		Expect(fakeCalls("ticket.create").InFlight).To(BeZero())

		By("the model was told: first the outcome is unknown, then that it is not dispatched again")
		Expect(toolMessages(model.requests("unknown"))).To(HaveExactElements(
			And(ContainSubstring("outcome_unknown"), ContainSubstring("did not answer within 2s")),
			ContainSubstring("outcome_unknown"),
		))

		By("the RunAttempt holds the call in flight, outcome Unknown, and a Tool fault OutcomeUnknown")
		w.factsSettled("sdk-unknown", 1)
		ra := w.attempt("sdk-unknown", 1)
		Expect(ra.Status.InFlight).To(HaveLen(1))
		Expect(ra.Status.InFlight[0].Tool).To(Equal("ticket.create"))
		Expect(ra.Status.InFlight[0].Outcome).To(Equal(v1.OutcomeUnknown))
		Expect(ra.Status.InFlight[0].IdempotencyKey).To(BeEmpty())
		Expect(ra.Status.Faults).To(ContainElement(And(
			HaveField("Scope", v1.FaultScopeTool), HaveField("Kind", "OutcomeUnknown"))))

		By("the run is not replayed: one attempt, which exited 0 (an implicit finish), so it Completed (nothing published)")
		// The operator recovers (replays) only a failed attempt, and refuses
		// to when it holds an effect without an idempotency key
		// (UnsafeToRecover). This attempt did not fail: the agent heard the
		// outcome was unknown, answered and exited 0, so the run completes
		// with what was published (nothing: None), and the Unknown record
		// stays on the RunAttempt.
		Expect(w.attempts("sdk-unknown")).To(Equal([]int{1}))
		Expect(run.Status.Reason).To(Equal(v1.ReasonCompleted), "message: %s", run.Status.Message)
		Expect(run.Status.Settlement).To(Equal(v1.SettlementNone), "message: %s", run.Status.Message)
		Expect(run.Status.Message).To(ContainSubstring("an implicit finish"))
	})

})
