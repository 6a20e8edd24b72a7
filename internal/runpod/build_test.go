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
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

const (
	testRun       = "demo"
	testNamespace = "team-a"
	testSession   = "chat"
	testImage     = "ghcr.io/agentrun-dev/research-agent:v0.1.0"
	testRunner    = "agentrun-runner"
	templateSA    = "template-sa"
	helperImage   = "busybox"
	setup         = "setup"
	scratch       = "scratch"
	team          = "research"
	teamKey       = "team"
	appArmorAgent = "container.apparmor.security.beta.kubernetes.io/agent"
	netRaw        = corev1.Capability("NET_RAW")
)

// newRun returns run "demo" in "team-a" whose template has one bare container
// "agent", changed by mutate.
func newRun(mutate func(*corev1.PodTemplateSpec)) *v1alpha1.ResearchRun {
	run := &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Name: testRun, Namespace: testNamespace},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: testSession},
			Goal:       "survey the literature on operator design",
			Budget:     v1alpha1.Budget{ModelRequests: 40, ToolCalls: 100},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "agent", Image: testImage}},
			}},
		},
	}
	if mutate != nil {
		mutate(&run.Spec.Template)
	}
	return run
}

// hardened is the security context Build gives a container that sets none.
func hardened() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: new(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		RunAsNonRoot:             new(true),
		ReadOnlyRootFilesystem:   new(true),
	}
}

// agentEnv is the env Build appends for run "demo" in "team-a", attempt n.
func agentEnv(n string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "AGENTRUN_NAMESPACE", Value: testNamespace},
		{Name: "AGENTRUN_RUN", Value: testRun},
		{Name: "AGENTRUN_ATTEMPT", Value: n},
		{Name: "AGENTRUN_RUNATTEMPT", Value: testRun + "-" + n},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.uid"}}},
		{Name: "AGENTRUN_GATEWAY_URL", Value: "https://gw.example:8443"},
		{Name: "AGENTRUN_TOKEN_FILE", Value: "/var/run/secrets/agentrun.dev/gateway/token"},
		{Name: "OPENAI_BASE_URL", Value: "https://gw.example:8443/v1"},
		{Name: "ANTHROPIC_BASE_URL", Value: "https://gw.example:8443"},
		{Name: "AGENTRUN_MCP_URL", Value: "https://gw.example:8443/mcp"},
		{Name: "AGENTRUN_GATEWAY_CA_FILE", Value: "/var/run/secrets/agentrun.dev/gateway/ca.crt"},
		{Name: "NODE_EXTRA_CA_CERTS", Value: "/var/run/secrets/agentrun.dev/gateway/ca.crt"},
	}
}

var tmpMount = corev1.VolumeMount{Name: scratchVolume, MountPath: ScratchPath}

// testGateway is where the test's attempt pods reach the gateway.
var testGateway = Gateway{URL: "https://gw.example:8443", CAConfigMap: DefaultGatewayCAConfigMap}

var gatewayMount = corev1.VolumeMount{Name: GatewayVolume, MountPath: GatewayMountPath, ReadOnly: true}

// gatewayVolume is the projected volume Build adds: the pod's gateway token
// (audience agentrun-gateway) and the gateway's CA.
func gatewayVolume() corev1.Volume {
	return corev1.Volume{Name: GatewayVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "agentrun-gateway", ExpirationSeconds: new(int64(3600)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "agentrun-gateway-ca"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
		},
		DefaultMode: new(int32(0o440)),
	}}}
}

// checkRestrictedPSA evaluates pod with the upstream pod-security-admission
// checks at restricted/latest, independently of Build's own evaluator.
func checkRestrictedPSA(t *testing.T, pod *corev1.Pod) policy.AggregateCheckResult {
	t.Helper()
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatalf("NewEvaluator: %v", err)
	}
	lv := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	return policy.AggregateCheckResults(ev.EvaluatePod(lv, &pod.ObjectMeta, &pod.Spec))
}

