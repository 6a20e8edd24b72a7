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
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Tool is a tool implementation the agent registers. Its risk, effect and
// idempotency are not the agent's to declare: they come from the policy's
// tool catalogue (spec.policy.tools), and a tool missing from the catalogue
// is refused.
type Tool struct {
	// Name as the catalogue and the model call it, e.g. "http.get".
	Name string
	// Description is shown to the model.
	Description string
	// Parameters is the JSON schema of the arguments, shown to the model.
	Parameters map[string]any
	// Output marks a publication tool (e.g. report.publish): output work,
	// the only work allowed while the run is Finalizing.
	Output bool
	// Run performs the call. The SDK has checked the grant, the permission
	// matrix and approvals, run the Pre and Around interceptors and, for a
	// side-effecting tool, persisted the write-ahead record before Run is
	// called. Returning a FaultError (see Failure) names the fault's kind.
	Run func(ctx context.Context, call *Call) (string, error)
}

// Agent is the SDK's handle on one attempt: it reads and watches the
// attempt's RunAttempt, enforces its grant, permission mode, approvals and
// phase, runs the policy's interceptor chain around every model request and
// tool call, and reports facts to the RunAttempt status.
//
// Create it with New, register interceptors and tools, then Start. All
// methods are safe for concurrent use.
type Agent struct {
	cfg     Config
	log     logr.Logger
	clock   clock.WithTickerAndDelayedExecution
	metrics *metrics
	key     types.NamespacedName
	c       client.Client

	// Registrations, fixed once Start is called.
	interceptors map[string]Interceptor
	tools        map[string]Tool
	onDirectives []func([]v1alpha1.Directive)
	chain        []link
	outbox       outbox

	mu        sync.Mutex
	started   bool
	closed    bool
	aborted   bool
	deleted   bool
	obj       *v1alpha1.RunAttempt // latest metadata and spec; status is never read back
	facts     facts
	reserved  v1alpha1.Usage // admitted calls not yet dispatched
	callSeq   int64
	seq       uint64 // version of the local facts
	persisted uint64 // latest version durably written
	dirty     bool
	armed     bool
	lastErr   error
	wake      chan struct{} // closed and replaced on every change waiters may care about

	flushTimer clock.Timer
	hbTimer    clock.Timer
	hbInterval time.Duration
	hbDue      atomic.Bool
	due        chan struct{}
	kick       chan struct{}

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

// New returns an agent for the RunAttempt cfg names. It does not contact the
// API server; Start does.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	cfg = cfg.withDefaults()
	a := &Agent{
		cfg:          cfg,
		log:          cfg.Log.WithValues("runattempt", cfg.Namespace+"/"+cfg.RunAttempt),
		clock:        cfg.Clock,
		metrics:      newMetrics(cfg.Registry),
		key:          types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.RunAttempt},
		interceptors: map[string]Interceptor{},
		tools:        map[string]Tool{},
		outbox:       outbox{limit: cfg.BufferSize},
		wake:         make(chan struct{}),
		due:          make(chan struct{}, 1),
		kick:         make(chan struct{}, 1),
		finalizing:   make(chan struct{}),
		directives:   make(chan []v1alpha1.Directive, 1),
		hbInterval:   DefaultHeartbeatInterval,
	}
	return a, nil
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
	case t.Run == nil:
		return fmt.Errorf("agent: tool %q has no Run", t.Name)
	}
	if _, dup := a.tools[t.Name]; dup {
		return fmt.Errorf("agent: tool %q registered twice", t.Name)
	}
	a.tools[t.Name] = t
	return nil
}

// OnDirectives registers a callback called with the current directives
// whenever spec.directives changes (Degrade, Compress). It runs on the SDK's
// goroutine and must not block. Register before Start.
func (a *Agent) OnDirectives(fn func([]v1alpha1.Directive)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onDirectives = append(a.onDirectives, fn)
}

