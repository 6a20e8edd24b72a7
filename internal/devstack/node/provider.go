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

package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// provider is virtual-kubelet's PodLifecycleHandler and PodNotifier for
// local processes.
type provider struct {
	n *Node

	mu       sync.Mutex
	pods     map[string]*podRun // namespace/name
	notifier func(*corev1.Pod)
	shutdown bool
}

func newProvider(n *Node) *provider {
	return &provider{n: n, pods: map[string]*podRun{}}
}

// podRun is one pod on this node.
type podRun struct {
	key string
	dir string

	mu       sync.Mutex
	pod      *corev1.Pod // the pod as created, with the status this node reports
	ctrs     []*ctrRun   // init containers first, in order, then containers
	phase    corev1.PodPhase
	reason   string // pod-level reason and message of a failure before start
	message  string
	started  time.Time
	initDone bool
	deleting bool
	grace    *time.Timer
	finished bool

	volumes map[string]string // volume name → local directory

	cancel context.CancelFunc // ends the start sequence and the token refresher
	done   chan struct{}      // closed when every process has exited
}

// ctrRun is one container's process.
type ctrRun struct {
	spec    corev1.Container
	init    bool
	logPath string

	pid      int
	running  bool
	exited   bool
	exitCode int32
	signal   int32
	reason   string
	message  string
	started  time.Time
	finished time.Time
	exitCh   chan struct{}
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// NotifyPods implements node.PodNotifier.
func (p *provider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	p.notifier = f
	p.mu.Unlock()
}

func (p *provider) notify(pr *podRun) {
	p.mu.Lock()
	f := p.notifier
	p.mu.Unlock()
	if f == nil {
		return
	}
	pr.mu.Lock()
	pod := pr.snapshotLocked()
	pr.mu.Unlock()
	f(pod)
}

// CreatePod implements node.PodLifecycleHandler: it starts the pod's
// containers in the background and returns at once.
func (p *provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	uid := string(pod.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	pr := &podRun{
		key:   key,
		dir:   filepath.Join(p.n.cfg.Dir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, uid)),
		pod:   pod.DeepCopy(),
		phase: corev1.PodPending,
		done:  make(chan struct{}),
	}
	for _, c := range pod.Spec.InitContainers {
		pr.ctrs = append(pr.ctrs, &ctrRun{spec: c, init: true, exitCh: make(chan struct{})})
	}
	for _, c := range pod.Spec.Containers {
		pr.ctrs = append(pr.ctrs, &ctrRun{spec: c, exitCh: make(chan struct{})})
	}
	for _, c := range pr.ctrs {
		c.logPath = filepath.Join(pr.dir, c.spec.Name+".log")
	}
	// The start sequence outlives CreatePod's context.
	ctx, cancel := context.WithCancel(context.Background())
	pr.cancel = cancel

	p.mu.Lock()
	if p.shutdown {
		p.mu.Unlock()
		cancel()
		return errdefs.InvalidInput("local node is shutting down")
	}
	if _, ok := p.pods[key]; ok {
		p.mu.Unlock()
		cancel()
		return nil
	}
	p.pods[key] = pr
	p.mu.Unlock()

	go p.run(ctx, pr)
	return nil
}

// UpdatePod implements node.PodLifecycleHandler. Only labels, annotations
// and images may change on a pod; a running process cannot change its image.
func (p *provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	pr := p.get(pod.Namespace, pod.Name)
	if pr == nil {
		return errdefs.NotFoundf("pod %s/%s is not on this node", pod.Namespace, pod.Name)
	}
	pr.mu.Lock()
	pr.pod.Labels, pr.pod.Annotations = pod.Labels, pod.Annotations
	pr.mu.Unlock()
	return nil
}

// DeletePod implements node.PodLifecycleHandler: SIGTERM to every running
// container's process group, SIGKILL after the grace period. Once all have
// exited the pod is removed from the API server, as a kubelet does.
func (p *provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	pr := p.get(pod.Namespace, pod.Name)
	if pr == nil {
		return errdefs.NotFoundf("pod %s/%s is not on this node", pod.Namespace, pod.Name)
	}
	pr.mu.Lock()
	if pr.finished && !pr.deleting {
		// Already ended on its own; the API object is gone or going.
		pr.mu.Unlock()
		p.forget(pr)
		return nil
	}
	if pr.deleting {
		pr.mu.Unlock()
		return nil
	}
	pr.deleting = true
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	pr.signalLocked(syscall.SIGTERM)
	pr.grace = time.AfterFunc(time.Duration(grace)*time.Second, func() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		pr.signalLocked(syscall.SIGKILL)
	})
	pr.mu.Unlock()
	p.n.log.V(1).Info("deleting pod: SIGTERM sent", "pod", pr.key, "gracePeriodSeconds", grace)
	// No new container starts from here on (the start sequence checks
	// deleting); the token refresher ends when the pod is done.
	return nil
}

