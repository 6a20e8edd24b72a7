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

package policy

import (
	"fmt"
	"net"
	"net/url"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Warnings are what admits a policy but deserves a word: a model whose
// provider key would travel in clear text (an http:// baseURL outside
// loopback) — the key is sent as a bearer token, so anyone on the path reads
// it.
func Warnings(spec *v1alpha1.RuntimePolicySpec) []string {
	var out []string
	for i, m := range spec.Models {
		if m.APIKeySecretRef == nil || !plainRemote(m.BaseURL) {
			continue
		}
		out = append(out, fmt.Sprintf(
			"spec.models[%d].baseURL: %q is plain http outside loopback: model %q's provider key is sent in clear text; use https",
			i, m.BaseURL, m.Name))
	}
	return out
}

// plainRemote says whether raw is an http:// URL whose host is not loopback.
func plainRemote(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
