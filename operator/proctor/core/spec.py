"""Typed, frozen views of the Evaluation and AgentUnderTest custom resources.

The CRDs under ``crds/`` are the one source of each schema; these models are checked
against them, not generated from them. tests/unit/core/test_spec_matches_crds.py walks both, field
by field: the same fields by camelCase name, types, enums (Literals), defaults, required
fields, and the bounds a model states (the models state none: the CRD's bounds, patterns
and CEL rules are checked on every manifest by ``proctor.formats.manifest`` before a model
is built, as the apiserver checks them on a cluster). Checked rather than generated because
the models carry what a CRD cannot say (docstrings written for Python readers, validators
such as ``Cidr``, helpers such as ``AgentAuth.header_for``), and a generator would put a
build step between a CRD change and the code that reads it. Build these models through
``proctor.formats.manifest`` so that a spec is defaulted and validated exactly as the
apiserver would; the defaults here exist so code and tests can build a spec by hand.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

API_GROUP = "proctor.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"


class _Spec(BaseModel):
    """Base of every spec model: immutable, camelCase on the wire, documented fields."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )


# --- AgentUnderTest -------------------------------------------------------------------------


class SecretKeyRef(_Spec):
    """A key of a Secret in the resource's namespace."""

    name: str
    """Name of the Secret."""
    key: str
    """Key within the Secret whose value is the token."""


class EnvVarSource(_Spec):
    """Where an environment variable's value comes from."""

    secret_key_ref: SecretKeyRef
    """A key of a Secret in the agent's namespace."""


class EnvVar(_Spec):
    """An environment variable of the agent's container."""

    name: str
    """Name of the variable."""
    value: str = ""
    """Value of the variable; empty when unset."""
    value_from: EnvVarSource | None = None
    """Where the value comes from instead of value (a Secret's key)."""


class AgentContainer(_Spec):
    """A container the operator runs for the agent (as a service or as a sidecar)."""

    image: str
    """Container image of the agent."""
    port: int = 9009
    """Port the agent's A2A server listens on."""
    command: tuple[str, ...] = ()
    """The container's entrypoint, replacing the image's; the Agentbeats arguments and
    args follow it. Empty: the image's own."""
    args: tuple[str, ...] = ()
    """Extra arguments appended to the agent's command line."""
    env: tuple[EnvVar, ...] = ()
    """Environment variables set in the agent's container."""
    resources: dict[str, Any] | None = None
    """Compute resources of the container, as in a Pod's container resources."""


def check_cidr(text: str) -> str:
    """A CIDR as written (``10.0.0.0/8``, ``2001:db8::/32``); a host's address needs its
    prefix (``/32``, ``/128``). NetworkPolicy's ipBlock takes nothing else."""
    try:
        if "/" not in text:
            raise ValueError("no prefix length")
        ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a CIDR such as 10.0.0.0/8 or 192.0.2.7/32 "
                         f"({exc})") from None
    return text


Cidr = Annotated[str, AfterValidator(check_cidr)]
"""A network in CIDR notation, checked as the NetworkPolicy's ipBlock would check it."""


class SidecarContainer(AgentContainer):
    """An agent container run in every task's pod, which shares the pod's network."""

    egress: tuple[Cidr, ...] = ()
    """CIDRs the agent may reach from the task's pod (its LLM API, say), on any port, when
    the chart's networkPolicy is on: the pod's policy is the agent's too."""


class AgentAuth(_Spec):
    """Credentials sent with every request to the agent."""

    secret_ref: SecretKeyRef
    """The Secret key that holds the token."""
    header: str = "Authorization"
    """HTTP header that carries the token."""
    scheme: str = "Bearer"
    """Scheme written before the token; empty sends the token alone."""

    def header_for(self, token: str) -> tuple[str, str]:
        """The header that carries ``token`` (name, value), as every client sends it."""
        return self.header, f"{self.scheme} {token}" if self.scheme else token


class BudgetSpec(_Spec):
    """Caps on what the agent may spend (enforced on one machine)."""

    max_tokens: int | None = None
    """Most tokens, summed over the items whose agent reported usage."""
    max_cost_usd: float | None = None
    """Most cost in US dollars, summed over the items whose agent reported it."""
    item_seconds: int | None = None
    """Most seconds the agent may take on one item."""


