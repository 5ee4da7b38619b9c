{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "meshpush.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels the Pods are selected by. */}}
{{- define "meshpush.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "meshpush.labels" -}}
{{ include "meshpush.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "meshpush.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "meshpush.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The revision as Istio labels it: "default" when none. */}}
{{- define "meshpush.revision" -}}
{{- .Values.revision | default "default" -}}
{{- end -}}

{{/* A name with "-REVISION" when the release serves a named revision. */}}
{{- define "meshpush.revisioned" -}}
{{- if .root.Values.revision -}}{{ printf "%s-%s" .name .root.Values.revision }}{{- else -}}{{ .name }}{{- end -}}
{{- end -}}

{{/* The name injected proxies and the API server dial. */}}
{{- define "meshpush.serviceHost" -}}
{{ include "meshpush.fullname" . }}.{{ .Release.Namespace }}.svc
{{- end -}}

{{/* One injection webhook of the MutatingWebhookConfiguration: .root, .name, .namespaces, .objects. */}}
{{- define "meshpush.injectionWebhook" }}
- name: {{ .name }}
  clientConfig:
    service:
      name: {{ include "meshpush.fullname" .root }}
      namespace: {{ .root.Release.Namespace }}
      path: /inject
      port: 443
  rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
  failurePolicy: Fail
  reinvocationPolicy: Never
  sideEffects: None
  admissionReviewVersions: [v1]
  namespaceSelector:
    matchExpressions:
    {{- toYaml .namespaces | nindent 4 }}
  objectSelector:
    matchExpressions:
    {{- toYaml .objects | nindent 4 }}
{{- end }}
