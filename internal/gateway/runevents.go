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
	"crypto/rand"
	"encoding/hex"
	"encoding/json"

	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/openai"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// Emitter receives the run-stream events the gateway produces: model
// stream blocks, tool calls and their results, refusals. store.Producer is
// one: Emit never waits for the stream, so a run is never slowed by it.
type Emitter interface {
	Emit(run stream.RunKey, ev stream.Event) error
}

// EventRefused is the CUSTOM event of a refused model request or tool call.
const EventRefused = "agentrun.dev/refused"

// emit sends events of the keeper's run to the stream, marked with their
// source and attempt, each kept for the policy's spec.events.maxAge (the
// attempt's snapshot; its default when the snapshot has none), within the
// policy's spec.events.maxBytes (stream.Budget: past it, deltas are
// dropped and results cut, so one run cannot evict other runs' history
// from the store). Without an Emitter it does nothing.
func (k *keeper) emit(evs ...stream.Event) {
	em := k.g.opts.Events
	if em == nil || len(evs) == 0 {
		return
	}
	k.mu.Lock()
	run := stream.RunKey{Namespace: k.key.Namespace, Name: k.obj.Spec.RunName}
	if ref := ownerRun(k.obj); ref != nil {
		run.UID = string(ref.UID)
	}
	ttl := k.obj.Spec.Policy.Events.Age()
	if k.streamMeta == nil {
		k.streamMeta, _ = json.Marshal(map[string]string{"source": "gateway", "attempt": k.key.Name})
	}
	meta := k.streamMeta
	k.streamBudget.Max = k.obj.Spec.Policy.Events.Bytes()
	dropped := k.streamBudget.Dropped()
	admitted := make([]stream.Event, 0, len(evs))
	for _, ev := range evs {
		admitted = append(admitted, k.streamBudget.Admit(ev)...)
	}
	dropped = k.streamBudget.Dropped() - dropped
	policy := k.obj.Spec.Policy.Name
	k.mu.Unlock()
	if dropped > 0 {
		k.g.metrics.streamDropped.WithLabelValues(k.key.Namespace, policy).Add(float64(dropped))
	}
	for _, ev := range admitted {
		ev.Metadata = meta
		ev.TTL = ttl
		if err := em.Emit(run, ev); err != nil {
			k.log.V(1).Info("A run-stream event was refused", "type", ev.Type, "error", err.Error())
		}
	}
}

// blockID returns a new block id of the attempt: unique across gateway
// restarts, so a resumed stream never mixes two blocks.
func (k *keeper) blockID(kind string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return k.key.Name + "/" + kind + "-" + hex.EncodeToString(b[:])
}

// emitToolResult sends a tool call's result (redacted).
func (k *keeper) emitToolResult(id, result string) {
	if id == "" {
		return
	}
	k.emit(stream.Event{Type: stream.ToolCallResult, ToolCallID: id, MessageID: id + "/result",
		Role: "tool", Content: chain.RedactText(result)})
}

// A refusal's CUSTOM event names the call and says why in at most these
// bytes: both can carry what the agent sent (an unknown tool's name).
const (
	refusedCallBytes    = 256
	refusedMessageBytes = 1024
)

// emitRefusal sends a refusal with its code and reason.
func (k *keeper) emitRefusal(call string, e *apiError) {
	if k.g.opts.Events == nil {
		return
	}
	v, _ := json.Marshal(map[string]string{"call": textutil.Truncate(call, refusedCallBytes), "code": e.body.Code,
		"message": textutil.Truncate(chain.RedactText(e.body.Message), refusedMessageBytes)})
	k.emit(stream.Event{Type: stream.Custom, Name: EventRefused, Value: v})
}

// modelTranslator returns the translator of one model answer into stream
// blocks (text, reasoning, tool calls with redacted arguments), or nil
// without an Emitter.
func (k *keeper) modelTranslator() *openai.Translator {
	if k.g.opts.Events == nil {
		return nil
	}
	return openai.New(openai.Options{IDPrefix: k.blockID("model"), Now: k.g.clock.Now, Redact: chain.RedactText})
}

// stream emits what f makes of the exchange's answer, if it is streamed.
func (x *exchange) stream(f func(*openai.Translator) []stream.Event) {
	if x.tr != nil {
		x.k.emitModel(f(x.tr))
	}
}
