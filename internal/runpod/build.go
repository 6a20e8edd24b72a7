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

package runpod

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

const (
	// EnvPodName tells the agent its pod's name (downward API).
	EnvPodName = "POD_NAME"
	// EnvPodUID tells the agent its pod's UID (downward API).
	EnvPodUID = "POD_UID"

	// LabelManagedBy and LabelName are the well-known labels on attempt pods.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelName      = "app.kubernetes.io/name"
	// ManagedBy and AppName are their values.
	ManagedBy = "agentrun"
	AppName   = "research-agent"

	// ScratchPath is where every container gets a writable emptyDir unless the
	// template mounts a volume there, since root filesystems are read-only by
	// default.
	ScratchPath = "/tmp"
	// scratchVolume is the scratch volume's name, unless the template already
	// has a volume of that name.
	scratchVolume = "tmp"
)

// restrictedLatest is the level Build hardens to and checks against.
var restrictedLatest = psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}

// evaluator is the upstream pod-security-admission evaluator, built once.
var evaluator = sync.OnceValues(func() (policy.Evaluator, error) {
	return policy.NewEvaluator(policy.DefaultChecks(), nil)
})

// Build returns attempt n's pod from run.Spec.Template, hardened. It does not
// set owner references (the reconciler does).
//
// The pod is named Name(run, n) in the run's namespace; it carries the
// template's labels and annotations plus the run, attempt, session,
// managed-by and name labels (which win over the template's); restartPolicy
// is Never (a failure becomes a new attempt, not a restart); it runs as
// serviceAccount (unless empty) with its token mounted (the agent writes its
// facts with it); every container and init container is told its namespace,
// run, attempt, RunAttempt, pod name and pod UID in env, appended after the
// template's env (a name the template already sets keeps the template's value).
//
// Hardening to the restricted Pod Security Standard fills only fields the
// template leaves unset: pod runAsNonRoot true and seccompProfile
// RuntimeDefault; in every container and init container allowPrivilegeEscalation
// false, capabilities drop ALL, runAsNonRoot true and readOnlyRootFilesystem
// true; an emptyDir at /tmp for containers that mount nothing there. A
// template value the standard forbids is a *TemplateError naming the field.
func Build(run *v1alpha1.ResearchRun, attempt int32, serviceAccount string) (*corev1.Pod, error) {
	switch {
	case run == nil:
		return nil, errors.New("runpod: run is nil")
	case run.Name == "":
		return nil, errors.New("runpod: run has no name")
	case run.Namespace == "":
		return nil, errors.New("runpod: run has no namespace")
	case attempt < 1:
		return nil, fmt.Errorf("runpod: attempt must be at least 1, not %d", attempt)
	}

	tmpl := run.Spec.Template.DeepCopy()
	if errs := validateTemplate(tmpl); len(errs) > 0 {
		return nil, &TemplateError{Errors: errs}
	}

	pod := assemble(run, attempt, serviceAccount, tmpl)
	if err := checkRestricted(pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// assemble makes the pod from the template (a copy it may keep), without
// validating it.
func assemble(run *v1alpha1.ResearchRun, attempt int32, serviceAccount string, tmpl *corev1.PodTemplateSpec) *corev1.Pod {
	name := Name(run.Name, attempt)
	labels := make(map[string]string, len(tmpl.Labels)+5)
	maps.Copy(labels, tmpl.Labels)
	labels[v1alpha1.LabelRun] = LabelValue(run.Name)
	labels[v1alpha1.LabelAttempt] = strconv.FormatInt(int64(attempt), 10)
	labels[v1alpha1.LabelSession] = LabelValue(run.Spec.SessionRef.Name)
	labels[LabelManagedBy] = ManagedBy
	labels[LabelName] = AppName

	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   run.Namespace,
			Labels:      labels,
			Annotations: tmpl.Annotations,
		},
		Spec: tmpl.Spec,
	}
	spec := &pod.Spec
	spec.RestartPolicy = corev1.RestartPolicyNever
	if serviceAccount != "" {
		spec.ServiceAccountName = serviceAccount
		spec.DeprecatedServiceAccount = ""
	}
	spec.AutomountServiceAccountToken = new(true)

	harden(spec)
	addScratch(spec)
	for _, c := range containers(spec) {
		addEnv(c, run, attempt, name)
	}
	return pod
}

