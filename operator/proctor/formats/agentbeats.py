"""The Agentbeats platform's files: its results file, and its scenario.toml.

**Results** (`agentbeats-results.json`, one per results folder): what the platform's
client writes after an assessment, `{"participants": {name: id}, "results": [EvalResult]}`,
each EvalResult holding `total_instances`, the nine `*_pct` fractions (0 to 1) and
`green_agent_model`, and no other key (the real files of the SWE Verified leaderboard).

`green_agent_model` rule: the litellm model that wrote the run's prompt variants
(promptSensitivity.model, else greenAgentModel) when llm variants were run; otherwise
greenAgentModel as configured (a scenario's `green_agent_model`, default
`ollama/qwen2.5-coder:7b`, the SWE Verified green agent's own default), as the seed green
agent echoes its config: no model graded anything, but the key is always there.

**Scenarios** (`scenario.toml`): `[green_agent]`, `[[participants]]` (by `agentbeats_id`,
which only the platform resolves to an image, or by `endpoint`/`cmd`, or `image`), `env`
whose `${NAME}` values are secrets, and `[config]` (max_concurrent_rows, max_rows with -1
for all, green_agent_model, the leaderboard's shard_index/num_shards/num_instances, and
Proctor's own dataset, prompt_sensitivity, repeats). `scenario_manifests` turns one into
Proctor's manifests (pure).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.core.exits import BadInput
from proctor.core.model import EvalResult, Summary
from proctor.core.spec import API_VERSION, Evaluation

RESULTS_FILE = "agentbeats-results.json"
_SECRET = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_NAME_CHARS = re.compile(r"[^a-z0-9.-]+")


# --- results ----------------------------------------------------------------------------------


class AgentbeatsEvalResult(EvalResult):
    """One entry of `results`: Proctor's EvalResult and the green agent's model."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    green_agent_model: str
    """See the rule in this module's docstring."""


class AgentbeatsResults(BaseModel):
    """The platform's results file."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    participants: dict[str, str]
    """Participant name -> its id (on the platform, its agentbeats_id)."""
    results: list[AgentbeatsEvalResult]
    """The green agent's results, one per assessment."""


def green_agent_model(summary: Summary, evaluation: Evaluation) -> str:
    """The rule of this module's docstring: summary.json names the variants' model only
    when llm variants ran."""
    return summary.green_agent_model or evaluation.spec.green_agent_model


def eval_result(summary: Summary, evaluation: Evaluation) -> AgentbeatsEvalResult:
    """The summary's headline figures as the platform's EvalResult (pure)."""
    return AgentbeatsEvalResult(**summary.results.model_dump(),
                                green_agent_model=green_agent_model(summary, evaluation))


def results_file(summary: Summary, evaluation: Evaluation, participant_id: str
                 ) -> AgentbeatsResults:
    """The results file of one run: its participant (the agent, or the predictions'
    model_name_or_path) and its figures (pure)."""
    return AgentbeatsResults(participants={summary.agent: participant_id},
                             results=[eval_result(summary, evaluation)])


def write_results(folder: Path, summary: Summary, evaluation: Evaluation,
                  participant_id: str) -> Path:
    """Write `agentbeats-results.json` into the results folder; its path."""
    path = folder / RESULTS_FILE
    data = results_file(summary, evaluation, participant_id).model_dump(mode="json")
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


# --- scenario.toml ----------------------------------------------------------------------------


class ScenarioError(BadInput):
    """A scenario.toml that cannot be read, with the reason."""


class _Agent(BaseModel):
    model_config = ConfigDict(extra="allow")

    agentbeats_id: str | None = None
    """The platform's id of the agent (resolved to an image by the platform only)."""
    endpoint: str | None = None
    """Where the agent already runs (the local form)."""
    cmd: str | None = None
    """How the local form starts it (not run by Proctor)."""
    image: str | None = None
    """Its container image, when the scenario names one."""
    env: dict[str, str] = {}
    """Its environment; `${NAME}` values are secrets."""


class ScenarioParticipant(_Agent):
    name: str | None = None
    role: str | None = None

    def label(self, index: int) -> str:
        return self.name or self.role or f"participant-{index}"


