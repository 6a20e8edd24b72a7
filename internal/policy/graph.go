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

import "slices"

// stronglyConnected returns the strongly connected components of the graph
// adj (Tarjan's algorithm), each sorted ascending, in a deterministic order.
func stronglyConnected(adj [][]int) [][]int {
	n := len(adj)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var sccs [][]int
	next := 0

	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range adj[v] {
			switch {
			case index[w] < 0:
				visit(w)
				low[v] = min(low[v], low[w])
			case onStack[w]:
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var scc []int
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			scc = append(scc, w)
			if w == v {
				break
			}
		}
		slices.Sort(scc)
		sccs = append(sccs, scc)
	}
	for v := range n {
		if index[v] < 0 {
			visit(v)
		}
	}
	slices.SortFunc(sccs, func(a, b []int) int { return a[0] - b[0] })
	return sccs
}

// shortestCycle returns a shortest cycle through start within the component
// scc, as start, ..., start. scc must be strongly connected with more than
// one vertex. Ties go to lower vertex numbers, so the result is deterministic.
func shortestCycle(adj [][]int, scc []int, start int) []int {
	in := make(map[int]bool, len(scc))
	for _, v := range scc {
		in[v] = true
	}
	parent := map[int]int{start: -1}
	queue := []int{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range adj[v] {
			if !in[w] {
				continue
			}
			if w == start {
				path := []int{start}
				for u := v; u != start; u = parent[u] {
					path = append(path, u)
				}
				path = append(path, start)
				// path is start, v, ..., start reversed in the middle.
				slices.Reverse(path[1 : len(path)-1])
				return path
			}
			if _, seen := parent[w]; !seen {
				parent[w] = v
				queue = append(queue, w)
			}
		}
	}
	return []int{start, start} // unreachable for a strongly connected scc
}