func TestBuildBare(t *testing.T) {
	got, err := Build(newRun(nil), 2, testRunner, testGateway)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "demo-2",
			Namespace: testNamespace,
			Labels: map[string]string{
				"agentrun.dev/run":             testRun,
				"agentrun.dev/attempt":         "2",
				"agentrun.dev/session":         testSession,
				"app.kubernetes.io/managed-by": "agentrun",
				"app.kubernetes.io/name":       "research-agent",
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ServiceAccountName:           testRunner,
			AutomountServiceAccountToken: new(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   new(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				// The image's user reads the gateway volume through this group.
				FSGroup: new(int64(GatewayFSGroup)),
			},
			Volumes: []corev1.Volume{
				{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				gatewayVolume(),
			},
			Containers: []corev1.Container{{
				Name:            "agent",
				Image:           testImage,
				Env:             agentEnv("2"),
				VolumeMounts:    []corev1.VolumeMount{tmpMount, gatewayMount},
				SecurityContext: hardened(),
			}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Build (-want +got):\n%s", diff)
	}
	if res := checkRestrictedPSA(t, got); !res.Allowed {
		t.Errorf("restricted PSS forbids the pod: %s", res.ForbiddenDetail())
	}
}

// buildCase is a template Build must turn into a pod the restricted standard
// allows, and what to check on that pod.
type buildCase struct {
	name string
	// serviceAccount for Build: testRunner when empty, "" when "-".
	serviceAccount string
	mutate         func(*corev1.PodTemplateSpec)
	check          func(t *testing.T, pod *corev1.Pod)
}

func runBuildCases(t *testing.T, cases []buildCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sa := testRunner
			switch tc.serviceAccount {
			case "":
			case "-":
				sa = ""
			default:
				sa = tc.serviceAccount
			}
			pod, err := Build(newRun(tc.mutate), 1, sa, testGateway)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if res := checkRestrictedPSA(t, pod); !res.Allowed {
				t.Errorf("restricted PSS forbids the pod: %s", res.ForbiddenDetail())
			}
			if tc.check != nil {
				tc.check(t, pod)
			}
		})
	}
}

