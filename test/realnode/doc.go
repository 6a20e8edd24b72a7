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

// Package realnode holds the stories that run on a real node (hack/realnode): kubelet, containerd
// and runc, kube-proxy and CoreDNS, with agentrun installed by `helm install` of charts/agentrun
// from the project's own images. Run with `make test-node` (root; see docs/realnode.md).
//
// With REALNODE_REUSE=1 the suite uses a node that is up and installed already and leaves it up;
// otherwise it brings one up (up, images, install) and tears it down at the end.
package realnode
