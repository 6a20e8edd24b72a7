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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/policy"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// SetupResearchRunWebhookWithManager registers the ResearchRun webhooks. The
// mutating one is a raw handler so that its patch touches nothing but the
// approvals it stamps and the tier defaults it fills (a re-serialised pod
// template would be a spurious change).
func SetupResearchRunWebhookWithManager(mgr ctrl.Manager) error {
	reader := cachedThenLive{cache: mgr.GetClient(), live: mgr.GetAPIReader()}
	mgr.GetWebhookServer().Register("/mutate-agentrun-dev-v1alpha1-researchrun",
		&webhook.Admission{Handler: runMutator{&ApprovalStamper{Clock: clock.RealClock{}}, &TierDefaulter{Reader: reader}}})
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.ResearchRun{}).
		WithValidator(&ResearchRunValidator{Reader: reader, Access: SubjectAccessReviewer{Client: mgr.GetClient()}}).
		Complete()
}

// +kubebuilder:webhook:path=/mutate-agentrun-dev-v1alpha1-researchrun,mutating=true,failurePolicy=fail,sideEffects=None,timeoutSeconds=5,groups=agentrun.dev,resources=researchruns,verbs=create;update,versions=v1alpha1,name=mresearchrun-v1alpha1.kb.io,admissionReviewVersions=v1

// stampTolerance is how far from now an approval time may be for the stamper
// to accept it as its own earlier stamp.
const stampTolerance = time.Minute

// ApprovalStamper stamps each new entry of spec.approvals with the approver
// (the requester's user name, from the request's user info) and the time, and
// rejects an entry whose body names another approver. Idempotent: an entry
// already stamped with the requester's name is left as it is.
type ApprovalStamper struct {
	Clock clock.PassiveClock
}

var _ admission.Handler = (*ApprovalStamper)(nil)

// Handle implements admission.Handler.
func (s *ApprovalStamper) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	run := &v1alpha1.ResearchRun{}
	if err := json.Unmarshal(req.Object.Raw, run); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	known := 0
	if len(req.OldObject.Raw) > 0 {
		old := &v1alpha1.ResearchRun{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		known = len(old.Spec.Approvals)
	}
	user := req.UserInfo.Username
	now := s.Clock.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	var ops []jsonpatch.Operation
	var errs field.ErrorList
	for i := known; i < len(run.Spec.Approvals); i++ {
		a := run.Spec.Approvals[i]
		path := field.NewPath("spec", "approvals").Index(i)
		switch {
		case a.Approver != "" && a.Approver != user:
			errs = append(errs, field.Forbidden(path.Child("approver"), fmt.Sprintf(
				"is stamped by the admission webhook from the requester's identity (%q); a request may not name another approver (%q)", user, a.Approver)))
			continue
		case a.Approver == "":
			ops = append(ops, jsonpatch.NewOperation("add", fmt.Sprintf("/spec/approvals/%d/approver", i), user))
		}
		switch {
		case a.Time == nil:
			ops = append(ops, jsonpatch.NewOperation("add", fmt.Sprintf("/spec/approvals/%d/time", i), now))
		case a.Approver == "":
			errs = append(errs, field.Forbidden(path.Child("time"), "is stamped by the admission webhook and may not be set by the request"))
		case a.Time.Time.Sub(s.Clock.Now()).Abs() > stampTolerance:
			// An entry carrying the requester's own name and a time is this
			// webhook's own stamp seen again (mutation is idempotent); a time
			// far from now is a backdated or future-dated forgery.
			errs = append(errs, field.Forbidden(path.Child("time"), fmt.Sprintf(
				"is stamped by the admission webhook; %s is not the time of this request", a.Time.UTC().Format(time.RFC3339))))
		}
	}
	if len(errs) > 0 {
		return admission.Errored(http.StatusUnprocessableEntity, invalid("ResearchRun", run.Name, errs))
	}
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	return admission.Patched("stamped approvals", ops...)
}

// +kubebuilder:webhook:path=/validate-agentrun-dev-v1alpha1-researchrun,mutating=false,failurePolicy=fail,sideEffects=None,timeoutSeconds=5,groups=agentrun.dev,resources=researchruns,verbs=create;update,versions=v1alpha1,name=vresearchrun-v1alpha1.kb.io,admissionReviewVersions=v1

