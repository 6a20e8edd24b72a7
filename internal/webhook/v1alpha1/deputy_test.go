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

package v1alpha1

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/test/utils"
)

// runEditor binds user, in ns, to exactly the rules of config/rbac's
// researchrun-editor role: it may create runs, and read no Secret,
// ConfigMap or claim and create no pod.
func runEditor(ns, user string) {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join(utils.ProjectRoot(), "config", "rbac", "researchrun_editor_role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	cr := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(data, cr)).To(Succeed())
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "run-editor"}, Rules: cr.Rules}
	Expect(admin.Create(ctx, role)).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "run-editor"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "run-editor"},
	})).To(Succeed())
}

// allowSources sets the policy's templateSources.
func allowSources(ns string, sources v1alpha1.TemplateSources) {
	GinkgoHelper()
	// The operator writes the policy's status meanwhile: read, change and
	// update again on a conflict.
	Eventually(func(g Gomega) {
		p := &v1alpha1.RuntimePolicy{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p)).To(Succeed())
		p.Spec.TemplateSources = sources
		g.Expect(admin.Update(ctx, p)).To(Succeed())
	}, timeout, interval).Should(Succeed())
	// The webhook reads the policy from the manager's cache.
	Eventually(func(g Gomega) {
		got := &v1alpha1.RuntimePolicy{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, got)).To(Succeed())
		g.Expect(got.Spec.TemplateSources).To(Equal(sources))
	}, timeout, interval).Should(Succeed())
}

func withSecretVolume(run *v1alpha1.ResearchRun, secret string) *v1alpha1.ResearchRun {
	run.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "key", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret}}}}
	run.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "key", MountPath: "/key"}}
	return run
}

// The operator builds attempt pods with its own rights: a template that
// names a Secret would have the operator read it for a requester who may
// not (security review 25, item 2).
var _ = Describe("The pod template is no confused deputy", func() {
	const eve = "eve@example.com"

	It("refuses a Secret the policy does not list, then one the requester may not read, and admits it for one who may", func() {
		ns := setup()
		runEditor(ns, eve)
		Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "provider-key"},
			StringData: map[string]string{"key": "sk-live"}})).To(Succeed())

		By("the policy lists no Secret: refused for everyone, naming the field and the list")
		rejected(as(eve).Create(ctx, withSecretVolume(newRun(ns, "r1"), "provider-key")),
			"spec.template.spec.volumes[0].secret.secretName", `"provider-key"`, "spec.templateSources.secrets")
		rejected(admin.Create(ctx, withSecretVolume(newRun(ns, "r1"), "provider-key")),
			"spec.templateSources.secrets")

		By("listed, but eve may not get it: refused, naming eve and the access")
		allowSources(ns, v1alpha1.TemplateSources{Secrets: []string{"provider-key"}})
		rejected(as(eve).Create(ctx, withSecretVolume(newRun(ns, "r1"), "provider-key")),
			"spec.template.spec.volumes[0].secret.secretName", eve, `get secrets "provider-key"`)

		By("the same through env and envFrom")
		env := newRun(ns, "r2")
		env.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KEY", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "provider-key"}, Key: "key"}}}}
		env.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "provider-key"}}}}
		rejected(as(eve).Create(ctx, env),
			"spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name",
			"spec.template.spec.containers[0].envFrom[0].secretRef.name")

		By("a ConfigMap needs no listing, but eve must be able to read it")
		cm := newRun(ns, "r3")
		cm.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
		rejected(as(eve).Create(ctx, cm), "spec.template.spec.containers[0].envFrom[0].configMapRef.name", `get configmaps "settings"`)

		By("an admin who may read the Secret gets the run admitted")
		Expect(admin.Create(ctx, withSecretVolume(newRun(ns, "r1"), "provider-key"))).To(Succeed())
		Expect(as(eve).Create(ctx, newRun(ns, "plain"))).To(Succeed(), "a template that names nothing is eve's to run")
	})

	It("refuses claims, CSI and ephemeral volumes unless the policy allows them", func() {
		ns := setup()
		run := newRun(ns, "r")
		run.Spec.Template.Spec.Volumes = []corev1.Volume{
			{Name: "cache", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "cache"}}},
			{Name: "vault", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}},
		}
		rejected(admin.Create(ctx, run.DeepCopy()),
			"spec.template.spec.volumes[0].persistentVolumeClaim.claimName", "spec.templateSources.persistentVolumeClaims",
			"spec.template.spec.volumes[1].csi.driver", "spec.templateSources.csiDrivers",
			"spec.template.spec.volumes[2].ephemeral", "spec.templateSources.ephemeralVolumes")
		allowSources(ns, v1alpha1.TemplateSources{PersistentVolumeClaims: []string{"*"}, CSIDrivers: []string{"secrets-store.csi.k8s.io"}, EphemeralVolumes: true})
		Expect(admin.Create(ctx, run.DeepCopy())).To(Succeed())
	})

	It("never lets a template project a service account token, whatever the policy allows", func() {
		ns := setup()
		allowSources(ns, v1alpha1.TemplateSources{Secrets: []string{"*"}, PersistentVolumeClaims: []string{"*"}, EphemeralVolumes: true})
		run := newRun(ns, "r")
		run.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "kube", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		rejected(admin.Create(ctx, run), "spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken", "no service account token")
	})
})
