#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target in the module for a given time each.
#   hack/fuzz.sh [FUZZTIME]   (default 60s)
# Go runs one fuzz target per invocation, so the targets run one after another.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime="${1:-60s}"
status=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
		echo "== $pkg $target ($fuzztime)"
		go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" || status=1
	done
done < <(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -l '^func Fuzz' || true)
exit $status
