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

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/agentrun-dev/agentrun/pkg/textutil"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/clock"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Tool is a tool implementation the agent registers. Its risk, effect and
// idempotency are not the agent's to declare: they come from the policy's
// tool catalogue, and the gateway refuses a tool missing from it.
type Tool struct {
	// Name as the catalogue and the model call it, e.g. "http.get".
	Name string
	// Description is shown to the model.
	Description string
	// Parameters is the JSON schema of the arguments, shown to the model.
	Parameters map[string]any
	// Output marks a publication tool (report.publish): the only kind of
	// tool the gateway admits while the run is Finalizing.
	Output bool
	// Run performs the call. The gateway has checked the grant, the
	// permission matrix and approvals, counted the call and, for a
	// side-effecting tool, persisted the write-ahead record before Run is
	// called; the Pre and Around interceptors have run. Returning a
	// FaultError (see Failure) names the fault's kind. When the policy's
	// catalogue says the gateway serves the tool (a built-in or a tool
	// server's tool), the call goes through the gateway's tool door and Run
	// is not called.
	Run func(ctx context.Context, call *Call) (string, error)
	// Done, when set, sees the result of a successful call the gateway
	// served (local bookkeeping: what was noted, fetched or published).
	Done func(ctx context.Context, call *Call, result string)
}

// Agent is the SDK's handle on one attempt, a client of the gateway: it
// follows the attempt's view (grant, phase, mode, directives, approvals),
// reports the facts only the agent knows (steps, finish, checkpoint, advice,
// faults), reports every tool call before and after it runs, publishes
// through the gateway, and runs the policy's interceptor chain around model
// requests and tool calls.
//
// Create it with New, register interceptors and tools, then Start. All
// methods are safe for concurrent use.
type Agent struct {
	cfg     Config
	log     logr.Logger
	clock   clock.WithTickerAndDelayedExecution
	metrics *metrics

	// Registrations, fixed once Start is called.
	interceptors map[string]Interceptor
	tools        map[string]Tool
	onDirectives []func([]v1alpha1.Directive)
	chain        []link
	outbox       outbox

	mu       sync.Mutex
	started  bool
	closed   bool
	aborted  bool
	view     gatewayapi.Attempt
	haveView bool
	callSeq  int64

	doorMu      sync.Mutex
	doorSession *mcp.ClientSession
	wake        chan struct{}

	finalizing       chan struct{}
	finalizingClosed bool
	dirMu            sync.Mutex
	directives       chan []v1alpha1.Directive

	runCtx    context.Context
	cancelRun context.CancelCauseFunc
	bgCancel  context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New returns an agent for the gateway cfg names. It does not contact the
// gateway; Start does.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Agent{
		cfg:          cfg,
		log:          cfg.Log,
		clock:        cfg.Clock,
		metrics:      newMetrics(cfg.Registry),
		interceptors: map[string]Interceptor{},
		tools:        map[string]Tool{},
		outbox:       outbox{limit: cfg.BufferSize},
		wake:         make(chan struct{}),
		finalizing:   make(chan struct{}),
		directives:   make(chan []v1alpha1.Directive, 1),
	}, nil
}

// Register registers the implementation of the interceptor the policy's
// chain calls name. Start refuses to start if the resolved chain names an
// interceptor that is not registered.
func (a *Agent) Register(name string, ic Interceptor) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.started:
		return fmt.Errorf("agent: interceptor %q registered after Start", name)
	case name == "":
		return errors.New("agent: interceptor without a name")
	case ic.Pre == nil && ic.Around == nil && ic.Post == nil:
		return fmt.Errorf("agent: interceptor %q has no hook", name)
	}
	if _, dup := a.interceptors[name]; dup {
		return fmt.Errorf("agent: interceptor %q registered twice", name)
	}
	a.interceptors[name] = ic
	return nil
}

