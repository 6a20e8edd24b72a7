//go:build realnode

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

package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/test/utils"
)

const (
	timeout  = 3 * time.Minute
	interval = 250 * time.Millisecond
	// sampleRun is config/samples' ResearchRun.
	sampleRun = "survey-vector-dbs"
)

// namespace creates a fresh namespace and waits for its default ServiceAccount (a pod created
// before it exists fails).
func namespace(t *testing.T, g Gomega, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	g.Expect(cl.Create(context.Background(), ns)).To(Succeed())
	g.Eventually(func() error {
		return cl.Get(context.Background(), client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	}, timeout, interval).Should(Succeed())
	return ns.Name
}

// applySamples applies config/samples into ns with kubectl, the reference agent's image replaced
// by the one built here.
func applySamples(g Gomega, ns string) {
	var docs []string
	for _, f := range []string{"agentrun_v1alpha1_runtimepolicy.yaml", "agentrun_v1alpha1_session.yaml",
		"research-agent-script.yaml", "agentrun_v1alpha1_researchrun.yaml"} {
		data, err := os.ReadFile(filepath.Join(utils.ProjectRoot(), "config", "samples", f))
		g.Expect(err).NotTo(HaveOccurred())
		docs = append(docs, string(data))
	}
	manifest := strings.ReplaceAll(strings.Join(docs, "\n---\n"), "ghcr.io/agentrun-dev/research-agent:latest", agentImage)
	cmd := exec.Command(filepath.Join(toolchainDir(), "kubectl"), "--kubeconfig", kubeconfig(), "apply", "-n", ns, "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "kubectl apply: %s", out)
}

func getRun(g Gomega, ns, name string) *v1alpha1.ResearchRun {
	run := &v1alpha1.ResearchRun{}
	g.Expect(cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, run)).To(Succeed())
	return run
}

// awaiting returns the action ids the run's attempts wait on, each as ATTEMPT/ID: an action an
// earlier attempt had approved (scope Once) is asked for again by the attempt that replaces it.
func awaiting(g Gomega, ns, run string) []string {
	var list v1alpha1.RunAttemptList
	g.Expect(cl.List(context.Background(), &list, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.LabelRun: run})).To(Succeed())
	var ids []string
	for _, ra := range list.Items {
		for _, a := range ra.Status.AwaitingApproval {
			ids = append(ids, ra.Name+"/"+a.ActionID)
		}
	}
	return ids
}

// runningPod waits for the run's attempt pod whose agent container runs, and returns it.
func runningPod(g Gomega, ns, run string) *corev1.Pod {
	var pod *corev1.Pod
	g.Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(cl.List(context.Background(), &pods, client.InNamespace(ns),
			client.MatchingLabels{v1alpha1.LabelRun: run})).To(Succeed())
		i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool {
			return p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) > 0 &&
				p.Status.ContainerStatuses[0].State.Running != nil
		})
		g.Expect(i).NotTo(BeNumerically("<", 0), "no running attempt pod of %s", run)
		pod = &pods.Items[i]
	}, timeout, interval).Should(Succeed())
	return pod
}

// approveAll approves every action the run waits on with `kubectl agentrun approve`, until the
// run is Terminated.
func approveAll(g Gomega, ns, run string) *v1alpha1.ResearchRun {
	approved := map[string]bool{}
	var r *v1alpha1.ResearchRun
	g.Eventually(func(g Gomega) {
		for _, key := range awaiting(g, ns, run) {
			if approved[key] {
				continue
			}
			_, id, _ := strings.Cut(key, "/")
			out, err := kubectl("agentrun", "approve", "-n", ns, run, id, "--comment", "real node")
			g.Expect(err).NotTo(HaveOccurred(), "kubectl agentrun approve: %s", out)
			approved[key] = true
		}
		r = getRun(g, ns, run)
		g.Expect(r.Status.Phase).To(Equal(v1alpha1.PhaseTerminated))
	}, timeout, interval).Should(Succeed())
	return r
}

