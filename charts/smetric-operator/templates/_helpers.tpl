{{- define "smetric-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "smetric-operator.serviceAccountName" -}}
{{- default (include "smetric-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "smetric-operator.labels" -}}
app.kubernetes.io/name: smetric-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: smetric
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "smetric-operator.selectorLabels" -}}
app.kubernetes.io/name: smetric-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
