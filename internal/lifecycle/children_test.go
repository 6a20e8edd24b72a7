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

package lifecycle

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

var childLimits = ChildLimits{MaxDepth: 2, MaxChildren: 3, MaxConcurrent: 2}

// parent is a root with a budget of 40 requests, 20 tool calls and 5.00,
// a reserve of 4, 2 and 0.50, that used 10 requests and 1.00 itself.
func parent() Carving {
	return Carving{
		Budget:  v1alpha1.Usage{ModelRequests: 40, ToolCalls: 20, Cost: 5_000_000},
		Reserve: v1alpha1.Usage{ModelRequests: 4, ToolCalls: 2, Cost: 500_000}, Cost: true,
		Own: v1alpha1.Usage{ModelRequests: 10, Cost: 1_000_000},
	}
}

func TestAdmitChild(t *testing.T) {
	want := v1alpha1.Usage{ModelRequests: 10, ToolCalls: 5, Tokens: 999, Cost: 1_500_000}
	cases := map[string]struct {
		c       Carving
		want    v1alpha1.Usage
		carved  v1alpha1.Usage // the parent's Carved after, when admitted
		refusal string         // the limit named, when refused
		message string
	}{
		"carved from the working allowance; tokens are not budgeted by the parent, so not carved": {
			c: parent(), want: want, carved: v1alpha1.Usage{ModelRequests: 10, ToolCalls: 5, Cost: 1_500_000},
		},
		"exactly what is left of the working allowance": {
			c: parent(), want: v1alpha1.Usage{ModelRequests: 26, ToolCalls: 18, Cost: 3_500_000},
			carved: v1alpha1.Usage{ModelRequests: 26, ToolCalls: 18, Cost: 3_500_000},
		},
		"never the reserve: one cent more than the working allowance": {
			c: parent(), want: v1alpha1.Usage{ModelRequests: 1, Cost: 3_510_000}, refusal: "cost",
			message: "a child's budget of 3.51 cost exceeds the 3.50 the parent has left to carve (its working allowance, never its reserve)",
		},
		"what finished children used and unfinished ones hold counts against it": {
			c: func() Carving {
				c := parent()
				c.Carved, c.Returned, c.Live, c.Children = v1alpha1.Usage{ModelRequests: 20}, v1alpha1.Usage{ModelRequests: 5}, 1, 2
				return c
			}(),
			want: v1alpha1.Usage{ModelRequests: 2}, refusal: "modelRequests",
			message: "a child's budget of 2 modelRequests exceeds the 1 the parent has left to carve",
		},
		"depth": {
			c: func() Carving { c := parent(); c.Depth = 2; return c }(), want: want, refusal: "children.maxDepth",
			message: "a child would be at depth 3, beyond the policy's children.maxDepth of 2",
		},
		"fan-out": {
			c: func() Carving { c := parent(); c.Children = 3; return c }(), want: want, refusal: "children.maxChildren",
			message: "the run has created 3 children, the policy's children.maxChildren",
		},
		"concurrency": {
			c: func() Carving { c := parent(); c.Children, c.Live = 2, 2; return c }(), want: want, refusal: "children.maxConcurrent",
			message: "2 children of the run are unfinished, the policy's children.maxConcurrent",
		},
		"a child needs a model request": {
			c: parent(), want: v1alpha1.Usage{ToolCalls: 1}, refusal: "modelRequests",
			message: "a child needs a budget of at least 1 model request",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, r := AdmitChild(tc.c, tc.want, childLimits)
			if tc.refusal != "" {
				if r == nil || r.Limit != tc.refusal || got != tc.c {
					t.Fatalf("want a refusal naming %s and the ledger unchanged, got %+v, %+v", tc.refusal, r, got)
				}
				if !strings.Contains(r.Message, tc.message) {
					t.Errorf("message %q does not contain %q", r.Message, tc.message)
				}
				return
			}
			if r != nil {
				t.Fatalf("refused: %s", r.Message)
			}
			if diff := cmp.Diff(tc.carved, got.Carved); diff != "" {
				t.Errorf("carved (-want +got):\n%s", diff)
			}
			if got.Children != tc.c.Children+1 || got.Live != tc.c.Live+1 {
				t.Errorf("children %d, live %d", got.Children, got.Live)
			}
		})
	}
}

