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

package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// apiClient bounds every request: a gateway that does not answer fails the
// test instead of hanging it.
var apiClient = &http.Client{Timeout: 10 * time.Second}

const (
	apiWait = 5 * time.Second
	apiPoll = 5 * time.Millisecond
)

// reply is one answer of the gateway.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// errBody is the answer's error (zero when it is not one).
func (r reply) errBody() gatewayapi.Error {
	var eb gatewayapi.ErrorBody
	_ = json.Unmarshal(r.body, &eb)
	return eb.Error
}

func (r reply) into(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer %d %s: %v", r.status, r.body, err)
	}
}

// self is the agent API path of the attempt's own resource p.
func self(p string) string { return gatewayapi.PathPrefix + "/self" + p }

// send sends body (a string is sent as it is, nil as no body, anything else
// as JSON) with token and returns the answer.
func send(t testing.TB, e *gatewaytest.Env, method, path, token string, body any) reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := apiClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: raw}
}

// as sends with the attempt's token.
func as(t testing.TB, e *gatewaytest.Env, method, path string, body any) reply {
	t.Helper()
	return send(t, e, method, path, gatewaytest.Token, body)
}

// admit reports a tool call and returns the admitted call (failing the
// test if it is refused).
func admit(t testing.TB, e *gatewaytest.Env, tool string, args map[string]any) gatewayapi.ToolCall {
	t.Helper()
	raw, _ := json.Marshal(args)
	r := as(t, e, http.MethodPost, self("/toolcalls"), gatewayapi.ToolCallRequest{Tool: tool, Arguments: raw})
	if r.status != http.StatusOK {
		t.Fatalf("tool call %s refused: %d %s", tool, r.status, r.body)
	}
	var call gatewayapi.ToolCall
	r.into(t, &call)
	return call
}

