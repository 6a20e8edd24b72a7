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
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Where agentrun-stream is installed by default (config/stream,
// config/default), and the label its Service carries in every install, the
// chart's under any namespace and name prefix included.
const (
	StreamNamespace = "agentrun-system"
	StreamService   = "agentrun-stream"
	// StreamLabel is app.kubernetes.io/name=agentrun-stream: the stream
	// Service's label, by which a renamed install is found.
	StreamLabel      = "app.kubernetes.io/name"
	StreamLabelValue = "agentrun-stream"
	// StreamAudience is the audience agentrun-stream accepts tokens of by
	// default (its --token-audience; sse.DefaultAudience).
	StreamAudience = "agentrun-stream"
)

// streamTokenSeconds is the lifetime of a token requested for
// --service-account (TokenRequest's minimum).
const streamTokenSeconds = 600

// proxyHint explains why the API server's service proxy cannot carry the
// caller's identity to agentrun-stream, and what works instead.
func proxyHint(loc StreamLocation) string {
	return fmt.Sprintf(`hint: through the API server's service proxy agentrun-stream cannot see who you are: the API server
authenticates your request and removes its Authorization header before it proxies it. Reach the stream
server directly instead, with a token issued for its audience (%s):
  kubectl -n %s port-forward svc/%s 8443:%d &
  kubectl agentrun events RUN --server https://localhost:8443 --insecure --service-account NAME`,
		StreamAudience, loc.Namespace, loc.Service, loc.Port)
}

// directHint is the hint of a direct connection.
const directHint = `hint: agentrun-stream authenticates the bearer token of the request (a TokenReview) and
accepts only tokens issued for its audience (` + StreamAudience + `), of a user that may "get" the run:
pass --service-account NAME (the plugin requests such a token for it, as
kubectl create token NAME --audience ` + StreamAudience + ` does), or --token; your kubeconfig's
credentials are never sent to it`

// StreamLocation is the Service of agentrun-stream and its HTTPS port.
type StreamLocation struct {
	Namespace, Service string
	Port               int32
}

// FindStream finds agentrun-stream's Service. namespace and service are
// --stream-namespace and --stream-service, either may be empty:
//   - with --stream-service, that Service (in --stream-namespace, else
//     agentrun-system);
//   - with only --stream-namespace, the one Service labelled
//     app.kubernetes.io/name=agentrun-stream there;
//   - with neither, agentrun-system/agentrun-stream, else the one Service
//     with that label in any namespace (a renamed install: another
//     namespace or name prefix).
//
// The port is the Service's port named https (else its first). A caller
// who may not read the Service it names gets port 443: the proxy request
// is authorized on its own.
func FindStream(ctx context.Context, c client.Reader, namespace, service string) (StreamLocation, error) {
	if service != "" {
		return getStream(ctx, c, cmpOr(namespace, StreamNamespace), service)
	}
	if namespace != "" {
		return listStream(ctx, c, namespace)
	}
	loc, err := getStream(ctx, c, StreamNamespace, StreamService)
	if !apierrors.IsNotFound(err) {
		return loc, err
	}
	loc, lerr := listStream(ctx, c, "")
	var none *notInstalled
	if lerr != nil && (apierrors.IsForbidden(lerr) || errors.As(lerr, &none)) {
		// None elsewhere, or may not look: say the default is missing.
		return StreamLocation{}, err
	}
	return loc, lerr
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// notInstalled says the stream Service was not found, and how to name it;
// it wraps err (a NotFound, if any) for apierrors.IsNotFound.
type notInstalled struct {
	where string
	err   error
}

func (e *notInstalled) Error() string {
	return e.where + ": is agentrun-stream installed? Name its Service with --stream-namespace and " +
		"--stream-service, or pass --server with the stream server's URL (make dev prints it)"
}

func (e *notInstalled) Unwrap() error { return e.err }

func getStream(ctx context.Context, c client.Reader, namespace, name string) (StreamLocation, error) {
	loc := StreamLocation{Namespace: namespace, Service: name, Port: 443}
	var svc corev1.Service
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &svc)
	switch {
	case err == nil:
		loc.Port = servicePort(&svc, loc.Port)
	case apierrors.IsNotFound(err):
		return loc, &notInstalled{where: fmt.Sprintf("service %s/%s not found", namespace, name), err: err}
	case apierrors.IsForbidden(err):
	default:
		return loc, err
	}
	return loc, nil
}

// listStream finds the one Service labelled as agentrun-stream's in
// namespace ("" for all).
func listStream(ctx context.Context, c client.Reader, namespace string) (StreamLocation, error) {
	var list corev1.ServiceList
	if err := c.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{StreamLabel: StreamLabelValue}); err != nil {
		return StreamLocation{}, err
	}
	where := "in any namespace"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	switch len(list.Items) {
	case 0:
		return StreamLocation{}, &notInstalled{
			where: fmt.Sprintf("no service labelled %s=%s %s", StreamLabel, StreamLabelValue, where)}
	case 1:
		svc := &list.Items[0]
		return StreamLocation{Namespace: svc.Namespace, Service: svc.Name, Port: servicePort(svc, 443)}, nil
	}
	names := make([]string, 0, len(list.Items))
	for _, svc := range list.Items {
		names = append(names, svc.Namespace+"/"+svc.Name)
	}
	return StreamLocation{}, fmt.Errorf("%d services labelled %s=%s %s (%s): name one with --stream-namespace "+
		"and --stream-service", len(names), StreamLabel, StreamLabelValue, where, strings.Join(names, ", "))
}