// ResearchRunValidator checks a run against its Session and RuntimePolicy
// (read from the manager's cache): both exist, the budget, deadline, gates and
// attempts are within the policy's limits and its tier's caps (the tier
// exists), the budget nothing defaults is set, the reserve is smaller than the
// budget, and the pod template is a valid, restricted pod with at least one
// container and no unknown fields, that names no Secret, claim, CSI driver
// or ephemeral volume the policy's templateSources do not list, and nothing
// the requester may not read themselves (Access). On update, the template is
// immutable.
type ResearchRunValidator struct {
	Reader client.Reader
	// Access checks the requester's own access to what the template names.
	Access AccessReviewer
}

var _ admission.Validator[*v1alpha1.ResearchRun] = (*ResearchRunValidator)(nil)

// ValidateCreate validates a new run.
func (v *ResearchRunValidator) ValidateCreate(ctx context.Context, obj *v1alpha1.ResearchRun) (admission.Warnings, error) {
	errs := strictTemplate(ctx)
	errs = append(errs, templateErrors(obj)...)
	refErrs, err := v.referents(ctx, obj)
	if err != nil {
		return nil, err
	}
	errs = append(errs, refErrs...)
	errs = append(errs, reserveErrors(obj)...)
	return nil, invalid("ResearchRun", obj.Name, errs)
}

// ValidateUpdate keeps the pod template immutable (by meaning, not bytes)
// (stop and approvals only move forward: CEL enforces it). A new approval
// for an action no call of the run waits on (not in status.pendingApprovals)
// is admitted — approvals are append-only, and the latest decision before
// dispatch wins — with a warning that it changes nothing.
func (v *ResearchRunValidator) ValidateUpdate(ctx context.Context, oldObj, obj *v1alpha1.ResearchRun) (admission.Warnings, error) {
	var errs field.ErrorList
	if !equality.Semantic.DeepEqual(oldObj.Spec.Template, obj.Spec.Template) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "template"), "is immutable after creation"))
	} else if !bytes.Equal(templateRaw(ctx, true), templateRaw(ctx, false)) {
		errs = append(errs, strictTemplate(ctx)...)
	}
	errs = append(errs, costImmutable(oldObj.Spec.Budget, obj.Spec.Budget)...)
	return lateApprovals(oldObj, obj), invalid("ResearchRun", obj.Name, errs)
}

// lateApprovals warns of each approval the update appends whose action is
// not pending on the run (status.pendingApprovals, as stored).
func lateApprovals(oldObj, obj *v1alpha1.ResearchRun) admission.Warnings {
	var warnings admission.Warnings
	for _, a := range obj.Spec.Approvals[min(len(oldObj.Spec.Approvals), len(obj.Spec.Approvals)):] {
		if slices.ContainsFunc(oldObj.Status.PendingApprovals, func(r v1alpha1.ApprovalRequest) bool { return r.ActionID == a.ActionID }) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf(
			"approval of %s changes nothing: no call of this run waits on it (already dispatched, refused or expired)", a.ActionID))
	}
	return warnings
}

// ValidateDelete allows deletion.
func (v *ResearchRunValidator) ValidateDelete(_ context.Context, _ *v1alpha1.ResearchRun) (admission.Warnings, error) {
	return nil, nil
}

// templateRaw returns the raw JSON of spec.template of the request's object
// (or old object).
func templateRaw(ctx context.Context, old bool) []byte {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil
	}
	raw := req.Object.Raw
	if old {
		raw = req.OldObject.Raw
	}
	var obj struct {
		Spec struct {
			Template json.RawMessage `json:"template"`
		} `json:"spec"`
	}
	if json.Unmarshal(raw, &obj) != nil {
		return nil
	}
	return obj.Spec.Template
}

// strictTemplate decodes spec.template strictly: the CRD keeps its schema open
// (a full pod schema would make the CRD too large to apply), so this is where
// a misspelt field is caught instead of silently dropped.
func strictTemplate(ctx context.Context) field.ErrorList {
	raw := templateRaw(ctx, false)
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&corev1.PodTemplateSpec{}); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "template"), "(pod template)", err.Error())}
	}
	return nil
}

