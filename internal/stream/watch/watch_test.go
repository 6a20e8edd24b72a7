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

package watch

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

const ns = "team-a"

var key = stream.RunKey{Namespace: ns, Name: "survey", UID: "uid-1"}

func objects(events v1alpha1.EventRetention) (*v1alpha1.ResearchRun, []client.Object) {
	run := &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name, UID: "uid-1"},
		Spec:       v1alpha1.ResearchRunSpec{SessionRef: v1alpha1.LocalObjectReference{Name: "s"}, Goal: "find out"},
		Status:     v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseRunning},
	}
	return run, []client.Object{
		run,
		&v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
			Spec: v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}}},
		&v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Spec: v1alpha1.RuntimePolicySpec{Events: events}},
	}
}

type fixture struct {
	t   *testing.T
	c   client.Client
	st  *store.Store
	js  jetstream.Stream
	r   *Reconciler
	now time.Time
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	js, err := jetstream.New(st.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, store.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, c: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), st: st, js: s,
		now: time.Now()}
	f.r = &Reconciler{Client: f.c, Store: st, Now: func() time.Time { return f.now }}
	return f
}

func (f *fixture) reconcile() ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: key.Name}})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// ttls is the stored Nats-TTL header of each of the run's events, in order.
func (f *fixture) ttls() []string {
	f.t.Helper()
	var out []string
	subj := f.st.Subject(key)
	for seq := uint64(1); ; {
		m, err := f.js.GetMsg(context.Background(), seq, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			return out
		}
		out = append(out, m.Header.Get(jetstream.MsgTTLHeader))
		seq = m.Sequence + 1
	}
}

func (f *fixture) bounds() store.Bounds {
	f.t.Helper()
	b, err := f.st.Bounds(context.Background(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// storedBytes is the JSON bytes of the run's stored events.
func (f *fixture) storedBytes() int64 {
	f.t.Helper()
	var n int64
	if err := f.st.Replay(context.Background(), key, 0, func(ev stream.Event) error {
		b, _ := json.Marshal(ev)
		n += int64(len(b))
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// gateway publishes n events of about 1 KiB as the gateway would.
func (f *fixture) gateway(n int) {
	f.t.Helper()
	for range n {
		if _, err := f.st.Publish(context.Background(), key, stream.Event{Type: stream.TextMessageContent,
			MessageID: "m-1", Delta: strings.Repeat("x", 1000), Metadata: json.RawMessage(`{"source":"gateway"}`)}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// The status events of a run whose policy keeps events for an hour are
// stored with a one-hour TTL.
func TestStatusEventsGetThePolicyMaxAge(t *testing.T) {
	g := NewWithT(t)
	_, objs := objects(v1alpha1.EventRetention{MaxAge: &metav1.Duration{Duration: time.Hour}})
	f := newFixture(t, objs...)
	f.reconcile()
	g.Expect(f.ttls()).To(Equal([]string{"1h0m0s", "1h0m0s"})) // RUN_STARTED, STATE_SNAPSHOT
}

// Without its Session (or policy) a run's events get the default maxAge.
func TestStatusEventsWithoutAPolicyGetTheDefault(t *testing.T) {
	g := NewWithT(t)
	run, _ := objects(v1alpha1.EventRetention{})
	f := newFixture(t, run)
	f.reconcile()
	g.Expect(f.ttls()).To(Equal([]string{"168h0m0s", "168h0m0s"}))
}

// An active run's stream is trimmed to its policy's maxBytes at most once a
// TrimEvery (the reconcile asks to come back for the next), and once more
// when it ends; not after.
func TestActiveRunIsTrimmedEveryMinuteAndOnceWhenItEnds(t *testing.T) {
	g := NewWithT(t)
	maxBytes := resource.MustParse("64Ki")
	run, objs := objects(v1alpha1.EventRetention{MaxBytes: &maxBytes})
	f := newFixture(t, objs...)
	f.gateway(100) // ~100 KiB

	res := f.reconcile()
	g.Expect(res.RequeueAfter).To(Equal(time.Minute))
	g.Expect(f.storedBytes()).To(BeNumerically("<=", 64<<10))
	first := f.bounds()
	g.Expect(first.Oldest).To(BeNumerically(">", 1))

	// Within the minute: no trim, the next one is due at the minute.
	f.gateway(50)
	f.now = f.now.Add(20 * time.Second)
	res = f.reconcile()
	g.Expect(res.RequeueAfter).To(Equal(40 * time.Second))
	g.Expect(f.bounds().Oldest).To(Equal(first.Oldest))
	g.Expect(f.storedBytes()).To(BeNumerically(">", 64<<10))

	// At the minute: trimmed again.
	f.now = f.now.Add(40 * time.Second)
	res = f.reconcile()
	g.Expect(res.RequeueAfter).To(Equal(time.Minute))
	second := f.bounds()
	g.Expect(second.Oldest).To(BeNumerically(">", first.Oldest))
	g.Expect(f.storedBytes()).To(BeNumerically("<=", 64<<10))

	// The run ends: its RUN_FINISHED is published, then the stream is
	// trimmed once, at once, and no requeue is asked for.
	f.gateway(50)
	run.Status.Phase, run.Status.Reason = v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted
	run.Status.Settlement = v1alpha1.SettlementComplete
	g.Expect(f.c.Update(context.Background(), run)).To(Succeed())
	f.now = f.now.Add(time.Second)
	res = f.reconcile()
	g.Expect(res.RequeueAfter).To(BeZero())
	last, _, ok, err := f.st.Last(context.Background(), key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(last.Type).To(Equal(stream.RunFinished))
	ended := f.bounds()
	g.Expect(ended.Oldest).To(BeNumerically(">", second.Oldest))
	g.Expect(f.storedBytes()).To(BeNumerically("<=", 64<<10))

	// Ended: late events are not trimmed again, however long after.
	f.gateway(50)
	f.now = f.now.Add(time.Hour)
	g.Expect(f.reconcile().RequeueAfter).To(BeZero())
	g.Expect(f.bounds().Oldest).To(Equal(ended.Oldest))
}

// A run deleted and created again under its name, even before the watcher
// saw the deletion, starts a stream of its own: RUN_STARTED with the new
// UID at seq 1, and the deleted run's stream is neither continued nor
// shown.
func TestARecreatedRunStartsAStreamOfItsOwn(t *testing.T) {
	g := NewWithT(t)
	run, objs := objects(v1alpha1.EventRetention{})
	f := newFixture(t, objs...)
	f.reconcile()
	g.Expect(f.bounds()).To(Equal(store.Bounds{Oldest: 1, Last: 2}))

	g.Expect(f.c.Delete(context.Background(), run)).To(Succeed())
	again := run.DeepCopy()
	again.ResourceVersion, again.UID = "", "uid-2"
	g.Expect(f.c.Create(context.Background(), again)).To(Succeed())
	f.reconcile()

	recreated := stream.RunKey{Namespace: ns, Name: key.Name, UID: "uid-2"}
	var evs []stream.Event
	g.Expect(f.st.Replay(context.Background(), recreated, 0, func(ev stream.Event) error {
		evs = append(evs, ev)
		return nil
	})).To(Succeed())
	g.Expect(evs).To(HaveLen(2))
	g.Expect(evs[0].Type).To(Equal(stream.RunStarted))
	g.Expect(evs[0].RunID).To(Equal("uid-2"))
	g.Expect(evs[0].Seq).To(Equal(uint64(1)), "the new run's stream starts at 1")
	g.Expect(f.bounds()).To(Equal(store.Bounds{Oldest: 1, Last: 2}), "the deleted run's stream is not continued")
}