// Tools returns the registered tools that the policy's catalogue lists, for
// offering to a model.
func (a *Agent) Tools() []Tool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Tool
	for _, t := range a.tools {
		if a.obj == nil || slices.ContainsFunc(a.obj.Spec.Policy.Tools, func(c v1alpha1.Tool) bool {
			return c.Name == t.Name
		}) {
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

// Start reads the RunAttempt, checks that every interceptor of the policy's
// resolved chain is registered (else it records an escalated fault and
// refuses to start), writes a first heartbeat, and starts watching the
// RunAttempt and writing facts.
//
// The returned context is the attempt's: it is cancelled when the run is
// Terminated, the attempt is superseded or its RunAttempt deleted (see
// Stopped and context.Cause), or when ctx is. Use it for the agent loop.
func (a *Agent) Start(ctx context.Context) (context.Context, error) {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return nil, errors.New("agent: already started")
	}
	a.started = true
	a.mu.Unlock()

	c, err := a.cfg.NewClient()
	if err != nil {
		a.markClosed()
		return nil, err
	}
	a.c = c
	obj := &v1alpha1.RunAttempt{}
	if err := c.Get(ctx, a.key, obj); err != nil {
		a.markClosed()
		return nil, fmt.Errorf("agent: read RunAttempt %s: %w", a.key, err)
	}
	if err := a.awaitPod(ctx, obj); err != nil {
		a.markClosed()
		return nil, err
	}
	a.mu.Lock()
	a.facts.seed(obj.Status)
	a.callSeq = obj.Status.Usage.ModelRequests + obj.Status.Usage.ToolCalls
	a.mu.Unlock()
	a.applySpec(obj)

	links, err := resolveChain(obj.Spec.Policy.Name, obj.Spec.Policy.ResolvedChain, a.interceptors)
	if err != nil {
		// Say why before refusing: the operator sees an escalated fault
		// instead of a silent crash loop.
		a.recordFault(v1alpha1.FaultScopeAgent, "UnregisteredInterceptor", false, true, err.Error())
		if werr := a.writeOnce(ctx); werr != nil {
			a.log.Error(werr, "Could not report the refusal to start")
		}
		a.stopBackground()
		a.markClosed()
		return nil, err
	}
	a.chain = links

	// The first write is a heartbeat; it also proves the agent may write
	// its RunAttempt's status before any work is done.
	a.mu.Lock()
	a.dirty = true
	a.mu.Unlock()
	if err := a.writeOnce(ctx); err != nil {
		a.stopBackground()
		a.markClosed()
		return nil, fmt.Errorf("agent: first status write of RunAttempt %s: %w", a.key, err)
	}

	runCtx, cancelRun := context.WithCancelCause(ctx)
	bg, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	a.mu.Lock()
	a.runCtx, a.cancelRun, a.bgCancel = runCtx, cancelRun, bgCancel
	a.mu.Unlock()
	a.wg.Add(2)
	go a.writeLoop(bg)
	go a.watchLoop(bg)

	// The spec read may already say stop.
	a.mu.Lock()
	spec := a.obj.Spec
	a.mu.Unlock()
	if cause := stopCause(spec); cause != nil {
		cancelRun(cause)
	}
	a.log.Info("Started agent", "run", spec.RunName, "attempt", spec.Attempt, "mode", spec.Mode,
		"chain", len(links), "phase", spec.RunPhase)
	return runCtx, nil
}

// awaitPod waits until the operator recorded this pod as the attempt's
// (spec.podUID), when the agent knows its pod's UID.
func (a *Agent) awaitPod(ctx context.Context, obj *v1alpha1.RunAttempt) error {
	if a.cfg.PodUID == "" {
		return nil
	}
	for obj.Spec.PodUID == "" {
		a.log.Info("Waiting for the operator to record this pod on the RunAttempt", "podUID", a.cfg.PodUID)
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent: RunAttempt %s names no pod yet: %w", a.key, context.Cause(ctx))
		case <-a.clock.After(a.cfg.PollInterval):
		}
		if err := a.c.Get(ctx, a.key, obj); err != nil {
			return fmt.Errorf("agent: read RunAttempt %s: %w", a.key, err)
		}
	}
	if obj.Spec.PodUID != a.cfg.PodUID {
		return fmt.Errorf("agent: RunAttempt %s belongs to pod %s, not to this pod (%s); refusing to start",
			a.key, obj.Spec.PodUID, a.cfg.PodUID)
	}
	return nil
}

// Close resends what buffered interceptors still hold, writes the last facts
// and stops the agent's background work. ctx bounds the final write (while
// the API server is unreachable Close waits rather than drop facts). Close
// is idempotent; after Abort it does nothing.
func (a *Agent) Close(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		a.mu.Lock()
		started, aborted, deleted := a.started && a.runCtx != nil, a.aborted, a.deleted
		a.mu.Unlock()
		if !started || aborted {
			a.markClosed()
			return
		}
		a.resend(ctx)
		if !deleted {
			a.mu.Lock()
			target := a.seq
			need := a.persisted < target || a.dirty
			if need {
				a.kickLocked()
			}
			a.mu.Unlock()
			if need {
				err = a.waitPersisted(ctx, target)
			}
		}
		a.stopBackground()
		a.cancelRun(ErrClosed)
		a.markClosed()
		a.wg.Wait()
	})
	return err
}