func TestBuildRestricted(t *testing.T) {
	runBuildCases(t, []buildCase{
		{
			name: "a bare template",
			check: func(t *testing.T, pod *corev1.Pod) {
				if diff := cmp.Diff(hardened(), pod.Spec.Containers[0].SecurityContext); diff != "" {
					t.Errorf("container securityContext (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "init containers and a sidecar",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.InitContainers = []corev1.Container{
					{Name: "fetch-checkpoint", Image: helperImage},
					{Name: "proxy", Image: "envoy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
				}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				all := append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
				if len(all) != 3 {
					t.Fatalf("got %d containers, want 3", len(all))
				}
				for _, c := range all {
					if diff := cmp.Diff(hardened(), c.SecurityContext); diff != "" {
						t.Errorf("%s securityContext (-want +got):\n%s", c.Name, diff)
					}
					if diff := cmp.Diff(agentEnv("1"), c.Env); diff != "" {
						t.Errorf("%s env (-want +got):\n%s", c.Name, diff)
					}
					if diff := cmp.Diff([]corev1.VolumeMount{tmpMount, gatewayMount}, c.VolumeMounts); diff != "" {
						t.Errorf("%s mounts (-want +got):\n%s", c.Name, diff)
					}
				}
				if len(pod.Spec.Volumes) != 2 {
					t.Errorf("got %d volumes, want the shared tmp and gateway volumes", len(pod.Spec.Volumes))
				}
				if got := pod.Spec.InitContainers[1].RestartPolicy; got == nil || *got != corev1.ContainerRestartPolicyAlways {
					t.Errorf("sidecar restartPolicy = %v, want Always kept", got)
				}
			},
		},
		{
			name: "explicit allowed values are kept",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.SecurityContext = &corev1.PodSecurityContext{
					RunAsUser:       ptr.To[int64](1000),
					RunAsGroup:      ptr.To[int64](1000),
					FSGroup:         ptr.To[int64](2000),
					SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: new("profiles/agent.json")},
					SELinuxOptions:  &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c123,c456"},
					AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
					Sysctls:         []corev1.Sysctl{{Name: "net.ipv4.tcp_keepalive_time", Value: "60"}},
				}
				c := &t.Spec.Containers[0]
				c.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}}
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)},
				}}
				c.SecurityContext = &corev1.SecurityContext{
					Privileged:             new(false),
					ReadOnlyRootFilesystem: new(false),
					RunAsNonRoot:           new(true),
					Capabilities: &corev1.Capabilities{
						Add:  []corev1.Capability{capNetBindService},
						Drop: []corev1.Capability{netRaw},
					},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					ProcMount:      ptr.To(corev1.DefaultProcMount),
				}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				want := &corev1.PodSecurityContext{
					RunAsUser:       ptr.To[int64](1000),
					RunAsGroup:      ptr.To[int64](1000),
					FSGroup:         ptr.To[int64](2000),
					RunAsNonRoot:    new(true),
					SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: new("profiles/agent.json")},
					SELinuxOptions:  &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c123,c456"},
					AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
					Sysctls:         []corev1.Sysctl{{Name: "net.ipv4.tcp_keepalive_time", Value: "60"}},
				}
				if diff := cmp.Diff(want, pod.Spec.SecurityContext); diff != "" {
					t.Errorf("pod securityContext (-want +got):\n%s", diff)
				}
				wantC := &corev1.SecurityContext{
					Privileged:               new(false),
					AllowPrivilegeEscalation: new(false),
					ReadOnlyRootFilesystem:   new(false), // allowed by the standard: kept
					RunAsNonRoot:             new(true),
					Capabilities: &corev1.Capabilities{
						Add:  []corev1.Capability{capNetBindService},
						Drop: []corev1.Capability{netRaw, "ALL"},
					},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					ProcMount:      ptr.To(corev1.DefaultProcMount),
				}
				if diff := cmp.Diff(wantC, pod.Spec.Containers[0].SecurityContext); diff != "" {
					t.Errorf("container securityContext (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "a user namespace may run as UID 0 inside it",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.HostUsers = new(false)
				t.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: new(false), RunAsUser: ptr.To[int64](0)}
				t.Spec.InitContainers = []corev1.Container{{Name: setup, Image: helperImage,
					SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}}}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				psc := pod.Spec.SecurityContext
				if psc.RunAsNonRoot == nil || *psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 0 {
					t.Errorf("pod runAsNonRoot/runAsUser = %v/%v, want false/0 kept", psc.RunAsNonRoot, psc.RunAsUser)
				}
				for _, c := range []corev1.Container{pod.Spec.InitContainers[0], pod.Spec.Containers[0]} {
					if c.SecurityContext.RunAsNonRoot != nil {
						t.Errorf("%s runAsNonRoot = %v, want unset (inherits the pod's false)", c.Name, *c.SecurityContext.RunAsNonRoot)
					}
				}
			},
		},
	})
}