func TestEndChildReturnsWhatItDidNotUse(t *testing.T) {
	c, r := AdmitChild(parent(), v1alpha1.Usage{ModelRequests: 10, ToolCalls: 5, Cost: 1_500_000}, childLimits)
	if r != nil {
		t.Fatal(r)
	}
	c = EndChild(c, v1alpha1.Usage{ModelRequests: 10, ToolCalls: 5, Cost: 1_500_000}, v1alpha1.Usage{ModelRequests: 4, Cost: 600_000})
	if c.Carved != (v1alpha1.Usage{}) || c.Returned != (v1alpha1.Usage{ModelRequests: 4, Cost: 600_000}) || c.Live != 0 {
		t.Fatalf("after the child: carved %+v, returned %+v, live %d", c.Carved, c.Returned, c.Live)
	}
	if got, want := c.Available(), (v1alpha1.Usage{ModelRequests: 22, ToolCalls: 18, Cost: 2_900_000}); got != want {
		t.Errorf("available %+v, want %+v: 36 working − 10 own − 4 the child used", got, want)
	}
}

// ---- The property: a tree of concurrent admissions never overdraws. ----

// treeNode is a run of the simulated tree; its ledger lives in the store.
type treeNode struct {
	parent int // -1 for the root
	budget v1alpha1.Usage
	done   bool
}

// treeStore is the API server as the property needs it: each run's ledger
// under a version, written only by compare-and-swap (resourceVersion).
type treeStore struct {
	mu      sync.Mutex
	nodes   []treeNode
	ledger  []Carving
	version []int
	root    v1alpha1.Usage
	broken  string // the first invariant seen broken
	stats   struct{ admitted, refused, conflicts, ended int }
}

func (s *treeStore) read(i int) (Carving, int, treeNode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ledger[i], s.version[i], s.nodes[i]
}

// commit writes ledger l of run i if its version is still v, then adds the
// child (budget child, reserve childReserve) when there is one, and checks
// the invariants over the whole tree.
func (s *treeStore) commit(i, v int, l Carving, child *Carving) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version[i] != v || s.nodes[i].done {
		s.stats.conflicts++
		return false
	}
	s.ledger[i], s.version[i] = l, v+1
	if child != nil {
		s.nodes = append(s.nodes, treeNode{parent: i, budget: child.Budget})
		s.ledger = append(s.ledger, *child)
		s.version = append(s.version, 0)
	}
	s.check()
	return true
}

// check: the sum of what every run of the tree spent itself stays within
// the root's budget, and no run's children reach into its reserve.
func (s *treeStore) check() {
	if s.broken != "" {
		return
	}
	var total v1alpha1.Usage
	for i, l := range s.ledger {
		total = add(total, l.Own)
		if less(l.Budget, add(add(l.Own, l.Carved), l.Returned)) {
			s.broken = fmt.Sprintf("run %d spent and carved %+v of a budget of %+v", i, add(add(l.Own, l.Carved), l.Returned), l.Budget)
		}
		if less(sub(l.Budget, l.Reserve), add(l.Carved, l.Returned)) {
			s.broken = fmt.Sprintf("run %d's children hold %+v, beyond its working allowance %+v: they reach into its reserve",
				i, add(l.Carved, l.Returned), sub(l.Budget, l.Reserve))
		}
	}
	if less(s.root, total) {
		s.broken = fmt.Sprintf("the tree spent %+v, beyond the root's budget %+v", total, s.root)
	}
}

