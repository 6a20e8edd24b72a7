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
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// restricted is appended to every message about a value the restricted Pod
// Security Standard forbids.
const restricted = " (restricted Pod Security Standard)"

// capNetBindService is the only capability the restricted standard lets a
// container add; capAll is what it must drop.
const (
	capNetBindService corev1.Capability = "NET_BIND_SERVICE"
	capAll            corev1.Capability = "ALL"
)

var (
	// allowedSELinuxTypes are the SELinux types the standard allows
	// (pod-security-admission seLinuxOptions, v1.31+).
	allowedSELinuxTypes = []string{"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

	// safeSysctls are the sysctls the standard allows
	// (pod-security-admission sysctls, v1.37).
	safeSysctls = sets.New(
		"kernel.shm_rmid_forced",
		"net.ipv4.ip_local_port_range",
		"net.ipv4.ip_unprivileged_port_start",
		"net.ipv4.tcp_syncookies",
		"net.ipv4.ping_group_range",
		"net.ipv4.ip_local_reserved_ports",
		"net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_fin_timeout",
		"net.ipv4.tcp_keepalive_intvl",
		"net.ipv4.tcp_keepalive_probes",
		"net.ipv4.tcp_rmem",
		"net.ipv4.tcp_wmem",
		"net.ipv4.tcp_slow_start_after_idle",
		"net.ipv4.tcp_notsent_lowat",
	)
)

// TemplateError says why a run's pod template cannot become an attempt pod.
// Each error names the template field (spec.template...), so a webhook can
// return Errors as they are (apierrors.NewInvalid).
type TemplateError struct {
	Errors field.ErrorList
}

// Error lists "<field>: <detail>" for each error, separated by "; ".
func (e *TemplateError) Error() string {
	msgs := make([]string, 0, len(e.Errors))
	for _, fe := range e.Errors {
		msgs = append(msgs, fe.Field+": "+fe.Detail)
	}
	return strings.Join(msgs, "; ")
}

// forbid returns the error for a template value the restricted standard forbids.
func forbid(p *field.Path, format string, args ...any) *field.Error {
	return field.Forbidden(p, fmt.Sprintf(format, args...)+restricted)
}

// validateTemplate returns what in the template cannot be kept: the values the
// restricted standard forbids, and what no attempt pod can have.
func validateTemplate(t *corev1.PodTemplateSpec) field.ErrorList {
	root := field.NewPath("spec", "template")
	sp := root.Child("spec")
	spec := &t.Spec
	var errs field.ErrorList

	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(sp.Child("containers"), "at least one container is required"))
	}
	if len(spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(sp.Child("ephemeralContainers"),
			"must be empty: ephemeral containers cannot be set when a pod is created"))
	}
	if spec.OS != nil && spec.OS.Name != "" && spec.OS.Name != corev1.Linux {
		errs = append(errs, field.NotSupported(sp.Child("os", "name"), spec.OS.Name, []corev1.OSName{corev1.Linux}))
		errs[len(errs)-1].Detail = `must be "linux" or unset: attempt pods are hardened with Linux security settings`
	}

	// In a user namespace (hostUsers: false) the standard lets a pod run as
	// UID 0 inside the namespace.
	userNS := spec.HostUsers != nil && !*spec.HostUsers

	errs = append(errs, validateAnnotations(t.Annotations, root.Child("metadata", "annotations"))...)
	errs = append(errs, validatePod(spec, sp, userNS)...)
	for i := range spec.InitContainers {
		errs = append(errs, validateContainer(&spec.InitContainers[i], sp.Child("initContainers").Index(i), userNS)...)
	}
	for i := range spec.Containers {
		errs = append(errs, validateContainer(&spec.Containers[i], sp.Child("containers").Index(i), userNS)...)
	}
	return errs
}

// validateAnnotations forbids the deprecated AppArmor annotations that
// unconfine a container.
func validateAnnotations(annotations map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		v := annotations[k]
		if !strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) {
			continue
		}
		if v == "" || v == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault ||
			strings.HasPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix) {
			continue
		}
		errs = append(errs, forbid(p.Key(k), "must be %s or %s<profile>, not %q",
			corev1.DeprecatedAppArmorBetaProfileRuntimeDefault, corev1.DeprecatedAppArmorBetaProfileNamePrefix, v))
	}
	return errs
}