// RegisterTool registers a tool implementation.
func (a *Agent) RegisterTool(t Tool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.started:
		return fmt.Errorf("agent: tool %q registered after Start", t.Name)
	case t.Name == "":
		return errors.New("agent: tool without a name")
	case t.Run == nil && t.Done == nil:
		return fmt.Errorf("agent: tool %q has neither Run (a tool the agent runs) nor Done (one the gateway serves)", t.Name)
	}
	if _, dup := a.tools[t.Name]; dup {
		return fmt.Errorf("agent: tool %q registered twice", t.Name)
	}
	a.tools[t.Name] = t
	return nil
}

// OnDirectives registers a callback called with the current directives
// whenever they change (Degrade, Compress). It runs on the SDK's goroutine
// and must not block. Register before Start.
func (a *Agent) OnDirectives(fn func([]v1alpha1.Directive)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onDirectives = append(a.onDirectives, fn)
}

// Tools returns the registered tools that the policy's catalogue lists, for
// offering to a model, sorted by name.
func (a *Agent) Tools() []Tool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Tool
	for _, t := range a.tools {
		if !a.haveView || slices.ContainsFunc(a.view.Tools, func(c v1alpha1.Tool) bool { return c.Name == t.Name }) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(x, y Tool) int {
		switch {
		case x.Name < y.Name:
			return -1
		case x.Name > y.Name:
			return 1
		}
		return 0
	})
	return out
}

// maxNotAnAttempt is how many times Start asks again while the gateway says
// the pod is not (yet) an attempt's: the operator records the pod's UID on
// the RunAttempt a moment after the pod starts, and the gateway waits for it
// on each request.
const maxNotAnAttempt = 4

// maxCutOff bounds how often Start reads its attempt again after the
// gateway closed the connection mid-request (a gateway restart; with the
// backoff, about a minute in all).
const maxCutOff = 15

// Start reads the attempt's view from the gateway, checks that every
// interceptor of the policy's resolved chain is registered (else it reports
// an escalated fault and refuses to start), and starts following the view
// and sending heartbeats.
//
// The returned context is the attempt's: it is cancelled when the run is
// Terminated or the attempt superseded (see Stopped and context.Cause), or
// when ctx is. Use it for the agent loop.
func (a *Agent) Start(ctx context.Context) (context.Context, error) {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return nil, errors.New("agent: already started")
	}
	a.started = true
	a.mu.Unlock()

	var view gatewayapi.Attempt
	var err error
	wait := 200 * time.Millisecond
	// Each kind of answer is counted on its own: asking again while the
	// gateway cannot reach the API server must not use up the waits for the
	// operator to record the pod (an API server restart delays both).
	cutOffs, notAttempt := 0, 0
	for {
		err = a.call(ctx, http.MethodGet, "/self", nil, &view)
		var ge *GatewayError
		if err != nil && !errors.As(err, &ge) && ctx.Err() == nil && cutOff(err) && cutOffs < maxCutOff {
			cutOffs++
			// The gateway went away mid-request (a restart): a read, so
			// asking again counts nothing.
			a.log.Info("The gateway closed the connection; asking again", "error", err.Error())
			select {
			case <-ctx.Done():
			case <-a.clock.After(wait):
			}
			wait = min(wait*2, 5*time.Second)
			continue
		}
		if err == nil || !errors.As(err, &ge) || ctx.Err() != nil {
			break
		}
		if ge.Code == gatewayapi.CodeNotPersisted {
			// The gateway could not reach the API server (to check the token,
			// to read the attempt): a read, so asking again counts nothing.
			a.log.Info("The gateway cannot reach the API server yet; asking again", "message", ge.Message)
			select {
			case <-ctx.Done():
			case <-a.clock.After(wait):
			}
			wait = min(wait*2, 5*time.Second)
			continue
		}
		if notAttempt++; ge.Code != gatewayapi.CodeNotAnAttempt || notAttempt >= maxNotAnAttempt {
			break
		}
		a.log.Info("Waiting for the operator to record this pod on its RunAttempt", "message", ge.Message)
	}
	if err != nil {
		a.markClosed()
		return nil, fmt.Errorf("agent: read the attempt from the gateway at %s: %w", a.cfg.GatewayURL, err)
	}
	a.log = a.log.WithValues("runattempt", view.Namespace+"/"+view.RunAttempt)
	a.applyView(view)

	links, err := resolveChain(view.Policy, view.Chain, a.interceptors)
	if err != nil {
		// Say why before refusing: the operator sees an escalated fault
		// instead of a silent crash loop.
		if ferr := a.call(ctx, http.MethodPost, "/self/faults", gatewayapi.FaultRequest{
			Scope: v1alpha1.FaultScopeAgent, Kind: "UnregisteredInterceptor", Escalate: true,
			Message: textutil.Truncate(err.Error(), 512),
		}, nil); ferr != nil {
			a.log.Error(ferr, "Could not report the refusal to start")
		}
		a.markClosed()
		return nil, err
	}
	a.chain = links

	runCtx, cancelRun := context.WithCancelCause(ctx)
	bg, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	a.mu.Lock()
	a.runCtx, a.cancelRun, a.bgCancel = runCtx, cancelRun, bgCancel
	a.mu.Unlock()
	a.wg.Add(3)
	go a.watchLoop(bg)
	go a.heartbeatLoop(bg)
	go a.resendLoop(bg)

	if cause := stopCause(view); cause != nil {
		cancelRun(cause)
	}
	a.log.Info("Started agent", "run", view.Run, "attempt", view.Attempt, "mode", view.Mode,
		"chain", len(links), "phase", view.Phase)
	return runCtx, nil
}

