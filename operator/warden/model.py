"""The SlurmCluster spec: typed, defaulted and validated.

These models are the single source of truth for the resource: the CRD's OpenAPI schema is generated
from them (``warden.crd``), the operator parses every object through them, and ``docs/reference.md``
is generated from the same schema. Each CEL rule placed in the schema has a Python twin here, so an
object that reaches the operator without admission checks (an old CRD, a dry run) fails the same way.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from warden import __version__
from warden import quantity as quantity_mod

API_GROUP = "slurm.warden.dev"
API_VERSION = "v1alpha1"
KIND = "SlurmCluster"
PLURAL = "slurmclusters"
#: one per worker group: its pods, made and removed by the operator (it picks which ones leave)
WORKER_SET_KIND = "WorkerSet"
WORKER_SET_PLURAL = "workersets"
#: Warden's CRDs, by name (charts/slurm-operator-crds)
CRD_NAMES = (f"{PLURAL}.{API_GROUP}", f"{WORKER_SET_PLURAL}.{API_GROUP}")

# Kubernetes-style names: DNS-1123 labels. Cluster and group names end up inside object names and
# Slurm node names, so they are kept short enough that "<cluster>-worker-<group>-<ordinal>" stays a
# valid 63-character label.
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
QUANTITY = quantity_mod.PATTERN
# Kubernetes object names (DNS-1123 subdomains), label keys and values, image references: every string
# that reaches a manifest, a config file or a command line is held to the grammar of what it names.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
QUALIFIED_NAME = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
IMAGE_REFERENCE = (
    r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
# A host name or an IP address (v4, or v6 in brackets or bare): no spaces, quotes or line breaks.
HOST = r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[?[0-9A-Fa-f:.]+\]?)$"
# Absolute paths of plain components (no `..`, no hidden names, no spaces or separators of any file)
ABSOLUTE_PATH = r"^(/[A-Za-z0-9_][A-Za-z0-9._-]*)+$"
RELATIVE_PATH = r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$"
CRON = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\S+\s+){4}\S+)$"
SSH_PUBLIC_KEY = r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com) [A-Za-z0-9+/=]+( [^\n\r]*)?$"  # noqa: E501

# slurm.conf keys the operator writes itself. Users may add any other line through
# spec.slurmConfig.extraLines, never one of these: they would silently fight the operator.
OPERATOR_OWNED_SLURM_KEYS = (
    "AccountingStorageEnforce",
    "AccountingStorageHost",
    "AccountingStoragePort",
    "AccountingStorageType",
    "AuthAltParameters",
    "AuthAltTypes",
    "AuthType",
    "ClusterName",
    "CredType",
    "GresTypes",
    "HealthCheckInterval",
    "HealthCheckNodeState",
    "HealthCheckProgram",
    "Include",
    "JobAcctGatherType",
    "JobSubmitPlugins",
    "MaxNodeCount",
    "NodeName",
    "NodeSet",
    "PartitionName",
    "PlugStackConfig",
    "PrivateData",
    "ProctrackType",
    "SelectType",
    "SlurmctldHost",
    "SlurmctldPort",
    "SlurmdPort",
    "SlurmdSpoolDir",
    "SlurmUser",
    "StateSaveLocation",
    "TaskPlugin",
    "TopologyPlugin",
)
# Owned keys that a spec field of their own sets (named in the refusal of an extraLines line).
SLURM_KEY_FIELDS = {
    "privatedata": "spec.slurmConfig.privateData",
    "authaltparameters": "spec.security.maxTokenLifespanSeconds",
    "accountingstorageenforce": "spec.accounting.enforce",
}
# slurm.conf keys that make a daemon run a program (as root or SlurmUser, outside the jail), take another
# identity, or load or write files as root. Refused in extraLines whatever their value: one SlurmCluster
# edit must never become root on every node. (Slurm's health check is a spec field: healthChecks.quick.)
REFUSED_SLURM_KEYS = (
    "AuthInfo",
    "Epilog",
    "EpilogSlurmctld",
    # plugins the jail and the cgroups depend on, which Warden leaves at Slurm's default: a private /tmp
    # namespace per job, another launcher or switch plugin would break the SPANK plugin's pivot_root
    "JobContainerType",
    "LaunchType",
    "SwitchType",
    "JobCompLoc",
    "JobCredentialPrivateKey",
    "JobCredentialPublicCertificate",
    "MailProg",
    "PluginDir",
    "Prolog",
    "PrologSlurmctld",
    "RebootProgram",
    "ResumeFailProgram",
    "ResumeProgram",
    "ResvEpilog",
    "ResvProlog",
    "SlurmctldLogFile",
    "SlurmctldPidFile",
    "SlurmctldPrimaryOffProg",
    "SlurmctldPrimaryOnProg",
    "SlurmdLogFile",
    "SlurmdPidFile",
    "SlurmdUser",
    "SlurmSchedLogFile",
    "SrunEpilog",
    "SrunProlog",
    "SuspendProgram",
    "TaskEpilog",
    "TaskProlog",
    "UnkillableStepProgram",
)
# The only slurm.conf keys extraLines may set: scheduling, limits, priorities, preemption, timeouts, debug
# levels and the like. A key not listed (a new Slurm release's among them: CertmgrType, CertmgrParameters,
# TLSType, NamespaceType...) is refused until it is read and listed here, so the refusals above need not be
# complete. None of these runs a program, names a file, a host or a password, changes an identity or loads a
# plugin that does (tests/unit/test_spec_validation.py holds the list to that).
ALLOWED_SLURM_KEYS = (
    "AccountingStorageTRES", "AccountingStoreFlags", "AcctGatherNodeFreq",
    "AllowSpecResourcesUsage", "BatchStartTimeout", "BcastExclude", "BcastParameters", "CommunicationParameters",
    "CompleteWait", "CpuFreqDef", "CpuFreqGovernors", "DebugFlags", "DefCpuPerGPU", "DefMemPerCPU", "DefMemPerGPU",
    "DefMemPerNode", "DependencyParameters", "DisableRootJobs", "EioTimeout", "EnforcePartLimits", "EpilogMsgTime",
    "FairShareDampeningFactor", "FirstJobId", "GetEnvTimeout", "GpuFreqDef", "GroupUpdateForce", "GroupUpdateTime",
    "InactiveLimit", "InteractiveStepOptions", "JobAcctGatherFrequency", "JobAcctGatherParams", "JobFileAppend",
    "JobRequeue", "KeepAliveTime", "KillOnBadExit", "KillWait", "LaunchParameters", "Licenses", "LogTimeFormat",
    "MailDomain", "MaxArraySize", "MaxBatchRequeue", "MaxDBDMsgs", "MaxJobCount", "MaxJobId", "MaxMemPerCPU",
    "MaxMemPerNode", "MaxStepCount", "MaxTasksPerNode", "MCSParameters", "MCSPlugin", "MessageTimeout", "MinJobAge",
    "MpiDefault", "MpiParams", "OverTimeLimit", "PreemptExemptTime", "PreemptMode", "PreemptParameters",
    "PreemptType", "PriorityCalcPeriod", "PriorityDecayHalfLife", "PriorityFavorSmall", "PriorityFlags",
    "PriorityMaxAge", "PriorityParameters", "PrioritySiteFactorParameters", "PriorityType",
    "PriorityUsageResetPeriod", "PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairshare",
    "PriorityWeightJobSize", "PriorityWeightPartition", "PriorityWeightQOS", "PriorityWeightTRES",
    "PrologEpilogTimeout", "PropagatePrioProcess", "PropagateResourceLimits", "PropagateResourceLimitsExcept",
    "ReconfigFlags", "RequeueExit", "RequeueExitHold", "ResumeRate", "ResumeTimeout", "ResvOverRun",
    "ReturnToService", "SbcastParameters", "SchedulerParameters", "SchedulerTimeSlice", "SchedulerType",
    "ScronParameters", "SelectTypeParameters", "SlurmctldDebug", "SlurmctldParameters", "SlurmctldSyslogDebug",
    "SlurmctldTimeout", "SlurmdDebug", "SlurmdParameters", "SlurmdSyslogDebug", "SlurmdTimeout",
    "SlurmSchedLogLevel", "SrunPortRange", "SuspendExcNodes", "SuspendExcParts", "SuspendExcStates", "SuspendRate",
    "SuspendTime", "SuspendTimeout", "TaskPluginParam", "TCPTimeout", "TopologyParam", "TrackWCKey", "TreeWidth",
    "UnkillableStepTimeout", "VSizeFactor", "WaitTime",
)  # fmt: skip
# A key anywhere on a line (slurm.conf reads several Key=Value pairs on one line). RE2 (CEL) and
# Python agree on these expressions.
OWNED_KEY_LINE = rf"(?i)(^|\s)({'|'.join(OPERATOR_OWNED_SLURM_KEYS)})\s*="
REFUSED_KEY_LINE = rf"(?i)(^|\s)({'|'.join(REFUSED_SLURM_KEYS)})\s*="
SLURM_CONF_LINE = r"^[A-Za-z][A-Za-z0-9]*=[\t -~]*$"  # one line of printable ASCII
# One Key=Value a line (a value is one word or a double-quoted string), maybe a comment: the key is then
# all there is to check (one pattern of every allowed key would cost the API server's CEL too much).
ONE_PAIR_LINE = r"^[A-Za-z][A-Za-z0-9]*=\s*(\"[^\"]*\"|[^\s\"#]*)(\s+#.*)?\s*$"

#: where Warden's own images are when nothing says otherwise: the names `make images` gives them
DEFAULT_IMAGE_REPOSITORY = "warden"
#: the operator's environment variable naming where Warden's images are (the operator chart's `image.registry`)
IMAGE_REGISTRY_ENV = "WARDEN_IMAGE_REGISTRY"
#: `host[:port]/path` of a registry's repository prefix (the value of `IMAGE_REGISTRY_ENV`)
IMAGE_REGISTRY = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$"
# slurm.conf CPUs is a 16-bit count
MAX_SLURM_CPUS = 65533
#: the longest token lifespan spec.security.maxTokenLifespanSeconds may allow: 30 days
MAX_TOKEN_LIFESPAN_SECONDS = 30 * 86400
#: the least memory spec.login.userLimits.memory may give a user's sessions
MIN_LOGIN_USER_MEMORY = 64 * 1024 * 1024


class Spec(BaseModel):
    """Base for every part of the spec: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


def _quantity_to_str(value: object) -> object:
    # Kubernetes quantities may be written as numbers (`cpu: 4`); keep them as their string form.
    if isinstance(value, bool):
        return value
    return str(value) if isinstance(value, int | float) else value


def _readable_quantity(value: str) -> str:
    quantity_mod.parse(value)  # ValueError: not a quantity, or beyond what Kubernetes keeps
    return value


def _positive_quantity(value: str) -> str:
    if quantity_mod.parse(value) <= 0:
        raise ValueError(f"{value!r}: a size must be larger than zero")
    return value


# The pattern holds strings only; written as a number (`cpu: -4`) a quantity is checked by this rule.
_QUANTITY_RULE = {"rule": f"string(self).matches(r'{QUANTITY}')", "message": "not a quantity (e.g. 4, 500m, 16Gi)"}

Quantity = Annotated[
    str,
    Field(
        pattern=QUANTITY,
        max_length=64,
        json_schema_extra={"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [_QUANTITY_RULE]},
    ),
    BeforeValidator(_quantity_to_str),
    AfterValidator(_readable_quantity),
]
# A volume or buffer size: a quantity larger than zero.
Size = Annotated[
    Quantity,
    AfterValidator(_positive_quantity),
    Field(
        json_schema_extra={
            "x-kubernetes-validations": [
                _QUANTITY_RULE,
                {
                    "rule": r"!string(self).matches(r'^(0+\.?0*|\.0+)([A-Za-z]*|[eE][+-]?[0-9]+)$')",
                    "message": "a size must be larger than zero",
                },
            ]
        }
    ),
]
DnsLabel = Annotated[str, Field(pattern=DNS_LABEL, min_length=1, max_length=20)]


def _qualified_keys(mapping: dict[str, str], what: str) -> dict[str, str]:
    """The Python twin of ``_keys_rule``."""
    for key in mapping:
        if len(key) > 316 or not re.match(QUALIFIED_NAME, key):
            raise ValueError(f"{what} {key!r} is not a qualified name ([prefix/]name, e.g. example.com/gpu)")
    return mapping


def _keys_rule(message: str) -> dict[str, Any]:
    """CEL: every key of a map is a qualified name (Kubernetes label and annotation keys)."""
    return {"rule": f"self.all(k, k.matches(r'{QUALIFIED_NAME}') && size(k) <= 316)", "message": message}


ImageReference = Annotated[str, Field(pattern=IMAGE_REFERENCE, min_length=1, max_length=255)]
#: an image tag that leaves room for `-slurm<series>`
ImageTag = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", min_length=1, max_length=101)]
DnsSubdomain = Annotated[str, Field(pattern=DNS_SUBDOMAIN, min_length=1, max_length=253)]
QualifiedName = Annotated[str, Field(pattern=QUALIFIED_NAME, min_length=1, max_length=316)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE, max_length=63)]


