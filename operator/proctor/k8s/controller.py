"""The operator's kopf handlers (thin): they keep kopf's indexes and queue passes.

Run it with `proctor operator` (the chart's Deployment) or `kopf run -m
proctor.k8s.controller` (then PROCTOR_ALLOW_LOCAL_ENDPOINTS=1 stands for the flag). With
`--leader-election`, several may run: only the holder of a Lease runs the handlers
(`features.election`).

Where each rule lives:

* a pass of one Evaluation, and its queue and resync: `passes.Controller`;
* which items exist, refusals, the dataset: `proctor.prepare` (shared with `proctor run`);
  the dataset and prompt variants as loaded and kept: `inputs`;
* what an attempt's Job, pod and events say: `children.podstatus.item_state`;
* slots, retries, giving up, when to start: `evaluation.reconcile.decide` (pure). An
  attempt holds its slot until its pod has ended or its Job is terminal, whichever first;
  an agent's slots over its Evaluations: `agents.slots`;
* the one place a Job is created: `act.Pass.create_job`, in the slots `decide` gave
  (never more than maxConcurrentRows); never for an Evaluation deleted or being deleted
  (`act.still_there` asks the API server before a pass creates any);
* Job, ConfigMap and result objects: `manifests`, `store` (pure); names: `names`;
* conditions: `machinery.conditions`; the status and its `reason`: `evaluation.status`,
  `reconcile`; LocalEndpoint, an agent's Ready: `agents.status`;
* each item's API calls (keep, retry, delete, create): `act`; what was written but not
  yet seen: `expectations`; the queue of passes: `workqueue`; kopf's indexes as a pass
  reads them: `indexes`.

Agents (`agents.probes`): on a new spec, and then every AGENT_PROBE_SECONDS (each resync
while not ready), a service agent's Deployment and Service are applied and the agent's
card is fetched; its status shows the card and Ready. While an Evaluation's agent is not
ready, no item of it starts and its Ready is False with reason AgentNotReady (`decide`'s
``agent_ready``); a readiness change gives the namespace's Evaluations a pass. An item the
agent never answered (it went away mid-request) makes the pass fetch the card at once;
the item is asked again once the card has answered since (`reconcile.unanswered`).

Triggers: a change of the Evaluation's spec, of its Jobs, pods or agent puts it into one
deduplicated workqueue; one pass per Evaluation runs at a time. A resync every
PROCTOR_RECONCILE_SECONDS covers what has no event of its own (an image pull past its
limit).

One concurrency model: kopf's asyncio loop (its handlers and indexes, and our asyncio
tasks: the queue's workers, the resync, the probes); the official client's blocking calls
run in asyncio's default executor. No finalizer: the operator keeps nothing outside the
cluster, and the Evaluation owns what it made, so Kubernetes' garbage collector removes
it, with or without an operator running (kopf would add one for a timer: hence no kopf
timer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Mapping
from typing import Any, cast

import kopf

from proctor.core.exits import BadInput
from proctor.core.labels import COMPONENT, LABEL_EVALUATION, MANAGED_BY
from proctor.k8s.children import manifests, store
from proctor.k8s.evaluation.metrics import Metrics
from proctor.k8s.evaluation.passes import RESYNC_SECONDS, Controller
from proctor.k8s.evaluation.reconcile import Settings
from proctor.k8s.features import netpol, store_backlog
from proctor.k8s.features.election.elected import Election, run_elected
from proctor.k8s.machinery.api import AdmissionChecks, Kube, Leases, load_config, owner_uid
from proctor.k8s.machinery.indexes import Key
from proctor.k8s.machinery.names import label_value, selector
from proctor.k8s.machinery.objects import ConfigMap, Obj

log = logging.getLogger("proctor.controller")
PROCTOR = {MANAGED_BY: "proctor"}
RESULTS = {**PROCTOR, COMPONENT: store.RESULT_KIND}


def _env_seconds(name: str, text: str | None, default: float) -> float:
    """A setting in seconds: a number above 0; unset or empty, ``default``."""
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} is {text!r}: give a number of seconds above 0, or leave "
                         f"it unset")
    return value


def env_settings(environ: Mapping[str, str]) -> tuple[float, float]:
    """(resync seconds, image pull timeout seconds) from PROCTOR_RECONCILE_SECONDS and
    PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS; a bad one is a ValueError naming it, read before
    kopf starts so that it is one line, not a traceback (at import, it would be one)."""
    return (_env_seconds("PROCTOR_RECONCILE_SECONDS",
                         environ.get("PROCTOR_RECONCILE_SECONDS"), RESYNC_SECONDS),
            _env_seconds("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS",
                         environ.get("PROCTOR_IMAGE_PULL_TIMEOUT_SECONDS"), 600.0))


CONTROLLER: Controller | None = None
_METRICS: Metrics | None = None  # one per process: a registry refuses the same metric twice


def _owner_key(body: Obj) -> Key:
    meta = body.get("metadata") or {}
    # "" where absent, as no Evaluation is named: the key then finds none
    return (meta.get("namespace") or "",
            (meta.get("labels") or {}).get(LABEL_EVALUATION) or "")


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    global CONTROLLER, _METRICS
    settings.posting.level = logging.INFO
    # Events are Proctor's own: `kubectl get events` shows them from proctor, not kopf.
    settings.posting.reporting_component = "proctor"
    settings.posting.reporting_instance = os.environ.get("HOSTNAME") or "proctor"
    settings.posting.event_name_prefix = "proctor-"
    logging.getLogger("kopf.objects").addFilter(not_per_event)
    # Nor a line per liveness probe (kopf's probe activity, aiohttp's access log).
    logging.getLogger("kopf.activities.probe").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    settings.watching.server_timeout = 300
    # Watch only what the operator made (and Warning events), not every pod of the cluster.
    for resource, labels in ((("batch", "jobs"), PROCTOR), (("v1", "pods"), PROCTOR),
                             (("v1", "configmaps"), RESULTS)):
        settings.watching.label_selectors[resource] = selector(labels)
    settings.watching.field_selectors["v1", "events"] = "type=Warning"
    load_config()
    _METRICS = _METRICS or Metrics()
    defaults = manifests.JobDefaults.from_env(os.environ)
    resync_s, pull_timeout_s = env_settings(os.environ)
    CONTROLLER = Controller(
        Kube(), _METRICS, Settings(image_pull_timeout_s=pull_timeout_s,
                                   keep_finished_jobs=defaults.ttl_seconds_after_finished
                                   is not None),
        {name: kwargs[name] for name in ("evaluations", "agents", "jobs", "pods", "results",
                                         "warnings")},  # kopf's live indexes (below)
        runner_image=os.environ.get("PROCTOR_RUNNER_IMAGE") or None,
        allow_local=os.environ.get("PROCTOR_ALLOW_LOCAL_ENDPOINTS", "") in ("1", "true"),
        job_defaults=defaults, boundary=netpol.Boundary.from_env(os.environ),
        resync_s=resync_s, slots_check=AdmissionChecks() if os.environ.get(
            "PROCTOR_AGENT_SLOTS_CHECK", "") in ("1", "true") else None)


EVENT_HANDLERS = ("_evaluation_event", "_agent_event", "_child_event")
"""The handlers that only queue a pass: kopf's line for each of their calls ("Handler ...
succeeded.", one per watch event) says nothing; the decisions have lines of their own."""