// Close resends what buffered interceptors still hold and stops the agent's
// background work. Facts are already with the gateway, which writes them.
// Close is idempotent; after Abort it does nothing.
func (a *Agent) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		started, aborted := a.started && a.runCtx != nil, a.aborted
		a.mu.Unlock()
		if !started || aborted {
			a.markClosed()
			return
		}
		a.resend(ctx)
		a.stopBackground()
		a.cancelRun(ErrClosed)
		a.markClosed()
		a.wg.Wait()
		a.doorMu.Lock()
		if a.doorSession != nil {
			_ = a.doorSession.Close()
			a.doorSession = nil
		}
		a.doorMu.Unlock()
	})
	return nil
}

// Abort stops the agent at once, as a crash would: no more heartbeats, no
// more requests. For tests and fault injection.
func (a *Agent) Abort() {
	a.mu.Lock()
	a.aborted = true
	cancel := a.cancelRun
	a.mu.Unlock()
	a.stopBackground()
	if cancel != nil {
		cancel(ErrClosed)
	}
	a.markClosed()
}

func (a *Agent) stopBackground() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bgCancel != nil {
		a.bgCancel()
	}
}

func (a *Agent) markClosed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.broadcastLocked()
}

// Metrics returns the registry holding the SDK's metrics, among them
// agentrun_agent_interceptor_seconds{interceptor,outcome}.
func (a *Agent) Metrics() *prometheus.Registry { return a.cfg.Registry }

// Attempt returns the attempt's view as last seen.
func (a *Agent) Attempt() gatewayapi.Attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.view
	v.Directives = slices.Clone(v.Directives)
	v.Approvals = slices.Clone(v.Approvals)
	v.Advice = slices.Clone(v.Advice)
	return v
}

// Fetch reads the attempt's view from the gateway now (GET /self), rather
// than as the watch last delivered it: what the agent just reported
// (advice, steps) is in it.
func (a *Agent) Fetch(ctx context.Context) (gatewayapi.Attempt, error) {
	var v gatewayapi.Attempt
	err := a.call(ctx, http.MethodGet, "/self", nil, &v)
	return v, err
}

