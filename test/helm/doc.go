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

// Package helm tests the Helm chart charts/agentrun: that with its default
// values it renders the objects `kustomize build config/default` does (the
// Helm Go SDK against the kustomize API, no binaries), and that an install
// under another namespace and name prefix works on a real API server: its
// ValidatingAdmissionPolicies let the renamed operator and gateway service
// accounts, and nobody else, write what config/default lets
// agentrun-system's write.
package helm
