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
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/permission"
)

// Rule names a validation rule. Validate sets it as the Origin of every error
// it returns, so callers and tests can tell rules apart without parsing
// messages.
type Rule = string

const (
	// RuleSupportedValue: class, phase, onError, role, risk, effect and modes
	// take one of their enumerated values.
	RuleSupportedValue Rule = "supportedValue"
	// RuleNameRequired: every interceptor and tool has a name.
	RuleNameRequired Rule = "nameRequired"
	// RuleUniqueName: interceptor names are unique; tool names are unique;
	// autoApprove names each tool once.
	RuleUniqueName Rule = "uniqueName"
	// RuleSecurityFailClosed: a Security-class interceptor has onError Deny.
	RuleSecurityFailClosed Rule = "securityFailClosed"
	// RulePreVetoExplicit: a Pre interceptor sets veto (true or false).
	RulePreVetoExplicit Rule = "preVetoExplicit"
	// RuleAuthenticationPreVeto: an Authentication interceptor is Pre with veto true.
	RuleAuthenticationPreVeto Rule = "authenticationPreVeto"
	// RuleRoleSecurityClass: Authentication and Redaction interceptors are
	// Security class (and so must fail closed).
	RuleRoleSecurityClass Rule = "roleSecurityClass"
	// RuleSecurityGatewayEnforced: a Security-class interceptor is enforced by
	// the Gateway: one inside the agent's process is bypassed once and so
	// bypassed entirely.
	RuleSecurityGatewayEnforced Rule = "securityGatewayEnforced"
	// RuleInterceptorTimeout: an interceptor's timeout is within
	// [v1alpha1.MinInterceptorTimeout, v1alpha1.MaxInterceptorTimeout].
	RuleInterceptorTimeout Rule = "interceptorTimeout"
	// RuleGatewayImplements: a Gateway-enforced interceptor names one the
	// gateway implements, in a phase it implements (ValidateImplemented).
	RuleGatewayImplements Rule = "gatewayImplements"
	// RuleKnownReference: requires, before and after name interceptors of the chain.
	RuleKnownReference Rule = "knownReference"
	// RuleSelfReference: an interceptor does not name itself in requires, before or after.
	RuleSelfReference Rule = "selfReference"
	// RuleConstraintCycle: requires, before and after do not form a cycle.
	RuleConstraintCycle Rule = "constraintCycle"
	// RuleConstraintOrder: the resolved order satisfies every requires,
	// before and after edge.
	RuleConstraintOrder Rule = "constraintOrder"
	// RuleRoleOrder: the resolved order satisfies the built-in role
	// assertions: IdentityConsumer, Audit and Logging after Authentication;
	// Audit and Logging after Redaction.
	RuleRoleOrder Rule = "roleOrder"
	// RuleRegistrationOrder: an ordering constraint or role assertion is not
	// satisfied only by registration order (equal phase and priority).
	// Registration only breaks ties and carries no meaning; a reordered list
	// (a migration, a sorted generator) would silently break the dependency.
	RuleRegistrationOrder Rule = "registrationOrder"
	// RuleAutoApproveKnown: autoApprove names tools of the catalogue.
	RuleAutoApproveKnown Rule = "autoApproveKnown"
	// RuleAutoApproveNotHighRisk: autoApprove names no High-risk tool.
	RuleAutoApproveNotHighRisk Rule = "autoApproveNotHighRisk"
	// RuleModeCeiling: defaultMode is not above maxMode.
	RuleModeCeiling Rule = "modeCeiling"
	// RuleToolServed: a Write or External tool names the spec.toolServers
	// entry that serves it (tools[].server), unless the gateway serves it
	// itself (v1alpha1.IsBuiltinTool). Only an effect-None tool may run in
	// the agent's own process.
	RuleToolServed Rule = "toolServed"
	// RuleKnownServer: tools[].server names an entry of spec.toolServers.
	RuleKnownServer Rule = "knownServer"
	// RuleBuiltinNoServer: a built-in tool names no server: the gateway
	// serves it itself.
	RuleBuiltinNoServer Rule = "builtinNoServer"
	// RulePreviewEffectNone: only an effect-None tool is a preview; Plan mode
	// calls previews, and must never call a tool that writes.
	RulePreviewEffectNone Rule = "previewEffectNone"
)