// Finalizing reports whether the run is Finalizing: only output work, from
// the reserve.
func (a *Agent) Finalizing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.haveView && a.view.Finalizing
}

// FinalizingStarted returns a channel closed when the run enters Finalizing.
func (a *Agent) FinalizingStarted() <-chan struct{} { return a.finalizing }

// Directives returns the operator's current directives.
func (a *Agent) Directives() []v1alpha1.Directive {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.view.Directives)
}

// HasDirective reports whether directive t is currently in effect.
func (a *Agent) HasDirective(t v1alpha1.DirectiveType) bool {
	return slices.ContainsFunc(a.Directives(), func(d v1alpha1.Directive) bool { return d.Type == t })
}

// DirectiveUpdates returns a channel that receives the current directives
// each time they change (latest wins: a slow reader sees the newest set).
func (a *Agent) DirectiveUpdates() <-chan []v1alpha1.Directive { return a.directives }

// ApprovalFor returns the answer the run's approvals hold for actionID, if any.
func (a *Agent) ApprovalFor(actionID string) (v1alpha1.Approval, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ap := range slices.Backward(a.view.Approvals) {
		if ap.ActionID == actionID {
			return ap, true
		}
	}
	return v1alpha1.Approval{}, false
}

// ---- Facts only the agent knows. ----

// Step counts one step of the agent loop; progress says whether it made
// progress (lastProgressStep). It returns the step number.
func (a *Agent) Step(ctx context.Context, progress bool) (int64, error) {
	var out gatewayapi.StepResponse
	err := a.call(ctx, http.MethodPost, "/self/steps", gatewayapi.StepRequest{Progress: progress}, &out)
	return out.Step, err
}

// RecordFault counts a local fault (it changes no phase).
func (a *Agent) RecordFault(ctx context.Context, scope v1alpha1.FaultScope, kind string, retryable bool,
	message string) error {
	return a.call(ctx, http.MethodPost, "/self/faults", gatewayapi.FaultRequest{
		Scope: scope, Kind: kind, Retryable: retryable, Message: textutil.Truncate(message, 512)}, nil)
}

// Escalate records a fault the agent cannot handle and a new attempt cannot
// fix either (a bad key, a bad configuration); it returns once the gateway
// has persisted it. The operator treats the attempt as failed and does not
// recover the run: it finalizes from the reserve, or ends it.
func (a *Agent) Escalate(ctx context.Context, scope v1alpha1.FaultScope, kind, message string) error {
	return a.call(ctx, http.MethodPost, "/self/faults", gatewayapi.FaultRequest{
		Scope: scope, Kind: kind, Escalate: true, Message: textutil.Truncate(message, 512)}, nil)
}

// EscalateRetryable records a fault the agent cannot handle but a new
// attempt may (a corrupted working state, a dependency stuck for this
// process); it returns once the gateway has persisted it. The operator
// treats the attempt as failed and recovers the run with a new attempt,
// within its recovery policy.
func (a *Agent) EscalateRetryable(ctx context.Context, scope v1alpha1.FaultScope, kind, message string) error {
	return a.call(ctx, http.MethodPost, "/self/faults", gatewayapi.FaultRequest{
		Scope: scope, Kind: kind, Escalate: true, Retryable: true, Message: textutil.Truncate(message, 512)}, nil)
}

// RecordAdvice counts a piece of advice (e.g. source "reviewer", kind
// "Continue"). Advice is a fact for the record; it never blocks or extends a run.
func (a *Agent) RecordAdvice(ctx context.Context, source, kind string) error {
	return a.call(ctx, http.MethodPost, "/self/advice", gatewayapi.AdviceRequest{Source: source, Kind: kind}, nil)
}

