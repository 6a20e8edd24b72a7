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

package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrun-dev/agentrun/pkg/textutil"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Errors Run returns for faults a harness injected (Session.Crash and
// Session.Hang) when the process keeps running (Config.Exit returned:
// in-process tests).
var (
	// ErrCrashed: the harness crashed the agent (the real binary exits).
	ErrCrashed = errors.New("research agent crashed (injected)")
	// ErrHung: the harness froze the agent until its context ended.
	ErrHung = errors.New("research agent hung (injected) until stopped")

	// errFinalizing: the run started Finalizing while a research request
	// was being retried; finalization takes over.
	errFinalizing = errors.New("the run is finalizing")
)

// Config configures one run of the research agent.
type Config struct {
	// Agent says where the gateway is and how to prove who the attempt is,
	// and the clock.
	Agent agent.Config

	// Provider answers model requests. When nil it is Hooks.Provider's, or
	// else the OpenAI-compatible provider (OpenAI) through the gateway's
	// model door, which holds the provider keys and swaps in the policy's
	// degraded model under a Degrade directive.
	Provider Provider
	// Model is the model to ask the gateway for: one of the policy's
	// spec.models (required for the OpenAI-compatible provider).
	Model string
	// Hooks let a harness play the model and inject faults (tests and
	// demos); a real agent leaves them empty.
	Hooks Hooks

	// HTTPAllowlist lists the hosts http.get may fetch ("host", "host:port",
	// "*.example.org"); empty allows none.
	HTTPAllowlist []string
	// HTTPClient fetches pages and talks to the provider (default: 30s timeout).
	HTTPClient *http.Client
	// NotesPath, when set, is a file the notes are appended to (JSON lines).
	NotesPath string

	// ObeyAdvice makes the agent obey a reviewer's "continue" after it
	// proposed to finish: it reads the advice on its attempt and plays on.
	// Advice binds nobody else — the operator decides the run's end — so an
	// obeying agent is stopped where an ignoring one stops (the story that
	// proves advice inert, not only absent).
	ObeyAdvice bool

	// MaxRetries of a retryable provider error per request (default 3);
	// each retry is a model request counted against the grant.
	MaxRetries int
	// RetryBackoff is the first pause between retries, doubled each time up
	// to 30s (default 1s); a provider's Retry-After wins when longer.
	RetryBackoff time.Duration
	// RateLimitInterval spaces the calls of the rate_limit interceptor (0: none).
	RateLimitInterval time.Duration
	// AuditWriter receives the audit interceptor's JSON lines (default stderr).
	AuditWriter io.Writer
	// Interceptors adds (or replaces) interceptor implementations by name.
	Interceptors map[string]agent.Interceptor

	// Exit ends the process for an injected crash (Session.Crash);
	// cmd/research-agent sets os.Exit. When it is nil or returns (in-process
	// tests), Run returns ErrCrashed without writing anything more, like a
	// killed process.
	Exit func(code int)
	// Log receives the agent's logs.
	Log logr.Logger
}

func (c Config) withDefaults() Config {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 3
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = time.Second
	}
	if c.Log.GetSink() == nil {
		c.Log = logr.Discard()
	}
	if c.Agent.Log.GetSink() == nil {
		c.Agent.Log = c.Log
	}
	if c.AuditWriter == nil {
		c.AuditWriter = os.Stderr
	}
	return c
}

// runner is one run of the research loop.
type runner struct {
	cfg    Config
	ag     *agent.Agent
	log    logr.Logger
	clock  clock.Clock
	parent context.Context

	provider Provider
	location string
	notes    *notebook

	mu        sync.Mutex
	plan      []string
	published map[string]bool
	fetched   map[string]bool
	newNotes  int
	newPages  int
	messages  []Message
	crashed   atomic.Bool // crashed or hung: nothing more is written
	deadErr   error       // what Run returns once crashed
}

