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

package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

const (
	wait = 5 * time.Second
	poll = 5 * time.Millisecond
)

// env is a real gateway (in this process) in front of a fake API server
// holding the attempt gatewaytest.Attempt describes.
type env struct {
	*gatewaytest.Env
	t *testing.T
	g Gomega
}

func newEnv(t *testing.T, mutate func(*v1.RunAttempt)) *env {
	t.Helper()
	return newEnvWith(t, gatewaytest.Options{Mutate: mutate})
}

func newEnvWith(t *testing.T, o gatewaytest.Options) *env {
	t.Helper()
	return &env{Env: gatewaytest.Start(t, o), t: t, g: NewWithT(t)}
}

// newAgent returns an agent on the env's attempt; setup registers
// interceptors and tools before Start.
func (e *env) newAgent(setup func(*agent.Agent)) *agent.Agent {
	e.t.Helper()
	a, err := agent.New(e.AgentConfig())
	e.g.Expect(err).NotTo(HaveOccurred())
	if setup != nil {
		setup(a)
	}
	return a
}

// start starts a (closing it when the test ends) and returns its context.
func (e *env) start(a *agent.Agent) context.Context {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	runCtx, err := a.Start(ctx)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.t.Cleanup(func() {
		closeCtx, done := context.WithTimeout(context.Background(), wait)
		defer done()
		_ = a.Close(closeCtx)
		cancel()
	})
	return runCtx
}

func (e *env) status() v1.RunAttemptStatus { return e.Status() }

func (e *env) tools(a *agent.Agent, ran *sync.Map) {
	e.t.Helper()
	mark := func(c *agent.Call) {
		if ran != nil {
			ran.Store(c.Name, true)
		}
	}
	// notes.write and report.publish are the gateway's built-ins: the
	// gateway runs them (Done sees the result); http.get is the agent's own.
	done := func(_ context.Context, c *agent.Call, _ string) { mark(c) }
	for _, t := range []agent.Tool{
		{Name: "http.get", Run: func(_ context.Context, c *agent.Call) (string, error) {
			mark(c)
			return "page " + c.StringArg("url"), nil
		}},
		{Name: "notes.write", Done: done},
		{Name: "report.publish", Output: true, Done: done},
	} {
		e.g.Expect(a.RegisterTool(t)).To(Succeed())
	}
}

// approve answers actionID on the attempt as the operator copies a user's
// answer from the ResearchRun.
func (e *env) approve(actionID string, decision v1.ApprovalDecision, approver, comment string) {
	e.t.Helper()
	e.UpdateSpec(func(s *v1.RunAttemptSpec) {
		d := gatewaytest.Decision(actionID, decision)
		d.Approver, d.Comment = approver, comment
		s.Approvals = append(s.Approvals, d)
	})
}

// actionID is the id under which the gateway awaits an approval of the call.
// It never depends on the call's context.
func actionID(t *testing.T, tool string, args any) string {
	t.Helper()
	id, err := gatewayapi.ActionIDOf(tool, args)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func fingerprint(t *testing.T, tool string, args any, callContext string) string {
	t.Helper()
	fp, err := gatewayapi.Fingerprint(tool, args, callContext)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// preApproved starts e with the calls approved each time they wait, as a
// person who already decided would (an approval answers only a call that
// waits when it is given).
func preApproved(e *env, ids ...string) *env {
	e.ApproveWhenAsked(ids...)
	return e
}

// ask makes one model request with the agent's OpenAI client, inside the
// interceptor chain; turn, when set, is what the scripted upstream answers.
func ask(ctx context.Context, a *agent.Agent, model string, turn *upstream.Turn) (*openai.ChatCompletion, error) {
	var out *openai.ChatCompletion
	err := a.ModelRequest(ctx, model, func(ctx context.Context) error {
		var opts []option.RequestOption
		if turn != nil {
			opts = append(opts, option.WithJSONSet(upstream.ScriptField, turn))
		}
		var err error
		c := a.OpenAI()
		out, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what next?")},
		}, opts...)
		return err
	})
	return out, err
}

func faultCount(s v1.RunAttemptStatus, scope v1.FaultScope, kind string) int64 {
	for _, f := range s.Faults {
		if f.Scope == scope && f.Kind == kind {
			return f.Count
		}
	}
	return 0
}

func findFault(s v1.RunAttemptStatus, scope v1.FaultScope, kind string) (v1.Fault, bool) {
	for _, f := range s.Faults {
		if f.Scope == scope && f.Kind == kind {
			return f, true
		}
	}
	return v1.Fault{}, false
}

// faults returns a function reading the count of (scope, kind) in the
// RunAttempt's status, for Eventually.
func (e *env) faults(scope v1.FaultScope, kind string) func() int64 {
	return func() int64 { return faultCount(e.status(), scope, kind) }
}

func (e *env) usage() v1.Usage { return e.status().Usage }

// histogramCount returns the sample count of
// agentrun_agent_interceptor_seconds{interceptor, outcome}.
func histogramCount(t *testing.T, a *agent.Agent, name, outcome string) uint64 {
	t.Helper()
	families, err := a.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "agentrun_agent_interceptor_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labels(m)["interceptor"] == name && labels(m)["outcome"] == outcome {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
