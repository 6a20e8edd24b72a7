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
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// recorder is an upstream that records what the gateway sent it, in front
// of the scripted upstream (or of a canned status).
type recorder struct {
	mu      sync.Mutex
	bodies  []map[string]any
	auth    []string
	inner   http.Handler
	status  atomic.Int32 // answer with this status instead, when set
	latency time.Duration
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	r.mu.Lock()
	r.bodies = append(r.bodies, m)
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	r.mu.Unlock()
	if s := r.status.Load(); s != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(s))
		_, _ = io.WriteString(w, `{"error":{"message":"upstream is down","type":"server_error","code":"server_overloaded"}}`)
		return
	}
	if r.latency > 0 {
		time.Sleep(r.latency)
	}
	req.Body = io.NopCloser(bytes.NewReader(raw))
	r.inner.ServeHTTP(w, req)
}

func (r *recorder) last() (map[string]any, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bodies) == 0 {
		return nil, ""
	}
	return r.bodies[len(r.bodies)-1], r.auth[len(r.auth)-1]
}

// modelEnv starts a gateway whose models point at a recording upstream; the
// default model has a provider key in a Secret.
func modelEnv(t *testing.T, mutate func(*v1alpha1.RunAttempt)) (*gatewaytest.Env, *recorder) {
	t.Helper()
	rec := &recorder{inner: &upstream.Server{}}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "provider",
		Labels: map[string]string{v1alpha1.LabelProviderKey: "true"}},
		Data: map[string][]byte{"key": []byte("sk-provider-secret\n")}}
	e := gatewaytest.Start(t, gatewaytest.Options{
		Objects: []client.Object{secret},
		Mutate: func(ra *v1alpha1.RunAttempt) {
			for i := range ra.Spec.Policy.Models {
				ra.Spec.Policy.Models[i].BaseURL = up.URL + "/v1"
			}
			ra.Spec.Policy.Models[0].APIKeySecretRef = &v1alpha1.SecretKeyRef{Name: "provider", Key: "key"}
			if mutate != nil {
				mutate(ra)
			}
		},
	})
	return e, rec
}