// Abort stops the agent at once, as a crash would: no further status writes
// (facts not yet written are lost, like a killed process's). For tests and
// fault injection.
func (a *Agent) Abort() {
	a.mu.Lock()
	a.aborted = true
	a.mu.Unlock()
	a.stopBackground()
	a.mu.Lock()
	cancel := a.cancelRun
	a.mu.Unlock()
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
	if a.flushTimer != nil {
		a.flushTimer.Stop()
	}
	if a.hbTimer != nil {
		a.hbTimer.Stop()
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

// Client returns the client the agent uses (after Start).
func (a *Agent) Client() client.Client { return a.c }

// Object returns a copy of the RunAttempt's metadata and spec as last seen.
func (a *Agent) Object() *v1alpha1.RunAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.obj == nil {
		return nil
	}
	return a.obj.DeepCopy()
}

// Spec returns a copy of the RunAttempt's spec as last seen.
func (a *Agent) Spec() v1alpha1.RunAttemptSpec {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.obj == nil {
		return v1alpha1.RunAttemptSpec{}
	}
	return *a.obj.Spec.DeepCopy()
}

// Status returns the facts as the agent holds them locally (the source of
// truth of the RunAttempt status), without heartbeat.
func (a *Agent) Status() v1alpha1.RunAttemptStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.facts.render()
}

// Finalizing reports whether the run is Finalizing (spec.runPhase Finalizing
// or grant.finalizeOnly): only output work, from the reserve.
func (a *Agent) Finalizing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.obj != nil && isFinalizing(a.obj.Spec)
}

// FinalizingStarted returns a channel closed when the run enters Finalizing.
func (a *Agent) FinalizingStarted() <-chan struct{} { return a.finalizing }

// Directives returns the operator's current directives.
func (a *Agent) Directives() []v1alpha1.Directive {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.obj == nil {
		return nil
	}
	return slices.Clone(a.obj.Spec.Directives)
}

// HasDirective reports whether directive t is currently in effect.
func (a *Agent) HasDirective(t v1alpha1.DirectiveType) bool {
	return slices.ContainsFunc(a.Directives(), func(d v1alpha1.Directive) bool { return d.Type == t })
}

// DirectiveUpdates returns a channel that receives the current directives
// each time they change (latest wins: a slow reader sees the newest set).
func (a *Agent) DirectiveUpdates() <-chan []v1alpha1.Directive { return a.directives }

// Step counts one step of the agent loop; progress says whether it made
// progress (lastProgressStep). It returns the step number.
func (a *Agent) Step(progress bool) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.facts.steps++
	if progress {
		a.facts.lastProgressStep = a.facts.steps
	}
	a.markLocked(false)
	return a.facts.steps
}

// RecordFault counts a local fault (it changes no phase).
func (a *Agent) RecordFault(scope v1alpha1.FaultScope, kind string, retryable bool, message string) {
	a.recordFault(scope, kind, retryable, false, message)
}

// Escalate records a fault the agent cannot handle and writes it at once:
// the operator then treats the attempt as failed. It returns when the fault
// is persisted.
func (a *Agent) Escalate(ctx context.Context, scope v1alpha1.FaultScope, kind, message string) error {
	a.mu.Lock()
	a.facts.addFault(scope, kind, false, true, message)
	a.markLocked(true)
	target := a.seq
	a.mu.Unlock()
	return a.waitPersisted(ctx, target)
}

// RecordAdvice counts a piece of advice (e.g. source "reviewer", kind
// "Continue"). Advice is a fact for the record; it never blocks or extends a run.
func (a *Agent) RecordAdvice(source, kind string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.facts.addAdvice(source, kind)
	a.markLocked(false)
}

// ProposeFinish reports that the agent proposes to finish and returns once
// that is persisted.
func (a *Agent) ProposeFinish(ctx context.Context) error {
	a.mu.Lock()
	a.facts.finishProposed = true
	a.markLocked(true)
	target := a.seq
	a.mu.Unlock()
	return a.waitPersisted(ctx, target)
}

