package lifecycle

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// kstatusOf is what the kstatus library itself computes for a ResearchRun
// of generation gen with status st, converted as a client would read it.
func kstatusOf(gen int64, st v1alpha1.ResearchRunStatus) (*status.Result, error) {
	run := &v1alpha1.ResearchRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ResearchRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "ns", Generation: gen},
		Status:     st,
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(run)
	if err != nil {
		return nil, err
	}
	return status.Compute(&unstructured.Unstructured{Object: obj})
}

// freshRun is a run of phase p that has not started, its pod absent.
func freshRun(p v1alpha1.Phase) Input {
	return Input{Now: at(0), Name: "r1", Generation: 1, Spec: testSpec(), Status: v1alpha1.ResearchRunStatus{Phase: p},
		Pod: PodObservation{Phase: PodAbsent}}
}

// reasonsOfTheAPI are the values of the Reason enum marker, so that a reason
// added to the API without a kstatus class fails TestRunHealth.
func reasonsOfTheAPI(t *testing.T) []v1alpha1.Reason {
	t.Helper()
	src, err := os.ReadFile("../../api/v1alpha1/common_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^// \+kubebuilder:validation:Enum=(.*)\ntype Reason string$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no Enum marker on type Reason")
	}
	var out []v1alpha1.Reason
	for r := range strings.SplitSeq(string(m[1]), ";") {
		out = append(out, v1alpha1.Reason(r))
	}
	return out
}

// TestRunHealth is the mapping, written out: every phase, and every reason
// with every settlement.
func TestRunHealth(t *testing.T) {
	const (
		inProgress = HealthInProgress
		current    = HealthCurrent
		failed     = HealthFailed
	)
	for _, p := range []v1alpha1.Phase{"", pending, queued, running, recovering, finalizing} {
		for _, r := range []v1alpha1.Reason{"", v1alpha1.ReasonCompleted, v1alpha1.ReasonAgentFailed, v1alpha1.ReasonBudgetExhausted} {
			if got := RunHealth(p, r, v1alpha1.SettlementComplete); got != inProgress {
				t.Errorf("%s/%s: %s, want %s", p, r, got, inProgress)
			}
		}
	}
	// By settlement: Complete, Partial, None.
	want := map[v1alpha1.Reason][3]Health{
		v1alpha1.ReasonCompleted:         {current, current, current},
		v1alpha1.ReasonCancelled:         {current, current, current},
		v1alpha1.ReasonFinalizeRequested: {current, current, current},
		v1alpha1.ReasonBudgetExhausted:   {current, current, failed},
		v1alpha1.ReasonDeadlineExceeded:  {current, current, failed},
		v1alpha1.ReasonStepLimit:         {current, current, failed},
		v1alpha1.ReasonRepeatedCall:      {current, current, failed},
		v1alpha1.ReasonNoProgress:        {current, current, failed},
		v1alpha1.ReasonAgentFailed:       {failed, failed, failed},
		v1alpha1.ReasonPolicyViolation:   {failed, failed, failed},
		v1alpha1.ReasonRecoveryExhausted: {failed, failed, failed},
		v1alpha1.ReasonUnsafeToRecover:   {failed, failed, failed},
		v1alpha1.ReasonQueueFull:         {failed, failed, failed},
		v1alpha1.ReasonQueueTimeout:      {failed, failed, failed},
		"SomeFutureReason":               {failed, failed, failed},
	}
	for _, r := range reasonsOfTheAPI(t) {
		if _, ok := want[r]; !ok {
			t.Errorf("reason %s of the API has no kstatus class in this table (and in docs/api.md)", r)
		}
	}
	settlements := []v1alpha1.Settlement{v1alpha1.SettlementComplete, v1alpha1.SettlementPartial, v1alpha1.SettlementNone}
	for r, byS := range want {
		for i, s := range settlements {
			if got := RunHealth(terminated, r, s); got != byS[i] {
				t.Errorf("Terminated/%s/%s: %s, want %s", r, s, got, byS[i])
			}
		}
	}
}

// wantHealth is what kstatus must read for a decided status: RunHealth of
// it (a stopping run is not Terminated yet, so InProgress).
func wantHealth(st v1alpha1.ResearchRunStatus) status.Status {
	return status.Status(RunHealth(st.Phase, st.Reason, st.Settlement))
}

// kstatusAgrees (an invariant of FuzzDecide): the kstatus library reads
// every decided status as RunHealth says, and Reconciling repeats Ready's
// reason and message until the run is Terminated.
func kstatusAgrees(in Input, d Decision, _ bool) string {
	res, err := kstatusOf(in.Generation, d.Status)
	if err != nil {
		return err.Error()
	}
	if want := wantHealth(d.Status); res.Status != want {
		return "kstatus " + string(res.Status) + " (" + res.Message + "), want " + string(want)
	}
	rec := findCondition(d.Status.Conditions, v1alpha1.ConditionReconciling)
	ready := findCondition(d.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case rec == nil || ready == nil:
		return "no Reconciling or no Ready condition"
	case d.Status.Phase == v1alpha1.PhaseTerminated:
		if rec.Status != metav1.ConditionFalse || rec.Reason != v1alpha1.ConditionReasonTerminated {
			return "Terminated with Reconciling=" + string(rec.Status) + "/" + rec.Reason
		}
	case rec.Status != metav1.ConditionTrue || rec.Reason != ready.Reason || rec.Message != ready.Message:
		return "Reconciling " + string(rec.Status) + "/" + rec.Reason + " does not repeat Ready " + ready.Reason
	}
	return ""
}