// Run runs the research agent for the RunAttempt cfg.Agent names, until it
// settles its publication or the run stops it: plan → tool calls → notes →
// publish sections → settle. It returns nil when the work settled or the
// run was Terminated (or the attempt superseded); an error when the agent
// could not start or failed (a fatal provider error is escalated first).
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	ag, err := agent.New(cfg.Agent)
	if err != nil {
		return err
	}
	r := &runner{
		cfg: cfg, ag: ag, log: cfg.Log, parent: ctx,
		notes:     &notebook{path: cfg.NotesPath},
		published: map[string]bool{},
		fetched:   map[string]bool{},
	}
	r.clock = clock.RealClock{}
	if cfg.Agent.Clock != nil {
		r.clock = cfg.Agent.Clock
	}
	for _, t := range r.tools() {
		if err := ag.RegisterTool(t); err != nil {
			return err
		}
	}
	identity := os.Getenv("POD_NAME")
	if identity == "" {
		identity = "research-agent"
	}
	interceptors := builtinInterceptors(identity, r.clock, cfg.RateLimitInterval, cfg.AuditWriter, cfg.Log)
	maps.Copy(interceptors, cfg.Interceptors)
	for name, ic := range interceptors {
		if err := ag.Register(name, ic); err != nil {
			return err
		}
	}

	runCtx, err := ag.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if r.crashed.Load() {
			return
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := ag.Close(closeCtx); err != nil {
			r.log.Error(err, "Could not write the last facts")
		}
	}()
	r.provider, err = r.buildProvider(ag.Attempt())
	if err != nil {
		_ = ag.Escalate(runCtx, v1alpha1.FaultScopeAgent, "BadConfiguration", err.Error())
		return err
	}
	return r.loop(runCtx)
}

func (r *runner) buildProvider(at gatewayapi.Attempt) (Provider, error) {
	switch {
	case r.cfg.Provider != nil:
		return r.cfg.Provider, nil
	case r.cfg.Hooks.Provider != nil:
		return r.cfg.Hooks.Provider(Session{Attempt: at, OpenAI: r.ag.OpenAI(), Crash: r.crash, Hang: r.hang})
	case r.cfg.Model == "":
		return nil, fmt.Errorf("the openai provider needs --model: one of the models the policy serves %q", at.Models)
	}
	return &OpenAI{Client: r.ag.OpenAI()}, nil
}

// crash ends the process as a kill would: nothing more is written.
func (r *runner) crash(code int) error {
	r.log.Info("Crashing (injected)", "exitCode", code)
	r.die(ErrCrashed)
	if r.cfg.Exit != nil {
		r.cfg.Exit(code)
	}
	return ErrCrashed
}

func (r *runner) die(err error) {
	r.mu.Lock()
	if r.deadErr == nil {
		r.deadErr = err
	}
	r.mu.Unlock()
	r.crashed.Store(true)
	r.ag.Abort()
}

func (r *runner) dead() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deadErr
}

// hang freezes the agent: no heartbeats, no writes, until the process is
// stopped (its context ends).
func (r *runner) hang() error {
	r.log.Info("Hanging (injected)")
	r.die(ErrHung)
	<-r.parent.Done()
	return ErrHung
}

