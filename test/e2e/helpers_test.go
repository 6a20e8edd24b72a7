//go:build e2e

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

package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/internal/devstack/stack"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

const (
	timeout  = 60 * time.Second
	interval = 100 * time.Millisecond
)

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// world is one spec's namespace with a policy and a session, and a watch that
// records every phase each run passes through and any overlap of two active
// runs of one session.
type world struct {
	ns      string
	session string

	mu        sync.Mutex
	phases    map[string][]v1.Phase
	firstIn   map[string]map[v1.Phase]*v1.ResearchRun
	current   map[string]v1.Phase
	sessionOf map[string]string
	overlaps  []string
}

// newWorld creates a namespace, the RuntimePolicy "p" (mutate adjusts it)
// and the Session "s" in mode Auto.
func newWorld(mutate func(*v1.RuntimePolicy)) *world {
	GinkgoHelper()
	c := st.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	Expect(c.Create(ctx, ns)).To(Succeed())
	w := &world{ns: ns.Name, session: "s", phases: map[string][]v1.Phase{},
		firstIn: map[string]map[v1.Phase]*v1.ResearchRun{},
		current: map[string]v1.Phase{}, sessionOf: map[string]string{}}

	// The chain of config/samples: auth before rate limiting, redaction
	// before audit. rate_limit paces calls when the agent gets
	// --rate-limit-interval (see paced).
	policy := &v1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "p"},
		Spec: v1.RuntimePolicySpec{
			Interceptors: []v1.Interceptor{
				{Name: "auth", Class: v1.ClassSecurity, Role: v1.RoleAuthentication, Phase: v1.InterceptorPre,
					Priority: 10, OnError: v1.PostureDeny, Veto: new(true)},
				{Name: "rate_limit", Class: v1.ClassResource, Role: v1.RoleIdentityConsumer, Phase: v1.InterceptorPre,
					Priority: 20, OnError: v1.PostureDeny, Veto: new(true), Requires: []string{"auth"}},
				{Name: "redact", Class: v1.ClassSecurity, Role: v1.RoleRedaction, Phase: v1.InterceptorPost,
					Priority: 50, OnError: v1.PostureDeny},
				{Name: "audit", Class: v1.ClassObservability, Role: v1.RoleAudit, Phase: v1.InterceptorPost,
					Priority: 90, OnError: v1.PostureAllow, Buffered: true, Requires: []string{"redact"}},
			},
			Tools: []v1.Tool{
				{Name: "http.get", Risk: v1.RiskLow, Effect: v1.EffectNone},
				{Name: "notes.write", Risk: v1.RiskLow, Effect: v1.EffectWrite, Idempotent: true},
				// Medium, so Auto mode publishes without asking; the
				// approval scenarios raise it to High.
				{Name: "report.publish", Risk: v1.RiskMedium, Effect: v1.EffectExternal},
			},
			AutoApprove: []string{"notes.write", "report.publish"},
			MaxMode:     v1.ModeFull,
			// The gateway serves the scripted upstream to these runs.
			Models: []v1.Model{{Name: "scripted", BaseURL: st.UpstreamURL}},
		},
	}
	if mutate != nil {
		mutate(policy)
	}
	Expect(c.Create(ctx, policy)).To(Succeed())
	w.newSession(w.session, v1.ModeAuto)

	watcher, err := c.Watch(ctx, &v1.ResearchRunList{}, client.InNamespace(w.ns))
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer GinkgoRecover()
		for ev := range watcher.ResultChan() {
			run, ok := ev.Object.(*v1.ResearchRun)
			if ok && ev.Type == watch.Deleted {
				// A deleted run is active no more (deletion_test.go).
				w.mu.Lock()
				delete(w.current, run.Name)
				w.mu.Unlock()
			}
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) || run.Status.Phase == "" {
				continue
			}
			w.mu.Lock()
			seq := w.phases[run.Name]
			if len(seq) == 0 || seq[len(seq)-1] != run.Status.Phase {
				w.phases[run.Name] = append(seq, run.Status.Phase)
			}
			if w.firstIn[run.Name] == nil {
				w.firstIn[run.Name] = map[v1.Phase]*v1.ResearchRun{}
			}
			if _, seen := w.firstIn[run.Name][run.Status.Phase]; !seen {
				w.firstIn[run.Name][run.Status.Phase] = run.DeepCopy()
			}
			w.current[run.Name] = run.Status.Phase
			w.sessionOf[run.Name] = run.Spec.SessionRef.Name
			if run.Spec.Parent != nil {
				w.sessionOf[run.Name] = "" // a child runs in its parent's slot
			}
			var active []string
			for name, phase := range w.current {
				if phase.IsActive() && w.sessionOf[name] == run.Spec.SessionRef.Name {
					active = append(active, name)
				}
			}
			if len(active) > 1 {
				slices.Sort(active)
				w.overlaps = append(w.overlaps, fmt.Sprintf("session %s: %v active at once", run.Spec.SessionRef.Name, active))
			}
			w.mu.Unlock()
		}
	}()
	DeferCleanup(func() {
		watcher.Stop()
		w.mu.Lock()
		defer w.mu.Unlock()
		Expect(w.overlaps).To(BeEmpty(), "two runs of one session were active at the same time")
	})
	return w
}