#: the Slurm release series Warden's images carry, newest first; the first is the default
SlurmSeries = Literal["26.05", "24.11"]
SLURM_SERIES: tuple[SlurmSeries, ...] = ("26.05", "24.11")
DEFAULT_SLURM_SERIES: SlurmSeries = "26.05"
#: the images that carry Slurm (keys as in spec.images, camelCase), and their image names
SLURM_IMAGES = {
    "controller": "controller",
    "worker": "worker",
    "login": "login",
    "accounting": "accounting",
    "populateJail": "populate-jail",
    "healthCheck": "health-check",
}


def image_registry() -> str:
    """Where Warden's own images are: the operator's ``WARDEN_IMAGE_REGISTRY`` (the operator chart's
    `image.registry`, `host[:port]/path`), else `warden`, the names `make images` gives them."""
    return os.environ.get(IMAGE_REGISTRY_ENV, "").rstrip("/") or DEFAULT_IMAGE_REPOSITORY


def default_image(name: str, series: str = DEFAULT_SLURM_SERIES, version: str | None = None) -> str:
    """Warden's own image ``name`` for a Slurm series: ``<registry>/<name>:<version>`` for the default
    series, ``<registry>/<name>:<version>-slurm<series>`` for another (images without Slurm: ``series``
    left out). ``<registry>`` is the operator's (``image_registry``), ``<version>`` its own unless given."""
    version = version or __version__
    tag = version if series == DEFAULT_SLURM_SERIES else f"{version}-slurm{series}"
    return f"{image_registry()}/{name}:{tag}"


def images_version_of(image: str | None) -> str | None:
    """The Warden version in the tag of one of Warden's own images that carry Slurm
    (`<registry>/<name>:<version>[-slurm<series>]`), else None."""
    if not image or "@" in image:
        return None
    match = re.match(r"^.+/[a-z-]+:(?P<v>[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9_.-]*?)(-slurm[0-9.]+)?$", image)
    return match.group("v") if match else None


#: images the CRD once wrote into every stored spec as schema defaults (Warden 0.1.0): read as "not set",
#: so they follow the operator's registry and version like every default image
FORMER_DEFAULT_IMAGES = frozenset({"warden/mariadb:0.1.0", "warden/operator:0.1.0"})


_SERIES_DEFAULT = (
    " Default: Warden's image of `spec.slurmVersion` (`<registry>/{name}:<version>` for 26.05, "
    "`<registry>/{name}:<version>-slurm24.11` for 24.11; the operator's registry and version); an image set "
    "here must carry that series."
)


class Images(Spec):
    """Container images of every component (`[registry[:port]/]path[:tag][@sha256:digest]`).
    Defaults are Warden's own images from the operator's registry (its chart's `image.registry`; `warden/...`,
    as `make images` names them, when none is set) at the operator's version; the images that carry Slurm
    default to those of `spec.slurmVersion`."""

    controller: ImageReference | None = Field(
        default=None, description="slurmctld (and slurmrestd) image." + _SERIES_DEFAULT.format(name="controller")
    )
    worker: ImageReference | None = Field(
        default=None,
        description="slurmd image (carries the SPANK plugin)." + _SERIES_DEFAULT.format(name="worker"),
    )
    login: ImageReference | None = Field(
        default=None, description="sshd login image." + _SERIES_DEFAULT.format(name="login")
    )
    accounting: ImageReference | None = Field(
        default=None, description="slurmdbd image." + _SERIES_DEFAULT.format(name="accounting")
    )
    mariadb: ImageReference | None = Field(
        default=None, description="In-cluster MariaDB image. Default: Warden's `<registry>/mariadb:<version>`."
    )
    populate_jail: ImageReference | None = Field(
        default=None,
        description="Image holding the jail's root filesystem and the copy program."
        + _SERIES_DEFAULT.format(name="populate-jail"),
    )
    health_check: ImageReference | None = Field(
        default=None, description="NCCL health-check image." + _SERIES_DEFAULT.format(name="health-check")
    )
    backup: ImageReference | None = Field(
        default=None,
        description="Image of the jail's backups and restores (restic). Default: Warden's "
        "`<registry>/backup:<version>`.",
    )
    exporter: ImageReference | None = Field(
        default=None,
        description="Image of the Slurm metrics exporter (`warden-slurm-exporter`, shipped in the operator's image). "
        "Default: the operator's own image (`<registry>/operator:<version>`).",
    )
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="imagePullPolicy of every container."
    )
    version: ImageTag | None = Field(
        default=None,
        description="Version (tag) of Warden's own images where this spec names none. Default: the one the "
        "cluster was made with (`status.imagesVersion`), so upgrading the operator replaces no pod; set it "
        "to move the cluster onto another release's images (workers one drained, idle node at a time).",
    )
    pull_secrets: list[DnsSubdomain] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets (`kubernetes.io/dockerconfigjson`, in the cluster's namespace) every pod of the "
        "cluster pulls its images with: `kubectl create secret docker-registry regcred ...`, then `[regcred]`.",
    )

    @field_validator("mariadb", "exporter")
    @classmethod
    def _former_default_unset(cls, image: str | None) -> str | None:
        return None if image in FORMER_DEFAULT_IMAGES else image


REQUEST_ABOVE_LIMIT = (
    "a request is larger than its limit, which Kubernetes refuses in a pod: make each resources.requests "
    "entry at most the resources.limits entry of the same name"
)


class ResourceRequirements(Spec):
    """Kubernetes resource requests and limits (e.g. `cpu: "4"`, `memory: 16Gi`); a request is at most
    the limit of the same name."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits)"
                    " || !isQuantity(string(self.requests[k])) || !isQuantity(string(self.limits[k]))"
                    " || quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",
                    "message": REQUEST_ABOVE_LIMIT,
                    "fieldPath": ".requests",
                }
            ]
        }
    )

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16, description="Minimum resources.")
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16, description="Maximum resources.")

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ResourceRequirements:
        for name, request in self.requests.items():
            limit = self.limits.get(name)
            if limit is not None and quantity_mod.parse(request) > quantity_mod.parse(limit):
                raise ValueError(f"requests.{name} {request} is above limits.{name} {limit}; {REQUEST_ABOVE_LIMIT}")
        return self


class Toleration(Spec):
    """A Kubernetes toleration (same fields as `core/v1 Toleration`)."""

    key: QualifiedName | None = Field(default=None, description="Taint key.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal.")
    value: LabelValue | None = Field(default=None, description="Taint value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect."
    )
    toleration_seconds: int | None = Field(
        default=None, ge=0, le=31_536_000, description="For NoExecute: how long to stay."
    )


class Placed(Spec):
    """Where a component's pods may run (Kubernetes' nodeSelector and tolerations), e.g. onto nodes that
    mount the jail's volume (an NFS jail where not every node has an NFS client) or tainted nodes."""

    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=32,
        description="Kubernetes nodeSelector (label keys and values).",
        json_schema_extra={"x-kubernetes-validations": [_keys_rule("a nodeSelector key is not a label key")]},
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Kubernetes tolerations.")

    @field_validator("node_selector")
    @classmethod
    def _label_keys(cls, selector: dict[str, str]) -> dict[str, str]:
        return _qualified_keys(selector, "nodeSelector key")


class PopulateJail(Placed):
    """How the jail volume is filled from the jail image (the Job mounts the jail: place it where it can)."""

    image: ImageReference | None = Field(default=None, description="Overrides `spec.images.populateJail`.")
    overwrite: bool = Field(
        default=False,
        description="Copy the jail image again over a populated jail, once per image (the jail records which it "
        "copied). /home, /root and the user database (/etc/passwd, group, shadow...) are never touched.",
    )


#: a restic repository by URL: a backend prefix (s3:, rest:, sftp:, b2:, azure:, gs:, swift:, rclone:) and its
#: location, without spaces (local paths: BackupRepository.claimName)
RESTIC_REPOSITORY_URL = r"^[a-z0-9]+:[^\s]+$"
_PASSWORD_IN_URL = r"://[^/@]+:[^/@]*@"
#: a restic snapshot: `latest` or its ID (8 to 64 hex digits)
RESTIC_SNAPSHOT = r"^(latest|[0-9a-f]{8,64})$"
KEEP_NOTHING = (
    "every count is 0: restic would keep no snapshot; set at least one of last, hourly, daily, weekly, monthly, yearly"
)


class BackupRepository(Spec):
    """A restic repository (https://restic.net): a URL of any restic backend, or a PersistentVolumeClaim of the
    cluster's namespace that holds a local one; and the Secret with its password (and the backend's keys)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.url) != has(self.claimName)",
                    "message": "set exactly one of url (a restic repository URL) and claimName (a PVC)",
                    "fieldPath": ".url",
                },
                {
                    "rule": f"!has(self.url) || !self.url.matches(r'{_PASSWORD_IN_URL}')",
                    "message": "the url carries a password: put it in the credentialsSecret "
                    "(RESTIC_REST_PASSWORD, AWS_SECRET_ACCESS_KEY...) instead",
                    "fieldPath": ".url",
                },
            ]
        }
    )

    url: str | None = Field(
        default=None,
        pattern=RESTIC_REPOSITORY_URL,
        max_length=1024,
        description="restic's repository (RESTIC_REPOSITORY), e.g. `s3:https://s3.example.com/bucket/warden` or "
        "`rest:https://backup.example.com:8000/warden`. The pods that reach it may reach anywhere (docs/security.md).",
    )
    claim_name: DnsSubdomain | None = Field(
        default=None,
        description="A PVC (same namespace, never made or deleted by Warden) holding a local repository at `path`: a "
        "backup volume. Not on the jail's own volume.",
    )
    path: str = Field(
        default="restic",
        pattern=RELATIVE_PATH,
        max_length=253,
        description="With claimName: the repository's directory in the claim.",
    )
    credentials_secret: DnsSubdomain = Field(
        description="Secret (same namespace) whose keys become the environment of the pods that use the "
        "repository: `RESTIC_PASSWORD` (required: losing it loses every snapshot) and what the backend asks for "
        "(`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `RESTIC_REST_USERNAME`/`RESTIC_REST_PASSWORD`...). Only the "
        "backup Job and, with restoreFrom, the populate Job's restore container get it.",
    )

    @model_validator(mode="after")
    def _one_location(self) -> BackupRepository:
        if (self.url is None) == (self.claim_name is None):
            raise ValueError("url: set exactly one of url (a restic repository URL) and claimName (a PVC)")
        if self.url is not None and re.search(_PASSWORD_IN_URL, self.url):
            raise ValueError(
                "url: the url carries a password: put it in the credentialsSecret (RESTIC_REST_PASSWORD, "
                "AWS_SECRET_ACCESS_KEY...) instead"
            )
        return self


class BackupKeep(Spec):
    """Which snapshots `restic forget --prune` keeps after each backup (restic's --keep-* counts; 0: that rule is
    not used). The newest snapshot of each hour, day, week... is kept, up to the count."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    # the defaults (daily 7, weekly 4, monthly 6) count where a field is absent
                    "rule": "(has(self.last) && self.last > 0) || (has(self.hourly) && self.hourly > 0)"
                    " || !has(self.daily) || self.daily > 0 || !has(self.weekly) || self.weekly > 0"
                    " || !has(self.monthly) || self.monthly > 0 || (has(self.yearly) && self.yearly > 0)",
                    "message": KEEP_NOTHING,
                }
            ]
        }
    )

    last: int = Field(default=0, ge=0, le=10000, description="The newest N snapshots.")
    hourly: int = Field(default=0, ge=0, le=10000, description="One per hour, for the last N hours with one.")
    daily: int = Field(default=7, ge=0, le=10000, description="One per day, for the last N days with one.")
    weekly: int = Field(default=4, ge=0, le=10000, description="One per week, for the last N weeks with one.")
    monthly: int = Field(default=6, ge=0, le=10000, description="One per month, for the last N months with one.")
    yearly: int = Field(default=0, ge=0, le=10000, description="One per year, for the last N years with one.")

    @model_validator(mode="after")
    def _keeps_something(self) -> BackupKeep:
        if not any(self.counts().values()):
            raise ValueError(KEEP_NOTHING)
        return self

    def counts(self) -> dict[str, int]:
        return {
            "last": self.last,
            "hourly": self.hourly,
            "daily": self.daily,
            "weekly": self.weekly,
            "monthly": self.monthly,
            "yearly": self.yearly,
        }


