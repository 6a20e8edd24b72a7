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
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// everyReference is a template naming one of each kind of reference.
func everyReference() *corev1.PodTemplateSpec {
	sel := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ImagePullSecrets: []corev1.LocalObjectReference{sel("pull")},
		Volumes: []corev1.Volume{
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-secret"}}},
			{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: sel("vol-cm")}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "cache"}}},
			{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d.example.com",
				NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-secret"}}}},
			{Name: "e", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				Spec: corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "golden"}}}}}},
			{Name: "pr", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: sel("proj-secret")}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: sel("proj-cm")}},
				{DownwardAPI: &corev1.DownwardAPIProjection{}},
			}}}},
		},
		InitContainers: []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: sel("init-secret")}}}}},
		Containers: []corev1.Container{{Name: "a",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: sel("from-cm")}}},
			Env: []corev1.EnvVar{
				{Name: "PLAIN", Value: "x"},
				{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: sel("env-secret"), Key: "k"}}},
				{Name: "C", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: sel("env-cm"), Key: "k"}}},
			}}},
	}}
}

func TestReferencesNamesEveryField(t *testing.T) {
	var got []string
	for _, r := range References(everyReference()) {
		line := r.Path.String() + " " + string(r.Gate) + ":" + r.Name
		if r.Access != nil {
			line += " " + r.Access.Verb + "/" + r.Access.Resource + "/" + r.Access.Name
		}
		got = append(got, line)
	}
	want := []string{
		"spec.template.spec.imagePullSecrets[0].name :pull get/secrets/pull",
		"spec.template.spec.volumes[0].secret.secretName secrets:vol-secret get/secrets/vol-secret",
		"spec.template.spec.volumes[1].configMap.name :vol-cm get/configmaps/vol-cm",
		"spec.template.spec.volumes[2].persistentVolumeClaim.claimName persistentVolumeClaims:cache get/persistentvolumeclaims/cache",
		"spec.template.spec.volumes[3].csi.driver csiDrivers:d.example.com",
		"spec.template.spec.volumes[3].csi.nodePublishSecretRef.name secrets:csi-secret get/secrets/csi-secret",
		"spec.template.spec.volumes[4].ephemeral ephemeralVolumes: create/persistentvolumeclaims/",
		"spec.template.spec.volumes[4].ephemeral.volumeClaimTemplate.spec.dataSource.name persistentVolumeClaims:golden get/persistentvolumeclaims/golden",
		"spec.template.spec.volumes[5].projected.sources[0].secret.name secrets:proj-secret get/secrets/proj-secret",
		"spec.template.spec.volumes[5].projected.sources[1].configMap.name :proj-cm get/configmaps/proj-cm",
		"spec.template.spec.initContainers[0].envFrom[0].secretRef.name secrets:init-secret get/secrets/init-secret",
		"spec.template.spec.containers[0].envFrom[0].configMapRef.name :from-cm get/configmaps/from-cm",
		"spec.template.spec.containers[0].env[1].valueFrom.secretKeyRef.name secrets:env-secret get/secrets/env-secret",
		"spec.template.spec.containers[0].env[2].valueFrom.configMapKeyRef.name :env-cm get/configmaps/env-cm",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("References:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckSourcesRefusesWhatThePolicyDoesNotList(t *testing.T) {
	refs := References(everyReference())
	fields := func(s v1alpha1.TemplateSources) []string {
		var out []string
		for _, e := range CheckSources(refs, s, "p") {
			out = append(out, e.Field)
		}
		return out
	}
	if got := fields(v1alpha1.TemplateSources{}); len(got) != 9 {
		t.Fatalf("an empty templateSources refuses every Secret, claim, driver and ephemeral volume (9), got %d: %v", len(got), got)
	}
	all := v1alpha1.TemplateSources{Secrets: []string{"*"}, PersistentVolumeClaims: []string{"*"}, CSIDrivers: []string{"d.example.com"}, EphemeralVolumes: true}
	if got := fields(all); len(got) != 0 {
		t.Fatalf("everything listed: want no error, got %v", got)
	}
	some := all
	some.Secrets = []string{"vol-secret", "csi-secret", "proj-secret", "init-secret"}
	some.CSIDrivers = []string{"*"} // a driver is never a wildcard
	got := fields(some)
	want := []string{"spec.template.spec.volumes[3].csi.driver", "spec.template.spec.containers[0].env[1].valueFrom.secretKeyRef.name"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v, want %v", got, want)
	}
	e := CheckSources(refs, some, "p")[1]
	for _, part := range []string{`"env-secret"`, `RuntimePolicy "p"`, "spec.templateSources.secrets"} {
		if !strings.Contains(e.Detail, part) {
			t.Errorf("error %q does not mention %s", e.Detail, part)
		}
	}
}

// A projected service account token is a working API-server token (the
// default audience) or a token for any audience the template names; the
// review proved both. Build refuses them whatever the policy says.
func TestBuildRefusesAServiceAccountCredentialInTheTemplate(t *testing.T) {
	for name, src := range map[string]corev1.VolumeProjection{
		"serviceAccountToken": {ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		"podCertificate":      {PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/s", KeyType: "ED25519", CredentialBundlePath: "b"}},
	} {
		t.Run(name, func(t *testing.T) {
			run := &v1alpha1.ResearchRun{}
			run.Name, run.Namespace = "r", "ns"
			run.Spec.Template.Spec = corev1.PodSpec{
				Containers: []corev1.Container{{Name: "a", Image: "i"}},
				Volumes: []corev1.Volume{{Name: "kube", VolumeSource: corev1.VolumeSource{
					Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{src}}}}},
			}
			_, err := Build(run, 1, "runner", Gateway{URL: "https://gw"})
			var te *TemplateError
			if !errors.As(err, &te) || !strings.Contains(te.Error(), "spec.template.spec.volumes[0].projected.sources[0]."+name) {
				t.Fatalf("Build: %v; want a TemplateError naming the projected %s", err, name)
			}
		})
	}
}