func (w *world) newSession(name string, mode v1.PermissionMode) {
	GinkgoHelper()
	Expect(st.Client.Create(ctx, &v1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: v1.SessionSpec{
			PolicyRef:        v1.LocalObjectReference{Name: "p"},
			Mode:             mode,
			ModeChangeReason: "e2e",
		},
	})).To(Succeed())
}

// script stores a scripted-provider script in a ConfigMap of that name.
func (w *world) script(name, body string) {
	GinkgoHelper()
	Expect(st.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Data:       map[string]string{"script.yaml": body},
	})).To(Succeed())
}

// run creates a ResearchRun whose pod runs image with args; mutate adjusts it.
// An argument scriptFrom+NAME (see agentArgs) becomes what a pod template
// must write: the script in env AGENTRUN_SCRIPT from ConfigMap NAME (the pod
// holds no API token to read it).
func (w *world) run(name, image string, args []string, mutate func(*v1.ResearchRun)) *v1.ResearchRun {
	GinkgoHelper()
	var env []corev1.EnvVar
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		cm, ok := strings.CutPrefix(a, scriptFrom)
		if ok {
			env = append(env, corev1.EnvVar{Name: "AGENTRUN_SCRIPT", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: "script.yaml"}}})
		}
		return ok
	})
	run := &v1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: v1.ResearchRunSpec{
			SessionRef: v1.LocalObjectReference{Name: w.session},
			Goal:       "survey the field",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "agent", Image: image, Args: args, Env: env}},
			}},
			Budget: v1.Budget{
				ModelRequests: 20, ToolCalls: 20,
				OutputReserve: v1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
				Deadline:      &metav1.Duration{Duration: 5 * time.Minute},
			},
			Recovery: v1.Recovery{MaxAttempts: 3, Backoff: &metav1.Duration{}},
		},
	}
	if mutate != nil {
		mutate(run)
	}
	Expect(st.Client.Create(ctx, run)).To(Succeed())
	return run
}

func (w *world) get(name string) *v1.ResearchRun {
	GinkgoHelper()
	run := &v1.ResearchRun{}
	Expect(st.Client.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, run)).To(Succeed())
	return run
}

// eventually waits until the run is in phase (and, if given, has reason).
func (w *world) eventually(name string, phase v1.Phase, reason v1.Reason) *v1.ResearchRun {
	GinkgoHelper()
	run := &v1.ResearchRun{}
	Eventually(func(g Gomega) {
		g.Expect(st.Client.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, run)).To(Succeed())
		g.Expect(run.Status.Phase).To(Equal(phase), "reason %s: %s", run.Status.Reason, run.Status.Message)
		if reason != "" {
			g.Expect(run.Status.Reason).To(Equal(reason), "message: %s", run.Status.Message)
		}
	}, timeout, interval).Should(Succeed())
	return run
}

