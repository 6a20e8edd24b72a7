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

package agent

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Spawn asks the gateway for a child run (docs/children.md): its budget is
// carved from this run's working allowance now and comes back, less what
// the child used, when the child ends. A refusal is a *GatewayError with
// code child_refused whose Param names the limit or unit. Asking again with
// the same name is the same child.
func (a *Agent) Spawn(ctx context.Context, req gatewayapi.ChildRequest) (gatewayapi.Child, error) {
	var c gatewayapi.Child
	err := a.call(ctx, http.MethodPost, "/self/children", req, &c)
	return c, err
}

// Children lists this run's children: each one's phase, reason, settlement,
// carve and usage.
func (a *Agent) Children(ctx context.Context) ([]gatewayapi.Child, error) {
	var l gatewayapi.ChildList
	err := a.call(ctx, http.MethodGet, "/self/children", nil, &l)
	return l.Children, err
}

// Child reads one child of this run with its report's sections.
func (a *Agent) Child(ctx context.Context, name string) (gatewayapi.Child, error) {
	var c gatewayapi.Child
	err := a.call(ctx, http.MethodGet, "/self/children/"+url.PathEscape(name), nil, &c)
	return c, err
}