class JailBackup(Placed):
    """Scheduled restic backups of the whole jail (homes, the user database, installed software): a CronJob
    mounts the jail read-only, runs `restic backup`, then `restic forget --prune` with `keep`
    (docs/operations.md, "Backing up and restoring the jail")."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.enabled) || !self.enabled || has(self.repository)",
                    "message": "a backup needs a repository: set repository.url or repository.claimName",
                    "fieldPath": ".repository",
                }
            ]
        }
    )

    enabled: bool = Field(default=False, description="Back the jail up on `schedule`.")
    schedule: str = Field(default="0 3 * * *", pattern=CRON, max_length=128, description="Cron schedule (UTC).")
    keep: BackupKeep = Field(default_factory=BackupKeep, description="Snapshots kept after each backup.")
    repository: BackupRepository | None = Field(default=None, description="Where the snapshots go.")
    exclude: list[Annotated[str, Field(pattern=ABSOLUTE_PATH, max_length=1024)]] = Field(
        default_factory=lambda: ["/tmp", "/var/tmp"],
        max_length=64,
        description="Directories of the jail (paths inside it) whose contents are left out; the directories "
        "themselves are kept.",
    )
    time_limit_minutes: int = Field(
        default=360, ge=5, le=10080, description="A run still going after this long is stopped (and fails)."
    )

    @model_validator(mode="after")
    def _repository_when_enabled(self) -> JailBackup:
        if self.enabled and self.repository is None:
            raise ValueError("repository: a backup needs a repository: set repository.url or repository.claimName")
        return self


class JailRestore(Spec):
    """Fill a NEW jail from a backup instead of from the jail image: the populate Job restores the snapshot
    first (only into a jail that was never populated; a populated jail is left as it is), then carries on as
    over any populated jail (an older Slurm in the snapshot is upgraded in place)."""

    repository: BackupRepository = Field(description="The repository the backup went to.")
    snapshot: str = Field(
        default="latest",
        pattern=RESTIC_SNAPSHOT,
        max_length=64,
        description="`latest` (the newest backup of `cluster`) or a snapshot ID (`restic snapshots` lists them).",
    )
    cluster: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)] | None = Field(
        default=None,
        description="The SlurmCluster whose backups to restore (restic's host). Default: this one's name.",
    )


class Jail(Spec):
    """The shared root filesystem mounted by every login and worker node."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.existingClaim) && has(self.storageClassName))",
                    "message": "set either existingClaim or storageClassName, not both",
                    "fieldPath": ".existingClaim",
                }
            ]
        }
    )

    size: Size = Field(default="20Gi", description="Requested size of the jail volume.")
    storage_class_name: DnsSubdomain | None = Field(
        default=None, description="StorageClass of the jail PVC; it must offer ReadWriteMany."
    )
    existing_claim: DnsSubdomain | None = Field(
        default=None,
        description="Use this existing ReadWriteMany PVC instead of creating one (it is never deleted).",
    )
    retain_on_delete: bool = Field(
        default=True,
        description="Keep the jail (homes, the user database, installed software) when the SlurmCluster, its chart "
        "or its namespace is deleted: the claim has no owner reference and its volume's reclaim policy is set to "
        "Retain; this SlurmCluster gets it back if its claim goes, and one made later in a namespace of the same "
        "name once an admin hands the volume over (annotation `slurm.warden.dev/jail-hand-over-to: <ns>/<name>`, "
        "docs/security.md). `false` deletes it with the SlurmCluster. A change applies to the existing claim.",
    )
    populate: PopulateJail = Field(default_factory=PopulateJail, description="Populate Job settings.")
    backup: JailBackup = Field(default_factory=JailBackup, description="Scheduled backups of the jail (restic).")
    restore_from: JailRestore | None = Field(
        default=None,
        description="Fill a new jail from a backup instead of from the jail image (the populate Job restores it).",
    )

    @model_validator(mode="after")
    def _claim_or_class(self) -> Jail:
        if self.existing_claim is not None and self.storage_class_name is not None:
            raise ValueError("existingClaim: set either existingClaim or storageClassName, not both")
        return self


class StateVolume(Spec):
    """Persistent volume for slurmctld's StateSaveLocation (the job queue survives a pod restart). With
    backup controllers (replicas 2-3) it is one claim `<cluster>-controller-state`, ReadWriteMany: its
    StorageClass must offer that (NFS, CephFS, ...)."""

    size: Size = Field(default="1Gi", description="Size of the state volume.")
    storage_class_name: DnsSubdomain | None = Field(default=None, description="StorageClass to use.")


class Controller(Placed):
    """slurmctld: one, or a primary and backups that share their state (docs/operations.md, "Backup
    controllers")."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.replicas) ? self.replicas : 1) == "
                    "(has(oldSelf.replicas) ? oldSelf.replicas : 1)",
                    "message": "controller.replicas is fixed when the cluster is made: the state volume and Slurm's "
                    'controller list change with it (make a new cluster, docs/operations.md "Backup controllers")',
                    "fieldPath": ".replicas",
                },
            ]
        }
    )

    replicas: int = Field(
        default=1,
        ge=1,
        le=3,
        description="slurmctld pods: 1, or 2-3 for a primary and backups (Slurm's SlurmctldHost list, in pod "
        "order). With backups the state volume is one ReadWriteMany claim they share, and a backup takes "
        "control when the controller in charge stops answering (takeoverSeconds) or at once when its pod "
        "is deleted. Fixed when the cluster is made.",
    )
    takeover_seconds: int = Field(
        default=15,
        ge=6,
        le=600,
        description="With backups: seconds a backup waits for an unanswering controller in charge before it "
        "takes control (Slurm's SlurmctldTimeout). Shorter: faster takeover after a hang; longer: fewer "
        "takeovers on a slow state volume.",
    )
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    state_volume: StateVolume = Field(default_factory=StateVolume)

    @property
    def has_backup(self) -> bool:
        return self.replicas > 1


class RestApi(Spec):
    """slurmrestd: Slurm's REST API with JWT auth, for people (`scontrol token`) and the operator."""

    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


class LoginService(Spec):
    """How SSH on the login nodes is exposed."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(default="NodePort", description="Service type.")
    node_port: int | None = Field(default=None, ge=30000, le=32767, description="Fixed NodePort (optional).")
    annotations: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict,
        max_length=64,
        description="Annotations of the Service.",
        json_schema_extra={"x-kubernetes-validations": [_keys_rule("an annotation key is not a qualified name")]},
    )

    @field_validator("annotations")
    @classmethod
    def _annotation_keys(cls, annotations: dict[str, str]) -> dict[str, str]:
        return _qualified_keys(annotations, "annotation key")


class SshForwarding(Spec):
    """What SSH connections to the login nodes may forward, root's included. Default: nothing (sshd's
    `DisableForwarding`). Tunnel devices and Unix socket forwarding stay off whatever is set here. A
    user with a shell can still relay a connection through a program of their own: what a login pod
    may reach is the NetworkPolicies' to decide (docs/security.md)."""

    tcp: Literal["Disabled", "Local", "Remote", "All"] = Field(
        default="Disabled",
        description="TCP forwarding. `Local`: `ssh -L` and `ssh -W` (the login pod connects where the user "
        "asks); `Remote`: `ssh -R` (a listening port on the login pod's loopback, which every user of that pod "
        "can reach); `All`: both; `Disabled`: neither.",
    )
    agent: bool = Field(
        default=False,
        description="`ssh -A`: sessions may use the user's SSH agent (so may root on the login node, while the "
        "session lasts).",
    )
    x11: bool = Field(default=False, description="`ssh -X`: X11 forwarding (needs xauth in the jail).")

    @property
    def forwards_anything(self) -> bool:
        return self.tcp != "Disabled" or self.agent or self.x11


class LoginUserLimits(Spec):
    """What one user's SSH sessions on a login node may use together: every session of a user is placed in
    that user's cgroup on the login pod (cgroup v1 or v2), whose memory and CPU limits these are. A user
    past the memory limit has one of their own processes killed (the kernel's OOM killer, in their cgroup
    only); other users' sessions go on. root's sessions are not limited."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.memory) || !isQuantity(string(self.memory))"
                    " || quantity(string(self.memory)).compareTo(quantity('64Mi')) >= 0",
                    "message": "below 64Mi: a session would not start",
                    "fieldPath": ".memory",
                },
                {
                    "rule": "!has(self.cpu) || !isQuantity(string(self.cpu))"
                    " || quantity(string(self.cpu)).compareTo(quantity('10m')) >= 0",
                    "message": "below 10m: a session would not start",
                    "fieldPath": ".cpu",
                },
            ]
        }
    )

    enabled: bool = Field(default=True, description="Per-user limits on the login nodes.")
    memory: Quantity = Field(
        default="4Gi",
        description="Memory of all of one user's sessions on one login node together (no swap beyond it). With a "
        "memory limit in spec.login.resources, the smaller of the two.",
    )
    cpu: Quantity = Field(
        default="2", description="CPUs of all of one user's sessions on one login node together (CFS quota)."
    )
    processes: int = Field(
        default=1024,
        ge=64,
        le=4194304,
        description="Processes and threads of all of one user's sessions on one login node together (the pids"
        ' controller): past it, fork and thread creation fail with EAGAIN ("Resource temporarily unavailable")'
        " in that user's sessions only, so a fork bomb stops there.",
    )

    @field_validator("memory")
    @classmethod
    def _memory_floor(cls, memory: str) -> str:
        if quantity_mod.parse(memory) < MIN_LOGIN_USER_MEMORY:
            raise ValueError(f"{memory} is below 64Mi: a session would not start")
        return memory

    @field_validator("cpu")
    @classmethod
    def _cpu_floor(cls, cpu: str) -> str:
        if quantity_mod.parse(cpu) * 100 < 1:
            raise ValueError(f"{cpu} is below 10m: a session would not start")
        return cpu


class Login(Placed):
    """Login nodes: sshd chrooted into the jail, public keys only."""

    replicas: int = Field(default=1, ge=0, le=32, description="Number of login nodes.")
    service: LoginService = Field(default_factory=LoginService)
    ssh_authorized_keys: list[Annotated[str, Field(pattern=SSH_PUBLIC_KEY, max_length=16384)]] = Field(
        default_factory=list,
        max_length=256,
        description="Public keys allowed to log in as root (users created in the jail bring their own).",
    )
    forwarding: SshForwarding = Field(default_factory=SshForwarding)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    user_limits: LoginUserLimits = Field(default_factory=LoginUserLimits)


class WorkerSsh(Spec):
    """SSH from the login nodes to the workers where a user's job runs (docs/operations.md, "SSH to a
    worker"). Each worker runs an sshd of its own, reachable from the cluster's own pods only (the
    NetworkPolicies; no Service of its own), keys only, the session chrooted into the jail as on the login
    node. Slurm's pam_slurm_adopt refuses a user without a job on that node ("Access denied by
    pam_slurm_adopt: you have no active jobs on this node") and puts everyone else's session into their
    job's cgroup there, so it has the job's CPUs and memory and ends with the job. Users log in with a key
    of their own: the jail's homes are the same on every node, so a key pair made on the login node whose
    public half is in `~/.ssh/authorized_keys` reaches every worker."""

    enabled: bool = Field(default=False, description="An sshd on every worker; slurm.conf gets PrologFlags=Contain.")
    admins: list[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_.-]*[$]?$", max_length=32)]] = Field(
        default_factory=list,
        max_length=64,
        description="Users (of the jail or the directory) who may log in to any worker without a job there; "
        "their sessions are in no job's cgroup. root is never one: see rootAuthorizedKeys.",
        json_schema_extra={
            "x-kubernetes-list-type": "set",
            "x-kubernetes-validations": [
                {"rule": "!self.exists(u, u == 'root')", "message": "root is let in by rootAuthorizedKeys only"}
            ],
        },
    )
    root_authorized_keys: list[Annotated[str, Field(pattern=SSH_PUBLIC_KEY, max_length=16384)]] = Field(
        default_factory=list,
        max_length=256,
        description="Public keys that log in to the workers as root. Empty (the default): root is refused.",
    )

    @field_validator("admins")
    @classmethod
    def _no_root_admin(cls, admins: list[str]) -> list[str]:
        if "root" in admins:
            raise ValueError("root is let in by rootAuthorizedKeys only, not as an admin")
        if len(set(admins)) != len(admins):
            raise ValueError("name each admin once")
        return admins


class Gpus(Spec):
    """GPUs of every node in a worker group, published as Slurm gres `gpu`."""

    count: int = Field(
        default=0,
        ge=0,
        le=64,
        description=(
            "GPUs per node (0: a CPU-only group). A pod may hold fewer GPUs than its Kubernetes node has:"
            " each worker names in gres.conf the device files its pod got (device plugins keep the host's"
            " numbers, e.g. /dev/nvidia4-7)."
        ),
    )
    type: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9_.-]*$",
        max_length=32,
        description="gres type, e.g. `h100` (then jobs may ask `--gpus=h100:1`).",
    )
    resource_name: QualifiedName = Field(
        default="nvidia.com/gpu",
        description="Kubernetes extended resource requested for the GPUs.",
    )


# Directories of the jail a node-local mount would hide from job steps (programs, libraries, the user
# database, homes): refused as localMounts[].jailPath.
JAIL_SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root", "/run",
                    "/sbin", "/sys", "/usr", "/usr/bin", "/usr/lib", "/usr/local", "/var", "/var/lib")  # fmt: skip


# Trees of the jail that Slurm, the login and the users' programs need as the jail image and the operator
# made them (Slurm's configuration, plugins and spool, munge's socket, libraries, homes): no node-local
# mount anywhere inside them. /dev/shm is the one exception (shared memory, a tmpfs on every node).
JAIL_SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/proc", "/root", "/run",
                     "/sbin", "/sys", "/usr", "/var/lib", "/var/log", "/var/run", "/var/spool")  # fmt: skip
JAIL_MOUNT_ALLOWED = ("/dev/shm",)


def hides_jail_system_files(path: str) -> bool:
    """Whether a node-local mount at ``path`` would hide a system directory of the jail or what is inside one."""
    if path in JAIL_SYSTEM_DIRS:
        return True
    return path not in JAIL_MOUNT_ALLOWED and any(path.startswith(f"{tree}/") for tree in JAIL_SYSTEM_TREES)


class LocalMount(Spec):
    """A node-local directory bound into the jail for every job step (tmp, shm, scratch)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!({' || '.join(f'self.jailPath == {d!r}' for d in JAIL_SYSTEM_DIRS)})",
                    "message": "jailPath is a system directory of the jail; a node-local mount would hide it",
                    "fieldPath": ".jailPath",
                },
                {
                    "rule": " || ".join(f"self.jailPath == {d!r}" for d in JAIL_MOUNT_ALLOWED)
                    + " || !("
                    + " || ".join(f"self.jailPath.startsWith('{d}/')" for d in JAIL_SYSTEM_TREES)
                    + ")",
                    "message": "jailPath is inside a system directory of the jail (Slurm's configuration, plugins"
                    " and spool, libraries, homes); a node-local mount would hide what is there: use a path"
                    " such as /scratch, /tmp or /var/tmp",
                    "fieldPath": ".jailPath",
                },
            ]
        }
    )

    name: DnsLabel = Field(description="Name of the emptyDir volume.")
    jail_path: str = Field(
        pattern=ABSOLUTE_PATH,
        max_length=255,
        description="Absolute path inside the jail (plain names: no `..`, spaces or hidden components); neither one"
        " of the jail's system directories (/etc, /usr, /home...) nor inside one (/etc/slurm, /var/spool/slurmd,"
        " /home/alice...), which it would hide from job steps; /dev/shm is allowed.",
    )
    medium: Literal["Disk", "Memory"] = Field(
        default="Disk", description="`Memory` makes a tmpfs. Not used with `perJob` (always a tmpfs)."
    )
    size_limit: Size | None = Field(
        default=None,
        description="Size limit of the emptyDir (the kubelet evicts the whole worker pod past it). With `perJob`: the"
        " most the job's own tmpfs holds (the smallest of the group's perJob sizeLimits).",
    )
    per_job: bool = Field(
        default=False,
        description="Each job gets its own empty directory here instead of one every job on the node shares: on a"
        " tmpfs of the job's that all its perJob mounts share, of the job's memory on the node less 64 MiB (at most"
        " half of it; at most `sizeLimit`), charged to the job's memory (a job that fills it fails itself, never the"
        " pod), seen by every step and task of the job on that node, and gone with all it held when the job ends."
        " No emptyDir is made for it.",
    )

    @field_validator("jail_path")
    @classmethod
    def _not_a_system_dir(cls, path: str) -> str:
        if path in JAIL_SYSTEM_DIRS:
            raise ValueError(f"{path} is a system directory of the jail; a node-local mount would hide it")
        if hides_jail_system_files(path):
            raise ValueError(
                f"{path} is inside a system directory of the jail; a node-local mount would hide what is there:"
                " use a path such as /scratch, /tmp or /var/tmp"
            )
        return path


