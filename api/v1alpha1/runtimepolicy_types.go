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

package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// InterceptorRole declares what an interceptor does, so admission can check the
// information dependencies between interceptors (the built-in assertions).
// +kubebuilder:validation:Enum=Authentication;IdentityConsumer;Redaction;Audit;Logging;Custom
type InterceptorRole string

const (
	// RoleAuthentication establishes the caller's identity. Must be Pre with an
	// explicit terminating veto, and runs before every IdentityConsumer, Audit
	// and Logging interceptor.
	RoleAuthentication InterceptorRole = "Authentication"
	// RoleIdentityConsumer reads the identity (e.g. rate limiting keyed by
	// identity); it runs after Authentication or it counts everyone in one bucket.
	RoleIdentityConsumer InterceptorRole = "IdentityConsumer"
	// RoleRedaction removes sensitive content; it runs before Audit and Logging
	// or the log itself becomes the leak.
	RoleRedaction InterceptorRole = "Redaction"
	// RoleAudit records who did what; runs after Redaction and Authentication.
	RoleAudit InterceptorRole = "Audit"
	// RoleLogging records requests; runs after Redaction and Authentication.
	RoleLogging InterceptorRole = "Logging"
	// RoleCustom has no built-in assertions.
	RoleCustom InterceptorRole = "Custom"
)

