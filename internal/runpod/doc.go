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

// Package runpod builds the pod of one RunAttempt; pure: no client, no clock,
// no I/O. The same run and attempt number always give the same pod.
//
// Build takes the run's spec.template and hardens it to the restricted Pod
// Security Standard field by field, only where the template leaves a field
// unset: a value the template sets and the standard allows is kept, a value
// the standard forbids makes Build fail with an error naming the template
// field. As a last check, the built pod is evaluated with the upstream
// pod-security-admission checks at restricted/latest, so Build never returns
// a pod that a restricted namespace would refuse.
//
// Build does not set owner references; the reconciler does.
package runpod