func chat(model string, extra string) []byte {
	return []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]` + extra + `}`)
}

func errorBody(g Gomega, resp *http.Response) gatewayapi.Error {
	defer func() { _ = resp.Body.Close() }()
	var eb gatewayapi.ErrorBody
	g.Expect(json.NewDecoder(resp.Body).Decode(&eb)).To(Succeed())
	return eb.Error
}

func TestModelDoorForwardsWithTheProviderKeyAndCountsUsage(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, nil)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat(gatewaytest.Model,
		`,"agentrun_scripted":{"say":"hi","tokens":42},"temperature":0.2`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	g.Expect(json.NewDecoder(resp.Body).Decode(&out)).To(Succeed())
	g.Expect(out.Choices[0].Message.Content).To(Equal("hi"))
	g.Expect(out.Usage.TotalTokens).To(BeEquivalentTo(42))

	body, auth := rec.last()
	g.Expect(auth).To(Equal("Bearer sk-provider-secret"), "the provider key, never the agent's token")
	g.Expect(body).To(HaveKeyWithValue("temperature", 0.2), "unknown fields pass through")
	g.Expect(body).To(HaveKeyWithValue("model", gatewaytest.Model))

	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).
		Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 42}))
}

func TestModelDoorRefusesBadRequestsWithoutCountingThem(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, nil)

	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("gpt-5", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
	eb := errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeModelNotFound))
	g.Expect(eb.Param).To(Equal("model"))
	g.Expect(eb.Message).To(ContainSubstring(`"scripted"`), "names the models the policy serves")

	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, []byte(`{"model": "scripted", "messages": [`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(errorBody(g, resp).Code).To(Equal(gatewayapi.CodeInvalidRequest))

	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, []byte(`{"model": "scripted", "messages": []}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(errorBody(g, resp).Param).To(Equal("messages"))

	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", `,"max_tokens":-1`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(errorBody(g, resp).Param).To(Equal("max_tokens"))

	resp = e.Do(http.MethodPost, "/v1/chat/completions", "", chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	g.Expect(errorBody(g, resp).Code).To(Equal(gatewayapi.CodeInvalidToken))

	g.Expect(rec.bodies).To(BeEmpty(), "nothing was dispatched")
	g.Consistently(func() int64 { return e.Status().Usage.ModelRequests }, 100*time.Millisecond).Should(BeZero())
}

func TestModelDoorRefusesBeyondTheGrantWithTheNumbers(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = 3 })
	for range 3 {
		resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		_ = resp.Body.Close()
	}
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get(gatewayapi.HeaderShouldRetry)).To(Equal("false"), "so the OpenAI SDKs do not retry it")
	eb := errorBody(g, resp)
	g.Expect(eb.Type).To(Equal(gatewayapi.TypeRateLimit))
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(eb.Message).To(ContainSubstring("working budget exhausted at 3/3 model requests"))
	g.Expect(rec.bodies).To(HaveLen(3), "the refused request never reached the provider")

	g.Eventually(func() []v1alpha1.Fault { return e.Status().Faults }).Should(ContainElement(
		And(HaveField("Kind", "GrantExhausted"), HaveField("Scope", v1alpha1.FaultScopeAgent))))

	// Finalizing: the reserve is the grant, and beyond it the code says so.
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.RunPhase = v1alpha1.PhaseFinalizing
		s.Grant = v1alpha1.Grant{ModelRequests: 4, ToolCalls: 1, FinalizeOnly: true}
	})
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "one more from the reserve")
	_ = resp.Body.Close()
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	eb = errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeReserveExhausted))
	g.Expect(eb.Message).To(ContainSubstring("4/4 model requests"))

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.RunPhase = v1alpha1.PhaseTerminated; s.Grant = v1alpha1.Grant{} })
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusConflict))
	g.Expect(errorBody(g, resp).Code).To(Equal(gatewayapi.CodeRunTerminated))
}

func TestModelDoorReservesTokensSoNoRequestCrossesTheGrant(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(1000))
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(600))
	})
	body := chat("scripted", `,"agentrun_scripted":{"say":"ok","tokens":300}`)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ := rec.last()
	g.Expect(sent).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 600)), "the policy's cap is set when the request asks none")

	// 700 tokens are left; the prompt may use up to len(body): max_tokens
	// is lowered so prompt + completion fit.
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token,
		chat("scripted", `,"max_tokens":5000,"agentrun_scripted":{"say":"ok","tokens":10}`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ = rec.last()
	g.Expect(sent["max_tokens"]).To(BeNumerically("<=", 700-len(body)))
	g.Expect(sent["max_tokens"]).To(BeNumerically(">", 0))

	g.Eventually(func() int64 { return e.Status().Usage.Tokens }).Should(BeEquivalentTo(310), "settled on the reported usage")

	// A prompt larger than what is left is refused before dispatch: it
	// extends the conversation answered before by 800 bytes, more than the
	// 690 tokens left (reservation.go).
	big := []byte(`{"model":"scripted","messages":[{"role":"user","content":"hello"},{"role":"user","content":"` +
		strings.Repeat("x", 800) + `"}]}`)
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, big)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	eb := errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(eb.Message).To(ContainSubstring("310/1000 tokens"))

	// With 690 tokens left the grant is not used up by the counters, but no
	// request like this one fits: the refusal is the attempt's exhaustion,
	// on the RunAttempt before the agent is told (issue 29: the operator saw
	// 310 < 1000 and the run waited for its deadline).
	x := e.Status().GrantExhausted
	g.Expect(x).NotTo(BeNil(), "the refusal was written before it was answered")
	g.Expect(*x).To(And(HaveField("Unit", v1alpha1.BudgetUnitTokens), HaveField("Used", BeEquivalentTo(310)),
		HaveField("Granted", BeEquivalentTo(1000)), HaveField("Message", ContainSubstring("310/1000 tokens"))))
	writes := e.Writes.Load()
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, big)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	_ = resp.Body.Close()
	g.Expect(e.Writes.Load()).To(Equal(writes), "the first refusal is kept: a repeated one writes nothing")
}