// templateErrors checks the template builds into a restricted pod.
func templateErrors(run *v1alpha1.ResearchRun) field.ErrorList {
	if len(run.Spec.Template.Spec.Containers) == 0 && run.Spec.Harness == nil {
		return field.ErrorList{field.Required(field.NewPath("spec", "template", "spec", "containers"), "at least one container is required")}
	}
	probe := run.DeepCopy()
	if probe.Name == "" {
		probe.Name = "probe"
	}
	if probe.Namespace == "" {
		probe.Namespace = "default"
	}
	_, err := runpod.Build(probe, 1, "", runpod.Gateway{URL: "https://agentrun-gateway", CAConfigMap: runpod.DefaultGatewayCAConfigMap})
	var te *runpod.TemplateError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return te.Errors
	default:
		return field.ErrorList{field.Invalid(field.NewPath("spec", "template"), "(pod template)", err.Error())}
	}
}

// reserveErrors: the reserve must leave something to work with.
func reserveErrors(run *v1alpha1.ResearchRun) field.ErrorList {
	b := run.Spec.Budget
	p := field.NewPath("spec", "budget", "outputReserve")
	var errs field.ErrorList
	if b.ModelRequests > 0 && b.OutputReserve.ModelRequests >= b.ModelRequests {
		errs = append(errs, field.Invalid(p.Child("modelRequests"), b.OutputReserve.ModelRequests,
			fmt.Sprintf("must be smaller than spec.budget.modelRequests (%d): the reserve is for finalizing, the rest for working", b.ModelRequests)))
	}
	if b.ToolCalls > 0 && b.OutputReserve.ToolCalls >= b.ToolCalls {
		errs = append(errs, field.Invalid(p.Child("toolCalls"), b.OutputReserve.ToolCalls,
			fmt.Sprintf("must be smaller than spec.budget.toolCalls (%d)", b.ToolCalls)))
	}
	switch c := b.OutputReserve.Cost; {
	case c > 0 && b.Cost == nil:
		errs = append(errs, field.Required(field.NewPath("spec", "budget", "cost"),
			fmt.Sprintf("spec.budget.outputReserve.cost (%s) needs a cost budget to be kept from", c)))
	case b.Cost != nil && c >= *b.Cost:
		errs = append(errs, field.Invalid(p.Child("cost"), c.String(),
			fmt.Sprintf("must be smaller than spec.budget.cost (%s): the reserve is for finalizing, the rest for working", *b.Cost)))
	}
	return errs
}

// referents checks the run's Session and RuntimePolicy exist, that the run
// stays within the policy's limits and its tier, and that its template names
// only what the policy and the requester's own access allow.
func (v *ResearchRunValidator) referents(ctx context.Context, run *v1alpha1.ResearchRun) (field.ErrorList, error) {
	spec := field.NewPath("spec")
	s := &v1alpha1.Session{}
	err := v.Reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.SessionRef.Name}, s)
	switch {
	case apierrors.IsNotFound(err):
		return field.ErrorList{field.Invalid(spec.Child("sessionRef", "name"), run.Spec.SessionRef.Name,
			"Session does not exist in this namespace; create the Session first")}, nil
	case err != nil:
		return nil, apierrors.NewInternalError(fmt.Errorf("reading Session %q: %w", run.Spec.SessionRef.Name, err))
	}
	if s.DeletionTimestamp != nil {
		return field.ErrorList{field.Invalid(spec.Child("sessionRef", "name"), s.Name, "the session is being deleted")}, nil
	}
	p := &v1alpha1.RuntimePolicy{}
	err = v.Reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: s.Spec.PolicyRef.Name}, p)
	switch {
	case apierrors.IsNotFound(err):
		return field.ErrorList{field.Invalid(spec.Child("sessionRef", "name"), s.Name,
			fmt.Sprintf("the Session's RuntimePolicy %q does not exist in this namespace", s.Spec.PolicyRef.Name))}, nil
	case err != nil:
		return nil, apierrors.NewInternalError(fmt.Errorf("reading RuntimePolicy %q: %w", s.Spec.PolicyRef.Name, err))
	}
	errs := append(limitErrors(run, p), tierErrors(ctx, run, p)...)
	errs = append(errs, policy.CostErrors(run.Spec.Budget, p)...)
	srcErrs, err := v.sourceErrors(ctx, run, p)
	if err != nil {
		return nil, err
	}
	return append(errs, srcErrs...), nil
}

