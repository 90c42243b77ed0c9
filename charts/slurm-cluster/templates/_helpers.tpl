{{/* Names, labels and value checks of the slurm-cluster chart. */}}

{{/* The SlurmCluster's name: nameOverride, or the release name. */}}
{{- define "slurm-cluster.name" -}}
{{- default .Release.Name .Values.nameOverride -}}
{{- end -}}

{{- define "slurm-cluster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "slurm-cluster.labels" -}}
helm.sh/chart: {{ include "slurm-cluster.chart" . }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: slurm-cluster
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: warden
{{- end -}}

{{/*
A value as JSON with every null left out, at any depth: `null` in values means "not set", and the
SlurmCluster should not carry the field at all (the operator's default then applies).
*/}}
{{- define "slurm-cluster.prune" -}}
{{- if kindIs "map" . -}}
{{- $out := dict -}}
{{- range $k, $v := . -}}
{{- if not (kindIs "invalid" $v) -}}
{{- $_ := set $out $k (fromJson (printf "{\"v\":%s}" (include "slurm-cluster.prune" $v))).v -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- else if kindIs "slice" . -}}
{{- $out := list -}}
{{- range $v := . -}}
{{- if not (kindIs "invalid" $v) -}}
{{- $out = append $out (fromJson (printf "{\"v\":%s}" (include "slurm-cluster.prune" $v))).v -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- else -}}
{{- toJson . -}}
{{- end -}}
{{- end -}}

{{/* The spec: every value except the chart's own keys. */}}
{{- define "slurm-cluster.spec" -}}
{{- $spec := omit .Values "nameOverride" "labels" "annotations" "global" -}}
{{- include "slurm-cluster.prune" $spec -}}
{{- end -}}

{{/*
Rules across values that JSON Schema cannot say; the SlurmCluster CRD checks the same with CEL on
install, these only fail earlier and name the value.
*/}}
{{- define "slurm-cluster.validate" -}}
{{- $name := include "slurm-cluster.name" . -}}
{{- if or (gt (len $name) 24) (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name)) -}}
{{- fail (printf "nameOverride (or the release name) %q: the SlurmCluster name must be a DNS label of at most 24 characters (lower-case letters, digits, '-', starting with a letter)" $name) -}}
{{- end -}}
{{- if and .Values.jail.existingClaim .Values.jail.storageClassName -}}
{{- fail "jail.existingClaim and jail.storageClassName: set either existingClaim or storageClassName, not both" -}}
{{- end -}}
{{- if and (eq .Values.accounting.mode "External") (not .Values.accounting.external) -}}
{{- fail "accounting.external: accounting.mode External needs accounting.external (host and passwordSecretRef)" -}}
{{- end -}}
{{- $groups := list -}}
{{- range $i, $g := .Values.workerGroups -}}
{{- if has $g.name $groups -}}
{{- fail (printf "workerGroups[%d].name: duplicate worker group name %q" $i $g.name) -}}
{{- end -}}
{{- $groups = append $groups $g.name -}}
{{- end -}}
{{- $defaults := 0 -}}
{{- range $i, $p := .Values.partitions -}}
{{- range $w := $p.workerGroups -}}
{{- if not (has $w $groups) -}}
{{- fail (printf "partitions[%d].workerGroups: partition %q names worker group %q, which is not in workerGroups" $i $p.name $w) -}}
{{- end -}}
{{- end -}}
{{- if $p.default -}}
{{- $defaults = add1 $defaults -}}
{{- end -}}
{{- end -}}
{{- if gt $defaults 1 -}}
{{- fail "partitions: at most one partition may be the default" -}}
{{- end -}}
{{- end -}}
