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

package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Child runs (docs/children.md). A running attempt asks for a child; the
// gateway carves the child's budget out of the attempt's working allowance
// under the keeper's lock (lifecycle.AdmitChild, so concurrent asks cannot
// overdraw), makes the carve durable in the attempt's status.children, and
// only then creates the child ResearchRun, owned by the parent. The carve is
// spent by the parent (grantLocked: lifecycle.LessChildren) until the child
// is seen ended; then only what the child used stays spent.

// childNamePattern is a child's name after its parent's.
var childNamePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$`)

// maxChildTask bounds a child's task (the ResearchRun's spec.goal).
const maxChildTask = 8192

// childSpendLocked is what the attempt's children count as spent of grant g.
func (k *keeper) childSpendLocked(g v1alpha1.Grant) v1alpha1.Usage {
	if len(k.facts.children) == 0 {
		return v1alpha1.Usage{}
	}
	c := lifecycle.Carving{Tokens: g.Tokens != nil, Cost: g.Cost != nil}
	return lifecycle.FoldChildren(c, k.facts.children, k.kids).Spend()
}

// parentRun reads the attempt's run: the parent of the children it asks
// for. The run must be the attempt's owner (same UID).
func (k *keeper) parentRun(ctx context.Context) (*v1alpha1.ResearchRun, *apiError) {
	k.mu.Lock()
	ref := ownerRun(k.obj)
	k.mu.Unlock()
	if ref == nil {
		return nil, errNotPersisted(fmt.Sprintf("RunAttempt %s names no ResearchRun owner; no child can be created for it", k.key))
	}
	run := &v1alpha1.ResearchRun{}
	if err := k.g.opts.Client.Get(ctx, types.NamespacedName{Namespace: k.key.Namespace, Name: ref.Name}, run); err != nil {
		return nil, errNotPersisted(fmt.Sprintf("could not read run %s/%s: %v", k.key.Namespace, ref.Name, err))
	}
	if run.UID != ref.UID {
		return nil, errRunTerminated(fmt.Sprintf("run %s/%s is not the run attempt %s belongs to (another UID)", run.Namespace, run.Name, k.key))
	}
	return run, nil
}

// listChildren lists parent's children: the runs whose spec.parent names it
// by UID (a label alone proves nothing), and remembers which ended.
func (k *keeper) listChildren(ctx context.Context, parent *v1alpha1.ResearchRun) ([]v1alpha1.ResearchRun, error) {
	list := &v1alpha1.ResearchRunList{}
	if err := k.g.opts.Client.List(ctx, list, client.InNamespace(parent.Namespace),
		client.MatchingLabels{v1alpha1.LabelParent: runpod.LabelValue(parent.Name)}); err != nil {
		return nil, fmt.Errorf("listing the children of run %s/%s: %w", parent.Namespace, parent.Name, err)
	}
	kids := slices.DeleteFunc(list.Items, func(r v1alpha1.ResearchRun) bool {
		return r.Spec.Parent == nil || r.Spec.Parent.UID != string(parent.UID)
	})
	slices.SortFunc(kids, func(a, b v1alpha1.ResearchRun) int { return strings.Compare(a.Name, b.Name) })
	views := make([]lifecycle.ChildView, 0, len(kids))
	for _, r := range kids {
		views = append(views, childView(&r))
	}
	k.mu.Lock()
	k.kids = views
	k.mu.Unlock()
	return kids, nil
}

func childView(r *v1alpha1.ResearchRun) lifecycle.ChildView {
	return lifecycle.ChildView{Name: r.Name, Ended: r.Status.Phase == v1alpha1.PhaseTerminated, Used: r.Status.Budget.Used}
}

// refreshChildren re-reads the children of an attempt that carved some, so
// what an ended child did not use comes back to the parent's grant.
func (k *keeper) refreshChildren(ctx context.Context) {
	k.mu.Lock()
	carved := len(k.facts.children) > 0
	k.mu.Unlock()
	if !carved {
		return
	}
	if parent, e := k.parentRun(ctx); e == nil {
		_, _ = k.listChildren(ctx, parent)
	}
}

// childBudget is the child's spec.budget and the carve it takes: a unit the
// parent budgets must be given.
func childBudget(req gatewayapi.ChildBudget, g v1alpha1.Grant) (v1alpha1.Budget, v1alpha1.Usage, *apiError) {
	b := v1alpha1.Budget{ModelRequests: req.ModelRequests, ToolCalls: req.ToolCalls, Tokens: req.Tokens, Cost: req.Cost,
		OutputReserve: req.OutputReserve}
	switch {
	case g.Tokens != nil && req.Tokens == nil:
		return b, v1alpha1.Usage{}, errInvalid("budget.tokens", "the parent's budget counts tokens, so a child's budget must name its tokens")
	case g.Cost != nil && req.Cost == nil:
		return b, v1alpha1.Usage{}, errInvalid("budget.cost", "the parent's budget counts cost, so a child's budget must name its cost")
	case req.Tokens != nil && *req.Tokens < 0:
		return b, v1alpha1.Usage{}, errInvalid("budget.tokens", "budget.tokens cannot be negative")
	}
	u := v1alpha1.Usage{ModelRequests: req.ModelRequests, ToolCalls: req.ToolCalls}
	if req.Tokens != nil {
		u.Tokens = *req.Tokens
	}
	if req.Cost != nil {
		u.Cost = *req.Cost
	}
	return b, u, nil
}

// childName is the child's name: the parent's, then the asked name or a
// hash of the request (so a retried request is the same child).
func childName(parent string, req gatewayapi.ChildRequest) (string, *apiError) {
	suffix := req.Name
	if suffix == "" {
		raw, _ := json.Marshal(req)
		sum := sha256.Sum256(raw)
		suffix = hex.EncodeToString(sum[:4])
	} else if !childNamePattern.MatchString(suffix) {
		return "", errInvalid("name", fmt.Sprintf("name %q must be a DNS label of at most 20 characters (lower-case letters, digits, '-')", suffix))
	}
	name := parent + "-" + suffix
	if len(name) > 200 {
		return "", errInvalid("name", fmt.Sprintf("the child's name %q is longer than 200 characters", name))
	}
	return name, nil
}

// childRefusal is a child the carve decision refused, naming the limit.
func childRefusal(r *lifecycle.ChildRefusal) *apiError {
	e := newError(http.StatusTooManyRequests, gatewayapi.TypeRateLimit, gatewayapi.CodeChildRefused, r.Message)
	e.body.Param = r.Limit
	return e
}

// spawn carves a child's budget and creates the child (see the file's
// comment). Asking again for a child that exists is answered with it.
func (k *keeper) spawn(ctx context.Context, req gatewayapi.ChildRequest) (gatewayapi.Child, *apiError) {
	task := strings.TrimSpace(req.Task)
	switch {
	case task == "":
		return gatewayapi.Child{}, errInvalid("task", "task is required: the child's goal")
	case len(task) > maxChildTask:
		return gatewayapi.Child{}, errInvalid("task", fmt.Sprintf("task is %d bytes; at most %d", len(task), maxChildTask))
	case req.DeadlineSeconds < 0:
		return gatewayapi.Child{}, errInvalid("deadlineSeconds", "deadlineSeconds cannot be negative")
	}
	parent, e := k.parentRun(ctx)
	if e != nil {
		return gatewayapi.Child{}, e
	}
	name, e := childName(parent.Name, req)
	if e != nil {
		return gatewayapi.Child{}, e
	}
	if _, err := k.listChildren(ctx, parent); err != nil {
		return gatewayapi.Child{}, errNotPersisted(err.Error())
	}

	k.mu.Lock()
	spec := k.obj.Spec
	if e := k.stoppedLocked(); e != nil {
		k.mu.Unlock()
		return gatewayapi.Child{}, e
	}
	if isFinalizing(spec) {
		k.mu.Unlock()
		return gatewayapi.Child{}, errGrant(gatewayapi.CodeFinalizeOnly,
			"the run is finalizing: its reserve serves output work only, and a child run is new work")
	}
	g := lifecycle.EffectiveGrant(spec.Grant, k.facts.finalizeBase)
	budget, want, e := childBudget(req.Budget, g)
	if e != nil {
		k.mu.Unlock()
		return gatewayapi.Child{}, e
	}
	deadline, e := childDeadline(spec, k.g.clock.Now(), req.DeadlineSeconds)
	if e != nil {
		k.mu.Unlock()
		return gatewayapi.Child{}, e
	}
	budget.Deadline = deadline
	carve := v1alpha1.ChildCarve{Name: name, Budget: want}
	if i := slices.IndexFunc(k.facts.children, func(c v1alpha1.ChildCarve) bool { return c.Name == name }); i >= 0 {
		carve = k.facts.children[i] // asked again: the same child, no second carve
	} else {
		depth := int32(0)
		if parent.Spec.Parent != nil {
			depth = parent.Spec.Parent.Depth
		}
		own := k.facts.usage
		own.Tokens += k.tokens
		own.Cost += k.cost
		c := lifecycle.GrantCarving(depth, g, own, k.facts.children, k.kids)
		if _, refused := lifecycle.AdmitChild(c, want, childLimits(spec.Policy.Children)); refused != nil {
			k.mu.Unlock()
			return gatewayapi.Child{}, childRefusal(refused)
		}
		k.facts.children = append(k.facts.children, carve)
	}
	k.markLocked(true)
	target := k.seq
	k.mu.Unlock()
	if err := k.waitWritten(ctx, target); err != nil {
		// The carve stays held (never an overdraw): asking again with the
		// same name creates the child from it.
		return gatewayapi.Child{}, errNotPersisted(fmt.Sprintf(
			"the carve of child %s is recorded but not yet durable, so the child was not created; ask again with name %q: %v",
			name, strings.TrimPrefix(name, parent.Name+"-"), err))
	}

	child := newChild(parent, spec.Attempt, name, task, req.Tier, budget)
	err := k.g.opts.Client.Create(ctx, child)
	switch {
	case apierrors.IsAlreadyExists(err):
		existing := &v1alpha1.ResearchRun{}
		if err := k.g.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(child), existing); err != nil {
			return gatewayapi.Child{}, errNotPersisted(fmt.Sprintf("child %s exists but could not be read: %v", name, err))
		}
		if existing.Spec.Parent == nil || existing.Spec.Parent.UID != string(parent.UID) {
			k.release(ctx, name)
			return gatewayapi.Child{}, newError(http.StatusConflict, gatewayapi.TypeConflict, gatewayapi.CodeChildRefused,
				fmt.Sprintf("a run named %s exists and is not a child of run %s; ask with another name", name, parent.Name))
		}
		child = existing
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
		// Refused by the API server (a tier's cap, the webhook): nothing
		// was created, so the carve comes back.
		k.release(ctx, name)
		e := errInvalid("", fmt.Sprintf("the child run %s was refused: %v", name, err))
		e.body.Code = gatewayapi.CodeChildRefused
		return gatewayapi.Child{}, e
	case err != nil:
		return gatewayapi.Child{}, errNotPersisted(fmt.Sprintf("child %s could not be created (its carve stays held); ask again with name %q: %v",
			name, strings.TrimPrefix(name, parent.Name+"-"), err))
	}
	k.log.Info("Created child run", "child", child.Name, "carved", carve.Budget)
	return childOf(child, carve.Budget), nil
}

// release gives back the carve of a child that was not created.
func (k *keeper) release(ctx context.Context, name string) {
	_ = k.commit(ctx, func() {
		k.facts.children = slices.DeleteFunc(k.facts.children, func(c v1alpha1.ChildCarve) bool { return c.Name == name })
	})
}

// childLimits are the policy's children bounds (none: no child).
func childLimits(p *v1alpha1.ChildrenPolicy) lifecycle.ChildLimits {
	if p == nil {
		return lifecycle.ChildLimits{}
	}
	return lifecycle.ChildLimits{MaxDepth: p.MaxDepth, MaxChildren: p.MaxChildren, MaxConcurrent: p.MaxConcurrent}
}

// childDeadline is the child's deadline: what is left until its parent's
// hard deadline (its deadline plus finalization grace), or less when asked.
// A child never outlives its parent: the parent's deadline finalizes it
// (lifecycle.ChildStop) and its hard deadline ends the tree.
func childDeadline(spec v1alpha1.RunAttemptSpec, now time.Time, asked int64) (*metav1.Duration, *apiError) {
	var d time.Duration
	if end := cmp.Or(spec.HardDeadline, spec.Deadline); end != nil {
		d = end.Sub(now).Truncate(time.Second)
		if d < time.Second {
			return nil, errGrant(gatewayapi.CodeDeadlineReached, "the run's deadline has passed: no time is left for a child")
		}
	}
	if a := time.Duration(asked) * time.Second; asked > 0 && (d == 0 || a < d) {
		d = a
	}
	if d == 0 {
		return nil, nil
	}
	return &metav1.Duration{Duration: d}, nil
}

// newChild is the child ResearchRun: in the parent's namespace and session
// (it runs in the parent's slot), with its template and tier unless asked,
// owned by the parent so deleting the parent deletes the tree.
func newChild(parent *v1alpha1.ResearchRun, attempt int32, name, task, tier string, budget v1alpha1.Budget) *v1alpha1.ResearchRun {
	ref := &v1alpha1.ParentRef{Name: parent.Name, UID: string(parent.UID), Attempt: attempt, Root: parent.Name, Depth: 1}
	if p := parent.Spec.Parent; p != nil {
		ref.Root, ref.Depth = p.Root, p.Depth+1
	}
	if tier == "" {
		tier = parent.Spec.Tier
	}
	return &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: parent.Namespace, Name: name,
			Labels: map[string]string{
				v1alpha1.LabelParent: runpod.LabelValue(parent.Name), v1alpha1.LabelRoot: runpod.LabelValue(ref.Root),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "ResearchRun", Name: parent.Name, UID: parent.UID,
				Controller: new(true),
			}},
		},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: parent.Spec.SessionRef, Tier: tier, Goal: task,
			Template: *parent.Spec.Template.DeepCopy(), Harness: parent.Spec.Harness.DeepCopy(), Budget: budget, Parent: ref,
		},
	}
}

// childOf is a child run as its parent sees it.
func childOf(r *v1alpha1.ResearchRun, carved v1alpha1.Usage) gatewayapi.Child {
	return gatewayapi.Child{
		Name: r.Name, Carved: carved, Used: r.Status.Budget.Used, Ended: r.Status.Phase == v1alpha1.PhaseTerminated,
		Phase: r.Status.Phase, Reason: r.Status.Reason, Settlement: r.Status.Settlement, Message: r.Status.Message,
	}
}

// children lists the run's children; with name, only that child, with its
// report.
func (k *keeper) children(ctx context.Context, name string) (gatewayapi.ChildList, *apiError) {
	parent, e := k.parentRun(ctx)
	if e != nil {
		return gatewayapi.ChildList{}, e
	}
	kids, err := k.listChildren(ctx, parent)
	if err != nil {
		return gatewayapi.ChildList{}, errNotPersisted(err.Error())
	}
	k.mu.Lock()
	carves := slices.Clone(k.facts.children)
	k.mu.Unlock()
	out := gatewayapi.ChildList{Children: []gatewayapi.Child{}}
	for i := range kids {
		r := &kids[i]
		if name != "" && r.Name != name {
			continue
		}
		var carved v1alpha1.Usage
		if j := slices.IndexFunc(carves, func(c v1alpha1.ChildCarve) bool { return c.Name == r.Name }); j >= 0 {
			carved = carves[j].Budget
		}
		c := childOf(r, carved)
		if name != "" {
			rep, err := k.g.childReport(ctx, r)
			if err != nil {
				return out, errNotPersisted(fmt.Sprintf("could not read child %s's report: %v", r.Name, err))
			}
			c.Report = rep
		}
		out.Children = append(out.Children, c)
	}
	if name != "" && len(out.Children) == 0 {
		return out, newError(http.StatusNotFound, gatewayapi.TypeNotFound, gatewayapi.CodeNotFound,
			fmt.Sprintf("run %s has no child %q", parent.Name, name))
	}
	return out, nil
}

// childReport reads a child's report with its sections' text.
func (g *Gateway) childReport(ctx context.Context, r *v1alpha1.ResearchRun) (*gatewayapi.ChildReport, error) {
	ref := reportRef{key: types.NamespacedName{Namespace: r.Namespace, Name: ReportName(r.Name)}, run: r.Name,
		label: runpod.LabelValue(r.Name)}
	plan, data, err := g.loadReport(ctx, ref)
	if err != nil {
		return nil, err
	}
	out := &gatewayapi.ChildReport{Location: ref.location(), Sections: []gatewayapi.ChildSection{}}
	for i, s := range plan {
		content, ok := data[SectionKey(i, s)]
		out.Sections = append(out.Sections, gatewayapi.ChildSection{Name: s, Published: ok, Content: content})
	}
	return out, nil
}

// ---- The agent API. ----

func (g *Gateway) postChild(w http.ResponseWriter, r *http.Request, k *keeper) {
	if k.ended(w) {
		return
	}
	var req gatewayapi.ChildRequest
	if e := decode(r, &req); e != nil {
		writeError(w, e)
		return
	}
	c, e := k.spawn(r.Context(), req)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, c)
}

func (g *Gateway) getChildren(w http.ResponseWriter, r *http.Request, k *keeper) {
	list, e := k.children(r.Context(), "")
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, list)
}

func (g *Gateway) getChild(w http.ResponseWriter, r *http.Request, k *keeper) {
	list, e := k.children(r.Context(), r.PathValue("name"))
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, list.Children[0])
}

// ---- The door's built-in tools. ----

// runChildTool performs run.spawn or run.children for the tool door.
func (k *keeper) runChildTool(ctx context.Context, tool string, args map[string]any) (any, *apiError) {
	raw, _ := json.Marshal(args)
	if tool == gatewayapi.ToolRunSpawn {
		var req gatewayapi.ChildRequest
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, errInvalid("arguments", "run.spawn's arguments: "+err.Error())
		}
		return k.spawn(ctx, req)
	}
	name, _ := args["name"].(string)
	list, e := k.children(ctx, name)
	if e != nil || name == "" {
		return list, e
	}
	return list.Children[0], nil
}

// The door's input schemas of run.spawn and run.children.
const (
	runChildrenSchema = `{"type": "object", "additionalProperties": false,
  "properties": {"name": {"type": "string", "description": "a child's full name: that child, with its report"}}}`
	runSpawnSchema = `{"type": "object", "additionalProperties": false, "required": ["task", "budget"],
  "properties": {
    "task": {"type": "string", "description": "the child's goal"},
    "name": {"type": "string", "description": "a short name for the child (a DNS label); asking again with it is the same child"},
    "tier": {"type": "string", "description": "the child's tier (default: this run's)"},
    "deadlineSeconds": {"type": "integer", "description": "the child's deadline (default and at most: what is left of this run's)"},
    "budget": {"type": "object", "required": ["modelRequests"], "properties": {
      "modelRequests": {"type": "integer", "description": "model requests, the output reserve included (at least 1)"},
      "toolCalls": {"type": "integer", "description": "tool calls"},
      "tokens": {"type": "integer", "description": "tokens (required when this run's budget counts tokens)"},
      "cost": {"type": "string", "description": "cost, a decimal amount such as \"0.50\" (required when this run's budget counts cost)"},
      "outputReserve": {"type": "object", "description": "the child's own output reserve, inside its budget (same units)"}}}}}`
)

// childTool is the door's description of run.spawn and run.children.
func childTool(name string) builtin {
	b := builtin{
		description: "Start a child run for an independent sub-task. Its budget is carved out of this run's working " +
			"budget now and comes back, less what the child used, when it ends. Read its outcome with run.children.",
		schema: map[string]any{},
	}
	raw := runSpawnSchema
	if name == gatewayapi.ToolRunChildren {
		b.description = "Read this run's child runs: each one's phase, reason, settlement, carved budget and usage; " +
			"with a name, that child with its report's sections."
		raw = runChildrenSchema
	}
	_ = json.Unmarshal([]byte(raw), &b.schema)
	return b
}