// SetPublication reports the publication's progress: blocks planned, blocks
// durably committed, and where they are.
func (a *Agent) SetPublication(planned, committed int32, location string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := &a.facts.publication
	p.BlocksPlanned, p.BlocksCommitted = planned, committed
	if location != "" {
		p.Location = truncate(location, 512)
	}
	a.markLocked(false)
}

// Settle persists the publication's settlement (what was durably delivered)
// and returns once it is written. Settle is what lets a finalizing run end.
func (a *Agent) Settle(ctx context.Context, settlement v1alpha1.Settlement) error {
	a.mu.Lock()
	a.facts.publication.Settlement = settlement
	a.facts.publication.Settled = true
	a.markLocked(true)
	target := a.seq
	a.mu.Unlock()
	return a.waitPersisted(ctx, target)
}

// SetCheckpoint reports an opaque resume token (at most 4096 bytes).
func (a *Agent) SetCheckpoint(checkpoint string) error {
	if len(checkpoint) > MaxCheckpoint {
		return fmt.Errorf("agent: checkpoint of %d bytes exceeds %d", len(checkpoint), MaxCheckpoint)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.facts.checkpoint = checkpoint
	a.markLocked(false)
	return nil
}

// Flush writes the facts recorded so far now and returns once they are
// persisted (or ctx ends). While the API server is unreachable it keeps
// waiting: facts are never dropped.
func (a *Agent) Flush(ctx context.Context) error {
	a.mu.Lock()
	if !a.started || a.runCtx == nil {
		a.mu.Unlock()
		return ErrNotStarted
	}
	target := a.seq
	if a.persisted >= target && !a.dirty {
		a.mu.Unlock()
		return nil
	}
	a.kickLocked()
	a.mu.Unlock()
	return a.waitPersisted(ctx, target)
}

func (a *Agent) recordFault(scope v1alpha1.FaultScope, kind string, retryable, escalated bool, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.facts.addFault(scope, kind, retryable, escalated, msg)
	a.markLocked(escalated)
}

// ---- Spec. ----

func isFinalizing(spec v1alpha1.RunAttemptSpec) bool {
	return spec.RunPhase == v1alpha1.PhaseFinalizing || spec.Grant.FinalizeOnly
}

func stopCause(spec v1alpha1.RunAttemptSpec) error {
	switch {
	case spec.RunPhase == v1alpha1.PhaseTerminated:
		return ErrTerminated
	case spec.Superseded:
		return ErrSuperseded
	}
	return nil
}

func heartbeatInterval(spec v1alpha1.RunAttemptSpec) time.Duration {
	if spec.HeartbeatInterval != nil && spec.HeartbeatInterval.Duration > 0 {
		return spec.HeartbeatInterval.Duration
	}
	return DefaultHeartbeatInterval
}

// olderRV reports whether resource version rv is older than cur, when both
// are the integers the API server uses in practice.
func olderRV(rv, cur string) bool {
	x, err1 := strconv.ParseUint(rv, 10, 64)
	y, err2 := strconv.ParseUint(cur, 10, 64)
	return err1 == nil && err2 == nil && x < y
}

// applySpec takes a newly read RunAttempt's metadata and spec: directives,
// finalizing, approvals (waiters are woken), heartbeat interval, stop.
func (a *Agent) applySpec(obj *v1alpha1.RunAttempt) {
	a.mu.Lock()
	if a.obj != nil && olderRV(obj.ResourceVersion, a.obj.ResourceVersion) {
		a.mu.Unlock()
		return
	}
	prev := a.obj
	a.obj = obj.DeepCopy()
	a.obj.Status = v1alpha1.RunAttemptStatus{}
	spec := a.obj.Spec
	dirChanged := prev == nil || !equality.Semantic.DeepEqual(prev.Spec.Directives, spec.Directives)
	if iv := heartbeatInterval(spec); iv != a.hbInterval {
		a.hbInterval = iv
		if a.hbTimer != nil {
			a.resetHeartbeatLocked()
		}
	}
	if isFinalizing(spec) && !a.finalizingClosed {
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
	if cause := stopCause(spec); cause != nil && cancel != nil {
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

func (a *Agent) markDeleted() {
	a.mu.Lock()
	a.deleted = true
	a.broadcastLocked()
	cancel := a.cancelRun
	a.mu.Unlock()
	if cancel != nil {
		cancel(ErrRunAttemptDeleted)
	}
}

// broadcastLocked wakes everyone waiting on a.wake.
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