// The API defaults of the mode fields, applied by the API server before
// admission; Validate assumes them when a field is empty.
const (
	defaultMaxMode     = v1alpha1.ModeEdit
	defaultDefaultMode = v1alpha1.ModePlan
)

// orderNote ends every ordering message: where the order comes from.
const orderNote = "(order is phase, priority, registration; constraints are assertions and never reorder the chain)"

// Validate checks a RuntimePolicy spec and returns every violation, each as
// one field error whose path points at the offending field (for example
// spec.interceptors[2].onError), whose detail names the interceptor, tool or tier
// and the rule, and whose Origin is the Rule. An empty list means the policy
// is valid. The rules are listed with the Rule constants; ordering rules are
// checked against Resolve's order, positions in messages count from 1.
func Validate(spec *v1alpha1.RuntimePolicySpec) field.ErrorList {
	specPath := field.NewPath("spec")
	if spec == nil {
		return field.ErrorList{field.Required(specPath, "a RuntimePolicy needs a spec").WithOrigin(RuleNameRequired)}
	}
	errs := validateChain(spec.Interceptors, specPath.Child("interceptors"))
	errs = append(errs, validateTools(spec.Tools, spec.AutoApprove, specPath)...)
	errs = append(errs, validateServing(spec.Tools, spec.ToolServers, specPath)...)
	errs = append(errs, validateModes(spec.DefaultMode, spec.MaxMode, specPath)...)
	errs = append(errs, validateTiers(spec, specPath)...)
	errs = append(errs, validatePrices(spec, specPath)...)
	return errs
}

// chain is what the ordering rules need to know about a chain.
type chain struct {
	ics  []v1alpha1.Interceptor
	path *field.Path
	// index maps a name to the registration index of its first occurrence.
	index map[string]int
	// ambiguous holds names used more than once; edges to or from them are
	// not checked (the duplicate is reported instead).
	ambiguous map[string]bool
	// pos maps a registration index to its position in the resolved order.
	pos []int
}

// The lists in which an interceptor declares ordering constraints.
const (
	listRequires = "requires"
	listAfter    = "after"
	listBefore   = "before"
)

// edge says that interceptor from must run before interceptor to. It was
// declared by interceptor decl in its list kind at entry j.
type edge struct {
	from, to int
	decl     int
	kind     string // listRequires, listAfter or listBefore
	j        int
}

func validateChain(ics []v1alpha1.Interceptor, path *field.Path) field.ErrorList {
	c := &chain{ics: ics, path: path, index: map[string]int{}, ambiguous: map[string]bool{}, pos: make([]int, len(ics))}
	for p, r := range Resolve(ics) {
		c.pos[r.RegistrationIndex] = p
	}

	var errs field.ErrorList
	for i, ic := range ics {
		namePath := path.Index(i).Child("name")
		if ic.Name == "" {
			errs = append(errs, field.Required(namePath,
				fmt.Sprintf("interceptor at spec.interceptors[%d]: every interceptor needs a name; "+
					"the agent registers implementations by name", i)).
				WithOrigin(RuleNameRequired))
			continue
		}
		if first, ok := c.index[ic.Name]; ok {
			c.ambiguous[ic.Name] = true
			errs = append(errs, withDetail(field.ErrorTypeDuplicate, namePath, ic.Name, RuleUniqueName,
				"interceptor %q: interceptor names must be unique, and spec.interceptors[%d] already uses it; "+
					"the agent looks implementations up by name",
				ic.Name, first))
			continue
		}
		c.index[ic.Name] = i
	}

	for i := range ics {
		errs = append(errs, validateInterceptor(&ics[i], path.Index(i))...)
	}

	edges, refErrs := c.edges()
	errs = append(errs, refErrs...)
	errs = append(errs, c.cycles(edges)...)

	// declared holds the (from, to) pairs an explicit edge covers; a role
	// assertion over the same pair is not reported a second time.
	declared := map[[2]int]bool{}
	for _, e := range edges {
		declared[[2]int{e.from, e.to}] = true
		errs = append(errs, c.checkEdge(e)...)
	}
	errs = append(errs, c.checkRoles(declared)...)
	return errs
}

