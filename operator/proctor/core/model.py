"""The data Proctor passes between its steps: tasks, work items, results, summaries.

Every model here is a boundary: it is written to disk (results.jsonl, summary.json),
sent to a Kubernetes Job or read back from one. Each is versioned and every field
says what it means, so that a results folder written today can be read next year.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from proctor.core.provenance import Provenance

RESULT_SCHEMA_VERSION: Final = 2  # Final: its type is Literal[2], a valid schema_version
"""2 added `tampered` and `tampering` (later `set_aside`) to RunResult and `tampered_pct` to
Summary; version 1 lines and files still read (the new fields take their defaults)."""
ORIGINAL_VARIANT = "original"

# Instance ids end up in file names and Kubernetes labels: letters, digits and . _ -
# only (every SWE-bench id fits), so no id can smuggle a path or a shell word.
INSTANCE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
_COMMIT_PATTERN = r"^[0-9a-f]{7,40}$"
_REPO_PATTERN = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"


class Outcome(StrEnum):
    """How one work item ended; the decision tree is in `proctor.core.grading`."""

    RESOLVED = "resolved"
    BREAKING_RESOLVED = "breaking_resolved"
    PARTIALLY_RESOLVED = "partially_resolved"
    WORK_IN_PROGRESS = "work_in_progress"
    REGRESSION = "regression"
    NO_OP = "no_op"
    ERROR = "error"


class ErrorKind(StrEnum):
    """Why an item is an `error` (the failure table of the architecture note)."""

    AGENT = "agent"  # unreachable, protocol error, timed out
    TIMEOUT = "timeout"  # the eval script ran past its time limit
    SANDBOX = "sandbox"  # the test step broke, or its log has no output markers
    INFRA = "infra"  # image pull, eviction, OOM kill, pod deadline; a missing image (Docker)


AGENT_FAILURES_IN_A_ROW = 3
"""The dead-agent rule's number, the engine's and the operator's: after this many requests
in a row that the agent never answered (the transport failed), no new task is sent until
its card answers again."""


class Instance(BaseModel):
    """One SWE-bench task in the swebench 5 format (a row of SWE-bench Verified)."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    instance_id: str = Field(pattern=INSTANCE_ID_PATTERN)
    """Unique task id, e.g. `django__django-11099`."""
    repo: str = Field(pattern=_REPO_PATTERN)
    """The GitHub repository, `owner/name`."""
    base_commit: str = Field(pattern=_COMMIT_PATTERN)
    """The commit the agent starts from and the tests run on."""
    problem_statement: str
    """The issue text given to the agent."""
    hints_text: str = ""
    """Comments on the issue before the fix; sent when `dataset.includeHints` is true."""
    patch: str = ""
    """The gold patch (the fix that was merged)."""
    test_patch: str = ""
    """The patch adding the tests that check the fix (applied by the eval script)."""
    FAIL_TO_PASS: list[str]
    """Tests that fail before the gold patch and pass after it."""
    PASS_TO_PASS: list[str] = []
    """Tests that pass before and after the gold patch."""
    version: str = ""
    """The repository's version, which picks the environment in swebench."""
    environment_setup_commit: str = ""
    """The commit the task's environment was built from."""
    image: str
    """The task's official image, e.g. `swebench/sweb.eval.x86_64.django_1776_django-11099`."""
    eval_script: str
    """The bash script that applies the test patch and runs the tests between markers."""
    log_parser: str
    """The swebench log parser, by name (e.g. `parse_log_django`)."""
    eval_type: Literal["pass_and_fail", "fail_only"] = "pass_and_fail"
    """How swebench reads F2P/P2P results (`pass_and_fail` for every Verified row)."""
    difficulty: str = ""
    """The annotators' time estimate, e.g. `15 min - 1 hour`."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_json_list(cls, value: Any) -> Any:
        # The hub stores these as JSON strings; local files often hold lists.
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of test ids ({exc})") from exc
        return list(value) if value is not None and not isinstance(value, list) else value

    @field_validator("hints_text", "patch", "test_patch", "version", "difficulty",
                     "environment_setup_commit", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    def swebench_row(self) -> dict[str, Any]:
        """This task as the dict swebench's `make_test_spec` expects."""
        return self.model_dump()


