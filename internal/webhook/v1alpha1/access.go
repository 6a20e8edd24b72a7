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
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// AccessReviewer says whether a user may do something in a namespace.
type AccessReviewer interface {
	Allowed(ctx context.Context, user authenticationv1.UserInfo, namespace string, a runpod.Access) (bool, error)
}

// SubjectAccessReviewer asks the API server, with a SubjectAccessReview.
type SubjectAccessReviewer struct {
	Client client.Client
}

// Allowed implements AccessReviewer.
func (s SubjectAccessReviewer) Allowed(ctx context.Context, user authenticationv1.UserInfo, namespace string, a runpod.Access) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: a.Verb, Resource: a.Resource, Name: a.Name,
		},
	}}
	if err := s.Client.Create(ctx, sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

// sourceErrors checks what the run's template names against the policy's
// templateSources, then asks whether the requester holds the access each
// allowed reference needs (once per distinct access). A review that cannot
// be made refuses the run (fail closed).
func (v *ResearchRunValidator) sourceErrors(ctx context.Context, run *v1alpha1.ResearchRun, p *v1alpha1.RuntimePolicy) (field.ErrorList, error) {
	refs := runpod.References(&run.Spec.Template)
	if len(refs) == 0 {
		return nil, nil
	}
	errs := runpod.CheckSources(refs, p.Spec.TemplateSources, p.Name)
	if len(errs) > 0 {
		return errs, nil
	}
	if v.Access == nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("no access reviewer: cannot check the template's references"))
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("no admission request: cannot check the template's references: %w", err))
	}
	seen := map[runpod.Access]bool{}
	for _, r := range refs {
		if r.Access == nil {
			continue
		}
		ok, done := seen[*r.Access]
		if !done {
			if ok, err = v.Access.Allowed(ctx, req.UserInfo, run.Namespace, *r.Access); err != nil {
				return nil, apierrors.NewInternalError(fmt.Errorf("checking whether %s may %s %s %q: %w",
					req.UserInfo.Username, r.Access.Verb, r.Access.Resource, r.Access.Name, err))
			}
			seen[*r.Access] = ok
		}
		if !ok {
			errs = append(errs, runpod.Denied(r, req.UserInfo.Username))
		}
	}
	return errs, nil
}
