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

package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The runs-by-phase gauge comes from the leader only: a standby replica,
// with the same cache, reports nothing, so a sum over replicas counts each
// run once.
func TestRunsGaugeOnlyOnTheLeader(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"},
		Status: v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseRunning}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(run).Build()
	elected := make(chan struct{})
	col := phaseCollector{reader: c, elected: elected}
	if n := testutil.CollectAndCount(col); n != 0 {
		t.Fatalf("a standby reported %d series", n)
	}
	close(elected)
	if n := testutil.CollectAndCount(col); n != 6 {
		t.Fatalf("the leader reported %d series, want one per phase (6)", n)
	}
}
