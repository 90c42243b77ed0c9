{{/* Names and labels of every object of the slurm-operator chart. */}}

{{- define "slurm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-slurm-operator, or the release name when it already contains the chart name. */}}
{{- define "slurm-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "slurm-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "slurm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "slurm-operator.labels" -}}
helm.sh/chart: {{ include "slurm-operator.chart" . }}
{{ include "slurm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: warden
{{- end -}}

{{- define "slurm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "slurm-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the operator manages, as a JSON list (`include ... | fromJsonArray`): watchNamespaces, or
the release's own when it is empty; [] with watchAllNamespaces (every namespace, cluster-wide rules). */}}
{{- define "slurm-operator.namespaces" -}}
{{- if .Values.watchAllNamespaces -}}
[]
{{- else -}}
{{- .Values.watchNamespaces | default (list .Release.Namespace) | uniq | toJson -}}
{{- end -}}
{{- end -}}

{{/* The bridge's objects (bridge.enabled): <fullname>-bridge. Its pods' selector labels differ from the
operator's (name), so neither Deployment ever counts the other's pods. */}}
{{- define "slurm-operator.bridgeName" -}}
{{- printf "%s-bridge" (include "slurm-operator.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{- define "slurm-operator.bridgeSelectorLabels" -}}
app.kubernetes.io/name: {{ include "slurm-operator.name" . | trunc 56 | trimSuffix "-" }}-bridge
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "slurm-operator.bridgeLabels" -}}
helm.sh/chart: {{ include "slurm-operator.chart" . }}
{{ include "slurm-operator.bridgeSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: bridge
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: warden
{{- end -}}

{{- define "slurm-operator.image" -}}
{{- $repository := default (printf "%s/operator" (default "warden" .Values.image.registry)) .Values.image.repository -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The plain Prometheus scrape annotations of the operator's pod and metrics Service (as the
operator puts on each cluster's exporter). */}}
{{- define "slurm-operator.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{/* Render the operator's ServiceMonitor? metrics.serviceMonitor.mode: Enabled, or Auto and the API
serves monitoring.coreos.com/v1 ServiceMonitors. "true" or "". */}}
{{- define "slurm-operator.serviceMonitorWanted" -}}
{{- $mode := .Values.metrics.serviceMonitor.mode -}}
{{- if and .Values.metrics.enabled (or (eq $mode "Enabled") (and (eq $mode "Auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor"))) -}}
true
{{- end -}}
{{- end -}}

{{/* Values no schema can check: two ports that must differ. */}}
{{- define "slurm-operator.validate" -}}
{{- if and .Values.metrics.enabled (eq (int .Values.metrics.port) (int .Values.healthPort)) -}}
{{- fail (printf "metrics.port (%v) must differ from healthPort: /healthz and /metrics are served by two servers" .Values.metrics.port) -}}
{{- end -}}
{{- end -}}

{{/*
What the operator does in a namespace it manages: exactly what warden.kube.kinds lists for the operator
(warden.kube, warden.handlers, warden.workers) and kopf (docs/helm.md explains every rule). Server-side apply of an object that does not exist yet is
authorized as "create", of one that exists as "patch": both are needed for applied kinds.
*/}}
{{- define "slurm-operator.managerRules" -}}
# What the operator does in a namespace: the namespaced kinds of warden.kube.kinds.REGISTRY, rule for
# rule (tests/unit/test_kube_kinds.py holds this list and the discovery ClusterRole to it).
# SlurmClusters: kopf lists/watches them and patches its annotations; the status refresh GETs them.
# "update" (both kinds): written back unchanged at the operator's start when a CRD release changed the
# storage version, so that the old version can leave the CRD.
- apiGroups: ["slurm.warden.dev"]
  resources: ["slurmclusters"]
  verbs: ["get", "list", "watch", "patch", "update"]
# WorkerSets (one per worker group): applied, watched, pruned; their pods are the operator's to make.
- apiGroups: ["slurm.warden.dev"]
  resources: ["workersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete", "update"]
# status is written by the operator (merge patch on the status subresource).
- apiGroups: ["slurm.warden.dev"]
  resources: ["slurmclusters/status", "workersets/status"]
  verbs: ["patch"]
# owner references with blockOwnerDeletion need this where OwnerReferencesPermissionEnforcement is on.
- apiGroups: ["slurm.warden.dev"]
  resources: ["slurmclusters/finalizers", "workersets/finalizers"]
  verbs: ["update"]
# ConfigMaps: applied, pruned, the health report read and watched. "update" because the operator
# creates a Role granting get/patch/update on the health-report ConfigMap, and RBAC lets nobody grant
# what they do not hold.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Generated Secrets (keys, passwords): created once when absent, never changed or deleted; watched (the
# operator's own, by label) so a deleted one is made again. Token Secrets (<cluster>-exporter-token,
# <cluster>-bridge-token): written anew before their token expires (patch), deleted when their component goes. The directory's
# bind and CA Secrets (spec.identity.ldap): read to check the directory. The jail's PVC: created once
# when absent, watched (its volume is kept once bound), its owner reference patched when
# `retainOnDelete` changes. Never deleted.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Every child is watched: one deleted or edited by someone else is put back.
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Running pods get an annotation when their configuration changed: their kubelet then refreshes the
# mounted ConfigMaps at once. Worker pods are made by the operator (WorkerSets), watched, carry their
# Slurm node state as a status condition, and are deleted when they leave (scale-in, upgrades) or
# their slurmd never registered.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# StatefulSets and Jobs are watched for readiness; a StatefulSet is deleted (orphaning pods) when an
# immutable field changes, the populate Job when its template changes.
- apiGroups: ["apps"]
  resources: ["statefulsets", "deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# PodDisruptionBudgets of slurmctld and of the worker pods running jobs.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# NetworkPolicies of each cluster's pods: applied, pruned, put back.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The NCCL health check's Role and RoleBinding, and the bridge's (get on the cluster's bridge token Secret).
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The exporter's ServiceMonitor (spec.metrics.serviceMonitor): applied, pruned, put back; only where
# the API serves monitoring.coreos.com/v1 (API discovery, which needs no rule, tells).
- apiGroups: ["monitoring.coreos.com"]
  resources: ["servicemonitors"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The operator's Events (Reconciled, ApplyFailed, NodeDrained...: docs/operations.md#events), as
# events.k8s.io/v1; a repeat counts up the first one's series (patch), also one posted before a handover
# (listed once when a replica starts to lead).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "list"]
{{- end -}}

{{/*
What the bridge (bridge.enabled) does in every namespace: exactly warden.kube.kinds.BRIDGE_RULES
(tests/unit/test_kube_kinds.py holds this list to it). Its Slurm token Secret it reads through the Role
the operator makes in each cluster's namespace (`--bridge-service-account`), not through these rules.
*/}}
{{- define "slurm-operator.bridgeRules" -}}
# The pods it schedules (watched by spec.schedulerName) and the worker pods whose nodes they share: labelled
# with their Slurm job, deleted when that job ends or is preempted; bound to the node Slurm gave them; told
# why they wait (the PodScheduled condition) or that they are about to go (DisruptionTarget).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods/binding"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Its Events about the pods (Scheduled, SlurmJobPreempted...); a repeat counts up a series.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Namespaces: the opt-in label (slurm.warden.dev/bridge) and the annotations with their defaults; nodes:
# where the pods go.
- apiGroups: [""]
  resources: ["namespaces", "nodes"]
  verbs: ["get", "list", "watch"]
# A Job's pods that start together become one Slurm job; so do a PodGroup's (scheduler-plugins' CRD) and a
# JobSet's, where installed.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch"]
# Which SlurmClusters enable the bridge, with which partition, QoS and scheduler name.
- apiGroups: ["slurm.warden.dev"]
  resources: ["slurmclusters"]
  verbs: ["get", "list", "watch"]
{{- end -}}
