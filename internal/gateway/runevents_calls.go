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
	"encoding/json"
	"strings"
	"sync"

	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// maxProposals bounds the model-proposed tool calls an attempt remembers
// for the calls that follow.
const maxProposals = 32

// proposals ties the tool calls an attempt makes to the ones its model
// proposed: the model's answer streams a tool-call block (TOOL_CALL_START,
// ARGS, END with the provider's id); when the agent then makes that call
// through a door, its result is that block's TOOL_CALL_RESULT, as AG-UI
// clients expect, instead of a second block.
type proposals struct {
	mu      sync.Mutex
	open    map[string]*proposal // streaming, by block id
	done    []proposal           // closed, oldest first
	blockOf map[string]string    // agent API call id → its block
}

type proposal struct {
	id, name, args string // name and arguments normalized
}

// emitModel records the tool calls of a model answer's events and emits
// them.
func (k *keeper) emitModel(evs []stream.Event) {
	p := &k.proposed
	p.mu.Lock()
	for _, ev := range evs {
		switch ev.Type {
		case stream.ToolCallStart:
			if p.open == nil {
				p.open = map[string]*proposal{}
			}
			p.open[ev.ToolCallID] = &proposal{id: ev.ToolCallID, name: toolKey(ev.ToolCallName)}
		case stream.ToolCallArgs:
			if c := p.open[ev.ToolCallID]; c != nil {
				c.args += ev.Delta
			}
		case stream.ToolCallEnd:
			if c := p.open[ev.ToolCallID]; c != nil {
				delete(p.open, ev.ToolCallID)
				c.args = argsKey(c.args)
				p.done = append(p.done, *c)
				if len(p.done) > maxProposals {
					p.done = p.done[1:]
				}
			}
		}
	}
	p.mu.Unlock()
	k.emit(evs...)
}

// refusedArgsBytes bounds the arguments a refused call's block streams: an
// agent cannot fill the store with calls the gateway refuses.
const refusedArgsBytes = 256

// toolBlock is the run-stream block of one tool call the agent makes: the
// model's proposal of it, or a block of its own, which announce streams
// once the call is admitted or refused.
type toolBlock struct {
	id, tool string
	args     string // redacted JSON
	pending  bool   // a block of its own, not announced yet
}

// toolCallBlock returns the block of a tool call the agent makes: the
// model's proposal of it (same tool, same arguments), which is then spent,
// or else a new block, streamed by announce. Nil without an Emitter.
func (k *keeper) toolCallBlock(tool string, args map[string]any) *toolBlock {
	if k.g.opts.Events == nil {
		return nil
	}
	raw, _ := json.Marshal(chain.RedactArguments(args))
	name, key := toolKey(tool), argsKey(string(raw))
	p := &k.proposed
	p.mu.Lock()
	for i, c := range p.done {
		if c.name == name && c.args == key {
			p.done = append(p.done[:i], p.done[i+1:]...)
			p.mu.Unlock()
			return &toolBlock{id: c.id, tool: tool}
		}
	}
	p.mu.Unlock()
	return &toolBlock{id: k.blockID("tool"), tool: tool, args: string(raw), pending: true}
}

// announce streams a block of its own (once) and returns the block's id:
// an admitted call with its redacted arguments, a refused one with them
// cut to refusedArgsBytes.
func (k *keeper) announce(b *toolBlock, admitted bool) string {
	if b == nil {
		return ""
	}
	if b.pending {
		b.pending = false
		args := b.args
		if !admitted {
			args = textutil.Truncate(args, refusedArgsBytes)
		}
		k.emit(
			stream.Event{Type: stream.ToolCallStart, ToolCallID: b.id, ToolCallName: b.tool},
			stream.Event{Type: stream.ToolCallArgs, ToolCallID: b.id, Delta: args},
			stream.Event{Type: stream.ToolCallEnd, ToolCallID: b.id},
		)
	}
	return b.id
}

// bindCall remembers the block of an agent API call until its outcome.
func (k *keeper) bindCall(callID, block string) {
	if block == "" {
		return
	}
	p := &k.proposed
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blockOf == nil {
		p.blockOf = map[string]string{}
	}
	if len(p.blockOf) >= 4*maxProposals {
		clear(p.blockOf) // outcomes never reported: forget them
	}
	p.blockOf[callID] = block
}

// callBlock returns (and forgets) the block of an agent API call.
func (k *keeper) callBlock(callID string) string {
	p := &k.proposed
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.blockOf[callID]
	delete(p.blockOf, callID)
	if !ok {
		return callID
	}
	return b
}

// toolKey compares tool names as models see them: function names cannot
// hold dots, so agents map notes.write to notes_write (case and '-' versus
// '_' are not told apart either).
func toolKey(name string) string {
	return strings.ReplaceAll(strings.ToLower(gatewayapi.FunctionName(name)), "-", "_")
}

// argsKey is arguments' canonical JSON (the text itself if it is not an
// object).
func argsKey(raw string) string {
	var m map[string]any
	if json.Unmarshal([]byte(raw), &m) != nil {
		return raw
	}
	canon, err := gatewayapi.CanonicalJSON(chain.RedactArguments(m))
	if err != nil {
		return raw
	}
	return string(canon)
}
