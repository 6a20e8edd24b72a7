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

package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Defaults of Liveness.
const (
	// DefaultLeaseDuration is the Lease's leaseDurationSeconds: for readers
	// (kubectl, alerts); the operator counts an attempt's heartbeat timeout
	// from the Lease's last renewal, whatever the duration.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultLeaseRenewInterval is how often the gateway renews its Lease:
	// one write per gateway replica, whatever the number of attempts. It
	// must stay well below the runs' heartbeatTimeout (60s by default).
	DefaultLeaseRenewInterval = 5 * time.Second
)

// Liveness is how the gateway vouches for the attempts it governs without a
// write per attempt: the attempt's heartbeat is the gateway seeing it (a
// request under way, an open watch, a call within spec.heartbeatInterval),
// and the gateway's own heartbeat is one coordination.k8s.io Lease per
// replica. Per attempt the gateway writes status.liveness only when it takes
// the attempt over (first call, or a call to another replica than the
// recorded one) and when the attempt goes silent or speaks again.
type Liveness struct {
	// Lease is this replica's Lease. Empty: no Lease, and the gateway writes
	// status.heartbeatTime instead, at most every third of the attempt's
	// heartbeat interval while the agent calls (the older behaviour).
	Lease types.NamespacedName
	// Identity is the Lease's holderIdentity this process writes, unique per
	// process (default: the Lease name and a random suffix), so the operator
	// tells a restarted gateway from the one that took an attempt.
	Identity string
	// Duration is the Lease's leaseDurationSeconds (default 15s).
	Duration time.Duration
	// RenewInterval is how often the Lease is renewed (default 5s).
	RenewInterval time.Duration
}

// appName is the gateway's app.kubernetes.io/name.
const appName = "agentrun-gateway"

// LeaseLabels are the labels of a gateway's Lease.
var LeaseLabels = map[string]string{"app.kubernetes.io/name": appName, "app.kubernetes.io/component": "liveness"}

func (l *Liveness) defaults() {
	if l.Lease.Name == "" {
		return
	}
	if l.Identity == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		l.Identity = l.Lease.Name + "_" + hex.EncodeToString(b)
	}
	if l.Duration <= 0 {
		l.Duration = DefaultLeaseDuration
	}
	if l.RenewInterval <= 0 {
		l.RenewInterval = DefaultLeaseRenewInterval
	}
}

// governs reports whether the gateway vouches for attempts with its Lease.
func (g *Gateway) governs() bool { return g.opts.Liveness.Lease.Name != "" }

// leaseRef is the Lease as status.liveness.gateway names it.
func (g *Gateway) leaseRef() string { return g.opts.Liveness.Lease.String() }

// holds reports whether lv says this process governs the attempt.
func (g *Gateway) holds(lv *v1alpha1.AttemptLiveness) bool {
	return lv != nil && lv.Gateway == g.leaseRef() && lv.Holder == g.opts.Liveness.Identity
}

// leaseKeeper renews the gateway's Lease.
type leaseKeeper struct {
	g        *Gateway
	held     *coordinationv1.Lease // as last written; nil: read it first
	renewals *prometheus.CounterVec
}

func newLeaseKeeper(g *Gateway) *leaseKeeper {
	lk := &leaseKeeper{g: g, renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_gateway_lease_renewals_total",
		Help: "Renewals of the gateway's liveness Lease, by result (ok, conflict, error).",
	}, []string{labelResult})}
	_ = g.opts.Registry.Register(lk.renewals)
	return lk
}

// run renews the Lease at once and then every RenewInterval, until the
// gateway stops. The Lease is left to go stale when the gateway stops: the
// operator then counts its attempts' heartbeat timeout from the last renewal.
func (lk *leaseKeeper) run(ctx context.Context) {
	t := lk.g.clock.NewTicker(lk.g.opts.Liveness.RenewInterval)
	defer t.Stop()
	for {
		err := lk.renew(ctx)
		lk.renewals.WithLabelValues(writeResult(err)).Inc()
		if err != nil && ctx.Err() == nil {
			lk.g.log.Error(err, "Could not renew the gateway's Lease", "lease", lk.g.leaseRef())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// renew writes the Lease's renewTime (and takes it, if another identity
// holds it: a Lease name belongs to one replica, and a restarted process is
// its successor), re-reading it after a conflict.
func (lk *leaseKeeper) renew(ctx context.Context) error {
	lv := lk.g.opts.Liveness
	var err error
	for range 3 {
		now := metav1.NewMicroTime(lk.g.clock.Now())
		l := lk.held
		if l == nil {
			l = &coordinationv1.Lease{}
			err = lk.g.opts.APIReader.Get(ctx, lv.Lease, l)
			if apierrors.IsNotFound(err) {
				l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
					Namespace: lv.Lease.Namespace, Name: lv.Lease.Name, Labels: LeaseLabels,
				}}
				lk.take(l, now)
				if err = lk.g.opts.Client.Create(ctx, l); err == nil {
					lk.held = l
					return nil
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("reading Lease %s: %w", lv.Lease, err)
			}
		}
		l = l.DeepCopy()
		if h := ptrOr(l.Spec.HolderIdentity); h != lv.Identity {
			if lk.held != nil {
				lk.g.log.Error(nil, "Another process renewed this gateway's Lease; taking it back (two gateways must not share a Lease name)",
					"lease", lk.g.leaseRef(), "holder", h)
			}
			lk.take(l, now)
		}
		l.Spec.RenewTime = &now
		if err = lk.g.opts.Client.Update(ctx, l); err == nil {
			lk.held = l
			return nil
		}
		lk.held = nil // a conflict or a deleted Lease: read it again
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("renewing Lease %s: %w", lv.Lease, err)
		}
	}
	return fmt.Errorf("renewing Lease %s: %w", lv.Lease, err)
}

// take makes l this process's: holder, acquire and renew times, duration.
func (lk *leaseKeeper) take(l *coordinationv1.Lease, now metav1.MicroTime) {
	lv := lk.g.opts.Liveness
	id, secs := lv.Identity, int32(lv.Duration/time.Second)
	transitions := int32(0)
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions + 1
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &id, &secs
	l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseTransitions = &now, &now, &transitions
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	maps.Copy(l.Labels, LeaseLabels)
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