func TestModelDoorSwapsInTheDegradedModel(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, nil)
	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveDegrade, Gate: v1alpha1.GateBudget, Message: "80% used"}}
	})
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat(gatewaytest.Model, ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, auth := rec.last()
	g.Expect(sent).To(HaveKeyWithValue("model", "scripted-small-v2"), "the degraded model's upstream id")
	g.Expect(auth).To(BeEmpty(), "the degraded model has no key")
}

func TestModelDoorPassesUpstreamErrorsThroughAndCountsThem(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, nil)
	rec.status.Store(http.StatusServiceUnavailable)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
	raw, _ := io.ReadAll(resp.Body)
	g.Expect(string(raw)).To(ContainSubstring("upstream is down"))
	g.Eventually(func() v1alpha1.RunAttemptStatus { return e.Status() }).Should(And(
		HaveField("Usage.ModelRequests", BeEquivalentTo(1)),
		HaveField("Faults", ContainElement(And(HaveField("Scope", v1alpha1.FaultScopeProvider),
			HaveField("Kind", "ServerOverloaded"), HaveField("Retryable", true)))),
	), "a failed call still counts, as a Provider fault")
}

func TestModelDoorStreamsAndCountsTheReportedUsage(t *testing.T) {
	g := NewWithT(t)
	e, _ := modelEnv(t, nil)
	read := func(extra string) (events []string) {
		resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted",
			`,"stream":true,"agentrun_scripted":{"say":"a streamed answer of some length","tokens":25}`+extra))
		defer func() { _ = resp.Body.Close() }()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events = append(events, data)
			}
		}
		return events
	}
	plain := read("")
	g.Expect(plain[len(plain)-1]).To(Equal("[DONE]"))
	for _, ev := range plain {
		g.Expect(ev).NotTo(ContainSubstring(`"usage"`), "the client did not ask for usage: the forced usage chunk is dropped")
	}
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 25}))

	withUsage := read(`,"stream_options":{"include_usage":true}`)
	g.Expect(withUsage[len(withUsage)-2]).To(ContainSubstring(`"total_tokens":25`))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).Should(Equal(v1alpha1.Usage{ModelRequests: 2, Tokens: 50}))
}

// TestModelDoorNeverServesBeyondTheGrantUnderRace: many clients racing the
// limit get exactly the grant served (make bench runs 10,000 of them).
func TestModelDoorNeverServesBeyondTheGrantUnderRace(t *testing.T) {
	g := NewWithT(t)
	const grant, clients, each = 50, 16, 10
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = grant })
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	g.Expect(ok.Load()).To(BeEquivalentTo(grant))
	g.Expect(refused.Load()).To(BeEquivalentTo(clients*each - grant))
	g.Expect(rec.bodies).To(HaveLen(grant))
	g.Eventually(func() int64 { return e.Status().Usage.ModelRequests }).Should(BeEquivalentTo(grant))
}

// cutStream is an upstream that sends two chunks and then drops the
// connection, with no usage and no [DONE].
type cutStream struct{}