// StreamProxyURL is the run's events URL through the API server's service
// proxy to the stream Service loc:
// /api/v1/namespaces/agentrun-system/services/https:agentrun-stream:443/proxy/apis/…
func StreamProxyURL(cfg *rest.Config, loc StreamLocation, namespace, run string) (string, error) {
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return "", err
	}
	proxy := "/api/v1/namespaces/" + loc.Namespace + "/services/https:" + loc.Service + ":" +
		strconv.Itoa(int(loc.Port)) + "/proxy"
	return strings.TrimSuffix(base.String(), "/") + proxy + EventsPath(namespace, run), nil
}

// servicePort is the Service's port named https, else its first, else def.
func servicePort(svc *corev1.Service, def int32) int32 {
	for _, p := range svc.Spec.Ports {
		if p.Name == "https" {
			return p.Port
		}
	}
	if len(svc.Spec.Ports) > 0 {
		return svc.Spec.Ports[0].Port
	}
	return def
}

// DirectURL is the run's events URL on a stream server given as --server:
// its root (http://127.0.0.1:PORT), the web page's URL make dev prints
// (whose #token= fragment is returned as the token), or a run's events URL.
func DirectURL(server, namespace, run string) (eventsURL, token string, err error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", "", fmt.Errorf("--server %q: %w", server, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", "", fmt.Errorf("--server %q: want an http or https URL, e.g. https://localhost:8443", server)
	}
	if frag, err := url.ParseQuery(u.Fragment); err == nil {
		token = frag.Get("token")
	}
	path := u.Path
	if i := strings.Index(path, "/apis/stream.agentrun.dev/"); i >= 0 {
		path = path[:i]
	}
	root := url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(path, "/")}
	return root.String() + EventsPath(namespace, run), token, nil
}

// directClient is an HTTP client for a stream server given as --server. It
// sends none of the kubeconfig's credentials: a token the API server
// accepts is not for the stream server to hold. The bearer token is
// EventsOptions.Token (--token, --service-account's, or the page URL's).
func directClient(caFile string, insecure bool) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // --insecure
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", caFile)
		}
		tlsConfig.RootCAs = pool
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = tlsConfig
	return &http.Client{Transport: base}, nil
}

// streamToken requests a token of service account sa (NAME, or
// NAMESPACE/NAME; NAME is in namespace) issued for audience, with the
// caller's kubeconfig identity — what `kubectl create token NAME
// --audience agentrun-stream` does. The caller needs create on
// serviceaccounts/token (the built-in edit role has it).
func streamToken(ctx context.Context, kube kubernetes.Interface, namespace, sa, audience string) (string, error) {
	if ns, name, ok := strings.Cut(sa, "/"); ok {
		namespace, sa = ns, name
	}
	if namespace == "" || sa == "" || strings.Contains(sa, "/") {
		return "", fmt.Errorf("--service-account %q: want NAME or NAMESPACE/NAME", sa)
	}
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](streamTokenSeconds)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("--service-account: a token of %s/%s for audience %q: %w", namespace, sa, audience, err)
	}
	return tr.Status.Token, nil
}

type eventsFlags struct {
	streamNamespace, streamService string

	follow   bool
	from     uint64
	server   string
	token    string
	account  string
	audience string
	output   string
	caFile   string
	insecure bool
}

