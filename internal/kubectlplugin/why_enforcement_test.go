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

package kubectlplugin

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// An interceptor the policy marks enforcement: Agent is shown on the run:
// the gateway does not run it, so it binds only agents that run it.
func TestWhyShowsAgentEnforcedInterceptors(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rr := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"}}
	rr.Status.Attempt = 1
	ra := &v1alpha1.RunAttempt{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: runpod.Name("r", 1)}}
	ra.Spec.RunName, ra.Spec.Attempt = "r", 1
	ra.Spec.Policy.ResolvedChain = []v1alpha1.ResolvedInterceptor{
		{Name: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, Enforcement: v1alpha1.EnforcementGateway},
		{Name: "quota", Class: v1alpha1.ClassResource, Phase: v1alpha1.InterceptorPre, Enforcement: v1alpha1.EnforcementAgent},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rr, ra).Build()

	var out bytes.Buffer
	if err := Why(context.Background(), &out, c, WhyOptions{Namespace: "team", Name: "r", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if strings.Contains(l, "Agent-only interceptors:") {
			line = l
		}
	}
	if !strings.Contains(line, "quota") || strings.Contains(line, "auth") || !strings.Contains(line, "the gateway does not run them") {
		t.Errorf("want a row naming quota only, got %q in:\n%s", line, out.String())
	}
}
