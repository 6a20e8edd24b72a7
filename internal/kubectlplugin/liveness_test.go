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

package kubectlplugin

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// why shows an attempt the gateway governs (status.liveness) as the
// operator reads its liveness: live while the process that took it renews
// its Lease, silent since silentSince, since the Lease was taken over (the
// gateway restarted) or since its last renewal (the gateway stopped), and
// unknown without the Lease.
func TestWhyLiveness(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	const ns, gatewayNS = "team-live", "gateway-live"
	createNamespace(t, c, ns)
	createNamespace(t, c, gatewayNS)
	now := time.Now().Truncate(time.Second)
	at := at(now)
	lease := func(name, holder string, acquired, renewed time.Duration) {
		t.Helper()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: gatewayNS, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new(holder), LeaseDurationSeconds: new(int32(15)),
				AcquireTime: &metav1.MicroTime{Time: now.Add(-acquired)},
				RenewTime:   &metav1.MicroTime{Time: now.Add(-renewed)}}}
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	lease("agentrun-gateway-node-1", "node-1_7f3a", 2*time.Hour, 2*time.Second)
	lease("agentrun-gateway-node-2", "node-2_c41d", 30*time.Second, time.Second)
	lease("agentrun-gateway-node-4", "node-4_09be", 2*time.Hour, 3*time.Minute)

	for name, tc := range map[string]struct {
		node, holder string
		silentSince  *metav1.Time
	}{
		"live":      {node: "1", holder: "node-1_7f3a"},
		"silent":    {node: "1", holder: "node-1_7f3a", silentSince: at.ago(40 * time.Second)},
		"restarted": {node: "2", holder: "node-2_88e0"},
		"gone":      {node: "3", holder: "node-3_5d21"},
		"stale":     {node: "4", holder: "node-4_09be"},
	} {
		t.Run(name, func(t *testing.T) {
			rr := newRun(ns, "liveness-"+name, "research", v1alpha1.Budget{ModelRequests: 40, ToolCalls: 80,
				Deadline: minutes(30), OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 5}})
			if err := c.Create(ctx, rr); err != nil {
				t.Fatal(err)
			}
			ra := newAttempt(rr, 1)
			ra.Spec.RunPhase = v1alpha1.PhaseRunning
			ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 38, ToolCalls: 75}
			if err := c.Create(ctx, ra); err != nil {
				t.Fatal(err)
			}
			ra.Status = v1alpha1.RunAttemptStatus{
				Usage: v1alpha1.Usage{ModelRequests: 3, ToolCalls: 2, Tokens: 4100}, Steps: 3, LastProgressStep: 3,
				HeartbeatTime: at.ago(5 * time.Minute),
				Liveness: &v1alpha1.AttemptLiveness{Gateway: gatewayNS + "/agentrun-gateway-node-" + tc.node,
					Holder: tc.holder, Since: *at.ago(4 * time.Minute), SilentSince: tc.silentSince},
			}
			if err := c.Status().Update(ctx, ra); err != nil {
				t.Fatal(err)
			}
			rr.Status = v1alpha1.ResearchRunStatus{
				ObservedGeneration: 1, Phase: v1alpha1.PhaseRunning, Message: "attempt 1 is running: 3 steps",
				Attempt: 1, Steps: 3, QueuedTime: at.ago(6 * time.Minute), StartTime: at.ago(5 * time.Minute),
				Budget: v1alpha1.BudgetStatus{Used: ra.Status.Usage,
					Remaining: v1alpha1.Usage{ModelRequests: 37, ToolCalls: 78},
					Granted:   v1alpha1.Usage{ModelRequests: 38, ToolCalls: 75}},
				Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Used: ra.Status.Usage, Steps: 3}},
				Gates:  v1alpha1.GateStatus{Steps: 3, MaxSameCall: 1},
			}
			if err := c.Status().Update(ctx, rr); err != nil {
				t.Fatal(err)
			}
			out, _, err := run(t, now, nil, "why", rr.Name, "-n", ns)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "why-liveness-"+name+".txt", out)
		})
	}
}
