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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentrun-dev/agentrun/pkg/textutil"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The report is one ConfigMap per run, <run>-report, labelled
// agentrun.dev/run=<run> and owned by the ResearchRun, with one key per
// planned section (NN-<slug>.md) and index.json. The gateway writes it with
// its own identity, so the settlement it records is what it persisted.
const (
	// ReportIndexKey is the ConfigMap key of the report's index (JSON).
	ReportIndexKey = "index.json"
	// planGrowsKey marks a report whose plan is what was published (no plan
	// was set first).
	planGrowsKey = "plan-grows"
	// maxSections bounds a plan.
	maxSections = 20
	// maxSectionBytes bounds one section's content (a ConfigMap holds 1 MiB).
	maxSectionBytes = 40 << 10
)

// ReportIndex is the report's table of contents, stored under ReportIndexKey.
type ReportIndex struct {
	Run      string             `json:"run"`
	Goal     string             `json:"goal,omitempty"`
	Sections []ReportIndexEntry `json:"sections"`
	// Attempt is the attempt that last wrote the report.
	Attempt int32 `json:"attempt,omitempty"`
}

// ReportIndexEntry is one planned section.
type ReportIndexEntry struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	Published bool   `json:"published"`
}

// ReportName is the name of run's report ConfigMap.
func ReportName(run string) string {
	name := run + "-report"
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(run))
	return run[:253-len("-report")-9] + "-" + hex.EncodeToString(sum[:])[:8] + "-report"
}

// SectionKey is the ConfigMap key of the i-th (0-based) section.
func SectionKey(i int, name string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	slug := strings.TrimSuffix(textutil.Cut(b.String(), 60), "-")
	if slug == "" {
		slug = "section"
	}
	return fmt.Sprintf("%02d-%s.md", i+1, slug)
}

// reportRef is where an attempt's run report lives.
type reportRef struct {
	key     types.NamespacedName
	run     string
	label   string
	goal    string
	attempt int32
	owner   *metav1.OwnerReference
}

func (k *keeper) reportRef() reportRef {
	k.mu.Lock()
	defer k.mu.Unlock()
	ra := k.obj
	r := reportRef{
		key:   types.NamespacedName{Namespace: ra.Namespace, Name: ReportName(ra.Spec.RunName)},
		run:   ra.Spec.RunName,
		label: ra.Labels[v1alpha1.LabelRun], goal: ra.Spec.Goal, attempt: ra.Spec.Attempt,
	}
	if r.label == "" {
		r.label = textutil.Cut(ra.Spec.RunName, 63)
	}
	if ref := ownerRun(ra); ref != nil {
		r.owner = &metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: new(true)}
	}
	return r
}

// ownerRun is the attempt's owner reference to its ResearchRun, or nil.
func ownerRun(ra *v1alpha1.RunAttempt) *metav1.OwnerReference {
	for i, ref := range ra.OwnerReferences {
		if ref.Kind == "ResearchRun" && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/") {
			return &ra.OwnerReferences[i]
		}
	}
	return nil
}

func (r reportRef) location() string { return "configmap/" + r.key.Name }

