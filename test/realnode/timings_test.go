//go:build realnode

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

package realnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// marker names a timed run in its goal, which the agent sends in its first model request.
var marker = regexp.MustCompile(`timing-[0-9]+-[0-9]+`)

// marks is the provider's front: it notes the first time each marker is seen in a request.
type marks struct {
	next http.Handler
	mu   sync.Mutex
	seen map[string]time.Time
}

func (m *marks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	now := time.Now()
	m.mu.Lock()
	for _, k := range marker.FindAll(body, -1) {
		if _, ok := m.seen[string(k)]; !ok {
			m.seen[string(k)] = now
		}
	}
	m.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	m.next.ServeHTTP(w, r)
}

func (m *marks) at(k string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.seen[k]
	return t, ok
}

// quickScript is a run of one model turn that finishes: no tool, no approval.
const quickScript = "plan: [Answer]\nplanTokens: 50\nturns:\n- say: Done.\n  tokens: 40\n  finish: true\n"

// TestTimings measures, on the real node, the time from a run's create to its attempt pod
// Running and to its first model request at the provider, for 1 run and for 20 at once (each in
// its own Session: a Session runs one run at a time).
func TestTimings(t *testing.T) {
	for _, n := range []int{1, 20} {
		t.Run(fmt.Sprintf("%d runs", n), func(t *testing.T) {
			g := NewWithT(t)
			ns := namespace(t, g, "timing")
			applySamples(g, ns) // the policy "default" and the script ConfigMap, and the sample run
			ctx := context.Background()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quick"},
				Data: map[string]string{"script.yaml": quickScript}}
			g.Expect(cl.Create(ctx, cm)).To(Succeed())
			created := make([]time.Time, n)
			names := make([]string, n)
			for i := range n {
				names[i] = fmt.Sprintf("timing-%d-%d", n, i)
				g.Expect(cl.Create(ctx, &v1alpha1.Session{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]},
					Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "default"}},
				})).To(Succeed())
			}
			for i := range n {
				run := quickRun(ns, names[i])
				created[i] = time.Now()
				g.Expect(cl.Create(ctx, run)).To(Succeed())
			}
			running := make([]time.Duration, n)
			firstRequest := make([]time.Duration, n)
			g.Eventually(func(g Gomega) {
				var pods corev1.PodList
				g.Expect(cl.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
				now := time.Now()
				for _, p := range pods.Items {
					i := slices.Index(names, p.Labels[v1alpha1.LabelRun])
					if i < 0 || running[i] != 0 || len(p.Status.ContainerStatuses) == 0 {
						continue
					}
					if cs := p.Status.ContainerStatuses[0]; cs.State.Running != nil || cs.State.Terminated != nil {
						running[i] = now.Sub(created[i])
					}
				}
				for i, name := range names {
					if at, ok := firstSeen.at(name); ok && firstRequest[i] == 0 {
						firstRequest[i] = at.Sub(created[i])
					}
				}
				g.Expect(running).NotTo(ContainElement(time.Duration(0)), "pods not yet running")
				g.Expect(firstRequest).NotTo(ContainElement(time.Duration(0)), "runs without a model request yet")
			}, timeout, 50*time.Millisecond).Should(Succeed())
			t.Logf("REALNODE TIMING %d run(s): create -> pod Running %s; create -> first model request %s",
				n, spread(running), spread(firstRequest))
			for _, name := range names {
				g.Eventually(func() v1alpha1.Phase { return getRun(g, ns, name).Status.Phase },
					timeout, interval).Should(Equal(v1alpha1.PhaseTerminated))
			}
		})
	}
}

func quickRun(ns, name string) *v1alpha1.ResearchRun {
	return &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: name},
			Goal:       "Answer " + name,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "agent", Image: agentImage, Args: []string{"--provider=scripted"},
				Env: []corev1.EnvVar{{Name: "AGENTRUN_SCRIPT", ValueFrom: &corev1.EnvVarSource{
					ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "quick"}, Key: "script.yaml"}}}},
			}}}},
			Budget: v1alpha1.Budget{ModelRequests: 10, ToolCalls: 10,
				OutputReserve: v1alpha1.OutputReserve{ModelRequests: 1, ToolCalls: 1}},
		},
	}
}

// spread is the median and the maximum of ds.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 1 {
		return s[0].Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("median %s, max %s", s[len(s)/2].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond))
}