// validatePod checks the pod-level fields of the template.
func validatePod(spec *corev1.PodSpec, p *field.Path, userNS bool) field.ErrorList {
	var errs field.ErrorList
	if spec.HostNetwork {
		errs = append(errs, forbid(p.Child("hostNetwork"), "must not be true"))
	}
	if spec.HostPID {
		errs = append(errs, forbid(p.Child("hostPID"), "must not be true"))
	}
	if spec.HostIPC {
		errs = append(errs, forbid(p.Child("hostIPC"), "must not be true"))
	}
	for i := range spec.Volumes {
		if kind, ok := volumeKind(&spec.Volumes[i].VolumeSource); !ok {
			vp := p.Child("volumes").Index(i)
			if kind != "" {
				vp = vp.Child(kind)
			}
			errs = append(errs, forbid(vp, "volume type %s is not allowed; use configMap, csi, downwardAPI, emptyDir, "+
				"ephemeral, image, persistentVolumeClaim, projected or secret", orUnknown(kind)))
		}
		errs = append(errs, validateProjection(spec.Volumes[i].Projected, p.Child("volumes").Index(i).Child("projected"))...)
	}

	sc := spec.SecurityContext
	if sc == nil {
		return errs
	}
	sp := p.Child("securityContext")
	errs = append(errs, validateIdentity(sc.RunAsNonRoot, sc.RunAsUser, sp, userNS)...)
	errs = append(errs, validateSeccomp(sc.SeccompProfile, sp)...)
	errs = append(errs, validateSELinux(sc.SELinuxOptions, sp)...)
	errs = append(errs, validateAppArmor(sc.AppArmorProfile, sp)...)
	errs = append(errs, validateHostProcess(sc.WindowsOptions, sp)...)
	for i, s := range sc.Sysctls {
		if !safeSysctls.Has(s.Name) {
			errs = append(errs, forbid(sp.Child("sysctls").Index(i).Child("name"), "%q is not a safe sysctl", s.Name))
		}
	}
	return errs
}

// validateProjection forbids the projected sources that are credentials of
// the pod's service account: a serviceAccountToken of any audience (the
// default one is a working API-server token) and a podCertificate. Attempt
// pods hold no API credential; Build projects the gateway token itself.
func validateProjection(v *corev1.ProjectedVolumeSource, p *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	var errs field.ErrorList
	for j, src := range v.Sources {
		sp := p.Child("sources").Index(j)
		if src.ServiceAccountToken != nil {
			errs = append(errs, field.Forbidden(sp.Child("serviceAccountToken"),
				"attempt pods hold no service account token: the operator projects the only one, of audience "+
					gatewayapi.Audience+", into "+GatewayMountPath))
		}
		if src.PodCertificate != nil {
			errs = append(errs, field.Forbidden(sp.Child("podCertificate"),
				"attempt pods hold no credential of their service account; a pod certificate is one"))
		}
	}
	return errs
}

// validateContainer checks one container or init container of the template.
func validateContainer(c *corev1.Container, p *field.Path, userNS bool) field.ErrorList {
	var errs field.ErrorList
	for i, port := range c.Ports {
		if port.HostPort != 0 {
			errs = append(errs, forbid(p.Child("ports").Index(i).Child("hostPort"), "must be 0 or unset, not %d", port.HostPort))
		}
	}
	errs = append(errs, validateProbeHost(c.LivenessProbe, p.Child("livenessProbe"))...)
	errs = append(errs, validateProbeHost(c.ReadinessProbe, p.Child("readinessProbe"))...)
	errs = append(errs, validateProbeHost(c.StartupProbe, p.Child("startupProbe"))...)
	if c.Lifecycle != nil {
		errs = append(errs, validateHandlerHost(c.Lifecycle.PostStart, p.Child("lifecycle", "postStart"))...)
		errs = append(errs, validateHandlerHost(c.Lifecycle.PreStop, p.Child("lifecycle", "preStop"))...)
	}

	sc := c.SecurityContext
	if sc == nil {
		return errs
	}
	sp := p.Child("securityContext")
	if sc.Privileged != nil && *sc.Privileged {
		errs = append(errs, forbid(sp.Child("privileged"), "must not be true"))
	}
	if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
		errs = append(errs, forbid(sp.Child("allowPrivilegeEscalation"), "must not be true"))
	}
	if sc.Capabilities != nil {
		for i, capability := range sc.Capabilities.Add {
			if capability != capNetBindService {
				errs = append(errs, forbid(sp.Child("capabilities", "add").Index(i),
					"must not add %q: only %s may be added", capability, capNetBindService))
			}
		}
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		errs = append(errs, forbid(sp.Child("procMount"), "must be %s or unset, not %q", corev1.DefaultProcMount, *sc.ProcMount))
	}
	errs = append(errs, validateIdentity(sc.RunAsNonRoot, sc.RunAsUser, sp, userNS)...)
	errs = append(errs, validateSeccomp(sc.SeccompProfile, sp)...)
	errs = append(errs, validateSELinux(sc.SELinuxOptions, sp)...)
	errs = append(errs, validateAppArmor(sc.AppArmorProfile, sp)...)
	errs = append(errs, validateHostProcess(sc.WindowsOptions, sp)...)
	return errs
}

// validateIdentity forbids running as root, unless the pod is in a user namespace.
func validateIdentity(runAsNonRoot *bool, runAsUser *int64, p *field.Path, userNS bool) field.ErrorList {
	if userNS {
		return nil
	}
	var errs field.ErrorList
	if runAsNonRoot != nil && !*runAsNonRoot {
		errs = append(errs, forbid(p.Child("runAsNonRoot"), "must not be false unless hostUsers is false"))
	}
	if runAsUser != nil && *runAsUser == 0 {
		errs = append(errs, forbid(p.Child("runAsUser"), "must not be 0 unless hostUsers is false"))
	}
	return errs
}

