{{/* Names, labels and images shared by the templates. */}}

{{- define "specd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "specd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "specd.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "specd.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; "component" is operator, dashboard, crd or monitoring. */}}
{{- define "specd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "specd.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "specd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specd.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* <fullname>-<component> */}}
{{- define "specd.componentName" -}}
{{- printf "%s-%s" (include "specd.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "specd.serviceAccountName" -}}
{{- $sa := index .root.Values .component "serviceAccount" -}}
{{- default (include "specd.componentName" .) $sa.name -}}
{{- end -}}

{{/* repository@digest, else repository:tag (tag defaults to appVersion) */}}
{{- define "specd.image" -}}
{{- $image := index .root.Values .component "image" -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The restricted Pod Security profile, for every specd container. */}}
{{- define "specd.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "specd.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The operator's rules (deploy/rbac.yaml, kept equal by tests/test_helm_chart.py):
     "namespaced" the ones a Role can grant, "cluster" the cluster-scoped reads. */}}
{{- define "specd.operatorRules.namespaced" -}}
# The custom resource: watch it, record kopf's progress annotations on it, write its status.
- apiGroups: [serving.specd.io]
  resources: [speculativeservices]
  verbs: [get, list, watch, patch]
- apiGroups: [serving.specd.io]
  resources: [speculativeservices/status]
  verbs: [get, patch]
# blockOwnerDeletion on the children needs update on the owner's finalizers.
- apiGroups: [serving.specd.io]
  resources: [speculativeservices/finalizers]
  verbs: [update]
# Children, written with server-side apply (create + patch), watched for status.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [get, list, watch, create, patch]
# The workers' NetworkPolicy, server-side applied (never read back).
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, patch]
# Lossless probes: find one Ready pod per track (read only).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
# Warning events posted by the operator framework.
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{- define "specd.operatorRules.cluster" -}}
# kopf notices CRDs and watched namespaces appearing and disappearing (read-only).
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end -}}

{{/* The dashboard reads; with controls it also patches SpeculativeServices. */}}
{{- define "specd.dashboardRules" -}}
- apiGroups: [serving.specd.io]
  resources: [speculativeservices]
  verbs: [{{ if .Values.dashboard.controls.enabled }}get, list, watch, patch{{ else }}get, list, watch{{ end }}]
- apiGroups: [serving.specd.io]
  resources: [speculativeservices/status]
  verbs: [get]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods, services, events]
  verbs: [get, list, watch]
{{- end -}}

{{/* Namespaces a namespaced install grants rights in: the watched ones. */}}
{{- define "specd.clusterWide" -}}
{{- if .Values.watchNamespaces -}}false{{- else -}}true{{- end -}}
{{- end -}}
