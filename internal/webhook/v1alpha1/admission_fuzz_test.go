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

// Fuzz targets of the admission paths: the RuntimePolicy, Session and
// ResearchRun webhooks fed arbitrary objects, with no API server (the
// referents come from a fake client). Each must not panic, must refuse
// with an Invalid status whose every cause names a field of the object,
// and must keep admitting what it admitted: after a JSON round trip, after
// its own mutation ran again (idempotence), on a no-op update, and (for a
// run) when the manifest it was created from is applied again. Run one
// with
//
//	go test ./internal/webhook/v1alpha1/ -run '^$' -fuzz '^FuzzResearchRunAdmission$' -fuzztime 10m

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/policy"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// fuzzNow is the fuzzed webhooks' clock.
var fuzzNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// sampleJSON reads config/samples/<name> as JSON (a seed).
func sampleJSON(f *testing.F, name string) []byte {
	f.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "samples", name))
	if err != nil {
		f.Fatal(err)
	}
	out, err := yaml.YAMLToJSON(data)
	if err != nil {
		f.Fatal(err)
	}
	return out
}

func mustJSON(f *testing.F, v any) []byte {
	f.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	return out
}

// checkRefusal fails unless err is an Invalid status of kind whose every
// cause names a field of the object (spec… or metadata…) and says why.
func checkRefusal(t *testing.T, kind string, err error) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("refusal is not an API status: %T %v", err, err)
	}
	st := se.Status()
	if st.Reason != metav1.StatusReasonInvalid || st.Details == nil || st.Details.Kind != kind {
		t.Fatalf("refusal is not an Invalid %s: reason %q, details %+v: %v", kind, st.Reason, st.Details, err)
	}
	if len(st.Details.Causes) == 0 {
		t.Fatalf("refusal names no field: %v", err)
	}
	for _, c := range st.Details.Causes {
		if !strings.HasPrefix(c.Field, "spec") && !strings.HasPrefix(c.Field, "metadata") || c.Message == "" {
			t.Fatalf("refusal cause without a field of the object or a message: %+v (in %v)", c, err)
		}
	}
}

// sameVerdict fails unless two validations agree: both admit, or both
// refuse with the same message.
func sameVerdict(t *testing.T, what string, first, again error) {
	t.Helper()
	switch {
	case first == nil && again != nil:
		t.Fatalf("admitted, then refused %s: %v", what, again)
	case first != nil && again == nil:
		t.Fatalf("refused, then admitted %s: %v", what, first)
	case first != nil && first.Error() != again.Error():
		t.Fatalf("refused differently %s:\n%v\n%v", what, first, again)
	}
}

// FuzzRuntimePolicyAdmission: the RuntimePolicy validator on arbitrary
// policies (JSON as the API server would send it).
func FuzzRuntimePolicyAdmission(f *testing.F) {
	f.Add(sampleJSON(f, "agentrun_v1alpha1_runtimepolicy.yaml"))
	f.Add(mustJSON(f, tieredPolicy()))
	f.Add([]byte(`{"metadata":{"name":"p"},"spec":{}}`))
	f.Add([]byte(`{"spec":{"tiers":[{"name":"a"},{"name":"a"}],"defaultTier":"b"}}`))
	f.Add([]byte(`{"spec":{"interceptors":[{"name":"x","class":"Security","phase":"Around","requires":["x"]}],` +
		`"tools":[{"name":"t","risk":"High","effect":"External"}],"autoApprove":["t","u"],"maxMode":"Plan","defaultMode":"Full"}}`))
	f.Add([]byte(`{"spec":{"onSecurityDegraded":{"errorRate":"1.5","window":"-1s","minCalls":0,"posture":"Nope"},` +
		`"limits":{"maxModelRequests":-1},"queue":{"maxLimit":-3,"maxTimeout":"0s"}}}`))
	v := &RuntimePolicyValidator{}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := &v1alpha1.RuntimePolicy{}
		if json.Unmarshal(raw, p) != nil {
			return
		}
		_, err := v.ValidateCreate(context.Background(), p)
		if err != nil {
			checkRefusal(t, "RuntimePolicy", err)
		}
		_, again := v.ValidateUpdate(context.Background(), p.DeepCopy(), p)
		sameVerdict(t, "as a no-op update", err, again)
		rt := &v1alpha1.RuntimePolicy{}
		if e := json.Unmarshal(mustMarshal(t, p), rt); e != nil {
			t.Fatalf("a decoded policy does not decode after encoding: %v", e)
		}
		_, again = v.ValidateCreate(context.Background(), rt)
		sameVerdict(t, "after a JSON round trip", err, again)
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding %T: %v", v, err)
	}
	return out
}

