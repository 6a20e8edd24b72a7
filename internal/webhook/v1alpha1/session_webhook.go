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
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/permission"
)

// SetupSessionWebhookWithManager registers the Session webhooks. Lookups go
// through the manager's cache; a miss is confirmed with a live read.
func SetupSessionWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.Session{}).
		WithValidator(&SessionValidator{Reader: cachedThenLive{cache: mgr.GetClient(), live: mgr.GetAPIReader()}}).
		WithDefaulter(&SessionDefaulter{Clock: clock.RealClock{}}).
		Complete()
}

// +kubebuilder:webhook:path=/mutate-agentrun-dev-v1alpha1-session,mutating=true,failurePolicy=fail,sideEffects=None,timeoutSeconds=5,groups=agentrun.dev,resources=sessions,verbs=create;update,versions=v1alpha1,name=msession-v1alpha1.kb.io,admissionReviewVersions=v1

// SessionDefaulter stamps every permission-mode switch with who made it (from
// the request's user info, never from the body), from/to, why and when, in
// the agentrun.dev/mode-change annotation; the Session controller moves it
// into status.modeHistory. Idempotent: a request that does not switch the mode
// is left alone.
type SessionDefaulter struct {
	Clock clock.PassiveClock
}

var _ admission.Defaulter[*v1alpha1.Session] = (*SessionDefaulter)(nil)

// Default stamps a mode switch.
func (d *SessionDefaulter) Default(ctx context.Context, obj *v1alpha1.Session) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return err
	}
	var from v1alpha1.PermissionMode
	if len(req.OldObject.Raw) > 0 {
		old := &v1alpha1.Session{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return err
		}
		if old.Spec.Mode == obj.Spec.Mode || obj.Spec.Mode == "" {
			// No switch (the validator refuses a changed stamp and a removed mode).
			return nil
		}
		from = old.Spec.Mode
	} else if obj.Spec.Mode == "" {
		// A new session without a mode has nothing to audit, and no stamp
		// may come from the request body.
		delete(obj.Annotations, v1alpha1.AnnotationModeChange)
		return nil
	}
	change := v1alpha1.ModeChange{
		From:   from,
		To:     obj.Spec.Mode,
		By:     req.UserInfo.Username,
		Reason: obj.Spec.ModeChangeReason,
		Time:   metav1.NewTime(d.Clock.Now().UTC().Truncate(1e9)),
	}
	raw, err := json.Marshal(change)
	if err != nil {
		return err
	}
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[v1alpha1.AnnotationModeChange] = string(raw)
	return nil
}

// +kubebuilder:webhook:path=/validate-agentrun-dev-v1alpha1-session,mutating=false,failurePolicy=fail,sideEffects=None,timeoutSeconds=5,groups=agentrun.dev,resources=sessions,verbs=create;update,versions=v1alpha1,name=vsession-v1alpha1.kb.io,admissionReviewVersions=v1

// SessionValidator checks a Session against its RuntimePolicy: the policy
// exists, the mode is within its ceiling, the queue overrides within its
// bounds, and nobody but the webhook writes the mode-change stamp.
type SessionValidator struct {
	Reader client.Reader
}

var _ admission.Validator[*v1alpha1.Session] = (*SessionValidator)(nil)

// ValidateCreate validates a new session.
func (v *SessionValidator) ValidateCreate(ctx context.Context, obj *v1alpha1.Session) (admission.Warnings, error) {
	return nil, v.validate(ctx, nil, obj)
}

// ValidateUpdate validates a changed session.
func (v *SessionValidator) ValidateUpdate(ctx context.Context, oldObj, obj *v1alpha1.Session) (admission.Warnings, error) {
	return nil, v.validate(ctx, oldObj, obj)
}

// ValidateDelete allows deletion; the Session's finalizer ends its runs.
func (v *SessionValidator) ValidateDelete(_ context.Context, _ *v1alpha1.Session) (admission.Warnings, error) {
	return nil, nil
}