func (p *plugin) eventsCommand() *cobra.Command {
	var f eventsFlags
	cmd := &cobra.Command{
		Use:   "events RUN",
		Short: "Print a run's event stream (reasoning, text, tool calls, state, the end)",
		Long: `Print a run's event stream, served by agentrun-stream: without -f the whole retained
trajectory (the JSON-lines export) as one readable line per event; with -f the live stream (SSE),
resumed with Last-Event-ID after a disconnect, until the run's end event.

By default the request goes through the API server's service proxy to the Service agentrun-stream in
agentrun-system or, when it is not there (another namespace or name prefix), to the one Service
labelled app.kubernetes.io/name=agentrun-stream; --stream-namespace and --stream-service name it.
--server and --token (which on this command name the stream server and its bearer
token, not the API server's) talk to a stream server directly: a port-forward, or make dev's URL.
agentrun-stream accepts only tokens issued for its audience (agentrun-stream):
--service-account NAME requests one for that service account with your kubeconfig identity.`,
		Example: `  kubectl agentrun events survey-vector-dbs
  kubectl agentrun events survey-vector-dbs -f --from 120
  kubectl -n agentrun-system port-forward svc/agentrun-stream 8443:443 &
  kubectl agentrun events survey-vector-dbs -f --server https://localhost:8443 --insecure --service-account my-viewer
  kubectl agentrun events survey-vector-dbs -f --server https://localhost:8443 --insecure \
    --token "$(kubectl create token my-viewer --audience agentrun-stream)"
  kubectl agentrun events survey-vector-dbs -o jsonl > survey.jsonl
  kubectl agentrun events survey-vector-dbs --stream-namespace research-ops --stream-service ar-stream`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: p.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := p.eventsOptions(cmd.Context(), args[0], f)
			if err != nil {
				return err
			}
			return Events(cmd.Context(), p.Streams.Out, o)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.follow, "follow", "f", false, "stream the events as they are stored, until the run's end")
	fl.Uint64Var(&f.from, "from", 1, "first event seq to print")
	fl.StringVar(&f.streamNamespace, "stream-namespace", "", "namespace of agentrun-stream's Service "+
		"(default: agentrun-system, else found by its label app.kubernetes.io/name=agentrun-stream)")
	fl.StringVar(&f.streamService, "stream-service", "", "name of agentrun-stream's Service (default: agentrun-stream, "+
		"else the one labelled app.kubernetes.io/name=agentrun-stream)")
	fl.StringVar(&f.server, "server", "", "URL of the stream server (default: through the API server's service proxy)")
	fl.StringVar(&f.token, "token", "", "bearer token for --server, issued for its audience "+
		"(kubectl create token NAME --audience "+StreamAudience+")")
	fl.StringVar(&f.account, "service-account", "", "with --server: request a token of this service account "+
		"(NAME or NAMESPACE/NAME) for the stream's audience, and use it")
	fl.StringVar(&f.audience, "stream-audience", StreamAudience, "audience of the token --service-account requests "+
		"(agentrun-stream's --token-audience)")
	fl.StringVarP(&f.output, "output", "o", "", "output format: jsonl (the events as received)")
	fl.StringVar(&f.caFile, "ca-file", "", "CA bundle that verifies the certificate of --server")
	fl.BoolVarP(&f.insecure, "insecure", "k", false, "do not verify the certificate of --server (a port-forward)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"jsonl"},
		cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (p *plugin) eventsOptions(ctx context.Context, run string, f eventsFlags) (EventsOptions, error) {
	o := EventsOptions{Follow: f.follow, From: f.from, ErrOut: p.Streams.ErrOut}
	switch f.output {
	case "":
	case "jsonl":
		o.Raw = true
	default:
		return o, fmt.Errorf("unknown output format %q: want jsonl (or none for readable lines)", f.output)
	}
	ns, err := p.Factory.Namespace()
	if err != nil {
		return o, err
	}
	cfg, err := p.Factory.RESTConfig()
	if err != nil && f.server == "" {
		return o, err
	}
	if f.server != "" {
		if f.streamNamespace != "" || f.streamService != "" {
			return o, fmt.Errorf("--stream-namespace and --stream-service name the Service the API server's proxy " +
				"reaches: not with --server")
		}
		u, tok, err := DirectURL(f.server, ns, run)
		if err != nil {
			return o, err
		}
		o.URL, o.Token, o.Hint = u, f.token, directHint
		if f.account != "" {
			if f.token != "" {
				return o, fmt.Errorf("--token and --service-account: give one (--service-account requests a token)")
			}
			kube, err := p.Factory.Kube()
			if err != nil {
				return o, err
			}
			if o.Token, err = streamToken(ctx, kube, ns, f.account, f.audience); err != nil {
				return o, err
			}
		}
		if o.Token == "" {
			o.Token = tok
		}
		o.Client, err = directClient(f.caFile, f.insecure)
		return o, err
	}
	if f.token != "" || f.account != "" || f.caFile != "" || f.insecure {
		return o, fmt.Errorf("--token, --service-account, --ca-file and --insecure need --server")
	}
	c, err := p.Factory.Client()
	if err != nil {
		return o, err
	}
	loc, err := FindStream(ctx, c, f.streamNamespace, f.streamService)
	if err != nil {
		return o, err
	}
	if o.URL, err = StreamProxyURL(cfg, loc, ns, run); err != nil {
		return o, err
	}
	streaming := rest.CopyConfig(cfg)
	streaming.Timeout = 0
	if o.Client, err = rest.HTTPClientFor(streaming); err != nil {
		return o, err
	}
	o.Hint = proxyHint(loc)
	return o, nil
}