func limitErrors(run *v1alpha1.ResearchRun, p *v1alpha1.RuntimePolicy) field.ErrorList {
	var errs field.ErrorList
	l := p.Spec.Limits
	over := func(path *field.Path, value any, limit any, what string) {
		errs = append(errs, field.Invalid(path, value, fmt.Sprintf("exceeds the RuntimePolicy %q limit %s (%v)", p.Name, what, limit)))
	}
	b, budget := run.Spec.Budget, field.NewPath("spec", "budget")
	if l.MaxModelRequests != nil && b.ModelRequests > *l.MaxModelRequests {
		over(budget.Child("modelRequests"), b.ModelRequests, *l.MaxModelRequests, "maxModelRequests")
	}
	if l.MaxToolCalls != nil && b.ToolCalls > *l.MaxToolCalls {
		over(budget.Child("toolCalls"), b.ToolCalls, *l.MaxToolCalls, "maxToolCalls")
	}
	if l.MaxTokens != nil && b.Tokens != nil && *b.Tokens > *l.MaxTokens {
		over(budget.Child("tokens"), *b.Tokens, *l.MaxTokens, "maxTokens")
	}
	if l.MaxTokens != nil && b.Tokens == nil {
		errs = append(errs, field.Required(budget.Child("tokens"), fmt.Sprintf("RuntimePolicy %q caps tokens (maxTokens %d), so the run must budget them", p.Name, *l.MaxTokens)))
	}
	if l.MaxCost != nil && (b.Cost == nil || *b.Cost > *l.MaxCost) {
		errs = append(errs, costCapError(p.Name, b.Cost, *l.MaxCost))
	}
	if l.MaxDeadline != nil && b.Deadline != nil && b.Deadline.Duration > l.MaxDeadline.Duration {
		over(budget.Child("deadline"), b.Deadline.Duration.String(), l.MaxDeadline.Duration, "maxDeadline")
	}
	if l.MaxSteps != nil && run.Spec.Gates.MaxSteps > *l.MaxSteps {
		over(field.NewPath("spec", "gates", "maxSteps"), run.Spec.Gates.MaxSteps, *l.MaxSteps, "maxSteps")
	}
	if l.MaxAttempts != nil && run.Spec.Recovery.MaxAttempts > *l.MaxAttempts {
		over(field.NewPath("spec", "recovery", "maxAttempts"), run.Spec.Recovery.MaxAttempts, *l.MaxAttempts, "maxAttempts")
	}
	return errs
}

// costImmutable keeps spec.budget.cost and its reserve as created, like the
// rest of the budget (whose immutability is a CEL rule; a rule comparing
// these strings would cross the API server's cost budget for CEL).
func costImmutable(was, is v1alpha1.Budget) field.ErrorList {
	budget := field.NewPath("spec", "budget")
	var errs field.ErrorList
	if !equality.Semantic.DeepEqual(was.Cost, is.Cost) {
		errs = append(errs, field.Forbidden(budget.Child("cost"), "is immutable after creation"))
	}
	if was.OutputReserve.Cost != is.OutputReserve.Cost {
		errs = append(errs, field.Forbidden(budget.Child("outputReserve", "cost"), "is immutable after creation"))
	}
	return errs
}

// costCapError is the refusal of a run's cost (or of its lack of one) under
// a policy's maxCost.
func costCapError(policyName string, cost *v1alpha1.Money, limit v1alpha1.Money) *field.Error {
	path := field.NewPath("spec", "budget", "cost")
	if cost == nil {
		return field.Required(path, fmt.Sprintf("RuntimePolicy %q caps cost (maxCost %s), so the run must budget it", policyName, limit))
	}
	return field.Invalid(path, cost.String(), fmt.Sprintf("exceeds the RuntimePolicy %q limit maxCost (%s)", policyName, limit))
}