// load reads the report: its plan and the ConfigMap's data (nil when there
// is none yet).
func (g *Gateway) loadReport(ctx context.Context, r reportRef) ([]string, map[string]string, error) {
	cm := &corev1.ConfigMap{}
	if err := g.opts.APIReader.Get(ctx, r.key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	if cm.Labels[v1alpha1.LabelRun] != r.label {
		return nil, nil, fmt.Errorf("ConfigMap %s exists but is not run %s's report (label %s=%q)",
			r.key, r.run, v1alpha1.LabelRun, cm.Labels[v1alpha1.LabelRun])
	}
	var idx ReportIndex
	if raw, ok := cm.Data[ReportIndexKey]; ok {
		if err := json.Unmarshal([]byte(raw), &idx); err != nil {
			return nil, nil, fmt.Errorf("report %s: index: %w", r.key, err)
		}
	}
	plan := make([]string, 0, len(idx.Sections))
	for _, e := range idx.Sections {
		plan = append(plan, e.Name)
	}
	return plan, cm.Data, nil
}

func (r reportRef) render(plan []string, data map[string]string) gatewayapi.Report {
	out := gatewayapi.Report{Location: r.location(), Sections: []gatewayapi.ReportSection{}}
	for i, s := range plan {
		key := SectionKey(i, s)
		_, ok := data[key]
		out.Sections = append(out.Sections, gatewayapi.ReportSection{Name: s, Key: key, Published: ok})
		if ok {
			out.Committed++
		}
	}
	return out
}

func (r reportRef) indexJSON(plan []string, data map[string]string) string {
	idx := ReportIndex{Run: r.run, Goal: r.goal, Attempt: r.attempt, Sections: []ReportIndexEntry{}}
	for i, s := range plan {
		k := SectionKey(i, s)
		_, ok := data[k]
		idx.Sections = append(idx.Sections, ReportIndexEntry{Name: s, Key: k, Published: ok})
	}
	raw, _ := json.MarshalIndent(idx, "", "  ")
	return string(raw)
}

// writeReport applies mutate to the report ConfigMap's data (creating the
// ConfigMap), retrying conflicts. mutate gets the current plan and data and
// returns the new plan.
func (g *Gateway) writeReport(ctx context.Context, r reportRef, mutate func(plan []string, data map[string]string) ([]string, error)) (gatewayapi.Report, error) {
	var out gatewayapi.Report
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		err := g.opts.APIReader.Get(ctx, r.key, cm)
		create := apierrors.IsNotFound(err)
		switch {
		case create:
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: r.key.Namespace, Name: r.key.Name,
				Labels: map[string]string{v1alpha1.LabelRun: r.label, "app.kubernetes.io/managed-by": "agentrun"},
			}}
			if r.owner != nil {
				cm.OwnerReferences = []metav1.OwnerReference{*r.owner}
			}
		case err != nil:
			return err
		case cm.Labels[v1alpha1.LabelRun] != r.label:
			return fmt.Errorf("ConfigMap %s exists but is not run %s's report (label %s=%q)",
				r.key, r.run, v1alpha1.LabelRun, cm.Labels[v1alpha1.LabelRun])
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		var plan []string
		if raw, ok := cm.Data[ReportIndexKey]; ok {
			var idx ReportIndex
			if err := json.Unmarshal([]byte(raw), &idx); err == nil {
				for _, e := range idx.Sections {
					plan = append(plan, e.Name)
				}
			}
		}
		plan, err = mutate(plan, cm.Data)
		if err != nil {
			return err
		}
		cm.Data[ReportIndexKey] = r.indexJSON(plan, cm.Data)
		out = r.render(plan, cm.Data)
		if create {
			err = g.opts.Client.Create(ctx, cm)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), r.key.Name, err)
			}
			return err
		}
		return g.opts.Client.Update(ctx, cm)
	})
	return out, err
}

// reportError is a refusal of a publication request.
type reportError struct{ e *apiError }

func (r *reportError) Error() string { return r.e.Error() }

func (g *Gateway) getReport(w http.ResponseWriter, r *http.Request, k *keeper) {
	ref := k.reportRef()
	plan, data, err := g.loadReport(r.Context(), ref)
	if err != nil {
		writeError(w, newError(http.StatusServiceUnavailable, gatewayapi.TypeServer, gatewayapi.CodeNotPersisted, err.Error()))
		return
	}
	writeJSON(w, ref.render(plan, data))
}

// putPlan sets the report's planned sections. A plan already persisted (by
// an earlier attempt) is kept: a replacement attempt takes it over.
func (g *Gateway) putPlan(w http.ResponseWriter, r *http.Request, k *keeper) {
	var req gatewayapi.ReportPlanRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case len(req.Sections) == 0 || len(req.Sections) > maxSections:
		writeError(w, errInvalid("sections", fmt.Sprintf("sections must list 1 to %d planned section titles, not %d", maxSections, len(req.Sections))))
		return
	}
	for i, s := range req.Sections {
		if strings.TrimSpace(s) == "" || len(s) > 256 {
			writeError(w, errInvalid(fmt.Sprintf("sections[%d]", i), fmt.Sprintf("sections[%d] must be a title of 1 to 256 characters", i)))
			return
		}
	}
	k.mu.Lock()
	stopped := k.stoppedLocked()
	k.mu.Unlock()
	if stopped != nil {
		writeError(w, stopped)
		return
	}
	ref := k.reportRef()
	rep, err := g.writeReport(r.Context(), ref, func(plan []string, _ map[string]string) ([]string, error) {
		if len(plan) > 0 {
			return plan, nil
		}
		return req.Sections, nil
	})
	if err != nil {
		writeError(w, errNotPersisted("could not write the report's plan: "+err.Error()))
		return
	}
	k.record(func() {
		k.facts.publication.BlocksPlanned = int32(len(rep.Sections))
		k.facts.publication.BlocksCommitted = rep.Committed
		k.facts.publication.Location = rep.Location
	})
	writeJSON(w, rep)
}