// TestBuildTemplateFields covers what Build keeps, adds and overrides
// beyond security contexts; every pod must still be restricted.
func TestBuildTemplateFields(t *testing.T) {
	runBuildCases(t, []buildCase{
		{
			name: "the template's own /tmp mount and a volume named tmp",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Volumes = []corev1.Volume{
					{Name: scratchVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "prompts"}}}},
					{Name: scratch, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
						SizeLimit: new(resource.MustParse("1Gi"))}}},
				}
				t.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
					{Name: scratchVolume, MountPath: "/etc/prompts", ReadOnly: true},
					{Name: scratch, MountPath: "/tmp/"},
				}
				t.Spec.InitContainers = []corev1.Container{{Name: setup, Image: helperImage}}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				wantMain := []corev1.VolumeMount{
					{Name: scratchVolume, MountPath: "/etc/prompts", ReadOnly: true},
					{Name: scratch, MountPath: "/tmp/"},
					gatewayMount,
				}
				if diff := cmp.Diff(wantMain, pod.Spec.Containers[0].VolumeMounts); diff != "" {
					t.Errorf("agent mounts (-want +got):\n%s", diff)
				}
				wantInit := []corev1.VolumeMount{{Name: "agentrun-tmp", MountPath: "/tmp"}, gatewayMount}
				if diff := cmp.Diff(wantInit, pod.Spec.InitContainers[0].VolumeMounts); diff != "" {
					t.Errorf("setup mounts (-want +got):\n%s", diff)
				}
				names := make([]string, 0, len(pod.Spec.Volumes))
				for _, v := range pod.Spec.Volumes {
					names = append(names, v.Name)
				}
				if diff := cmp.Diff([]string{scratchVolume, scratch, "agentrun-tmp", GatewayVolume}, names); diff != "" {
					t.Errorf("volumes (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "allowed volume types, one with no source",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Volumes = []corev1.Volume{
					{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
					{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "api-key"}}},
					{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
					{Name: "downward", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
					{Name: "pvc", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "cache"}}},
					{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}}},
					{Name: "image", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "ghcr.io/agentrun-dev/corpus:v1"}}},
					{Name: "no-source"},
				}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				bare := pod.Spec.Volumes[7]
				if bare.Name != "no-source" || bare.EmptyDir == nil {
					t.Errorf("volume with no source = %+v, want it defaulted to emptyDir", bare)
				}
			},
		},
		{
			name: "template env wins and is not duplicated",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].Env = []corev1.EnvVar{
					{Name: "MODEL", Value: "scripted"},
					{Name: v1alpha1.EnvRun, Value: "custom"},
					{Name: EnvPodName, Value: "fixed"},
				}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				all := agentEnv("1")
				want := []corev1.EnvVar{
					{Name: "MODEL", Value: "scripted"},
					{Name: v1alpha1.EnvRun, Value: "custom"},
					{Name: EnvPodName, Value: "fixed"},
					all[0], all[2], all[3], all[5], all[6], all[7], all[8], all[9], all[10], all[11], all[12],
				}
				if diff := cmp.Diff(want, pod.Spec.Containers[0].Env); diff != "" {
					t.Errorf("env (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "operator labels, restartPolicy, service account and no API token win over the template",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Labels = map[string]string{teamKey: team, v1alpha1.LabelRun: "someone-else", LabelName: "my-agent"}
				t.Annotations = map[string]string{
					"example.com/owner": team,
					appArmorAgent:       "runtime/default",
				}
				t.Name = "ignored"
				t.Spec.RestartPolicy = corev1.RestartPolicyAlways
				t.Spec.AutomountServiceAccountToken = new(true)
				t.Spec.ServiceAccountName = templateSA
				t.Spec.DeprecatedServiceAccount = templateSA
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				wantLabels := map[string]string{
					teamKey:               team,
					v1alpha1.LabelRun:     testRun,
					v1alpha1.LabelAttempt: "1",
					v1alpha1.LabelSession: testSession,
					LabelManagedBy:        ManagedBy,
					LabelName:             AppName,
				}
				if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
					t.Errorf("labels (-want +got):\n%s", diff)
				}
				wantAnn := map[string]string{
					"example.com/owner": team,
					appArmorAgent:       "runtime/default",
				}
				if diff := cmp.Diff(wantAnn, pod.Annotations); diff != "" {
					t.Errorf("annotations (-want +got):\n%s", diff)
				}
				if pod.Name != "demo-1" {
					t.Errorf("name = %q, want demo-1", pod.Name)
				}
				s := pod.Spec
				if s.RestartPolicy != corev1.RestartPolicyNever || s.ServiceAccountName != testRunner ||
					s.DeprecatedServiceAccount != "" || ptr.Deref(s.AutomountServiceAccountToken, true) {
					t.Errorf("restartPolicy/serviceAccountName/serviceAccount/automount = %s/%s/%q/%v, want Never/%s/\"\"/false",
						s.RestartPolicy, s.ServiceAccountName, s.DeprecatedServiceAccount, s.AutomountServiceAccountToken, testRunner)
				}
			},
		},
		{
			name:           "no runner service account keeps the template's",
			serviceAccount: "-",
			mutate:         func(t *corev1.PodTemplateSpec) { t.Spec.ServiceAccountName = templateSA },
			check: func(t *testing.T, pod *corev1.Pod) {
				if pod.Spec.ServiceAccountName != templateSA {
					t.Errorf("serviceAccountName = %q, want template-sa", pod.Spec.ServiceAccountName)
				}
			},
		},
	})
}