func (v *SessionValidator) validate(ctx context.Context, old, s *v1alpha1.Session) error {
	errs := transitionErrors(old, s)
	p := &v1alpha1.RuntimePolicy{}
	err := v.Reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.PolicyRef.Name}, p)
	switch {
	case apierrors.IsNotFound(err):
		if s.DeletionTimestamp == nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "policyRef", "name"), s.Spec.PolicyRef.Name,
				"RuntimePolicy does not exist in this namespace; create the policy first"))
		}
		return invalid("Session", s.Name, errs)
	case err != nil:
		return apierrors.NewInternalError(fmt.Errorf("reading RuntimePolicy %q: %w", s.Spec.PolicyRef.Name, err))
	}
	errs = append(errs, modeErrors(old, s, p)...)
	errs = append(errs, queueErrors(s, p)...)
	return invalid("Session", s.Name, errs)
}

// transitionErrors checks what an update may change: the mode stamp is the
// webhook's, the mode cannot be removed, the policy cannot change under runs.
func transitionErrors(old, s *v1alpha1.Session) field.ErrorList {
	if old == nil {
		return nil
	}
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if old.Spec.Mode != "" && s.Spec.Mode == "" {
		errs = append(errs, field.Required(spec.Child("mode"),
			"cannot be removed once set; switch to the mode you want (with a modeChangeReason) instead"))
	}
	if old.Spec.Mode == s.Spec.Mode && old.Annotations[v1alpha1.AnnotationModeChange] != s.Annotations[v1alpha1.AnnotationModeChange] {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(v1alpha1.AnnotationModeChange),
			"is stamped by the admission webhook on a mode switch and cannot be written directly"))
	}
	if s.DeletionTimestamp == nil && old.Spec.PolicyRef != s.Spec.PolicyRef && (old.Status.ActiveRun != "" || old.Status.QueuedCount > 0) {
		errs = append(errs, field.Forbidden(spec.Child("policyRef"), "cannot change while the session has active or queued runs"))
	}
	return errs
}

// modeErrors keeps the mode within the policy's ceiling and requires a reason
// for a switch.
func modeErrors(old, s *v1alpha1.Session, p *v1alpha1.RuntimePolicy) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	ceiling := p.Spec.MaxMode
	if ceiling == "" {
		ceiling = v1alpha1.ModeEdit
	}
	modeChanged := old == nil || old.Spec.Mode != s.Spec.Mode
	if s.Spec.Mode != "" && modeChanged && !permission.ModeAllowed(s.Spec.Mode, ceiling) {
		errs = append(errs, field.Invalid(spec.Child("mode"), s.Spec.Mode,
			fmt.Sprintf("is above the ceiling of RuntimePolicy %q (maxMode %s); switching to %s needs a policy that allows it",
				p.Name, ceiling, s.Spec.Mode)))
	}
	if old != nil && old.Spec.Mode != s.Spec.Mode && s.Spec.ModeChangeReason == "" {
		errs = append(errs, field.Required(spec.Child("modeChangeReason"), "a permission-mode switch requires a reason"))
	}
	return errs
}

// queueErrors keeps the session's queue overrides within the policy's bounds.
func queueErrors(s *v1alpha1.Session, p *v1alpha1.RuntimePolicy) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "queue")
	q := p.Spec.Queue
	if l := s.Spec.Queue.Limit; l != nil && q.MaxLimit > 0 && *l > q.MaxLimit {
		errs = append(errs, field.Invalid(path.Child("limit"), *l,
			fmt.Sprintf("must not exceed the policy's queue.maxLimit (%d)", q.MaxLimit)))
	}
	t := s.Spec.Queue.Timeout
	if t == nil || q.MaxTimeout == nil || q.MaxTimeout.Duration <= 0 {
		return errs
	}
	switch {
	case t.Duration <= 0:
		errs = append(errs, field.Invalid(path.Child("timeout"), t.Duration.String(),
			fmt.Sprintf("must be positive: the policy bounds queue timeouts by queue.maxTimeout (%s), and 0 would mean none", q.MaxTimeout.Duration)))
	case t.Duration > q.MaxTimeout.Duration:
		errs = append(errs, field.Invalid(path.Child("timeout"), t.Duration.String(),
			fmt.Sprintf("must not exceed the policy's queue.maxTimeout (%s)", q.MaxTimeout.Duration)))
	}
	return errs
}

// invalid wraps field errors in the API's Invalid status, or returns nil.
func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
