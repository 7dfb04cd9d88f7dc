"""Proctor at 100,000 items on one cluster: a model from measured inputs, extrapolated.

The shape: 500 tasks x 4 variants x 5 repeats x 10 agents, one Evaluation per agent
(10,000 items each). The model is linear in what grows (`model`, pure): per item, per
task of an Evaluation, per Evaluation. Its inputs are measured:

* etcd and object-store bytes per item: the 177 real harness logs, graded, kept as the
  operator keeps them (benchmarks/record_size.py's `item_sizes`): the record ConfigMap
  with a store, the full one without, and the item's files in the store;
* a task ConfigMap: every Verified row with three variant texts as long as its problem
  statement (`task_configmap`, with the owner reference the operator adds);
* API requests, watch events, operator CPU and memory, the Evaluation's size: without
  `--measure`, the figures of the operator benchmark on the real control plane that
  docs/benchmarks.md reports (what it did not measure is said to be missing); with
  `--measure N`, a run of N simulated items on a control plane of its own
  (benchmarks/kwok_plane.py: etcd, kube-apiserver, controllers, scheduler, KWOK nodes;
  the operator in a process of its own, as benchmarks/operator_sim.py runs it), measured
  from outside: the API server's request and watch counters (every client's), etcd's
  database size, the Evaluation as stored, the operator's /proc.

Every assumption is printed with the figures (`ASSUMPTIONS`).

    python benchmarks/scale_model.py [--data DIR] [--inputs FILE]
    python benchmarks/scale_model.py --measure 2000 [--save FILE] [--log FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import record_size

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "swebench-verified"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Shape:
    """How many items, in how many Evaluations."""

    tasks: int
    variants: int
    repeats: int
    agents: int
    """One Evaluation per agent."""

    @property
    def per_evaluation(self) -> int:
        return self.tasks * self.variants * self.repeats

    @property
    def items(self) -> int:
        return self.per_evaluation * self.agents


TARGET = Shape(tasks=500, variants=4, repeats=5, agents=10)


@dataclass(frozen=True)
class Inputs:
    """What the model is computed from; None: not measured (the figure is left out)."""

    source: str
    """Where the run's figures come from."""
    record_bytes: float
    """etcd per kept item with a store: its record ConfigMap (mean, real logs)."""
    full_bytes: float
    """etcd per kept item without one: its full result ConfigMap (mean, real logs)."""
    stored_bytes: float
    """The object store per item: its files (mean, real logs)."""
    task_bytes: float
    """etcd per task of an Evaluation: its task ConfigMap (mean, with 3 variants)."""
    evaluation_bytes: float | None = None
    """etcd per Evaluation: the object with its status, at the end of a run."""
    status_bytes: float | None = None
    """Of that, the status."""
    requests: Mapping[str, float] = field(default_factory=dict)
    """API requests per item, by verb."""
    requests_of: str = "every client's"
    """Whose requests those are."""
    watch_events: Mapping[str, float] = field(default_factory=dict)
    """Watch events the API server sent per item, by resource (to every watcher)."""
    watch_bytes: float | None = None
    """Their bytes per item."""
    cpu_seconds: float | None = None
    """The operator's CPU per item (over the run's second half: without what an
    Evaluation costs once, its dataset read and its plan)."""
    cpu_per_evaluation: float = 0.0
    """The rest of the run's CPU, paid once per Evaluation."""
    rss_base_mib: float | None = None
    """The operator's resident memory less what grows with items (`rss_per_item_kib`
    times the run's items)."""
    rss_per_item_kib: float | None = None
    """Its growth per item over the run's second half."""
    db_bytes_per_item: float | None = None
    """etcd's database growth per item (every write's history until compaction: Jobs,
    pods, status writes; the file does not shrink without defragmentation)."""


