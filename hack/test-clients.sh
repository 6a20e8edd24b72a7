#!/usr/bin/env bash
# Copyright 2026. Licensed under the Apache License, Version 2.0.
#
# Tests the gateway's non-Go clients against the protocol conformance gateway
# (test/conformance): the Python SDK (sdk/python), the openai and anthropic
# (PyPI) examples and the openai-agents (PyPI) agent, the openai and
# @anthropic-ai/sdk (npm) examples, the @openai/agents (npm) agent (Responses
# door), the Messages door with the official anthropic (PyPI) package, and the
# tool door with the official MCP SDKs (test/mcpinterop; bin/venv-mcp). Idempotent;
# needs only Go, Node 20 and
# Python 3.11 with pip, and the package registries:
#   - bin/venv: a virtualenv with examples/openai-python/requirements.txt
#     (hash-pinned, pip install --require-hashes) and sdk/python (editable);
#   - examples/openai-ts, examples/openai-agents-ts and examples/harnesses (the
#     Claude Code and Codex CLIs, pinned) node_modules
#     from their committed lockfiles (npm ci; --prefer-offline, so a warm npm
#     cache needs no registry).
#
#   hack/test-clients.sh            set up, then run every client's tests
#   hack/test-clients.sh --setup    set up only (the e2e clients spec uses it)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PYTHON="${PYTHON:-python3}"
venv="$root/bin/venv"
reqs="$root/examples/openai-python/requirements.txt"
stamp="$venv/.agentrun-requirements.sha256"

log() { printf '== %s\n' "$*" >&2; }

setup_python() {
  local want
  want="$(cat "$reqs" sdk/python/pyproject.toml | sha256sum | cut -d' ' -f1)"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "python: $venv is up to date"
    return
  fi
  log "python: creating $venv with the hash-pinned requirements"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r "$reqs"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e sdk/python
  echo "$want" > "$stamp"
}

# The MCP interop clients (test/mcpinterop): mcp's pins get a venv of their
# own, so they never clash with the examples'.
mcp_venv="$root/bin/venv-mcp"
mcp_reqs="$root/test/mcpinterop/python/requirements.txt"

setup_mcp_python() {
  local want mark="$mcp_venv/.agentrun-requirements.sha256"
  want="$(sha256sum < "$mcp_reqs" | cut -d' ' -f1)"
  if [[ -x "$mcp_venv/bin/python" && -f "$mark" && "$(cat "$mark")" == "$want" ]]; then
    log "python: $mcp_venv is up to date"
    return
  fi
  log "python: creating $mcp_venv with the hash-pinned mcp requirements"
  rm -rf "$mcp_venv"
  "$PYTHON" -m venv "$mcp_venv"
  "$mcp_venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r "$mcp_reqs"
  echo "$want" > "$mark"
}

node_examples=(examples/openai-ts examples/openai-agents-ts)
node_packages=("${node_examples[@]}" examples/harnesses test/mcpinterop/ts)

setup_node() {
  local ex lock mark
  for ex in "${node_packages[@]}"; do
    lock="$ex/package-lock.json" mark="$ex/node_modules/.package-lock.json"
    if [[ -f "$mark" && "$mark" -nt "$lock" ]]; then
      log "node: $ex/node_modules is up to date"
      continue
    fi
    log "node: npm ci in $ex"
    (cd "$ex" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error)
  done
}

setup_server() {
  log "go: building the conformance server"
  go build -o bin/conformance-server ./test/conformance/server
}

setup_python
setup_mcp_python
setup_node
setup_server
[[ "${1:-}" == "--setup" ]] && exit 0

export AGENTRUN_CONFORMANCE_SERVER="$root/bin/conformance-server"
log "pytest: sdk/python"
"$venv/bin/python" -m pytest -q -p no:cacheprovider sdk/python
log "pytest: examples/openai-python"
"$venv/bin/python" -m pytest -q -p no:cacheprovider examples/openai-python/tests
log "go test: the tool door with the official MCP Python and TypeScript SDKs, at every revision it announces"
AGENTRUN_MCP_PYTHON="$mcp_venv/bin/python" AGENTRUN_MCP_NODE="$(command -v node)" \
  go test -count=1 -timeout 5m ./test/mcpinterop/
log "go test: the Messages door with the pinned anthropic Python package"
AGENTRUN_ANTHROPIC_PYTHON="$venv/bin/python" go test -count=1 -run '^TestMessagesDoorWithTheAnthropicPythonSDK$' ./internal/gateway/
for ex in "${node_examples[@]}"; do
  log "node --test: $ex"
  (cd "$ex" && npm test --silent)
done
