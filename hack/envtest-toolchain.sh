#!/usr/bin/env bash
# envtest-toolchain.sh makes kube-apiserver, etcd and kubectl available for
# envtest and prints the directory that holds them (for KUBEBUILDER_ASSETS).
#
#   hack/envtest-toolchain.sh [K8S_VERSION]      e.g. 1.37.2 (default: from go.mod's k8s.io/api)
#
# Order of attempts, first success wins:
#   1. binaries already in setup-envtest's store  (setup-envtest use -i)
#   2. setup-envtest download                       (needs the internet)
#   3. build them from their Go modules             (needs only the Go module proxy)
#      kube-apiserver, kubectl, kube-controller-manager: hack/toolchain/kube (k8s.io/kubernetes)
#      with WITH_NODE=1 also kubelet, kube-scheduler, kube-proxy (hack/realnode's node, same module)
#      and coredns (the real node's cluster DNS):     hack/toolchain/coredns (github.com/coredns/coredns)
#      etcd:                                         hack/toolchain/etcd (go.etcd.io/etcd/server/v3)
#      versioned with -ldflags so `kube-apiserver --version` tells the truth, and written into
#      setup-envtest's own store (~/.local/share/kubebuilder-envtest/k8s/<version>-<os>-<arch>),
#      so `setup-envtest use -i <version>` and every clone on this machine find them.
#
# Progress goes to stderr; stdout carries only the path. Idempotent: a second run
# finds the store entry and returns at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[envtest-toolchain] %s\n' "$*" >&2; }

GOOS="$(go env GOOS)"
GOARCH="$(go env GOARCH)"
API_VERSION="$(go list -m -f '{{.Version}}' k8s.io/api)" # v0.37.2
K8S_VERSION="${1:-${ENVTEST_K8S_VERSION:-1.${API_VERSION#v0.}}}"
K8S_VERSION="${K8S_VERSION#v}"
# setup-envtest's store: $XDG_DATA_HOME/kubebuilder-envtest, else ~/.local/share/kubebuilder-envtest.
STORE="${ENVTEST_STORE:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}"
DEST="$STORE/k8s/${K8S_VERSION}-${GOOS}-${GOARCH}"
LOCALBIN="$ROOT/bin"
SETUP_ENVTEST="${SETUP_ENVTEST:-$LOCALBIN/setup-envtest}"

have_all() {
	[[ -x "$1/kube-apiserver" && -x "$1/etcd" && -x "$1/kubectl" ]] || return 1
	# The benchmark also needs the Job controller's binary.
	[[ "${WITH_CONTROLLER_MANAGER:-0}" != 1 || -x "$1/kube-controller-manager" ]] || return 1
	# hack/realnode also runs a node: the kubelet, the scheduler and kube-proxy.
	[[ "${WITH_NODE:-0}" != 1 || ( -x "$1/kubelet" && -x "$1/kube-scheduler" && -x "$1/kube-proxy" && -x "$1/coredns" ) ]]
}

# 1. Already in the store (from an earlier download or build).
if have_all "$DEST"; then
	echo "$DEST"
	exit 0
fi

# 2. setup-envtest, the usual path where the internet is reachable.
if [[ -x "$SETUP_ENVTEST" ]]; then
	log "trying setup-envtest for Kubernetes $K8S_VERSION"
	if path="$(timeout 60 "$SETUP_ENVTEST" use "$K8S_VERSION" -p path 2>/dev/null)" && have_all "$path"; then
		echo "$path"
		exit 0
	fi
	log "setup-envtest could not download $K8S_VERSION; building from Go modules instead"
fi

# 3. Build from the Go module proxy.
KUBE_MOD="$(cd hack/toolchain/kube && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
if [[ "v$K8S_VERSION" != "$KUBE_MOD" ]]; then
	log "hack/toolchain/kube pins k8s.io/kubernetes $KUBE_MOD but $K8S_VERSION was asked for;"
	log "update hack/toolchain/kube/go.mod (require and the v0.X.Y replaces) to match go.mod's k8s.io/api"
	exit 1
fi
MAJOR="${K8S_VERSION%%.*}"
MINOR="${K8S_VERSION#*.}"
MINOR="${MINOR%%.*}"
VERSION_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	VERSION_LDFLAGS+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=$MAJOR -X $pkg.gitMinor=$MINOR"
	VERSION_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

mkdir -p "$STORE"
TMP="$(mktemp -d "$STORE/.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

build_kube() {
	local cmd="$1"
	log "building $cmd v$K8S_VERSION from k8s.io/kubernetes (the first build takes several minutes)"
	local start=$SECONDS
	(cd hack/toolchain/kube && CGO_ENABLED=0 go build -trimpath -ldflags "$VERSION_LDFLAGS" \
		-o "$TMP/$cmd" "k8s.io/kubernetes/cmd/$cmd")
	log "built $cmd in $((SECONDS - start))s"
}

# Build only what the store entry lacks (a second run is a no-op).
for cmd in kube-apiserver kubectl; do
	[[ -x "$DEST/$cmd" ]] || build_kube "$cmd"
done
if [[ "${WITH_CONTROLLER_MANAGER:-0}" == 1 && ! -x "$DEST/kube-controller-manager" ]]; then
	build_kube kube-controller-manager
fi
if [[ "${WITH_NODE:-0}" == 1 ]]; then
	for cmd in kube-controller-manager kube-scheduler kubelet kube-proxy; do
		[[ -x "$DEST/$cmd" ]] || build_kube "$cmd"
	done
	if [[ ! -x "$DEST/coredns" ]]; then
		log "building coredns from github.com/coredns/coredns (hack/toolchain/coredns: its plugins only)"
		start=$SECONDS
		(cd hack/toolchain/coredns && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$TMP/coredns" .)
		log "built coredns in $((SECONDS - start))s"
	fi
fi

if [[ ! -x "$DEST/etcd" ]]; then
	ETCD_MOD="$(cd hack/toolchain/etcd && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
	log "building etcd $ETCD_MOD from go.etcd.io/etcd/server/v3"
	start=$SECONDS
	(cd hack/toolchain/etcd && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$TMP/etcd" .)
	log "built etcd in $((SECONDS - start))s"
fi

[[ ! -x "$TMP/kube-apiserver" ]] || "$TMP/kube-apiserver" --version >&2

mkdir -p "$DEST"
for bin in "$TMP"/*; do
	[[ -e "$bin" ]] || continue
	mv -f "$bin" "$DEST/"
done
log "installed into setup-envtest's store: $DEST"
echo "$DEST"
