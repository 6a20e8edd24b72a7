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

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/runstate"
	"github.com/agentrun-dev/agentrun/internal/stream/sse"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
	"github.com/agentrun-dev/agentrun/internal/stream/watch"
	"github.com/agentrun-dev/agentrun/internal/stream/web"
)

// newServer wires the status watcher (leader only) and the handler of the
// page, the runs list and the streams, all reading runs from the cache and
// authorizing each request with the caller's own identity.
func newServer(ctx context.Context, mgr ctrl.Manager, cfg *rest.Config, st *store.Store, f flags,
) (http.Handler, error) {
	kv, err := watch.OpenBucket(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("open the watcher's checkpoints: %w", err)
	}
	if err := (&watch.Reconciler{Client: mgr.GetClient(), Store: st, KV: kv}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if f.tokenAudience == "" {
		return nil, fmt.Errorf("--token-audience is required: the audience readers' tokens are issued for (default %s)",
			sse.DefaultAudience)
	}
	authz, err := sse.NewKubeAuthorizer(cfg, sse.KubeAuthOptions{Audiences: []string{f.tokenAudience}})
	if err != nil {
		return nil, err
	}
	runs := cachedRuns{c: mgr.GetClient(), live: mgr.GetAPIReader()}
	events, err := sse.New(sse.Options{
		Source: st, Authorizer: authz, RunUID: runs.uid, Snapshot: runs.snapshot,
		QueueEvents: f.queueEvents, QueueBytes: f.queueBytes, Registerer: ctrlmetrics.Registry,
	})
	if err != nil {
		return nil, err
	}
	return web.New(web.Options{Runs: runs, Authorizer: authz, Events: events})
}

// cachedRuns reads ResearchRuns from the manager's cache, and from the API
// server when the cache does not have a run (yet): a client that opens a
// run's stream right after creating it gets the stream, not a 404.
type cachedRuns struct{ c, live client.Reader }

func (r cachedRuns) get(ctx context.Context, run stream.RunKey) (*v1alpha1.ResearchRun, error) {
	var rr v1alpha1.ResearchRun
	key := client.ObjectKey{Namespace: run.Namespace, Name: run.Name}
	err := r.c.Get(ctx, key, &rr)
	if apierrors.IsNotFound(err) && r.live != nil {
		err = r.live.Get(ctx, key, &rr)
	}
	if err != nil {
		return nil, err
	}
	return &rr, nil
}

// uid is the UID of the run of that namespace and name: the stream served
// is that run's, not a deleted one's of the same name.
func (r cachedRuns) uid(ctx context.Context, run stream.RunKey) (string, bool, error) {
	rr, err := r.get(ctx, run)
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return string(rr.UID), true, nil
}

// snapshot is the run's state now: at least as new as any stored event
// (a later STATE_DELTA of a field it already shows replaces it with the
// same value).
func (r cachedRuns) snapshot(ctx context.Context, run stream.RunKey, _ uint64) (json.RawMessage, error) {
	rr, err := r.get(ctx, run)
	if err != nil {
		return nil, err
	}
	return runstate.Snapshot(rr), nil
}

// List serves the runs view.
func (r cachedRuns) List(ctx context.Context, namespace string) ([]web.RunSummary, error) {
	var list v1alpha1.ResearchRunList
	if err := r.c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := make([]web.RunSummary, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, summary(&list.Items[i]))
	}
	slices.SortFunc(out, func(a, b web.RunSummary) int { return b.Created.Compare(a.Created.Time) })
	return out, nil
}

func summary(rr *v1alpha1.ResearchRun) web.RunSummary {
	st := rr.Status
	// Of the run's budget: status.budget.granted is the current attempt's
	// allowance only.
	granted := runstate.StateOf(rr).Budget
	s := web.RunSummary{
		Name: rr.Name, Namespace: rr.Namespace, Phase: string(st.Phase), Reason: string(st.Reason), Message: st.Message,
		Session: rr.Spec.SessionRef.Name, Created: rr.CreationTimestamp, Steps: st.Steps,
		Budget: web.Budget{
			ModelRequests: web.Count{Used: st.Budget.Used.ModelRequests, Granted: granted.ModelRequests},
			ToolCalls:     web.Count{Used: st.Budget.Used.ToolCalls, Granted: granted.ToolCalls},
			Tokens:        web.Count{Used: st.Budget.Used.Tokens, Granted: granted.Tokens},
		},
		PendingApprovals: []web.PendingApproval{},
	}
	for _, a := range st.PendingApprovals {
		s.PendingApprovals = append(s.PendingApprovals,
			web.PendingApproval{Action: a.ActionID, Tool: a.Tool, Summary: a.Summary})
	}
	return s
}
