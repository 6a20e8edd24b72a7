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

package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A run admitted without the mutating webhook has no deadline, maxSteps or
// maxAttempts (the CRD no longer defaults them): readers get the built-in
// defaults, as internal/lifecycle decides with.
func TestEffectiveDefaults(t *testing.T) {
	var spec ResearchRunSpec
	if got := spec.Budget.EffectiveDeadline(); got != 30*time.Minute {
		t.Errorf("EffectiveDeadline() = %v, want 30m", got)
	}
	if got := spec.Gates.EffectiveMaxSteps(); got != 20 {
		t.Errorf("EffectiveMaxSteps() = %d, want 20", got)
	}
	if got := spec.Recovery.EffectiveMaxAttempts(); got != 3 {
		t.Errorf("EffectiveMaxAttempts() = %d, want 3", got)
	}
	spec.Budget.Deadline = &metav1.Duration{Duration: time.Hour}
	spec.Gates.MaxSteps, spec.Recovery.MaxAttempts = 200, 5
	if spec.Budget.EffectiveDeadline() != time.Hour || spec.Gates.EffectiveMaxSteps() != 200 || spec.Recovery.EffectiveMaxAttempts() != 5 {
		t.Errorf("set values must win: %v %d %d", spec.Budget.EffectiveDeadline(), spec.Gates.EffectiveMaxSteps(), spec.Recovery.EffectiveMaxAttempts())
	}
}