@dataclass(frozen=True)
class Figures:
    """The model's figures for one shape."""

    shape: Shape
    etcd_store_bytes: float
    """Objects kept in etcd with a store: records, task ConfigMaps, Evaluations."""
    etcd_full_bytes: float
    """The same without a store (full result ConfigMaps)."""
    etcd_db_store_bytes: float | None
    """etcd's database growth, at most (`Inputs.db_bytes_per_item`)."""
    store_bytes: float
    requests: dict[str, float]
    requests_total: float
    watch_events: float | None
    watch_bytes: float | None
    cpu_seconds: float | None
    rss_mib: float | None
    status_bytes: float | None
    """Of each Evaluation (it does not grow with items: counts and figures)."""
    evaluation_bytes: float | None


def model(shape: Shape, inputs: Inputs) -> Figures:
    """The figures of ``shape`` from per-item, per-task and per-Evaluation inputs."""
    n, evaluations = shape.items, shape.agents
    tasks = shape.tasks * evaluations
    fixed = tasks * inputs.task_bytes + evaluations * (inputs.evaluation_bytes or 0.0)
    with_store = n * inputs.record_bytes + fixed
    requests = {verb: n * per for verb, per in sorted(inputs.requests.items())}
    return Figures(
        shape=shape, etcd_store_bytes=with_store,
        etcd_full_bytes=n * inputs.full_bytes + fixed,
        etcd_db_store_bytes=_times(n, inputs.db_bytes_per_item),
        store_bytes=n * inputs.stored_bytes, requests=requests,
        requests_total=sum(requests.values()),
        watch_events=n * sum(inputs.watch_events.values()) if inputs.watch_events else None,
        watch_bytes=_times(n, inputs.watch_bytes),
        cpu_seconds=None if inputs.cpu_seconds is None
        else n * inputs.cpu_seconds + evaluations * inputs.cpu_per_evaluation,
        # The operator indexes every kept result of every Evaluation it runs: all of them.
        rss_mib=None if inputs.rss_base_mib is None or inputs.rss_per_item_kib is None
        else inputs.rss_base_mib + n * inputs.rss_per_item_kib / 1024,
        status_bytes=inputs.status_bytes, evaluation_bytes=inputs.evaluation_bytes)