// fuzzPolicy is the policy a fuzzed session or run refers to: the fuzzed
// spec if it decodes and the RuntimePolicy validator admits it (no other
// policy can exist), else the sample policy.
func fuzzPolicy(t *testing.T, raw, fallback []byte) *v1alpha1.RuntimePolicy {
	t.Helper()
	p := &v1alpha1.RuntimePolicy{}
	if json.Unmarshal(raw, &p.Spec) != nil || len(policy.Validate(&p.Spec)) > 0 {
		p = &v1alpha1.RuntimePolicy{}
		if err := json.Unmarshal(fallback, p); err != nil {
			t.Fatal(err)
		}
	}
	p.ObjectMeta = metav1.ObjectMeta{Namespace: "ns", Name: "p"}
	return p
}

// fuzzReader reads the given objects (a fake client is too slow to build
// for every input: it prepares server-side apply for every type).
func fuzzReader(objs ...client.Object) client.Reader {
	r := objectReader{}
	for _, o := range objs {
		r[client.ObjectKeyFromObject(o)] = o
	}
	return r
}

type objectReader map[client.ObjectKey]client.Object

func (r objectReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	stored, ok := r[key]
	if ok {
		switch out := obj.(type) {
		case *v1alpha1.Session:
			if in, same := stored.(*v1alpha1.Session); same {
				in.DeepCopyInto(out)
				return nil
			}
		case *v1alpha1.RuntimePolicy:
			if in, same := stored.(*v1alpha1.RuntimePolicy); same {
				in.DeepCopyInto(out)
				return nil
			}
		}
	}
	return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource(fmt.Sprintf("%T", obj)).GroupResource(), key.Name)
}

func (r objectReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("the fuzzed webhooks list nothing")
}

// inNamespace decodes raw as a JSON object and puts it in namespace ns
// (as the API server does); nil when raw is not a JSON object.
func inNamespace(raw []byte) map[string]any {
	obj := map[string]any{}
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return nil
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["namespace"] = "ns"
	if name, ok := meta["name"].(string); !ok || name == "" {
		meta["name"] = "x"
	}
	return obj
}

func admissionRequest(t *testing.T, op admissionv1.Operation, user string, obj, old []byte) admission.Request {
	t.Helper()
	if user == "" {
		// The API server names every requester; no name is the anonymous user.
		user = "system:anonymous"
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Namespace: "ns", UserInfo: authenticationv1.UserInfo{Username: user},
	}}
	req.Object.Raw = obj
	req.OldObject.Raw = old
	return req
}

