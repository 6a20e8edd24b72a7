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

package research

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Report ConfigMap layout.
const (
	// IndexKey is the ConfigMap key of the report's index (JSON).
	IndexKey = "index.json"
	// maxSections bounds a plan.
	maxSections = 20
	// maxSectionBytes bounds one section's content (a ConfigMap holds 1 MiB).
	maxSectionBytes = 40 << 10
)

// Index is the report's table of contents, stored under IndexKey.
type Index struct {
	// Run is the ResearchRun's name.
	Run string `json:"run"`
	// Goal is the run's goal.
	Goal string `json:"goal,omitempty"`
	// Sections are the planned sections, in order.
	Sections []IndexEntry `json:"sections"`
	// Attempt is the attempt that last wrote the report.
	Attempt int32 `json:"attempt,omitempty"`
}

// IndexEntry is one planned section.
type IndexEntry struct {
	// Name is the section's title.
	Name string `json:"name"`
	// Key is the ConfigMap key holding the section's text (Markdown).
	Key string `json:"key"`
	// Published says the section is in the ConfigMap.
	Published bool `json:"published"`
}

// report publishes sections into the run's report ConfigMap: <run>-report,
// labelled agentrun.dev/run=<run>, owned by the ResearchRun, one key per
// section plus the index.
type report struct {
	c       client.Client
	key     types.NamespacedName
	run     string
	label   string
	goal    string
	attempt int32
	owner   *metav1.OwnerReference
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

func newReport(c client.Client, ra *v1alpha1.RunAttempt) *report {
	r := &report{
		c:       c,
		key:     types.NamespacedName{Namespace: ra.Namespace, Name: ReportName(ra.Spec.RunName)},
		run:     ra.Spec.RunName,
		label:   ra.Labels[v1alpha1.LabelRun],
		goal:    ra.Spec.Goal,
		attempt: ra.Spec.Attempt,
	}
	if r.label == "" {
		r.label = truncateString(ra.Spec.RunName, 63)
	}
	for _, ref := range ra.OwnerReferences {
		if ref.Kind == "ResearchRun" && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/") {
			r.owner = &metav1.OwnerReference{
				APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: new(true),
			}
			break
		}
	}
	return r
}

// Location is the publication's location fact.
func (r *report) Location() string { return "configmap/" + r.key.Name }

// sectionKey is the ConfigMap key of the i-th (0-based) section.
func sectionKey(i int, name string) string {
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
	slug := strings.TrimSuffix(truncateString(b.String(), 60), "-")
	if slug == "" {
		slug = "section"
	}
	return fmt.Sprintf("%02d-%s.md", i+1, slug)
}

func (r *report) index(plan []string, data map[string]string) Index {
	idx := Index{Run: r.run, Goal: r.goal, Attempt: r.attempt}
	for i, s := range plan {
		k := sectionKey(i, s)
		_, ok := data[k]
		idx.Sections = append(idx.Sections, IndexEntry{Name: s, Key: k, Published: ok})
	}
	return idx
}

// load reads what earlier attempts persisted: the plan and the published
// sections. No ConfigMap means nothing was published.
func (r *report) load(ctx context.Context) (plan []string, published map[string]bool, err error) {
	cm := &corev1.ConfigMap{}
	published = map[string]bool{}
	if err := r.c.Get(ctx, r.key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, published, nil
		}
		return nil, nil, err
	}
	var idx Index
	if raw, ok := cm.Data[IndexKey]; ok {
		if err := json.Unmarshal([]byte(raw), &idx); err != nil {
			return nil, nil, fmt.Errorf("report %s: index: %w", r.key, err)
		}
	}
	for i, e := range idx.Sections {
		plan = append(plan, e.Name)
		if _, ok := cm.Data[sectionKey(i, e.Name)]; ok {
			published[e.Name] = true
		}
	}
	return plan, published, nil
}

// publish writes one section (and the index) durably. Writing the same
// section again replaces it: publishing is idempotent.
func (r *report) publish(ctx context.Context, plan []string, i int, content string) error {
	if len(content) > maxSectionBytes {
		content = truncateString(content, maxSectionBytes) + "\n\n(truncated)"
	}
	key := sectionKey(i, plan[i])
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		err := r.c.Get(ctx, r.key, cm)
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: r.key.Namespace, Name: r.key.Name,
				Labels: map[string]string{v1alpha1.LabelRun: r.label, "app.kubernetes.io/managed-by": "agentrun"},
			}}
			if r.owner != nil {
				cm.OwnerReferences = []metav1.OwnerReference{*r.owner}
			}
			cm.Data = map[string]string{key: content}
			cm.Data[IndexKey] = r.indexJSON(plan, cm.Data)
			err = r.c.Create(ctx, cm)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), r.key.Name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if cm.Labels[v1alpha1.LabelRun] != r.label {
			return fmt.Errorf("ConfigMap %s exists but is not run %s's report (label %s=%q)",
				r.key, r.run, v1alpha1.LabelRun, cm.Labels[v1alpha1.LabelRun])
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = content
		cm.Data[IndexKey] = r.indexJSON(plan, cm.Data)
		return r.c.Update(ctx, cm)
	})
}

func (r *report) indexJSON(plan []string, data map[string]string) string {
	raw, _ := json.MarshalIndent(r.index(plan, data), "", "  ")
	return string(raw)
}

// persisted counts the planned sections that are in the ConfigMap.
func (r *report) persisted(ctx context.Context, plan []string) (int32, error) {
	cm := &corev1.ConfigMap{}
	if err := r.c.Get(ctx, r.key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	var n int32
	for i, s := range plan {
		if _, ok := cm.Data[sectionKey(i, s)]; ok {
			n++
		}
	}
	return n, nil
}