// TestBuildAllowedListsMatchUpstream keeps the safe sysctls and SELinux types
// Build accepts no wider than what the upstream checks allow.
func TestBuildAllowedListsMatchUpstream(t *testing.T) {
	for _, name := range sortedKeys(safeSysctls) {
		pod, err := Build(newRun(func(t *corev1.PodTemplateSpec) {
			t.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: name, Value: "1"}}}
		}), 1, testRunner, testGateway)
		if err != nil {
			t.Errorf("sysctl %s: %v", name, err)
			continue
		}
		if res := checkRestrictedPSA(t, pod); !res.Allowed {
			t.Errorf("sysctl %s: restricted PSS forbids it: %s", name, res.ForbiddenDetail())
		}
	}
	for _, typ := range allowedSELinuxTypes {
		pod, err := Build(newRun(func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: typ}}
		}), 1, testRunner, testGateway)
		if err != nil {
			t.Errorf("SELinux type %s: %v", typ, err)
			continue
		}
		if res := checkRestrictedPSA(t, pod); !res.Allowed {
			t.Errorf("SELinux type %s: restricted PSS forbids it: %s", typ, res.ForbiddenDetail())
		}
	}
}

func sortedKeys[T interface{ UnsortedList() []string }](s T) []string {
	keys := s.UnsortedList()
	slices.Sort(keys)
	return keys
}

