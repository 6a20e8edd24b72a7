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
	"github.com/agentrun-dev/agentrun/internal/tracing"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
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

	// GatewayVolume is the projected volume holding the attempt's gateway
	// token and the gateway's CA, mounted read-only at GatewayMountPath in
	// every container.
	GatewayVolume = "agentrun-gateway"
	// GatewayFSGroup is the pod's fsGroup when its template sets none: the group that owns the
	// gateway volume's token and CA (mode 0440) and that every container of the pod holds, so an
	// agent whose user comes from its image (e.g. distroless's nonroot, 65532) reads them.
	GatewayFSGroup = 65532
	// GatewayMountPath is where the gateway volume is mounted.
	GatewayMountPath = "/var/run/secrets/agentrun.dev/gateway"
	// GatewayTokenFile and GatewayCAFile are the files in it.
	GatewayTokenFile = "token"
	GatewayCAFile    = "ca.crt"
	// DefaultGatewayCAConfigMap is the ConfigMap (in the run's namespace)
	// the operator keeps the gateway's CA bundle in, key ca.crt.
	DefaultGatewayCAConfigMap = "agentrun-gateway-ca"
	// GatewayTokenSeconds is the projected token's lifetime; the kubelet
	// rotates it at 80%.
	GatewayTokenSeconds = 3600
)

// Gateway says how attempt pods reach agentrun-gateway.
type Gateway struct {
	// URL is the gateway's base URL.
	URL string
	// CAConfigMap is the ConfigMap holding the gateway's CA (key ca.crt);
	// empty when the gateway's certificate is publicly trusted.
	CAConfigMap string
}

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
// serviceAccount (unless empty) with no API-server token at all
// (automountServiceAccountToken false): its only credential is a projected
// token of audience agentrun-gateway, which the API server itself refuses,
// mounted with the gateway's CA at GatewayMountPath. Every container and init
// container is told its namespace, run, attempt, RunAttempt, pod name and pod
// UID, the gateway's URL, token and CA files, and OPENAI_BASE_URL (the
// gateway's model door, which the official OpenAI SDKs read) in env,
// appended after the template's env (a name the template already sets keeps
// the template's value).
//
// Hardening to the restricted Pod Security Standard fills only fields the
// template leaves unset: pod runAsNonRoot true and seccompProfile
// RuntimeDefault; in every container and init container allowPrivilegeEscalation
// false, capabilities drop ALL, runAsNonRoot true and readOnlyRootFilesystem
// true; an emptyDir at /tmp for containers that mount nothing there. A
// template value the standard forbids is a *TemplateError naming the field.
func Build(run *v1alpha1.ResearchRun, attempt int32, serviceAccount string, gw Gateway) (*corev1.Pod, error) {
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
	if errs := addHarness(tmpl, run.Spec.Harness); len(errs) > 0 {
		return nil, &TemplateError{Errors: errs}
	}
	if errs := validateTemplate(tmpl); len(errs) > 0 {
		return nil, &TemplateError{Errors: errs}
	}

	pod := assemble(run, attempt, serviceAccount, gw, tmpl)
	if err := checkRestricted(pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// assemble makes the pod from the template (a copy it may keep), without
// validating it.
func assemble(run *v1alpha1.ResearchRun, attempt int32, serviceAccount string, gw Gateway, tmpl *corev1.PodTemplateSpec) *corev1.Pod {
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
	spec.AutomountServiceAccountToken = new(false)

	harden(spec)
	addScratch(spec)
	addGateway(spec, gw)
	for _, c := range containers(spec) {
		addEnv(c, run, attempt, name, gw)
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

// addGateway adds the projected gateway volume (token of audience
// agentrun-gateway, and the CA) and mounts it in every container.
func addGateway(spec *corev1.PodSpec, gw Gateway) {
	if gw.URL == "" {
		return
	}
	sources := []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
		Audience: gatewayapi.Audience, ExpirationSeconds: new(int64(GatewayTokenSeconds)), Path: GatewayTokenFile,
	}}}
	if gw.CAConfigMap != "" {
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: gw.CAConfigMap},
			Items:                []corev1.KeyToPath{{Key: GatewayCAFile, Path: GatewayCAFile}},
		}})
	}
	// The kubelet writes the volume's files as root, mode 0440, unless it knows the reader: a
	// container's user set in the image (USER), not the pod, reads nothing without a group.
	if spec.SecurityContext != nil && spec.SecurityContext.FSGroup == nil {
		spec.SecurityContext.FSGroup = new(int64(GatewayFSGroup))
	}
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == GatewayVolume })
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: GatewayVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: sources, DefaultMode: new(int32(0o440))},
	}})
	for _, c := range containers(spec) {
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == GatewayVolume })
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: GatewayVolume, MountPath: GatewayMountPath, ReadOnly: true})
	}
}

// addEnv appends the agent's identity to the container's env, skipping names
// the template already sets.
func addEnv(c *corev1.Container, run *v1alpha1.ResearchRun, attempt int32, name string, gw Gateway) {
	fieldRef := func(fieldPath string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath}}
	}
	env := []corev1.EnvVar{
		{Name: v1alpha1.EnvNamespace, Value: run.Namespace},
		{Name: v1alpha1.EnvRun, Value: run.Name},
		{Name: v1alpha1.EnvAttempt, Value: strconv.FormatInt(int64(attempt), 10)},
		{Name: v1alpha1.EnvRunAttempt, Value: name},
		{Name: EnvPodName, ValueFrom: fieldRef("metadata.name")},
		{Name: EnvPodUID, ValueFrom: fieldRef("metadata.uid")},
	}
	if gw.URL != "" {
		env = append(env,
			corev1.EnvVar{Name: gatewayapi.EnvGatewayURL, Value: gw.URL},
			corev1.EnvVar{Name: gatewayapi.EnvTokenFile, Value: path.Join(GatewayMountPath, GatewayTokenFile)},
			corev1.EnvVar{Name: gatewayapi.EnvOpenAIBaseURL, Value: gw.URL + gatewayapi.ModelPathPrefix},
			corev1.EnvVar{Name: gatewayapi.EnvAnthropicBaseURL, Value: gw.URL},
			corev1.EnvVar{Name: gatewayapi.EnvMCPURL, Value: gw.URL + gatewayapi.MCPPath})
		if gw.CAConfigMap != "" {
			ca := path.Join(GatewayMountPath, GatewayCAFile)
			env = append(env, corev1.EnvVar{Name: gatewayapi.EnvCAFile, Value: ca},
				// Node's fetch (the official openai package) adds it to its roots.
				corev1.EnvVar{Name: "NODE_EXTRA_CA_CERTS", Value: ca})
		}
	}
	// The run's trace (the operator's root span of the run), which the SDKs
	// forward to the gateway as the traceparent header.
	if tp := tracing.RunTraceparent(run.UID); tp != "" {
		env = append(env, corev1.EnvVar{Name: tracing.EnvTraceparent, Value: tp})
	}
	for _, e := range env {
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