// The enumerated values, for NotSupported errors.
var (
	classes  = []v1alpha1.InterceptorClass{v1alpha1.ClassSecurity, v1alpha1.ClassObservability, v1alpha1.ClassResource}
	phases   = []v1alpha1.InterceptorPhase{v1alpha1.InterceptorPre, v1alpha1.InterceptorAround, v1alpha1.InterceptorPost}
	postures = []v1alpha1.Posture{v1alpha1.PostureDeny, v1alpha1.PostureAllow}
	roles    = []v1alpha1.InterceptorRole{v1alpha1.RoleAuthentication, v1alpha1.RoleIdentityConsumer,
		v1alpha1.RoleRedaction, v1alpha1.RoleAudit, v1alpha1.RoleLogging, v1alpha1.RoleCustom}
	risks        = []v1alpha1.Risk{v1alpha1.RiskLow, v1alpha1.RiskMedium, v1alpha1.RiskHigh}
	effects      = []v1alpha1.Effect{v1alpha1.EffectNone, v1alpha1.EffectWrite, v1alpha1.EffectExternal}
	enforcements = []v1alpha1.InterceptorEnforcement{v1alpha1.EnforcementGateway, v1alpha1.EnforcementAgent}
	modes        = []v1alpha1.PermissionMode{v1alpha1.ModeReadOnly, v1alpha1.ModePlan, v1alpha1.ModeEdit,
		v1alpha1.ModeAuto, v1alpha1.ModeFull}
)

// validateInterceptor checks the rules that concern one interceptor alone.
func validateInterceptor(ic *v1alpha1.Interceptor, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	name := ic.Name
	if !slices.Contains(classes, ic.Class) {
		errs = append(errs, notSupported(p.Child("class"), ic.Class, name, classes))
	}
	if !slices.Contains(phases, ic.Phase) {
		errs = append(errs, notSupported(p.Child("phase"), ic.Phase, name, phases))
	}
	if !slices.Contains(postures, ic.OnError) {
		errs = append(errs, notSupported(p.Child("onError"), ic.OnError, name, postures))
	}
	if ic.Role != "" && !slices.Contains(roles, ic.Role) {
		errs = append(errs, notSupported(p.Child("role"), ic.Role, name, roles))
	}

	if ic.Class == v1alpha1.ClassSecurity && ic.OnError == v1alpha1.PostureAllow {
		errs = append(errs, field.Invalid(p.Child("onError"), ic.OnError, fmt.Sprintf(
			"interceptor %q: Security-class interceptors must fail closed (onError: Deny); "+
				"a fail-open security check is no check", name)).
			WithOrigin(RuleSecurityFailClosed))
	}
	if ic.Phase == v1alpha1.InterceptorPre && ic.Veto == nil {
		errs = append(errs, field.Required(p.Child("veto"), fmt.Sprintf(
			"interceptor %q: Pre interceptors must declare veto explicitly (true or false); "+
				"whether its refusal ends the call must be stated, not implied", name)).
			WithOrigin(RulePreVetoExplicit))
	}

	if ic.Role == v1alpha1.RoleAuthentication {
		const rule = "Authentication interceptors must run in phase Pre with an explicit terminating veto (veto: true)"
		if ic.Phase != v1alpha1.InterceptorPre {
			errs = append(errs, field.Invalid(p.Child("phase"), ic.Phase, fmt.Sprintf(
				"interceptor %q: %s; authentication after the call protects nothing", name, rule)).
				WithOrigin(RuleAuthenticationPreVeto))
		}
		why := "a failed authentication must end the call, not mark it and go on"
		switch {
		case ic.Veto == nil:
			errs = append(errs, field.Required(p.Child("veto"), fmt.Sprintf(
				"interceptor %q: %s; %s", name, rule, why)).
				WithOrigin(RuleAuthenticationPreVeto))
		case !*ic.Veto:
			errs = append(errs, field.Invalid(p.Child("veto"), false, fmt.Sprintf(
				"interceptor %q: %s; %s", name, rule, why)).
				WithOrigin(RuleAuthenticationPreVeto))
		}
	}
	if ic.Enforcement != "" && !slices.Contains(enforcements, ic.Enforcement) {
		errs = append(errs, notSupported(p.Child("enforcement"), ic.Enforcement, name, enforcements))
	}
	if ic.Class == v1alpha1.ClassSecurity && ic.Enforcement == v1alpha1.EnforcementAgent {
		errs = append(errs, field.Invalid(p.Child("enforcement"), ic.Enforcement, fmt.Sprintf(
			"interceptor %q: Security-class interceptors must be enforced by the Gateway; "+
				"a check inside the agent's process binds only agents that choose to run it", name)).
			WithOrigin(RuleSecurityGatewayEnforced))
	}
	if ic.Timeout != nil && (ic.Timeout.Duration < v1alpha1.MinInterceptorTimeout ||
		ic.Timeout.Duration > v1alpha1.MaxInterceptorTimeout) {
		errs = append(errs, field.Invalid(p.Child("timeout"), ic.Timeout.Duration.String(), fmt.Sprintf(
			"interceptor %q: timeout must be between %s and %s (omit it for the default, %s)", name,
			v1alpha1.MinInterceptorTimeout, v1alpha1.MaxInterceptorTimeout, v1alpha1.DefaultInterceptorTimeout)).
			WithOrigin(RuleInterceptorTimeout))
	}
	securityRole := ic.Role == v1alpha1.RoleAuthentication || ic.Role == v1alpha1.RoleRedaction
	if securityRole && ic.Class != v1alpha1.ClassSecurity {
		errs = append(errs, field.Invalid(p.Child("class"), ic.Class, fmt.Sprintf(
			"interceptor %q: %s interceptors must be Security class so that they fail closed; "+
				"an authentication or redaction that fails open lets the call through unchecked", name, ic.Role)).
			WithOrigin(RuleRoleSecurityClass))
	}
	return errs
}

