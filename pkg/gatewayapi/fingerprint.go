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

package gatewayapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// fingerprintLength is the length of a fingerprint in hex digits.
const fingerprintLength = 32

// CanonicalJSON encodes v as canonical JSON: objects with sorted keys, no
// insignificant whitespace, no HTML escaping. Equal arguments give equal
// bytes whatever their Go representation (struct, map, decoded JSON).
func CanonicalJSON(v any) ([]byte, error) {
	if v == nil {
		return []byte("null"), nil
	}
	// Round-trip through a generic value: structs become maps (whose keys
	// encoding/json sorts) and numbers keep their literal text.
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Fingerprint is the canonical fingerprint of a call, used for repeat
// detection (status.calls): sha256 over the tool name, the canonical JSON of
// the arguments and the caller's context, as 32 hex digits.
func Fingerprint(tool string, args any, context string) (string, error) {
	canon, err := CanonicalJSON(args)
	if err != nil {
		return "", fmt.Errorf("fingerprint of %s: arguments are not JSON: %w", tool, err)
	}
	return FingerprintOf(tool, canon, context), nil
}

// FingerprintOf is Fingerprint of arguments already in canonical JSON.
func FingerprintOf(tool string, canonArgs []byte, context string) string {
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canonArgs)
	h.Write([]byte{0})
	h.Write([]byte(context))
	return hex.EncodeToString(h.Sum(nil))[:fingerprintLength]
}

// IdempotencyKey is the key of a call of an idempotent tool: derived from the
// run and the call's fingerprint, so a replacement attempt repeating the
// same call uses the same key.
func IdempotencyKey(run, fingerprint string) string {
	sum := sha256.Sum256([]byte(run + "\x00" + fingerprint))
	return "idem-" + hex.EncodeToString(sum[:])[:fingerprintLength]
}

// ActionID is the id under which a call that needs confirmation is awaited
// (status.awaitingApproval) and approved (spec.approvals): the tool name and
// 128 bits of SHA-256 over the tool name and the canonical arguments, stable
// across attempts, so an approval given to one attempt also answers a
// replacement attempt making the same call.
//
// It never depends on the caller's context string (which repeat detection
// keeps, see Fingerprint): the approver does not see the context, so an
// agent that chooses it must not be able to steer an approval onto other
// arguments (security review, issue 25 item 1).
func ActionID(tool string, canonArgs []byte) string {
	return tool + "-" + FingerprintOf(tool, canonArgs, "")
}

// ActionIDOf is ActionID of arguments in any JSON-encodable form.
func ActionIDOf(tool string, args any) (string, error) {
	canon, err := CanonicalJSON(args)
	if err != nil {
		return "", fmt.Errorf("action id of %s: arguments are not JSON: %w", tool, err)
	}
	return ActionID(tool, canon), nil
}
