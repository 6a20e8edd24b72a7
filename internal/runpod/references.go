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
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The operator builds attempt pods with its own rights, so whatever of the
// namespace a template names is read by the operator's pod on the
// requester's behalf: a confused deputy unless the requester may read it
// too. References lists every such thing; CheckSources says which of them
// the run's RuntimePolicy allows. The admission webhook then asks the API
// server whether the requester holds each Access.

// Gate is the RuntimePolicy list (spec.templateSources) that must allow a
// reference; GateNone needs no listing, only the requester's access.
type Gate string

const (
	GateNone                   Gate = ""
	GateSecrets                Gate = "secrets"
	GatePersistentVolumeClaims Gate = "persistentVolumeClaims"
	GateCSIDrivers             Gate = "csiDrivers"
	GateEphemeralVolumes       Gate = "ephemeralVolumes"
)

// Access is what the requester must be allowed to do in the run's namespace
// for a reference to be kept: verb on resource (core group), name empty for
// create.
type Access struct {
	Verb     string
	Resource string
	Name     string
}

// Reference is one thing of the namespace a template names.
type Reference struct {
	// Path is the template field that names it.
	Path *field.Path
	// Gate is the policy list that must allow Name.
	Gate Gate
	// Name is what the gate's list must hold (a Secret, claim or driver
	// name); empty for ephemeralVolumes.
	Name string
	// Access is the requester's access the webhook checks; nil when there is
	// nothing to ask the API server (a CSI driver).
	Access *Access
}

func get(resource, name string) *Access { return &Access{Verb: "get", Resource: resource, Name: name} }

// References returns every Secret, ConfigMap, PersistentVolumeClaim, CSI
// driver and ephemeral volume the template names, in field order.
func References(t *corev1.PodTemplateSpec) []Reference {
	sp := field.NewPath("spec", "template", "spec")
	spec := &t.Spec
	var refs []Reference
	for i, s := range spec.ImagePullSecrets {
		if s.Name != "" {
			refs = append(refs, Reference{Path: sp.Child("imagePullSecrets").Index(i).Child("name"), Gate: GateNone, Name: s.Name, Access: get("secrets", s.Name)})
		}
	}
	for i := range spec.Volumes {
		refs = append(refs, volumeReferences(&spec.Volumes[i].VolumeSource, sp.Child("volumes").Index(i))...)
	}
	for i := range spec.InitContainers {
		refs = append(refs, containerReferences(&spec.InitContainers[i], sp.Child("initContainers").Index(i))...)
	}
	for i := range spec.Containers {
		refs = append(refs, containerReferences(&spec.Containers[i], sp.Child("containers").Index(i))...)
	}
	return refs
}

func secret(p *field.Path, name string) Reference {
	return Reference{Path: p, Gate: GateSecrets, Name: name, Access: get("secrets", name)}
}

func configMap(p *field.Path, name string) Reference {
	return Reference{Path: p, Gate: GateNone, Name: name, Access: get("configmaps", name)}
}

func claim(p *field.Path, name string) Reference {
	return Reference{Path: p, Gate: GatePersistentVolumeClaims, Name: name, Access: get("persistentvolumeclaims", name)}
}

func volumeReferences(v *corev1.VolumeSource, p *field.Path) []Reference {
	var refs []Reference
	switch {
	case v.Secret != nil:
		refs = append(refs, secret(p.Child("secret", "secretName"), v.Secret.SecretName))
	case v.ConfigMap != nil:
		refs = append(refs, configMap(p.Child("configMap", "name"), v.ConfigMap.Name))
	case v.PersistentVolumeClaim != nil:
		refs = append(refs, claim(p.Child("persistentVolumeClaim", "claimName"), v.PersistentVolumeClaim.ClaimName))
	case v.CSI != nil:
		refs = append(refs, Reference{Path: p.Child("csi", "driver"), Gate: GateCSIDrivers, Name: v.CSI.Driver})
		if r := v.CSI.NodePublishSecretRef; r != nil {
			refs = append(refs, secret(p.Child("csi", "nodePublishSecretRef", "name"), r.Name))
		}
	case v.Ephemeral != nil:
		ep := p.Child("ephemeral")
		refs = append(refs, Reference{Path: ep, Gate: GateEphemeralVolumes,
			Access: &Access{Verb: "create", Resource: "persistentvolumeclaims"}})
		if tmpl := v.Ephemeral.VolumeClaimTemplate; tmpl != nil {
			cp := ep.Child("volumeClaimTemplate", "spec")
			if ds := tmpl.Spec.DataSource; ds != nil {
				refs = append(refs, dataSource(cp.Child("dataSource"), ds.APIGroup, ds.Kind, ds.Name))
			}
			if ds := tmpl.Spec.DataSourceRef; ds != nil && (ds.Namespace == nil || *ds.Namespace == "") {
				refs = append(refs, dataSource(cp.Child("dataSourceRef"), ds.APIGroup, ds.Kind, ds.Name))
			}
		}
	case v.Projected != nil:
		for j, src := range v.Projected.Sources {
			sp := p.Child("projected", "sources").Index(j)
			if src.Secret != nil {
				refs = append(refs, secret(sp.Child("secret", "name"), src.Secret.Name))
			}
			if src.ConfigMap != nil {
				refs = append(refs, configMap(sp.Child("configMap", "name"), src.ConfigMap.Name))
			}
		}
	}
	return refs
}

