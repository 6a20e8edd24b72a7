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

package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// AgentContainer is the attempt pod's container whose logs Logs shows.
const AgentContainer = "agent"

// LogsOptions select the attempt whose pod logs Logs streams.
type LogsOptions struct {
	Namespace string
	Run       string
	// Attempt is the attempt number; 0: the run's current attempt.
	Attempt int32
	// Container defaults to AgentContainer.
	Container string
	Follow    bool
}

// Logs streams the logs of an attempt's pod (<run>-<n>, container agent)
// to w.
func Logs(ctx context.Context, w io.Writer, c client.Reader, kube kubernetes.Interface, o LogsOptions) error {
	pod, err := AttemptPod(ctx, c, o.Namespace, o.Run, o.Attempt)
	if err != nil {
		return err
	}
	container := o.Container
	if container == "" {
		container = AgentContainer
	}
	req := kube.CoreV1().Pods(o.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: o.Follow})
	rc, err := req.Stream(ctx)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s/%s not found: the attempt's pod is gone (%w)", o.Namespace, pod, err)
		}
		return fmt.Errorf("logs of pod %s/%s container %s: %w", o.Namespace, pod, container, err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.Copy(w, rc); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return err
	}
	return nil
}

// AttemptPod returns the pod name of the run's attempt n (0: its current
// attempt): the RunAttempt's spec.podName, else the attempt's name.
func AttemptPod(ctx context.Context, c client.Reader, ns, run string, n int32) (string, error) {
	var rr v1alpha1.ResearchRun
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: run}, &rr); err != nil {
		return "", err
	}
	if n == 0 {
		n = rr.Status.Attempt
	}
	if n == 0 {
		return "", fmt.Errorf("researchrun %s/%s has not started an attempt yet (phase %s)", ns, run,
			dash(string(rr.Status.Phase)))
	}
	if n < 0 || (rr.Status.Attempt > 0 && n > rr.Status.Attempt) {
		return "", fmt.Errorf("researchrun %s/%s has no attempt %d (its attempts are 1 to %d)", ns, run, n,
			rr.Status.Attempt)
	}
	name := runpod.Name(run, n)
	var ra v1alpha1.RunAttempt
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ra); {
	case err == nil && ra.Spec.PodName != "":
		return ra.Spec.PodName, nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", err
	}
	return name, nil
}

func (p *plugin) logsCommand() *cobra.Command {
	var o LogsOptions
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Print the logs of a run's attempt pod (container agent)",
		Example: `  kubectl agentrun logs compare-licences
  kubectl agentrun logs compare-licences -f
  kubectl agentrun logs compare-licences --attempt 1`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: p.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, c, err := p.target()
			if err != nil {
				return err
			}
			kube, err := p.Factory.Kube()
			if err != nil {
				return err
			}
			o.Namespace, o.Run = ns, args[0]
			return Logs(cmd.Context(), p.Streams.Out, c, kube, o)
		},
	}
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "stream the logs as they are written")
	cmd.Flags().Int32Var(&o.Attempt, "attempt", 0, "attempt number (default: the current attempt)")
	cmd.Flags().StringVarP(&o.Container, "container", "c", AgentContainer, "container of the attempt pod")
	return cmd
}
