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
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// editEnv is a gateway whose attempt is in Edit mode: every notes.write
// waits for an approval.
func editEnv(t *testing.T, mutate func(*v1alpha1.RunAttempt)) *gatewaytest.Env {
	return gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Mode = v1alpha1.ModeEdit
		if mutate != nil {
			mutate(ra)
		}
	}})
}

// tryCall reports a tool call as the agent would, answering a cut
// connection (a crashed gateway) with status 0 instead of failing the test
// from another goroutine.
func tryCall(e *gatewaytest.Env, body string) reply {
	req, err := http.NewRequest(http.MethodPost, e.URL()+self("/toolcalls"), strings.NewReader(body))
	if err != nil {
		return reply{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	resp, err := apiClient.Do(req)
	if err != nil {
		return reply{}
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: raw}
}

func awaited(e *gatewaytest.Env) func() []string {
	return func() []string { return v1alpha1.ActionIDs(e.Status().AwaitingApproval) }
}

// One approval admits one dispatch (issue 25 item 8): of three identical
// calls waiting on it, one is dispatched and two keep waiting; the approval
// is recorded used on the attempt; a second approval admits one more, and
// an identical call after that waits for a decision of its own.
func TestOneApprovalAdmitsOneDispatch(t *testing.T) {
	g := NewWithT(t)
	e := editEnv(t, nil)
	body := `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":30}`
	id, _ := gatewayapi.ActionIDOf("notes.write", map[string]any{"text": "x"})
	done := make(chan reply, 3)
	for range 3 {
		go func() { done <- tryCall(e, body) }()
	}
	g.Eventually(awaited(e), apiWait, apiPoll).Should(ConsistOf(id))
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	})
	var r reply
	g.Eventually(done, apiWait).Should(Receive(&r))
	g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)
	g.Consistently(done, 500*time.Millisecond).ShouldNot(Receive(), "one approval admits one call")
	g.Eventually(func() []int32 { return e.Status().UsedApprovals }, apiWait, apiPoll).Should(Equal([]int32{0}))
	g.Eventually(awaited(e), apiWait, apiPoll).Should(ConsistOf(id), "the other calls still wait, for the approver to see")

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	})
	g.Eventually(done, apiWait).Should(Receive(&r))
	g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)
	g.Consistently(done, 300*time.Millisecond).ShouldNot(Receive())
	g.Eventually(func() []int32 { return e.Status().UsedApprovals }, apiWait, apiPoll).Should(ConsistOf(int32(0), int32(1)))
	g.Expect(e.Status().Usage.ToolCalls).To(Equal(int64(2)))

	r = as(t, e, http.MethodPost, self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":1}`)
	g.Expect(r.status).To(Equal(http.StatusConflict), "%s", r.body)
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeApprovalPending))
}

// An approval stamped outside the waiting request's window answers nothing
// (issue 25 item 8): one appended after a request expired is not honoured
// on the next ask, nor is one stamped before the request was made.
func TestAnApprovalOutsideTheRequestsWindowIsNotHonoured(t *testing.T) {
	g := NewWithT(t)
	e := editEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.ApprovalTimeout = &metav1.Duration{Duration: time.Second}
	})
	body := `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":5}`
	id, _ := gatewayapi.ActionIDOf("notes.write", map[string]any{"text": "x"})
	r := as(t, e, http.MethodPost, self("/toolcalls"), body)
	g.Expect(r.errBody().Code).To(BeElementOf(gatewayapi.CodeApprovalExpired, gatewayapi.CodeApprovalPending), "%s", r.body)
	expired := time.Now()

	// Stamped a second after the request expired, the approval is appended
	// late; the agent asks again once the clock is past it.
	late := gatewaytest.Decision(id, v1alpha1.DecisionApprove)
	late.Time = &metav1.Time{Time: expired.Add(time.Second).Truncate(time.Second)}
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Approvals = append(s.Approvals, late) })
	time.Sleep(time.Until(late.Time.Add(time.Second))) // the wall clock is the subject here
	r = as(t, e, http.MethodPost, self("/toolcalls"), body)
	g.Expect(r.status).NotTo(Equal(http.StatusOK), "a late approval is not honoured at once: %s", r.body)
	g.Expect(r.errBody().Code).To(BeElementOf(gatewayapi.CodeApprovalExpired, gatewayapi.CodeApprovalPending), "%s", r.body)

	// Nor is one stamped before the request was made.
	early := gatewaytest.Decision(id, v1alpha1.DecisionApprove)
	early.Time = &metav1.Time{Time: time.Now().Add(-time.Second).Truncate(time.Second)}
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Approvals = append(s.Approvals, early) })
	r = as(t, e, http.MethodPost, self("/toolcalls"), body)
	g.Expect(r.status).NotTo(Equal(http.StatusOK), "an approval stamped before the request is not honoured: %s", r.body)
	g.Expect(e.Status().Usage.ToolCalls).To(BeZero())
	g.Expect(e.Status().UsedApprovals).To(BeEmpty())
}

// A Standing approval admits every identical call of the attempt once it
// has answered one waiting call; a later decision replaces it.
func TestAStandingApprovalAdmitsRepeats(t *testing.T) {
	g := NewWithT(t)
	e := editEnv(t, nil)
	body := `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":30}`
	id, _ := gatewayapi.ActionIDOf("notes.write", map[string]any{"text": "x"})
	done := make(chan reply, 1)
	go func() { done <- tryCall(e, body) }()
	g.Eventually(awaited(e), apiWait, apiPoll).Should(ConsistOf(id))
	standing := gatewaytest.Decision(id, v1alpha1.DecisionApprove)
	standing.Scope = v1alpha1.ApprovalScopeStanding
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Approvals = append(s.Approvals, standing) })
	var r reply
	g.Eventually(done, apiWait).Should(Receive(&r))
	g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)
	for range 3 {
		r = as(t, e, http.MethodPost, self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":1}`)
		g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)
	}
	g.Expect(e.Status().UsedApprovals).To(Equal([]int32{0}))

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionDeny))
	})
	r = as(t, e, http.MethodPost, self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":1}`)
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeApprovalDenied), "a later decision replaced the standing approval: %s", r.body)
}