class Scenario(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    green_agent: _Agent | None = None
    participants: list[ScenarioParticipant] = []
    config: dict[str, Any] = {}


def read_scenario(path: Path) -> Scenario:
    """A scenario.toml, or a one-line ScenarioError."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path} is not TOML: {exc}") from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"{path}: {where}: {first['msg']}") from None


class AssessmentConfig(BaseModel):
    """A scenario's [config], or the config of an assessment request, as Proctor reads it.

    Keys Proctor does not know (the local scenario's repo_url, problem_statement, ...) are
    ignored, as the seed green agent ignores them."""

    model_config = ConfigDict(extra="ignore")

    max_concurrent_rows: int = Field(1, ge=1)
    max_rows: int = 3
    green_agent_model: str | None = None
    shard_index: int | None = Field(None, ge=0)
    num_shards: int | None = Field(None, ge=1)
    num_instances: int | None = None
    dataset: str | None = None
    """Proctor's: the dataset (hub id, proctor-demo, a local file); default Verified."""
    instance_ids: list[str] = []
    prompt_sensitivity: dict[str, Any] | None = None
    """Proctor's: an Evaluation's promptSensitivity (camelCase or snake_case keys)."""
    repeats: int | None = None
    """Proctor's: runs of each task."""
    task_data: bool = False
    """Proctor's: also send the agent the data part naming the task (green agent only)."""

    def rows(self) -> int:
        """Rows before sharding: num_instances (the leaderboard's) else max_rows."""
        rows = self.num_instances if self.num_instances is not None else self.max_rows
        return -1 if rows < 0 else rows


def read_config(config: Mapping[str, Any], where: str) -> AssessmentConfig:
    try:
        parsed = AssessmentConfig.model_validate(dict(config))
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"{where}: config.{key}: {first['msg']}") from None
    if (parsed.shard_index is None) != (parsed.num_shards is None) and parsed.num_shards != 1:
        raise ScenarioError(f"{where}: config needs both shard_index and num_shards, or "
                            f"neither")
    if parsed.shard_index is not None and parsed.shard_index >= (parsed.num_shards or 1):
        raise ScenarioError(f"{where}: config.shard_index {parsed.shard_index} must be below "
                            f"num_shards {parsed.num_shards}")
    return parsed


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word.title() for word in rest)


def evaluation_spec(config: AssessmentConfig, agent: str | None) -> dict[str, Any]:
    """An Evaluation's spec from the config (pure); `agent` is the AgentUnderTest's name."""
    dataset: dict[str, Any] = {"maxRows": config.rows()}
    if config.dataset:
        dataset["name"] = config.dataset
    if config.instance_ids:
        dataset["instanceIds"] = list(config.instance_ids)
    if config.num_shards is not None and config.num_shards > 1:
        dataset["shard"] = {"index": config.shard_index or 0, "count": config.num_shards}
    spec: dict[str, Any] = {"dataset": dataset,
                            "maxConcurrentRows": config.max_concurrent_rows}
    if agent:
        spec["agentRef"] = {"name": agent}
    if config.green_agent_model:
        spec["greenAgentModel"] = config.green_agent_model
    if config.repeats is not None:
        spec["repeats"] = config.repeats
    if config.prompt_sensitivity:
        spec["promptSensitivity"] = {_camel(k): v for k, v in config.prompt_sensitivity.items()}
    return spec


@dataclass
class Imported:
    """What a scenario becomes: manifests, the secrets they read, and notes for the user."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    secrets: dict[str, list[str]] = field(default_factory=dict)
    """Secret name -> the keys it must hold."""
    notes: list[str] = field(default_factory=list)


def k8s_name(text: str, fallback: str = "agent") -> str:
    """A Kubernetes object name from any label (lowercase, dots and dashes, at most 63)."""
    name = _NAME_CHARS.sub("-", text.lower()).strip(".-")[:63].strip(".-")
    return name or fallback


def _env(env: Mapping[str, str], secret: str, imported: Imported) -> list[dict[str, Any]]:
    """The container's variables; `${NAME}` values read key NAME of Secret `secret`."""
    out: list[dict[str, Any]] = []
    for name, value in env.items():
        found = _SECRET.match(str(value))
        if found:
            imported.secrets.setdefault(secret, []).append(found.group(1))
            out.append({"name": name, "valueFrom": {"secretKeyRef": {
                "name": secret, "key": found.group(1)}}})
        else:
            out.append({"name": name, "value": str(value)})
    return out


def _agent_spec(participant: ScenarioParticipant, name: str, endpoint: str | None,
                image: str | None, imported: Imported) -> dict[str, Any] | None:
    """The AgentUnderTest spec of a participant, or None (with a note) when only the
    platform knows where it is."""
    endpoint = endpoint or participant.endpoint
    image = image or participant.image
    if endpoint:
        if participant.env:
            imported.notes.append(f"participant {name!r}: its env is not set by Proctor for "
                                  f"an endpoint (start the agent with it yourself)")
        return {"endpoint": endpoint}
    if image:
        sidecar: dict[str, Any] = {"image": image}
        env = _env(participant.env, f"{name}-env", imported)
        if env:
            sidecar["env"] = env
        return {"sidecar": sidecar}
    what = (f"agentbeats_id {participant.agentbeats_id}" if participant.agentbeats_id
            else "no endpoint or image")
    imported.notes.append(f"participant {name!r} is given by {what}, which only the "
                          f"Agentbeats platform resolves: pass --endpoint {name}=URL or "
                          f"--image {name}=IMAGE")
    return None