// Interceptor is one entry of the chain that runs around every model request and
// tool call. The resolved order is (phase, priority, registration index):
// registration order only breaks ties and carries no meaning.
type Interceptor struct {
	// name identifies the interceptor; the agent must register an implementation
	// under this name or refuse to start.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
	// class says what the interceptor protects or provides. Security-class
	// interceptors must fail closed (onError: Deny).
	// +required
	Class InterceptorClass `json:"class"`
	// role declares what the interceptor does, for the built-in ordering assertions.
	// +kubebuilder:default=Custom
	// +optional
	Role InterceptorRole `json:"role,omitempty"`
	// phase is when the interceptor runs: Pre, Around or Post.
	// +required
	Phase InterceptorPhase `json:"phase"`
	// priority orders interceptors within a phase; lower runs first.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +required
	Priority int32 `json:"priority"`
	// onError is the interceptor's own failure posture: Deny (fail closed) or
	// Allow (fail open: log, count, continue). There is no chain-wide catch-all.
	// +required
	OnError Posture `json:"onError"`
	// veto says whether the interceptor may end the call. Required (true or
	// false, explicitly) for Pre interceptors.
	// +optional
	Veto *bool `json:"veto,omitempty"`
	// requires lists interceptors this one must run after (it consumes what
	// they produce).
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Requires []string `json:"requires,omitempty"`
	// before asserts that this interceptor runs before each named one.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Before []string `json:"before,omitempty"`
	// after asserts that this interceptor runs after each named one.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	After []string `json:"after,omitempty"`
	// buffered says that an Allow-posture interceptor buffers its output locally
	// and resends it, so an error loses nothing (audit).
	// +optional
	Buffered bool `json:"buffered,omitempty"`
	// enforcement says who runs the interceptor. Gateway (the default):
	// agentrun-gateway runs it around every call of every agent, and admission
	// refuses a name the gateway does not implement. Agent: only agents that
	// register an implementation themselves run it; the gateway skips it, and
	// runs under the policy say so (kubectl agentrun why). Security-class
	// interceptors must be enforced by the Gateway.
	// +kubebuilder:default=Gateway
	// +optional
	Enforcement InterceptorEnforcement `json:"enforcement,omitempty"`
	// timeout bounds one call of the interceptor's hook (a Go duration, 1ms to
	// 1m; default 2s). A hook past it is that interceptor's failure, handled by
	// its onError.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// QueuePolicy bounds a session's queue.
type QueuePolicy struct {
	// defaultLimit is the queue limit of a Session that sets none: how many runs
	// may wait behind the active one.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=100
	// +optional
	DefaultLimit int32 `json:"defaultLimit,omitempty"`
	// maxLimit is the largest queue limit a Session may set.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=1000
	// +optional
	MaxLimit int32 `json:"maxLimit,omitempty"`
	// defaultTimeout is how long a run may wait in the queue of a Session that
	// sets none.
	// +kubebuilder:default="30m"
	// +optional
	DefaultTimeout *metav1.Duration `json:"defaultTimeout,omitempty"`
	// maxTimeout is the longest queue timeout a Session may set.
	// +kubebuilder:default="24h"
	// +optional
	MaxTimeout *metav1.Duration `json:"maxTimeout,omitempty"`
}

// RunLimits caps what a ResearchRun under this policy may ask for.
type RunLimits struct {
	// maxModelRequests caps spec.budget.modelRequests.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxModelRequests *int64 `json:"maxModelRequests,omitempty"`
	// maxToolCalls caps spec.budget.toolCalls.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxToolCalls *int64 `json:"maxToolCalls,omitempty"`
	// maxTokens caps spec.budget.tokens.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxTokens *int64 `json:"maxTokens,omitempty"`
	// maxCost caps spec.budget.cost, in spec.currency; a run under a policy
	// with it must budget cost.
	// +optional
	MaxCost *Money `json:"maxCost,omitempty"`
	// maxDeadline caps spec.budget.deadline.
	// +optional
	MaxDeadline *metav1.Duration `json:"maxDeadline,omitempty"`
	// maxSteps caps spec.gates.maxSteps.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxSteps *int32 `json:"maxSteps,omitempty"`
	// maxAttempts caps spec.recovery.maxAttempts.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
}

// The values a run gets for a field it leaves unset when its tier (or its
// policy, which has no tiers) gives none. The admission webhook writes them
// into the run's spec; internal/lifecycle assumes them for a run admitted
// without it. A tier's cap lowers them (TierLimits).
const (
	DefaultRunDeadline          = 30 * time.Minute
	DefaultRunMaxSteps    int32 = 20
	DefaultRunMaxAttempts int32 = 3
)

// MaxTiers is the most tiers a RuntimePolicy may define.
const MaxTiers = 16

// TierLimits is the shape of a tier's caps and of its defaults: the six
// things a run asks for that differ most between task types. As caps, each
// set field is the most a run of the tier may ask for (unset: only
// spec.limits bounds it). As defaults, each set field is what a run of the
// tier gets when it leaves that field unset.
type TierLimits struct {
	// modelRequests is for spec.budget.modelRequests (reserve included).
	// +kubebuilder:validation:Minimum=1
	// +optional
	ModelRequests *int64 `json:"modelRequests,omitempty"`
	// toolCalls is for spec.budget.toolCalls (reserve included).
	// +kubebuilder:validation:Minimum=0
	// +optional
	ToolCalls *int64 `json:"toolCalls,omitempty"`
	// tokens is for spec.budget.tokens. A cap on tokens makes a run of the
	// tier budget them (from the tier's default when it sets none).
	// +kubebuilder:validation:Minimum=1
	// +optional
	Tokens *int64 `json:"tokens,omitempty"`
	// maxSteps is for spec.gates.maxSteps.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxSteps *int32 `json:"maxSteps,omitempty"`
	// deadline is for spec.budget.deadline.
	// +optional
	Deadline *metav1.Duration `json:"deadline,omitempty"`
	// maxAttempts is for spec.recovery.maxAttempts.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
}

// Tier is a class of task (quick, standard, deep, ...) with its own caps and
// defaults, so that long tasks get more steps and a longer deadline without
// loosening the limits of every run. A ResearchRun picks one with spec.tier
// (unset: the policy's defaultTier). Caps and defaults are applied when the
// run is created: the run keeps what it was admitted with.
// +kubebuilder:validation:XValidation:rule="!self.?defaults.?modelRequests.hasValue() || !self.?caps.?modelRequests.hasValue() || self.defaults.modelRequests <= self.caps.modelRequests",messageExpression="'tier \"' + self.name + '\": defaults.modelRequests must not exceed caps.modelRequests'",message="a tier's defaults.modelRequests must not exceed its caps.modelRequests"
// +kubebuilder:validation:XValidation:rule="!self.?defaults.?toolCalls.hasValue() || !self.?caps.?toolCalls.hasValue() || self.defaults.toolCalls <= self.caps.toolCalls",messageExpression="'tier \"' + self.name + '\": defaults.toolCalls must not exceed caps.toolCalls'",message="a tier's defaults.toolCalls must not exceed its caps.toolCalls"
// +kubebuilder:validation:XValidation:rule="!self.?defaults.?tokens.hasValue() || !self.?caps.?tokens.hasValue() || self.defaults.tokens <= self.caps.tokens",messageExpression="'tier \"' + self.name + '\": defaults.tokens must not exceed caps.tokens'",message="a tier's defaults.tokens must not exceed its caps.tokens"
// +kubebuilder:validation:XValidation:rule="!self.?defaults.?maxSteps.hasValue() || !self.?caps.?maxSteps.hasValue() || self.defaults.maxSteps <= self.caps.maxSteps",messageExpression="'tier \"' + self.name + '\": defaults.maxSteps must not exceed caps.maxSteps'",message="a tier's defaults.maxSteps must not exceed its caps.maxSteps"
// +kubebuilder:validation:XValidation:rule="!self.?defaults.?deadline.hasValue() || !self.?caps.?deadline.hasValue() || duration(self.defaults.deadline) <= duration(self.caps.deadline)",messageExpression="'tier \"' + self.name + '\": defaults.deadline must not exceed caps.deadline'",message="a tier's defaults.deadline must not exceed its caps.deadline"
// +kubebuilder:validation:XValidation:rule="!self.?defaults.?maxAttempts.hasValue() || !self.?caps.?maxAttempts.hasValue() || self.defaults.maxAttempts <= self.caps.maxAttempts",messageExpression="'tier \"' + self.name + '\": defaults.maxAttempts must not exceed caps.maxAttempts'",message="a tier's defaults.maxAttempts must not exceed its caps.maxAttempts"
type Tier struct {
	// name is what a run puts in spec.tier.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
	// description says which tasks the tier is for; for people only.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Description string `json:"description,omitempty"`
	// caps bound what a run of this tier may ask for. They may not exceed
	// spec.limits, which still bound every run.
	// +optional
	Caps TierLimits `json:"caps,omitzero"`
	// defaults fill what a run of this tier leaves unset; each within caps.
	// A field with no default gets the built-in one (budget.deadline 30m,
	// gates.maxSteps 20, recovery.maxAttempts 3), lowered to the tier's cap;
	// budget.modelRequests and budget.toolCalls have none, so a run must set
	// them when its tier does not.
	// +optional
	Defaults TierLimits `json:"defaults,omitzero"`
}

// SecretKeyRef names one key of a Secret in the policy's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// key in the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Key string `json:"key"`
}

