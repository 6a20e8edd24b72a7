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

package agent_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// TestSpawnAndReadChildren: the SDK asks for a child, reads it back, and
// gets a refusal naming the limit as a *GatewayError.
func TestSpawnAndReadChildren(t *testing.T) {
	parent := &v1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: gatewaytest.Run, UID: gatewaytest.RunUID},
		Spec: v1.ResearchRunSpec{SessionRef: v1.LocalObjectReference{Name: "s"}, Goal: "g",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "a"}}}}},
	}
	e := newEnvWith(t, gatewaytest.Options{Objects: []client.Object{parent}, Mutate: func(ra *v1.RunAttempt) {
		ra.Spec.Policy.Children = &v1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 1, MaxConcurrent: 1}
	}})
	a := e.newAgent(nil)
	ctx := e.start(a)
	c, err := a.Spawn(ctx, gatewayapi.ChildRequest{Name: "x", Task: "read x", Budget: gatewayapi.ChildBudget{ModelRequests: 3}})
	if err != nil || c.Name != "survey-x" || c.Carved.ModelRequests != 3 {
		t.Fatalf("Spawn: %+v %v", c, err)
	}
	kids, err := a.Children(ctx)
	if err != nil || len(kids) != 1 || kids[0].Name != "survey-x" {
		t.Errorf("Children: %+v %v", kids, err)
	}
	if got, err := a.Child(ctx, "survey-x"); err != nil || got.Report == nil {
		t.Errorf("Child: %+v %v", got, err)
	}
	_, err = a.Spawn(ctx, gatewayapi.ChildRequest{Name: "y", Task: "read y", Budget: gatewayapi.ChildBudget{ModelRequests: 1}})
	var ge *agent.GatewayError
	if !errors.As(err, &ge) || ge.Code != gatewayapi.CodeChildRefused || ge.Param != "children.maxChildren" {
		t.Errorf("a second child under maxChildren 1: %v, want child_refused naming children.maxChildren", err)
	}
}
