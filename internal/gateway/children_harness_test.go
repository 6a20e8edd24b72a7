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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// A harness run's child runs the same harness (its template may hold no
// container of its own).
func TestAChildOfAHarnessRunKeepsTheHarness(t *testing.T) {
	parent := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
		Spec: v1alpha1.ResearchRunSpec{Harness: &v1alpha1.Harness{Type: v1alpha1.HarnessCodex, Model: "codex"}}}
	child := newChild(parent, 1, "p-c", "look it up", "", v1alpha1.Budget{ModelRequests: 2})
	if h := child.Spec.Harness; h == nil || h.Type != v1alpha1.HarnessCodex || h.Model != "codex" {
		t.Fatalf("child's harness: %+v", child.Spec.Harness)
	}
	if child.Spec.Harness == parent.Spec.Harness {
		t.Fatal("the child shares the parent's harness object")
	}
}