// loop is plan → steps → finalize → settle.
func (r *runner) loop(ctx context.Context) error {
	at := r.ag.Attempt()
	var plan []string
	published := map[string]bool{}
	rep, err := r.ag.Report(ctx)
	if err != nil {
		r.log.Error(err, "Could not read the report; starting from scratch")
	}
	r.location = rep.Location
	for _, s := range rep.Sections {
		plan = append(plan, s.Name)
		if s.Published {
			published[s.Name] = true
		}
	}
	r.mu.Lock()
	r.plan, r.published = plan, published
	r.mu.Unlock()
	r.messages = []Message{{Role: roleSystem, Content: systemPrompt}, {Role: roleUser, Content: "Goal: " + at.Goal}}

	if len(plan) == 0 && !r.ag.Finalizing() {
		resp, err := r.complete(ctx, Request{Purpose: PurposePlan, Messages: append(slices.Clone(r.messages),
			Message{Role: roleUser, Content: planPrompt})})
		if done, rerr := r.handle(ctx, err); done {
			return rerr
		}
		plan = parsePlan(resp.Content)
		if len(plan) == 0 {
			plan = []string{"Findings"}
		}
		if rep, perr := r.ag.PlanReport(ctx, plan); perr == nil {
			// A plan an earlier attempt persisted wins.
			plan = plan[:0]
			for _, s := range rep.Sections {
				plan = append(plan, s.Name)
			}
			r.location = rep.Location
		} else if r.crashed.Load() || ctx.Err() != nil {
			return r.stopped(ctx)
		} else {
			r.log.Error(perr, "Could not persist the plan")
		}
		r.mu.Lock()
		r.plan = plan
		r.mu.Unlock()
		r.step(ctx, err == nil)
	}
	planned := "Planned sections: " + strings.Join(r.planCopy(), "; ")
	r.messages = append(r.messages, Message{Role: roleUser, Content: planned})

	for !r.ag.Finalizing() {
		resp, err := r.complete(ctx, r.stepRequest())
		if errors.Is(err, agent.ErrGrantExhausted) {
			// The working allowance is used up: the operator decides next
			// (Finalizing from the reserve, or Terminated).
			r.log.Info("Grant exhausted; waiting for the operator's decision")
			select {
			case <-r.ag.FinalizingStarted():
				continue
			case <-ctx.Done():
				return r.stopped(ctx)
			}
		}
		if done, rerr := r.handle(ctx, err); done {
			return rerr
		}
		if errors.Is(err, errFinalizing) || errors.Is(err, agent.ErrFinalizeOnly) {
			continue // not a step: finalization takes over
		}
		if err != nil {
			r.step(ctx, false)
			continue
		}
		r.messages = append(r.messages, Message{Role: roleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls})
		progress, err := r.act(ctx, resp.ToolCalls)
		if err != nil {
			return err
		}
		r.step(ctx, progress)
		r.checkpoint(ctx)
		if resp.Finish {
			// Advice on a finish (a reviewer's "continue") is recorded with
			// it — the finish's write carries it, so the operator decides
			// with the advice in hand — and cannot extend the run, whether
			// the agent obeys it or not.
			for _, a := range resp.Advice {
				if err := r.ag.RecordAdvice(ctx, a.Source, a.Kind); err != nil {
					r.log.Error(err, "Could not record advice")
				}
			}
			if err := r.ag.ProposeFinish(ctx); err != nil {
				return r.stopped(ctx)
			}
			if r.cfg.ObeyAdvice && r.adviceSaysContinue(ctx) {
				r.log.Info("Obeying a reviewer's continue after finish; the operator decides whether it counts")
				continue
			}
			break
		}
	}
	return r.finalize(ctx)
}

// adviceSaysContinue says whether the advice on the attempt, as the
// gateway holds it now, asks to go on.
func (r *runner) adviceSaysContinue(ctx context.Context) bool {
	v, err := r.ag.Fetch(ctx)
	return err == nil && slices.ContainsFunc(v.Advice, func(a v1alpha1.Advice) bool { return a.Kind == "Continue" })
}

// handle decides what a model request's error means for the loop: done
// (with Run's result) for a stop, a crash or a fatal error; otherwise go on.
func (r *runner) handle(ctx context.Context, err error) (bool, error) {
	switch {
	case err == nil:
		return false, nil
	case r.crashed.Load():
		return true, r.dead()
	case ctx.Err() != nil:
		return true, r.stopped(ctx)
	case errors.Is(err, agent.ErrGrantExhausted), errors.Is(err, agent.ErrFinalizeOnly), errors.Is(err, errFinalizing):
		return false, nil
	case agent.IsRefusal(err):
		// Refused locally (an interceptor, a veto): pause before the next
		// turn rather than spin; the operator's gates bound the run.
		select {
		case <-ctx.Done():
			return true, r.stopped(ctx)
		case <-r.clock.After(r.cfg.RetryBackoff):
		}
		return false, nil
	}
	var fe *agent.FaultError
	if errors.As(err, &fe) && fe.Retryable {
		return false, nil // retries exhausted: a local fault; the next turn tries again
	}
	kind := "Fatal"
	if fe != nil {
		kind = fe.Kind
	}
	r.log.Error(err, "Fatal model provider error; escalating")
	if eerr := r.ag.Escalate(ctx, v1alpha1.FaultScopeProvider, kind, err.Error()); eerr != nil {
		r.log.Error(eerr, "Could not escalate")
	}
	return true, fmt.Errorf("fatal model provider error: %w", err)
}

// stopped is Run's result when the attempt's context ended: clean when the
// run stopped it.
func (r *runner) stopped(ctx context.Context) error {
	cause := context.Cause(ctx)
	if r.crashed.Load() {
		return r.dead()
	}
	if agent.Stopped(cause) || r.parent.Err() != nil {
		// The run stopped this attempt, or the process was told to stop
		// (SIGTERM when the pod is deleted): a clean exit.
		r.log.Info("Stopping", "cause", cause.Error())
		return nil
	}
	return cause
}

