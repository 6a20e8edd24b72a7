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
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// events collects what the gateway emits, as the stream producer would
// receive it.
type events struct {
	mu  sync.Mutex
	run []stream.RunKey
	evs []stream.Event
}

func (c *events) Emit(run stream.RunKey, ev stream.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.run, c.evs = append(c.run, run), append(c.evs, ev)
	return nil
}

func (c *events) all() []stream.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]stream.Event(nil), c.evs...)
}

func (c *events) types() []string {
	var out []string
	for _, ev := range c.all() {
		out = append(out, string(ev.Type))
	}
	return out
}

var _ gateway.Emitter = (*events)(nil)

func streamEnv(t *testing.T, mutate ...func(*v1alpha1.RunAttempt)) (*gatewaytest.Env, *events, *toolUpstream) {
	t.Helper()
	col := &events{}
	e, tools := streamEnvTo(t, col, mutate...)
	return e, col, tools
}

// streamEnvTo starts a gateway whose attempt has the fake provider and a
// tool server, emitting its run-stream events to em.
func streamEnvTo(t *testing.T, em gateway.Emitter, mutate ...func(*v1alpha1.RunAttempt)) (*gatewaytest.Env, *toolUpstream) {
	t.Helper()
	up := httptest.NewServer(&upstream.Server{})
	t.Cleanup(up.Close)
	tools := startToolUpstream(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "provider",
		Labels: map[string]string{v1alpha1.LabelProviderKey: "true"}}, Data: map[string][]byte{"key": []byte("sk-1")}}
	e := gatewaytest.Start(t, gatewaytest.Options{Objects: []client.Object{secret}, Events: em, Mutate: func(ra *v1alpha1.RunAttempt) {
		for i := range ra.Spec.Policy.Models {
			ra.Spec.Policy.Models[i].BaseURL = up.URL + "/v1"
		}
		p := &ra.Spec.Policy
		p.ToolServers = []v1alpha1.ToolServer{{Name: "tools", URL: tools.srv.URL + toolserver.PathMCP}}
		p.Tools = append(p.Tools, v1alpha1.Tool{Name: "search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tools"})
		for _, m := range mutate {
			m(ra)
		}
	}})
	return e, tools
}

// A streamed model answer becomes reasoning, text and tool-call blocks of
// the run, in the order the provider sent them, inside one step.
func TestModelStreamBecomesRunStreamBlocks(t *testing.T) {
	g := NewWithT(t)
	e, col, _ := streamEnv(t)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted",
		`,"stream":true,"agentrun_scripted":{"think":"the user wants sources","say":"Searching for vector databases now.",`+
			`"tools":[{"id":"call-1","name":"search","arguments":{"q":"vector databases","api_key":"sk-live-1234567890abcdef"}}]}`))
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(body)).To(ContainSubstring("[DONE]"), "the agent's answer is relayed unchanged")

	g.Eventually(col.types).Should(ContainElement("STEP_FINISHED"))
	evs := col.all()
	g.Expect(col.run[0]).To(Equal(stream.RunKey{Namespace: gatewaytest.Namespace, Name: gatewaytest.Run, UID: gatewaytest.RunUID}),
		"a run's events are keyed by its UID")
	g.Expect(evs[0].Type).To(Equal(stream.StepStarted))
	var text, reasoning, args strings.Builder
	var order []stream.EventType
	for _, ev := range evs {
		g.Expect(ev.Validate()).To(Succeed())
		g.Expect(string(ev.Metadata)).To(ContainSubstring(`"source":"gateway"`))
		switch ev.Type {
		case stream.TextMessageContent:
			text.WriteString(ev.Delta)
		case stream.ReasoningMessageContent:
			reasoning.WriteString(ev.Delta)
		case stream.ToolCallArgs:
			args.WriteString(ev.Delta)
		case stream.ReasoningStart, stream.TextMessageStart, stream.ToolCallStart, stream.ToolCallEnd:
			order = append(order, ev.Type)
		}
	}
	g.Expect(reasoning.String()).To(Equal("the user wants sources"))
	g.Expect(text.String()).To(Equal("Searching for vector databases now."))
	g.Expect(args.String()).To(ContainSubstring("vector databases"))
	g.Expect(args.String()).NotTo(ContainSubstring("sk-live"), "tool arguments are redacted before they are stored")
	g.Expect(order).To(Equal([]stream.EventType{stream.ReasoningStart, stream.TextMessageStart, stream.ToolCallStart, stream.ToolCallEnd}))
	g.Expect(evs[len(evs)-1].Type).To(Equal(stream.StepFinished))
}

