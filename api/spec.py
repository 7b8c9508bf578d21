"""Typed view of a SpeculativeService's spec (mirrors crds/speculativeservice.yaml).

The CRD is the source of truth: the API server validates and defaults objects before anyone
reads them. These models give the operator, the dashboard and the tests a typed, defaulted
view of the same document (camelCase on the wire, snake_case in Python). A unit test checks
that every field here exists in the CRD schema and vice versa.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from specd.api.policy import Calibration, GroupPolicy, Policy, PolicyMode

DrafterMethod = Literal["none", "ngram", "parallel", "semi-ar", "draft-model"]
Quantity = int | str

# Condition types and phases the operator core writes (rollouts and the tuner may add more).
CONDITION_READY = "Ready"
CONDITION_PROGRESSING = "Progressing"
CONDITION_DEGRADED = "Degraded"
PHASES = ("Pending", "Progressing", "Ready", "Degraded")

GPU_RESOURCE = "nvidia.com/gpu"


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ModelSpec(_Spec):
    reference: str
    revision: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    max_context: int = 2048


class DrafterSpec(_Spec):
    method: DrafterMethod = "none"
    artifact: str | None = None
    k: int = 3  # the best measured on CPU (docs/bench/RESULTS.md, issue 26)
    prompt_lookup: bool = False


class GroupVerificationSpec(_Spec):
    """One task group's verification, overriding ``spec.verification`` for its requests."""

    mode: PolicyMode | None = None
    k: int | None = None
    fixed_length: int | None = None
    max_verify: int | None = None
    survival_floor: float | None = None

    def override(self) -> GroupPolicy:
        return GroupPolicy(mode=self.mode, k_max=self.k, fixed_length=self.fixed_length,
                           max_verify=self.max_verify, survival_floor=self.survival_floor)


class CalibrationSpec(_Spec):
    temperature: list[float] = Field(default_factory=list)
    bias: list[float] = Field(default_factory=list)


def _policy_default(name: str) -> Any:
    """The engine's own default for a policy field: the spec's default is the same value,
    written once."""
    return Policy.model_fields[name].default


class VerificationSpec(_Spec):
    mode: PolicyMode | None = None
    fixed_length: int | None = None
    min_verify: int = _policy_default("min_verify")
    max_verify: int | None = None
    survival_floor: float = _policy_default("survival_floor")
    max_batch_tokens: int = _policy_default("max_batch_tokens")
    calibration: CalibrationSpec = Field(default_factory=CalibrationSpec)
    groups: dict[str, GroupVerificationSpec] = Field(default_factory=dict)


class EngineSpec(_Spec):
    max_batch: int = 16
    queue_bound: int = 256
    extra_args: list[str] = Field(default_factory=list)


class ResourcesSpec(_Spec):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class Toleration(_Spec):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


class EnvVar(_Spec):
    name: str
    value: str | None = None


class WorkerSpec(_Spec):
    image: str
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    resources: ResourcesSpec = Field(
        default_factory=lambda: ResourcesSpec(limits={GPU_RESOURCE: 1}))
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)


class PauseSpec(_Spec):
    duration: str | None = None


class CanaryStep(_Spec):
    weight: int
    pause: PauseSpec | None = None


class AnalysisMetric(_Spec):
    name: str
    metric: Literal["acceptanceLength", "truncationRatio", "tokensPerSecond", "latencyP95",
                    "timeToFirstTokenP95", "timePerOutputTokenP95", "errorRate",
                    "kvCacheUsage", "rejectionRate", "custom"]
    query: str | None = None
    comparison: Literal["absolute", "relativeToStable"] = "relativeToStable"
    min: float | None = None
    max: float | None = None
    by_task_group: bool = False


# Lossless probes' default prompts: short, varied (chat, code, structured fields, Chinese),
# so a changed target shows within a few greedy tokens.
DEFAULT_PROBE_PROMPTS = (
    "The three primary colours are",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    '{"name": "Ada Lovelace", "born": 1815, "known_for": "',
    "请用一句话介绍长城：",
)