// GetPod implements node.PodLifecycleHandler.
func (p *provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	pr := p.get(namespace, name)
	if pr == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", namespace, name)
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.snapshotLocked(), nil
}

// GetPodStatus implements node.PodLifecycleHandler.
func (p *provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods implements node.PodLifecycleHandler.
func (p *provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	runs := make([]*podRun, 0, len(p.pods))
	for _, pr := range p.pods {
		runs = append(runs, pr)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(runs))
	for _, pr := range runs {
		pr.mu.Lock()
		out = append(out, pr.snapshotLocked())
		pr.mu.Unlock()
	}
	return out, nil
}

func (p *provider) get(namespace, name string) *podRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[podKey(namespace, name)]
}

func (p *provider) forget(pr *podRun) {
	p.mu.Lock()
	if p.pods[pr.key] == pr {
		delete(p.pods, pr.key)
	}
	p.mu.Unlock()
}

func (p *provider) processes() map[string]int {
	p.mu.Lock()
	runs := make([]*podRun, 0, len(p.pods))
	for _, pr := range p.pods {
		runs = append(runs, pr)
	}
	p.mu.Unlock()
	out := map[string]int{}
	for _, pr := range runs {
		pr.mu.Lock()
		for _, c := range pr.ctrs {
			if c.running {
				out[pr.key+"/"+c.spec.Name] = c.pid
			}
		}
		pr.mu.Unlock()
	}
	return out
}

func (p *provider) podDir(namespace, name string) string {
	if pr := p.get(namespace, name); pr != nil {
		return pr.dir
	}
	return ""
}

// killAll ends every process on shutdown: SIGTERM, then SIGKILL after grace.
// It makes no API calls (the API server may be going away too).
func (p *provider) killAll(grace time.Duration) {
	p.mu.Lock()
	p.shutdown = true
	runs := make([]*podRun, 0, len(p.pods))
	for _, pr := range p.pods {
		runs = append(runs, pr)
	}
	p.mu.Unlock()
	for _, pr := range runs {
		pr.mu.Lock()
		pr.deleting = true
		pr.signalLocked(syscall.SIGTERM)
		pr.mu.Unlock()
		pr.cancel()
	}
	deadline := time.After(grace)
	for _, pr := range runs {
		select {
		case <-pr.done:
		case <-deadline:
		}
	}
	for _, pr := range runs {
		pr.mu.Lock()
		pr.signalLocked(syscall.SIGKILL)
		pr.mu.Unlock()
	}
	for _, pr := range runs {
		select {
		case <-pr.done:
		case <-time.After(5 * time.Second):
			p.n.log.Info("pod processes did not exit after SIGKILL", "pod", pr.key)
		}
	}
}

// signalLocked signals the process group of every running container.
func (pr *podRun) signalLocked(sig syscall.Signal) {
	for _, c := range pr.ctrs {
		if c.running && c.pid > 0 {
			_ = syscall.Kill(-c.pid, sig)
		}
	}
}

