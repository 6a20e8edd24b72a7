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

// Package chaos is agentrun's chaos suite (make chaos; a short version runs
// in make test): a mixed workload of scripted research runs (workload.go) on
// the local stack (internal/devstack/stack: real etcd, kube-apiserver,
// operator, gateway, tool server and agent processes), played once without
// faults for the baseline and then under each scenario's faults (faults.go):
// the operator SIGKILLed every 2–5 s, two replicas with the leader killed,
// the gateway killed, API faults between the operator and kube-apiserver
// (stack.OperatorProxy), and kube-apiserver restarted with watches expiring.
// A watch-based checker (checker.go) records every invariant break as it
// happens; scenario.go measures each run's end against the baseline, and
// report.go writes docs/reliability.json and docs/reliability.md.
package chaos
