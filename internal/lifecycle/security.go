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

package lifecycle

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// securityPosture mirrors the working attempt's securityPosture (the
// gateway holds it to the policy's stricter posture while a Security
// interceptor fails) on the run, with the SecurityDegraded condition: True
// while it is set, False once it was True and is cleared (a run whose
// policy never degraded has no such condition). Nothing is mirrored while
// the run is not active: the posture concerns calls, and an ended run makes
// none. It decides nothing about the run's phase.
func (e *enactment) securityPosture() {
	st := &e.st
	st.SecurityPosture = nil
	if st.Phase.IsActive() && e.cur.exists {
		st.SecurityPosture = e.cur.facts.Status.SecurityPosture.DeepCopy()
	}
	if p := st.SecurityPosture; p != nil {
		e.setCondition(v1alpha1.ConditionSecurityDegraded, metav1.ConditionTrue, v1alpha1.EventReasonSecurityDegraded,
			textutil.Truncate(p.Message, maxMessage))
		return
	}
	if e.condition(v1alpha1.ConditionSecurityDegraded) != nil {
		e.setCondition(v1alpha1.ConditionSecurityDegraded, metav1.ConditionFalse, v1alpha1.EventReasonSecurityRecovered,
			"the policy's Security interceptors are stable: the normal posture applies")
	}
}

// securityEvents are a SecurityDegraded warning when the run turned
// stricter and a SecurityRecovered event when it is back to normal.
func (e *enactment) securityEvents() []Event {
	before, after := e.f.in.Status.SecurityPosture, e.st.SecurityPosture
	switch {
	case before == nil && after != nil:
		return []Event{{corev1.EventTypeWarning, v1alpha1.EventReasonSecurityDegraded,
			textutil.Truncate(after.Message, maxEventMessage)}}
	case before != nil && after == nil:
		return []Event{{corev1.EventTypeNormal, v1alpha1.EventReasonSecurityRecovered,
			"the policy's Security interceptors are stable again: the run's writes are admitted as usual"}}
	}
	return nil
}