// run is the pod's life: credentials, init containers in order, then all
// containers; then the final status; then, if the pod is being deleted, its
// removal from the API server.
func (p *provider) run(ctx context.Context, pr *podRun) {
	log := p.n.log.WithValues("pod", pr.key)
	defer func() {
		pr.cancel()
		close(pr.done)
	}()
	fail := func(reason string, err error) {
		log.Info("pod failed before its containers ran", "reason", reason, "error", err.Error())
		pr.mu.Lock()
		pr.phase, pr.reason, pr.message = corev1.PodFailed, reason, err.Error()
		now := time.Now()
		for _, c := range pr.ctrs {
			if !c.exited && !c.running {
				c.exited, c.exitCode, c.reason, c.message = true, 128, reason, err.Error()
				c.started, c.finished = now, now
			}
		}
		pr.finished = true
		pr.mu.Unlock()
	}

	pr.mu.Lock()
	pr.started = time.Now()
	pod := pr.pod.DeepCopy()
	pr.mu.Unlock()
	p.notify(pr)

	env, err := p.prepare(ctx, pr, pod)
	if err != nil {
		fail("CreateContainerConfigError", err)
		p.notify(pr)
		p.finish(pr)
		return
	}

	// Init containers, one at a time; each must succeed.
	for _, c := range pr.ctrs {
		if !c.init {
			continue
		}
		if p.stopping(pr) {
			break
		}
		if err := p.start(pr, c, env); err != nil {
			fail("StartError", err)
			break
		}
		p.notify(pr)
		<-c.exitCh
		p.notify(pr)
		if c.exitCode != 0 {
			pr.mu.Lock()
			pr.phase, pr.reason = corev1.PodFailed, "InitContainerFailed"
			pr.message = fmt.Sprintf("init container %s exited with %d", c.spec.Name, c.exitCode)
			pr.mu.Unlock()
			break
		}
	}
	pr.mu.Lock()
	proceed := pr.phase != corev1.PodFailed && !pr.deleting
	if proceed {
		pr.initDone = true
	}
	pr.mu.Unlock()

	if proceed {
		for _, c := range pr.ctrs {
			if c.init {
				continue
			}
			if err := p.start(pr, c, env); err != nil {
				log.Info("container did not start", "container", c.spec.Name, "error", err.Error())
				pr.mu.Lock()
				now := time.Now()
				c.exited, c.exitCode, c.reason, c.message = true, 128, "StartError", err.Error()
				c.started, c.finished = now, now
				pr.mu.Unlock()
			}
		}
		pr.mu.Lock()
		pr.phase = corev1.PodRunning
		pr.mu.Unlock()
		p.notify(pr)
		for _, c := range pr.ctrs {
			if !c.init {
				<-c.exitCh
				p.notify(pr)
			}
		}
	}

	pr.mu.Lock()
	if !proceed && pr.phase != corev1.PodFailed {
		// Deleted before its containers started.
		now := time.Now()
		for _, c := range pr.ctrs {
			if !c.exited {
				c.exited, c.exitCode, c.reason = true, 137, "Killed"
				c.message = "the pod was deleted before the container started"
				c.started, c.finished = now, now
			}
		}
		pr.phase = corev1.PodFailed
	}
	if pr.phase != corev1.PodFailed {
		pr.phase = corev1.PodSucceeded
		for _, c := range pr.ctrs {
			if !c.init && c.exitCode != 0 {
				pr.phase = corev1.PodFailed
			}
		}
	}
	pr.finished = true
	pr.mu.Unlock()
	p.notify(pr)
	p.finish(pr)
}

// finish removes a deleted pod from the API server once its processes are
// gone (a kubelet's final force delete), and forgets it.
func (p *provider) finish(pr *podRun) {
	pr.mu.Lock()
	deleting := pr.deleting
	if pr.grace != nil {
		pr.grace.Stop()
	}
	uid := pr.pod.UID
	ns, name := pr.pod.Namespace, pr.pod.Name
	pr.mu.Unlock()
	p.mu.Lock()
	shutdown := p.shutdown
	p.mu.Unlock()
	if !deleting || shutdown {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.n.cfg.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(uid)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		p.n.log.Error(err, "removing terminated pod", "pod", pr.key)
	}
	p.forget(pr)
}

func (p *provider) stopping(pr *podRun) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.deleting
}