// FuzzSessionAdmission: the Session defaulter (the mode-change stamp) and
// validator on arbitrary sessions, against an arbitrary admitted policy,
// created and then updated to another arbitrary session.
func FuzzSessionAdmission(f *testing.F) {
	policySample := sampleJSON(f, "agentrun_v1alpha1_runtimepolicy.yaml")
	var sample map[string]any
	if err := json.Unmarshal(policySample, &sample); err != nil {
		f.Fatal(err)
	}
	specOnly := mustJSON(f, sample["spec"])
	session := sampleJSON(f, "agentrun_v1alpha1_session.yaml")
	f.Add(session, []byte(`{"spec":{"policyRef":{"name":"p"},"mode":"Auto","modeChangeReason":"go"}}`), specOnly, "alice")
	f.Add([]byte(`{"spec":{"policyRef":{"name":"p"}}}`), []byte(`{"spec":{"policyRef":{"name":"p"},"mode":"Full"}}`),
		[]byte(`{"maxMode":"Full","queue":{"maxLimit":5,"maxTimeout":"10m"}}`), "bob")
	f.Add([]byte(`{"metadata":{"annotations":{"agentrun.dev/mode-change":"{}"}},"spec":{"policyRef":{"name":"p"},"mode":"ReadOnly",`+
		`"queue":{"limit":9,"timeout":"-1m"}}}`), []byte(`{"spec":{"policyRef":{"name":"q"}},"status":{"activeRun":"r"}}`),
		[]byte(`{"queue":{"maxLimit":5,"maxTimeout":"10m"}}`), "")
	f.Fuzz(func(t *testing.T, rawSession, rawUpdate, rawPolicy []byte, user string) {
		p := fuzzPolicy(t, rawPolicy, policySample)
		v := &SessionValidator{Reader: fuzzReader(p)}
		d := &SessionDefaulter{Clock: clocktesting.NewFakePassiveClock(fuzzNow)}
		created, ok := admitSession(t, v, d, user, rawSession, nil)
		if !ok {
			return
		}
		updated, ok := admitSession(t, v, d, user, rawUpdate, created)
		if ok {
			admitSession(t, v, d, user, mustMarshal(t, updated), updated)
		}
	})
}

// admitSession defaults and validates a create (old nil) or an update of
// old to raw, as the API server calls the webhooks, and checks the
// invariants on the result; it returns the admitted session.
func admitSession(t *testing.T, v *SessionValidator, d *SessionDefaulter, user string, raw []byte,
	old *v1alpha1.Session) (*v1alpha1.Session, bool) {
	t.Helper()
	obj := inNamespace(raw)
	s := &v1alpha1.Session{}
	if obj == nil || json.Unmarshal(mustMarshal(t, obj), s) != nil {
		return nil, false
	}
	op, oldRaw := admissionv1.Create, []byte(nil)
	if old != nil {
		op, oldRaw = admissionv1.Update, mustMarshal(t, old)
		s.Status = old.Status // the status subresource is not the main resource's to write
	}
	ctx := admission.NewContextWithRequest(context.Background(), admissionRequest(t, op, user, mustMarshal(t, s), oldRaw))
	if err := d.Default(ctx, s); err != nil {
		t.Fatalf("the defaulter failed on a decoded session: %v", err)
	}
	validate := func(s *v1alpha1.Session) error {
		if old == nil {
			_, err := v.ValidateCreate(ctx, s)
			return err
		}
		_, err := v.ValidateUpdate(ctx, old, s)
		return err
	}
	err := validate(s)
	if err != nil {
		checkRefusal(t, "Session", err)
		return nil, false
	}
	rt := &v1alpha1.Session{}
	if e := json.Unmarshal(mustMarshal(t, s), rt); e != nil {
		t.Fatalf("an admitted session does not decode after encoding: %v", e)
	}
	sameVerdict(t, "after a JSON round trip", err, validate(rt))

	// Sent again unchanged (kubectl apply of what is stored): the stamp is
	// left as it is and the update is admitted.
	again := s.DeepCopy()
	nctx := admission.NewContextWithRequest(context.Background(),
		admissionRequest(t, admissionv1.Update, user, mustMarshal(t, again), mustMarshal(t, s)))
	if err := d.Default(nctx, again); err != nil {
		t.Fatalf("the defaulter failed on a no-op update: %v", err)
	}
	if string(mustMarshal(t, again)) != string(mustMarshal(t, s)) {
		t.Fatalf("the defaulter changed a no-op update:\n%s\n%s", mustMarshal(t, s), mustMarshal(t, again))
	}
	if _, err := v.ValidateUpdate(nctx, s, again); err != nil {
		t.Fatalf("a no-op update of an admitted session is refused: %v\nsession: %s", err, mustMarshal(t, s))
	}
	return s, true
}