// Model is an upstream model the gateway serves to attempts under a name.
// Agents never see the provider's key: only the gateway reads the Secret.
type Model struct {
	// name is what agents ask for (the "model" of a chat completion).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._:/-]*$`
	// +required
	Name string `json:"name"`
	// baseURL of the provider, e.g. https://api.openai.com/v1 or
	// https://api.anthropic.com/v1; the gateway appends the path of its API
	// (/chat/completions, /responses, /messages).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (self.startsWith('https://') || self.startsWith('http://'))",message="baseURL must be an http or https URL"
	// +required
	BaseURL string `json:"baseURL"`
	// api is the API the provider speaks: OpenAIChat (POST
	// /chat/completions, the default), OpenAIResponses (POST /responses) or
	// AnthropicMessages (POST /messages). A request that comes through the
	// gateway's door of the same API passes through; through another door it
	// is translated, or refused naming what cannot be translated.
	// +kubebuilder:default=OpenAIChat
	// +optional
	API ModelAPI `json:"api,omitempty"`
	// upstreamModel is the provider's model id, when it differs from name.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	UpstreamModel string `json:"upstreamModel,omitempty"`
	// apiKeySecretRef is the provider key, sent as a bearer token upstream.
	// +optional
	APIKeySecretRef *SecretKeyRef `json:"apiKeySecretRef,omitempty"`
	// degradedModel names another model of this policy that the gateway serves
	// instead while the attempt carries a Degrade directive.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	DegradedModel string `json:"degradedModel,omitempty"`
	// maxTokens is the default and largest max_tokens of one request: the
	// gateway sets it when a request asks for none or for more, and reserves
	// it against the token grant before dispatch.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxTokens *int64 `json:"maxTokens,omitempty"`
	// prices are the model's prices per million tokens, in the policy's
	// currency; a run with a cost budget needs them on every model.
	// +optional
	Prices *ModelPrices `json:"prices,omitempty"`
}