// publishApproved approves report.publish calls with these arguments each
// time one waits, as a person would.
func publishApproved(t testing.TB, e *gatewaytest.Env, args ...map[string]any) {
	var ids []string
	for _, a := range args {
		id, err := gatewayapi.ActionIDOf(gatewayapi.ToolReportPublish, a)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	e.ApproveWhenAsked(ids...)
}

// Bad input is refused with 400, naming the field at fault in error.param;
// unknown fields, malformed JSON and trailing data are refused too, and
// nothing is recorded.
func TestAgentAPIRefusesBadInputNamingTheField(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{})
	long := strings.Repeat("x", 4097)
	for _, tc := range []struct {
		method, path, body, param, says string
	}{
		{"POST", "/steps", `{"progress":"yes"}`, "progress", "must be a bool"},
		{"POST", "/steps", `{"progress":true,"extra":1}`, "extra", `unknown field "extra"`},
		{"POST", "/steps", `{"progress":`, "", "malformed JSON"},
		{"POST", "/steps", `{"progress":true} {}`, "", "trailing data"},
		{"POST", "/steps", `[true]`, "", "the body must be a JSON object, not a JSON array"},
		{"POST", "/faults", `{"scope":"Cosmic","kind":"Ray"}`, "scope", `scope "Cosmic" is not one of`},
		{"POST", "/faults", `{"scope":"Tool","kind":"not pascal"}`, "kind", "PascalCase"},
		{"POST", "/faults", `{"scope":"Tool"}`, "kind", "kind is required"},
		{"POST", "/faults", `{"scope":"Tool","kind":"Timeout","escalate":"yes"}`, "escalate", "must be a bool"},
		{"POST", "/advice", `{"kind":"Continue"}`, "source", "source is required"},
		{"POST", "/advice", `{"source":"reviewer","kind":"9lives"}`, "kind", "PascalCase"},
		{"PUT", "/checkpoint", `{"checkpoint":"` + long + `"}`, "checkpoint", "at most 4096"},
		{"PUT", "/checkpoint", `{"checkpoint":5}`, "checkpoint", "must be a string"},
		{"POST", "/toolcalls", `{}`, "tool", "tool is required"},
		{"POST", "/toolcalls", `{"tool":"http.get","arguments":[1]}`, "arguments", "must be a JSON object"},
		{"POST", "/toolcalls", `{"tool":"http.get","context":"` + long + `"}`, "context", "at most 1024"},
		{"POST", "/toolcalls", `{"tool":"http.get","waitSeconds":"soon"}`, "waitSeconds", "must be a int64"},
		{"POST", "/toolcalls", `{"tool":"http.get","args":{}}`, "args", `unknown field "args"`},
		{"POST", "/toolcalls/call-1/outcome", `{"error":{"kind":"not pascal"}}`, "error.kind", "PascalCase"},
		{"PUT", "/report/plan", `{"sections":[]}`, "sections", "1 to 20"},
		{"PUT", "/report/plan", `{"sections":["Background",""]}`, "sections[1]", "sections[1] must be a title"},
		{"POST", "/report/sections", `{"section":"A","content":"x"}`, "callID", "callID is required"},
		{"POST", "/report/sections", `{"callID":"c","content":"x"}`, "section", "section is required"},
		{"POST", "/report/sections", `{"callID":"c","section":"A"}`, "content", "content is required"},
		{"POST", "/finish", `{"now":true}`, "now", `unknown field "now"`},
		{"POST", "/settle", `{"settlement":"Complete"}`, "settlement", `unknown field "settlement"`},
	} {
		r := as(t, e, tc.method, self(tc.path), tc.body)
		what := tc.method + " " + tc.path + " " + truncate(tc.body, 60)
		g.Expect(r.status).To(Equal(http.StatusBadRequest), what)
		eb := r.errBody()
		g.Expect(eb.Type).To(Equal(gatewayapi.TypeInvalidRequest), what)
		g.Expect(eb.Code).To(Equal(gatewayapi.CodeInvalidRequest), what)
		g.Expect(eb.Param).To(Equal(tc.param), what)
		g.Expect(eb.Message).To(ContainSubstring(tc.says), what)
		g.Expect(r.header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"), what)
	}
	// Nothing was recorded: the step counter starts at one.
	var step gatewayapi.StepResponse
	as(t, e, "POST", self("/steps"), `{}`).into(t, &step)
	g.Expect(step.Step).To(Equal(int64(1)))
	var view gatewayapi.Attempt
	as(t, e, "GET", self(""), nil).into(t, &view)
	g.Expect(view.Used).To(Equal(v1alpha1.Usage{}))
	g.Expect(view.Checkpoint).To(BeEmpty())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Only the attempt's pod, with its projected token, is served: no token or
// an invalid one is 401 invalid_token; a valid token of another pod (an
// earlier pod of the same name, a pod that is no attempt's, or no pod at
// all) is 403 not_an_attempt. Nothing is recorded for them.
func TestAgentAPIAuthenticatesThePod(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{PodWait: 50 * time.Millisecond})
	routes := []struct{ method, path, body string }{
		{"GET", self(""), ""},
		{"POST", self("/steps"), `{"progress":true}`},
		{"POST", self("/toolcalls"), `{"tool":"http.get"}`},
		{"GET", gatewayapi.ModelPathPrefix + "/models", ""},
		{"POST", gatewayapi.ModelPathPrefix + "/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, rt := range routes {
		for _, tok := range []string{"", "not-a-token"} {
			var body any
			if rt.body != "" {
				body = rt.body
			}
			r := send(t, e, rt.method, rt.path, tok, body)
			g.Expect(r.status).To(Equal(http.StatusUnauthorized), rt.path)
			g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeInvalidToken), rt.path)
			g.Expect(r.errBody().Type).To(Equal(gatewayapi.TypeAuthentication), rt.path)
			g.Expect(r.errBody().Message).To(ContainSubstring(gatewayapi.EnvTokenFile))
		}
	}
	for _, tc := range []struct{ token, says string }{
		{gatewaytest.OtherPodToken, "belongs to pod UID " + gatewaytest.PodUID},
		{gatewaytest.UnboundToken, "is not bound to a pod"},
		{gatewaytest.StrangerToken, "RunAttempt team/stranger does not exist"},
	} {
		for _, rt := range routes {
			var body any
			if rt.body != "" {
				body = rt.body
			}
			r := send(t, e, rt.method, rt.path, tc.token, body)
			g.Expect(r.status).To(Equal(http.StatusForbidden), rt.path)
			g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeNotAnAttempt), rt.path)
			g.Expect(r.errBody().Message).To(ContainSubstring(tc.says), rt.path)
		}
	}
	g.Expect(e.Upstream.Requests.Load()).To(BeZero())
	g.Consistently(e.Writes.Load, 100*time.Millisecond, apiPoll).Should(BeZero(), "nothing is recorded for strangers")

	// The attempt's own token is accepted, in the Authorization header
	// (bearer, any case) or in api-key (Azure style clients).
	g.Expect(as(t, e, "GET", self(""), nil).status).To(Equal(http.StatusOK))
	req, _ := http.NewRequest("GET", e.URL()+gatewayapi.ModelPathPrefix+"/models", nil)
	req.Header.Set("api-key", gatewaytest.Token)
	resp, err := apiClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	// The earlier pod is still refused once the attempt's pod is served.
	r := send(t, e, "POST", self("/steps"), gatewaytest.OtherPodToken, `{}`)
	g.Expect(r.status).To(Equal(http.StatusForbidden))
	g.Expect(e.Status().Steps).To(BeZero())
}

