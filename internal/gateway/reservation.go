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
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"regexp"
	"slices"
	"strings"
)

// The prompt bound of a request that extends an earlier one. An agent
// resends its whole conversation every turn (Claude Code: tens to hundreds
// of kilobytes, with max_tokens 128000), so the body's bytes — a hard bound,
// as no tokenizer maps less than a byte to a token — are about four times
// the prompt, and a grant of a few hundred thousand tokens would admit one
// request at a time. When a request's messages (its input items, on the
// Responses door) begin with all of an earlier request's of the same
// attempt, to the same model, with the same everything else that makes the
// prompt (system, instructions, tools), its prompt is bounded by the tokens
// that earlier request was charged (its prompt and its answer: the answer
// is now part of the conversation) plus the bytes of the messages that are
// new. Cache markers (cache_control, which Claude Code moves every turn)
// are not part of the comparison: they change no token of the prompt.

// promptShape is what a request's prompt is made of, as the bound compares
// it: the model, a digest of everything but the conversation, and each
// message's digest and size.
type promptShape struct {
	model string
	rest  uint64
	msgs  []uint64
	sizes []int64
	body  int64 // the request body's bytes, as the client sent it
}

// promptMemory is an earlier request's shape and the tokens it was
// charged, as reported by its provider.
type promptMemory struct {
	shape  *promptShape
	tokens int64
}

// promptMemories is how many earlier requests an attempt remembers: an
// agent and its subagents run a few conversations side by side.
const promptMemories = 8

// boundPrompt is a request's prompt bound: bytesBound (the bytes of the
// body the provider reads: the request, or its translation) unless the
// request extends one of prev, then the smallest of prev's tokens plus its
// new messages' bytes (scaled by what a translation adds), and never more
// than bytesBound. It reports whether an earlier request bounded it.
func boundPrompt(s *promptShape, bytesBound int64, prev []promptMemory) (int64, bool) {
	if s == nil || s.body <= 0 {
		return bytesBound, false
	}
	best, extended := bytesBound, false
	for _, p := range prev {
		ps := p.shape
		if ps.model != s.model || ps.rest != s.rest || len(ps.msgs) > len(s.msgs) || !slices.Equal(ps.msgs, s.msgs[:len(ps.msgs)]) {
			continue
		}
		var fresh int64
		for _, n := range s.sizes[len(ps.msgs):] {
			fresh += n
		}
		// A translation may write the new messages longer than the client
		// did: scale by the bodies' ratio, rounding up.
		if bytesBound > s.body {
			fresh = (fresh*bytesBound + s.body - 1) / s.body
		}
		if b := p.tokens + fresh; b < best {
			best, extended = b, true
		}
	}
	return best, extended
}

// remember keeps an answered request's shape and charge, the latest first,
// replacing the one it extends.
func rememberPrompt(prev []promptMemory, s *promptShape, tokens int64) []promptMemory {
	if s == nil || tokens < 1 {
		return prev
	}
	out := make([]promptMemory, 0, promptMemories)
	out = append(out, promptMemory{shape: s, tokens: tokens})
	for _, p := range prev {
		ps := p.shape
		extended := ps.model == s.model && ps.rest == s.rest && len(ps.msgs) <= len(s.msgs) &&
			slices.Equal(ps.msgs, s.msgs[:len(ps.msgs)])
		if !extended && len(out) < promptMemories {
			out = append(out, p)
		}
	}
	return out
}

// shapeSeed seeds the digests (they are compared within the process only).
var shapeSeed = maphash.MakeSeed()

// cacheMarker is a cache_control key and its object: a key, as a quote
// inside a JSON string is escaped.
var cacheMarker = regexp.MustCompile(`,"cache_control":\{[^{}]*\}|"cache_control":\{[^{}]*\},?`)

// shapeDigest is the digest of a JSON value without its cache markers.
func shapeDigest(raw []byte) uint64 {
	if bytes.Contains(raw, []byte(`"cache_control"`)) {
		raw = cacheMarker.ReplaceAll(raw, nil)
	}
	return maphash.Bytes(shapeSeed, raw)
}

// notPrompt are request fields that are no part of the prompt: the
// completion's cap, streaming, and what only the gateway or the provider's
// bookkeeping reads.
var notPrompt = map[string]bool{fieldMaxTokens: true, fieldMaxCompletionTokens: true, fieldMaxOutputTokens: true,
	jStream: true, wireStreamOptions: true, fieldMetadata: true, wireClientMeta: true, wireCacheKey: true,
	fieldStore: true, wireInclude: true}

// shapeOf is the shape of a request whose conversation is the array in
// fields[list] (a request without one has no shape: its bound is its bytes).
// Fields named agentrun_* are the gateway's own and no part of the prompt.
func shapeOf(model string, body int, fields map[string]json.RawMessage, list string) *promptShape {
	var items []json.RawMessage
	if json.Unmarshal(fields[list], &items) != nil {
		return nil
	}
	return shapeOfItems(model, body, fields, list, items)
}

// shapeOfItems is shapeOf of a request whose list the door decoded already
// (items): a large request's list is not decoded twice.
func shapeOfItems(model string, body int, fields map[string]json.RawMessage, list string, items []json.RawMessage) *promptShape {
	if len(items) == 0 {
		return nil
	}
	s := &promptShape{model: model, body: int64(body), msgs: make([]uint64, len(items)), sizes: make([]int64, len(items))}
	for i, it := range items {
		s.msgs[i], s.sizes[i] = shapeDigest(it), int64(len(it))
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k != list && !notPrompt[k] && !strings.HasPrefix(k, "agentrun_") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var h maphash.Hash
	h.SetSeed(shapeSeed)
	for _, k := range keys {
		_, _ = h.WriteString(k)
		_ = h.WriteByte(0)
		var d [8]byte
		binary.LittleEndian.PutUint64(d[:], shapeDigest(bytes.TrimSpace(fields[k])))
		_, _ = h.Write(d[:])
	}
	s.rest = h.Sum64()
	return s
}

// HeaderMaxTokensClamped says, on every model door, the completion cap the
// gateway forwarded when it lowered the request's own (max_tokens,
// max_completion_tokens or max_output_tokens) to fit what remains of the
// grant.
const HeaderMaxTokensClamped = "agentrun-max-tokens-clamped"

// tightPrompt is the prompt bound of a request of shape s whose body's
// bytes bound it at bytesBound, from what the attempt remembers.
func (k *keeper) tightPrompt(s *promptShape, bytesBound int64) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, _ := boundPrompt(s, bytesBound, k.prompts)
	return b
}