def not_per_event(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (record.levelno == logging.INFO and message.endswith("succeeded.")
                and any(f"Handler '{name}" in message for name in EVENT_HANDLERS))


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if CONTROLLER is not None:
        CONTROLLER.stop()


# kopf keeps these current from watches, so a pass lists nothing.
@kopf.index("proctor.dev", "v1alpha1", "evaluations")
def evaluations(namespace: str | None, name: str, body: Obj, **_: Any
                ) -> dict[Any, Any]:
    return {(namespace, label_value(name)): dict(body)}


@kopf.index("proctor.dev", "v1alpha1", "agentundertests")
def agents(namespace: str | None, name: str, body: Obj, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): dict(body)}


@kopf.index("batch", "v1", "jobs", labels=PROCTOR, id="jobs")
@kopf.index("", "v1", "pods", labels=PROCTOR, id="pods")
def children(body: Obj, **_: Any) -> dict[Any, Any]:
    return {_owner_key(body): dict(body)}


@kopf.index("", "v1", "configmaps", labels=RESULTS)
def results(body: Obj, **_: Any) -> dict[Any, Any]:
    """Of a kept result, only the RunResult, its owner's uid and name, and whether it is
    in the store (`store_backlog.Kept`): its logs stay on the server."""
    configmap = cast(ConfigMap, body)  # what kopf watched: the API server's JSON of it
    result = store.read_result(configmap)
    return {_owner_key(body): store_backlog.kept_of(configmap, owner_uid(body), result)
            } if result is not None else {}