// dataSource is an ephemeral claim's source: another claim is a claim
// reference; anything else (a snapshot, a populator's object) is gated as a
// claim of that name with no access the webhook can ask about, so only a
// policy that lists it (or "*") admits it.
func dataSource(p *field.Path, group *string, kind, name string) Reference {
	if (group == nil || *group == "") && kind == "PersistentVolumeClaim" {
		return claim(p.Child("name"), name)
	}
	return Reference{Path: p.Child("name"), Gate: GatePersistentVolumeClaims, Name: name}
}

func containerReferences(c *corev1.Container, p *field.Path) []Reference {
	var refs []Reference
	for i, e := range c.EnvFrom {
		ep := p.Child("envFrom").Index(i)
		if e.SecretRef != nil {
			refs = append(refs, secret(ep.Child("secretRef", "name"), e.SecretRef.Name))
		}
		if e.ConfigMapRef != nil {
			refs = append(refs, configMap(ep.Child("configMapRef", "name"), e.ConfigMapRef.Name))
		}
	}
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		vp := p.Child("env").Index(i).Child("valueFrom")
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			refs = append(refs, secret(vp.Child("secretKeyRef", "name"), r.Name))
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			refs = append(refs, configMap(vp.Child("configMapKeyRef", "name"), r.Name))
		}
	}
	return refs
}

// CheckSources returns an error for each reference the policy's
// templateSources do not allow, naming the field and the list to extend.
func CheckSources(refs []Reference, allowed v1alpha1.TemplateSources, policy string) field.ErrorList {
	var errs field.ErrorList
	listed := func(list []string, name string) bool {
		return slices.Contains(list, "*") || slices.Contains(list, name)
	}
	for _, r := range refs {
		var ok bool
		switch r.Gate {
		case GateNone:
			ok = true
		case GateSecrets:
			ok = listed(allowed.Secrets, r.Name)
		case GatePersistentVolumeClaims:
			ok = listed(allowed.PersistentVolumeClaims, r.Name)
		case GateCSIDrivers:
			ok = slices.Contains(allowed.CSIDrivers, r.Name)
		case GateEphemeralVolumes:
			ok = allowed.EphemeralVolumes
		}
		if ok {
			continue
		}
		if r.Gate == GateEphemeralVolumes {
			errs = append(errs, field.Forbidden(r.Path, fmt.Sprintf(
				"generic ephemeral volumes are not allowed: RuntimePolicy %q spec.templateSources.ephemeralVolumes is not true", policy)))
			continue
		}
		errs = append(errs, field.Forbidden(r.Path, fmt.Sprintf(
			"%q is not allowed: RuntimePolicy %q spec.templateSources.%s does not list it (the operator builds the pod with its own rights, so a template names only what the policy allows)",
			r.Name, policy, r.Gate)))
	}
	return errs
}

// Denied is the error for a reference whose access the requester lacks.
func Denied(r Reference, user string) *field.Error {
	a := r.Access
	what := fmt.Sprintf("%s %s %q", a.Verb, a.Resource, a.Name)
	if a.Name == "" {
		what = a.Verb + " " + a.Resource
	}
	return field.Forbidden(r.Path, fmt.Sprintf(
		"%s may not %s in this namespace, so the run may not either (the operator never grants more than its requester holds)", user, what))
}