// edges turns requires, before and after into edges, reporting unknown names
// and self-references.
func (c *chain) edges() ([]edge, field.ErrorList) {
	var edges []edge
	var errs field.ErrorList
	for i, ic := range c.ics {
		for _, list := range []struct {
			kind  string
			names []string
			// runs names the relation for the self-reference message.
			runs string
		}{{listRequires, ic.Requires, "after"}, {listAfter, ic.After, "after"}, {listBefore, ic.Before, "before"}} {
			for j, name := range list.names {
				p := c.path.Index(i).Child(list.kind).Index(j)
				if name == ic.Name {
					errs = append(errs, field.Invalid(p, name, fmt.Sprintf(
						"interceptor %q: %s names the interceptor itself; an interceptor cannot run %s itself",
						ic.Name, list.kind, list.runs)).
						WithOrigin(RuleSelfReference))
					continue
				}
				target, ok := c.index[name]
				if !ok {
					errs = append(errs, withDetail(field.ErrorTypeNotFound, p, name, RuleKnownReference,
						"interceptor %q: %s names %q, which is not an interceptor of this chain", ic.Name, list.kind, name))
					continue
				}
				if ic.Name == "" || c.ambiguous[ic.Name] || c.ambiguous[name] {
					continue
				}
				e := edge{from: target, to: i, decl: i, kind: list.kind, j: j}
				if list.kind == listBefore {
					e.from, e.to = i, target
				}
				edges = append(edges, e)
			}
		}
	}
	return edges, errs
}

// cycles reports one cycle per strongly connected component of the
// constraint graph that has more than one interceptor.
func (c *chain) cycles(edges []edge) field.ErrorList {
	n := len(c.ics)
	adj := make([][]int, n)
	for _, e := range edges {
		if !slices.Contains(adj[e.from], e.to) {
			adj[e.from] = append(adj[e.from], e.to)
		}
	}
	for i := range adj {
		slices.Sort(adj[i])
	}

	var errs field.ErrorList
	for _, scc := range stronglyConnected(adj) {
		if len(scc) < 2 {
			continue
		}
		start := slices.Min(scc)
		cycle := shortestCycle(adj, scc, start)
		names := make([]string, len(cycle))
		for k, v := range cycle {
			names[k] = fmt.Sprintf("%q", c.ics[v].Name)
		}
		errs = append(errs, field.Invalid(c.path.Index(start), c.ics[start].Name, fmt.Sprintf(
			"interceptor %q: requires/before/after form a cycle, %s (a -> b: a must run before b); "+
				"no order satisfies them, so one of these constraints is wrong",
			c.ics[start].Name, strings.Join(names, " -> "))).
			WithOrigin(RuleConstraintCycle))
	}
	return errs
}

