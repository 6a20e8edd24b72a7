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

package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// SetLeaderElection restarts the operator (SIGTERM, so a leader releases its
// Lease) with or without --leader-elect.
func (s *Stack) SetLeaderElection(ctx context.Context, on bool) error {
	s.Operator.Stop(10 * time.Second)
	args := dropFlag(dropFlag(s.Operator.Args, "leader-elect"), "leader-election-namespace")
	if on {
		args = append(args, "--leader-elect", "--leader-election-namespace="+OperatorNamespace)
	}
	s.Operator.Args = args
	s.LeaderElection = on
	return s.StartOperator(ctx)
}

// StartReplica starts a second operator process beside s.Operator, as a
// Deployment's second replica: the same binary, identity, kubeconfig and
// flags, its own metrics, probe and webhook ports (the API server's webhook
// configurations name s.Operator's port only). Leader election must be on.
// It returns once the replica is ready; it leads only when s.Operator does
// not. The stack stops it.
func (s *Stack) StartReplica(ctx context.Context) (*Operator, error) {
	if !s.LeaderElection {
		return nil, errors.New("a second operator replica needs leader election")
	}
	ports, err := freeLoopbackPorts(3)
	if err != nil {
		return nil, err
	}
	args := setFlag(s.Operator.Args, "metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	args = setFlag(args, "health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	args = setFlag(args, "webhook-port", fmt.Sprint(ports[2]))
	r := &Operator{
		Binary:     s.Operator.Binary,
		Args:       args,
		Env:        s.Operator.Env,
		LogPath:    filepath.Join(s.LogDir, "operator-replica.log"),
		HealthAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	s.closers = append(s.closers, closerFunc(func() error { r.Stop(10 * time.Second); return nil }))
	if err := s.StartStandby(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// StartStandby starts an operator process (s.Operator or a replica) and
// waits until it is ready — for s.Operator, until its webhooks answer — but
// not until it leads: with leader election another replica may hold the
// Lease, and a process that was SIGKILLed while leading leaves its Lease to
// expire first.
func (s *Stack) StartStandby(ctx context.Context, o *Operator) error {
	if err := o.Start(); err != nil {
		return err
	}
	if err := o.WaitReady(ctx, 90*time.Second); err != nil {
		return err
	}
	if o == s.Operator {
		return s.waitWebhooks(ctx, 60*time.Second)
	}
	return nil
}

// MetricsURL returns the metrics endpoint of an operator process started by
// the stack (from its --metrics-bind-address).
func (o *Operator) MetricsURL() string {
	return "http://" + flagValue(o.Args, "metrics-bind-address") + "/metrics"
}

// Leads says whether the operator process currently leads: controller-runtime's
// leader_election_master_status gauge for the operator's Lease is 1.
func (o *Operator) Leads(ctx context.Context) bool {
	if o.Pid() == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.MetricsURL(), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.Contains(line, `name="`+LeaseName+`"`) {
			return strings.HasSuffix(strings.TrimSpace(line), " 1")
		}
	}
	return false
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
