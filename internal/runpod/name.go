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

package runpod

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// maxNameLength keeps attempt names usable as pod names whose hostname
	// (the pod name, cut at 63 by the kubelet) stays the whole name.
	maxNameLength = validation.DNS1123LabelMaxLength
	// hashLength is the number of hex digits of the stable hash that replaces
	// the cut-off part of a long name.
	hashLength = 8
)

// Name returns the deterministic name of attempt n's RunAttempt and pod:
// "<run>-<n>". When that would exceed 63 characters, the run part is cut and
// followed by a short stable hash of the whole run name, so the name stays a
// valid object name of at most 63 characters, deterministic, and distinct for
// runs that share a long prefix: "<run prefix>-<hash>-<n>".
//
// run is expected to be a valid object name (a DNS-1123 subdomain), as every
// ResearchRun's name is; its dots are kept, so the result is a DNS-1123
// subdomain (what pod names are), and a DNS-1123 label when run has no dots.
// The hash, like the rest of the name, must never change: an upgraded
// operator must find the attempts an older one created.
func Name(run string, attempt int32) string {
	suffix := "-" + strconv.FormatInt(int64(attempt), 10)
	return shorten(run, maxNameLength-len(suffix), "-.") + suffix
}

// LabelValue returns value as a valid label value: unchanged when it fits in
// 63 characters, otherwise cut and followed by a short stable hash of the
// whole value (as Name does). Object names may be up to 253 characters but
// label values only 63, so every writer and every selector of the run and
// session labels (LabelRun, LabelSession) must go through LabelValue.
func LabelValue(value string) string {
	return shorten(value, validation.LabelValueMaxLength, "-._")
}

// shorten returns s when it fits in limit bytes, else a prefix of s (with the
// characters in trim removed from its end) followed by "-" and a stable hash
// of s, limit bytes at most.
func shorten(s string, limit int, trim string) string {
	if len(s) <= limit {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	hash := hex.EncodeToString(sum[:])[:hashLength]
	keep := max(limit-len(hash)-1, 0)
	prefix := strings.TrimRight(s[:keep], trim)
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}