def _times(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a * b


ASSUMPTIONS = (
    "one Evaluation per agent (10 of 10,000 items), all kept on the cluster at once (none "
    "deleted); Jobs and pods are deleted as their items are kept, so only "
    "maxConcurrentRows of them live at a time and they are left out of etcd's bytes",
    "etcd's bytes are the objects as JSON (the API server stores protobuf for built-in "
    "kinds, smaller; JSON for custom resources): an upper bound; etcd's database grows "
    "by every write's history (Jobs and pods made and deleted, status writes) until the "
    "API server compacts it (every 5 min) and does not shrink without defragmentation: "
    "its growth per item in the run, times the items, is an upper bound",
    "a kept item is as large as the mean of the 177 real logs (their patches and test "
    "logs); an agent's transcript (absent from gold runs) adds to the store, not to etcd",
    "a task's variant texts are as long as its problem statement (3 variants per task)",
    "per-item API requests, watch events, CPU and memory are those of the measured run, "
    "whose items are repeats of tasks; variants cost the same per item (one Job each)",
    "the status is written at most once a second per Evaluation and holds counts and "
    "figures, not items: its size does not grow with items, its writes per item fall "
    "as items lengthen (real items take minutes, the measured ones seconds)",
    "the operator's memory and CPU are a part paid once (libraries, an Evaluation's "
    "dataset and plan) and a part per item, read from the run's second half; memory "
    "grows linearly with kept results (its index holds each one's RunResult, test names "
    "counted not named for a record); its passes rebuild the status from every item of "
    "an Evaluation, so CPU per item at 10,000 items an Evaluation may exceed the "
    "measured (linear) figure",
    "requests and watch events are every client's (the API server does not count by "
    "client): the Job controller, the scheduler, KWOK and the benchmark's own watch of "
    "pods are in them",
)


# --- inputs ------------------------------------------------------------------------------


def real_sizes(data: Path) -> dict[str, float]:
    """Mean bytes per item from the 177 real logs (record_size.py), and per task."""
    with tempfile.TemporaryDirectory() as tmp:
        found = record_size.item_sizes(data, Path(tmp))
    return {"record_bytes": statistics.mean(s.record for s in found),
            "full_bytes": statistics.mean(s.configmap for s in found),
            "stored_bytes": statistics.mean(s.stored for s in found),
            "task_bytes": task_bytes(data), "logs": len(found)}


def task_bytes(data: Path) -> float:
    """The mean task ConfigMap of the Verified rows, each with 3 variants as long as its
    problem statement, with the owner reference."""
    from proctor.datasets import load
    from proctor.k8s.children.manifests import task_configmap

    rows = load(str(data / "SWE-bench_Verified_test.parquet"), max_rows=-1).instances
    sizes = [len(json.dumps(record_size.owned(task_configmap(
        record_size.EVALUATION, row, {f"tpl-{n}": f"{row.problem_statement}\n(variant {n})"
                                      for n in range(1, 4)}))).encode()) for row in rows]
    return statistics.mean(sizes)


DOCUMENTED = {
    "source": "docs/benchmarks.md: the operator benchmark (500 items, gold, 50 at once) on "
              "a quiet machine; the operator's own requests from its run on the earlier "
              "test cluster (6.1 a Job); watch events, the Evaluation's size and memory "
              "growth were not measured there",
    "requests": {"POST": 3.0, "GET": 1.9, "DELETE": 1.0, "PATCH": 0.2},
    "requests_of": "the operator's",
    "cpu_seconds": 0.088,
    "status_bytes": 1.4 * 1024,  # benchmarks/k8s_plan.py: 2,000 kept results
}


def inputs_from(sizes: Mapping[str, float], run: Mapping[str, Any]) -> Inputs:
    known = {f.name for f in fields(Inputs)}
    return Inputs(**{k: v for k, v in {**sizes, **run}.items() if k in known})


# --- printing ----------------------------------------------------------------------------


def _size(n: float | None) -> str:
    if n is None:
        return "not measured"
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def _count(n: float | None, unit: str = "") -> str:
    return "not measured" if n is None else f"{n:,.0f}{unit}"


def render(figures: Figures, inputs: Inputs) -> str:
    s = figures.shape
    requests = ", ".join(f"{verb} {count:,.0f}" for verb, count in figures.requests.items())
    watched = ", ".join(f"{kind} {s.items * per:,.0f}" for kind, per in sorted(
        inputs.watch_events.items(), key=lambda kv: -kv[1]))
    lines = [
        f"{s.items:,} items ({s.tasks} tasks x {s.variants} variants x {s.repeats} repeats x "
        f"{s.agents} Evaluations of {s.per_evaluation:,}):",
        f"  etcd, objects kept: with a store {_size(figures.etcd_store_bytes)}, without "
        f"{_size(figures.etcd_full_bytes)}; etcd's database grows by at most "
        f"{_size(figures.etcd_db_store_bytes)} (history until compaction)",
        f"  object store: {_size(figures.store_bytes)}",
        f"  API requests ({inputs.requests_of}): {_count(figures.requests_total or None)}"
        f"{f' ({requests})' if requests else ''}",
        f"  watch events (to every watcher): {_count(figures.watch_events)}, "
        f"{_size(figures.watch_bytes)}{f' ({watched})' if watched else ''}",
        f"  operator: CPU {_count(figures.cpu_seconds, ' s')}"
        f"{'' if figures.cpu_seconds is None else f' ({figures.cpu_seconds / 3600:.1f} h)'}"
        f", memory {_size(None if figures.rss_mib is None else figures.rss_mib * MIB)}",
        f"  an Evaluation: {_size(figures.evaluation_bytes)}, of which status "
        f"{_size(figures.status_bytes)}",
    ]
    return "\n".join(lines)


def render_inputs(inputs: Inputs) -> str:
    shown = {k: (round(v, 4) if isinstance(v, float) else v)
             for k, v in asdict(inputs).items() if k != "source"}
    return f"inputs ({inputs.source}):\n" + "\n".join(
        f"  {k}: {json.dumps(v)}" for k, v in shown.items())


# --- the measured run --------------------------------------------------------------------


def measure(items: int, args: argparse.Namespace) -> tuple[dict[str, Any], Shape]:
    """A run of ``items`` simulated items (a quarter as many tasks, 4 repeats, the real
    durations / 100) on a control plane of its own; per-item figures."""
    import kwok_plane
    import operator_sim
    import pyarrow.parquet as pq

    from proctor.k8s.children.manifests import ANNOTATION_ITEM, LABEL_ITEM

    split = args.data / "SWE-bench_Verified_test.parquet"
    tasks_n = math.ceil(items / 4)
    tasks = pq.read_table(split, columns=["instance_id"]).column(0).to_pylist()[:tasks_n]
    seconds = operator_sim.task_seconds(
        tasks, json.loads((args.data / "eval_durations.json").read_text()),
        operator_sim.STRESS.divisor)
    evaluation = {"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                  "metadata": {"name": "scale", "namespace": operator_sim.NAMESPACE},
                  "spec": {"dataset": {"name": str(split), "maxRows": tasks_n},
                           "predictions": {"source": "gold"}, "repeats": 4,
                           "maxConcurrentRows": operator_sim.ROWS}}
    shape = Shape(tasks=tasks_n, variants=1, repeats=4, agents=1)
    with (tempfile.TemporaryDirectory(prefix="proctor-scale-") as tmp,
          kwok_plane.kwok_plane(Path(tmp) / "cluster", operator_sim.KWOK_NODES) as plane):
        kwok_plane.install(plane, operator_sim.NAMESPACE,
                           kwok_plane.pod_stages(seconds, ANNOTATION_ITEM, LABEL_ITEM))
        logs = Path(tmp) / "logs"
        logs.mkdir()
        run = measured_run(plane, logs, evaluation, shape.items, args)
    return run, shape


def measured_run(plane: Any, logs: Path, evaluation: dict, total: int,
                 args: argparse.Namespace) -> dict[str, Any]:
    import kwok_plane
    import operator_sim
    from kubernetes import client

    from proctor.k8s.children.manifests import ANNOTATION_ITEM

    custom = client.CustomObjectsApi(plane.api)
    writer = kwok_plane.LogWriter(plane, logs, ANNOTATION_ITEM, operator_sim.full_result)
    stop = threading.Event()
    kwok_plane.watch(plane, f"/api/v1/namespaces/{operator_sim.NAMESPACE}/pods",
                     lambda kind, pod: writer.pod(pod) if kind == "ADDED" else None, stop)
    op = operator_sim.start_operator(plane.kubeconfig, argparse.Namespace(
        module="proctor.k8s.controller", log=args.log))
    try:
        operator_sim.wait_until_watching(plane, op)
        before = snapshot(plane, op.pid)
        custom.create_namespaced_custom_object("proctor.dev", "v1alpha1",
                                               operator_sim.NAMESPACE, "evaluations",
                                               evaluation)
        half: dict[str, Any] = {}

        def get() -> dict:
            """The Evaluation; the operator's counters once half its items are done."""
            body = custom.get_namespaced_custom_object(
                "proctor.dev", "v1alpha1", operator_sim.NAMESPACE, "evaluations", "scale")
            done = ((body.get("status") or {}).get("items") or {}).get("done", 0)
            if not half and done >= total // 2:
                half.update(done=done, rss=rss_mib(op.pid),
                            cpu=operator_sim.cpu_seconds(op.pid))
            return body

        operator_sim.wait_for_items(get, op, time.monotonic())
        operator_sim.settle_cpu(op.pid)
        after = snapshot(plane, op.pid)
        rss = rss_mib(op.pid)
        kept = kept_bytes(plane)
    finally:
        stop.set()
        operator_sim.stop_operator(op)
        writer.close()
    return per_item(before, after, kept, total, Half(half["done"], half["rss"], half["cpu"]),
                    rss)


def snapshot(plane: Any, pid: int) -> dict[str, Any]:
    """The counters a run is measured by, now."""
    import operator_sim

    samples = operator_sim._metrics(plane)
    requests: dict[str, float] = {}
    events: dict[str, float] = {}
    event_bytes = 0.0
    for name, labels, value in samples:
        if name == "apiserver_request_total":
            verb = labels.get("verb", "?")
            requests[verb] = requests.get(verb, 0.0) + value
        elif name == "apiserver_watch_events_total":
            kind = labels.get("resource") or labels.get("kind") or "?"
            events[kind] = events.get(kind, 0.0) + value
        elif name == "apiserver_watch_events_sizes_sum":
            event_bytes += value
    return {"requests": requests, "events": events, "event_bytes": event_bytes,
            "db": etcd_db_bytes(plane), "cpu": operator_sim.cpu_seconds(pid)}


def etcd_db_bytes(plane: Any) -> float | None:
    """etcd's database size (its own metric; etcd listens 4064 ports below the API
    server, as cluster.sh places both with one offset)."""
    import urllib.request

    import yaml

    config = yaml.safe_load(Path(plane.kubeconfig).read_text())
    server = config["clusters"][0]["cluster"]["server"]
    port = int(server.rsplit(":", 1)[1].strip("/")) - 6443 + 2379
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    return metric_value(text, "etcd_mvcc_db_total_size_in_bytes")


def metric_value(text: str, name: str) -> float | None:
    """The value of an unlabelled sample ``name`` in Prometheus' text format."""
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def kept_bytes(plane: Any) -> dict[str, float]:
    """The bytes (JSON) of what the run left in etcd: result and task ConfigMaps (mean
    each), the Evaluation and its status."""
    import operator_sim
    from kubernetes import client

    from proctor.core.labels import COMPONENT

    def body(response: Any) -> Any:
        return json.loads(response.data)

    listed = body(client.CoreV1Api(plane.api).list_namespaced_config_map(
        operator_sim.NAMESPACE, _preload_content=False))["items"]
    by_kind: dict[str, list[int]] = {}
    for cm in listed:
        kind = (cm["metadata"].get("labels") or {}).get(COMPONENT, "other")
        cm["metadata"].pop("managedFields", None)
        by_kind.setdefault(kind, []).append(len(json.dumps(cm).encode()))
    evaluation = body(client.CustomObjectsApi(plane.api).get_namespaced_custom_object(
        "proctor.dev", "v1alpha1", operator_sim.NAMESPACE, "evaluations", "scale",
        _preload_content=False))
    evaluation["metadata"].pop("managedFields", None)
    return {"result_bytes": statistics.mean(by_kind.get("result", [0])),
            "task_bytes": statistics.mean(by_kind.get("task", [0])),
            "kept_total": float(sum(sum(v) for v in by_kind.values())),
            "evaluation_bytes": float(len(json.dumps(evaluation).encode())),
            "status_bytes": float(len(json.dumps(evaluation.get("status") or {}).encode()))}


@dataclass(frozen=True)
class Half:
    """The operator's counters once (about) half the items were done."""

    done: int
    rss_mib: float
    cpu: float


WATCHED_AT_LEAST = 0.1
"""Watch events per item below which a resource is not the items' (the cluster's own)."""


def per_item(before: Mapping[str, Any], after: Mapping[str, Any], kept: Mapping[str, float],
             items: int, half: Half, rss: float) -> dict[str, Any]:
    """A run's per-item inputs from the counters before it, at ``half`` and after it, and
    the operator's resident memory (MiB) at the end (pure). What grows with items is
    read from the second half; the rest of the CPU is the Evaluation's once."""
    def delta(key: str) -> dict[str, float]:
        return {k: (v - before[key].get(k, 0.0)) / items for k, v in after[key].items()
                if v - before[key].get(k, 0.0) > 0}

    grown = None if before["db"] is None or after["db"] is None else after["db"] - before["db"]
    second = max(items - half.done, 1)
    cpu = (after["cpu"] - half.cpu) / second
    rss_per_item = max(0.0, rss - half.rss_mib) / second
    return {
        "requests": delta("requests"),
        "watch_events": {k: v for k, v in delta("events").items() if v >= WATCHED_AT_LEAST},
        "watch_bytes": (after["event_bytes"] - before["event_bytes"]) / items,
        "cpu_seconds": cpu,
        "cpu_per_evaluation": max(0.0, after["cpu"] - before["cpu"] - cpu * items),
        "rss_base_mib": rss - rss_per_item * items, "rss_per_item_kib": rss_per_item * 1024,
        "db_bytes_per_item": None if grown is None else max(grown, 0.0) / items,
        "evaluation_bytes": kept["evaluation_bytes"], "status_bytes": kept["status_bytes"],
        "measured_result_bytes": kept["result_bytes"],
        "measured_task_bytes": kept["task_bytes"],
    }


# --- main --------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA,
                        help="the folder of SWE-bench_Verified_test.parquet, "
                             "eval_durations.json and logs/")
    parser.add_argument("--measure", type=int, metavar="N",
                        help="measure a run of N simulated items on a control plane of its "
                             "own (KWOK nodes), then extrapolate")
    parser.add_argument("--inputs", type=Path, help="a run's figures saved with --save")
    parser.add_argument("--save", type=Path, help="write the run's figures (JSON) here")
    parser.add_argument("--log", help="the operator's log (verbose) to this file")
    args = parser.parse_args()
    if args.measure is not None and args.measure < 4:
        print("scale_model: --measure takes at least 4 items", file=sys.stderr)
        return 2
    run: dict[str, Any] = dict(DOCUMENTED)
    if args.inputs is not None:
        try:
            run = json.loads(args.inputs.read_text())
        except (OSError, ValueError) as exc:
            print(f"scale_model: cannot read {args.inputs}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(run, dict):
            print(f"scale_model: {args.inputs} is not a run's figures (an object, as --save "
                  f"writes)", file=sys.stderr)
            return 2
    if not (args.data / "logs").is_dir() or not (
            args.data / "SWE-bench_Verified_test.parquet").is_file():
        print(f"scale_model: {args.data} lacks logs/ or SWE-bench_Verified_test.parquet "
              f"(--data names the folder)", file=sys.stderr)
        return 2
    sizes = real_sizes(args.data)
    print(f"sizes from {sizes['logs']:.0f} real logs: record ConfigMap "
          f"{sizes['record_bytes']:,.0f} B, full ConfigMap {sizes['full_bytes']:,.0f} B, "
          f"stored files {sizes['stored_bytes']:,.0f} B per item; task ConfigMap "
          f"{sizes['task_bytes']:,.0f} B")
    if args.measure is not None:
        measured, shape = measure(args.measure, args)
        run = {**measured, "source": f"measured: {shape.items} simulated items on a real "
                                     f"control plane with KWOK nodes"}
        if args.save is not None:
            try:
                args.save.write_text(json.dumps(run, indent=1) + "\n")
            except OSError as exc:  # the run's figures are printed below all the same
                print(f"scale_model: cannot write {args.save}: {exc}", file=sys.stderr)
        at = replace(inputs_from(sizes, run),
                     record_bytes=run["measured_result_bytes"],
                     full_bytes=run["measured_result_bytes"],
                     task_bytes=run["measured_task_bytes"])
        print("\nmeasured (its own result and task ConfigMaps: simulated results, no "
              "variants):")
        print(render(model(shape, at), at))
    inputs = inputs_from(sizes, run)
    print()
    print(render_inputs(inputs))
    print("\nmodel:")
    print(render(model(TARGET, inputs), inputs))
    print("\nassumptions:")
    print("\n".join(f"  - {a}" for a in ASSUMPTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
