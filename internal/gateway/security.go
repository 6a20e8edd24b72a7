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
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/pkg/permission"
)

// The CUSTOM run-stream events of a run's posture changes.
const (
	// EventSecurityDegraded: the run is held to its policy's stricter
	// posture (value: the status.securityPosture).
	EventSecurityDegraded = "agentrun.dev/security-degraded"
	// EventSecurityRecovered: the run is back to its normal posture.
	EventSecurityRecovered = "agentrun.dev/security-recovered"
)

// maxHookEvents bounds the outcomes kept per interceptor: the error rate is
// that of the newest calls within the window, at most this many.
const maxHookEvents = 4096

// securityTracker watches the Security interceptors of the policies whose
// snapshot sets onSecurityDegraded, per policy (namespace/name) and per
// gateway process, and holds the policy's runs to the stricter posture
// while one of them fails: from the moment an interceptor's error rate
// within the window reaches errorRate over at least minCalls calls, until a
// full window has passed without that happening again.
type securityTracker struct {
	clock clock.WithTickerAndDelayedExecution
	// notify tells the keepers of a policy its new posture (nil: normal).
	notify func(key types.NamespacedName, p *v1alpha1.SecurityPosture)

	mu       sync.Mutex
	policies map[types.NamespacedName]*policyHealth
}

// policyHealth is one policy's recent Security hook outcomes and posture.
type policyHealth struct {
	cfg        v1alpha1.SecurityDegraded
	hooks      map[string][]hookEvent // by interceptor, oldest first
	posture    *v1alpha1.SecurityPosture
	lastBreach time.Time
	timer      clock.Timer
}

type hookEvent struct {
	at     time.Time
	failed bool
}

func newSecurityTracker(c clock.WithTickerAndDelayedExecution,
	notify func(types.NamespacedName, *v1alpha1.SecurityPosture)) *securityTracker {
	return &securityTracker{clock: c, notify: notify, policies: map[types.NamespacedName]*policyHealth{}}
}

// observer is the chain observer of an attempt of policy key: it counts the
// outcomes of the chain's Security hooks on tool calls (a veto is an answer,
// counted as a call that did not fail). Model requests are not counted:
// their auth is answered by the model door's token cache, not by the
// dependency, so their outcomes say nothing of it.
func (t *securityTracker) observer(key types.NamespacedName, cfg v1alpha1.SecurityDegraded) func(chain.Observation) {
	return func(o chain.Observation) {
		if o.Class != v1alpha1.ClassSecurity || o.Kind != chain.KindTool {
			return
		}
		t.record(key, cfg, o.Interceptor, o.Failed())
	}
}

// record counts one outcome of interceptor and re-evaluates the posture.
func (t *securityTracker) record(key types.NamespacedName, cfg v1alpha1.SecurityDegraded, interceptor string, failed bool) {
	now := t.clock.Now()
	t.mu.Lock()
	ph := t.policies[key]
	if ph == nil {
		ph = &policyHealth{hooks: map[string][]hookEvent{}}
		t.policies[key] = ph
	}
	ph.cfg = cfg
	evs := append(ph.hooks[interceptor], hookEvent{at: now, failed: failed})
	if len(evs) > maxHookEvents {
		evs = slices.Delete(evs, 0, len(evs)-maxHookEvents)
	}
	ph.hooks[interceptor] = evs
	changed, p := t.evaluateLocked(key, ph, now)
	t.mu.Unlock()
	if changed {
		t.notify(key, p)
	}
}

// current is policy key's posture now (nil: normal).
func (t *securityTracker) current(key types.NamespacedName) *v1alpha1.SecurityPosture {
	now := t.clock.Now()
	t.mu.Lock()
	ph := t.policies[key]
	if ph == nil {
		t.mu.Unlock()
		return nil
	}
	changed, p := t.evaluateLocked(key, ph, now)
	t.mu.Unlock()
	if changed {
		t.notify(key, p)
	}
	return p
}

// evaluateLocked prunes the windows, decides the posture and arms the
// recovery check; it reports whether the posture changed, and returns it.
func (t *securityTracker) evaluateLocked(key types.NamespacedName, ph *policyHealth,
	now time.Time) (bool, *v1alpha1.SecurityPosture) {
	window := ph.cfg.WindowDuration()
	worst, worstRate, breach := "", int32(-1), false
	names := make([]string, 0, len(ph.hooks))
	for name := range ph.hooks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		evs := ph.hooks[name]
		i := slices.IndexFunc(evs, func(e hookEvent) bool { return now.Sub(e.at) < window })
		if i < 0 {
			delete(ph.hooks, name)
			continue
		}
		evs = evs[i:]
		ph.hooks[name] = evs
		failed := 0
		for _, e := range evs {
			if e.failed {
				failed++
			}
		}
		rate := int32(failed * 100 / len(evs))
		if int32(len(evs)) >= ph.cfg.Min() && int64(failed)*100 >= int64(ph.cfg.Rate())*int64(len(evs)) && rate > worstRate {
			worst, worstRate, breach = name, rate, true
		}
	}
	changed := false
	switch {
	case breach:
		ph.lastBreach = now
		if ph.posture == nil {
			ph.posture = &v1alpha1.SecurityPosture{
				Posture: ph.cfg.Posture, Since: &metav1.Time{Time: now}, Interceptor: worst, ErrorRate: worstRate,
				Message: degradedMessage(ph.cfg, worst, worstRate),
			}
			changed = true
		}
		t.armLocked(key, ph, window)
	case ph.posture != nil && now.Sub(ph.lastBreach) >= window:
		ph.posture = nil
		changed = true
	}
	if ph.posture == nil && len(ph.hooks) == 0 {
		if ph.timer != nil {
			ph.timer.Stop()
		}
		delete(t.policies, key)
	}
	return changed, ph.posture.DeepCopy()
}

