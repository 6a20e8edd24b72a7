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

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
)

// Plant is the faultable parts of the stack: the operator (and a second
// replica while the leader-election scenario runs), the gateway, the
// operator's API proxy and kube-apiserver. Its supervisor restarts any
// operator or gateway process that exits without being told to (as a
// Deployment or DaemonSet would), and counts those restarts.
type Plant struct {
	St      *stack.Stack
	Proxy   *stack.OperatorProxy
	API     *stack.APIServerControl
	Replica *stack.Operator
	env     *Env

	mu        sync.Mutex // held while a process is killed and restarted
	unplanned int
}

// Supervise restarts exited processes until ctx ends.
func (p *Plant) Supervise(ctx context.Context) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			p.mu.Lock()
			for _, o := range p.processes() {
				if o.Pid() != 0 {
					continue
				}
				p.unplanned++
				p.env.logf("supervisor: %s exited unasked (see %s); restarting it", o.Binary, o.LogPath)
				if err := p.start(ctx, o); err != nil && ctx.Err() == nil {
					p.env.logf("supervisor: restarting %s: %v", o.Binary, err)
				}
			}
			p.mu.Unlock()
		}
	}()
}

func (p *Plant) processes() []*stack.Operator {
	out := []*stack.Operator{p.St.Operator, p.St.Gateway}
	if p.Replica != nil {
		out = append(out, p.Replica)
	}
	return out
}

// Unplanned returns how many restarts the supervisor made.
func (p *Plant) Unplanned() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unplanned
}

// start starts an operator or gateway process, retrying while the API
// server is away, for up to two minutes.
func (p *Plant) start(ctx context.Context, o *stack.Operator) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if o.Pid() == 0 {
			if o == p.St.Gateway {
				err = p.St.StartGateway(ctx)
			} else {
				err = p.St.StartStandby(ctx, o)
			}
		} else {
			err = o.WaitReady(ctx, 30*time.Second)
		}
		if err == nil {
			return nil
		}
		if o.Pid() != 0 {
			o.Kill()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return err
}

// killAndRestart SIGKILLs a process (its group) and starts it again.
func (p *Plant) killAndRestart(ctx context.Context, o *stack.Operator) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	o.Kill()
	return p.start(ctx, o)
}

// Injector injects one scenario's faults.
type Injector interface {
	// Setup prepares the plant (leader election, a replica, proxy rules).
	Setup(ctx context.Context, p *Plant) error
	// Wait is the pause before the next fault.
	Wait() time.Duration
	// Fault injects one fault and waits until the faulted part is back; it
	// describes what it did.
	Fault(ctx context.Context, p *Plant) (string, error)
	// Teardown ends the faults and restores the plant for the next scenario.
	Teardown(ctx context.Context, p *Plant) error
}

func uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rand.Int64N(int64(hi-lo))) //nolint:gosec // fault timing
}

// operatorKill SIGKILLs the single operator every lo–hi, without leader
// election (a restarted process leads at once instead of waiting 15 s for
// the killed one's Lease to expire).
type operatorKill struct{ lo, hi time.Duration }

func (f operatorKill) Setup(ctx context.Context, p *Plant) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.St.SetLeaderElection(ctx, false)
}
func (f operatorKill) Wait() time.Duration { return uniform(f.lo, f.hi) }
func (f operatorKill) Fault(ctx context.Context, p *Plant) (string, error) {
	return "SIGKILL operator", p.killAndRestart(ctx, p.St.Operator)
}
func (f operatorKill) Teardown(ctx context.Context, p *Plant) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.St.SetLeaderElection(ctx, true)
}

// leaderKill runs two replicas with leader election and SIGKILLs whichever
// leads every interval; the killed one restarts at once as the standby.
type leaderKill struct{ every time.Duration }

func (f leaderKill) Setup(ctx context.Context, p *Plant) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.St.LeaderElection {
		if err := p.St.SetLeaderElection(ctx, true); err != nil {
			return err
		}
	}
	r, err := p.St.StartReplica(ctx)
	if err != nil {
		return err
	}
	p.Replica = r
	return nil
}
func (f leaderKill) Wait() time.Duration { return f.every }
func (f leaderKill) Fault(ctx context.Context, p *Plant) (string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for i, o := range []*stack.Operator{p.St.Operator, p.Replica} {
			if o.Leads(ctx) {
				return fmt.Sprintf("SIGKILL leader (replica %d)", i+1), p.killAndRestart(ctx, o)
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return "", errors.New("no operator replica led for 60 s")
}
func (f leaderKill) Teardown(ctx context.Context, p *Plant) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.Replica
	p.Replica = nil
	r.Stop(15 * time.Second) // SIGTERM: it releases the Lease if it holds it
	return nil
}

// gatewayKill SIGKILLs the gateway every lo–hi and starts it again.
type gatewayKill struct{ lo, hi time.Duration }

func (f gatewayKill) Setup(context.Context, *Plant) error { return nil }
func (f gatewayKill) Wait() time.Duration                 { return uniform(f.lo, f.hi) }
func (f gatewayKill) Fault(ctx context.Context, p *Plant) (string, error) {
	return "SIGKILL gateway", p.killAndRestart(ctx, p.St.Gateway)
}
func (f gatewayKill) Teardown(context.Context, *Plant) error { return nil }

// apiFaults turns the operator's proxy faults on for the whole scenario;
// each "fault" is one tick of a second with them on.
type apiFaults struct{ rules stack.FaultRules }

func (f apiFaults) Setup(_ context.Context, p *Plant) error {
	p.Proxy.SetRules(f.rules)
	return nil
}
func (f apiFaults) Wait() time.Duration { return time.Second }
func (f apiFaults) Fault(context.Context, *Plant) (string, error) {
	return "", nil
}
func (f apiFaults) Teardown(_ context.Context, p *Plant) error {
	p.Proxy.SetRules(stack.FaultRules{})
	return nil
}

// apiserverRestart stops kube-apiserver for down, starts it again (etcd
// keeps running), every lo–hi; meanwhile the operator's proxy cuts watches
// and answers resumed watches 410 Gone, forcing relists.
type apiserverRestart struct {
	lo, hi, downLo, downHi time.Duration
	rules                  stack.FaultRules
}

func (f apiserverRestart) Setup(_ context.Context, p *Plant) error {
	p.Proxy.SetRules(f.rules)
	return nil
}
func (f apiserverRestart) Wait() time.Duration { return uniform(f.lo, f.hi) }
func (f apiserverRestart) Fault(ctx context.Context, p *Plant) (string, error) {
	down := uniform(f.downLo, f.downHi)
	stopping := time.Now()
	if err := p.API.Stop(); err != nil {
		return "", err
	}
	stopped := time.Since(stopping)
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	start := time.Now()
	if err := p.API.Start(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("kube-apiserver stopped in %s, kept down %s, ready %s after start",
		stopped.Round(100*time.Millisecond), down.Round(100*time.Millisecond),
		time.Since(start).Round(100*time.Millisecond)), nil
}
func (f apiserverRestart) Teardown(_ context.Context, p *Plant) error {
	p.Proxy.SetRules(stack.FaultRules{})
	return nil
}
