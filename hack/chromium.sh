#!/usr/bin/env bash
# chromium.sh prints the path of a Chromium binary, for the browser tests
# (internal/stream/web):
#
#   CHROMIUM=$(hack/chromium.sh) go test ./internal/stream/web/ -v -count=1
#
# Looks at, in order: $CHROMIUM, /usr/bin/chromium, then chromium,
# chromium-browser and google-chrome on PATH. If none is found it installs
# Debian's `chromium` package with apt-get (non-interactive, quiet; as root,
# else with sudo), waiting up to 10 minutes for an apt/dpkg run already in
# progress instead of failing on its lock.
#
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

find_chromium() {
	if [[ -n "${CHROMIUM:-}" ]]; then
		command -v -- "$CHROMIUM" && return 0
		echo "chromium.sh: CHROMIUM=$CHROMIUM is not an executable" >&2
		exit 1
	fi
	if [[ -x /usr/bin/chromium ]]; then
		echo /usr/bin/chromium
		return 0
	fi
	local name
	for name in chromium chromium-browser google-chrome; do
		command -v -- "$name" && return 0
	done
	return 1
}

if find_chromium; then
	exit 0
fi

if ! command -v apt-get >/dev/null; then
	echo "chromium.sh: no Chromium found and no apt-get to install one; install Chromium and set CHROMIUM to its path" >&2
	exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo -n)
fi
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=600)

echo "chromium.sh: installing Debian's chromium with apt-get ..." >&2
if ! "${apt[@]}" install -y --no-install-recommends chromium >&2; then
	# A fresh image may have no package lists yet.
	"${apt[@]}" update >&2
	"${apt[@]}" install -y --no-install-recommends chromium >&2
fi

if ! find_chromium; then
	echo "chromium.sh: apt-get installed chromium, but no Chromium binary is found" >&2
	exit 1
fi