class WorkItem(BaseModel):
    """One run of an agent on one task: instance x prompt variant x repeat."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    id: str = Field(pattern=r"^[0-9a-f]{16,64}$")
    """Stable hash of what decides the item's meaning; the resume key everywhere."""
    instance_id: str = Field(pattern=INSTANCE_ID_PATTERN)
    """The task."""
    variant_id: str = Field(default=ORIGINAL_VARIANT, pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    """The prompt variant; `original` is the unchanged problem statement."""
    repeat: int = Field(default=0, ge=0)
    """Which repeat of the same prompt, counted from 0."""

    @property
    def key(self) -> str:
        """A readable name: `instance/variant/repeat`."""
        return f"{self.instance_id}/{self.variant_id}/{self.repeat}"


class PatchInfo(BaseModel):
    """The patch under test and what happened when it was applied."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    present: bool = False
    """Whether there was a non-empty patch at all."""
    sha256: str | None = None
    """Hash of the patch text, to tell identical answers apart from different ones."""
    size_bytes: int = 0
    """Length of the patch in bytes."""
    refused: str | None = None
    """Why the patch was refused before applying (not a diff, unsafe path), if it was."""
    applied: bool = False
    """Whether some method of the fallback chain applied it."""
    apply_method: str | None = None
    """The command that applied it, e.g. `git apply -v` or `patch --batch --fuzz=5 -p1`."""


class PassFail(BaseModel):
    """Per-test results in swebench's report shape."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    success: list[str] = []
    """Tests that behaved as required (F2P now pass, P2P still pass)."""
    failure: list[str] = []
    """Tests that did not."""

    @property
    def total(self) -> int:
        return len(self.success) + len(self.failure)


class Timings(BaseModel):
    """Where the item's time went, in seconds."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    solve_seconds: float | None = None
    """Time waiting for the agent's answer (None when no agent was asked)."""
    test_seconds: float | None = None
    """Time of the test step: checkout, apply, eval script."""
    eval_seconds: float | None = None
    """The eval script's own run time, part of test_seconds."""
    grade_seconds: float | None = None
    """Time to parse the log and grade it."""
    total_seconds: float | None = None
    """Wall time of the whole item."""
    started_at: str | None = None
    """When the item started (UTC, ISO 8601)."""
    finished_at: str | None = None
    """When the item finished (UTC, ISO 8601)."""


class Usage(BaseModel):
    """What the agent reported it spent on the item, when it reports it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    input_tokens: int | None = None
    """Prompt tokens."""
    output_tokens: int | None = None
    """Completion tokens."""
    total_tokens: int | None = None
    """All tokens."""
    cost_usd: float | None = None
    """Cost in US dollars."""
    steps: int | None = None
    """Model calls (an agent loop's steps), when the agent reports them."""


class Tampering(BaseModel):
    """One part of the patch that touched the test machinery and was undone."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    path: str
    """The file, relative to the repository."""
    kind: str
    """Its class in the threat model: hook, config, plugin, startup, shadow, tests,
    symlink, build or log (proctor.core.integrity.Threat)."""
    reason: str
    """What it was, in words."""


class RunResult(BaseModel):
    """The result of one work item: one line of results.jsonl."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    schema_version: Literal[1, 2] = RESULT_SCHEMA_VERSION
    """Version of this model; bumped on any incompatible change."""
    item_id: str
    """The work item's id (the resume key)."""
    instance_id: str
    """The task."""
    variant_id: str = ORIGINAL_VARIANT
    """The prompt variant."""
    repeat: int = 0
    """The repeat, from 0."""
    repo: str = ""
    """The task's repository, for per-repository tables."""
    include_hints: bool = True
    """Whether the agent was sent the task's hints."""
    predictions: str = "agent"
    """Where the patch came from: agent, gold, empty or file."""
    outcome: Outcome
    """The grade."""
    error_kind: ErrorKind | None = None
    """Why it is an error, when outcome is `error`."""
    error_message: str | None = None
    """A short human explanation of an error or of a refused patch."""
    patch: PatchInfo = PatchInfo()
    """The patch and how it applied."""
    tests_ran: bool = False
    """Whether the eval script ran and its log was graded."""
    test_exit_code: int | None = None
    """The test command's own exit status, as the eval script recorded it."""
    FAIL_TO_PASS: PassFail = PassFail()
    """Fail-to-pass tests: success means they now pass."""
    PASS_TO_PASS: PassFail = PassFail()
    """Pass-to-pass tests: success means they still pass (or are skipped)."""
    timings: Timings = Timings()
    """Where the time went."""
    usage: Usage | None = None
    """The agent's reported usage, if any."""
    confidence: float | None = Field(default=None, ge=0, le=1)
    """The agent's confidence that its answer resolves the task (0 to 1), when it reported
    one in its reply's metadata under `confidence`; the analysis' calibration figures."""
    network_isolated: bool | None = None
    """Whether the eval script ran without network (process sandbox only)."""
    runner_version: str = ""
    """The Proctor version that produced this result."""
    images: dict[str, str] = {}
    """The images each step ran, by step, with their digests (cluster runs)."""
    agent_unanswered: bool = False
    """Whether the agent never answered (an `agent` error whose transport failed: no
    connection, a reset, no reply in time), as opposed to an answer it gave: the operator
    asks it again once its card answers."""
    attempts: int = 1
    """Attempts it took: more than 1 after infrastructure failures (cluster runs)."""
    tampered: bool = False
    """Whether the patch tried to change the machinery that runs or reports the tests;
    those parts were undone and the outcome is what the rest of the patch earned."""
    tampering: list[Tampering] = []
    """What was undone, and why (empty when `tampered` is false)."""
    set_aside: list[str] = []
    """New test files of the patch's own, not applied and not counted as tampering: honest
    agents add regression tests, and the task is graded by its own tests."""


class EvalResult(BaseModel):
    """The leaderboard figures, under Agentbeats' EvalResult names (fractions 0 to 1)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    total_instances: int
    """Number of tasks evaluated (every task counts in every denominator)."""
    resolved_pct: float
    """Share of tasks resolved: all F2P pass and all P2P still pass."""
    breaking_resolved_pct: float
    """All F2P pass but some P2P broke."""
    partially_resolved_pct: float
    """Some but not all F2P pass, P2P intact."""
    work_in_progress_pct: float
    """Some F2P pass and some P2P broke."""
    regression_pct: float
    """No F2P pass and some P2P broke."""
    no_op_pct: float
    """No patch, not applied, or no effect on F2P with P2P intact."""
    error_pct: float
    """The item could not be evaluated (agent, timeout, sandbox, infrastructure)."""
    fail_to_pass_passed_pct: float
    """F2P tests that pass, over all F2P tests of items whose tests ran."""
    pass_to_pass_passed_pct: float
    """P2P tests still passing, over all P2P tests of items whose tests ran."""


class Summary(BaseModel):
    """summary.json: the figures of one evaluation."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    schema_version: Literal[1, 2] = RESULT_SCHEMA_VERSION
    """Version of this model."""
    evaluation: str = ""
    """The Evaluation's name."""
    agent: str = ""
    """The agent (or predictions source) evaluated."""
    green_agent_model: str | None = None
    """The litellm model that wrote the prompt variants (Agentbeats reports it too); left
    out of summary.json when no variant was generated by one."""
    results: EvalResult
    """The headline figures over the original-prompt items."""
    per_repo: dict[str, EvalResult] = {}
    """The same figures for each repository."""
    outcome_counts: dict[str, int] = {}
    """Original-prompt items by outcome (each repeat counts once)."""
    items: int = 0
    """Work items with a result (all variants and repeats)."""
    items_planned: int = 0
    """Work items planned."""
    partial: bool = False
    """Whether some planned items have no result yet (an interrupted run): the figures
    then cover only the items done."""
    tests_left_out: dict[str, int] = {}
    """F2P/P2P tests of items whose tests did not run, left out of the test rates."""
    error_kinds: dict[str, int] = {}
    """Error items by kind."""
    tampered_pct: float = 0.0
    """Share of tasks whose patch tried to change the test machinery (fraction 0 to 1,
    the denominator of the outcomes; repeats averaged per task)."""
    tampered_items: int = 0
    """Work items (all variants and repeats) whose patch was found tampering."""
    usage: Usage = Usage()
    """Summed agent usage over all items that reported it."""
    variants_usage: Usage | None = None
    """What writing the prompt variants cost (tokens, litellm's cost estimate), summed;
    left out of summary.json when no model wrote them."""
    latency_seconds: dict[str, float] = {}
    """Item wall time: mean, median, p90, max."""
    usage_reported: int = 0
    """Items whose agent reported usage (tokens or cost): `usage` sums only those."""
    agent_latency_seconds: dict[str, float] = {}
    """The agent's time to answer (timings.solve_seconds) over the items it was asked:
    mean, median, p90, max."""
    stopped_by: str | None = None
    """What ended the run before every item was done, when something did (a budget)."""
    wall_seconds: float | None = None
    """The run's wall time: from the first item's start to the last item's end (a run
    resumed later counts the pause between its runs too)."""
    provenance: Provenance | None = None
    """Where the run came from: dataset, images, versions, seeds, agent card, sandbox and
    machine (`proctor.core.provenance`); left out of summary.json when not recorded, and
    absent from summaries written before it was (they still read)."""

    @model_serializer(mode="wrap")
    def _leave_out_unused(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.green_agent_model is None:
            data.pop("green_agent_model", None)
        if self.variants_usage is None:
            data.pop("variants_usage", None)
        if self.provenance is None:
            data.pop("provenance", None)
        return data