// A Terminated run, a superseded attempt or a deleted RunAttempt is served
// nothing more: 409 run_terminated or attempt_superseded, never retried.
func TestAgentAPIRefusesStoppedAttempts(t *testing.T) {
	chat := `{"model":"scripted","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name string
		stop func(e *gatewaytest.Env)
		code string
	}{
		{"terminated", func(e *gatewaytest.Env) {
			e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase = v1alpha1.PhaseTerminated })
		}, gatewayapi.CodeRunTerminated},
		{"superseded", func(e *gatewaytest.Env) {
			e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Superseded = true })
		}, gatewayapi.CodeAttemptSuperseded},
		{"deleted", func(e *gatewaytest.Env) {
			NewWithT(t).Expect(e.Client.Delete(context.Background(), e.Get())).To(Succeed())
			e.Gateway.Forget(e.Key)
		}, gatewayapi.CodeRunTerminated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := gatewaytest.Start(t, gatewaytest.Options{})
			g.Expect(as(t, e, "GET", self(""), nil).status).To(Equal(http.StatusOK))
			tc.stop(e)
			for _, rt := range []struct{ method, path, body string }{
				{"POST", self("/toolcalls"), `{"tool":"http.get"}`},
				{"POST", gatewayapi.ModelPathPrefix + "/chat/completions", chat},
				{"PUT", self("/report/plan"), `{"sections":["Summary"]}`},
			} {
				r := as(t, e, rt.method, rt.path, rt.body)
				g.Expect(r.status).To(Equal(http.StatusConflict), rt.path)
				g.Expect(r.errBody().Code).To(Equal(tc.code), rt.path)
				g.Expect(r.errBody().Type).To(Equal(gatewayapi.TypeConflict), rt.path)
				g.Expect(r.header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"))
			}
			var view gatewayapi.Attempt
			as(t, e, "GET", self(""), nil).into(t, &view)
			g.Expect(view.Stopped()).To(BeTrue())
			g.Expect(e.Upstream.Requests.Load()).To(BeZero())
		})
	}
}

// Unknown routes and unknown tool calls are 404 not_found.
func TestAgentAPINotFound(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{})
	r := as(t, e, "GET", gatewayapi.PathPrefix+"/other", nil)
	g.Expect(r.status).To(Equal(http.StatusNotFound))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeNotFound))
	r = as(t, e, "POST", self("/toolcalls/call-nope/outcome"), `{}`)
	g.Expect(r.status).To(Equal(http.StatusNotFound))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeNotFound))
	g.Expect(r.errBody().Message).To(ContainSubstring("call-nope"))
	r = as(t, e, "POST", self("/toolcalls"), `{"tool":"shell.exec"}`)
	g.Expect(r.status).To(Equal(http.StatusNotFound))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeUnknownTool))
}

// An approval names the tool and the exact arguments, whatever context the
// agent gives its calls (issue 25 item 1): an approval of {"text":"x"}
// admits that call under any context, and a call with other arguments is
// still awaited under an id of its own, whatever context it picks.
func TestAnApprovalIsBoundToTheArgumentsNotTheContext(t *testing.T) {
	g := NewWithT(t)
	id, err := gatewayapi.ActionIDOf("notes.write", map[string]any{"text": "x"})
	g.Expect(err).NotTo(HaveOccurred())
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) { ra.Spec.Mode = v1alpha1.ModeEdit }})
	e.ApproveWhenAsked(id)
	r := as(t, e, "POST", self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"x"},"context":"chosen-by-the-agent"}`)
	g.Expect(r.status).To(Equal(http.StatusOK))
	var call gatewayapi.ToolCall
	r.into(t, &call)
	g.Expect(call.ActionID).To(Equal(id))

	r = as(t, e, "POST", self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"y"},"context":"chosen-by-the-agent","waitSeconds":1}`)
	g.Expect(r.status).To(Equal(http.StatusConflict))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeApprovalPending))
	g.Expect(r.errBody().Message).NotTo(ContainSubstring(id))
}

// A call that waits for an approval longer than it said it would is
// answered approval_pending (409) and withdrawn from awaitingApproval; the
// agent reports it again to keep waiting, and the approval then admits it.
func TestAgentAPIApprovalPending(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) { ra.Spec.Mode = v1alpha1.ModeEdit }})
	body := `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":1}`
	id, _ := gatewayapi.ActionIDOf("notes.write", map[string]any{"text": "x"})
	start := time.Now()
	r := as(t, e, "POST", self("/toolcalls"), body)
	g.Expect(r.status).To(Equal(http.StatusConflict))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeApprovalPending))
	g.Expect(r.errBody().Message).To(ContainSubstring(id))
	g.Expect(time.Since(start)).To(BeNumerically(">=", time.Second))
	g.Eventually(func() []string { return v1alpha1.ActionIDs(e.Status().AwaitingApproval) }, apiWait, apiPoll).Should(BeEmpty())

	done := make(chan reply, 1)
	go func() { done <- as(t, e, "POST", self("/toolcalls"), body) }()
	g.Eventually(func() []string { return v1alpha1.ActionIDs(e.Status().AwaitingApproval) }, apiWait, apiPoll).Should(ConsistOf(id))
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	})
	var ok reply
	g.Eventually(done, apiWait).Should(Receive(&ok))
	g.Expect(ok.status).To(Equal(http.StatusOK))
	var call gatewayapi.ToolCall
	ok.into(t, &call)
	g.Expect(call.ActionID).To(Equal(id))
	g.Expect(call.WriteAhead).To(BeTrue())
}

