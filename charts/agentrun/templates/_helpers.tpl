{{/*
The labels every object of the chart carries besides its own (app.kubernetes.io/name and, for the
operator, control-plane: the same as config/default's). Selectors and pod templates keep only the
config/default labels, so a Helm release and a kustomize install select the same pods.
*/}}
{{- define "agentrun.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
The image of the manager, the gateway, the stream server and the tool server (one image holds all
four binaries).
*/}}
{{- define "agentrun.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
imagePullPolicy, only when set (config/default sets none: the cluster's default applies).
*/}}
{{- define "agentrun.imagePullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
The user names the API server gives the operator's and the gateway's service accounts. The
admission policies compare requesters with them (docs/security.md), so they follow the release's
namespace and namePrefix.
*/}}
{{- define "agentrun.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.namePrefix }}controller-manager
{{- end }}

{{- define "agentrun.gatewayUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.namePrefix }}gateway
{{- end }}

{{/*
Fails the render with a message naming the value and the rule when namePrefix would make invalid
object names.
*/}}
{{- define "agentrun.validate" -}}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?-)?$" .Values.namePrefix) }}
{{- fail (printf "namePrefix %q: must be empty or lower-case letters, digits and '-', starting with a letter or digit and ending with '-' (e.g. \"agentrun-\")" .Values.namePrefix) }}
{{- end }}
{{- if gt (len .Values.namePrefix) 29 }}
{{- fail (printf "namePrefix %q: at most 29 characters (the longest object name, <prefix>controller-manager-metrics-service, must stay within 63)" .Values.namePrefix) }}
{{- end }}
{{- end }}


{{/*
The manager's and the gateway's tracing and pprof flags, only when their values are set (neither
is by default, as in config/default): --otlp-endpoint (internal/tracing) and --pprof-bind-address.
*/}}
{{- define "agentrun.observabilityArgs" -}}
{{- with .Values.tracing.otlpEndpoint }}
- --otlp-endpoint={{ . }}
{{- end }}
{{- with .Values.pprof.bindAddress }}
- --pprof-bind-address={{ . }}
{{- end }}
{{- end }}
