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

package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestGet(t *testing.T) {
	now := fixtureTeamA(t)
	out, _, err := run(t, now, nil, "get", "-n", teamA)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "get.txt", out)

	out, _, err = run(t, now, nil, "get", "compare-licences", "-n", teamA)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "get-one.txt", out)

	out, _, err = run(t, now, nil, "get", "-A")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`\nteam-a +compare-licences +research `)
	if !strings.HasPrefix(out, "NAMESPACE ") || !row.MatchString(out) {
		t.Errorf("get -A: want a NAMESPACE column and team-a's runs, got\n%s", out)
	}

	_, errOut, err := run(t, now, nil, "get", "-n", "default")
	if err != nil || errOut != "No resources found in default namespace.\n" {
		t.Errorf("get in an empty namespace: err %v, stderr %q", err, errOut)
	}

	_, _, err = run(t, now, nil, "get", "no-such-run", "-n", teamA)
	if err == nil || !strings.Contains(err.Error(), `researchruns.agentrun.dev "no-such-run" not found`) {
		t.Errorf("get of a missing run: %v", err)
	}
}

func TestGetOutput(t *testing.T) {
	now := fixtureTeamA(t)
	out, _, err := run(t, now, nil, "get", "compare-licences", "-n", teamA, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rr v1alpha1.ResearchRun
	if err := json.Unmarshal([]byte(out), &rr); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if rr.Kind != "ResearchRun" || rr.APIVersion != "agentrun.dev/v1alpha1" || rr.Status.Reason != "BudgetExhausted" ||
		len(rr.ManagedFields) != 0 {
		t.Errorf("-o json: kind %q apiVersion %q reason %q managedFields %d", rr.Kind, rr.APIVersion, rr.Status.Reason,
			len(rr.ManagedFields))
	}

	out, _, err = run(t, now, nil, "get", "-n", teamA, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.ResearchRunList
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("-o yaml: %v", err)
	}
	if list.Kind != "List" || len(list.Items) != 4 || list.Items[0].Name != "compare-licences" {
		t.Errorf("-o yaml: kind %q, %d items", list.Kind, len(list.Items))
	}

	if _, _, err := run(t, now, nil, "get", "-n", teamA, "-o", "wide"); err == nil {
		t.Error("-o wide: want an error")
	}
}

func TestWhyBudgetExhausted(t *testing.T) {
	now := fixtureTeamA(t)
	out, _, err := run(t, now, nil, "why", "compare-licences", "-n", teamA)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "why-budget-exhausted.txt", out)
	if strings.Contains(out, "\x1b[") {
		t.Error("colors without a terminal")
	}
}

func TestWhyAwaitingApproval(t *testing.T) {
	now := fixtureTeamA(t)
	out, _, err := run(t, now, nil, "why", "deploy-docs", "-n", teamA)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "why-awaiting-approval.txt", out)
	// The approver reads the whole arguments, also what the agent put
	// beyond the first 256 bytes (issue 25 item 9).
	if !strings.Contains(out, docsArgs) || !strings.Contains(out, docsArgsSHA256) {
		t.Errorf("why does not show the full arguments and their hash:\n%s", out)
	}
}

func TestWhyOthers(t *testing.T) {
	now := fixtureTeamA(t)
	for _, name := range []string{"survey-vector-dbs", "weekly-digest"} {
		out, _, err := run(t, now, nil, "why", name, "-n", teamA)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "why-"+name+".txt", out)
	}
}

func TestTop(t *testing.T) {
	now := fixtureTeamA(t)
	out, _, err := run(t, now, nil, "top", "-n", teamA)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "top.txt", out)
}

func TestCompletion(t *testing.T) {
	now := fixtureTeamA(t)
	out, _, err := run(t, now, nil, "__complete", "why", "-n", teamA, "c")
	if err != nil {
		t.Fatal(err)
	}
	if out != "compare-licences\tTerminated\n:4\n" {
		t.Errorf("run names: got %q", out)
	}
	out, _, err = run(t, now, nil, "__complete", "approve", "-n", teamA, "deploy-docs", "")
	if err != nil {
		t.Fatal(err)
	}
	if out != "report.publish-3f9a0c1d2e4b5a69\treport.publish, risk High\n:4\n" {
		t.Errorf("pending actions: got %q", out)
	}
	out, _, err = run(t, now, nil, "completion", "bash")
	if err != nil || !strings.Contains(out, "__start_kubectl-agentrun") {
		t.Errorf("completion bash: %v", err)
	}
}

// TestKubectlFlags runs the commands the way the binary does: clients
// built from kubectl's own flags (--kubeconfig, -n, --context).
func TestKubectlFlags(t *testing.T) {
	now := fixtureTeamA(t)
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "alice", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	noColor := false
	cmd := NewCommand(Options{
		Streams: genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
		Now:     func() time.Time { return now },
		Color:   &noColor,
	})
	cmd.SetArgs([]string{"--kubeconfig", path, "get", "-n", teamA})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err, errOut.String())
	}
	golden(t, "get.txt", out.String())

	cmd = NewCommand(Options{Streams: genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}})
	cmd.SetArgs([]string{"--kubeconfig", path, "--context", "no-such-context", "get"})
	if err := cmd.ExecuteContext(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "context was not found for specified context: no-such-context") {
		t.Errorf("an unknown --context: %v", err)
	}
}

func TestWhyColors(t *testing.T) {
	now := fixtureTeamA(t)
	var out bytes.Buffer
	if err := Why(context.Background(), &out, k8s, WhyOptions{Namespace: teamA, Name: "compare-licences", Now: now,
		Color: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{ansiBold + "Decision" + ansiReset, ansiRed + "TRIPPED" + ansiReset} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("colored output lacks %q", want)
		}
	}
}