class WorkerGroup(Placed):
    """A set of identical Slurm worker nodes (one WorkerSet, whose pods the operator manages)."""

    name: DnsLabel = Field(description="Group name; node names are `<cluster>-worker-<name>-<i>`.")
    replicas: int = Field(
        default=1,
        ge=0,
        le=10000,
        description="Number of Slurm nodes in the group; with `autoscaled`, the number it starts with and the "
        "most nodes a job may ask for while the autoscaler has the group smaller (even at zero).",
    )
    autoscaled: bool = Field(
        default=False,
        description="Something else owns the group's size (HPA, KEDA, `kubectl scale workerset`, 0 included): "
        "the operator sets `replicas` when it creates the group's WorkerSet, never again.",
    )
    scale_in_timeout_seconds: int | None = Field(
        default=None,
        ge=0,
        le=31_536_000,
        description="Scale-in: how long a leaving node, drained, waits for its jobs before its pod is deleted "
        "anyway (its jobs are then requeued or killed). Unset: it waits for them to end, however long.",
    )
    max_unavailable: int = Field(
        default=1,
        ge=1,
        le=10000,
        description="Upgrades (a changed image or pod template): nodes of the group out of service at a time, "
        "each drained and replaced once it runs no job.",
    )
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    gpus: Gpus = Field(default_factory=Gpus)
    containers: bool | None = Field(
        default=None,
        description="Containers in this group's job steps (pyxis); unset: as spec.containers.enabled says. `false`"
        " in a cluster where other groups have them: a step here that asks for an image fails, saying so.",
    )
    features: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=64)]] = Field(
        default_factory=list, max_length=32, description="Extra Slurm node features."
    )
    local_mounts: list[LocalMount] = Field(
        default_factory=lambda: [
            LocalMount(name="tmp", jail_path="/tmp", per_job=True),
            LocalMount(name="shm", jail_path="/dev/shm", medium="Memory", per_job=True),
        ],
        max_length=16,
        description="Node-local directories bound into the jail; each name and each jailPath once.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.all(m, self.exists_one(n, n.name == m.name))", "message": "duplicate name"},
                {
                    "rule": "self.all(m, self.exists_one(n, n.jailPath == m.jailPath))",
                    "message": "duplicate jailPath: two mounts at one path, the second would hide the first",
                },
            ]
        },
    )

    max_user_processes: int = Field(
        default=8192,
        ge=0,
        le=2**31,
        description="The most processes and threads one user may have on a node while a step of theirs starts"
        " (RLIMIT_NPROC of every task of an ordinary user's step; its fork and clone fail with EAGAIN past it)."
        " The kernel counts all of that user's processes on the machine, other jobs of theirs included. 0: no"
        " limit. root's steps are not limited.",
    )

    @model_validator(mode="after")
    def _slurm_sized(self) -> WorkerGroup:
        cpu = self.resources.limits.get("cpu")
        if cpu is not None and quantity_mod.whole_cpus(cpu) > MAX_SLURM_CPUS:
            raise ValueError(
                f"resources.limits.cpu: {cpu} is more CPUs than a Slurm node has (at most {MAX_SLURM_CPUS})"
            )
        return self

    @field_validator("local_mounts")
    @classmethod
    def _unique_mounts(cls, mounts: list[LocalMount]) -> list[LocalMount]:
        for attr in ("name", "jail_path"):
            seen: set[str] = set()
            for m in mounts:
                value = getattr(m, attr)
                if value in seen:
                    raise ValueError(f"duplicate {to_camel(attr)} {value!r}: each mount needs its own name and path")
                seen.add(value)
        return mounts


#: names slurm.conf reads as keywords: `PartitionName=DEFAULT` sets every partition's defaults (the
#: partition would not exist), `AllowGroups=ALL` lets everyone in; Slurm compares them in any case
SLURM_RESERVED_PARTITION_NAMES = ("default",)
SLURM_RESERVED_GROUP_NAMES = ("all",)


#: a Slurm partition name (`sbatch -p`)
PartitionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$", min_length=1, max_length=32)]