// Compression is what the doors apply under a Compress directive.
// +kubebuilder:validation:MinProperties=1
type Compression struct {
	// maxTokens caps the tokens one model request may generate (its
	// forwarded max_tokens, max_completion_tokens or max_output_tokens).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxTokens *int64 `json:"maxTokens,omitempty"`
	// maxToolResultBytes trims the text a tool call returns through the tool
	// door to this many bytes, marking where it was cut.
	// +kubebuilder:validation:Minimum=256
	// +optional
	MaxToolResultBytes *int64 `json:"maxToolResultBytes,omitempty"`
}

// ModelAPI is a model provider's wire API.
// +kubebuilder:validation:Enum=OpenAIChat;OpenAIResponses;AnthropicMessages
type ModelAPI string

const (
	// ModelAPIOpenAIChat is OpenAI Chat Completions (POST /chat/completions).
	ModelAPIOpenAIChat ModelAPI = "OpenAIChat"
	// ModelAPIOpenAIResponses is the OpenAI Responses API (POST /responses).
	ModelAPIOpenAIResponses ModelAPI = "OpenAIResponses"
	// ModelAPIAnthropicMessages is the Anthropic Messages API (POST /messages).
	ModelAPIAnthropicMessages ModelAPI = "AnthropicMessages"
)

// ServiceReference names an in-cluster Service that serves MCP.
type ServiceReference struct {
	// namespace of the Service; default the gateway's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// port of the Service.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=80
	// +optional
	Port int32 `json:"port,omitempty"`
	// path of the MCP endpoint.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:default="/mcp"
	// +optional
	Path string `json:"path,omitempty"`
}

