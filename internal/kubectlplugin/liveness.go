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
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
)

// gatewayLease is what why read of the Lease of the gateway replica that
// governs an attempt (status.liveness.gateway).
type gatewayLease struct {
	ref   string // namespace/name, as status.liveness.gateway names it
	lease *coordinationv1.Lease
	// err is why the Lease could not be read: NotFound (the gateway is
	// gone), or anything else (Forbidden: the caller may not read Leases
	// in the gateway's namespace).
	err error
}

// heartbeatTimeout is the run's spec.recovery.heartbeatTimeout as the
// operator applies it: unset is the default, 0 is no check.
func heartbeatTimeout(rr *v1alpha1.ResearchRun) time.Duration {
	if d := rr.Spec.Recovery.HeartbeatTimeout; d != nil {
		return max(d.Duration, 0)
	}
	return lifecycle.DefaultHeartbeatTimeout
}

// readGatewayLease reads the Lease a's status.liveness names, if any.
func readGatewayLease(ctx context.Context, c client.Reader, a *v1alpha1.RunAttempt) *gatewayLease {
	if a == nil || a.Status.Liveness == nil {
		return nil
	}
	ref := a.Status.Liveness.Gateway
	g := &gatewayLease{ref: ref}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		g.err = fmt.Errorf("%q is not namespace/name of a Lease", ref)
		return g
	}
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		g.err = err
		return g
	}
	g.lease = l
	return g
}

// livenessText says whether the attempt is alive as the operator reads it
// (internal/lifecycle, facts.heartbeat): the heartbeat timeout counts from
// status.liveness.silentSince once the gateway wrote it; else from the
// Lease's renewTime while the process that took the attempt holds it; from
// its acquireTime when another process holds it (the gateway restarted);
// from the attempt's last status write when the Lease is gone; never from
// before liveness.since or status.heartbeatTime. "live" is a Lease renewed
// within its leaseDurationSeconds by that process, with no silentSince.
func livenessText(a *v1alpha1.RunAttempt, g *gatewayLease, timeout time.Duration, now time.Time) string {
	lv := a.Status.Liveness
	floor := lv.Since.Time
	if h := a.Status.HeartbeatTime; h != nil && h.After(floor) {
		floor = h.Time
	}
	counts := ""
	if timeout > 0 {
		counts = "; the heartbeat timeout (" + duration.HumanDuration(timeout) + ") counts from then"
	}
	silent := func(since time.Time, why string) string {
		if floor.After(since) {
			since = floor
		}
		if since.After(now) {
			since = now
		}
		return fmt.Sprintf("silent since %s (%s%s)", agoTime(since, now), why, counts)
	}
	if lv.SilentSince != nil {
		return silent(lv.SilentSince.Time, "the gateway of lease "+g.ref+" stopped seeing the attempt")
	}
	switch {
	case g.err != nil && apierrors.IsNotFound(g.err):
		return fmt.Sprintf("unknown: gateway lease %s not found (the gateway is gone); the heartbeat timeout counts "+
			"from the attempt's last status write", g.ref)
	case g.err != nil:
		return fmt.Sprintf("governed by gateway %s (its lease cannot be read: %s)", g.ref, apierrors.ReasonForError(g.err))
	}
	spec := g.lease.Spec
	holder := ""
	if spec.HolderIdentity != nil {
		holder = *spec.HolderIdentity
	}
	if holder != lv.Holder {
		var acquired time.Time
		if spec.AcquireTime != nil {
			acquired = spec.AcquireTime.Time
		}
		return silent(acquired, fmt.Sprintf("gateway lease %s taken over by another process: %s, which governed "+
			"the attempt, is gone", g.ref, lv.Holder))
	}
	var renewed time.Time
	if spec.RenewTime != nil {
		renewed = spec.RenewTime.Time
	}
	fresh := lifecycle.DefaultHeartbeatTimeout
	if s := spec.LeaseDurationSeconds; s != nil && *s > 0 {
		fresh = time.Duration(*s) * time.Second
	}
	if now.Sub(renewed) <= fresh {
		return fmt.Sprintf("live (gateway lease %s renewed %s)", g.ref, agoTime(renewed, now))
	}
	return silent(renewed, fmt.Sprintf("gateway lease %s not renewed since: the gateway stopped", g.ref))
}

func agoTime(t, now time.Time) string {
	mt := metav1.NewTime(t)
	return ago(&mt, now)
}