class Partition(Spec):
    """A Slurm partition made of whole worker groups."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": " && ".join(f"self.name.lowerAscii() != {n!r}" for n in SLURM_RESERVED_PARTITION_NAMES),
                    "message": "DEFAULT (in any case) is Slurm's keyword for every partition's defaults, no"
                    " partition: choose another name",
                    "fieldPath": ".name",
                },
                {
                    "rule": "!has(self.allowGroups) || self.allowGroups.all(g, "
                    + " && ".join(f"g.lowerAscii() != {n!r}" for n in SLURM_RESERVED_GROUP_NAMES)
                    + ")",
                    "message": "ALL (in any case) is Slurm's keyword for everyone, no Unix group: leave allowGroups"
                    " empty to let everyone in",
                    "fieldPath": ".allowGroups",
                },
            ]
        }
    )

    name: PartitionName = Field(description="Partition name (`sbatch -p`).")
    worker_groups: list[DnsLabel] = Field(min_length=1, max_length=64, description="Groups in this partition.")
    default: bool = Field(default=False, description="The default partition (at most one).")
    max_time: str = Field(
        default="UNLIMITED",
        pattern=r"^(UNLIMITED|INFINITE|(\d+-)?\d+(:\d{1,2}){0,2})$",
        description="Slurm MaxTime, e.g. `1-00:00:00`.",
    )
    allow_groups: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", max_length=64)]] = Field(
        default_factory=list,
        max_length=64,
        description="Only members of these Unix groups (jail or directory groups) may run jobs here (Slurm"
        " AllowGroups; root and SlurmUser always may). Empty: everyone.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    @field_validator("name")
    @classmethod
    def _not_a_keyword(cls, name: str) -> str:
        if name.lower() in SLURM_RESERVED_PARTITION_NAMES:
            raise ValueError(
                f"{name!r} is Slurm's keyword for every partition's defaults, no partition: choose another"
            )
        return name

    @field_validator("allow_groups")
    @classmethod
    def _no_keyword_group(cls, groups: list[str]) -> list[str]:
        for g in groups:
            if g.lower() in SLURM_RESERVED_GROUP_NAMES:
                raise ValueError(
                    f"{g!r} is Slurm's keyword for everyone, no Unix group: leave allowGroups empty instead"
                )
        return groups


#: Slurm 24.11's PrivateData values (slurm.conf). slurmdbd.conf takes the accounting ones only.
PrivateDataItem = Literal[
    "accounts", "cloud", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users"
]
SLURMDBD_PRIVATE_DATA = ("accounts", "events", "jobs", "reservations", "usage", "users")


class SlurmConfig(Spec):
    """Additions to slurm.conf."""

    private_data: list[PrivateDataItem] = Field(
        default=["jobs", "usage"],
        max_length=9,
        description="What ordinary users see only of their own (Slurm's PrivateData, in slurm.conf and "
        "slurmdbd.conf): `jobs` (squeue, scontrol show job, sacct: command, working directory, output paths), "
        "`usage` (sshare, sreport), `accounts`, `users`, `reservations`, `events`, `nodes`, `partitions`, "
        "`cloud`. Root, SlurmUser (the operator and the exporter act as it) and Slurm operators and "
        "administrators see everything. `[]`: everyone sees everything, Slurm's own default.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    extra_lines: list[Annotated[str, Field(pattern=SLURM_CONF_LINE, max_length=1024)]] = Field(
        default_factory=list,
        max_length=128,
        description="`Key=Value` lines appended to slurm.conf. Refused: keys the operator owns, and keys that run "
        "programs, change identities or name files the daemons load or write as root (Prolog, Epilog, "
        "SlurmdUser, RebootProgram, ResumeProgram, PluginDir, ...: docs/security.md).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.all(l, !l.matches(r'{OWNED_KEY_LINE}'))",
                    "message": "a line sets a key Warden owns; set it through the matching spec field "
                    "(PrivateData: privateData; AuthAltParameters: security.maxTokenLifespanSeconds;"
                    " AccountingStorageEnforce: accounting.enforce)",
                },
                {
                    "rule": f"self.all(l, !l.matches(r'{REFUSED_KEY_LINE}'))",
                    "message": "a line sets a key that runs programs or changes identities as root "
                    "(Prolog, Epilog, SlurmdUser, *Program, PluginDir, log and pid files...) or replaces a plugin"
                    " the jail depends on (JobContainerType, LaunchType, SwitchType); Warden refuses it",
                },
                {
                    "rule": f"self.all(l, l.matches(r'{ONE_PAIR_LINE}'))",
                    "message": "a line is not one Key=Value (a value one word or a double-quoted string, then"
                    " maybe a # comment): write each on a line of its own",
                },
                {
                    "rule": "self.all(l, l.split('=')[0].lowerAscii() in "
                    + "["
                    + ", ".join(f"'{k.lower()}'" for k in ALLOWED_SLURM_KEYS)
                    + "])",
                    "message": "a line sets a key Warden does not let extraLines set: the keys it may set are"
                    " scheduling, limits, priorities, preemption, timeouts and debug levels (docs/security.md"
                    " lists them)",
                },
                {
                    "rule": r"self.all(l, !l.endsWith('\\'))",
                    "message": "a line ends with a backslash, which makes slurm.conf read the next line as part of"
                    " it: write each Key=Value on a line of its own",
                },
            ]
        },
    )

    @field_validator("private_data")
    @classmethod
    def _unique(cls, items: list[str]) -> list[str]:
        dupes = sorted({i for i in items if items.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate value {dupes[0]!r}")
        return items

    @field_validator("extra_lines")
    @classmethod
    def _no_owned_or_refused_keys(cls, lines: list[str]) -> list[str]:
        owned, refused, one_pair = re.compile(OWNED_KEY_LINE), re.compile(REFUSED_KEY_LINE), re.compile(ONE_PAIR_LINE)
        allowed = {k.lower() for k in ALLOWED_SLURM_KEYS}
        for line in lines:
            if m := owned.search(line):
                field = SLURM_KEY_FIELDS.get(m.group(2).lower(), "the matching spec field")
                raise ValueError(f"{m.group(2)} is set by Warden; set it through {field}")
            if m := refused.search(line):
                raise ValueError(
                    f"{m.group(2)} runs programs or changes identities as root outside the jail, or replaces a"
                    " plugin the jail depends on; Warden refuses it (docs/security.md)"
                )
            if not one_pair.match(line):
                raise ValueError(
                    f"{line!r} is not one Key=Value (a value one word or a double-quoted string, then maybe a #"
                    " comment): write each on a line of its own"
                )
            if (key := line.split("=", 1)[0]).lower() not in allowed:
                raise ValueError(
                    f"{key} is not a key extraLines may set: the keys it may set are scheduling, limits, priorities,"
                    " preemption, timeouts and debug levels (docs/security.md lists them)"
                )
            if line.endswith("\\"):
                raise ValueError(
                    f"{line!r} ends with a backslash, which makes slurm.conf read the next line as part of it:"
                    " write each Key=Value on a line of its own"
                )
        return lines


class SecretKeyRef(Spec):
    name: DnsSubdomain = Field(description="Secret name.")
    key: str = Field(default="password", pattern=r"^[-._a-zA-Z0-9]+$", max_length=253, description="Key in the Secret.")


class ExternalDatabase(Spec):
    """A MariaDB/MySQL server run outside the cluster."""

    host: str = Field(pattern=HOST, min_length=1, max_length=253, description="Database host name or IP address.")
    port: int = Field(default=3306, ge=1, le=65535, description="Database port.")
    user: str = Field(
        default="slurm", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", max_length=32, description="Database user."
    )
    database: str = Field(
        default="slurm_acct_db", pattern=r"^[A-Za-z0-9_]+$", max_length=64, description="Database name."
    )
    password_secret_ref: SecretKeyRef = Field(description="Secret (same namespace) holding the password.")


class InClusterDatabase(Spec):
    storage_size: Size = Field(default="5Gi", description="Size of the database volume.")
    storage_class_name: DnsSubdomain | None = Field(default=None, description="StorageClass to use.")


#: slurm.conf's AccountingStorageEnforce values (Slurm's words)
AccountingEnforce = Literal["associations", "limits", "qos", "safe", "nojobs", "nosteps", "wckeys"]
DEFAULT_ENFORCE: tuple[AccountingEnforce, ...] = ("associations", "limits", "qos")


class Accounting(Spec):
    """slurmdbd and its database."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.mode) || self.mode != 'External' || has(self.external)",
                    "message": "mode External needs spec.accounting.external (host and passwordSecretRef)",
                    "fieldPath": ".external",
                }
            ]
        }
    )

    mode: Literal["Disabled", "InCluster", "External"] = Field(
        default="Disabled", description="No accounting, MariaDB run by Warden, or your own database."
    )
    in_cluster: InClusterDatabase = Field(default_factory=InClusterDatabase, description="For mode InCluster.")
    external: ExternalDatabase | None = Field(default=None, description="For mode External.")
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    default_account: str = Field(
        default="users",
        pattern=r"^([a-z0-9_][a-z0-9_.-]{0,63})?$",
        max_length=64,
        description="Jail users (uid 1000-59999) that accounting does not know yet get an association in this"
        " account within seconds of being made (the account is created), so `sacct` shows them their jobs."
        " Users an admin put in accounting keep theirs. Empty: none (add users with `sacctmgr`).",
    )
    enforce: list[AccountingEnforce] = Field(
        default_factory=lambda: list(DEFAULT_ENFORCE),
        max_length=7,
        description="slurm.conf's AccountingStorageEnforce: what slurmctld holds every job to. The default:"
        " a job runs only in an association (a user in an account), within the limits and QoS an admin sets"
        " with `sacctmgr`, and one naming an unknown account or QoS is refused. Users get their association"
        " from defaultAccount, the bridge's pods one per namespace (docs/operations.md). Empty: nothing is"
        " enforced (Slurm's `none`).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    @model_validator(mode="after")
    def _external_needs_block(self) -> Accounting:
        if self.mode == "External" and self.external is None:
            raise ValueError("external: mode External needs spec.accounting.external (host and passwordSecretRef)")
        return self


#: an LDAP URI: ldaps:// or ldap:// and a host, an optional port, nothing else
LDAP_URI = r"^ldaps?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/?$"


def ldap_address(uri: str) -> tuple[str, int, bool]:
    """An LDAP URI's host, TCP port (636 for ldaps://, 389 for ldap:// unless it names one) and whether it
    is TLS from the first byte."""
    parts = urlsplit(uri)
    secure = parts.scheme == "ldaps"
    return parts.hostname or "", parts.port or (636 if secure else 389), secure


#: a distinguished name of printable ASCII on one line (sssd.conf takes it as it is)
LDAP_DN = r"^[A-Za-z][A-Za-z0-9-]*=[ -~]*$"
#: an LDAP search filter in parentheses, printable ASCII on one line
LDAP_FILTER = r"^\([ -~]*\)$"


class Ldap(Spec):
    """An LDAP directory (OpenLDAP, FreeIPA's, Active Directory) that users and groups come from, read by
    SSSD in the controller, login and worker pods."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.insecurePlaintext) && self.insecurePlaintext) || "
                    "!has(self.startTls) || self.startTls || self.uris.all(u, u.startsWith('ldaps://'))",
                    "message": "an ldap:// URI without startTls sends passwords and users in the clear; use ldaps://,"
                    " keep startTls on, or set insecurePlaintext: true",
                    "fieldPath": ".startTls",
                }
            ]
        }
    )

    uris: list[Annotated[str, Field(pattern=LDAP_URI, max_length=263)]] = Field(
        min_length=1,
        max_length=8,
        description="Servers, tried in order: `ldaps://host[:port]` (TLS from the first byte) or `ldap://host[:port]`"
        " (StartTLS unless startTls is false).",
    )
    search_base: Annotated[str, Field(pattern=LDAP_DN, max_length=1024)] = Field(
        description="Base DN of users and groups, e.g. `dc=example,dc=org`."
    )
    user_search_base: Annotated[str, Field(pattern=LDAP_DN, max_length=1024)] | None = Field(
        default=None, description="Base DN of users (default: searchBase)."
    )
    group_search_base: Annotated[str, Field(pattern=LDAP_DN, max_length=1024)] | None = Field(
        default=None, description="Base DN of groups (default: searchBase)."
    )
    user_filter: Annotated[str, Field(pattern=LDAP_FILTER, max_length=1024)] | None = Field(
        default=None, description="Only users matching this filter exist on the cluster, e.g. `(memberOf=cn=hpc,...)`."
    )
    group_filter: Annotated[str, Field(pattern=LDAP_FILTER, max_length=1024)] | None = Field(
        default=None, description="Only groups matching this filter exist on the cluster."
    )
    schema_: Literal["rfc2307", "rfc2307bis", "AD"] = Field(
        default="rfc2307",
        alias="schema",
        description="`rfc2307` (posixGroup memberUid: OpenLDAP's nis schema), `rfc2307bis` (groups list member DNs),"
        " `AD` (Active Directory: its attribute names; uids and gids from uidNumber/gidNumber, or from the SIDs"
        " with idMapping).",
    )
    id_mapping: bool = Field(
        default=False,
        description="Active Directory without POSIX attributes: derive uids and gids from the objects' SIDs"
        " (the same on every pod).",
    )
    bind_secret: DnsSubdomain | None = Field(
        default=None,
        description="Secret (same namespace) with keys `bindDN` and `password`: the account SSSD reads the directory"
        " as. Only the controller, login and worker pods mount it. Absent: anonymous reads.",
    )
    ca_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key (default `password`; use `key: ca.crt`) holding the PEM CA bundle that signed the"
        " servers' certificates. Absent: the images' system CAs.",
    )
    start_tls: bool = Field(default=True, description="StartTLS on `ldap://` URIs (ldaps:// is TLS anyway).")

    @field_validator("uris")
    @classmethod
    def _addresses(cls, uris: list[str]) -> list[str]:
        for uri in uris:
            try:
                port = ldap_address(uri)[1]
            except ValueError as e:  # `[0]` is no IPv6 address; a port above 65535
                raise ValueError(f"{uri!r} names no host and port a client can reach ({e})") from None
            if not 0 < port < 65536:
                raise ValueError(f"{uri!r}: port {port} is not 1-65535")
        return uris

    @property
    def ports(self) -> list[int]:
        """The servers' TCP ports: what the pods running SSSD may reach (warden.render.network)."""
        return sorted({ldap_address(u)[1] for u in self.uris})

    insecure_plaintext: bool = Field(
        default=False,
        description="Allow `ldap://` without StartTLS: users, groups and the bind password cross the network in the"
        " clear. Only for a directory on a network you trust.",
    )
    ssh_key_attribute: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9-]*$", max_length=64)] = Field(
        default="sshPublicKey",
        description="The user attribute holding SSH public keys (OpenSSH's LPK schema: sshPublicKey); login nodes"
        " accept them beside the keys in the user's jail home.",
    )
    cache_seconds: int = Field(
        default=300,
        ge=10,
        le=86400,
        description="How long a looked-up user or group is trusted before the directory is asked again: a person"
        " removed from the directory can log in and submit until then. While the directory is unreachable, the"
        " cached users keep working.",
    )

    @model_validator(mode="after")
    def _tls(self) -> Ldap:
        if not self.insecure_plaintext and not self.start_tls:
            plain = [u for u in self.uris if u.startswith("ldap://")]
            if plain:
                raise ValueError(
                    f"startTls: {plain[0]} without StartTLS sends passwords and users in the clear; use ldaps://,"
                    " keep startTls on, or set insecurePlaintext: true"
                )
        return self


class Identity(Spec):
    """Where users and groups come from besides the jail's own /etc/passwd (`warden-useradd`)."""

    ldap: Ldap | None = Field(
        default=None,
        description="An LDAP/AD directory: its users log in with the SSH keys it holds, get a home in the jail at"
        " their first login, and run jobs as their directory uid on every node.",
    )


