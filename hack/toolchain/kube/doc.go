// Package kube pins the Kubernetes control-plane binaries (kube-apiserver,
// kubectl, kube-controller-manager, kube-scheduler) that hack/envtest-toolchain.sh
// builds when setup-envtest cannot download them. The go.mod pins every k8s.io
// staging module to the release matching k8s.io/kubernetes with replace
// directives; the binaries are declared as tools so `go mod tidy` keeps them.
package kube