// terminated waits for Terminated and checks reason and settlement.
func (w *world) terminated(name string, reason v1.Reason, settlement v1.Settlement) *v1.ResearchRun {
	GinkgoHelper()
	run := w.eventually(name, v1.PhaseTerminated, "")
	Expect(run.Status.Reason).To(Equal(reason), "message: %s", run.Status.Message)
	Expect(run.Status.Settlement).To(Equal(settlement), "message: %s", run.Status.Message)
	return run
}

// phaseSequence returns the phases the watch saw, without the Pending/Queued
// prefix, once the watch has caught up with the run's current phase.
func (w *world) phaseSequence(run string) []v1.Phase {
	GinkgoHelper()
	current := w.get(run).Status.Phase
	Eventually(func() v1.Phase {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.current[run]
	}, timeout, interval).Should(Equal(current), "the watch did not see %s reach %s", run, current)
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []v1.Phase
	for _, p := range w.phases[run] {
		if len(out) == 0 && (p == v1.PhasePending || p == v1.PhaseQueued) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// when returns the run as the watch first saw it in phase, or nil.
func (w *world) when(run string, phase v1.Phase) *v1.ResearchRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstIn[run][phase]
}

func attemptName(run string, n int) string { return fmt.Sprintf("%s-%d", run, n) }

// attempt waits for RunAttempt n and returns it.
func (w *world) attempt(run string, n int) *v1.RunAttempt {
	GinkgoHelper()
	ra := &v1.RunAttempt{}
	Eventually(func() error {
		return st.Client.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: attemptName(run, n)}, ra)
	}, timeout, interval).Should(Succeed())
	return ra
}