class NcclCheck(Spec):
    """NCCL all_reduce_perf on every GPU node; slow nodes are drained."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.minBytes) || !has(self.maxBytes) || !isQuantity(string(self.minBytes))"
                    " || !isQuantity(string(self.maxBytes))"
                    " || quantity(string(self.minBytes)).compareTo(quantity(string(self.maxBytes))) <= 0",
                    "message": "minBytes is larger than maxBytes (all_reduce_perf would measure nothing): swap them",
                    "fieldPath": ".minBytes",
                }
            ]
        }
    )

    enabled: bool = Field(default=False, description="Run the check (only GPU groups are checked).")
    schedule: str = Field(default="0 */6 * * *", pattern=CRON, max_length=128, description="Cron schedule.")
    min_bus_bandwidth_gbps: float = Field(
        default=100.0, gt=0, le=100000, description="Drain a node whose average bus bandwidth (GB/s) is lower."
    )
    min_bytes: Size = Field(default="512M", description="all_reduce_perf -b (at most maxBytes).")
    max_bytes: Size = Field(default="8G", description="all_reduce_perf -e.")
    time_limit_minutes: int = Field(default=10, ge=1, le=1440, description="Per-node time limit.")
    concurrency: int = Field(default=4, ge=1, le=256, description="Nodes checked at once.")

    @model_validator(mode="after")
    def _bytes_in_order(self) -> NcclCheck:
        if quantity_mod.parse(self.min_bytes) > quantity_mod.parse(self.max_bytes):
            raise ValueError(f"minBytes {self.min_bytes} is larger than maxBytes {self.max_bytes}: swap them")
        return self


class QuickCheck(Spec):
    """Slurm HealthCheckProgram on every worker (GPU devices, nvidia-smi, jail mounted)."""

    enabled: bool = Field(default=True, description="Set HealthCheckProgram on every worker.")
    interval_seconds: int = Field(default=300, ge=10, le=86400, description="HealthCheckInterval.")


class HealthChecks(Spec):
    """GPU and node health checks."""

    nccl: NcclCheck = Field(default_factory=NcclCheck)
    quick: QuickCheck = Field(default_factory=QuickCheck)


class SeccompProfile(Spec):
    """Seccomp profile of the worker containers. It must allow pivot_root and mount, which the
    container runtimes' default profiles (RuntimeDefault) block."""

    type: Literal["Localhost", "Unconfined", "RuntimeDefault"] = Field(
        default="Localhost", description="RuntimeDefault blocks pivot_root: jobs then fail to enter the jail."
    )
    localhost_profile: str = Field(
        default="warden/worker.json",
        pattern=RELATIVE_PATH,
        max_length=253,
        description="Path under the kubelet's seccomp directory (images/worker/seccomp.json installed there).",
    )


class Security(Spec):
    """What the worker pods need beyond the defaults (no privileged containers, ever), how long users' REST API
    tokens may live, and whether users see each other's processes."""

    worker_seccomp_profile: SeccompProfile = Field(default_factory=SeccompProfile)
    worker_app_armor_unconfined: bool = Field(
        default=True,
        description="Run workers without AppArmor confinement (runtime default profiles deny mount).",
    )
    app_armor_profile: Literal["Warden", "Unconfined"] | None = Field(
        default=None,
        description="AppArmor of login and worker pods on nodes that have it on (Ubuntu, Debian): `Warden` confines "
        "them by Warden's own profiles `warden-login` and `warden-worker` (the runtime's default rules plus the "
        "mounts the jail is made of), which must be loaded on those nodes first (the chart's files/apparmor, "
        'docs/nodes.md "AppArmor"); `Unconfined`: none. Unset: login pods unconfined, workers as '
        "workerAppArmorUnconfined says. The runtime's default profile denies every jail bind: never that.",
    )
    max_token_lifespan_seconds: int = Field(
        default=86400,
        ge=60,
        le=MAX_TOKEN_LIFESPAN_SECONDS,
        description="The longest lifespan `scontrol token lifespan=...` gives an ordinary user (slurm.conf's "
        'AuthAltParameters max_token_lifespan): slurmctld refuses a longer one ("Requested time limit is invalid")'
        " and a token asked for without a lifespan lasts the smaller of 30 minutes and this. root and SlurmUser are"
        " not limited (Slurm's rule); the operator's own tokens are minted by the operator.",
    )
    hide_other_users_processes: bool = Field(
        default=True,
        description="On login and worker pods, users see only their own processes in /proc (`ps`, `top`): "
        "another user's command line, environment and open files stay theirs (procfs `hidepid=invisible`). "
        "root sees everything.",
    )


CIDR = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9A-Fa-f:]+/[0-9]{1,3})$"


class NetworkPolicy(Spec):
    """NetworkPolicies of the cluster's pods (enforced where the network plugin enforces them)."""

    enabled: bool = Field(
        default=True,
        description="Render NetworkPolicies: Slurm's daemons, SSH and the REST API reach what they need; the "
        "database only slurmdbd; job steps and login sessions no Kubernetes API and no database.",
    )
    job_egress_cidrs: list[Annotated[str, Field(pattern=CIDR, max_length=43)]] = Field(
        default_factory=list,
        max_length=64,
        description="Networks job steps and login sessions may reach besides the cluster's own Slurm pods and DNS "
        "(e.g. a package mirror, object storage). Empty: none. `0.0.0.0/0` opens everything, the "
        "Kubernetes API's address included: list narrower networks when that matters.",
    )


DURATION = r"^[0-9]+(ms|s|m|h)$"


class ServiceMonitor(Spec):
    """A Prometheus Operator ServiceMonitor for the exporter."""

    mode: Literal["Auto", "Enabled", "Disabled"] = Field(
        default="Auto",
        description="`Auto`: made when the ServiceMonitor CRD (monitoring.coreos.com/v1) is installed; `Enabled`: "
        "always (the cluster reports an apply error while the CRD is missing); `Disabled`: never.",
    )
    interval: str = Field(default="30s", pattern=DURATION, max_length=16, description="Scrape interval (e.g. `30s`).")
    labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=16,
        description="Extra labels of the ServiceMonitor, for a Prometheus whose `serviceMonitorSelector` asks for "
        "them (e.g. `release: prometheus`).",
        json_schema_extra={"x-kubernetes-validations": [_keys_rule("a ServiceMonitor label key is not a label key")]},
    )

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, labels: dict[str, str]) -> dict[str, str]:
        return _qualified_keys(labels, "serviceMonitor label key")


class DcgmJobMapping(Spec):
    """Job-to-GPU mapping files for dcgm-exporter's HPC job mapping (`DCGM_HPC_JOB_MAPPING_DIR`)."""

    enabled: bool = Field(
        default=False,
        description="Worker prolog and epilog write, per GPU index, a file naming the jobs on that GPU.",
    )
    host_path: str = Field(
        default="/var/lib/dcgm-exporter/job-mapping",
        pattern=ABSOLUTE_PATH,
        max_length=255,
        description="Directory on each GPU node (a hostPath) where the files go; dcgm-exporter mounts the same one.",
    )


class ContainerStore(Spec):
    """Where each worker keeps container images and the containers made from them (node-local)."""

    size_limit: Size = Field(
        default="50Gi",
        description="Size of the store: an emptyDir's sizeLimit, and with either kind what Warden's importer and"
        " enroot keep their writes within (an import or an unpack that would go past it fails the job step,"
        " saying why; docs/containers.md). With hostPath, Kubernetes enforces nothing.",
    )
    per_user_limit: Size | None = Field(
        default=None,
        description="What one user's images and containers may take of the store on one node (default: half"
        " of sizeLimit; at most sizeLimit). An import or an unpack past it fails the user's job step, saying"
        " why, after the user's least recently used images are removed.",
    )
    host_path: str | None = Field(
        default=None,
        pattern=ABSOLUTE_PATH,
        max_length=255,
        description="A directory on the node (hostPath, made when missing) instead of an emptyDir: images"
        " imported there stay across worker pod restarts. Give each cluster its own directory.",
    )


class Containers(Spec):
    """Containers in job steps: NVIDIA pyxis and enroot (`srun --container-image=...`,
    `#SBATCH --container-image`); docs/containers.md."""

    enabled: bool = Field(
        default=False,
        description="Load pyxis on every worker (a group's `containers` overrides it). Job steps without"
        " --container-image still run in the jail; on those workers they then get the seccomp filter with"
        " no_new_privs (setuid programs do not gain privileges in job steps): see docs/containers.md.",
    )
    store: ContainerStore = Field(default_factory=ContainerStore)
    allow_http_registries: bool = Field(
        default=False,
        description="Let enroot talk plain HTTP to registries (ENROOT_ALLOW_HTTP): only for a registry inside"
        " a network you trust.",
    )


class TreeTopology(Spec):
    """Slurm's `topology/tree`: each worker under the switches its Kubernetes node's labels name."""

    switch_labels: list[QualifiedName] = Field(
        min_length=1,
        max_length=8,
        description="Node labels naming the switches above a node, from the top tier down to the leaf switch"
        " the node is cabled to (e.g. `[example.com/spine, example.com/leaf]`). Every label's value is a switch"
        " name; a node missing one of them is left out of the tree (status.slurmNodes.topology.unplaced).",
    )

    @field_validator("switch_labels")
    @classmethod
    def _distinct(cls, labels: list[str]) -> list[str]:
        if len(set(labels)) != len(labels):
            raise ValueError("each tier needs its own label: a label named twice makes a switch its own parent")
        return labels


class BlockTopology(Spec):
    """Slurm's `topology/block`: each worker in the block its Kubernetes node's label names (e.g. an NVLink
    domain); `--segment` keeps a job's nodes together within blocks."""

    label: QualifiedName = Field(description="Node label naming the node's base block (e.g. `nvidia.com/gpu.clique`).")
    block_sizes: list[Annotated[int, Field(ge=1, le=1 << 20)]] = Field(
        min_length=1,
        max_length=16,
        description="Slurm's BlockSizes: the base block's node count first, then the larger sizes Slurm may"
        " aggregate blocks to, each the base times a power of two (e.g. `[18, 36, 72]`).",
    )

    @field_validator("block_sizes")
    @classmethod
    def _powers_of_two(cls, sizes: list[int]) -> list[int]:
        base = sizes[0]
        for size in sizes[1:]:
            ratio = size // base
            if size % base or ratio < 2 or ratio & (ratio - 1) or ratio > 1 << 15:
                raise ValueError(
                    f"{size} is not {base} (the base block size, the first) times a power of two from 2 to 32768;"
                    " Slurm refuses such BlockSizes and slurmctld would not start"
                )
        if sizes != sorted(set(sizes)):
            raise ValueError("give each size once, smallest first")
        return sizes


