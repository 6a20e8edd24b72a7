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
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/policy"
)

// SetupRuntimePolicyWebhookWithManager registers the RuntimePolicy validating webhook.
func SetupRuntimePolicyWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.RuntimePolicy{}).
		WithValidator(&RuntimePolicyValidator{}).
		Complete()
}

// +kubebuilder:webhook:path=/validate-agentrun-dev-v1alpha1-runtimepolicy,mutating=false,failurePolicy=fail,sideEffects=None,timeoutSeconds=5,groups=agentrun.dev,resources=runtimepolicies,verbs=create;update,versions=v1alpha1,name=vruntimepolicy-v1alpha1.kb.io,admissionReviewVersions=v1

// RuntimePolicyValidator rejects a policy whose interceptor chain, tool
// catalogue or tiers break a rule (internal/policy), naming the interceptor,
// tool or tier, the field and the rule.
type RuntimePolicyValidator struct{}

var _ admission.Validator[*v1alpha1.RuntimePolicy] = (*RuntimePolicyValidator)(nil)

// ValidateCreate validates a new policy.
func (v *RuntimePolicyValidator) ValidateCreate(_ context.Context, obj *v1alpha1.RuntimePolicy) (admission.Warnings, error) {
	return policy.Warnings(&obj.Spec), validatePolicy(obj)
}

// ValidateUpdate validates a changed policy.
func (v *RuntimePolicyValidator) ValidateUpdate(_ context.Context, _, obj *v1alpha1.RuntimePolicy) (admission.Warnings, error) {
	return policy.Warnings(&obj.Spec), validatePolicy(obj)
}

// ValidateDelete allows deletion.
func (v *RuntimePolicyValidator) ValidateDelete(_ context.Context, _ *v1alpha1.RuntimePolicy) (admission.Warnings, error) {
	return nil, nil
}

func validatePolicy(p *v1alpha1.RuntimePolicy) error {
	errs := policy.Validate(&p.Spec)
	// The gateway's own registry is the one list of what it implements.
	errs = append(errs, policy.ValidateImplemented(&p.Spec, chain.BuiltinPhases())...)
	if len(errs) > 0 {
		return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("RuntimePolicy").GroupKind(), p.Name, errs)
	}
	return nil
}