// An approval reaches a waiting call even when the gateway's informer
// missed it (in its relist back-off after an API server restart, the cache
// stays stale for up to a minute): the wait re-reads the attempt live.
func TestAnApprovalIsSeenThroughAStaleCache(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{StaleCache: true,
		Mutate: func(ra *v1alpha1.RunAttempt) { ra.Spec.Mode = v1alpha1.ModeEdit }})
	body := `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":30}`
	id, _ := gatewayapi.ActionIDOf("notes.write", map[string]any{"text": "x"})
	done := make(chan reply, 1)
	go func() { done <- as(t, e, "POST", self("/toolcalls"), body) }()
	g.Eventually(func() []string { return v1alpha1.ActionIDs(e.Status().AwaitingApproval) }, apiWait, apiPoll).Should(ConsistOf(id))

	// The approval is written, and no informer event tells the gateway.
	ra := e.Get()
	ra.Spec.Approvals = append(ra.Spec.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	ra.Generation++
	g.Expect(e.Client.Update(t.Context(), ra)).To(Succeed())

	var ok reply
	g.Eventually(done, apiWait).Should(Receive(&ok), "the waiting call saw the approval although its cache did not")
	g.Expect(ok.status).To(Equal(http.StatusOK), "%s", ok.body)
}

// The agent's view streams as server-sent events: the current view at once,
// then every change.
func TestAgentAPIWatch(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{})
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.URL()+self("/watch"), nil)
	req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	views := make(chan gatewayapi.Attempt, 16)
	go func() {
		dec := &sseReader{r: resp.Body}
		for {
			data, err := dec.next()
			if err != nil {
				close(views)
				return
			}
			var v gatewayapi.Attempt
			if json.Unmarshal(data, &v) == nil {
				views <- v
			}
		}
	}()
	var v gatewayapi.Attempt
	g.Eventually(views, apiWait).Should(Receive(&v))
	g.Expect(v.RunAttempt).To(Equal(gatewaytest.RunAttempt))
	as(t, e, "POST", self("/steps"), `{"progress":true}`)
	g.Eventually(func() int64 {
		select {
		case v = <-views:
		default:
		}
		return v.Steps
	}, apiWait, apiPoll).Should(Equal(int64(1)))
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase = v1alpha1.PhaseTerminated })
	g.Eventually(func() bool {
		select {
		case nv, ok := <-views:
			if !ok {
				return true // the stream ends once the attempt stopped
			}
			v = nv
		default:
		}
		return false
	}, apiWait, apiPoll).Should(BeTrue())
	g.Expect(v.Phase).To(Equal(v1alpha1.PhaseTerminated))
}