// armLocked checks the posture again one window after the last breach, so a
// policy whose runs make no calls still recovers.
func (t *securityTracker) armLocked(key types.NamespacedName, ph *policyHealth, window time.Duration) {
	if ph.timer != nil {
		ph.timer.Stop()
	}
	// (Not in the timer's callback itself: a clock may run it holding its
	// own lock.)
	ph.timer = t.clock.AfterFunc(window, func() { go t.current(key) })
}

func degradedMessage(cfg v1alpha1.SecurityDegraded, interceptor string, rate int32) string {
	what := "every Write or External tool call needs an approval, auto-approved tools included"
	if cfg.Posture == v1alpha1.PostureDenyWrites {
		what = "every Write or External tool call is refused (" + gatewayapi.CodeSecurityDegraded + ")"
	}
	return fmt.Sprintf("Security interceptor %s failed %d%% of its calls within %s (threshold %d%% over at least %d calls): "+
		"posture %s, %s, until a full %s passes below the threshold",
		interceptor, rate, cfg.WindowDuration(), cfg.Rate(), cfg.Min(), cfg.Posture, what, cfg.WindowDuration())
}

// notifySecurity tells the keepers of policy key its new posture.
func (g *Gateway) notifySecurity(key types.NamespacedName, p *v1alpha1.SecurityPosture) {
	v := 0.0
	if p != nil {
		v = 1
	}
	g.metrics.securityDegraded.WithLabelValues(key.Namespace, key.Name).Set(v)
	g.mu.Lock()
	ks := make([]*keeper, 0, len(g.keepers))
	for _, k := range g.keepers {
		if k.key.Namespace == key.Namespace {
			ks = append(ks, k)
		}
	}
	g.mu.Unlock()
	for _, k := range ks {
		if pk, ok := k.securityKey(); ok && pk == key {
			k.setSecurity(p)
		}
	}
}

// securityKey is the policy the attempt's posture is tracked under, if its
// snapshot sets onSecurityDegraded.
func (k *keeper) securityKey() (types.NamespacedName, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pol := k.obj.Spec.Policy
	return types.NamespacedName{Namespace: k.key.Namespace, Name: pol.Name}, pol.OnSecurityDegraded != nil
}

// chainObserver is the attempt's chain observer (nil: the policy does not
// watch its Security interceptors).
func (k *keeper) chainObserverLocked() func(chain.Observation) {
	pol := k.obj.Spec.Policy
	if pol.OnSecurityDegraded == nil {
		return nil
	}
	return k.g.security.observer(types.NamespacedName{Namespace: k.key.Namespace, Name: pol.Name}, *pol.OnSecurityDegraded)
}

// securityPosture is the attempt's posture now (nil: normal), recorded on
// the attempt when it changed.
func (k *keeper) securityPosture() *v1alpha1.SecurityPosture {
	key, ok := k.securityKey()
	if !ok {
		return nil
	}
	p := k.g.security.current(key)
	k.setSecurity(p)
	return p
}

// setSecurity records the attempt's posture (status.securityPosture) and
// tells the run stream, when it changed.
func (k *keeper) setSecurity(p *v1alpha1.SecurityPosture) {
	k.mu.Lock()
	old := k.facts.securityPosture
	if (old == nil) == (p == nil) && (old == nil || old.Posture == p.Posture && old.Since.Equal(p.Since)) {
		k.mu.Unlock()
		return
	}
	k.facts.securityPosture = p.DeepCopy()
	k.markLocked(true)
	k.mu.Unlock()
	if p == nil {
		k.log.Info("Back to the normal posture: the policy's Security interceptors are stable again")
		v, _ := json.Marshal(map[string]string{"message": "the policy's Security interceptors are stable again"})
		k.emit(stream.Event{Type: stream.Custom, Name: EventSecurityRecovered, Value: v})
		return
	}
	k.log.Info("Stricter posture: a Security interceptor fails", "posture", p.Posture,
		"interceptor", p.Interceptor, "errorRate", p.ErrorRate)
	v, _ := json.Marshal(p)
	k.emit(stream.Event{Type: stream.Custom, Name: EventSecurityDegraded, Value: v})
}

// degradedAdmission applies the stricter posture to a Write or External
// call's verdict: ConfirmAll turns Allow into Confirm, DenyWrites refuses.
// A call with effect None, or a verdict of Deny, is left as it is.
func degradedAdmission(p *v1alpha1.SecurityPosture, entry v1alpha1.Tool, v permission.Result) (permission.Result, *apiError) {
	if p == nil || entry.Effect == v1alpha1.EffectNone || v.Verdict == permission.Deny {
		return v, nil
	}
	if p.Posture == v1alpha1.PostureDenyWrites {
		return v, denied(gatewayapi.CodeSecurityDegraded, "SecurityDegraded", fmt.Sprintf(
			"tool %q (effect %s) is refused: %s", entry.Name, entry.Effect, p.Message))
	}
	if v.Verdict == permission.Allow {
		v = permission.Result{Verdict: permission.Confirm, Reason: fmt.Sprintf(
			"tool %q (effect %s) needs an approval while the run is held to posture ConfirmAll: %s",
			entry.Name, entry.Effect, p.Message)}
	}
	return v, nil
}