func (cutStream) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, c := range []string{`{"choices":[{"index":0,"delta":{"content":"half"}}]}`, `{"choices":[{"index":0,"delta":{"content":" an"}}]}`} {
		_, _ = io.WriteString(w, "data: "+c+"\n\n")
		fl.Flush()
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

func TestModelDoorChargesTheReservationForAStreamCutMidway(t *testing.T) {
	g := NewWithT(t)
	up := httptest.NewServer(cutStream{})
	t.Cleanup(up.Close)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(10000))
		ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
		ra.Spec.Policy.Models[0].MaxTokens = new(int64(100))
	}})
	body := chat("scripted", `,"stream":true`)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, body)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(raw)).To(ContainSubstring("half"))
	g.Expect(string(raw)).NotTo(ContainSubstring("[DONE]"), "the client sees the cut")
	g.Eventually(func() v1alpha1.RunAttemptStatus { return e.Status() }).Should(And(
		HaveField("Usage.ModelRequests", BeEquivalentTo(1)),
		// No usage was reported: the reservation (prompt bound + max_tokens) is charged.
		HaveField("Usage.Tokens", BeEquivalentTo(int64(len(body))+100)),
		HaveField("Faults", ContainElement(And(HaveField("Scope", v1alpha1.FaultScopeProvider), HaveField("Kind", "StreamCut")))),
	))
}

func TestModelDoorChargesAClientThatLeavesMidStream(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{inner: &upstream.Server{}, latency: 300 * time.Millisecond}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
	}})
	req, _ := http.NewRequest(http.MethodPost, e.URL()+"/v1/chat/completions",
		bytes.NewReader(chat("scripted", `,"stream":true,"agentrun_scripted":{"say":"long answer","tokens":77}`)))
	req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	// The client gives up at 100 ms, before the provider answers (300 ms).
	hc := &http.Client{Timeout: 100 * time.Millisecond}
	if resp, err := hc.Do(req); err == nil {
		_ = resp.Body.Close()
	}
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }, 5*time.Second).
		Should(Equal(v1alpha1.Usage{ModelRequests: 1, Tokens: 77}), "charged what the provider reported")
}

// TestModelDoorSendsOnlyKeysMarkedForIt: a policy naming an unmarked Secret
// gets nothing sent, and nothing counted.
func TestModelDoorSendsOnlyKeysMarkedForIt(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{inner: &upstream.Server{}}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	unmarked := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "db-password"},
		Data: map[string][]byte{"password": []byte("hunter2")}}
	e := gatewaytest.Start(t, gatewaytest.Options{Objects: []client.Object{unmarked}, Mutate: func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Models[0].BaseURL = up.URL + "/v1"
		ra.Spec.Policy.Models[0].APIKeySecretRef = &v1alpha1.SecretKeyRef{Name: "db-password", Key: "password"}
	}})
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusInternalServerError))
	eb := errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeProviderKeyUnavailable))
	g.Expect(eb.Message).To(ContainSubstring("agentrun.dev/provider-key=true"))
	g.Expect(rec.bodies).To(BeEmpty())
	g.Expect(e.Status().Usage.ModelRequests).To(BeZero())
}

// While the run is Finalizing, a model request that declares itself
// research (an agent whose view lags the phase) is refused with
// finalize_only and not counted, so it cannot spend the reserve; an output
// request, or one that declares nothing, is served from it.
func TestModelDoorServesTheReserveOnlyToOutputWork(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.RunPhase = v1alpha1.PhaseFinalizing
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 2, ToolCalls: 1, FinalizeOnly: true}
	})
	send := func(purpose string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, e.URL()+"/v1/chat/completions", bytes.NewReader(chat("scripted", "")))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
		if purpose != "" {
			req.Header.Set(gatewayapi.HeaderPurpose, purpose)
		}
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		return resp
	}
	resp := send(gatewayapi.PurposeResearch)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	eb := errorBody(g, resp)
	g.Expect(eb.Code).To(Equal(gatewayapi.CodeFinalizeOnly))
	g.Expect(eb.Message).To(ContainSubstring("declared purpose research"))
	g.Expect(rec.bodies).To(BeEmpty(), "the research request never reached the provider")

	for _, purpose := range []string{gatewayapi.PurposeOutput, ""} {
		resp = send(purpose)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "purpose %q", purpose)
		_ = resp.Body.Close()
	}
	g.Eventually(func() int64 { return e.Status().Usage.ModelRequests }).Should(BeEquivalentTo(2),
		"the refused research request was not counted")
}