class Topology(Spec):
    """The network topology Slurm places jobs by, from the labels of the Kubernetes nodes the workers run on
    (kept current by the operator's Slurm sync; Slurm 25.05 or newer). docs/operations.md, "Topology"."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.tree) != has(self.block)", "message": "give exactly one of tree and block"},
                {
                    "rule": "has(self.tree) == has(oldSelf.tree)",
                    "message": "tree and block are not swapped in place (Slurm keeps each node's place): remove"
                    " spec.topology, wait until status.slurmNodes.topology is gone, then set the other",
                },
            ]
        }
    )

    tree: TreeTopology | None = Field(default=None, description="Switches (`--switches`).")
    block: BlockTopology | None = Field(default=None, description="Blocks (`--segment`).")

    @model_validator(mode="after")
    def _one(self) -> Topology:
        if (self.tree is None) == (self.block is None):
            raise ValueError("give exactly one of tree and block")
        return self

    @property
    def plugin(self) -> str:
        return "topology/tree" if self.tree is not None else "topology/block"


class NodeLabelFeature(Spec):
    """A Kubernetes node label whose value becomes a Slurm feature of the workers on that node
    (`sbatch --constraint=<prefix><value>`)."""

    label: QualifiedName = Field(description="The node label (e.g. `topology.kubernetes.io/zone`).")
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]*$", max_length=32)] = Field(
        default="",
        description="Put before the value (e.g. `zone-`), so that values of different labels (`true`) stay apart.",
    )


class NodeConditionDrain(Spec):
    """A Kubernetes node condition that drains the Slurm nodes of the workers on that node while it holds
    (set by Node Problem Detector, NVIDIA's GPU health tooling or a person; docs/health-checks.md)."""

    type: QualifiedName = Field(
        description="The condition's type, as `kubectl describe node` lists it (e.g. `GpuXidError`, Node Problem"
        " Detector's `KernelDeadlock`)."
    )
    status: Literal["True", "False", "Unknown"] = Field(
        default="True", description="The condition's status that drains (`True`: the problem is there)."
    )
    worker_groups: list[DnsLabel] = Field(
        default_factory=list,
        max_length=64,
        description="The worker groups whose nodes it drains; empty: every group.",
    )


class Metrics(Spec):
    """Prometheus metrics of Slurm: the exporter Deployment `<cluster>-exporter` (reads Slurm through
    slurmrestd) and its Service, with scrape annotations."""

    enabled: bool = Field(default=True, description="Run the Slurm metrics exporter.")
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    service_monitor: ServiceMonitor = Field(default_factory=ServiceMonitor)
    dcgm_job_mapping: DcgmJobMapping = Field(default_factory=DcgmJobMapping)


#: the partition slurm.conf gets when spec.partitions is empty (``SlurmClusterSpec.effective_partitions``)
DEFAULT_PARTITION = "main"
#: the Slurm series whose slurmctld has no external jobs (the bridge's placeholders: Slurm 25.05 on)
SERIES_WITHOUT_EXTERNAL_JOBS = ("24.11",)
#: what a worker group shared with the bridge's pods needs: explicit requests below its limits
BRIDGE_SHARED_RESOURCES = ("cpu", "memory")
BRIDGE_ROOM_HINT = (
    "its Slurm nodes are sized by the limits, and the bridge's pods run beside the worker pod on the same"
    " Kubernetes node, where the kubelet admits them only if the worker pod's requests leave room (unset requests"
    " default to the limits): set resources.requests.cpu and .memory below resources.limits.cpu and .memory, e.g."
    " requests {cpu: 100m, memory: 256Mi} with limits {cpu: 1, memory: 1Gi}"
)


class Bridge(Spec):
    """The bridge (docs/bridge.md): Slurm schedules Kubernetes pods onto the Slurm nodes of shared worker
    groups, each pod's place held by a placeholder Slurm job. Needs `slurmVersion` 26.05 and the operator
    chart's `bridge.enabled`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.enabled) || !self.enabled || (has(self.workerGroups) && size(self.workerGroups)"
                    " > 0)",
                    "message": "an enabled bridge needs at least one worker group whose Slurm nodes Kubernetes pods"
                    " may share: list it in workerGroups (e.g. [cpu])",
                    "fieldPath": ".workerGroups",
                },
                {
                    "rule": "!has(self.partition) || "
                    + " && ".join(f"self.partition.lowerAscii() != {n!r}" for n in SLURM_RESERVED_PARTITION_NAMES),
                    "message": "DEFAULT (in any case) is Slurm's keyword for every partition's defaults, no"
                    " partition: choose another name",
                    "fieldPath": ".partition",
                },
            ]
        }
    )

    enabled: bool = Field(default=False, description="Let Slurm schedule Kubernetes pods on this cluster.")
    partition: PartitionName = Field(
        default="k8s",
        description="The Slurm partition of the bridge's placeholder jobs (`squeue -p`), made of the nodes of"
        " `workerGroups`; no partition of spec.partitions may have its name.",
    )
    worker_groups: list[DnsLabel] = Field(
        default_factory=list,
        max_length=64,
        description="Worker groups (names in spec.workerGroups) whose Slurm nodes Kubernetes pods may share,"
        " running beside the worker pod on its Kubernetes node; at least one when enabled. Each needs"
        " `resources.requests` cpu and memory below its `resources.limits` (the Slurm node's size), so that"
        " the worker pod leaves room for the pods.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    qos: Annotated[str, Field(pattern=r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)?$", max_length=64)] = Field(
        default="",
        description="The QoS of the placeholder jobs unless a pod's or its namespace's annotation"
        " `slurm.warden.dev/qos` says otherwise; empty: Slurm's default QoS.",
    )
    scheduler_name: DnsSubdomain = Field(
        default="warden-slurm",
        description="The `spec.schedulerName` of the pods the bridge schedules onto this cluster: the bridge's"
        " own (the operator chart's `bridge.schedulerName`).",
    )

    @field_validator("partition")
    @classmethod
    def _partition_not_a_keyword(cls, name: str) -> str:
        if name.lower() in SLURM_RESERVED_PARTITION_NAMES:
            raise ValueError(
                f"{name!r} is Slurm's keyword for every partition's defaults, no partition: choose another"
            )
        return name

    @field_validator("worker_groups")
    @classmethod
    def _each_group_once(cls, groups: list[str]) -> list[str]:
        dupes = sorted({g for g in groups if groups.count(g) > 1})
        if dupes:
            raise ValueError(f"{dupes[0]!r} is named twice: name each worker group once")
        return groups

    @model_validator(mode="after")
    def _groups_when_enabled(self) -> Bridge:
        if self.enabled and not self.worker_groups:
            raise ValueError(
                "workerGroups: an enabled bridge needs at least one worker group whose Slurm nodes Kubernetes pods"
                " may share: list it (e.g. workerGroups: [cpu])"
            )
        return self


def shared_group_problem(group: WorkerGroup) -> str | None:
    """What keeps ``group`` from sharing its nodes with the bridge's pods, or None: each of
    ``BRIDGE_SHARED_RESOURCES`` needs a limit (the Slurm node's size) and a request below it."""
    resources = group.resources
    for name in BRIDGE_SHARED_RESOURCES:
        limit, request = resources.limits.get(name), resources.requests.get(name)
        if limit is None:
            return f"no resources.limits.{name}"
        if request is None:
            return f"no resources.requests.{name}"
        if quantity_mod.parse(request) >= quantity_mod.parse(limit):
            return f"resources.requests.{name} {request} is not below resources.limits.{name} {limit}"
    return None


#: CEL twins of the checks ``SlurmClusterSpec._bridge_fits`` makes, spec-wide
_BRIDGE_ON = "has(self.bridge) && has(self.bridge.enabled) && self.bridge.enabled"
_ROOM_LEFT = (
    "has(g.resources) && has(g.resources.requests) && has(g.resources.limits) && "
    + repr(list(BRIDGE_SHARED_RESOURCES))
    + ".all(r, r in g.resources.requests && r in g.resources.limits"
    " && isQuantity(string(g.resources.requests[r])) && isQuantity(string(g.resources.limits[r]))"
    " && quantity(string(g.resources.requests[r])).compareTo(quantity(string(g.resources.limits[r]))) < 0)"
)
BRIDGE_CEL_RULES: list[dict[str, Any]] = [
    {
        "rule": f"!({_BRIDGE_ON}) || !has(self.slurmVersion) || "
        + " && ".join(f"self.slurmVersion != {v!r}" for v in SERIES_WITHOUT_EXTERNAL_JOBS),
        "message": "bridge: Slurm 24.11 has no external jobs, which the bridge's placeholder jobs are: set"
        " slurmVersion 26.05, or bridge.enabled false",
        "fieldPath": ".bridge",
    },
    {
        "rule": f"!({_BRIDGE_ON}) || !has(self.bridge.workerGroups) || "
        "self.bridge.workerGroups.all(w, self.workerGroups.exists(g, g.name == w))",
        "message": "every bridge.workerGroups entry must name a group in spec.workerGroups",
        "fieldPath": ".bridge.workerGroups",
    },
    {
        "rule": f"!({_BRIDGE_ON}) || !has(self.bridge.partition) || (has(self.partitions) && size(self.partitions)"
        " > 0 ? self.partitions.all(p, p.name != self.bridge.partition)"
        f" : self.bridge.partition != {DEFAULT_PARTITION!r})",
        "message": "bridge.partition is already a partition of spec.partitions (or the default partition"
        f" {DEFAULT_PARTITION!r} when spec.partitions is empty): choose another name",
        "fieldPath": ".bridge.partition",
    },
    {
        "rule": f"!({_BRIDGE_ON}) || !has(self.bridge.workerGroups) || "
        f"self.workerGroups.all(g, !(g.name in self.bridge.workerGroups) || ({_ROOM_LEFT}))",
        "message": "a worker group in bridge.workerGroups needs resources.requests.cpu and .memory below its"
        f" resources.limits: {BRIDGE_ROOM_HINT}",
        "fieldPath": ".bridge.workerGroups",
    },
]


Weekday = Literal["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


class MaintenanceWindow(Spec):
    """When worker pods may be replaced for an upgrade: a changed worker template (a new image, the workers'
    step of a Slurm upgrade) waits for the window, and Slurm keeps the nodes free for it beforehand."""

    start: str = Field(
        pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$",
        description="When the window opens, `HH:MM` in UTC.",
    )
    duration_minutes: int = Field(
        ge=10,
        le=7 * 24 * 60,
        description="How long it stays open. Nodes drained in it are replaced once idle, even after it closed: no"
        " job is killed.",
    )
    days: list[Weekday] = Field(
        default_factory=list,
        max_length=7,
        description="The days (UTC) it opens on, `Mon` to `Sun`; empty: every day.",
    )


class SlurmClusterSpec(Spec):
    """Desired state of a Slurm cluster with a shared root filesystem."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.partitions) || self.partitions.all(p, p.workerGroups.all(w, "
                    "self.workerGroups.exists(g, g.name == w)))",
                    "message": "every partition's workerGroups must name groups in spec.workerGroups",
                    "fieldPath": ".partitions",
                },
                {
                    "rule": "!has(self.partitions) || "
                    "self.partitions.filter(p, has(p.default) && p.default).size() <= 1",
                    "message": "at most one partition may be the default",
                    "fieldPath": ".partitions",
                },
                {
                    "rule": "!has(self.topology) || !has(self.slurmVersion) || self.slurmVersion != '24.11'",
                    "message": "topology: Slurm 24.11 cannot place nodes that join while it runs;"
                    " set slurmVersion 26.05",
                    "fieldPath": ".topology",
                },
                {
                    "rule": "!has(self.maintenanceWindow) || !has(self.slurmVersion) || self.slurmVersion != '24.11'",
                    "message": "maintenanceWindow: Slurm 24.11's REST API cannot make the window's reservation;"
                    " set slurmVersion 26.05",
                    "fieldPath": ".maintenanceWindow",
                },
                {
                    "rule": "!has(self.nodeConditionDrains) || self.nodeConditionDrains.all(d, !has(d.workerGroups)"
                    " || d.workerGroups.all(w, self.workerGroups.exists(g, g.name == w)))",
                    "message": "every nodeConditionDrains entry's workerGroups must name groups in spec.workerGroups",
                    "fieldPath": ".nodeConditionDrains",
                },
                *BRIDGE_CEL_RULES,
            ]
        }
    )

    slurm_version: SlurmSeries = Field(
        default=DEFAULT_SLURM_SERIES,
        description="The Slurm release series the cluster runs. A newer series is rolled out one part at a time in "
        "Slurm's order (slurmdbd, slurmctld and slurmrestd, the workers, the login nodes, the jail's Slurm "
        "packages), each once the previous part runs it; an older series than the cluster runs is refused "
        '(docs/operations.md, "Upgrading Slurm").',
    )
    images: Images = Field(default_factory=Images)
    jail: Jail = Field(default_factory=Jail)
    controller: Controller = Field(default_factory=Controller)
    rest_api: RestApi = Field(default_factory=RestApi)
    login: Login = Field(default_factory=Login)
    worker_ssh: WorkerSsh = Field(default_factory=WorkerSsh)
    worker_groups: list[WorkerGroup] = Field(
        min_length=1,
        max_length=64,
        description="Worker node groups; names are unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    partitions: list[Partition] = Field(
        default_factory=list,
        max_length=64,
        description="Slurm partitions; when empty, one default partition `main` holds every group.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    slurm_config: SlurmConfig = Field(default_factory=SlurmConfig)
    accounting: Accounting = Field(default_factory=Accounting)
    health_checks: HealthChecks = Field(default_factory=HealthChecks)
    security: Security = Field(default_factory=Security)
    network_policy: NetworkPolicy = Field(default_factory=NetworkPolicy)
    metrics: Metrics = Field(default_factory=Metrics)
    containers: Containers = Field(default_factory=Containers)
    identity: Identity = Field(default_factory=Identity)
    topology: Topology | None = Field(
        default=None, description='Slurm\'s network topology from node labels (docs/operations.md, "Topology").'
    )
    maintenance_window: MaintenanceWindow | None = Field(
        default=None,
        description="Worker upgrades wait for this window: before it, a Slurm reservation keeps the nodes to upgrade"
        " free of jobs that would not end in time; in it, they are drained and replaced at once (docs/operations.md,"
        ' "Maintenance windows"). Unset: upgrades start as soon as they are applied. Needs slurmVersion 26.05.',
    )
    node_label_features: list[NodeLabelFeature] = Field(
        default_factory=list,
        max_length=16,
        description="Node labels that become Slurm features of the workers on each node, kept current by the"
        ' operator (docs/operations.md, "Topology").',
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["label"]},
    )
    node_condition_drains: list[NodeConditionDrain] = Field(
        default_factory=list,
        max_length=32,
        description="Kubernetes node conditions that drain the Slurm nodes of the workers on that node while they"
        " hold, with the condition's reason and message in `sinfo -R`; undrained when they clear"
        ' (docs/health-checks.md, "Kubernetes node conditions").',
    )
    bridge: Bridge | None = Field(
        default=None,
        description="Slurm schedules Kubernetes pods on the nodes of shared worker groups (docs/bridge.md);"
        " unset: off.",
    )

    @model_validator(mode="after")
    def _cross_field(self) -> SlurmClusterSpec:
        names = [g.name for g in self.worker_groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"workerGroups: duplicate name {dupes[0]!r}")
        pnames = [p.name for p in self.partitions]
        pdupes = sorted({n for n in pnames if pnames.count(n) > 1})
        if pdupes:
            raise ValueError(f"partitions: duplicate name {pdupes[0]!r}")
        for p in self.partitions:
            for w in p.worker_groups:
                if w not in names:
                    raise ValueError(
                        f"partitions: partition {p.name!r} names worker group {w!r}, which is not in spec.workerGroups"
                    )
        if sum(1 for p in self.partitions if p.default) > 1:
            raise ValueError("partitions: at most one partition may be the default")
        if self.topology is not None and self.slurm_version == "24.11":
            raise ValueError("topology: Slurm 24.11 cannot place nodes that join while it runs; set slurmVersion 26.05")
        if self.maintenance_window is not None and self.slurm_version == "24.11":
            raise ValueError(
                "maintenanceWindow: Slurm 24.11's REST API cannot make the window's reservation; set slurmVersion 26.05"
            )
        labels = [f.label for f in self.node_label_features]
        if len(set(labels)) != len(labels):
            raise ValueError("nodeLabelFeatures: name each label once")
        for i, d in enumerate(self.node_condition_drains):
            for w in d.worker_groups:
                if w not in names:
                    raise ValueError(
                        f"nodeConditionDrains[{i}]: {d.type} names worker group {w!r}, which is not in"
                        " spec.workerGroups"
                    )
        pairs = [(d.type, d.status) for d in self.node_condition_drains]
        if len(set(pairs)) != len(pairs):
            raise ValueError("nodeConditionDrains: name each condition type and status once")
        return self

    @model_validator(mode="after")
    def _bridge_fits(self) -> SlurmClusterSpec:
        """An enabled bridge: a Slurm with external jobs, groups of this spec with room for pods, a
        partition name of its own (the CEL twins: ``BRIDGE_CEL_RULES``)."""
        bridge = self.active_bridge
        if bridge is None:
            return self
        if self.slurm_version in SERIES_WITHOUT_EXTERNAL_JOBS:
            raise ValueError(
                f"bridge: Slurm {self.slurm_version} has no external jobs, which the bridge's placeholder jobs are"
                " (Slurm 25.05 and later): set slurmVersion 26.05, or bridge.enabled false"
            )
        groups = {g.name: (i, g) for i, g in enumerate(self.worker_groups)}
        for name in bridge.worker_groups:
            if name not in groups:
                raise ValueError(
                    f"bridge.workerGroups: {name!r} is not a group in spec.workerGroups: name one of "
                    f"{', '.join(sorted(groups))}, or add the group"
                )
            index, group = groups[name]
            problem = shared_group_problem(group)
            if problem is not None:
                raise ValueError(
                    f"workerGroups[{index}].resources: group {name!r} shares its Slurm nodes with Kubernetes pods"
                    f" (bridge.workerGroups) but has {problem}; {BRIDGE_ROOM_HINT}"
                )
        if bridge.partition in {p.name for p in self.effective_partitions()}:
            where = "a partition in spec.partitions"
            if not self.partitions:
                where = "the default partition slurm.conf gets while spec.partitions is empty"
            raise ValueError(
                f"bridge.partition: {bridge.partition!r} is already {where}: give the bridge's partition a name"
                " of its own"
            )
        return self

    @property
    def active_bridge(self) -> Bridge | None:
        """``bridge`` when it is enabled, else None."""
        return self.bridge if self.bridge is not None and self.bridge.enabled else None

    def containers_on(self, group: WorkerGroup) -> bool:
        """Whether pyxis runs in ``group``'s job steps: the group's own word, else spec.containers'."""
        return self.containers.enabled if group.containers is None else group.containers

    def image(self, component: str, series: str | None = None) -> str:
        """The image of a Slurm-carrying ``component`` (a key of ``SLURM_IMAGES``) for ``series`` (default:
        ``slurm_version``): the one the spec names, else Warden's own image of that series. The one home of
        this resolution: renderers ask ``warden.render.context.Cluster.image``, which also knows what an
        upgrade holds back."""
        if component not in SLURM_IMAGES:
            raise KeyError(f"{component!r} is not an image that carries Slurm")
        if component == "populateJail" and self.jail.populate.image:
            return self.jail.populate.image
        field = {"populateJail": "populate_jail", "healthCheck": "health_check"}.get(component, component)
        named: str | None = getattr(self.images, field)
        return named or default_image(SLURM_IMAGES[component], series or self.slurm_version, self.images.version)

    def own_image(self, component: Literal["mariadb", "exporter", "backup"]) -> str:
        """The image of a component without Slurm: the one the spec names, else Warden's own (the exporter
        ships in the operator's image)."""
        named: str | None = getattr(self.images, component)
        return named or default_image("operator" if component == "exporter" else component, version=self.images.version)

    def effective_partitions(self) -> list[Partition]:
        """The partitions slurm.conf gets: the user's, or one default `main` with every group."""
        if self.partitions:
            if any(p.default for p in self.partitions):
                return list(self.partitions)
            first, *rest = self.partitions
            return [first.model_copy(update={"default": True}), *rest]
        return [Partition(name=DEFAULT_PARTITION, worker_groups=[g.name for g in self.worker_groups], default=True)]


def parse_spec(spec: dict[str, Any]) -> SlurmClusterSpec:
    """Validate and default a spec as found in a SlurmCluster object (fields this operator does not know
    are left out: ``parse_spec_unknown``)."""
    return parse_spec_unknown(spec)[0]


def parse_spec_unknown(spec: dict[str, Any]) -> tuple[SlurmClusterSpec, list[str]]:
    """The spec, and the paths of the fields in it that this operator does not know (`workerGroups[0].x`),
    which it leaves out. A CRD newer than the operator (its chart upgraded first) defaults and stores
    fields only a newer operator reads: the cluster keeps running on what this one knows. Any other
    error still refuses the spec."""
    try:
        return SlurmClusterSpec.model_validate(spec), []
    except ValidationError as e:
        errors = e.errors()
        if any(err["type"] != "extra_forbidden" for err in errors):
            raise
        pruned = copy.deepcopy(spec)
        for err in errors:
            if not _drop(pruned, err["loc"]):
                raise
        return SlurmClusterSpec.model_validate(pruned), [_path(err["loc"]) for err in errors]


def _drop(data: Any, loc: tuple[int | str, ...]) -> bool:
    """Delete the field at ``loc`` (a pydantic error location) from ``data``; whether it was there."""
    *parents, last = loc
    for step in parents:
        if isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
            data = data[step]
            continue
        if not isinstance(data, dict) or step not in data:
            return False
        data = data[step]
    if not isinstance(data, dict) or last not in data:
        return False
    del data[last]
    return True


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for step in loc:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


# ---------------------------------------------------------------------------------------------
# Status: written only by the operator, folded from observed state by warden.status.


class Condition(BaseModel):
    """A metav1.Condition."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class WorkerGroupStatus(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    name: str
    replicas: int
    ready_replicas: int
    upgrade_waits_for_window: str | None = Field(
        default=None,
        description="Pods on an older template wait for the maintenance window opening then (spec.maintenanceWindow).",
    )


class DrainedNode(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    node: str
    reason: str


class TopologyStatus(BaseModel):
    """The topology and node-label features the operator gave Slurm's nodes (``warden.topology.planner``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    plugin: str = Field(default="", description="topology/tree or topology/block; empty with features alone.")
    switches: dict[str, int] = Field(default_factory=dict, description="Worker nodes under each switch (tree).")
    blocks: dict[str, int] = Field(
        default_factory=dict, description="Worker nodes in each block (block); topology.conf names these blocks."
    )
    features: dict[str, int] = Field(default_factory=dict, description="Worker nodes with each node-label feature.")
    unplaced: list[DrainedNode] = Field(
        default_factory=list, description="Worker nodes left out of the topology, and why (the first 20)."
    )


@dataclass(frozen=True)
class Slurmctld:
    """Whether slurmctld answered the operator's reads through slurmrestd this round (``warden.slurmsync``):
    a node read and a job read. ``why``: what did not answer, when it did not. ``in_charge``: with backup
    controllers, the controller pod whose slurmctld is in charge (``warden.ha.incharge``); None: not
    asked this round (the last answer stands)."""

    answers: bool
    why: str = ""
    in_charge: str | None = None


class SlurmNodesStatus(BaseModel):
    """Worker nodes as slurmctld sees them (read through slurmrestd every few seconds)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    registered: int = Field(default=0, description="Worker pods whose slurmd registered with slurmctld.")
    usable: int = Field(default=0, description="Registered nodes Slurm may start jobs on (not drained or down).")
    drained: list[DrainedNode] = Field(
        default_factory=list, description="Every drained node and why, whoever drained it."
    )
    down: list[DrainedNode] = Field(default_factory=list, description="Nodes down or not responding.")
    slurmd_versions: dict[str, int] = Field(
        default_factory=dict, description="Registered worker nodes by the slurmd version they report."
    )
    slurm_configs: dict[str, int] = Field(
        default_factory=dict,
        description="Registered worker nodes by the Slurm configuration their slurmd runs: the stamp of slurm.conf's"
        " first line (`# warden-config-hash:`), as each worker records it in its node's Extra once slurmd started"
        " with the files; nodes that record none are not counted.",
    )
    topology: TopologyStatus | None = Field(
        default=None, description="With spec.topology or spec.nodeLabelFeatures: what the nodes were given."
    )


class HealthCheckStatus(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    last_run_time: str | None = None
    nodes_checked: int = 0
    nodes_passed: int = 0
    drained: list[DrainedNode] = Field(default_factory=list)
    skipped: list[DrainedNode] = Field(default_factory=list)
    check_failed: str | None = Field(
        default=None,
        description="Why the last run failed as a whole (the same failure on every node, the program missing):"
        " it drained nobody.",
    )


class JailBackupStatus(BaseModel):
    """The jail's backups (spec.jail.backup), as their CronJob and its last finished run say."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    last_schedule_time: str | None = Field(default=None, description="When the CronJob last started a run.")
    last_successful_time: str | None = Field(default=None, description="When a run last succeeded.")
    last_run: str | None = Field(
        default=None,
        description="What the last finished run said (its termination message): `snapshot <id> saved in ...: "
        "processed ..., added ...; ... snapshots kept`, or why it failed.",
    )
    last_run_succeeded: bool | None = Field(default=None, description="Whether the last finished run succeeded.")
    last_run_time: str | None = Field(default=None, description="When the last finished run ended.")


class SlurmVersionStatus(BaseModel):
    """The Slurm series the cluster runs, part by part (``warden.upgrade.planner``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    version: str = Field(description="The settled series: every part ran it when the last upgrade ended.")
    target: str = Field(description="spec.slurmVersion as last seen.")
    phase: Literal["Settled", "Upgrading", "Refused"] = Field(
        default="Settled",
        description="`Upgrading`: parts move to `target` one step at a time; `Refused`: see the "
        "SlurmVersion condition.",
    )
    step: str | None = Field(
        default=None, description="While upgrading: the step under way (Accounting, Controller, Workers, Login, Jail)."
    )
    images: dict[str, str] = Field(
        default_factory=dict,
        description="The images of the settled series, by spec.images key: what parts not yet upgraded keep.",
    )
    accounting: str | None = Field(default=None, description="Series slurmdbd runs (pods), absent without accounting.")
    controller: str = Field(default="", description="Series slurmctld runs.")
    restapi: str = Field(default="", description="Series slurmrestd runs.")
    workers: str = Field(
        default="", description="Versions slurmd reports (slurmrestd), else the workers' series, with counts."
    )
    login: str = Field(default="", description="Series of the login nodes.")
    jail: str = Field(default="", description="Series of the jail's Slurm packages (the last populate Job's image).")


class SlurmClusterStatus(BaseModel):
    """Observed state of the cluster."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    phase: Literal["Pending", "Provisioning", "Ready", "Degraded", "Failed"] = "Pending"
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    workers: str = Field(default="0/0", description="Ready/desired worker nodes, all groups together.")
    login: str = Field(default="0/0", description="Ready/desired login nodes.")
    jail_populated: bool = False
    worker_groups: list[WorkerGroupStatus] = Field(default_factory=list)
    health_check: HealthCheckStatus = Field(default_factory=HealthCheckStatus)
    jail_backup: JailBackupStatus | None = Field(
        default=None, description="The jail's backups; absent without spec.jail.backup."
    )
    slurm_nodes: SlurmNodesStatus | None = Field(
        default=None, description="Worker nodes as slurmctld sees them; absent until slurmrestd answered once."
    )
    slurm: SlurmVersionStatus | None = Field(
        default=None, description="The Slurm series every part runs, and an upgrade's progress."
    )
    slurmctld_in_charge: str | None = Field(
        default=None,
        description="With backup controllers: the slurmctld pod in charge, as the operator's last Slurm sync saw it.",
    )
    images_version: str | None = Field(
        default=None,
        description="Version of Warden's images the cluster runs where spec.images names none (spec.images.version).",
    )


def previous_status(body: dict[str, Any]) -> SlurmClusterStatus | None:
    """The status a SlurmCluster object carries, or None (none yet, or one this operator cannot read)."""
    raw = body.get("status")
    if not raw:
        return None
    try:
        return SlurmClusterStatus.model_validate(raw)
    except ValidationError:
        return None