// A tool call through the door is a tool-call block with its (redacted)
// arguments and its result; a refused one says why.
func TestToolDoorCallsAndRefusalsBecomeRunStreamEvents(t *testing.T) {
	g := NewWithT(t)
	e, col, _ := streamEnv(t)
	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search",
		Arguments: map[string]any{"q": "raft", "password": "hunter2-secret"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), resultText(res))
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "no.such.tool"})
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(col.types).Should(Equal([]string{"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "CUSTOM"}))
	evs := col.all()
	g.Expect(evs[0].ToolCallName).To(Equal("search"))
	for _, ev := range evs[1:4] {
		g.Expect(ev.ToolCallID).To(Equal(evs[0].ToolCallID), "one block id ties the call together")
	}
	g.Expect(evs[1].Delta).To(ContainSubstring(`"q":"raft"`))
	g.Expect(evs[1].Delta).NotTo(ContainSubstring("hunter2"))
	g.Expect(evs[3].Content).To(Equal(resultText(res)))
	g.Expect(evs[4].Name).To(Equal(gateway.EventRefused))
	g.Expect(string(evs[4].Value)).To(And(ContainSubstring(`"code":"unknown_tool"`), ContainSubstring("no.such.tool")))
}

// A call the model proposed and the agent then makes through the door is
// one block: the door's result is the model's block's TOOL_CALL_RESULT.
func TestADoorCallOfAProposedCallResultsInTheModelsBlock(t *testing.T) {
	g := NewWithT(t)
	e, col, _ := streamEnv(t)
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted",
		`,"stream":true,"agentrun_scripted":{"tools":[{"id":"call-7","name":"search","arguments":{"q":"raft"}}]}`))
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	g.Eventually(col.types).Should(ContainElement("STEP_FINISHED"))
	before := len(col.all())

	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "raft"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int { return len(col.all()) }).Should(Equal(before + 1))
	last := col.all()[before]
	g.Expect(last.Type).To(Equal(stream.ToolCallResult))
	g.Expect(last.ToolCallID).To(Equal("call-7"), "the model's block")
	g.Expect(last.Content).To(Equal(resultText(res)))

	why := "the same call again: its proposal is spent, so it is a block of its own"
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "raft"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int { return len(col.all()) }).Should(Equal(before+5), why)
	g.Expect(col.all()[before+1].Type).To(Equal(stream.ToolCallStart))
}

// A call the gateway refuses streams its block with its arguments cut to a
// small bound: five refused calls of 200 KiB of arguments each stream a
// few KiB, not 1 MiB.
func TestARefusedToolCallStreamsBoundedArguments(t *testing.T) {
	g := NewWithT(t)
	e, col, tools := streamEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ToolCalls = 0 })
	cs := connectDoor(t, e, gatewaytest.Token)
	big := strings.Repeat("a", 200<<10)
	for range 5 {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": big}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resultText(res)).To(ContainSubstring("grant_exhausted"))
	}
	g.Expect(tools.count("search")).To(BeZero())

	g.Eventually(func() int { return len(col.all()) }).Should(Equal(5 * 5)) // START, ARGS, END, RESULT, CUSTOM refused
	total, results := 0, 0
	for _, ev := range col.all() {
		total += ev.Size()
		if ev.Type == stream.ToolCallArgs {
			g.Expect(len(ev.Delta)).To(BeNumerically("<=", 256), "a refused call's arguments are cut")
			g.Expect(ev.Delta).To(HavePrefix(`{"q":"aaa`))
		}
		if ev.Type == stream.ToolCallResult {
			results++
			g.Expect(ev.Content).To(ContainSubstring("grant_exhausted"))
		}
	}
	g.Expect(results).To(Equal(5))
	g.Expect(total).To(BeNumerically("<", 5*2<<10), "five refused calls stream a few KiB")
}

// One run that streams far more than its policy's spec.events.maxBytes
// cannot evict another run's history from the store, whose byte limit is
// stream-wide: past its budget the noisy run's deltas are dropped (a marker
// says so) and its finals still arrive.
func TestOneNoisyRunCannotEvictAnotherRunsHistory(t *testing.T) {
	g := NewWithT(t)
	st, err := store.Open(t.Context(), store.Config{Dir: t.TempDir(), MaxBytes: 1 << 20})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(st.Close)
	prod := store.NewProducer(st, store.ProducerOptions{})
	go prod.Run(t.Context())

	quiet := stream.RunKey{Namespace: "team-b", Name: "quiet", UID: "uid-quiet"}
	for i := range 20 {
		_, err := st.Publish(t.Context(), quiet, stream.Event{Type: stream.StepStarted, StepName: fmt.Sprintf("step-%d", i)})
		g.Expect(err).NotTo(HaveOccurred())
	}

	budget := resource.MustParse("64Ki")
	e, _ := streamEnvTo(t, prod, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.ModelRequests = 100
		ra.Spec.Policy.Events.MaxBytes = &budget
	})
	say := strings.Repeat("noise ", 100<<10/6)
	for range 20 { // 2 MiB of text against a 1 MiB store
		resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted",
			`,"stream":true,"agentrun_scripted":{"say":"`+say+`"}`))
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}
	g.Expect(prod.Flush(t.Context())).To(Succeed())

	b, err := st.Bounds(t.Context(), quiet)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).To(Equal(store.Bounds{Oldest: 1, Last: 20}), "the quiet run's history is all there")

	noisy := stream.RunKey{Namespace: gatewaytest.Namespace, Name: gatewaytest.Run, UID: gatewaytest.RunUID}
	var stored, markers, finished int
	g.Expect(st.Replay(t.Context(), noisy, 0, func(ev stream.Event) error {
		stored += ev.Size()
		if ev.Type == stream.Custom && ev.Name == stream.EventBudgetExceeded {
			markers++
		}
		if ev.Type == stream.StepFinished {
			finished++
		}
		return nil
	})).To(Succeed())
	g.Expect(markers).To(Equal(1), "the marker says the run went over its budget, once")
	g.Expect(finished).To(Equal(20), "finals are never dropped")
	g.Expect(stored).To(BeNumerically("<", 64<<10+20*2<<10), "the noisy run stored its budget and small finals")
	g.Expect(e.Metric("agentrun_gateway_stream_budget_dropped_total",
		map[string]string{"namespace": gatewaytest.Namespace})).To(BeNumerically(">", 0))
}