// sseReader returns the data of each server-sent event.
type sseReader struct {
	r   io.Reader
	buf []byte
}

func (s *sseReader) next() ([]byte, error) {
	for {
		if i := bytes.Index(s.buf, []byte("\n\n")); i >= 0 {
			event := s.buf[:i]
			s.buf = s.buf[i+2:]
			var data []byte
			for line := range bytes.SplitSeq(event, []byte("\n")) {
				if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
					data = append(data, d...)
				}
			}
			if len(data) > 0 {
				return data, nil
			}
			continue
		}
		chunk := make([]byte, 4096)
		n, err := s.r.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		if err != nil && n == 0 {
			return nil, err
		}
	}
}

// Publication is the effect of an admitted report.publish call: without
// one, with another tool's call, with other content or another section
// than the approved arguments, or after the call's outcome, it is 403. The
// gateway writes the report ConfigMap (owned by the run) and settles from
// what it holds: None, Partial, Complete.
func TestPublication(t *testing.T) {
	g := NewWithT(t)
	background := map[string]any{"section": "Background", "content": "Alpha uses Raft."}
	findings := map[string]any{"section": "Findings", "content": "Beta is asynchronous."}
	costs := map[string]any{"section": "Costs", "content": "Cheap."}
	e := gatewaytest.Start(t, gatewaytest.Options{})
	publishApproved(t, e, background, findings, costs)
	reportKey := types.NamespacedName{Namespace: gatewaytest.Namespace, Name: gateway.ReportName(gatewaytest.Run)}
	report := func() *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		g.Expect(e.Client.Get(context.Background(), reportKey, cm)).To(Succeed())
		return cm
	}
	settle := func() gatewayapi.SettleResponse {
		r := as(t, e, "POST", self("/settle"), `{}`)
		g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		var s gatewayapi.SettleResponse
		r.into(t, &s)
		return s
	}
	publish := func(callID string, args map[string]any) reply {
		return as(t, e, "POST", self("/report/sections"), gatewayapi.PublishRequest{
			CallID: callID, Section: args["section"].(string), Content: args["content"].(string)})
	}

	r := as(t, e, "PUT", self("/report/plan"), gatewayapi.ReportPlanRequest{Sections: []string{"Background", "Findings"}})
	g.Expect(r.status).To(Equal(http.StatusOK))
	var rep gatewayapi.Report
	r.into(t, &rep)
	g.Expect(rep).To(Equal(gatewayapi.Report{Location: "configmap/survey-report", Sections: []gatewayapi.ReportSection{
		{Name: "Background", Key: "01-background.md"}, {Name: "Findings", Key: "02-findings.md"},
	}}))
	// A plan already persisted is kept (a replacement attempt takes it over).
	r = as(t, e, "PUT", self("/report/plan"), gatewayapi.ReportPlanRequest{Sections: []string{"Other"}})
	r.into(t, &rep)
	g.Expect(rep.Sections).To(HaveLen(2))
	g.Expect(rep.Sections[0].Name).To(Equal("Background"))
	cm := report()
	g.Expect(cm.Labels).To(HaveKeyWithValue(v1alpha1.LabelRun, gatewaytest.Run))
	g.Expect(cm.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "ResearchRun"), HaveField("Name", gatewaytest.Run),
		HaveField("UID", BeEquivalentTo("run-uid")))))
	g.Expect(settle()).To(Equal(gatewayapi.SettleResponse{Settlement: v1alpha1.SettlementNone, BlocksPlanned: 2}))

	// Without an admitted report.publish call, nothing is published.
	r = publish("call-0123456789abcdef", background)
	g.Expect(r.status).To(Equal(http.StatusForbidden))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodePermissionDenied))
	read := admit(t, e, "http.get", map[string]any{"url": "https://example.org"})
	r = publish(read.ID, background)
	g.Expect(r.status).To(Equal(http.StatusForbidden), "a call of another tool is no publication")

	// The approved arguments are what may be published, nothing else.
	call := admit(t, e, gatewayapi.ToolReportPublish, background)
	g.Expect(call.WriteAhead).To(BeTrue())
	r = publish(call.ID, map[string]any{"section": "Background", "content": "Alpha uses Paxos."})
	g.Expect(r.status).To(Equal(http.StatusForbidden))
	g.Expect(r.errBody().Message).To(ContainSubstring("differ from the arguments"))
	r = publish(call.ID, map[string]any{"section": "Findings", "content": "Alpha uses Raft."})
	g.Expect(r.status).To(Equal(http.StatusForbidden))
	g.Expect(report().Data).NotTo(HaveKey("01-background.md"))

	r = publish(call.ID, background)
	g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
	r.into(t, &rep)
	g.Expect(rep.Committed).To(Equal(int32(1)))
	g.Expect(report().Data).To(HaveKeyWithValue("01-background.md", "Alpha uses Raft."))
	var idx gateway.ReportIndex
	g.Expect(json.Unmarshal([]byte(report().Data[gateway.ReportIndexKey]), &idx)).To(Succeed())
	g.Expect(idx.Run).To(Equal(gatewaytest.Run))
	g.Expect(idx.Sections).To(Equal([]gateway.ReportIndexEntry{
		{Name: "Background", Key: "01-background.md", Published: true},
		{Name: "Findings", Key: "02-findings.md", Published: false},
	}))
	g.Expect(as(t, e, "POST", self("/toolcalls/"+call.ID+"/outcome"), `{}`).status).To(Equal(http.StatusNoContent))
	g.Expect(publish(call.ID, background).status).To(Equal(http.StatusForbidden), "no replay after the outcome")
	g.Expect(settle()).To(Equal(gatewayapi.SettleResponse{Settlement: v1alpha1.SettlementPartial, BlocksPlanned: 2, BlocksCommitted: 1}))

	// A section outside the plan is refused, naming the field.
	r = publish(admit(t, e, gatewayapi.ToolReportPublish, costs).ID, costs)
	g.Expect(r.status).To(Equal(http.StatusBadRequest))
	g.Expect(r.errBody().Param).To(Equal("section"))

	g.Expect(publish(admit(t, e, gatewayapi.ToolReportPublish, findings).ID, findings).status).To(Equal(http.StatusOK))
	g.Expect(settle()).To(Equal(gatewayapi.SettleResponse{Settlement: v1alpha1.SettlementComplete, BlocksPlanned: 2, BlocksCommitted: 2}))
	// The settlement is durable before the answer.
	g.Expect(e.Status().Publication).To(Equal(v1alpha1.Publication{
		BlocksPlanned: 2, BlocksCommitted: 2, Settlement: v1alpha1.SettlementComplete, Settled: true,
		Location: "configmap/survey-report",
	}))

	// Settlement is what the report holds, not what the agent believes.
	cm = report()
	delete(cm.Data, "02-findings.md")
	g.Expect(e.Client.Update(context.Background(), cm)).To(Succeed())
	g.Expect(settle()).To(Equal(gatewayapi.SettleResponse{Settlement: v1alpha1.SettlementPartial, BlocksPlanned: 2, BlocksCommitted: 1}))
	g.Expect(e.Status().Publication.Settlement).To(Equal(v1alpha1.SettlementPartial))
}