func validateSeccomp(profile *corev1.SeccompProfile, p *field.Path) field.ErrorList {
	if profile == nil {
		return nil
	}
	switch profile.Type {
	case corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeLocalhost:
		return nil
	}
	return field.ErrorList{forbid(p.Child("seccompProfile", "type"), "must be %s or %s, not %q",
		corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeLocalhost, profile.Type)}
}

func validateAppArmor(profile *corev1.AppArmorProfile, p *field.Path) field.ErrorList {
	if profile == nil {
		return nil
	}
	switch profile.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeLocalhost:
		return nil
	}
	return field.ErrorList{forbid(p.Child("appArmorProfile", "type"), "must be %s or %s, not %q",
		corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeLocalhost, profile.Type)}
}

func validateSELinux(opts *corev1.SELinuxOptions, p *field.Path) field.ErrorList {
	if opts == nil {
		return nil
	}
	var errs field.ErrorList
	op := p.Child("seLinuxOptions")
	if opts.Type != "" && !slices.Contains(allowedSELinuxTypes, opts.Type) {
		errs = append(errs, forbid(op.Child("type"), "must be empty or one of %s, not %q",
			strings.Join(allowedSELinuxTypes, ", "), opts.Type))
	}
	if opts.User != "" {
		errs = append(errs, forbid(op.Child("user"), "must be empty"))
	}
	if opts.Role != "" {
		errs = append(errs, forbid(op.Child("role"), "must be empty"))
	}
	return errs
}

func validateHostProcess(opts *corev1.WindowsSecurityContextOptions, p *field.Path) field.ErrorList {
	if opts == nil || opts.HostProcess == nil || !*opts.HostProcess {
		return nil
	}
	return field.ErrorList{forbid(p.Child("windowsOptions", "hostProcess"), "must not be true")}
}

func validateProbeHost(probe *corev1.Probe, p *field.Path) field.ErrorList {
	if probe == nil {
		return nil
	}
	return validateHosts(probe.HTTPGet, probe.TCPSocket, p)
}

func validateHandlerHost(handler *corev1.LifecycleHandler, p *field.Path) field.ErrorList {
	if handler == nil {
		return nil
	}
	return validateHosts(handler.HTTPGet, handler.TCPSocket, p)
}

// validateHosts forbids probes and lifecycle handlers that reach another host.
func validateHosts(httpGet *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if httpGet != nil && httpGet.Host != "" {
		errs = append(errs, forbid(p.Child("httpGet", "host"), "must be empty, not %q", httpGet.Host))
	}
	if tcp != nil && tcp.Host != "" {
		errs = append(errs, forbid(p.Child("tcpSocket", "host"), "must be empty, not %q", tcp.Host))
	}
	return errs
}

// volumeKind returns the JSON name of the volume's source and whether the
// restricted standard allows it. A volume with no source is allowed: the API
// server defaults it to emptyDir (and Build does too).
func volumeKind(v *corev1.VolumeSource) (string, bool) {
	switch {
	case *v == corev1.VolumeSource{}:
		return "emptyDir", true
	case v.ConfigMap != nil, v.CSI != nil, v.DownwardAPI != nil, v.EmptyDir != nil, v.Ephemeral != nil,
		v.Image != nil, v.PersistentVolumeClaim != nil, v.Projected != nil, v.Secret != nil:
		return "", true
	case v.HostPath != nil:
		return "hostPath", false
	case v.GCEPersistentDisk != nil:
		return "gcePersistentDisk", false
	case v.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore", false
	case v.GitRepo != nil:
		return "gitRepo", false
	case v.NFS != nil:
		return "nfs", false
	case v.ISCSI != nil:
		return "iscsi", false
	case v.Glusterfs != nil:
		return "glusterfs", false
	case v.RBD != nil:
		return "rbd", false
	case v.FlexVolume != nil:
		return "flexVolume", false
	case v.Cinder != nil:
		return "cinder", false
	case v.CephFS != nil:
		return "cephfs", false
	case v.Flocker != nil:
		return "flocker", false
	case v.FC != nil:
		return "fc", false
	case v.AzureFile != nil:
		return "azureFile", false
	case v.VsphereVolume != nil:
		return "vsphereVolume", false
	case v.Quobyte != nil:
		return "quobyte", false
	case v.AzureDisk != nil:
		return "azureDisk", false
	case v.PhotonPersistentDisk != nil:
		return "photonPersistentDisk", false
	case v.PortworxVolume != nil:
		return "portworxVolume", false
	case v.ScaleIO != nil:
		return "scaleIO", false
	case v.StorageOS != nil:
		return "storageos", false
	default:
		return "", false
	}
}

func orUnknown(kind string) string {
	if kind == "" {
		return "(unknown)"
	}
	return kind
}