def scenario_manifests(scenario: Scenario, name: str, endpoints: Mapping[str, str],
                       images: Mapping[str, str], where: str = "scenario") -> Imported:
    """Proctor's manifests for a scenario (pure): per participant, an AgentUnderTest (when
    its endpoint or image is known) and an Evaluation of it; no participant, one
    Evaluation of gold predictions (a dry run of the dataset)."""
    config = read_config(scenario.config, where)
    imported = Imported()
    labels = [p.label(i) for i, p in enumerate(scenario.participants)]
    names = [k8s_name(label) for label in labels]
    # --endpoint/--image name a participant as the scenario writes it, or by its manifest name.
    known = {**dict(zip(labels, names, strict=True)), **{n: n for n in names}}
    unknown = sorted((set(endpoints) | set(images)) - set(known))
    if unknown:
        raise ScenarioError(f"{where} has no participant {unknown[0]!r} (its participants: "
                            f"{', '.join(labels) or 'none'})")
    by_name = {known[k]: v for k, v in endpoints.items()}
    images_by_name = {known[k]: v for k, v in images.items()}
    for participant, agent in zip(scenario.participants, names, strict=True):
        spec = _agent_spec(participant, agent, by_name.get(agent), images_by_name.get(agent),
                           imported)
        if spec is not None:
            imported.documents.append(_resource("AgentUnderTest", agent, spec))
        imported.documents.append(_resource("Evaluation", k8s_name(f"{name}-{agent}"),
                                            evaluation_spec(config, agent)))
    if not scenario.participants:
        spec = {**evaluation_spec(config, None), "predictions": {"source": "gold"}}
        imported.documents.append(_resource("Evaluation", k8s_name(name), spec))
        imported.notes.append(f"{where} names no participant: the Evaluation runs the "
                              f"gold patches")
    return imported


def _resource(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def secret_commands(secrets: Mapping[str, Sequence[str]]) -> list[str]:
    """The `kubectl create secret` command of each Secret, its values from the environment
    of whoever runs it (never written into a file)."""
    return [f"kubectl create secret generic {secret} "
            + " ".join(f'--from-literal={key}="${{{key}}}"' for key in dict.fromkeys(keys))
            for secret, keys in secrets.items()]


# --- the assessment request (the gateway's message to a green agent) -------------------------


class AssessmentRequest(BaseModel):
    """`{"participants": {role: url}, "config": {...}}`, the JSON text of the one message
    the Agentbeats gateway sends a green agent."""

    model_config = ConfigDict(extra="forbid")

    participants: dict[str, str]
    config: dict[str, Any] = {}


def read_request(texts: Sequence[str], data: Sequence[Any]) -> AssessmentRequest:
    """The request from a message's text parts (the gateway's form) or data parts; a
    one-line ScenarioError when there is none or it is malformed."""
    candidates: list[Any] = list(data)
    for text in texts:
        try:
            candidates.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    found = [c for c in candidates if isinstance(c, dict) and "participants" in c]
    if not found:
        raise ScenarioError('the message holds no assessment request: send the JSON '
                            '{"participants": {"<role>": "<url>"}, "config": {...}}')
    try:
        request = AssessmentRequest.model_validate(found[0])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"assessment request: {where}: {first['msg']}") from None
    if len(request.participants) != 1:
        raise ScenarioError(f"assessment request names {len(request.participants)} "
                            f"participants; Proctor evaluates one agent per request")
    return request


def request_manifests(request: AssessmentRequest, name: str, timeout_s: int = 1800
                      ) -> list[dict[str, Any]]:
    """The Evaluation and AgentUnderTest of an assessment request (pure): the participant
    at its URL, the config read as a scenario's [config]."""
    config = read_config(request.config, "assessment request")
    ((role, url),) = request.participants.items()
    agent = k8s_name(role)
    return [_resource("AgentUnderTest", agent, {"endpoint": url,
                                                "requestTimeoutSeconds": timeout_s,
                                                "taskData": config.task_data}),
            _resource("Evaluation", k8s_name(name), evaluation_spec(config, agent))]