class AgentUnderTestSpec(_Spec):
    """How to reach (or run) an A2A agent and how hard it may be driven."""

    endpoint: str | None = None
    """URL of an A2A agent that is already running."""
    service: AgentContainer | None = None
    """Run the agent as one Deployment and Service shared by every task."""
    endpoint_cidrs: tuple[Cidr, ...] = ()
    """CIDRs the endpoint's host name resolves to, which task pods may reach on the
    endpoint's port when the chart's networkPolicy is on; unused when the host is an IP."""
    sidecar: SidecarContainer | None = None
    """Run the agent as a sidecar in every task's pod, with the repository at REPO_DIR."""
    auth: AgentAuth | None = None
    """Credentials sent with every request to the agent."""
    request_timeout_seconds: int = 1800
    """Seconds one task may take the agent before it is abandoned."""
    max_concurrent_tasks: int = 8
    """Most tasks in flight on this agent at once, over every Evaluation that uses it."""
    task_data: bool = False
    """Also send a data part naming the task (instance_id, repo, base_commit, variant_id)."""
    budget: BudgetSpec | None = None
    """Caps on what this agent may spend in each run that evaluates it."""


# --- Evaluation -----------------------------------------------------------------------------


class ObjectRef(_Spec):
    """A reference by name to an object in the same namespace."""

    name: str
    """Name of the object."""


class ShardSpec(_Spec):
    """One shard of the selected rows: every count-th row from the index-th."""

    index: int
    """Which shard, counted from 0."""
    count: int
    """How many shards the rows are split into."""


class DatasetSpec(_Spec):
    """Which SWE-bench rows to run."""

    name: str = "SWE-bench/SWE-bench_Verified"
    """Hugging Face dataset id or a SWE-bench dataset's short name or alias (``lite``...),
    ``proctor-demo``, or a local .json/.jsonl/.parquet path."""
    split: str = "test"
    """Dataset split to read."""
    revision: str = ""
    """Hub revision of the dataset; empty for the latest."""
    instance_ids: tuple[str, ...] = ()
    """Run only these instance_ids; empty runs every row, up to max_rows."""
    max_rows: int = 3
    """Most rows to run, in dataset order; -1 runs every row."""
    include_hints: bool = True
    """Send the row's hints_text to the agent."""
    shard: ShardSpec | None = None
    """Run one shard of the selected rows; None runs them all."""


LLM_VARIANTS_NOT_RENDERED = (
    "promptSensitivity.strategy llm: `proctor render` cannot print this Evaluation's Jobs, "
    "as its variants are written on the cluster, by its variants Job; render it with "
    "strategy template to review the Jobs, or apply it")
"""`proctor render`'s refusal of llm variants: which items exist depends on what the
model writes, and the model is called from the cluster only."""

VARIANTS_FILE_ON_CLUSTER = (
    "promptSensitivity.variantsFile reads a local file, which the operator cannot; leave it "
    "out (the operator makes template variants itself), or use it with `proctor run`")
"""The operator's refusal of a variants file (the chart's admission policy says it too)."""


class PromptSensitivitySpec(_Spec):
    """Reworded problem statements, to measure how the wording sways the agent."""

    enabled: bool = False
    """Run the variations."""
    num_variations: int = 3
    """Reworded variations per row, besides the original."""
    strategy: Literal["llm", "template"] = "llm"
    """How variations are written: by green_agent_model, or from fixed templates."""
    model: str | None = None
    """litellm model string that writes the llm variations; None uses green_agent_model."""
    api_base: str | None = None
    """Endpoint of the llm variations' model; None: litellm's own for the model."""
    api_key_secret_ref: SecretKeyRef | None = None
    """The Secret key that holds the llm variations' model key (on a cluster: read by the
    Evaluation's variants Job only, never by the operator); None: no key, or litellm's own
    variable on one machine."""
    variants_file: str | None = None
    """The variants store (JSON lines) to reuse and add to, the same format for either
    strategy; None: llm variants go to the user's cache, template ones are made anew. One
    file shared by runs makes every agent see the same variants."""


class PredictionsSpec(_Spec):
    """Where each row's patch comes from."""

    source: Literal["agent", "gold", "empty", "file"] = "agent"
    """The AgentUnderTest, the dataset's gold patch, no change, or the file at ``path``."""
    path: str | None = None
    """A swebench predictions file (.json list or .jsonl); set iff source is ``file``."""


class TimeoutsSpec(_Spec):
    """Time limits."""

    test_seconds: int = 1800
    """Seconds the row's tests may run after the patch is applied."""
    pod_seconds: int | None = None
    """Seconds a row's pod may live in all; None derives it from the other limits."""