// runTree drives workers goroutines of random spawns, spending (from the
// working allowance, and from the reserve once a run has no live child)
// and endings against a root budget, and returns the store.
func runTree(seed uint64, workers int) *treeStore {
	root := Carving{Budget: v1alpha1.Usage{ModelRequests: 60, ToolCalls: 30, Tokens: 100_000, Cost: 10_000_000},
		Reserve: v1alpha1.Usage{ModelRequests: 6, ToolCalls: 3, Tokens: 10_000, Cost: 1_000_000}, Tokens: true, Cost: true}
	s := &treeStore{nodes: []treeNode{{parent: -1, budget: root.Budget}}, ledger: []Carving{root}, version: []int{0}, root: root.Budget}
	lim := ChildLimits{MaxDepth: 3, MaxChildren: 4, MaxConcurrent: 3}
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			for range 300 {
				s.mu.Lock()
				i := rng.IntN(len(s.nodes))
				s.mu.Unlock()
				step(s, rng, i, lim)
			}
		})
	}
	wg.Wait()
	return s
}

// part is a random share (0 to all) of each unit of u.
func part(rng *rand.Rand, u v1alpha1.Usage) v1alpha1.Usage {
	r := func(v int64) int64 {
		if v <= 0 {
			return 0
		}
		return rng.Int64N(v + 1)
	}
	return v1alpha1.Usage{ModelRequests: r(u.ModelRequests), ToolCalls: r(u.ToolCalls), Tokens: r(u.Tokens),
		Cost: v1alpha1.Money(r(int64(u.Cost)))}
}

// step makes one random move on run i, retrying on a conflict.
func step(s *treeStore, rng *rand.Rand, i int, lim ChildLimits) {
	for {
		l, v, n := s.read(i)
		if n.done {
			return
		}
		switch op := rng.IntN(4); {
		case op == 0: // ask for a child: sometimes more than is left
			want := part(rng, add(l.Available(), v1alpha1.Usage{ModelRequests: 2, Cost: 100_000}))
			next, r := AdmitChild(l, want, lim)
			if r != nil {
				s.mu.Lock()
				s.stats.refused++
				s.mu.Unlock()
				return
			}
			child := Carving{Depth: l.Depth + 1, Budget: l.shown(want), Tokens: l.Tokens, Cost: l.Cost}
			child.Reserve = part(rng, child.Budget)
			child.Reserve.ModelRequests = min(child.Reserve.ModelRequests, child.Budget.ModelRequests-1)
			if s.commit(i, v, next, &child) {
				s.mu.Lock()
				s.stats.admitted++
				s.mu.Unlock()
				return
			}
		case op == 1: // spend from the working allowance
			l.Own = add(l.Own, part(rng, l.Available()))
			if s.commit(i, v, l, nil) {
				return
			}
		case op == 2 && l.Live == 0: // finalize: spend from the reserve
			l.Own = add(l.Own, part(rng, nonNeg(sub(l.Budget, add(l.Own, l.Returned)))))
			if s.commit(i, v, l, nil) {
				return
			}
		case op == 3 && l.Live == 0 && n.parent >= 0: // end, returning the rest to the parent
			if endNode(s, i, v) {
				return
			}
		default:
			return
		}
	}
}

// endNode ends run i (whose children all ended) and returns what it did not
// use to its parent. The child is closed first — nothing more is charged
// to it, as a Terminated run's grant is zero — and only then is its final
// usage settled with the parent (retried until the parent's write wins).
// Settling from a usage read before the child was closed lets it spend on
// after its carve came back: the first version of this test did, and the
// property caught the overdraw.
func endNode(s *treeStore, i, v int) bool {
	s.mu.Lock()
	if s.version[i] != v || s.nodes[i].done {
		s.mu.Unlock()
		return false
	}
	s.nodes[i].done, s.version[i] = true, v+1
	l, n := s.ledger[i], s.nodes[i]
	s.stats.ended++
	s.mu.Unlock()
	for {
		pl, pv, _ := s.read(n.parent)
		if s.commit(n.parent, pv, EndChild(pl, n.budget, add(l.Own, l.Returned)), nil) {
			return true
		}
	}
}