// TestDecideTableWithKstatus: every row of the decision table reads, to the
// kstatus library, as the mapping says; and the terminal rows cover each
// class.
func TestDecideTableWithKstatus(t *testing.T) {
	seen := map[status.Status]int{}
	for name, tc := range decideCases() {
		d := Decide(tc.in)
		if tc.in.Status.Phase == v1alpha1.PhaseTerminated {
			continue // absorbing: the table's input status, unchanged
		}
		if msg := kstatusAgrees(tc.in, d, false); msg != "" {
			t.Errorf("%s: %s", name, msg)
		}
		if d.Status.Phase == v1alpha1.PhaseTerminated {
			seen[wantHealth(d.Status)]++
		}
	}
	for _, s := range []status.Status{status.CurrentStatus, status.FailedStatus} {
		if seen[s] == 0 {
			t.Errorf("no Terminated row of the table reads %s", s)
		}
	}
}

// TestKstatusOfEachPhaseAndClass: a run in each phase and each terminal
// class, decided from a realistic input, reads as it must to the kstatus
// library, with the reason and message kstatus reports.
func TestKstatusOfEachPhaseAndClass(t *testing.T) {
	cases := map[string]struct {
		in      Input
		want    status.Status
		message string
	}{
		"Pending (blocked)": {
			in:   with(freshRun(pending), func(in *Input) { in.Blocked = `waiting for Session "s1"` }),
			want: status.InProgressStatus, message: `waiting for Session "s1"`,
		},
		"Queued": {
			in:   with(freshRun(pending), func(in *Input) { in.Queue = QueueView{Position: 2, Limit: 3} }),
			want: status.InProgressStatus, message: "queued in session",
		},
		"Running":    {in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{})), want: status.InProgressStatus, message: "attempt 1 running"},
		"Finalizing": {in: with(runningAt(time.Minute), finalizingSince(v1alpha1.ReasonStepLimit, 0, usage(2, 0))), want: status.InProgressStatus},
		"Recovering": {
			in: with(runningAt(time.Minute), podIs(PodFailed)), want: status.InProgressStatus, message: "attempt 1 failed",
		},
		"Completed/Complete": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{FinishProposed: true,
				Publication: v1alpha1.Publication{BlocksPlanned: 1, BlocksCommitted: 1, Settled: true, Settlement: v1alpha1.SettlementComplete}})),
				podIs(PodAbsent)),
			want: status.CurrentStatus,
		},
		"Cancelled": {in: with(freshRun(queued), func(in *Input) { in.Spec.Stop = v1alpha1.StopCancel }), want: status.CurrentStatus},
		"QueueFull": {
			in:   with(freshRun(pending), func(in *Input) { in.Queue = QueueView{Position: 4, Limit: 3} }),
			want: status.FailedStatus, message: "queue",
		},
		"BudgetExhausted/None (no reserve)": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: usage(42, 0)})), podIs(PodAbsent),
				func(in *Input) { in.Spec.Budget.OutputReserve = v1alpha1.OutputReserve{} }),
			want: status.FailedStatus, message: "budget",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := Decide(tc.in)
			res, err := kstatusOf(tc.in.Generation, d.Status)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.want || !strings.Contains(res.Message, tc.message) {
				t.Errorf("%s/%s: kstatus %s %q, want %s containing %q", d.Status.Phase, d.Status.Reason, res.Status, res.Message,
					tc.want, tc.message)
			}
			if msg := kstatusAgrees(tc.in, d, false); msg != "" {
				t.Error(msg)
			}
			// An observedGeneration behind the spec reads InProgress,
			// whatever the conditions say.
			if res, err := kstatusOf(tc.in.Generation+1, d.Status); err != nil || res.Status != status.InProgressStatus {
				t.Errorf("a newer generation: kstatus %v (%v), want InProgress", res, err)
			}
		})
	}
}

// TestConditionsDoNotChurn: a second pass over what the first decided,
// later and with nothing new, keeps every condition whose status did not
// change as it was (lastTransitionTime included), and writes the same
// status for a run that is steady.
func TestConditionsDoNotChurn(t *testing.T) {
	for name, tc := range decideCases() {
		d := Decide(tc.in)
		if d.Status.Attempt != tc.in.Status.Attempt {
			continue // a new attempt: the row's facts are of the previous one
		}
		again := tc.in
		again.Status = *d.Status.DeepCopy()
		again.Now = tc.in.Now.Add(time.Second)
		d2 := Decide(again)
		for _, c := range d.Status.Conditions {
			c2 := findCondition(d2.Status.Conditions, c.Type)
			if c2 != nil && c2.Status == c.Status && !c2.LastTransitionTime.Equal(&c.LastTransitionTime) {
				t.Errorf("%s: %s=%s moved its lastTransitionTime from %s to %s", name, c.Type, c.Status,
					c.LastTransitionTime, c2.LastTransitionTime)
			}
		}
	}
	steady := runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Steps: 2, LastProgressStep: 2}))
	d := Decide(steady)
	steady.Status, steady.Now = *d.Status.DeepCopy(), steady.Now.Add(time.Second)
	if d2 := Decide(steady); !cmpConditions(d.Status.Conditions, d2.Status.Conditions) {
		t.Errorf("a steady Running run's conditions changed:\n%+v\n%+v", d.Status.Conditions, d2.Status.Conditions)
	}
}

func cmpConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
