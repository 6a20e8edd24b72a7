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
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestName(t *testing.T) {
	long := "research-run-with-a-rather-long-descriptive-name-about-kubernetes" // 65 characters
	for _, tc := range []struct {
		name    string
		run     string
		attempt int32
		want    string
	}{
		{name: "short", run: testRun, attempt: 1, want: "demo-1"},
		{name: "two digits", run: testRun, attempt: 10, want: "demo-10"},
		{name: "dotted run name", run: "report.v2", attempt: 2, want: "report.v2-2"},
		{name: "exactly 63", run: strings.Repeat("a", 61), attempt: 1, want: strings.Repeat("a", 61) + "-1"},
		{
			name: "64 is cut, with the hash of the whole run name",
			run:  strings.Repeat("a", 62), attempt: 1,
			want: strings.Repeat("a", 52) + "-" + hashOf(strings.Repeat("a", 62)) + "-1",
		},
		// Golden: names must not change across operator versions, or an
		// upgraded operator would not find the attempts it created.
		{name: "golden long", run: long, attempt: 3, want: "research-run-with-a-rather-long-descriptive-name-abo-120ff1d8-3"},
		{
			name: "a cut that ends in a hyphen or dot drops it",
			run:  strings.Repeat("a", 50) + "-.b" + strings.Repeat("c", 20), attempt: 1,
			want: strings.Repeat("a", 50) + "-" + hashOf(strings.Repeat("a", 50)+"-.b"+strings.Repeat("c", 20)) + "-1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Name(tc.run, tc.attempt)
			if got != tc.want {
				t.Errorf("Name(%q, %d) = %q, want %q", tc.run, tc.attempt, got, tc.want)
			}
			if len(got) > 63 {
				t.Errorf("Name(%q, %d) = %q has %d characters", tc.run, tc.attempt, got, len(got))
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("Name(%q, %d) = %q is not a valid object name: %v", tc.run, tc.attempt, got, errs)
			}
			if again := Name(tc.run, tc.attempt); again != got {
				t.Errorf("Name is not deterministic: %q then %q", got, again)
			}
		})
	}
}

func TestNameLength(t *testing.T) {
	runs := []string{
		"r",
		strings.Repeat("a", 52),
		strings.Repeat("a", 53),
		strings.Repeat("b", 60) + ".x",
		strings.Repeat("a.", 126) + "z", // 253: the longest object name
	}
	attempts := []int32{1, 9, 10, 999, math.MaxInt32}
	seen := map[string]string{}
	for _, run := range runs {
		for _, n := range attempts {
			got := Name(run, n)
			if len(got) > 63 {
				t.Errorf("Name(%d chars, %d) has %d characters", len(run), n, len(got))
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("Name(%d chars, %d) = %q: %v", len(run), n, got, errs)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("Name(%q, %d) = %q collides with %s", run, n, got, other)
			}
			seen[got] = run
		}
	}
}

func TestNameLongRunsStayDistinct(t *testing.T) {
	prefix := strings.Repeat("p", 70)
	a, b := Name(prefix+"-alpha", 1), Name(prefix+"-beta", 1)
	if a == b {
		t.Fatalf("two long runs with a shared prefix got the same name %q", a)
	}
	// Attempts of one run keep the same hash, so they are recognisably one run's.
	one, ten := Name(prefix+"-alpha", 1), Name(prefix+"-alpha", 10)
	if h := hashOf(prefix + "-alpha"); !strings.HasSuffix(one, h+"-1") || !strings.HasSuffix(ten, h+"-10") {
		t.Errorf("attempts of one run do not share the run's hash %s: %q, %q", h, one, ten)
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "short", in: testRun, want: testRun},
		{name: "empty", in: "", want: ""},
		{name: "exactly 63", in: strings.Repeat("s", 63), want: strings.Repeat("s", 63)},
		{name: "64 is cut", in: strings.Repeat("s", 64), want: strings.Repeat("s", 54) + "-" + hashOf(strings.Repeat("s", 64))},
		{
			name: "cut drops trailing punctuation",
			in:   strings.Repeat("s", 52) + "._-" + strings.Repeat("t", 20),
			want: strings.Repeat("s", 52) + "-" + hashOf(strings.Repeat("s", 52)+"._-"+strings.Repeat("t", 20)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LabelValue(tc.in)
			if got != tc.want {
				t.Errorf("LabelValue(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Errorf("LabelValue(%q) = %q is not a label value: %v", tc.in, got, errs)
			}
		})
	}
}

// hashOf is the 8-hex-digit hash Name and LabelValue use, computed the long way.
func hashOf(s string) string {
	full := shorten(s, 0, "")
	return full[len(full)-hashLength:]
}
