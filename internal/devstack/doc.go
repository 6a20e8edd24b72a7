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

// Package devstack is agentrun's embedded local stack, for make dev, the e2e
// suite and the benchmark — nothing the operator or the gateway imports:
//
//   - node: a Kubernetes node (virtual-kubelet) whose pods' containers run as
//     local processes, with pod-bound tokens, projected volumes and
//     kubectl logs;
//   - stack: etcd and kube-apiserver, the CRDs, RBAC and admission policies
//     from config/, the operator and agentrun-gateway as their own
//     processes under their own identities, the scripted upstream, and the
//     node.
package devstack