// ToolServer is an MCP server (streamable HTTP) the gateway calls tools on.
// Only the gateway reaches it: agents call tools through the gateway's MCP
// door, which applies modes, approvals, the write-ahead record and the chain.
// +kubebuilder:validation:XValidation:rule="has(self.url) != has(self.service)",message="a tool server sets exactly one of url and service"
type ToolServer struct {
	// name the catalogue's tools[].server refers to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
	// url of the server's MCP endpoint, e.g. https://tools.example.com/mcp.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (self.startsWith('https://') || self.startsWith('http://'))",message="url must be an http or https URL"
	// +optional
	URL string `json:"url,omitempty"`
	// service is an in-cluster Service serving MCP, instead of a url.
	// +optional
	Service *ServiceReference `json:"service,omitempty"`
	// authSecretRef is a bearer token the gateway sends to the server. The
	// Secret must carry the label agentrun.dev/provider-key=true (the only
	// Secrets the gateway reads).
	// +optional
	AuthSecretRef *SecretKeyRef `json:"authSecretRef,omitempty"`
	// timeout bounds one call. A Write or External call that gets no answer
	// in time has an Unknown outcome: it is never dispatched again unless
	// the tool is idempotent.
	// +kubebuilder:default="30s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// The defaults and bounds of EventRetention (the API server applies the
// defaults; a nil field means its default too).
const (
	DefaultEventMaxAge   = 7 * 24 * time.Hour
	MinEventMaxAge       = time.Minute
	MaxEventMaxAge       = 90 * 24 * time.Hour
	DefaultEventMaxBytes = 64 << 20
	MinEventMaxBytes     = 64 << 10
)

// EventRetention bounds what the run stream keeps of each run under the
// policy: its events by age and by bytes. The oldest events go first
// (discard old); the newest event of a run is never removed by maxBytes,
// so its seq keeps counting. The stream server's own limits (--max-age,
// --max-bytes) bound every run as well: the smaller limit wins.
type EventRetention struct {
	// maxAge is how long the stream keeps each event of a run, from when it
	// was stored (a per-event TTL): at least 1m, at most 90d (2160h).
	// Written as a Go duration (168h, 30m); days are not a unit.
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="spec.events.maxAge must be at least 1m"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('2160h')",message="spec.events.maxAge must be at most 90d (2160h)"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
	// maxBytes bounds the bytes of one run's stored events (their JSON): past
	// it, the stream server removes the run's oldest events, at most a minute
	// late while the run is active and once more when it ends. At least 64Ki.
	// +kubebuilder:default="64Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Ki')) >= 0",message="spec.events.maxBytes must be at least 64Ki"
	// +optional
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
}

// Age is maxAge, or its default when unset.
func (e *EventRetention) Age() time.Duration {
	if e == nil || e.MaxAge == nil {
		return DefaultEventMaxAge
	}
	return e.MaxAge.Duration
}

// Bytes is maxBytes, or its default when unset.
func (e *EventRetention) Bytes() int64 {
	if e == nil || e.MaxBytes == nil {
		return DefaultEventMaxBytes
	}
	return e.MaxBytes.Value()
}

// RuntimePolicySpec is what a platform team allows: the interceptor chain, the
// tool catalogue with risk, the permission-mode ceiling, queue defaults and caps.
// +kubebuilder:validation:XValidation:rule="!has(self.models) || self.models.all(m, !has(m.degradedModel) || (m.degradedModel != m.name && self.models.exists(o, o.name == m.degradedModel)))",message="spec.models[].degradedModel must name another model of spec.models"
// +kubebuilder:validation:XValidation:rule="has(self.defaultTier) ? (has(self.tiers) && self.tiers.exists(t, t.name == self.defaultTier)) : (!has(self.tiers) || size(self.tiers) == 0)",message="spec.defaultTier must name a tier of spec.tiers, and is required when spec.tiers is set"
// +kubebuilder:validation:XValidation:rule="!has(self.defaultMode) || !has(self.maxMode) || self.maxMode == 'Full' || (self.maxMode == 'Auto' && self.defaultMode != 'Full') || (self.maxMode == 'Edit' && self.defaultMode in ['ReadOnly', 'Plan', 'Edit']) || (self.maxMode == 'Plan' && self.defaultMode in ['ReadOnly', 'Plan']) || self.defaultMode == 'ReadOnly'",message="spec.defaultMode must not be above spec.maxMode"
type RuntimePolicySpec struct {
	// interceptors is the chain in registration order. The resolved order
	// (status.resolvedChain) is (phase, priority, registration index).
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Interceptors []Interceptor `json:"interceptors,omitempty"`
	// tools is the catalogue of tools agents under this policy may call.
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	// +optional
	Tools []Tool `json:"tools,omitempty"`
	// autoApprove lists tools that run without confirmation in Auto mode. A
	// High-risk tool here is rejected: High risk is confirmed in every mode.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	AutoApprove []string `json:"autoApprove,omitempty"`
	// models are the upstream models the gateway serves to attempts under
	// this policy; a request for any other model is refused.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Models []Model `json:"models,omitempty"`
	// currency names the currency of the models' prices and of the runs'
	// cost budgets, an ISO 4217 code such as USD or EUR. Required when a
	// model has prices.
	// +kubebuilder:validation:Pattern=`^[A-Z]{3}$`
	// +optional
	Currency string `json:"currency,omitempty"`
	// toolServers are the MCP servers that serve the catalogue's tools
	// (tools[].server).
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	ToolServers []ToolServer `json:"toolServers,omitempty"`
	// approvalTimeout is how long a tool call waits for a decision before it
	// is refused with ApprovalExpired (the model gets a tool error; the run
	// goes on).
	// +kubebuilder:default="15m"
	// +optional
	ApprovalTimeout *metav1.Duration `json:"approvalTimeout,omitempty"`
	// maxMode is the permission-mode ceiling for sessions under this policy.
	// +kubebuilder:default=Edit
	// +optional
	MaxMode PermissionMode `json:"maxMode,omitempty"`
	// defaultMode is the mode of a Session that sets none.
	// +kubebuilder:default=Plan
	// +optional
	DefaultMode PermissionMode `json:"defaultMode,omitempty"`
	// queue holds the queue defaults and bounds for sessions.
	// +kubebuilder:default={}
	// +optional
	Queue QueuePolicy `json:"queue,omitzero"`
	// limits caps the budgets, deadlines, gates and attempts of runs,
	// whatever their tier.
	// +optional
	Limits RunLimits `json:"limits,omitzero"`
	// tiers are classes of task with their own caps and defaults, e.g.
	// quick, standard and deep. A run picks one with spec.tier; unset, it
	// gets defaultTier. No tiers: runs are bounded by limits alone.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Tiers []Tier `json:"tiers,omitempty"`
	// defaultTier is the tier of a run that names none. Required when tiers
	// are set, and must name one of them.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	DefaultTier string `json:"defaultTier,omitempty"`
	// events bounds the retention of each run's event stream (the run
	// stream: reasoning, text, tool calls, status) by age and bytes.
	// +kubebuilder:default={}
	// +optional
	Events EventRetention `json:"events,omitzero"`
	// children bounds the child runs the policy's runs may create (depth,
	// fan-out, concurrency). Unset: no child runs.
	// +optional
	Children *ChildrenPolicy `json:"children,omitempty"`
	// onSecurityDegraded switches the policy's runs to a stricter posture
	// while one of its Security interceptors fails (an error or panic of
	// its hook, not a veto) at errorRate percent or more of its calls
	// within window: the gateway then asks for an approval of every write
	// (ConfirmAll) or refuses writes (DenyWrites), and goes back to normal
	// once a full window passes without the threshold being reached. Unset:
	// no stricter posture.
	// +optional
	OnSecurityDegraded *SecurityDegraded `json:"onSecurityDegraded,omitempty"`
	// authorityWait is how long a model request or tool call is held while
	// a fail-closed interceptor's authority is unreachable for now (a
	// TokenReview or quota service outage): the door checks again with
	// backoff, within the run's deadline, and answers 503
	// interceptor_unavailable only when the wait is over. 0s: answer at
	// once. Default 30s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('5m')",message="authorityWait must be between 0s and 5m"
	// +optional
	AuthorityWait *metav1.Duration `json:"authorityWait,omitempty"`
	// compression is what the gateway's doors do while the attempt carries
	// a Compress directive (a gate close to its limit): cap the tokens a
	// model request may generate, trim the tool results the tool door
	// relays. Unset: a Compress directive is only advice to the agent.
	// +optional
	Compression *Compression `json:"compression,omitempty"`
	// harness governs the coding harnesses (a run's spec.harness) under
	// this policy, as defence in depth inside the pod: the gateway governs
	// their model requests and door tools whatever this says.
	// +optional
	Harness *HarnessPolicy `json:"harness,omitempty"`
	// templateSources lists what of the namespace a run's pod template may
	// reference beyond ConfigMaps. Unset: no Secret, PersistentVolumeClaim,
	// inline CSI or generic ephemeral volume at all. Whatever it allows, the
	// user who creates the run must hold the access themselves: the admission
	// webhook asks the API server (SubjectAccessReview) whether the requester
	// may get each Secret, ConfigMap and PersistentVolumeClaim the template
	// names, and create PersistentVolumeClaims for an ephemeral volume, so
	// the operator, which builds the pod with its own rights, never grants
	// more than its requester holds. A template never projects a service
	// account token or a pod certificate, whatever this says: attempt pods
	// hold no API credential.
	// +optional
	TemplateSources TemplateSources `json:"templateSources,omitzero"`
	// runnerServiceAccountName is the service account attempt pods run as.
	// +kubebuilder:default=agentrun-runner
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RunnerServiceAccountName string `json:"runnerServiceAccountName,omitempty"`
}

// TemplateSources is what of the namespace a run's pod template may mount or
// read into its environment, beyond ConfigMaps.
type TemplateSources struct {
	// secrets names the Secrets a template may reference: secret volumes,
	// projected secret sources, env valueFrom.secretKeyRef, envFrom
	// secretRef and a CSI volume's nodePublishSecretRef. "*" allows any
	// Secret the requester may get. Image pull secrets need no entry (the
	// agent never reads them) but are access-checked too.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`
	// +listType=set
	// +optional
	Secrets []string `json:"secrets,omitempty"`
	// persistentVolumeClaims names the claims a template may mount (and an
	// ephemeral volume may clone). "*" allows any claim the requester may get.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`
	// +listType=set
	// +optional
	PersistentVolumeClaims []string `json:"persistentVolumeClaims,omitempty"`
	// csiDrivers names the CSI drivers a template may mount inline volumes of
	// (a driver such as the secrets-store one reads what the pod's service
	// account may, not what the requester may: list only drivers whose
	// volumes the namespace's users may all see).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	// +optional
	CSIDrivers []string `json:"csiDrivers,omitempty"`
	// ephemeralVolumes allows generic ephemeral volumes (each makes a
	// PersistentVolumeClaim for the pod); the requester must be able to
	// create PersistentVolumeClaims.
	// +optional
	EphemeralVolumes bool `json:"ephemeralVolumes,omitempty"`
}

// DegradedPosture is the stricter posture of a policy's runs while a
// Security interceptor is unstable.
// +kubebuilder:validation:Enum=ConfirmAll;DenyWrites
type DegradedPosture string

const (
	// PostureConfirmAll: every Write or External tool call needs an
	// approval, auto-approved tools included.
	PostureConfirmAll DegradedPosture = "ConfirmAll"
	// PostureDenyWrites: every Write or External tool call is refused
	// (security_degraded).
	PostureDenyWrites DegradedPosture = "DenyWrites"
)

// SecurityDegraded is when and how a policy's runs turn stricter while a
// Security interceptor's dependency fails.
type SecurityDegraded struct {
	// errorRate is the percentage of a Security interceptor's calls within
	// window that must fail for the runs to turn stricter (1..100).
	// +kubebuilder:default=20
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 100",message="spec.onSecurityDegraded.errorRate must be between 1 and 100 (percent)"
	// +optional
	ErrorRate int32 `json:"errorRate,omitempty"`
	// window is the sliding window the error rate is measured over, and how
	// long the stricter posture lasts after the threshold was last reached
	// (10s..1h).
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="spec.onSecurityDegraded.window must be between 10s and 1h"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`
	// minCalls is the fewest calls of an interceptor within window that can
	// degrade the runs: fewer never do, whatever their error rate.
	// +kubebuilder:default=5
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 10000",message="spec.onSecurityDegraded.minCalls must be between 1 and 10000"
	// +optional
	MinCalls int32 `json:"minCalls,omitempty"`
	// posture is what the runs do while degraded: ConfirmAll or DenyWrites.
	// +required
	Posture DegradedPosture `json:"posture"`
}

// Defaults of SecurityDegraded.
const (
	DefaultDegradedErrorRate int32 = 20
	DefaultDegradedWindow          = time.Minute
	DefaultDegradedMinCalls  int32 = 5
)

// Rate is errorRate, or its default when unset.
func (s *SecurityDegraded) Rate() int32 {
	if s.ErrorRate <= 0 {
		return DefaultDegradedErrorRate
	}
	return s.ErrorRate
}

// WindowDuration is window, or its default when unset.
func (s *SecurityDegraded) WindowDuration() time.Duration {
	if s.Window == nil || s.Window.Duration <= 0 {
		return DefaultDegradedWindow
	}
	return s.Window.Duration
}

// Min is minCalls, or its default when unset.
func (s *SecurityDegraded) Min() int32 {
	if s.MinCalls <= 0 {
		return DefaultDegradedMinCalls
	}
	return s.MinCalls
}

// RuntimePolicyStatus is the operator's view of a policy.
type RuntimePolicyStatus struct {
	// observedGeneration is the spec generation this status describes; -1
	// (the API's default) until the operator first writes the status.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// resolvedChain is the interceptor chain in the order runtimes apply it.
	// Runtimes never sort again.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	ResolvedChain []ResolvedInterceptor `json:"resolvedChain,omitempty"`
	// conditions: Valid says whether the chain, catalogue and tiers pass
	// validation; Ready follows it, and Stalled is True while it is False
	// (kstatus reads the policy as Failed).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rp,categories=agentrun
// +kubebuilder:printcolumn:name="Max Mode",type=string,JSONPath=`.spec.maxMode`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// RuntimePolicy is what a platform team allows agents to do: the interceptor
// chain with a failure posture per interceptor, the tool catalogue with risk and
// effect, the permission-mode ceiling, queue defaults and budget caps.
type RuntimePolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the policy.
	// +required
	Spec RuntimePolicySpec `json:"spec"`

	// status is written by the operator. Until its first write it reads
	// observedGeneration -1, so kstatus sees the policy as InProgress, not
	// as Current.
	// +kubebuilder:default={"observedGeneration":-1}
	// +optional
	Status RuntimePolicyStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// RuntimePolicyList contains a list of RuntimePolicy
type RuntimePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []RuntimePolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &RuntimePolicy{}, &RuntimePolicyList{})
		return nil
	})
}