// attempts lists the RunAttempt numbers of run.
func (w *world) attempts(run string) []int {
	GinkgoHelper()
	list := &v1.RunAttemptList{}
	Expect(st.Client.List(ctx, list, client.InNamespace(w.ns), client.MatchingLabels{v1.LabelRun: run})).To(Succeed())
	var out []int
	for _, ra := range list.Items {
		n, err := strconv.Atoi(ra.Labels[v1.LabelAttempt])
		Expect(err).NotTo(HaveOccurred())
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// attemptUsage sums the usage every attempt of run reported.
func (w *world) attemptUsage(run string) v1.Usage {
	GinkgoHelper()
	list := &v1.RunAttemptList{}
	Expect(st.Client.List(ctx, list, client.InNamespace(w.ns), client.MatchingLabels{v1.LabelRun: run})).To(Succeed())
	var u v1.Usage
	for _, ra := range list.Items {
		u.ModelRequests += ra.Status.Usage.ModelRequests
		u.ToolCalls += ra.Status.Usage.ToolCalls
		u.Tokens += ra.Status.Usage.Tokens
	}
	return u
}

// report returns the run's report ConfigMap, or nil.
func (w *world) report(run string) *corev1.ConfigMap {
	GinkgoHelper()
	cm := &corev1.ConfigMap{}
	err := st.Client.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: run + "-report"}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return cm
}

// sections returns the keys of the published sections of run's report (the
// report may exist with only its plan, index.json).
func (w *world) sections(run string) []string {
	GinkgoHelper()
	var out []string
	if cm := w.report(run); cm != nil {
		for k := range cm.Data {
			if strings.HasSuffix(k, ".md") {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// pid waits for attempt n's agent process and returns its pid.
func (w *world) pid(run string, n int) int {
	GinkgoHelper()
	key := w.ns + "/" + attemptName(run, n) + "/agent"
	var pid int
	Eventually(func() int {
		pid = st.Node.Processes()[key]
		return pid
	}, timeout, interval).ShouldNot(BeZero(), "no process for %s", key)
	return pid
}

// kill SIGKILLs attempt n's agent process (its process group).
func (w *world) kill(run string, n int) {
	GinkgoHelper()
	pid := w.pid(run, n)
	Expect(syscall.Kill(-pid, syscall.SIGKILL)).To(Succeed())
}

// stopRun sets spec.stop with a merge patch, as kubectl patch would.
func (w *world) stopRun(name string, stop v1.StopRequest) {
	GinkgoHelper()
	run := &v1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	patch := fmt.Appendf(nil, `{"spec":{"stop":%q}}`, stop)
	Expect(st.Client.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
}

// approve appends an approval with a JSON patch, as `kubectl patch --type=json` would.
func (w *world) approve(name, actionID string) {
	GinkgoHelper()
	run := &v1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	var patch client.Patch
	if len(w.get(name).Spec.Approvals) == 0 {
		patch = client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"approvals":[{"actionID":%q,"decision":"Approve"}]}}`, actionID))
	} else {
		patch = client.RawPatch(types.JSONPatchType,
			fmt.Appendf(nil, `[{"op":"add","path":"/spec/approvals/-","value":{"actionID":%q,"decision":"Approve"}}]`, actionID))
	}
	Expect(st.Client.Patch(ctx, run, patch)).To(Succeed())
}

// awaiting waits until attempt n asks for an approval and returns its id.
func (w *world) awaiting(run string, n int) string {
	GinkgoHelper()
	var id string
	Eventually(func(g Gomega) {
		ra := w.attempt(run, n)
		g.Expect(ra.Status.AwaitingApproval).NotTo(BeEmpty())
		id = ra.Status.AwaitingApproval[0].ActionID
	}, timeout, interval).Should(Succeed())
	return id
}

// kubectl runs the toolchain's kubectl against the stack.
func kubectl(args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, st.Kubectl, append([]string{"--kubeconfig", st.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// podDone waits for a pod to reach a terminal phase and returns it.
// podLogs is the first attempt's stdout and stderr (kubectl logs), once its
// pod is done.
func podLogs(w *world, name string) string {
	GinkgoHelper()
	podDone(w.ns, attemptName(name, 1))
	out, err := kubectl("logs", "-n", w.ns, attemptName(name, 1))
	Expect(err).NotTo(HaveOccurred(), out)
	return out
}

func podDone(ns, name string) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{}
	Eventually(func(g Gomega) {
		g.Expect(st.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(BeElementOf(corev1.PodSucceeded, corev1.PodFailed))
	}, timeout, interval).Should(Succeed())
	return pod
}

// factsSettled waits until attempt n's reported work (steps, usage, calls in
// flight) reads the same twice in a row, a flush interval apart.
func (w *world) factsSettled(run string, n int) {
	GinkgoHelper()
	type work struct {
		steps    int64
		usage    v1.Usage
		inFlight int
	}
	var last *work
	Eventually(func() bool {
		s := w.attempt(run, n).Status
		cur := &work{steps: s.Steps, usage: s.Usage, inFlight: len(s.InFlight)}
		same := last != nil && *last == *cur
		last = cur
		return same
	}, timeout, 500*time.Millisecond).Should(BeTrue(), "the facts of %s-%d kept changing", run, n)
}

// startFakeTools starts a fake agentrun-tools process with config (the
// fake's YAML) for the rest of the container, and returns its MCP URL and
// its GET /calls URL.
func startFakeTools(name, config string) (mcpURL, callsURL string) {
	GinkgoHelper()
	bin := filepath.Join(dir, "agentrun-tools")
	if _, err := os.Stat(bin); err != nil {
		Expect(stack.GoBuild(ctx, root, "./cmd/agentrun-tools", bin, GinkgoWriter)).To(Succeed())
	}
	path := filepath.Join(dir, name+"-fake-tools.yaml")
	Expect(os.WriteFile(path, []byte(config), 0o644)).To(Succeed())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	Expect(l.Close()).To(Succeed())
	tools := &stack.Operator{
		Binary:     bin,
		Args:       []string{"--listen=" + addr, "--http-get=false", "--fake-config=" + path},
		Env:        []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")},
		LogPath:    filepath.Join(dir, "logs", name+"-tools.log"),
		HealthAddr: addr,
	}
	Expect(tools.Start()).To(Succeed())
	DeferCleanup(func() { tools.Stop(10 * time.Second) })
	Expect(tools.WaitReady(ctx, 30*time.Second)).To(Succeed())
	return "http://" + addr + "/mcp", "http://" + addr + "/calls"
}