// complete makes one model request, retrying retryable provider errors with
// backoff; every try is a model request within the grant.
func (r *runner) complete(ctx context.Context, req Request) (Response, error) {
	if req.Model == "" {
		req.Model = r.cfg.Model
	}
	research := req.Purpose != PurposeFinalize
	for try := 1; ; try++ {
		if research && r.ag.Finalizing() {
			return Response{}, errFinalizing
		}
		var resp Response
		err := r.ag.ModelRequest(ctx, req.Model, func(ctx context.Context) error {
			var err error
			resp, err = r.provider.Complete(ctx, req)
			return err
		})
		if err == nil || r.crashed.Load() || agent.IsRefusal(err) || ctx.Err() != nil {
			return resp, err
		}
		var fe *agent.FaultError
		if !errors.As(err, &fe) || !fe.Retryable || try > r.cfg.MaxRetries {
			return resp, err
		}
		wait := min(r.cfg.RetryBackoff<<(try-1), 30*time.Second)
		var pe *ProviderError
		if errors.As(err, &pe) && pe.RetryAfter > wait {
			wait = pe.RetryAfter
		}
		if ra := retryAfter(err); ra > wait {
			wait = ra
		}
		r.log.Info("Retrying model request", "purpose", req.Purpose, "try", try, "wait", wait, "error", err.Error())
		finalizing := r.ag.FinalizingStarted()
		if !research {
			finalizing = nil
		}
		select {
		case <-ctx.Done():
			return resp, context.Cause(ctx)
		case <-finalizing:
			return resp, errFinalizing
		case <-r.clock.After(wait):
		}
	}
}

// maxMessages bounds the conversation kept for the model.
const maxMessages = 64

// stepRequest builds the next step's request, obeying the directives:
// Degrade offers fewer tools (no more fetching), Compress compacts the
// conversation to the notes and the latest exchange.
func (r *runner) stepRequest() Request {
	tools := r.ag.Tools()
	degrade := r.ag.HasDirective(v1alpha1.DirectiveDegrade)
	req := Request{Purpose: PurposeStep}
	for _, t := range tools {
		if degrade && t.Name == ToolHTTPGet {
			continue
		}
		req.Tools = append(req.Tools, ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	if r.ag.HasDirective(v1alpha1.DirectiveCompress) && len(r.messages) > 6 {
		head := slices.Clone(r.messages[:2])
		head = append(head, Message{Role: roleUser, Content: "Context compacted. Planned sections: " +
			strings.Join(r.planCopy(), "; ") + "\nNotes so far:\n" + r.notes.summary(4096)})
		r.messages = append(head, tailFrom(r.messages[2:], 4)...)
	}
	if len(r.messages) > maxMessages {
		r.messages = append(slices.Clone(r.messages[:2]), tailFrom(r.messages[2:], maxMessages-2)...)
	}
	req.Messages = slices.Clone(r.messages)
	return req
}

// tailFrom returns the last n messages, starting at an assistant or user
// message so no tool answer is separated from its call.
func tailFrom(msgs []Message, n int) []Message {
	if len(msgs) <= n {
		return msgs
	}
	start := len(msgs) - n
	for start < len(msgs) && msgs[start].Role == roleTool {
		start++
	}
	return slices.Clone(msgs[start:])
}

// act runs the model's tool calls; progress says whether any made
// progress (a new note, a new page, a published section).
func (r *runner) act(ctx context.Context, calls []ToolCall) (progress bool, err error) {
	r.mu.Lock()
	notes, pages, pubs := r.newNotes, r.newPages, len(r.published)
	r.mu.Unlock()
	for i, tc := range calls {
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d", i)
		}
		var res string
		var cerr error
		if r.cfg.Hooks.BeforeToolCall != nil && r.ag.Served(tc.Name) {
			// The gateway runs this tool: the hook runs here, before the
			// call is made.
			cerr = r.beforeServed(ctx, tc)
		}
		if cerr == nil && !r.crashed.Load() {
			res, cerr = r.ag.CallTool(r.withCall(ctx, tc), tc.Name, tc.Args)
		}
		if r.crashed.Load() {
			return false, r.dead()
		}
		switch {
		case cerr == nil:
		case ctx.Err() != nil:
			return false, r.stopped(ctx)
		case agent.IsRefusal(cerr):
			res = "refused: " + cerr.Error()
		default:
			res = "error: " + cerr.Error()
		}
		r.messages = append(r.messages, Message{Role: roleTool, ToolCallID: tc.ID, Content: textutil.Truncate(res, 8192)})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.newNotes > notes || r.newPages > pages || len(r.published) > pubs, nil
}

// finalize does output work only: it asks the model once (from the
// reserve) to publish what is left, publishes remaining sections from the
// notes, and settles what was actually persisted.
func (r *runner) finalize(ctx context.Context) error {
	if ctx.Err() != nil {
		return r.stopped(ctx)
	}
	if missing := r.missing(); len(missing) > 0 {
		req := Request{Purpose: PurposeFinalize, Sections: missing, Messages: append(slices.Clone(r.messages), Message{
			Role: roleUser, Content: fmt.Sprintf(finalizePrompt, strings.Join(missing, "; "), r.notes.summary(8192)),
		})}
		for _, t := range r.ag.Tools() {
			if t.Output {
				req.Tools = append(req.Tools, ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
			}
		}
		resp, err := r.complete(ctx, req)
		if done, rerr := r.handle(ctx, err); done {
			return rerr
		}
		if err == nil {
			r.messages = append(r.messages, Message{Role: roleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls})
			if _, err := r.act(ctx, resp.ToolCalls); err != nil {
				return err
			}
		}
		// What the model did not publish is published from the notes.
		for _, section := range r.missing() {
			notes := r.notes.forSection(section)
			if len(notes) == 0 {
				continue
			}
			args := map[string]any{argSection: section, argContent: strings.Join(notes, "\n\n")}
			_, err := r.ag.CallTool(ctx, ToolReportPublish, args)
			if r.crashed.Load() {
				return r.dead()
			}
			if ctx.Err() != nil {
				return r.stopped(ctx)
			}
			if err != nil {
				r.log.Info("Section not published", "section", section, "error", err.Error())
			}
		}
	}
	return r.settle(ctx)
}

// settle persists the settlement: Complete if every planned section is in
// the report ConfigMap, Partial if some are, None if none.
func (r *runner) settle(ctx context.Context) error {
	r.checkpoint(ctx)
	s, err := r.ag.Settle(ctx)
	if err != nil {
		if ctx.Err() != nil || agent.Stopped(err) {
			return r.stopped(ctx)
		}
		return fmt.Errorf("settle: %w", err)
	}
	r.log.Info("Settled", "settlement", s.Settlement, "committed", s.BlocksCommitted, "planned", s.BlocksPlanned)
	return nil
}

func (r *runner) planCopy() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.plan)
}

func (r *runner) missing() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.plan {
		if !r.published[s] {
			out = append(out, s)
		}
	}
	return out
}

