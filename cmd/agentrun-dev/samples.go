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
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
)

// The built-in samples: a RuntimePolicy and a Session (as in config/samples),
// scripts for the reference agent's scripted provider in ConfigMaps, and runs
// that complete, finalize from the reserve, and wait for an approval.
//
//go:embed samples/*.yaml
var builtinSamples embed.FS

// loadSamples returns the objects of every YAML file of dir (or of the
// built-in samples), files in name order.
//
// Every ${NAME} of vars in the files is replaced with its value first (the
// built-in policies name their model's base URL ${AGENTRUN_DEV_UPSTREAM}).
func loadSamples(dir string, vars map[string]string) ([]*unstructured.Unstructured, error) {
	var fsys fs.FS = builtinSamples
	base := "samples"
	if dir != "" {
		fsys, base = os.DirFS(dir), "."
	}
	names, err := fs.Glob(fsys, filepath.Join(base, "*.yaml"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []*unstructured.Unstructured
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		for k, v := range vars {
			data = []byte(strings.ReplaceAll(string(data), "${"+k+"}", v))
		}
		objs, err := stack.DecodeYAML(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, objs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no objects in %s", dir)
	}
	return out, nil
}

// watcher applies the samples and reports what the runs do.
type watcher struct {
	s           *stack.Stack
	autoApprove bool
	began       time.Time
	out         io.Writer

	runs            []types.NamespacedName
	last            map[types.NamespacedName]string
	final           map[types.NamespacedName]*v1.ResearchRun
	asked           map[string]bool
	firstTerminated time.Duration
}

func (w *watcher) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(w.out, "[%7.1fs] ", time.Since(w.began).Seconds())
	_, _ = fmt.Fprintf(w.out, format+"\n", args...)
}

// apply creates every sample object (in the default namespace unless it says
// otherwise), in order.
func (w *watcher) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	c := w.s.Client
	_, _ = fmt.Fprintln(w.out, "==> applying the samples")
	for _, u := range objs {
		namespaced, err := c.IsObjectNamespaced(u)
		if err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if namespaced && u.GetNamespace() == "" {
			u.SetNamespace(metav1.NamespaceDefault)
		}
		if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		_, _ = fmt.Fprintf(w.out, "    %s/%s created\n", strings.ToLower(u.GetKind()), u.GetName())
		if u.GetKind() == "ResearchRun" {
			w.runs = append(w.runs, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()})
		}
	}
	return nil
}

// watch prints every phase change of the runs and every approval they ask
// for, approving it when autoApprove is set. With untilDone it returns once
// every sample run is Terminated.
func (w *watcher) watch(ctx context.Context, untilDone bool) error {
	w.last = map[types.NamespacedName]string{}
	w.final = map[types.NamespacedName]*v1.ResearchRun{}
	w.asked = map[string]bool{}
	c := w.s.Client
	for {
		runs, err := c.Watch(ctx, &v1.ResearchRunList{})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(time.Second)
			continue
		}
		attempts, err := c.Watch(ctx, &v1.RunAttemptList{})
		if err != nil {
			runs.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(time.Second)
			continue
		}
		done, err := w.loop(ctx, runs, attempts, untilDone)
		runs.Stop()
		attempts.Stop()
		if done || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// loop consumes both watches until one closes (false) or the runs are done.
func (w *watcher) loop(ctx context.Context, runs, attempts watch.Interface, untilDone bool) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			if untilDone {
				w.printf("gave up waiting: %v", ctx.Err())
			}
			return true, ctx.Err()
		case ev, ok := <-runs.ResultChan():
			if !ok {
				return false, nil
			}
			run, isRun := ev.Object.(*v1.ResearchRun)
			if !isRun || ev.Type == watch.Deleted {
				continue
			}
			w.onRun(run)
			if untilDone && w.allTerminated() {
				return true, nil
			}
		case ev, ok := <-attempts.ResultChan():
			if !ok {
				return false, nil
			}
			ra, isRA := ev.Object.(*v1.RunAttempt)
			if !isRA || ev.Type == watch.Deleted {
				continue
			}
			w.onAttempt(ctx, ra)
		}
	}
}

func (w *watcher) onRun(run *v1.ResearchRun) {
	key := client.ObjectKeyFromObject(run)
	st := run.Status
	if st.Phase == "" {
		return
	}
	state := string(st.Phase)
	detail := ""
	switch st.Phase {
	case v1.PhaseQueued:
		if st.QueuePosition > 0 {
			detail = fmt.Sprintf("position %d", st.QueuePosition)
		}
	case v1.PhaseRunning, v1.PhaseRecovering:
		state += fmt.Sprintf(" attempt=%d", st.Attempt)
		detail = fmt.Sprintf("attempt %d", st.Attempt)
	case v1.PhaseFinalizing:
		state += "/" + string(st.Reason)
		detail = fmt.Sprintf("%s; finalizing from the reserve", st.Reason)
	case v1.PhaseTerminated:
		state += "/" + string(st.Reason) + "/" + string(st.Settlement)
		detail = fmt.Sprintf("%s, settlement %s, %d attempt(s), used %d model requests and %d tool calls",
			st.Reason, st.Settlement, st.Attempt, st.Budget.Used.ModelRequests, st.Budget.Used.ToolCalls)
		if st.Message != "" {
			detail += ": " + st.Message
		}
	}
	if w.last[key] == state {
		return
	}
	w.last[key] = state
	w.printf("%-28s %-11s %s", key.Name, st.Phase, detail)
	if st.Phase == v1.PhaseTerminated {
		w.final[key] = run.DeepCopy()
		if w.firstTerminated == 0 && w.isSample(key) {
			w.firstTerminated = time.Since(w.began)
		}
	}
}