func TestBuildForbidden(t *testing.T) {
	const pss = " (restricted Pod Security Standard)"
	c0 := "spec.template.spec.containers[0]"
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.PodTemplateSpec)
		want   string
		// notPSS: the error is not about the restricted standard, so the
		// upstream checks need not refuse the pod.
		notPSS bool
	}{
		{
			name: "privileged",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
			},
			want: "spec.template.spec.containers[0].securityContext.privileged: must not be true (restricted Pod Security Standard)",
		},
		{
			name:   "no containers",
			mutate: func(t *corev1.PodTemplateSpec) { t.Spec.Containers = nil },
			want:   "spec.template.spec.containers: at least one container is required",
			notPSS: true,
		},
		{
			name: "privilege escalation in an init container",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.InitContainers = []corev1.Container{{Name: setup, Image: helperImage,
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: new(true)}}}
			},
			want: "spec.template.spec.initContainers[0].securityContext.allowPrivilegeEscalation: must not be true" + pss,
		},
		{
			name: "added capability",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
					Add: []corev1.Capability{capNetBindService, "SYS_ADMIN"}}}
			},
			want: c0 + `.securityContext.capabilities.add[1]: must not add "SYS_ADMIN": only NET_BIND_SERVICE may be added` + pss,
		},
		{
			name: "pod runAsNonRoot false",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: new(false)}
			},
			want: "spec.template.spec.securityContext.runAsNonRoot: must not be false unless hostUsers is false" + pss,
		},
		{
			name: "container runs as root",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}
			},
			want: c0 + ".securityContext.runAsUser: must not be 0 unless hostUsers is false" + pss,
		},
		{
			name: "pod seccomp Unconfined",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
			},
			want: `spec.template.spec.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost, not "Unconfined"` + pss,
		},
		{
			name: "container seccomp Unconfined",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
			},
			want: c0 + `.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost, not "Unconfined"` + pss,
		},
		{
			name: "unmasked /proc, even in a user namespace",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.HostUsers = new(false)
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount)}
			},
			want: c0 + `.securityContext.procMount: must be Default or unset, not "Unmasked"` + pss,
		},
		{
			name: "SELinux type and user",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t", User: "system_u"}}
			},
			want: c0 + `.securityContext.seLinuxOptions.type: must be empty or one of container_t, container_init_t, container_kvm_t, container_engine_t, not "spc_t"` + pss +
				"; " + c0 + ".securityContext.seLinuxOptions.user: must be empty" + pss,
		},
		{
			name: "pod AppArmor Unconfined",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
			},
			want: `spec.template.spec.securityContext.appArmorProfile.type: must be RuntimeDefault or Localhost, not "Unconfined"` + pss,
		},
		{
			name: "AppArmor annotation unconfined",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Annotations = map[string]string{appArmorAgent: "unconfined"}
			},
			want: `spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/agent]: must be runtime/default or localhost/<profile>, not "unconfined"` + pss,
		},
		{
			name: "Windows host process",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: new(true)}}
			},
			want: c0 + ".securityContext.windowsOptions.hostProcess: must not be true" + pss,
		},
		{
			name: "host namespaces",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.HostNetwork, t.Spec.HostPID, t.Spec.HostIPC = true, true, true
			},
			want: "spec.template.spec.hostNetwork: must not be true" + pss +
				"; spec.template.spec.hostPID: must not be true" + pss +
				"; spec.template.spec.hostIPC: must not be true" + pss,
		},
		{
			name: "hostPath volume",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Volumes = []corev1.Volume{{Name: "docker", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/docker.sock"}}}}
			},
			want: "spec.template.spec.volumes[0].hostPath: volume type hostPath is not allowed; use configMap, csi, downwardAPI, emptyDir, " +
				"ephemeral, image, persistentVolumeClaim, projected or secret" + pss,
		},
		{
			name: "nfs volume",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Volumes = []corev1.Volume{
					{Name: "ok", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/x"}}},
				}
			},
			want: "spec.template.spec.volumes[1].nfs: volume type nfs is not allowed; use configMap, csi, downwardAPI, emptyDir, " +
				"ephemeral, image, persistentVolumeClaim, projected or secret" + pss,
		},
		{
			name: "host port",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 9090, HostPort: 9090}}
			},
			want: c0 + ".ports[1].hostPort: must be 0 or unset, not 9090" + pss,
		},
		{
			name: "probe on another host",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
			},
			want: c0 + `.livenessProbe.httpGet.host: must be empty, not "169.254.169.254"` + pss,
		},
		{
			name: "lifecycle hook on another host",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
					TCPSocket: &corev1.TCPSocketAction{Host: "10.0.0.1", Port: intstr.FromInt32(22)}}}
			},
			want: c0 + `.lifecycle.preStop.tcpSocket.host: must be empty, not "10.0.0.1"` + pss,
		},
		{
			name: "unsafe sysctl",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{
					{Name: "net.ipv4.tcp_syncookies", Value: "1"}, {Name: "kernel.msgmax", Value: "65536"}}}
			},
			want: `spec.template.spec.securityContext.sysctls[1].name: "kernel.msgmax" is not a safe sysctl` + pss,
		},
		{
			name: "ephemeral containers",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: helperImage}}}
			},
			want:   "spec.template.spec.ephemeralContainers: must be empty: ephemeral containers cannot be set when a pod is created",
			notPSS: true,
		},
		{
			name:   "Windows pod",
			mutate: func(t *corev1.PodTemplateSpec) { t.Spec.OS = &corev1.PodOS{Name: corev1.Windows} },
			want:   `spec.template.spec.os.name: must be "linux" or unset: attempt pods are hardened with Linux security settings`,
			notPSS: true,
		},
		{
			name: "every violation is reported, pod fields first",
			mutate: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
				t.Spec.HostNetwork = true
			},
			want: "spec.template.spec.hostNetwork: must not be true" + pss +
				"; spec.template.spec.containers[0].securityContext.privileged: must not be true" + pss,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun(tc.mutate)
			pod, err := Build(run, 1, testRunner, testGateway)
			if err == nil {
				t.Fatalf("Build succeeded, want error %q", tc.want)
			}
			if pod != nil {
				t.Errorf("Build returned a pod with its error")
			}
			if err.Error() != tc.want {
				t.Errorf("Build error:\n got %q\nwant %q", err.Error(), tc.want)
			}
			var te *TemplateError
			if !errors.As(err, &te) || len(te.Errors) == 0 {
				t.Errorf("Build error %T is not a *TemplateError with field errors", err)
			}
			if tc.notPSS {
				return
			}
			// Build's own checks must be no stricter than the standard: the
			// same pod, assembled without them, is refused upstream too.
			if res := checkRestrictedPSA(t, assemble(run, 1, testRunner, testGateway, run.Spec.Template.DeepCopy())); res.Allowed {
				t.Errorf("Build refuses a template the restricted PSS allows")
			}
		})
	}
}