// step reports one step.
func (r *runner) step(ctx context.Context, progress bool) {
	if _, err := r.ag.Step(ctx, progress); err != nil && ctx.Err() == nil && !r.crashed.Load() {
		r.log.Error(err, "Could not report a step")
	}
}

// checkpoint reports where the work is: the plan and the sections
// published (the report ConfigMap is the durable copy).
func (r *runner) checkpoint(ctx context.Context) {
	r.mu.Lock()
	cp := struct {
		Plan      []string `json:"plan"`
		Published []string `json:"published"`
		Notes     int      `json:"notes"`
	}{Plan: r.plan, Notes: r.newNotes}
	for _, s := range r.plan {
		if r.published[s] {
			cp.Published = append(cp.Published, s)
		}
	}
	r.mu.Unlock()
	raw, _ := json.Marshal(cp)
	if len(raw) <= agent.MaxCheckpoint {
		if err := r.ag.SetCheckpoint(ctx, string(raw)); err != nil && ctx.Err() == nil && !r.crashed.Load() {
			r.log.Error(err, "Could not report the checkpoint")
		}
	}
}

const systemPrompt = `You are a research agent working for a Kubernetes operator.
Tools: http.get fetches pages from allow-listed hosts; notes.write records a finding tagged with its report section;
report.publish publishes one planned section of the report (durable, needs the user's approval).
Work step by step: read sources, take notes per section, publish every planned section.
When every section is published, answer with a short final message and no tool calls.`

const planPrompt = `Plan the report: answer with a JSON array of 2 to 6 section titles and nothing else.`

const finalizePrompt = `The run is finalizing: no more research.
Publish the remaining sections now with report.publish: %s.
Your notes:
%s`