// A user applies config/samples with kubectl: the operator the chart installed admits and runs
// the sample, the attempt pod starts from the reference agent's image, reaches the gateway by
// its Service's DNS name through kube-proxy, and the run, its publications approved with
// `kubectl agentrun approve`, ends Completed.
func TestSampleRunCompletesFromKubectlApply(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t, g, "sample")
	before := provider.Requests.Load()
	applySamples(g, ns)

	pod := runningPod(g, ns, sampleRun)
	agent := pod.Spec.Containers[0]
	url := envValue(agent, gatewayapi.EnvGatewayURL)
	g.Expect(url).To(HavePrefix("https://agentrun-gateway."+operatorNamespace+".svc"),
		"the attempt pod reaches the gateway by its Service's DNS name")
	// That Service keeps an attempt's traffic on its node's gateway (kube-proxy honours it).
	svc := &corev1.Service{}
	g.Expect(cl.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: "agentrun-gateway"}, svc)).
		To(Succeed())
	g.Expect(svc.Spec.InternalTrafficPolicy).To(HaveValue(Equal(corev1.ServiceInternalTrafficPolicyLocal)))

	run := approveAll(g, ns, sampleRun)
	g.Expect(run.Status.Reason).To(Equal(v1alpha1.ReasonCompleted), "message: %s", run.Status.Message)
	g.Expect(run.Status.Settlement).To(Equal(v1alpha1.SettlementComplete))
	g.Expect(provider.Requests.Load()-before).To(BeNumerically(">=", 4),
		"the model requests went through the gateway (reached by DNS) to the provider")
	g.Expect(run.Status.Budget.Used.ModelRequests).To(BeNumerically(">=", 4))
}

// The attempt pod, as the kubelet and runc run it: its agent process is uid 65532 with a
// read-only root filesystem, holds no Kubernetes API token, and can read its gateway token
// (owned by it or readable by its group).
func TestAttemptPodIsNonrootReadOnlyWithoutAPIToken(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t, g, "pod")
	applySamples(g, ns)
	pod := runningPod(g, ns, sampleRun)
	g.Expect(*pod.Spec.AutomountServiceAccountToken).To(BeFalse())

	// The agent's process on the node, by its container's id.
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	tasks, err := inNode("ctr", "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "tasks", "ls")
	g.Expect(err).NotTo(HaveOccurred(), tasks)
	m := regexp.MustCompile(`(?m)^` + id + `\s+(\d+)\s+RUNNING`).FindStringSubmatch(tasks)
	g.Expect(m).NotTo(BeNil(), "task %s in:\n%s", id, tasks)
	proc := "/proc/" + m[1]

	status, err := inNode("cat", proc+"/status")
	g.Expect(err).NotTo(HaveOccurred(), status)
	g.Expect(status).To(MatchRegexp(`(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`), "the agent runs as uid 65532")

	mounts, err := inNode("cat", proc+"/mountinfo")
	g.Expect(err).NotTo(HaveOccurred(), mounts)
	g.Expect(mounts).To(MatchRegexp(`(?m)^\S+ \S+ \S+ \S+ / ro[,\s]`), "the root filesystem is read-only")

	_, err = inNode("test", "-e", proc+"/root/var/run/secrets/kubernetes.io/serviceaccount")
	g.Expect(err).To(HaveOccurred(), "no Kubernetes API token is mounted")

	token := envValue(pod.Spec.Containers[0], gatewayapi.EnvTokenFile)
	g.Expect(token).To(HavePrefix(runpod.GatewayMountPath))
	st, err := inNode("stat", "-L", "-c", "%a %u %g", proc+"/root"+token)
	g.Expect(err).NotTo(HaveOccurred(), st)
	f := strings.Fields(st)
	mode, _ := strconv.ParseInt(f[0], 8, 32)
	readable := (f[1] == "65532" && mode&0o400 != 0) || (f[2] == "65532" && mode&0o040 != 0) || mode&0o004 != 0
	g.Expect(readable).To(BeTrue(), "the gateway token (mode %s, uid %s, gid %s) is readable by uid 65532", f[0], f[1], f[2])
	t.Logf("gateway token: mode %s uid %s gid %s", f[0], f[1], f[2])

	// The token works: the gateway answered the agent's model requests (the run passes its plan).
	g.Eventually(func() int64 { return getRun(g, ns, sampleRun).Status.Budget.Used.ModelRequests },
		timeout, interval).Should(BeNumerically(">=", 1))
	approveAll(g, ns, sampleRun)
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