// containers returns the pod's init containers and containers.
func containers(spec *corev1.PodSpec) []*corev1.Container {
	all := make([]*corev1.Container, 0, len(spec.InitContainers)+len(spec.Containers))
	for i := range spec.InitContainers {
		all = append(all, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		all = append(all, &spec.Containers[i])
	}
	return all
}

// harden fills the security fields the template leaves unset.
func harden(spec *corev1.PodSpec) {
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := spec.SecurityContext
	// A pod-level runAsNonRoot: false survives validation only in a user
	// namespace; containers then inherit it rather than being overridden.
	containerNonRoot := psc.RunAsNonRoot == nil || *psc.RunAsNonRoot
	if psc.RunAsNonRoot == nil {
		psc.RunAsNonRoot = new(true)
	}
	if psc.SeccompProfile == nil {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for i := range spec.Volumes {
		if spec.Volumes[i].VolumeSource == (corev1.VolumeSource{}) {
			// What the API server would default it to, made explicit so the
			// pod-security check sees an allowed volume type.
			spec.Volumes[i].EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
	}

	for _, c := range containers(spec) {
		if c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{}
		}
		sc := c.SecurityContext
		if sc.AllowPrivilegeEscalation == nil {
			sc.AllowPrivilegeEscalation = new(false)
		}
		if sc.Capabilities == nil {
			sc.Capabilities = &corev1.Capabilities{}
		}
		if !slices.Contains(sc.Capabilities.Drop, capAll) {
			sc.Capabilities.Drop = append(sc.Capabilities.Drop, capAll)
		}
		if sc.RunAsNonRoot == nil && containerNonRoot {
			sc.RunAsNonRoot = new(true)
		}
		if sc.ReadOnlyRootFilesystem == nil {
			sc.ReadOnlyRootFilesystem = new(true)
		}
		// seccompProfile: the pod-level profile is always set above, and
		// containers inherit it.
	}
}

// addScratch mounts an emptyDir at /tmp in every container that mounts
// nothing there, adding the volume once if any container needs it.
func addScratch(spec *corev1.PodSpec) {
	volume := ""
	for _, c := range containers(spec) {
		if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return path.Clean(m.MountPath) == ScratchPath
		}) {
			continue
		}
		if volume == "" {
			volume = unusedVolumeName(spec)
			spec.Volumes = append(spec.Volumes, corev1.Volume{
				Name:         volume,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			})
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: ScratchPath})
	}
}

// unusedVolumeName returns "tmp", or else the first of "agentrun-tmp",
// "agentrun-tmp-2", ... that no template volume uses.
func unusedVolumeName(spec *corev1.PodSpec) string {
	used := func(name string) bool {
		return slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
	}
	if !used(scratchVolume) {
		return scratchVolume
	}
	name := "agentrun-" + scratchVolume
	for i := 2; used(name); i++ {
		name = "agentrun-" + scratchVolume + "-" + strconv.Itoa(i)
	}
	return name
}

// addEnv appends the agent's identity to the container's env, skipping names
// the template already sets.
func addEnv(c *corev1.Container, run *v1alpha1.ResearchRun, attempt int32, name string) {
	fieldRef := func(fieldPath string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath}}
	}
	for _, e := range []corev1.EnvVar{
		{Name: v1alpha1.EnvNamespace, Value: run.Namespace},
		{Name: v1alpha1.EnvRun, Value: run.Name},
		{Name: v1alpha1.EnvAttempt, Value: strconv.FormatInt(int64(attempt), 10)},
		{Name: v1alpha1.EnvRunAttempt, Value: name},
		{Name: EnvPodName, ValueFrom: fieldRef("metadata.name")},
		{Name: EnvPodUID, ValueFrom: fieldRef("metadata.uid")},
	} {
		if !slices.ContainsFunc(c.Env, func(t corev1.EnvVar) bool { return t.Name == e.Name }) {
			c.Env = append(c.Env, e)
		}
	}
}

// checkRestricted evaluates the built pod with the upstream pod-security
// checks. validateTemplate names the field for every value the standard
// forbids; this catches anything it does not know about (a newer check), so
// Build never returns a pod a restricted namespace would refuse.
func checkRestricted(pod *corev1.Pod) error {
	ev, err := evaluator()
	if err != nil {
		return fmt.Errorf("runpod: pod security evaluator: %w", err)
	}
	result := policy.AggregateCheckResults(ev.EvaluatePod(restrictedLatest, &pod.ObjectMeta, &pod.Spec))
	if result.Allowed {
		return nil
	}
	return &TemplateError{Errors: field.ErrorList{
		field.Forbidden(field.NewPath("spec", "template"), result.ForbiddenDetail()+restricted),
	}}
}
