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

package controller

import (
	"context"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
)

// The gateway vouches for the attempts it governs with its Lease, so an
// attempt's liveness costs no write per heartbeat (docs/gateway.md#liveness).
// The manager caches Leases of the gateway's namespace only (cmd/main.go).
// Lease renewals are not watched: they change no decision until the Lease
// goes stale, and the decision's RequeueAfter wakes the run for that.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// gatherLiveness reads, for the current attempt if the gateway governs it
// (status.liveness), the Lease of the gateway replica it names, into that
// attempt's facts (lifecycle AttemptFacts.Lease). A Lease that does not
// exist is a fact (the gateway is gone); a read that fails is an error.
func (r *ResearchRunReconciler) gatherLiveness(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered) error {
	ra := g.attempts[g.current]
	if ra == nil || ra.Status.Liveness == nil {
		return nil
	}
	key, err := leaseKey(ra.Status.Liveness.Gateway)
	if err != nil {
		return fmt.Errorf("RunAttempt %s/%s status.liveness.gateway: %w", ra.Namespace, ra.Name, err)
	}
	fact, err := r.readLease(ctx, r.Client, key)
	if err != nil {
		return fmt.Errorf("reading the gateway Lease %s of RunAttempt %s/%s: %w", key, ra.Namespace, ra.Name, err)
	}
	if r.looksSilent(run, ra, fact) {
		// Before a heartbeat timeout replaces the attempt, the cache's view
		// of the Lease and of the attempt's liveness is confirmed live: a
		// cache in its relist back-off after an API server restart shows an
		// old renewal for up to a minute, while the gateway renews on time.
		if !g.live[g.current] {
			live := &v1alpha1.RunAttempt{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ra), live); err == nil {
				g.markLive(live)
				if live.ResourceVersion != ra.ResourceVersion {
					ra = live
					r.useLive(g, live)
				}
			}
		}
		if fact, err = r.readLease(ctx, r.APIReader, key); err != nil {
			return fmt.Errorf("reading the gateway Lease %s of RunAttempt %s/%s live: %w", key, ra.Namespace, ra.Name, err)
		}
	}
	for i := range g.facts {
		if g.facts[i].Attempt == g.current {
			g.facts[i].Lease = fact
		}
	}
	return nil
}

func (r *ResearchRunReconciler) readLease(ctx context.Context, c client.Reader, key types.NamespacedName) (lifecycle.GatewayLease, error) {
	l := &coordinationv1.Lease{}
	switch err := c.Get(ctx, key, l); {
	case apierrors.IsNotFound(err):
		return lifecycle.GatewayLease{}, nil
	case err != nil:
		return lifecycle.GatewayLease{}, err
	}
	return leaseFact(l), nil
}

// looksSilent says whether the cached liveness facts are older than the
// run's heartbeat timeout — only the trigger for a live read; lifecycle
// decides on what that read shows.
func (r *ResearchRunReconciler) looksSilent(run *v1alpha1.ResearchRun, ra *v1alpha1.RunAttempt, l lifecycle.GatewayLease) bool {
	last := lifecycle.SignOfLife(lifecycle.AttemptFacts{Status: ra.Status, Lease: l, FactsWritten: statusWritten(ra)})
	timeout := lifecycle.DefaultHeartbeatTimeout
	if d := run.Spec.Recovery.HeartbeatTimeout; d != nil {
		timeout = d.Duration
	}
	return timeout > 0 && r.Clock.Since(last) >= timeout
}

// leaseKey parses status.liveness.gateway: namespace/name.
func leaseKey(ref string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("%q is not namespace/name of a Lease", ref)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// leaseFact is what the decision reads of a Lease.
func leaseFact(l *coordinationv1.Lease) lifecycle.GatewayLease {
	f := lifecycle.GatewayLease{Found: true}
	if h := l.Spec.HolderIdentity; h != nil {
		f.Holder = *h
	}
	if t := l.Spec.AcquireTime; t != nil {
		f.AcquireTime = t.Time
	}
	if t := l.Spec.RenewTime; t != nil {
		f.RenewTime = t.Time
	}
	return f
}