// FuzzResearchRunAdmission: the ResearchRun mutating webhook (approval
// stamps, tier defaults) and validator on arbitrary runs, against an
// arbitrary admitted policy.
func FuzzResearchRunAdmission(f *testing.F) {
	policySample := sampleJSON(f, "agentrun_v1alpha1_runtimepolicy.yaml")
	var sample map[string]any
	if err := json.Unmarshal(policySample, &sample); err != nil {
		f.Fatal(err)
	}
	specOnly := mustJSON(f, sample["spec"])
	tiered := mustJSON(f, tieredPolicy().Spec)
	run := sampleJSON(f, "agentrun_v1alpha1_researchrun.yaml")
	minimal := []byte(`{"spec":{"sessionRef":{"name":"s"},"goal":"g","template":{"spec":{"containers":[{"name":"a","image":"i"}]}},` +
		`"gates":{},"recovery":{},"budget":{"modelRequests":5,"toolCalls":5}}}`)
	f.Add(run, specOnly, "alice")
	f.Add(minimal, []byte(`{}`), "bob")
	f.Add(minimal, tiered, "bob")
	f.Add([]byte(`{"spec":{"sessionRef":{"name":"s"},"tier":"deep","template":{"spec":{"containers":[{"name":"a","image":"i",`+
		`"securityContext":{"privileged":true}}],"hostNetwork":true}},"budget":{"tokens":5,"outputReserve":{"modelRequests":9}},`+
		`"approvals":[{"actionID":"a","decision":"Approve"},{"actionID":"b","decision":"Deny","approver":"eve"}]}}`), tiered, "carol")
	f.Add([]byte(`{"spec":{"sessionRef":{"name":"s"},"template":{"spec":{"containers":[{"name":"a","image":"i","bogus":1}],`+
		`"volumes":[{"name":"v","hostPath":{"path":"/"}}]}},"budget":{"modelRequests":1,"toolCalls":1,"deadline":"-5m"},`+
		`"approvals":[{"actionID":"x","decision":"Approve","approver":"dave","time":"2026-12-01T12:00:30Z"}]}}`), specOnly, "dave")
	f.Fuzz(func(t *testing.T, rawRun, rawPolicy []byte, user string) {
		p := fuzzPolicy(t, rawPolicy, policySample)
		s := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"},
			Spec: v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}}}
		reader := fuzzReader(p, s)
		mutator := runMutator{&ApprovalStamper{Clock: clocktesting.NewFakePassiveClock(fuzzNow)}, &TierDefaulter{Reader: reader}}
		v := &ResearchRunValidator{Reader: reader, Access: everyone{}}
		obj := inNamespace(rawRun)
		if obj == nil {
			return
		}
		manifest := mustMarshal(t, obj)
		stored, err := admitRun(t, mutator, v, user, manifest, nil)
		if err != nil {
			return
		}
		// The mutation is idempotent: the stored run sent again as a
		// create gets no patch and is admitted.
		req := admissionRequest(t, admissionv1.Create, user, stored, nil)
		if r := mutator.Handle(context.Background(), req); !r.Allowed || len(r.Patches) > 0 {
			t.Fatalf("mutating the mutated run again: allowed=%v patches=%v result=%+v", r.Allowed, r.Patches, r.Result)
		}
		again, err := admitRun(t, mutator, v, user, stored, nil)
		if err != nil {
			t.Fatalf("the admitted run is refused when created again: %v\nrun: %s", err, stored)
		}
		if string(again) != string(stored) {
			t.Fatalf("the admitted run changed when created again:\n%s\n%s", stored, again)
		}
		// A JSON round trip through the Go type admits it too.
		typed := &v1alpha1.ResearchRun{}
		if err := json.Unmarshal(stored, typed); err != nil {
			t.Fatalf("the admitted run does not decode: %v\nrun: %s", err, stored)
		}
		if _, err := admitRun(t, mutator, v, user, mustMarshal(t, typed), nil); err != nil {
			t.Fatalf("the admitted run is refused after a JSON round trip: %v\nrun: %s", err, stored)
		}
		// A no-op update, and the manifest the run was created from applied
		// again (kubectl apply, a GitOps sync), are admitted and change
		// nothing the webhook owns.
		if got, err := admitRun(t, mutator, v, user, stored, stored); err != nil || string(got) != string(stored) {
			t.Fatalf("a no-op update of the admitted run: %v\nstored: %s\ngot:    %s", err, stored, got)
		}
		if _, err := admitRun(t, mutator, v, user, manifest, stored); err != nil {
			t.Fatalf("the run's own manifest applied again is refused: %v\nmanifest: %s\nstored: %s", err, manifest, stored)
		}
	})
}

