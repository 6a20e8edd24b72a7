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

// Package kubectlplugin is `kubectl agentrun`: the commands of the
// kubectl-agentrun binary (cmd/kubectl-agentrun). Each command is a function
// that takes an io.Writer and a client (Get, Why, Approve, Stop, Logs,
// Events, Top); NewCommand wires them into a cobra tree whose persistent
// flags are kubectl's own (genericclioptions.ConfigFlags: --kubeconfig,
// --context, -n/--namespace, --as, …).
package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Scheme knows the core kinds and agentrun.dev/v1alpha1.
var Scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Factory gives the commands their namespace and clients. NewFlagsFactory
// builds the real one from kubectl's flags; tests give their own.
type Factory interface {
	// Namespace is the namespace of -n, or the kubeconfig context's.
	Namespace() (string, error)
	// RESTConfig is the caller's API-server configuration.
	RESTConfig() (*rest.Config, error)
	// Client reads and writes agentrun objects.
	Client() (client.Client, error)
	// Kube is the typed core client (pod logs).
	Kube() (kubernetes.Interface, error)
}

// NewFlagsFactory returns a Factory that builds everything from flags, the
// way kubectl does. API warnings (an admission webhook's) go to warnings.
func NewFlagsFactory(flags *genericclioptions.ConfigFlags, warnings io.Writer) Factory {
	return &flagsFactory{flags: flags, warnings: warnings}
}

type flagsFactory struct {
	flags    *genericclioptions.ConfigFlags
	warnings io.Writer
	cfg      *rest.Config
	c        client.Client
	kube     kubernetes.Interface
}

func (f *flagsFactory) Namespace() (string, error) {
	ns, _, err := f.flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

func (f *flagsFactory) RESTConfig() (*rest.Config, error) {
	if f.cfg != nil {
		return f.cfg, nil
	}
	cfg, err := f.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NewWarningWriter(f.warnings, rest.WarningWriterOptions{Deduplicate: true})
	f.cfg = cfg
	return cfg, nil
}

func (f *flagsFactory) Client() (client.Client, error) {
	if f.c != nil {
		return f.c, nil
	}
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, err
	}
	f.c = c
	return c, nil
}

func (f *flagsFactory) Kube() (kubernetes.Interface, error) {
	if f.kube != nil {
		return f.kube, nil
	}
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f.kube = k
	return k, nil
}

// Options configure NewCommand.
type Options struct {
	// Streams are stdin, stdout and stderr.
	Streams genericiooptions.IOStreams
	// Factory gives the clients. Nil: built from ConfigFlags.
	Factory Factory
	// ConfigFlags are the kubectl flags added to the root command. Nil: a
	// fresh genericclioptions.NewConfigFlags(true). Ignored for the clients
	// when Factory is set (the flags are still accepted).
	ConfigFlags *genericclioptions.ConfigFlags
	// Now is the clock for ages and relative times. Nil: time.Now.
	Now func() time.Time
	// Color forces colors on or off. Nil: on when stdout is a terminal and
	// NO_COLOR is unset.
	Color *bool
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) color() bool {
	if o.Color != nil {
		return *o.Color
	}
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := o.Streams.Out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// NewCommand returns the root command of `kubectl agentrun`.
func NewCommand(o Options) *cobra.Command {
	if o.ConfigFlags == nil {
		o.ConfigFlags = genericclioptions.NewConfigFlags(true)
	}
	if o.Factory == nil {
		o.Factory = NewFlagsFactory(o.ConfigFlags, o.Streams.ErrOut)
	}
	root := &cobra.Command{
		Use:   "kubectl-agentrun",
		Short: "Inspect and steer agentrun research runs",
		Long: "kubectl agentrun shows research runs (ResearchRun, short name rr) and why they ended, " +
			"answers their approvals, stops them, and follows their pod logs and run stream.",
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl agentrun",
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(o.Streams.In)
	root.SetOut(o.Streams.Out)
	root.SetErr(o.Streams.ErrOut)
	o.ConfigFlags.AddFlags(root.PersistentFlags())
	p := &plugin{Options: o}
	root.AddCommand(
		p.getCommand(),
		p.whyCommand(),
		p.decideCommand(v1alpha1.DecisionApprove),
		p.decideCommand(v1alpha1.DecisionDeny),
		p.stopCommand(v1alpha1.StopCancel),
		p.stopCommand(v1alpha1.StopFinalize),
		p.logsCommand(),
		p.eventsCommand(),
		p.topCommand(),
		p.treeCommand(),
	)
	return root
}

// plugin carries the options into the commands.
type plugin struct {
	Options
}

// target returns the namespace and the client of a command.
func (p *plugin) target() (string, client.Client, error) {
	ns, err := p.Factory.Namespace()
	if err != nil {
		return "", nil, err
	}
	c, err := p.Factory.Client()
	if err != nil {
		return "", nil, err
	}
	return ns, c, nil
}

// Execute runs the root command with ctx and prints its error, returning
// the process's exit code.
func Execute(ctx context.Context, o Options) int {
	cmd := NewCommand(o)
	if err := cmd.ExecuteContext(ctx); err != nil {
		_, _ = fmt.Fprintln(o.Streams.ErrOut, "error:", err)
		return 1
	}
	return 0
}