func (w *watcher) onAttempt(ctx context.Context, ra *v1.RunAttempt) {
	for _, req := range ra.Status.AwaitingApproval {
		id := req.ActionID
		if slices.ContainsFunc(ra.Spec.Approvals, func(a v1.Approval) bool { return a.ActionID == id }) {
			continue
		}
		key := ra.Namespace + "/" + ra.Spec.RunName + "/" + id
		if w.asked[key] {
			continue
		}
		w.asked[key] = true
		// The first approval creates the list; later ones append to it.
		approval := fmt.Sprintf(`{"actionID":%q,"decision":"Approve"}`, id)
		cmd := fmt.Sprintf(`kubectl patch rr %s -n %s --type=merge -p '{"spec":{"approvals":[%s]}}'`,
			ra.Spec.RunName, ra.Namespace, approval)
		if len(ra.Spec.Approvals) > 0 {
			cmd = fmt.Sprintf(`kubectl patch rr %s -n %s --type=json -p '[{"op":"add","path":"/spec/approvals/-","value":%s}]'`,
				ra.Spec.RunName, ra.Namespace, approval)
		}
		w.printf("%-28s waits for approval of %q:", ra.Spec.RunName, id)
		_, _ = fmt.Fprintf(w.out, "            %s\n", cmd)
		if w.autoApprove {
			if err := approve(ctx, w.s.Client, ra.Namespace, ra.Spec.RunName, id); err != nil {
				w.printf("%-28s approving %q failed: %v", ra.Spec.RunName, id, err)
				w.asked[key] = false
				continue
			}
			w.printf("%-28s approved %q (the same patch, sent by agentrun-dev)", ra.Spec.RunName, id)
		}
	}
}

// approve appends an Approve decision to the run's spec.approvals, as the
// kubectl patch above does (the webhook stamps approver and time).
func approve(ctx context.Context, c client.Client, namespace, name, actionID string) error {
	run := &v1.ResearchRun{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, run); err != nil {
		return err
	}
	var patch client.Patch
	if len(run.Spec.Approvals) == 0 {
		patch = client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"approvals":[{"actionID":%q,"decision":"Approve"}]}}`, actionID))
	} else {
		patch = client.RawPatch(types.JSONPatchType,
			fmt.Appendf(nil, `[{"op":"add","path":"/spec/approvals/-","value":{"actionID":%q,"decision":"Approve"}}]`, actionID))
	}
	return c.Patch(ctx, run, patch)
}

func (w *watcher) isSample(key types.NamespacedName) bool { return slices.Contains(w.runs, key) }

func (w *watcher) allTerminated() bool {
	for _, k := range w.runs {
		if _, ok := w.final[k]; !ok {
			return false
		}
	}
	return true
}

// summary prints each sample run's end and its report.
func (w *watcher) summary(ctx context.Context) {
	_, _ = fmt.Fprintln(w.out, "")
	_, _ = fmt.Fprintf(w.out, "==> summary (first run Terminated %s after start; all %d in %s)\n",
		w.firstTerminated.Round(100*time.Millisecond), len(w.runs), time.Since(w.began).Round(100*time.Millisecond))
	for _, k := range w.runs {
		run, ok := w.final[k]
		if !ok {
			_, _ = fmt.Fprintf(w.out, "    %-28s not Terminated (last: %s)\n", k.Name, w.last[k])
			continue
		}
		st := run.Status
		_, _ = fmt.Fprintf(w.out, "    %-28s %s/%s  attempts=%d  modelRequests=%d  toolCalls=%d\n",
			k.Name, st.Reason, st.Settlement, st.Attempt, st.Budget.Used.ModelRequests, st.Budget.Used.ToolCalls)
		cm := &corev1.ConfigMap{}
		key := types.NamespacedName{Namespace: k.Namespace, Name: k.Name + "-report"}
		if err := w.s.Client.Get(ctx, key, cm); err == nil {
			keys := make([]string, 0, len(cm.Data))
			for key := range cm.Data {
				keys = append(keys, key)
			}
			slices.Sort(keys)
			_, _ = fmt.Fprintf(w.out, "    %-28s report configmap/%s: %s\n", "", cm.Name, strings.Join(keys, ", "))
		}
	}
}

func (w *watcher) exitCode() int {
	if w.allTerminated() {
		return 0
	}
	return 1
}

// withProvider keeps the provider's key in Secret agentrun-dev-provider (in
// the default namespace; only the gateway reads it) and adds model "real" to
// every RuntimePolicy sample.
func withProvider(ctx context.Context, s *stack.Stack, objs []*unstructured.Unstructured,
	o options) ([]*unstructured.Unstructured, error) {
	var key []byte
	if o.providerKey != "" {
		raw, err := os.ReadFile(o.providerKey)
		if err != nil {
			return nil, fmt.Errorf("--provider-key-file: %w", err)
		}
		key = []byte(strings.TrimSpace(string(raw)))
	}
	var keyRef map[string]any
	if len(key) > 0 {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "agentrun-dev-provider",
				Labels: map[string]string{v1.LabelProviderKey: "true"}},
			Data: map[string][]byte{"api-key": key},
		}
		if err := s.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		keyRef = map[string]any{"name": sec.Name, "key": "api-key"}
	}
	model := providerModel(o, keyRef)
	for _, u := range objs {
		if u.GetKind() != "RuntimePolicy" {
			continue
		}
		models, _, _ := unstructured.NestedSlice(u.Object, "spec", "models")
		models = append(models, model)
		if err := unstructured.SetNestedSlice(u.Object, models, "spec", "models"); err != nil {
			return nil, err
		}
	}
	return objs, nil
}