// A ConfigMap of the report's name that is not the run's report is never
// written over.
func TestPublicationRefusesAnotherRunsConfigMap(t *testing.T) {
	g := NewWithT(t)
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: gatewaytest.Namespace, Name: gateway.ReportName(gatewaytest.Run),
		Labels: map[string]string{v1alpha1.LabelRun: "someone-else"},
	}, Data: map[string]string{"keep": "me"}}
	e := gatewaytest.Start(t, gatewaytest.Options{Objects: []client.Object{other}})
	r := as(t, e, "PUT", self("/report/plan"), gatewayapi.ReportPlanRequest{Sections: []string{"Summary"}})
	g.Expect(r.status).To(Equal(http.StatusServiceUnavailable))
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeNotPersisted))
	g.Expect(r.errBody().Message).To(ContainSubstring("is not run survey's report"))
	cm := &corev1.ConfigMap{}
	g.Expect(e.Client.Get(context.Background(), client.ObjectKeyFromObject(other), cm)).To(Succeed())
	g.Expect(cm.Data).To(Equal(map[string]string{"keep": "me"}))
	r = as(t, e, "POST", self("/settle"), `{}`)
	g.Expect(r.status).To(Equal(http.StatusServiceUnavailable))
}

// An escalated non-retryable fault stays non-retryable: a later local,
// retryable occurrence of the same kind must not make the operator recover.
func TestEscalatedFaultKeepsItsRetryability(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{})
	r := as(t, e, "POST", self("/faults"), `{"scope":"Provider","kind":"InvalidAPIKey","retryable":false,"escalate":true,"message":"401"}`)
	g.Expect(r.status).To(Equal(http.StatusNoContent))
	r = as(t, e, "POST", self("/faults"), `{"scope":"Provider","kind":"InvalidAPIKey","retryable":true,"message":"again"}`)
	g.Expect(r.status).To(Equal(http.StatusNoContent))
	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }, apiWait, apiPoll).Should(ContainElement(And(
		HaveField("Kind", "InvalidAPIKey"), HaveField("Count", BeEquivalentTo(2)),
		HaveField("Escalated", BeTrue()), HaveField("Retryable", BeFalse()))))
}