class ProbeSpec(_Spec):
    """Lossless probes: the same greedy prompts to one canary and one stable pod, compared
    token by token (operator/analysis/probes.py)."""

    prompts: list[str] = Field(default_factory=lambda: list(DEFAULT_PROBE_PROMPTS))
    max_tokens: int = 32
    near_tie_gap: float = 0.1


class AnalysisSpec(_Spec):
    interval: str = "1m"
    failure_limit: int = 0
    inconclusive_limit: int = 1
    min_samples: int = 20
    metrics: list[AnalysisMetric] = Field(default_factory=list)
    probes: ProbeSpec | None = None


class PromoteRequest(_Spec):
    id: str
    full: bool = False


class RolloutSpec(_Spec):
    strategy: Literal["RollingUpdate", "Canary"] = "RollingUpdate"
    # Canary: a verification-only edit goes through the canary steps too (its own track and
    # policy ConfigMap); Direct: it is hot-reloaded by every worker at once
    policy_changes: Literal["Direct", "Canary"] = "Direct"
    steps: list[CanaryStep] = Field(default_factory=list)
    analysis: AnalysisSpec | None = None
    inconclusive_policy: Literal["Pause", "Rollback", "Promote"] = "Pause"
    automatic_rollback: bool = True
    paused: bool = False
    abort: bool = False
    promote: PromoteRequest | None = None
    retry: str | None = None
    resume: str | None = None


class IntRange(_Spec):
    min: int
    max: int


class TuningBounds(_Spec):
    modes: list[PolicyMode] = Field(default_factory=list)
    fixed_length: IntRange | None = None
    max_verify: IntRange | None = None


class TuningSpec(_Spec):
    enabled: bool = False
    interval: str = "5m"
    bounds: TuningBounds | None = None
    pinned_groups: list[str] = Field(default_factory=list)
    dry_run: bool = False
    reference_share: float = 0.05
    min_requests: int = 20


class LabelSelectorRequirement(_Spec):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(_Spec):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class IPBlock(_Spec):
    cidr: str
    except_: list[str] | None = Field(default=None, alias="except")


class NetworkPeer(_Spec):
    """A networking.k8s.io/v1 NetworkPolicyPeer."""

    pod_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    ip_block: IPBlock | None = None


class NetworkSpec(_Spec):
    allow_from: list[NetworkPeer] = Field(default_factory=list)


class ServiceSpec(_Spec):
    """``.spec`` of a SpeculativeService."""

    replicas: int = 1
    model: ModelSpec
    drafter: DrafterSpec = Field(default_factory=DrafterSpec)
    verification: VerificationSpec = Field(default_factory=VerificationSpec)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    worker: WorkerSpec
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    tuning: TuningSpec = Field(default_factory=TuningSpec)
    network: NetworkSpec = Field(default_factory=NetworkSpec)

    def effective_mode(self) -> PolicyMode:
        """The verification mode, following the drafter when ``verification.mode`` is unset."""
        if self.verification.mode is not None:
            return self.verification.mode
        if self.drafter.method == "none":
            return "plain"
        return "scheduled" if self.drafter.method == "semi-ar" else "fixed"

    def policy(self, tuned: Mapping[str, GroupPolicy] | None = None) -> Policy:
        """The policy document the workers run (written to the ConfigMap): this spec, and
        ``tuned``, the tuner's per-group overlay (``status.tuning.overlay``), on top of
        ``verification.groups`` for every group the spec does not pin. With tuning on, a
        share of rounds runs plain (``tuning.referenceShare``): the tuner's reference."""
        v, k = self.verification, self.drafter.k
        groups = {name: g.override() for name, g in v.groups.items()}
        if self.tuning.enabled:
            for name, overlay in (tuned or {}).items():
                if name in self.tuning.pinned_groups:
                    continue
                own = groups.get(name, GroupPolicy()).model_dump(exclude_none=True)
                groups[name] = GroupPolicy(**{**own, **overlay.model_dump(exclude_none=True)})
        return Policy(
            mode=self.effective_mode(),
            k_max=k,
            fixed_length=v.fixed_length if v.fixed_length is not None else k,
            min_verify=v.min_verify,
            max_verify=v.max_verify if v.max_verify is not None else k,
            survival_floor=v.survival_floor,
            max_batch_tokens=v.max_batch_tokens,
            calibration=Calibration(temperature=v.calibration.temperature,
                                    bias=v.calibration.bias),
            plain_rounds=self.tuning.reference_share if self.tuning.enabled else 0.0,
            groups={name: g for name, g in groups.items() if g.model_dump(exclude_none=True)},
        )

    def pod_fields(self) -> dict:
        """Everything in the spec that changes the worker pod (the revision hashes this).

        Not included: replicas (scaling never rolls), verification (hot-reloaded policy),
        rollout and tuning (operator behaviour), network (its own NetworkPolicy object). Fields added later leave the hash when
        off, so an operator upgrade does not roll every service."""
        drafter = self.drafter.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not drafter.get("promptLookup"):
            drafter.pop("promptLookup", None)
        return {
            "model": self.model.model_dump(mode="json", by_alias=True, exclude_none=True),
            "drafter": drafter,
            "engine": self.engine.model_dump(mode="json", by_alias=True, exclude_none=True),
            "worker": self.worker.model_dump(mode="json", by_alias=True, exclude_none=True),
        }