// TestCheckRestrictedBackstop covers the last check: a pod the upstream checks
// refuse is an error even if the field checks missed it.
func TestCheckRestrictedBackstop(t *testing.T) {
	run := newRun(func(t *corev1.PodTemplateSpec) { t.Spec.HostNetwork = true })
	err := checkRestricted(assemble(run, 1, testRunner, testGateway, run.Spec.Template.DeepCopy()))
	want := "spec.template: host namespaces (hostNetwork=true) (restricted Pod Security Standard)"
	if err == nil || err.Error() != want {
		t.Errorf("checkRestricted = %v, want %q", err, want)
	}
}

func TestBuildInputs(t *testing.T) {
	noName := newRun(nil)
	noName.Name = ""
	noNamespace := newRun(nil)
	noNamespace.Namespace = ""
	for _, tc := range []struct {
		name    string
		run     *v1alpha1.ResearchRun
		attempt int32
		want    string
	}{
		{name: "nil run", run: nil, attempt: 1, want: "runpod: run is nil"},
		{name: "no name", run: noName, attempt: 1, want: "runpod: run has no name"},
		{name: "no namespace", run: noNamespace, attempt: 1, want: "runpod: run has no namespace"},
		{name: "attempt 0", run: newRun(nil), attempt: 0, want: "runpod: attempt must be at least 1, not 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.run, tc.attempt, testRunner, testGateway)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Build error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestBuildLeavesRunUntouchedAndIsDeterministic(t *testing.T) {
	run := newRun(func(t *corev1.PodTemplateSpec) {
		t.Labels = map[string]string{teamKey: team}
		t.Annotations = map[string]string{"a": "b"}
		t.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}
		t.Spec.InitContainers = []corev1.Container{{Name: setup, Image: helperImage,
			Env:             []corev1.EnvVar{{Name: "X", Value: "1"}},
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{netRaw}}}}}
	})
	before := run.DeepCopy()
	first, err := Build(run, 3, testRunner, testGateway)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if diff := cmp.Diff(before, run); diff != "" {
		t.Errorf("Build changed the run (-before +after):\n%s", diff)
	}
	second, err := Build(run, 3, testRunner, testGateway)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("Build is not deterministic (-first +second):\n%s", diff)
	}
	// The pod shares no memory with the run: changing it leaves the run alone.
	first.Labels[teamKey] = "x"
	first.Annotations["a"] = "x"
	first.Spec.InitContainers[0].SecurityContext.Capabilities.Drop[0] = "X"
	first.Spec.InitContainers[0].Env[0].Value = "x"
	if diff := cmp.Diff(before, run); diff != "" {
		t.Errorf("the pod aliases the run (-before +after):\n%s", diff)
	}
}

func TestBuildLongNames(t *testing.T) {
	runName := strings.Repeat("long-research-run.", 12) + "x" // 217 characters
	session := strings.Repeat("s", 200)
	run := newRun(nil)
	run.Name = runName
	run.Spec.SessionRef.Name = session
	pod, err := Build(run, 10, testRunner, testGateway)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if len(pod.Name) > 63 || pod.Name != Name(runName, 10) {
		t.Errorf("pod name %q (%d characters), want Name(run, 10) of at most 63", pod.Name, len(pod.Name))
	}
	if errs := validation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 {
		t.Errorf("pod name %q: %v", pod.Name, errs)
	}
	for k, v := range pod.Labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
	}
	if got := pod.Labels[v1alpha1.LabelRun]; got != LabelValue(runName) {
		t.Errorf("run label = %q, want LabelValue(run) %q", got, LabelValue(runName))
	}
	if got := pod.Labels[v1alpha1.LabelSession]; got != LabelValue(session) {
		t.Errorf("session label = %q, want LabelValue(session) %q", got, LabelValue(session))
	}
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[v1alpha1.EnvRun] != runName || env[v1alpha1.EnvRunAttempt] != pod.Name || env[v1alpha1.EnvAttempt] != "10" {
		t.Errorf("env run/runattempt/attempt = %q/%q/%q, want the full run name, the pod name and 10",
			env[v1alpha1.EnvRun], env[v1alpha1.EnvRunAttempt], env[v1alpha1.EnvAttempt])
	}
}