// checkEdge reports an edge the resolved order violates, or satisfies only
// by registration order.
func (c *chain) checkEdge(e edge) field.ErrorList {
	decl := c.ics[e.decl]
	other := e.from
	if e.kind == listBefore {
		other = e.to
	}
	var claim string
	switch e.kind {
	case listRequires:
		claim = fmt.Sprintf("interceptor %q requires %q to run first", decl.Name, c.ics[other].Name)
	case listAfter:
		claim = fmt.Sprintf("interceptor %q declares it runs after %q", decl.Name, c.ics[other].Name)
	case listBefore:
		claim = fmt.Sprintf("interceptor %q declares it runs before %q", decl.Name, c.ics[other].Name)
	}
	p := c.path.Index(e.decl).Child(e.kind).Index(e.j)
	return c.checkOrder(p, c.ics[other].Name, e.from, e.to, e.decl, claim, "", RuleConstraintOrder)
}

// checkOrder reports, at path p, that from must run before to when the
// resolved order puts it after, or puts it before only by registration.
// subject is the interceptor the message is about ("it"); claim states the
// constraint; why, if not empty, ends the message with the reason for it.
func (c *chain) checkOrder(p *field.Path, bad any, from, to, subject int, claim, why string,
	rule Rule) field.ErrorList {
	object := to
	if subject == to {
		object = from
	}
	objName := c.ics[object].Name
	subjPos, objPos := c.pos[subject]+1, c.pos[object]+1
	if why != "" {
		why = "; " + why
	}
	if c.pos[from] > c.pos[to] {
		return field.ErrorList{field.Invalid(p, bad, fmt.Sprintf(
			"%s, but the resolved order puts it at position %d and %q at position %d %s%s",
			claim, subjPos, objName, objPos, orderNote, why)).WithOrigin(rule)}
	}
	f, t := c.ics[from], c.ics[to]
	if f.Phase == t.Phase && f.Priority == t.Priority {
		return field.ErrorList{field.Invalid(p, bad, fmt.Sprintf(
			"%s, and the resolved order puts it at position %d and %q at position %d only by registration order "+
				"(both %s, priority %d); registration only breaks ties and carries no meaning, "+
				"so give %q a lower priority than %q (lower runs first)%s",
			claim, subjPos, objName, objPos, f.Phase, f.Priority, f.Name, t.Name, why)).WithOrigin(RuleRegistrationOrder)}
	}
	return nil
}

// roleAssertion is a built-in ordering assertion: every interceptor with a
// role in later runs after every interceptor with role earlier.
type roleAssertion struct {
	earlier v1alpha1.InterceptorRole
	later   []v1alpha1.InterceptorRole
	why     string
}

var roleAssertions = []roleAssertion{
	{v1alpha1.RoleAuthentication, []v1alpha1.InterceptorRole{v1alpha1.RoleIdentityConsumer},
		"an identity consumer that runs before Authentication counts every caller in one anonymous bucket"},
	{v1alpha1.RoleRedaction, []v1alpha1.InterceptorRole{v1alpha1.RoleAudit, v1alpha1.RoleLogging},
		"audit or logging before Redaction records unredacted content, and the log itself becomes the leak"},
	{v1alpha1.RoleAuthentication, []v1alpha1.InterceptorRole{v1alpha1.RoleAudit, v1alpha1.RoleLogging},
		"audit or logging before Authentication cannot record who acted"},
}

// checkRoles checks the built-in role assertions, skipping pairs an explicit
// constraint already covers.
func (c *chain) checkRoles(declared map[[2]int]bool) field.ErrorList {
	var errs field.ErrorList
	for later, ic := range c.ics {
		for _, a := range roleAssertions {
			if !slices.Contains(a.later, ic.Role) {
				continue
			}
			for earlier, jc := range c.ics {
				if jc.Role != a.earlier || declared[[2]int{earlier, later}] {
					continue
				}
				claim := fmt.Sprintf("interceptor %q (role %s) must run after %s interceptor %q",
					ic.Name, ic.Role, a.earlier, jc.Name)
				errs = append(errs, c.checkOrder(c.path.Index(later).Child("role"), string(ic.Role),
					earlier, later, later, claim, a.why, RuleRoleOrder)...)
			}
		}
	}
	return errs
}