// prepare creates the pod's directory and credentials and returns the base
// environment every container gets.
func (p *provider) prepare(ctx context.Context, pr *podRun, pod *corev1.Pod) ([]string, error) {
	if err := os.MkdirAll(filepath.Join(pr.dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	env := append([]string{}, p.n.cfg.Env...)
	env = append(env, "HOME="+pr.dir, "TMPDIR="+filepath.Join(pr.dir, "tmp"))
	// A pod without a service account (the ServiceAccount admission plugin,
	// which would default it, is off in envtest) gets no credentials.
	if pod.Spec.ServiceAccountName != "" &&
		(pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken) {
		creds, err := p.n.podCredentials(ctx, pod, pr.dir)
		if err != nil {
			return nil, err
		}
		env = append(env, EnvKubeconfig+"="+creds.kubeconfig)
	}
	vols, err := p.n.prepareVolumes(ctx, pod, pr.dir)
	if err != nil {
		return nil, err
	}
	pr.mu.Lock()
	pr.volumes = vols
	pr.mu.Unlock()
	return env, nil
}

// start starts one container's process.
func (p *provider) start(pr *podRun, c *ctrRun, base []string) error {
	pr.mu.Lock()
	pod := pr.pod
	pr.mu.Unlock()
	bin, err := p.n.cfg.Images.Resolve(c.spec.Image)
	if err != nil {
		return err
	}
	podEnv := containerEnv(pod, &c.spec)
	pr.mu.Lock()
	mm := mounts(&c.spec, pr.volumes)
	pr.mu.Unlock()
	// The termination message file: a kubelet mounts one at the
	// container's terminationMessagePath; a process finds it rewritten.
	termPath := filepath.Join(pr.dir, "termination-"+c.spec.Name)
	if tp := c.spec.TerminationMessagePath; tp != "" {
		mm = append(mm, [2]string{path.Clean(tp), termPath})
	}
	for i := range podEnv {
		podEnv[i].Value = mm.rewrite(podEnv[i].Value)
	}
	vars := map[string]string{}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	for _, e := range podEnv {
		vars[e.Name] = e.Value
	}
	exe, args, err := commandLine(bin, &c.spec, vars)
	if err != nil {
		return err
	}
	for i := range args {
		args[i] = mm.rewrite(args[i])
	}
	env := append([]string{}, base...)
	for _, e := range podEnv {
		env = append(env, e.Name+"="+e.Value)
	}

	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // the child has its own descriptor

	cmd := newCmd(exe, args, env, pr.dir, f)
	pr.mu.Lock()
	if pr.deleting {
		pr.mu.Unlock()
		return errors.New("pod is being deleted")
	}
	if err := cmd.Start(); err != nil {
		pr.mu.Unlock()
		return fmt.Errorf("start %s: %w", exe, err)
	}
	c.pid, c.running, c.started = cmd.Process.Pid, true, time.Now()
	pr.mu.Unlock()
	p.n.log.V(1).Info("container started", "pod", pr.key, "container", c.spec.Name, "pid", c.pid, "exe", exe, "args", args)

	go func() {
		err := cmd.Wait()
		code, sig := exitStatus(cmd, err)
		pr.mu.Lock()
		c.running, c.exited, c.finished = false, true, time.Now()
		c.exitCode, c.signal = code, sig
		switch code {
		case 0:
			c.reason = "Completed"
		default:
			c.reason = "Error"
		}
		// As a kubelet: the file's content (at most 4096 bytes), else on
		// an error the log's tail when the policy says so.
		c.message = terminationMessage(termPath)
		if c.message == "" && code != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			c.message = tailFile(c.logPath, 80, 4096)
		}
		pr.mu.Unlock()
		p.n.log.V(1).Info("container exited", "pod", pr.key, "container", c.spec.Name, "pid", c.pid, "exitCode", code, "signal", sig)
		close(c.exitCh)
	}()
	return nil
}

// snapshotLocked returns the pod with the status this node reports.
func (pr *podRun) snapshotLocked() *corev1.Pod {
	pod := pr.pod.DeepCopy()
	st := &pod.Status
	st.Phase = pr.phase
	st.Reason, st.Message = pr.reason, pr.message
	st.HostIP, st.PodIP = loopback, loopback
	st.HostIPs = []corev1.HostIP{{IP: loopback}}
	st.PodIPs = []corev1.PodIP{{IP: loopback}}
	if st.StartTime == nil && !pr.started.IsZero() {
		st.StartTime = new(metav1.NewTime(pr.started))
	}
	st.InitContainerStatuses, st.ContainerStatuses = nil, nil
	allRunning, anyRegular := true, false
	for _, c := range pr.ctrs {
		cs := c.statusLocked(pr)
		if c.init {
			st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
			continue
		}
		anyRegular = true
		if !c.running {
			allRunning = false
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	ready := anyRegular && allRunning && pr.phase == corev1.PodRunning
	terminal := pr.phase == corev1.PodSucceeded || pr.phase == corev1.PodFailed
	cond := func(t corev1.PodConditionType, ok bool, reason string) {
		status := corev1.ConditionFalse
		if ok {
			status, reason = corev1.ConditionTrue, ""
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != status {
					st.Conditions[i].LastTransitionTime = metav1.Now()
				}
				st.Conditions[i].Status, st.Conditions[i].Reason = status, reason
				return
			}
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.Now()})
	}
	notReady := "ContainersNotReady"
	if terminal {
		notReady = "PodCompleted"
	}
	cond(corev1.PodScheduled, true, "")
	cond(corev1.PodInitialized, pr.initDone || len(pod.Spec.InitContainers) == 0, "ContainersNotInitialized")
	cond(corev1.ContainersReady, ready, notReady)
	cond(corev1.PodReady, ready, notReady)
	return pod
}

func (c *ctrRun) statusLocked(pr *podRun) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name:    c.spec.Name,
		Image:   c.spec.Image,
		ImageID: "local://" + c.spec.Image,
		Started: new(c.running),
		Ready:   c.running && !c.init,
	}
	if c.pid > 0 {
		cs.ContainerID = fmt.Sprintf("local://%d", c.pid)
	}
	switch {
	case c.running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.started)}
	case c.exited:
		cs.State.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: c.exitCode, Signal: c.signal, Reason: c.reason, Message: c.message,
			StartedAt: metav1.NewTime(c.started), FinishedAt: metav1.NewTime(c.finished),
			ContainerID: cs.ContainerID,
		}
	default:
		reason := "ContainerCreating"
		if !c.init && !pr.initDone && len(pr.pod.Spec.InitContainers) > 0 {
			reason = "PodInitializing"
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
	}
	return cs
}

// terminationMessage is a termination message file's content, at most its
// first 4096 bytes as a kubelet reads it.
func terminationMessage(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	return string(data[:min(len(data), 4096)])
}
