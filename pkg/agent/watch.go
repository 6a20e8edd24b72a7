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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// watchLoop keeps the agent's view of its RunAttempt current: a watch on the
// one object (re-established after it ends, with a re-read to catch up), or
// polling when the client cannot watch.
func (a *Agent) watchLoop(ctx context.Context) {
	defer a.wg.Done()
	wc, canWatch := a.c.(client.WithWatch)
	for ctx.Err() == nil {
		if canWatch {
			w, err := wc.Watch(ctx, &v1alpha1.RunAttemptList{}, client.InNamespace(a.key.Namespace),
				client.MatchingFields{"metadata.name": a.key.Name})
			if err == nil {
				a.refresh(ctx)
				a.consume(ctx, w)
				w.Stop()
			} else if ctx.Err() == nil {
				a.log.Error(err, "Could not watch RunAttempt; retrying")
			}
		} else {
			a.refresh(ctx)
		}
		a.mu.Lock()
		gone := a.deleted
		a.mu.Unlock()
		if gone {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.PollInterval):
		}
	}
}

func (a *Agent) consume(ctx context.Context, w watch.Interface) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			switch ev.Type {
			case watch.Error:
				return
			case watch.Deleted:
				if ra, ok := ev.Object.(*v1alpha1.RunAttempt); ok && ra.Name == a.key.Name {
					a.markDeleted()
					return
				}
			case watch.Added, watch.Modified:
				if ra, ok := ev.Object.(*v1alpha1.RunAttempt); ok && ra.Name == a.key.Name && ra.Namespace == a.key.Namespace {
					a.applySpec(ra)
				}
			}
		}
	}
}

func (a *Agent) refresh(ctx context.Context) {
	obj := &v1alpha1.RunAttempt{}
	err := a.c.Get(ctx, a.key, obj)
	switch {
	case err == nil:
		a.applySpec(obj)
	case apierrors.IsNotFound(err):
		a.markDeleted()
	case ctx.Err() == nil:
		a.log.Error(err, "Could not read RunAttempt")
	}
}
