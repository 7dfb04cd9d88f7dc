{{/*
The helpers of `helm create`: names and labels.
*/}}

{{/*
The chart's name, or nameOverride.
*/}}
{{- define "proctor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects, at most 63 characters (a DNS label). A release
whose name already contains the chart's name is used as it is.
*/}}
{{- define "proctor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "proctor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object of the release.
*/}}
{{- define "proctor.labels" -}}
helm.sh/chart: {{ include "proctor.chart" . }}
{{ include "proctor.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the operator's pod.
*/}}
{{- define "proctor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "proctor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
The operator's ServiceAccount.
*/}}
{{- define "proctor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "proctor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator's image: repository@digest when a digest is given (it pins the image; the tag
is not used), else repository and tag (the appVersion unless set).
*/}}
{{- define "proctor.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The runner image of the Jobs: operator.runnerImage, else the operator's own.
*/}}
{{- define "proctor.runnerImage" -}}
{{- .Values.operator.runnerImage | default (include "proctor.image" .) }}
{{- end }}

{{/*
Labels of the CRD hook's objects: the release's, but component crds, so that nothing that
selects the operator's pod (its Service, the PodMonitor) selects the hook's.
*/}}
{{- define "proctor.crdHookLabels" -}}
helm.sh/chart: {{ include "proctor.chart" . }}
app.kubernetes.io/name: {{ include "proctor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: crds
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
