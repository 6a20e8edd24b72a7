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
	"testing"
	"time"
)

// Every phase is either waiting for admission, active (holding its session)
// or Terminated, and exactly one of them.
func TestPhaseIsWaitingIsActive(t *testing.T) {
	cases := map[Phase]struct{ wantWaiting, wantActive bool }{
		"":              {wantWaiting: true},
		PhasePending:    {wantWaiting: true},
		PhaseQueued:     {wantWaiting: true},
		PhaseRunning:    {wantActive: true},
		PhaseRecovering: {wantActive: true},
		PhaseFinalizing: {wantActive: true},
		PhaseTerminated: {},
	}
	for p, want := range cases {
		if got := p.IsWaiting(); got != want.wantWaiting {
			t.Errorf("Phase(%q).IsWaiting() = %v, want %v", p, got, want.wantWaiting)
		}
		if got := p.IsActive(); got != want.wantActive {
			t.Errorf("Phase(%q).IsActive() = %v, want %v", p, got, want.wantActive)
		}
	}
}

func TestAdmissionOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	cases := map[string]struct {
		aCreated time.Time
		aName    string
		bCreated time.Time
		bName    string
		want     int
	}{
		"earlier first, whatever the names":  {t0, "z", t1, "a", -1},
		"later last, whatever the names":     {t1, "a", t0, "z", 1},
		"same time: the name breaks the tie": {t0, "a", t0, "b", -1},
		"same time, name after":              {t0, "b", t0, "a", 1},
		"same run":                           {t0, "a", t0, "a", 0},
	}
	for name, c := range cases {
		if got := AdmissionOrder(c.aCreated, c.aName, c.bCreated, c.bName); got != c.want {
			t.Errorf("%s: AdmissionOrder = %d, want %d", name, got, c.want)
		}
	}
}
