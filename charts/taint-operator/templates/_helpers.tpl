{{/* Chart name, truncated to 63 chars. */}}
{{- define "taint-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: also the Lease name, the Service name and the prefix
of every namespaced object.
*/}}
{{- define "taint-operator.fullname" -}}
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

{{- define "taint-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "taint-operator.labels" -}}
helm.sh/chart: {{ include "taint-operator.chart" . }}
{{ include "taint-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ include "taint-operator.versionLabel" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "taint-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "taint-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "taint-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "taint-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The version label: the image tag (or appVersion), without a digest the tag may
carry (0.1.0@sha256:…), and with what a label value may not hold (such as the
"+" of a build suffix) made "_", at most 63 characters, alphanumeric at both ends.
*/}}
{{- define "taint-operator.versionLabel" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion | toString }}
{{- regexReplaceAll "[^-A-Za-z0-9_.]" (first (splitList "@" $tag)) "_" | trunc 63 | trimAll "-_." }}
{{- end }}

{{/*
The image reference: repository:tag, or with image.digest repository@digest
(repository:tag@digest when a tag is given too), so the node pulls exactly the
pinned image.
*/}}
{{- define "taint-operator.image" -}}
{{- $repo := .Values.image.repository }}
{{- $digest := .Values.image.digest | default "" }}
{{- if $digest }}
{{- if contains "@" (.Values.image.tag | default "" | toString) }}
{{- fail "image.tag already carries a digest (tag@sha256:…): set image.digest or the digest in the tag, not both" }}
{{- end }}
{{- if .Values.image.tag }}
{{- printf "%s:%s@%s" $repo (.Values.image.tag | toString) $digest }}
{{- else }}
{{- printf "%s@%s" $repo $digest }}
{{- end }}
{{- else }}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}
{{- end }}

{{/* Secret holding the webhook serving certificate (tls.crt, tls.key, ca.crt). */}}
{{- define "taint-operator.webhookCertSecret" -}}
{{- printf "%s-webhook-tls" (include "taint-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "taint-operator.webhookName" -}}
{{- include "taint-operator.fullname" . }}
{{- end }}

{{/* The ValidatingWebhookConfiguration for TaintPolicy CREATE and UPDATE. */}}
{{- define "taint-operator.policyWebhookName" -}}
{{- printf "%s-policies" (include "taint-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "true" when the webhook server runs: either webhook is on. Empty otherwise. */}}
{{- define "taint-operator.webhookServing" -}}
{{- if or .Values.webhook.enabled .Values.policyWebhook.enabled }}true{{ end }}
{{- end }}

{{/* cert-manager objects */}}
{{- define "taint-operator.certificateName" -}}
{{- printf "%s-webhook" (include "taint-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "taint-operator.issuerName" -}}
{{- printf "%s-selfsigned" (include "taint-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* DNS names the API server uses to reach the webhook Service. */}}
{{- define "taint-operator.webhookDNSNames" -}}
{{- $svc := include "taint-operator.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/*
What the chart does with the TaintPolicy CRD on this install or upgrade, from the
CRD the cluster holds now (nothing during `helm template`):
  "render": absent, or this release's: rendered as part of the release;
  "adopt": there but owned by no release (chart 0.1.0 installed it from crds/, or
    it was applied by hand): Helm would refuse to take it into the release
    ("invalid ownership metadata") before any hook runs, so it is left out of this
    revision, and a pre-install/pre-upgrade hook (templates/crd-adopt.yaml) writes
    this version's schema and the release's ownership onto it; the next upgrade
    renders it.
Another release's CRD stops the install with the commands that resolve it.
*/}}
{{- define "taint-operator.crdAction" -}}
{{- $name := "taintpolicies.nodetaint.io" }}
{{- $live := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name }}
{{- if not $live }}
{{- print "render" }}
{{- else }}
{{- $annotations := $live.metadata.annotations | default dict }}
{{- $labels := $live.metadata.labels | default dict }}
{{- $owner := get $annotations "meta.helm.sh/release-name" }}
{{- $ownerNamespace := get $annotations "meta.helm.sh/release-namespace" }}
{{- if and (eq $owner .Release.Name) (eq $ownerNamespace .Release.Namespace) (eq (get $labels "app.kubernetes.io/managed-by") "Helm") }}
{{- print "render" }}
{{- else if or (and (not $owner) (not $ownerNamespace)) (and (eq $owner .Release.Name) (eq $ownerNamespace .Release.Namespace)) }}
{{- print "adopt" }}
{{- else }}
{{- fail (printf "CustomResourceDefinition %s belongs to Helm release %q in namespace %q, not to %q in %q: install this release with --set crds.install=false, or hand the CRD over with `kubectl annotate crd %s --overwrite meta.helm.sh/release-name=%s meta.helm.sh/release-namespace=%s`" $name $owner $ownerNamespace .Release.Name .Release.Namespace $name .Release.Name .Release.Namespace) }}
{{- end }}
{{- end }}
{{- end }}