@kopf.index("", "v1", "events", field="type", value="Warning")
def warnings(namespace: str | None, body: Obj, **_: Any) -> dict[Any, Any]:
    about = body.get("involvedObject") or {}
    return {(namespace, about.get("name")): dict(body)} if about.get("kind") in (
        "Job", "Pod") else {}


@kopf.on.event("proctor.dev", "v1alpha1", "evaluations")
async def _evaluation_event(event: Obj, body: Obj,
                            **_: Any) -> None:
    assert CONTROLLER is not None
    CONTROLLER.start()
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    key = (meta.get("namespace") or "", label_value(meta.get("name", "")))
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        await CONTROLLER.forget(key)
    elif meta.get("generation") != status.get("observedGeneration") or event.get("type") in (
            None, "ADDED"):  # first sight or a spec change: not its own status writes
        CONTROLLER.queue.add(key)


@kopf.on.event("proctor.dev", "v1alpha1", "agentundertests")
async def _agent_event(event: Obj, namespace: str | None, name: str,
                       body: Obj, **_: Any) -> None:
    """Its own status (a new spec: its Deployment applied and its card fetched first), and
    a pass of the namespace's Evaluations (one may use it)."""
    assert CONTROLLER is not None
    CONTROLLER.start()
    if namespace is None:  # never: AgentUnderTests are namespaced (kopf's type allows None)
        return
    generation = (body.get("metadata") or {}).get("generation")
    if event.get("type") == "DELETED":
        CONTROLLER.agents.forget(namespace, name)  # its Deployment and Service: the GC's
    elif CONTROLLER.agents.needs_probe(namespace, name, generation):
        await CONTROLLER.agents.probe_agent(namespace, name)
    else:
        await CONTROLLER.agents.write_status(namespace, name)
    for key in CONTROLLER.indexes.keys("evaluations"):
        if key[0] == namespace:
            CONTROLLER.queue.add(key)


@kopf.on.event("batch", "v1", "jobs", labels=PROCTOR)
@kopf.on.event("", "v1", "pods", labels=PROCTOR)
async def _child_event(body: Obj, **_: Any) -> None:
    if CONTROLLER is not None:
        CONTROLLER.queue.add(_owner_key(body))


@kopf.on.probe(id="evaluations")
def _probe(**_: Any) -> int:
    return len(CONTROLLER.tracked) if CONTROLLER else 0


def check_settings(environ: Mapping[str, str]) -> None:
    """Refuse a bad setting of the operator's environment in one line naming it (exit 2),
    before kopf starts: in its startup handler it would be a traceback."""
    try:
        manifests.JobDefaults.from_env(environ)
        netpol.Boundary.from_env(environ)
        env_settings(environ)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def run(namespaces: list[str], *, verbose: bool, probe_port: int,
        allow_local_endpoints: bool = False, election: Election | None = None) -> None:
    """`proctor operator`: run the handlers above until stopped; with `elected`, only
    while this process holds its Lease (`proctor.k8s.features.election.elected`)."""
    if allow_local_endpoints:
        os.environ["PROCTOR_ALLOW_LOCAL_ENDPOINTS"] = "1"
    check_settings(os.environ)
    kopf.configure(verbose=verbose)
    options: dict[str, Any] = dict(
        standalone=True, clusterwide=not namespaces, namespaces=namespaces,
        liveness_endpoint=f"http://0.0.0.0:{probe_port}/healthz")
    if election is None:
        return kopf.run(**options)
    load_config()
    leases = Leases(election.namespace, election.lease)
    with contextlib.suppress(asyncio.CancelledError):  # as kopf.run: stopped by a signal
        asyncio.run(run_elected(leases, election.identity, election.timing, probe_port,
                                lambda: kopf.operator(**options)))