func validateTools(tools []v1alpha1.Tool, autoApprove []string, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	toolsPath := specPath.Child("tools")
	first := map[string]int{}
	high := map[string]int{}
	for i, t := range tools {
		p := toolsPath.Index(i)
		if !slices.Contains(risks, t.Risk) {
			e := field.NotSupported(p.Child("risk"), t.Risk, risks)
			e.Detail = fmt.Sprintf("tool %q: %s", t.Name, e.Detail)
			errs = append(errs, e.WithOrigin(RuleSupportedValue))
		}
		if !slices.Contains(effects, t.Effect) {
			e := field.NotSupported(p.Child("effect"), t.Effect, effects)
			e.Detail = fmt.Sprintf("tool %q: %s", t.Name, e.Detail)
			errs = append(errs, e.WithOrigin(RuleSupportedValue))
		}
		if t.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), fmt.Sprintf(
				"tool at spec.tools[%d]: every tool needs a name; agents call tools by name", i)).WithOrigin(RuleNameRequired))
			continue
		}
		if t.Risk == v1alpha1.RiskHigh {
			if _, ok := high[t.Name]; !ok {
				high[t.Name] = i
			}
		}
		if j, ok := first[t.Name]; ok {
			errs = append(errs, withDetail(field.ErrorTypeDuplicate, p.Child("name"), t.Name, RuleUniqueName,
				"tool %q: tool names must be unique, and spec.tools[%d] already uses it; "+
					"risk and effect must be unambiguous", t.Name, j))
			continue
		}
		first[t.Name] = i
	}

	aaPath := specPath.Child("autoApprove")
	seen := map[string]bool{}
	for j, name := range autoApprove {
		p := aaPath.Index(j)
		if seen[name] {
			errs = append(errs, withDetail(field.ErrorTypeDuplicate, p, name, RuleUniqueName,
				"autoApprove names tool %q more than once", name))
			continue
		}
		seen[name] = true
		if _, ok := first[name]; !ok {
			errs = append(errs, withDetail(field.ErrorTypeNotFound, p, name, RuleAutoApproveKnown,
				"autoApprove names tool %q, which is not in the tool catalogue (spec.tools)", name))
			continue
		}
		if i, ok := high[name]; ok {
			errs = append(errs, field.Invalid(p, name, fmt.Sprintf(
				"autoApprove names tool %q, which is High risk (spec.tools[%d]); "+
					"High risk is confirmed in every mode, so it cannot be auto-approved", name, i)).
				WithOrigin(RuleAutoApproveNotHighRisk))
		}
	}
	return errs
}

// validateServing checks who serves each tool of the catalogue: a built-in
// tool is served by the gateway itself and names no server; any other tool
// that writes (effect Write or External) names the spec.toolServers entry
// that serves it, so that its call goes through the gateway's MCP door
// (modes, approvals, the write-ahead record, the chain); a named server must
// exist. A preview must be effect None.
func validateServing(tools []v1alpha1.Tool, servers []v1alpha1.ToolServer, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := make([]string, 0, len(servers))
	for _, s := range servers {
		names = append(names, s.Name)
	}
	known := "spec.toolServers is empty"
	if len(names) > 0 {
		known = "spec.toolServers has " + quoteAll(names)
	}
	builtins := quoteAll([]string{v1alpha1.BuiltinToolReportPublish, v1alpha1.BuiltinToolNotesWrite,
		v1alpha1.BuiltinToolRunSpawn, v1alpha1.BuiltinToolRunChildren})
	for i, t := range tools {
		p := specPath.Child("tools").Index(i)
		switch {
		case v1alpha1.IsBuiltinTool(t.Name) && t.Server != "":
			errs = append(errs, field.Forbidden(p.Child("server"), fmt.Sprintf(
				"tool %q is built into the gateway, which serves it itself; a built-in tool names no server (server %q)",
				t.Name, t.Server)).WithOrigin(RuleBuiltinNoServer))
		case t.Server != "" && !slices.Contains(names, t.Server):
			errs = append(errs, withDetail(field.ErrorTypeNotFound, p.Child("server"), t.Server, RuleKnownServer,
				"tool %q: server %q is not an entry of spec.toolServers (%s)", t.Name, t.Server, known))
		case t.Server == "" && !v1alpha1.IsBuiltinTool(t.Name) && (t.Effect == v1alpha1.EffectWrite || t.Effect == v1alpha1.EffectExternal):
			errs = append(errs, field.Required(p.Child("server"), fmt.Sprintf(
				"tool %q (effect %s): a Write or External tool must name the spec.toolServers entry that serves it, "+
					"so that its calls go through the gateway; only the built-in tools (%s) and effect-None tools need no server",
				t.Name, t.Effect, builtins)).WithOrigin(RuleToolServed))
		}
		if t.Preview && t.Effect != v1alpha1.EffectNone {
			errs = append(errs, field.Invalid(p.Child("preview"), true, fmt.Sprintf(
				"tool %q (effect %s): only an effect-None tool can be a preview; Plan mode calls previews and must never call a tool that writes",
				t.Name, t.Effect)).WithOrigin(RulePreviewEffectNone))
		}
	}
	return errs
}