// admitRun runs the mutating webhook and then the validator on a create
// (old nil) or an update, as the API server calls them, checks the shape of
// a refusal, and returns the object as it would be stored.
func admitRun(t *testing.T, mutator runMutator, v *ResearchRunValidator, user string, raw, old []byte) ([]byte, error) {
	t.Helper()
	op := admissionv1.Create
	if old != nil {
		op = admissionv1.Update
	}
	resp := mutator.Handle(context.Background(), admissionRequest(t, op, user, raw, old))
	if !resp.Allowed {
		if resp.Result == nil || resp.Result.Message == "" {
			t.Fatalf("the mutating webhook refused without a message: %+v", resp)
		}
		if resp.Result.Code == 422 && !strings.Contains(resp.Result.Message, "spec.approvals[") {
			t.Fatalf("an approval refusal does not name the approval: %s", resp.Result.Message)
		}
		return nil, errors.New(resp.Result.Message)
	}
	patched, err := applyAdds(raw, resp.Patches)
	if err != nil {
		t.Fatalf("the mutating webhook's patch does not apply: %v\npatch: %v\nobject: %s", err, resp.Patches, raw)
	}
	run := &v1alpha1.ResearchRun{}
	if err := json.Unmarshal(patched, run); err != nil {
		t.Fatalf("the mutated run does not decode: %v\nobject: %s", err, patched)
	}
	ctx := admission.NewContextWithRequest(context.Background(), admissionRequest(t, op, user, patched, old))
	if old == nil {
		_, err = v.ValidateCreate(ctx, run)
	} else {
		oldRun := &v1alpha1.ResearchRun{}
		if e := json.Unmarshal(old, oldRun); e != nil {
			t.Fatal(e)
		}
		_, err = v.ValidateUpdate(ctx, oldRun, run)
	}
	if err != nil {
		checkRefusal(t, "ResearchRun", err)
		return nil, err
	}
	return patched, nil
}

// applyAdds applies a patch of JSON-patch "add" operations (the only kind
// the ResearchRun mutations make) to a JSON object.
func applyAdds(raw []byte, ops []jsonpatch.Operation) ([]byte, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	for _, op := range ops {
		if op.Operation != "add" {
			return nil, fmt.Errorf("operation %q at %s: the mutations only add", op.Operation, op.Path)
		}
		if !strings.HasPrefix(op.Path, "/") {
			return nil, fmt.Errorf("path %q is not a JSON pointer", op.Path)
		}
		keys := strings.Split(op.Path[1:], "/")
		parent := doc
		for _, k := range keys[:len(keys)-1] {
			next, err := child(parent, k)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", op.Path, err)
			}
			parent = next
		}
		value, err := json.Marshal(op.Value)
		if err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal(value, &v); err != nil {
			return nil, err
		}
		last := keys[len(keys)-1]
		switch p := parent.(type) {
		case map[string]any:
			p[last] = v
		default:
			return nil, fmt.Errorf("%s: the parent is not an object", op.Path)
		}
	}
	return json.Marshal(doc)
}

func child(parent any, key string) (any, error) {
	switch p := parent.(type) {
	case map[string]any:
		c, ok := p[key]
		if !ok {
			return nil, fmt.Errorf("no member %q", key)
		}
		return c, nil
	case []any:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(p) {
			return nil, fmt.Errorf("no element %q", key)
		}
		return p[i], nil
	}
	return nil, fmt.Errorf("%q: not an object or array", key)
}

// everyone allows every access: the fuzz targets check admission's own
// rules, not the API server's authorization.
type everyone struct{}

func (everyone) Allowed(context.Context, authenticationv1.UserInfo, string, runpod.Access) (bool, error) {
	return true, nil
}