// ProposeFinish reports that the agent proposes to finish and returns once
// the gateway persisted it (while the API server does not take the write, it
// keeps asking).
func (a *Agent) ProposeFinish(ctx context.Context) error {
	var v gatewayapi.Attempt
	if err := a.callDurable(ctx, http.MethodPost, "/self/finish", struct{}{}, &v); err != nil {
		return err
	}
	a.applyView(v)
	return nil
}

// SetCheckpoint reports an opaque resume token (at most 4096 bytes).
func (a *Agent) SetCheckpoint(ctx context.Context, checkpoint string) error {
	if len(checkpoint) > MaxCheckpoint {
		return fmt.Errorf("agent: checkpoint of %d bytes exceeds %d", len(checkpoint), MaxCheckpoint)
	}
	return a.call(ctx, http.MethodPut, "/self/checkpoint", gatewayapi.CheckpointRequest{Checkpoint: checkpoint}, nil)
}

// ---- Publication: the gateway writes the run's report. ----

// Report returns the run's report as the gateway persisted it (a
// replacement attempt takes over the plan and the published sections).
func (a *Agent) Report(ctx context.Context) (gatewayapi.Report, error) {
	var r gatewayapi.Report
	err := a.call(ctx, http.MethodGet, "/self/report", nil, &r)
	return r, err
}

// PlanReport sets the report's planned sections; a plan an earlier attempt
// persisted is kept and returned.
func (a *Agent) PlanReport(ctx context.Context, sections []string) (gatewayapi.Report, error) {
	var r gatewayapi.Report
	err := a.call(ctx, http.MethodPut, "/self/report/plan", gatewayapi.ReportPlanRequest{Sections: sections}, &r)
	return r, err
}

// Publish publishes one section as the effect of call, an admitted
// report.publish tool call whose arguments were this section and content.
func (a *Agent) Publish(ctx context.Context, call *Call, section, content string) (gatewayapi.Report, error) {
	var r gatewayapi.Report
	err := a.call(ctx, http.MethodPost, "/self/report/sections",
		gatewayapi.PublishRequest{CallID: call.ID, Section: section, Content: content}, &r)
	return r, err
}

// Settle asks the gateway to settle the publication from what the report
// holds (Complete, Partial or None) and returns the persisted settlement.
// Settle is what lets a finalizing run end.
func (a *Agent) Settle(ctx context.Context) (gatewayapi.SettleResponse, error) {
	var s gatewayapi.SettleResponse
	err := a.callDurable(ctx, http.MethodPost, "/self/settle", struct{}{}, &s)
	if errors.Is(err, ErrTerminated) {
		// A settlement that landed but whose answer was lost (the gateway
		// said not_persisted, then wrote it) ends the run before the retry
		// arrives: the attempt's facts say whether it settled.
		var v gatewayapi.Attempt
		gerr := a.call(context.WithoutCancel(ctx), http.MethodGet, "/self", nil, &v)
		if p := v.Publication; gerr == nil && p.Settled {
			return gatewayapi.SettleResponse{
				Settlement: p.Settlement, BlocksPlanned: p.BlocksPlanned, BlocksCommitted: p.BlocksCommitted,
			}, nil
		}
	}
	return s, err
}

// ---- The view. ----

func stopCause(v gatewayapi.Attempt) error {
	switch {
	case v.Phase == v1alpha1.PhaseTerminated:
		return ErrTerminated
	case v.Superseded:
		return ErrSuperseded
	}
	return nil
}

// applyView takes a view from the gateway: directives, finalizing,
// approvals (waiters are woken), stop.
func (a *Agent) applyView(v gatewayapi.Attempt) {
	a.mu.Lock()
	prev, had := a.view, a.haveView
	a.view, a.haveView = v, true
	dirChanged := !had || !equality.Semantic.DeepEqual(prev.Directives, v.Directives)
	if v.Finalizing && !a.finalizingClosed {
		a.finalizingClosed = true
		close(a.finalizing)
	}
	a.broadcastLocked()
	callbacks := slices.Clone(a.onDirectives)
	cancel := a.cancelRun
	a.mu.Unlock()

	if dirChanged {
		a.deliverDirectives(callbacks)
	}
	if cause := stopCause(v); cause != nil && cancel != nil {
		cancel(cause)
	}
}