// postSection publishes one section: the effect of an admitted
// report.publish tool call with the same section and content.
func (g *Gateway) postSection(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	var req gatewayapi.PublishRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	section := strings.TrimSpace(req.Section)
	switch {
	case req.CallID == "":
		writeError(w, errInvalid("callID", "callID is required: the id of the admitted "+gatewayapi.ToolReportPublish+" tool call"))
		return
	case section == "":
		writeError(w, errInvalid("section", "section is required"))
		return
	case strings.TrimSpace(req.Content) == "":
		writeError(w, errInvalid("content", "content is required"))
		return
	}
	k.mu.Lock()
	c := k.calls[req.CallID]
	k.mu.Unlock()
	switch {
	case c == nil || c.tool != gatewayapi.ToolReportPublish:
		writeError(w, newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodePermissionDenied,
			fmt.Sprintf("callID %q is not an admitted %s call awaiting its outcome: publication is the effect of an admitted call",
				req.CallID, gatewayapi.ToolReportPublish)))
		return
	case strings.TrimSpace(c.section) != section || c.content != req.Content:
		writeError(w, newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodePermissionDenied,
			fmt.Sprintf("the section and content differ from the arguments of the admitted call %s (which were approved)", req.CallID)))
		return
	}
	rep, e := k.publish(r.Context(), section, req.Content)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, rep)
}

// publish writes section into the report and records the publication. With
// no plan yet (an agent that only publishes, e.g. through the MCP door),
// the section is added to the plan.
func (k *keeper) publish(ctx context.Context, section, content string) (gatewayapi.Report, *apiError) {
	section = strings.TrimSpace(section)
	if len(content) > maxSectionBytes {
		content = textutil.Cut(content, maxSectionBytes) + "\n\n(truncated)"
	}
	ref := k.reportRef()
	var name string
	rep, err := k.g.writeReport(ctx, ref, func(plan []string, data map[string]string) ([]string, error) {
		for i, s := range plan {
			if strings.EqualFold(strings.TrimSpace(s), section) {
				name = s
				data[SectionKey(i, s)] = content
				return plan, nil
			}
		}
		if (len(plan) == 0 || data[planGrowsKey] == strTrue) && len(plan) < maxSections {
			// No plan: the plan is what gets published.
			data[planGrowsKey] = strTrue
			name = section
			data[SectionKey(len(plan), section)] = content
			return append(plan, section), nil
		}
		return nil, &reportError{errInvalid("section", fmt.Sprintf("section %q is not in the report's plan %q", section, plan))}
	})
	if re, ok := err.(*reportError); ok {
		return rep, re.e
	}
	if err != nil {
		return rep, errNotPersisted("could not write the report: " + err.Error())
	}
	k.record(func() {
		k.facts.publication.BlocksPlanned = int32(len(rep.Sections))
		k.facts.publication.BlocksCommitted = rep.Committed
		k.facts.publication.Location = rep.Location
	})
	k.g.log.V(1).Info("Published section", "runattempt", k.key, "section", name)
	return rep, nil
}

// postSettle settles the publication from what the report holds: Complete
// if every planned section is in it, Partial if some are, None if none.
func (g *Gateway) postSettle(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	if e := decode(r, &struct{}{}); e != nil {
		writeError(w, e)
		return
	}
	ref := k.reportRef()
	plan, data, err := g.loadReport(r.Context(), ref)
	if err != nil {
		writeError(w, errNotPersisted("could not read the report back to settle: "+err.Error()))
		return
	}
	rep := ref.render(plan, data)
	out := gatewayapi.SettleResponse{Settlement: v1alpha1.SettlementNone, BlocksPlanned: int32(len(plan)), BlocksCommitted: rep.Committed}
	switch {
	case rep.Committed > 0 && int(rep.Committed) == len(plan):
		out.Settlement = v1alpha1.SettlementComplete
	case rep.Committed > 0:
		out.Settlement = v1alpha1.SettlementPartial
	}
	if err := k.commit(r.Context(), func() {
		p := &k.facts.publication
		p.BlocksPlanned, p.BlocksCommitted, p.Location = out.BlocksPlanned, out.BlocksCommitted, rep.Location
		p.Settlement, p.Settled = out.Settlement, true
	}); err != nil {
		writeError(w, errNotPersisted("the settlement was recorded but is not yet durable: "+err.Error()))
		return
	}
	writeJSON(w, out)
}