// quoteAll lists names quoted, comma-separated.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func validateModes(defaultMode, maxMode v1alpha1.PermissionMode, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	defNote, maxNote := "", ""
	if defaultMode == "" {
		defaultMode, defNote = defaultDefaultMode, " (the default when unset)"
	}
	if maxMode == "" {
		maxMode, maxNote = defaultMaxMode, " (the default when unset)"
	}
	known := true
	if maxMode.Rank() < 0 {
		known = false
		errs = append(errs, field.NotSupported(specPath.Child("maxMode"), maxMode, modes).WithOrigin(RuleSupportedValue))
	}
	if defaultMode.Rank() < 0 {
		known = false
		errs = append(errs, field.NotSupported(specPath.Child("defaultMode"), defaultMode, modes).
			WithOrigin(RuleSupportedValue))
	}
	if known && !permission.ModeAllowed(defaultMode, maxMode) {
		errs = append(errs, field.Invalid(specPath.Child("defaultMode"), string(defaultMode), fmt.Sprintf(
			"defaultMode %s%s is above maxMode %s%s: a session's default mode must be within the policy's ceiling",
			defaultMode, defNote, maxMode, maxNote)).WithOrigin(RuleModeCeiling))
	}
	return errs
}

// notSupported is field.NotSupported with the interceptor named.
func notSupported[T ~string](p *field.Path, value T, name string, valid []T) *field.Error {
	e := field.NotSupported(p, value, valid)
	e.Detail = fmt.Sprintf("interceptor %q: %s", name, e.Detail)
	return e.WithOrigin(RuleSupportedValue)
}

// withDetail builds an error of a type whose constructor takes no detail
// (Duplicate, NotFound).
func withDetail(t field.ErrorType, p *field.Path, value any, rule Rule, format string, args ...any) *field.Error {
	return &field.Error{Type: t, Field: p.String(), BadValue: value, Detail: fmt.Sprintf(format, args...), Origin: rule}
}

// ValidateImplemented checks that every Gateway-enforced interceptor of spec
// (enforcement Gateway or empty) is one implemented names, in a phase it
// implements: implemented maps each interceptor the gateway has to its
// phases (the gateway's registry, chain.BuiltinPhases). An entry the agent
// enforces (enforcement Agent) is not checked: it binds only agents that run
// it themselves. Each error names the interceptor and lists what exists.
func ValidateImplemented(spec *v1alpha1.RuntimePolicySpec, implemented map[string][]v1alpha1.InterceptorPhase) field.ErrorList {
	if spec == nil {
		return nil
	}
	var errs field.ErrorList
	var have []string
	for _, name := range slices.Sorted(maps.Keys(implemented)) {
		have = append(have, fmt.Sprintf("%s (%s)", name, joinPhases(implemented[name])))
	}
	list := strings.Join(have, ", ")
	p := field.NewPath("spec", "interceptors")
	for i := range spec.Interceptors {
		ic := &spec.Interceptors[i]
		if ic.Enforcement == v1alpha1.EnforcementAgent {
			continue
		}
		ps, ok := implemented[ic.Name]
		switch {
		case !ok:
			errs = append(errs, field.Invalid(p.Index(i).Child("name"), ic.Name, fmt.Sprintf(
				"interceptor %q: the gateway does not implement it, so it would bind no agent; "+
					"the gateway implements %s; set enforcement: Agent if only agents that register it themselves run it",
				ic.Name, list)).WithOrigin(RuleGatewayImplements))
		case !slices.Contains(ps, ic.Phase):
			errs = append(errs, field.Invalid(p.Index(i).Child("phase"), ic.Phase, fmt.Sprintf(
				"interceptor %q: the gateway implements it only in phase %s; the gateway implements %s",
				ic.Name, joinPhases(ps), list)).WithOrigin(RuleGatewayImplements))
		}
	}
	return errs
}

func joinPhases(ps []v1alpha1.InterceptorPhase) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, " or ")
}