// An approval spent before a gateway restart stays spent (issue 25 item 8):
// two identical calls wait, one approval admits one, the gateway crashes,
// and the other call, asked again of the new process within the same
// request's window, waits for a decision of its own.
func TestAnApprovalSpentBeforeARestartStaysSpent(t *testing.T) {
	g := NewWithT(t)
	e := editEnv(t, nil)
	body := `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":30}`
	id, _ := gatewayapi.ActionIDOf("notes.write", map[string]any{"text": "x"})
	done := make(chan reply, 2)
	for range 2 {
		go func() { done <- tryCall(e, body) }()
	}
	g.Eventually(awaited(e), apiWait, apiPoll).Should(ConsistOf(id))
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	})
	var r reply
	g.Eventually(done, apiWait).Should(Receive(&r))
	g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)
	g.Eventually(func(g Gomega) {
		st := e.Status()
		g.Expect(st.UsedApprovals).To(Equal([]int32{0}))
		g.Expect(v1alpha1.ActionIDs(st.AwaitingApproval)).To(ConsistOf(id))
	}, apiWait, apiPoll).Should(Succeed())

	e.Crash()
	g.Eventually(done, apiWait).Should(Receive(), "the crash cut the waiting call")
	e.Restart()
	r = as(t, e, http.MethodPost, self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":1}`)
	g.Expect(r.status).To(Equal(http.StatusConflict), "the spent approval admitted a second call after the restart: %s", r.body)
	g.Expect(r.errBody().Code).To(Equal(gatewayapi.CodeApprovalPending))
	g.Expect(e.Status().Usage.ToolCalls).To(Equal(int64(1)))

	// A new approval, within the window the new process kept, admits it.
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	})
	r = as(t, e, http.MethodPost, self("/toolcalls"), `{"tool":"notes.write","arguments":{"text":"x"},"waitSeconds":5}`)
	g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)
}

// The approver reads the arguments in full (issue 25 item 9): an
// agent-arranged argument whose dangerous part lies beyond the first 256
// bytes is in awaitingApproval whole, with its length and hash; a call whose
// arguments are longer than the bound shows the first
// MaxApprovalArguments bytes, says it is truncated, and is admitted only by
// an approval that names the full arguments' hash.
func TestTheApproverSeesTheFullArguments(t *testing.T) {
	g := NewWithT(t)
	e := editEnv(t, nil)
	text := strings.Repeat("harmless preamble ", 40) + "; rm -rf / --no-preserve-root"
	args := map[string]any{"text": text}
	raw, _ := gatewayapi.CanonicalJSON(args)
	id, _ := gatewayapi.ActionIDOf("notes.write", args)
	done := make(chan reply, 1)
	go func() { done <- tryCall(e, `{"tool":"notes.write","waitSeconds":30,"arguments":`+string(raw)+`}`) }()
	g.Eventually(awaited(e), apiWait, apiPoll).Should(ConsistOf(id))
	req := e.Status().AwaitingApproval[0]
	g.Expect(req.Arguments).To(Equal(string(raw)))
	g.Expect(req.Arguments).To(ContainSubstring("rm -rf /"))
	g.Expect(req.ArgumentsTruncated).To(BeFalse())
	g.Expect(req.ArgumentsBytes).To(Equal(int64(len(raw))))
	sum := sha256.Sum256(raw)
	g.Expect(req.ArgumentsSHA256).To(Equal(hex.EncodeToString(sum[:])))
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	})
	var r reply
	g.Eventually(done, apiWait).Should(Receive(&r))
	g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)

	// Longer than the bound: shown cut, admitted only with the hash.
	huge := map[string]any{"text": strings.Repeat("y", v1alpha1.MaxApprovalArguments) + "; the tail"}
	raw, _ = gatewayapi.CanonicalJSON(huge)
	id, _ = gatewayapi.ActionIDOf("notes.write", huge)
	go func() { done <- tryCall(e, `{"tool":"notes.write","waitSeconds":30,"arguments":`+string(raw)+`}`) }()
	g.Eventually(awaited(e), apiWait, apiPoll).Should(ConsistOf(id))
	req = e.Status().AwaitingApproval[0]
	g.Expect(req.ArgumentsTruncated).To(BeTrue())
	g.Expect(req.Arguments).To(HaveLen(v1alpha1.MaxApprovalArguments))
	g.Expect(req.ArgumentsBytes).To(Equal(int64(len(raw))))
	sum = sha256.Sum256(raw)
	full := hex.EncodeToString(sum[:])
	g.Expect(req.ArgumentsSHA256).To(Equal(full))
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Approvals = append(s.Approvals, gatewaytest.Decision(id, v1alpha1.DecisionApprove))
	})
	g.Consistently(done, 500*time.Millisecond).ShouldNot(Receive(), "an approval that does not name the hash of arguments nobody saw in full admits nothing")
	named := gatewaytest.Decision(id, v1alpha1.DecisionApprove)
	named.ArgumentsSHA256 = full
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Approvals = append(s.Approvals, named) })
	g.Eventually(done, apiWait).Should(Receive(&r))
	g.Expect(r.status).To(Equal(http.StatusOK), "%s", r.body)
}
