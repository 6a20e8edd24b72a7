#!/usr/bin/env bash
# Installs the helm CLI into bin/ from its Go module (no download site is
# needed: the Go module proxy serves helm.sh/helm/v4), at the version the
# chart's render test uses through the Helm Go SDK (go.mod).
# Usage: hack/helm.sh            -> prints the path of bin/helm-<version>
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${HELM_VERSION:-v4.3.1}"
bin="$root/bin/helm-$version"
if [ ! -x "$bin" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  GOBIN="$tmp" go install "helm.sh/helm/v4/cmd/helm@$version" >&2
  mkdir -p "$root/bin"
  mv "$tmp/helm" "$bin"
fi
ln -sf "$(basename "$bin")" "$root/bin/helm"
echo "$bin"