// TestChildTreesNeverOverdraw: for random trees of concurrent admissions,
// spending and endings (writes by compare-and-swap, as on the API server),
// the tree never spends beyond the root's budget and no child's budget
// reaches into a reserve above it.
func TestChildTreesNeverOverdraw(t *testing.T) {
	var admitted, refused, conflicts, nodes int
	for seed := range uint64(200) {
		s := runTree(seed, 4)
		if s.broken != "" {
			t.Fatalf("seed %d: %s", seed, s.broken)
		}
		admitted, refused, conflicts, nodes = admitted+s.stats.admitted, refused+s.stats.refused, conflicts+s.stats.conflicts,
			nodes+len(s.nodes)
	}
	t.Logf("200 trees, %d runs: %d children admitted, %d refused, %d write conflicts retried", nodes, admitted, refused, conflicts)
}

// FuzzChildTree is the same property for a fuzzer's seeds.
func FuzzChildTree(f *testing.F) {
	f.Add(uint64(1), uint8(2))
	f.Add(uint64(31), uint8(8))
	f.Fuzz(func(t *testing.T, seed uint64, workers uint8) {
		if s := runTree(seed, 1+int(workers%8)); s.broken != "" {
			t.Fatal(s.broken)
		}
	})
}

// TestWorkedLedger is the worked example of docs/children.md, step by step.
func TestWorkedLedger(t *testing.T) {
	u := func(mr, tc int64, cost string) v1alpha1.Usage {
		m, err := v1alpha1.ParseMoney(cost)
		if err != nil {
			t.Fatal(err)
		}
		return v1alpha1.Usage{ModelRequests: mr, ToolCalls: tc, Cost: m}
	}
	lim := ChildLimits{MaxDepth: 1, MaxChildren: 3, MaxConcurrent: 2}
	root := Carving{Budget: u(40, 20, "5.00"), Reserve: u(4, 2, "0.50"), Cost: true, Own: u(10, 0, "1.00")}
	expect := func(step string, c Carving, available v1alpha1.Usage) {
		t.Helper()
		if got := c.Available(); got != available {
			t.Errorf("step %s: the root can still carve %+v, want %+v", step, got, available)
		}
	}
	expect("1", root, u(26, 18, "3.50"))
	root, r := AdmitChild(root, u(10, 5, "1.50"), lim)
	if r != nil {
		t.Fatal(r)
	}
	expect("2", root, u(16, 13, "2.00"))
	if _, r = AdmitChild(root, u(10, 0, "2.10"), lim); r == nil ||
		r.Message != "a child's budget of 2.10 cost exceeds the 2.00 the parent has left to carve (its working allowance, never its reserve)" {
		t.Fatalf("step 3: %v", r)
	}
	if root, r = AdmitChild(root, u(10, 5, "2.00"), lim); r != nil {
		t.Fatal(r)
	}
	expect("4", root, u(6, 8, "0.00"))
	root = EndChild(root, u(10, 5, "1.50"), u(4, 1, "0.60"))
	expect("5", root, u(12, 12, "0.90"))
	root = EndChild(root, u(10, 5, "2.00"), u(10, 3, "2.00"))
	expect("6", root, u(12, 14, "0.90"))
	root.Own = add(root.Own, u(2, 0, "1.40")) // 0.90 of working, then the 0.50 reserve
	if total := add(root.Own, root.Returned).Cost; total != v1alpha1.Money(5_000_000) || root.Carved != (v1alpha1.Usage{}) {
		t.Errorf("step 7: the tree spent %s, carved %+v; want 5.00 and nothing carved", total, root.Carved)
	}
}