class RunnerSpec(_Spec):
    """How rows' pods are run."""

    image: str = ""
    """Image of the container that drives a row; empty for the operator's own."""
    instance_image_registry: str = ""
    """Registry prefix of the SWE-bench instance images; empty for Docker Hub's."""
    resources: dict[str, Any] | None = None
    """Compute resources of a row's container, as in a Pod's container resources."""
    node_selector: dict[str, str] | None = None
    """Node labels that rows' pods must be scheduled on."""
    tolerations: tuple[dict[str, Any], ...] = ()
    """Tolerations of rows' pods, as in a Pod's spec."""
    image_pull_secrets: tuple[ObjectRef, ...] = ()
    """Secrets used to pull the runner and instance images."""
    infra_retries: int = 2
    """Times a row is retried after an infrastructure failure."""
    runtime_class_name: str = ""
    """RuntimeClass of rows' pods (e.g. gVisor's or Kata's); empty: the operator's default."""
    priority_class_name: str = ""
    """PriorityClass of rows' pods; empty: the operator's default."""


class ImagesSpec(_Spec):
    """Pulling the tasks' images before any item starts."""

    pre_pull: bool = False
    """Pull every task's image before any item starts; an image that cannot be pulled
    does not hold the Evaluation back."""
    pre_pull_parallelism: int = 2
    """Most images pulled at once."""


class StoreSpec(_Spec):
    """An S3-compatible object store for the items' artefacts."""

    url: str
    """Where the artefacts go, as ``s3://bucket/prefix`` (the prefix optional)."""
    endpoint: str = ""
    """The store's URL (e.g. ``http://minio.storage:9000``); empty: the operator's
    default, else AWS S3."""


class ResultsSpec(_Spec):
    """Where the items' results are kept."""

    store: StoreSpec | None = None
    """An object store for each item's artefacts; etcd then keeps a small record per item.
    None: the operator's default store, else everything in ConfigMaps."""


class EvaluationSpec(_Spec):
    """What to evaluate and how."""

    agent_ref: ObjectRef | None = None
    """The AgentUnderTest to evaluate; required when predictions.source is ``agent``."""
    dataset: DatasetSpec = Field(default_factory=DatasetSpec)
    """Which SWE-bench rows to run."""
    max_concurrent_rows: int = 1
    """Most rows in flight at once in this Evaluation."""
    repeats: int = 1
    """How many times each row is run."""
    green_agent_model: str = "ollama/qwen2.5-coder:7b"
    """litellm model string of the model that writes prompt variations."""
    prompt_sensitivity: PromptSensitivitySpec = Field(default_factory=PromptSensitivitySpec)
    """Reworded problem statements, to measure how the wording sways the agent."""
    predictions: PredictionsSpec = Field(default_factory=PredictionsSpec)
    """Where each row's patch comes from."""
    timeouts: TimeoutsSpec = Field(default_factory=TimeoutsSpec)
    """Time limits."""
    runner: RunnerSpec = Field(default_factory=RunnerSpec)
    """How rows' pods are run."""
    images: ImagesSpec = Field(default_factory=ImagesSpec)
    """Pulling the tasks' images before any item starts."""
    budget: BudgetSpec | None = None
    """Caps on what the agent may spend in this Evaluation."""
    suspend: bool = False
    """Start no new rows while true."""
    queue_name: str = ""
    """Kueue LocalQueue of the rows' Jobs: each is created suspended with Kueue's
    queue-name label, and runs once Kueue admits it; empty: the operator's default, else
    no queue (the Jobs run at once)."""
    results: ResultsSpec = Field(default_factory=ResultsSpec)
    """Where the items' results are kept."""


# --- Resources ------------------------------------------------------------------------------


class _Resource(BaseModel):
    """A named custom resource: its identity and its validated, defaulted spec."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    KIND: ClassVar[str]

    name: str
    """metadata.name."""
    namespace: str = "default"
    """metadata.namespace; ``default`` when the manifest names none."""


class Evaluation(_Resource):
    """An Evaluation custom resource."""

    KIND: ClassVar[str] = "Evaluation"

    spec: EvaluationSpec
    """The resource's spec."""


class AgentUnderTest(_Resource):
    """An AgentUnderTest custom resource."""

    KIND: ClassVar[str] = "AgentUnderTest"

    spec: AgentUnderTestSpec
    """The resource's spec."""


Resource = Evaluation | AgentUnderTest
"""Any Proctor custom resource."""

RESOURCE_TYPES: tuple[type[Evaluation], type[AgentUnderTest]] = (Evaluation, AgentUnderTest)