func (a *Agent) deliverDirectives(callbacks []func([]v1alpha1.Directive)) {
	a.dirMu.Lock()
	defer a.dirMu.Unlock()
	cur := a.Directives()
	select {
	case <-a.directives:
	default:
	}
	select {
	case a.directives <- cur:
	default:
	}
	for _, fn := range callbacks {
		fn(slices.Clone(cur))
	}
}

// watchLoop follows the attempt's view: the gateway's watch stream,
// re-established after it ends, with a read to catch up.
func (a *Agent) watchLoop(ctx context.Context) {
	defer a.wg.Done()
	for ctx.Err() == nil {
		err := a.watch(ctx, a.applyView)
		if errors.Is(err, ErrTerminated) || errors.Is(err, ErrSuperseded) {
			a.stop(err)
			return
		}
		if a.Attempt().Stopped() {
			return
		}
		if err != nil && ctx.Err() == nil {
			a.log.V(1).Info("Attempt watch ended; re-establishing", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.PollInterval):
		}
		var v gatewayapi.Attempt
		if err := a.callOnce(ctx, http.MethodGet, "/self", nil, &v); err == nil {
			a.applyView(v)
		} else if errors.Is(err, ErrTerminated) || errors.Is(err, ErrSuperseded) {
			a.stop(err)
			return
		}
	}
}

func (a *Agent) stop(cause error) {
	a.mu.Lock()
	cancel := a.cancelRun
	a.mu.Unlock()
	if cancel != nil {
		if errors.Is(cause, ErrSuperseded) {
			cancel(ErrSuperseded)
		} else {
			cancel(ErrTerminated)
		}
	}
}

// Heartbeat shows the gateway the agent is alive, once. Start's agent does
// it on its own; a process that only reads its view (a harness launcher,
// whose CLI makes the model and tool requests) calls it itself.
func (a *Agent) Heartbeat(ctx context.Context) error {
	return a.callOnce(ctx, http.MethodPost, "/self/heartbeat", nil, nil)
}

// heartbeatLoop shows the gateway the agent is alive, twice per heartbeat
// interval (any request counts too).
func (a *Agent) heartbeatLoop(ctx context.Context) {
	defer a.wg.Done()
	for {
		a.mu.Lock()
		iv := time.Duration(a.view.HeartbeatSeconds) * time.Second
		a.mu.Unlock()
		if iv <= 0 {
			iv = DefaultHeartbeatInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(max(iv/2, 500*time.Millisecond)):
		}
		if err := a.callOnce(ctx, http.MethodPost, "/self/heartbeat", nil, nil); err != nil && ctx.Err() == nil {
			a.log.V(1).Info("Heartbeat failed", "error", err.Error())
		}
	}
}

// resendLoop resends buffered interceptors' outputs every poll interval.
func (a *Agent) resendLoop(ctx context.Context) {
	defer a.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.PollInterval):
		}
		if a.outbox.total() > 0 {
			a.resend(ctx)
		}
	}
}

func (a *Agent) broadcastLocked() {
	close(a.wake)
	a.wake = make(chan struct{})
}

// usable returns an error when calls cannot be made: before Start, after
// Close, or once the attempt's context ended.
func (a *Agent) usable(ctx context.Context) error {
	a.mu.Lock()
	started, closed, runCtx := a.started && a.runCtx != nil, a.closed, a.runCtx
	a.mu.Unlock()
	switch {
	case !started:
		return ErrNotStarted
	case closed:
		return ErrClosed
	case runCtx.Err() != nil:
		return context.Cause(runCtx)
	case ctx.Err() != nil:
		return context.Cause(ctx)
	}
	return nil
}