class Condition(_Spec):
    """metav1.Condition shape."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


class RolloutStatus(_Spec):
    """``status.rollout``: the canary state machine's bookkeeping (operator/rollout/state.py)."""

    phase: Literal["Healthy", "Progressing", "Paused", "Promoting", "RolledBack"] | None = None
    stable_version: str | None = None
    canary_version: str | None = None
    started_at: str | None = None
    step: int = 0
    scaled_at: str | None = None
    step_started_at: str | None = None
    analysed_at: str | None = None
    pause_reason: str | None = None
    successful_checks: int = 0
    failed_checks: int = 0
    inconclusive_checks: int = 0
    error_checks: int = 0
    last_promote_id: str | None = None
    last_retry: str | None = None
    last_resume: str | None = None
    set_weight: int = 0
    aborted: bool = False
    message: str | None = None


class AnalysisResultStatus(_Spec):
    """One metric's (and task group's) latest canary analysis result."""

    name: str
    metric: str
    task_group: str | None = None
    verdict: Literal["Successful", "Failed", "Inconclusive", "Error"]
    canary: float | None = None
    stable: float | None = None
    value: float | None = None
    message: str | None = None
    query: str | None = None
    at: str | None = None


class GroupTuningStatus(_Spec):
    """One task group's tuning state in ``status.tuning.groups`` (``operator/tuner``)."""

    mode: PolicyMode | None = None
    k: int | None = None
    speculative_mode: PolicyMode | None = None
    action: str | None = None
    reason: str | None = None
    last_change: str | None = None
    hold_until: str | None = None
    backoff_seconds: float | None = None
    plain_since: str | None = None
    recent: list[str] = Field(default_factory=list)
    recent_k: list[int] = Field(default_factory=list)
    dry_run: str | None = None


class TuningStatus(_Spec):
    last_run: str | None = None
    overlay: dict[str, GroupPolicy] = Field(default_factory=dict)
    groups: dict[str, GroupTuningStatus] = Field(default_factory=dict)


class ServiceStatus(_Spec):
    """``.status`` of a SpeculativeService (written by the operator; read by the dashboard)."""

    phase: Literal["Pending", "Progressing", "Ready", "Degraded"] | None = None
    observed_generation: int | None = None
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    ready: str | None = None
    selector: str | None = None
    stable_revision: str | None = None
    canary_revision: str | None = None
    canary_weight: int = 0
    current_step: int = 0
    policy_version: str | None = None
    policy: Policy | None = None
    acceptance_length: float | None = None
    rollout: RolloutStatus | None = None
    analysis: list[AnalysisResultStatus] = Field(default_factory=list)
    tuning: TuningStatus | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, ctype: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == ctype), None)


def parse_status(status: dict | None) -> ServiceStatus:
    """Parse ``.status`` (absent on a fresh object) into the typed view."""
    return ServiceStatus.model_validate(status or {})


def parse_spec(spec: dict) -> ServiceSpec:
    """Parse ``.spec`` (as served by the API server) into the typed view."""
    return ServiceSpec.model_validate(spec)
