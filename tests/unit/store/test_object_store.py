"""Results in an S3-compatible store: `proctor run --upload` and `proctor results pull
s3://...` against a real server (scripts/s3-server.sh: versitygw on loopback), the
failures a person meets (bad URL, store down, wrong key, no bucket), and the small
per-item record etcd keeps, on the 177 real logs; and the operator's side: an item's files
uploaded and its record ConfigMap pulled back into the same folder as a full ConfigMap.

The server is built with Go (scripts/test.sh builds it first). Without Go or a cached
build these tests skip, saying so; with PROCTOR_REQUIRE_S3=1 (CI) that is a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from proctor.core.model import RunResult
from proctor.formats.manifest import parse_resource
from proctor.k8s.children.store import (
    item_files,
    read_record,
    read_result,
    record_configmap,
    result_configmap,
    store_of,
)
from proctor.k8s.evaluation.act import moved_record
from proctor.k8s.pull import PullError, store_fetch, write_folder
from proctor.runner.artifacts import collect
from proctor.runner.workdir import WorkDir
from proctor.store.location import S3Location, StoreError, item_location, parse_s3_url
from proctor.store.record import ARTEFACTS, item_record, object_keys
from proctor.store.s3 import StoreUnreachable, upload_item
from support.paths import ROOT, SHARED_DATA, shared
from support.ports import free_port

SCRIPT = ROOT / "scripts" / "s3-server.sh"
PROCTOR = Path(sys.executable).parent / "proctor"
DEMO = ROOT / "examples" / "demo-gold.yaml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "proctor-s3"


def unavailable(why: str) -> None:
    if os.environ.get("PROCTOR_REQUIRE_S3") == "1":
        pytest.fail(f"PROCTOR_REQUIRE_S3=1 but {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The server's environment (AWS_ENDPOINT_URL and the keys), for the session."""
    if not shutil.which("go") and not any(CACHE.glob("*/complete")):
        unavailable("neither Go nor a cached build of the S3 server (scripts/s3-server.sh)")
    env = {**os.environ, "PROCTOR_S3_DIR": str(tmp_path_factory.mktemp("s3"))}
    up = subprocess.run(["bash", str(SCRIPT), "up"], env=env, capture_output=True,
                        text=True, timeout=900)
    if up.returncode != 0:  # Go is here, so it must build: a failure, not a skip
        pytest.fail(f"scripts/s3-server.sh up failed: {up.stderr.strip()}", pytrace=False)
    try:
        yield dict(line.split("=", 1) for line in up.stdout.split())
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, timeout=60)


def s3_client(server: dict[str, str]):
    return boto3.client("s3", endpoint_url=server["AWS_ENDPOINT_URL"], region_name="us-east-1",
                        aws_access_key_id=server["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=server["AWS_SECRET_ACCESS_KEY"],
                        config=Config(s3={"addressing_style": "path"}))


@pytest.fixture
def bucket(server) -> str:
    name = f"results-{uuid.uuid4().hex[:12]}"
    s3_client(server).create_bucket(Bucket=name)
    return name


def proctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`proctor ...` as a person runs it, with only the store's variables of `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run([str(PROCTOR), *args], env={**base, **env},
                          capture_output=True, text=True, timeout=600)


def run_demo(out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return proctor("run", "-f", str(DEMO), "--output-dir", str(out), "--sandbox", "process",
                   "-q", *extra, env=env)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "run.lock"}


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The error a failed command printed: one line, no traceback."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proctor: error: "), done.stderr
    return lines[0]


def test_a_demo_run_uploads_and_pulls_back_byte_for_byte(server, bucket, tmp_path):
    run = tmp_path / "gold-run"
    done = run_demo(run, server, "--upload", f"s3://{bucket}/runs")
    assert done.returncode == 0, done.stderr
    stored = f"s3://{bucket}/runs/gold-run"
    assert f"to {stored}/" in done.stdout
    pulled = proctor("results", "pull", stored, "-o", str(tmp_path / "pulled"), env=server)
    assert pulled.returncode == 0, pulled.stderr
    written = files_of(run)
    assert len(written) > 100 and "results.jsonl" in written
    assert files_of(tmp_path / "pulled") == written
    the_records_point_at_the_stored_artefacts(server, run, parse_s3_url(stored))


def the_records_point_at_the_stored_artefacts(server, run: Path, where: S3Location) -> None:
    s3 = s3_client(server)
    for line in (run / "results.jsonl").read_text().splitlines():
        result = RunResult.model_validate_json(line)
        work = run / "items" / result.instance_id / result.variant_id / str(result.repeat)
        files = {n: (work / n).read_bytes() for n in ARTEFACTS if (work / n).exists()}
        record = item_record(result, where, files)
        assert {"patch.diff", "test_output.txt", "result.json", "report.json"} <= \
            set(record["objects"])
        for name, key in object_keys(record).items():
            body = s3.get_object(Bucket=where.bucket, Key=key)["Body"].read()
            assert hashlib.sha256(body).hexdigest() == record["objects"][name]["sha256"]
        assert record["outcome"] == result.outcome.value
        assert len(json.dumps(record)) <= 2048


def test_a_store_that_is_down_keeps_the_results_and_a_second_run_uploads_them(
        server, bucket, tmp_path):
    run = tmp_path / "kept"
    down = {**server, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}  # none listens
    done = run_demo(run, down, "--upload", f"s3://{bucket}/runs")
    assert done.returncode == 3
    line = one_line_error(done)
    assert "cannot reach the object store" in line and str(run) in line
    assert len((run / "results.jsonl").read_text().splitlines()) == 10  # every item kept
    again = run_demo(run, server, "--upload", f"s3://{bucket}/runs")  # resumes: all done
    assert again.returncode == 0, again.stderr
    pulled = proctor("results", "pull", f"s3://{bucket}/runs/kept", "-o",
                     str(tmp_path / "pulled"), env=server)
    assert pulled.returncode == 0 and files_of(tmp_path / "pulled") == files_of(run)


def test_a_wrong_key_is_refused_in_one_line_and_nothing_is_written(server, bucket, tmp_path):
    s3_client(server).put_object(Bucket=bucket, Key="runs/r/results.jsonl", Body=b"{}\n")
    wrong = {**server, "AWS_SECRET_ACCESS_KEY": "not-the-key"}
    done = proctor("results", "pull", f"s3://{bucket}/runs/r", "-o", str(tmp_path / "out"),
                   env=wrong)
    assert done.returncode == 3
    assert "refused" in one_line_error(done) and "AWS_SECRET_ACCESS_KEY" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("url", "says"), [
    ("s3://no-such-bucket-here/runs/x", "no bucket 'no-such-bucket-here'"),
    ("BUCKET/runs/nothing", "nothing stored at"),
])
def test_no_bucket_or_nothing_stored_is_bad_input(server, bucket, tmp_path, url, says):
    done = proctor("results", "pull", url.replace("BUCKET", f"s3://{bucket}"), "-o",
                   str(tmp_path / "out"), env=server)
    assert done.returncode == 2 and says in one_line_error(done)
    assert not (tmp_path / "out").exists()


def test_without_credentials_the_run_does_not_start(server, bucket, tmp_path):
    env = {"AWS_ENDPOINT_URL": server["AWS_ENDPOINT_URL"],  # and no keys anywhere:
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}
    done = run_demo(tmp_path / "r", env, "--upload", f"s3://{bucket}/runs")
    assert done.returncode == 2 and "AWS_ACCESS_KEY_ID" in one_line_error(done)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("url", "says"), [
    ("s3://Upper/x", "is not a bucket name"),
    ("s3://ab/x", "is not a bucket name"),
    ("gs://bucket/x", "is not an s3:// URL"),
    ("s3://bucket/a/../b", "has an empty, . or .. part"),
])
def test_a_bad_url_is_one_line_and_exit_2(tmp_path, url, says):
    pull = proctor("results", "pull", url, "-o", str(tmp_path / "out"), env={})
    assert pull.returncode == 2 and says in one_line_error(pull)
    run = run_demo(tmp_path / "r", {}, "--upload", url)
    assert run.returncode == 2 and says in run.stderr and len(run.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists() and not (tmp_path / "out").exists()


def test_urls_and_keys_map_to_folder_paths_and_never_leave_them():
    run = parse_s3_url("s3://results/evals/ns/")
    assert run == S3Location(bucket="results", prefix="evals/ns")
    assert str(parse_s3_url("s3://results")) == "s3://results"
    item = item_location(run.child("ev"), "django__django-1", "original", 0)
    assert item.key("patch.diff") == "evals/ns/ev/items/django__django-1/original/0/patch.diff"
    assert run.relative("evals/ns/items/a/b") == "items/a/b"
    for outside in ("evals/ns2/x", "evals/ns/../x", "evals/ns/a/../../x", "evals/ns/"):
        assert run.relative(outside) is None, outside
    with pytest.raises(StoreError):
        parse_s3_url("s3:/results/x")


def test_the_record_is_at_most_2_kib_on_the_real_logs(tmp_path):
    data = shared(SHARED_DATA / "swebench-verified")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from record_size import TARGET_BYTES, sizes

    found = sizes(data, tmp_path)
    assert len(found) == 177
    assert max(record for _, record, _ in found) <= TARGET_BYTES == 2048
    # and far below today's ConfigMap, which holds the test names and the logs
    assert sum(r for _, r, _ in found) * 10 < sum(c for _, _, c in found)


# --- the operator's side: records in etcd, files in the store --------------------------------


def kept_both_ways(run: Path, server: dict[str, str], bucket: str, monkeypatch):
    """The demo run's results as the operator keeps them: full ConfigMaps (no store) and,
    with the store, the files uploaded and record ConfigMaps."""
    for name, value in server.items():  # the operator's own credentials
        monkeypatch.setenv(name, value)
    ev = parse_resource({
        "apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
        "metadata": {"name": "gold", "namespace": "evals"},
        "spec": {"dataset": {"name": "proctor-demo"}, "predictions": {"source": "gold"},
                 "results": {"store": {"url": f"s3://{bucket}/cluster",
                                       "endpoint": server["AWS_ENDPOINT_URL"]}}}})
    config = store_of(ev, {})
    assert config is not None
    full, records = [], []
    for line in (run / "results.jsonl").read_text().splitlines():
        result = RunResult.model_validate_json(line)
        artifacts = collect(WorkDir(run / "items" / result.instance_id / result.variant_id
                                    / str(result.repeat)))
        full.append(result_configmap(ev, result, artifacts))
        files = item_files(result, artifacts)
        upload_item(config.endpoint, files, item_location(
            config.run, result.instance_id, result.variant_id, result.repeat))
        records.append(record_configmap(ev, result, item_record(result, config.run, files)))
    return ev, config, full, records


def test_records_pull_into_the_same_folder_as_configmaps(server, bucket, tmp_path,
                                                         monkeypatch):
    run = tmp_path / "run"
    assert run_demo(run, server).returncode == 0
    ev, config, full, records = kept_both_ways(run, server, bucket, monkeypatch)
    sizes = [len(json.dumps(r)) for r in records]
    print(f"record ConfigMaps: max {max(sizes)} bytes, full ConfigMaps: max "
          f"{max(len(json.dumps(f)) for f in full)} bytes")
    assert max(sizes) <= 2048 and all(read_result(r) for r in records)
    keys = s3_client(server).list_objects_v2(Bucket=bucket, Prefix="cluster/")["Contents"]
    assert all(k["Key"].startswith("cluster/evals/gold/items/") for k in keys)
    assert write_folder(ev, full, tmp_path / "configmaps") == 10
    assert write_folder(ev, records, tmp_path / "store", store_fetch(config.endpoint)) == 10
    assert files_of(tmp_path / "store") == files_of(tmp_path / "configmaps")
    # Some kept in full while the store was down, the rest as records: all of them pull.
    mixed = full[:4] + records[4:]
    assert write_folder(ev, mixed, tmp_path / "mixed", store_fetch(config.endpoint)) == 10
    assert files_of(tmp_path / "mixed") == files_of(tmp_path / "configmaps")


def test_a_changed_stored_file_or_a_store_that_is_down_is_refused_and_writes_nothing(
        server, bucket, tmp_path, monkeypatch):
    run = tmp_path / "run"
    assert run_demo(run, server).returncode == 0
    ev, config, _, records = kept_both_ways(run, server, bucket, monkeypatch)
    down = f"http://127.0.0.1:{free_port()}"  # none listens
    with pytest.raises(StoreUnreachable, match="cannot reach the object store"):
        upload_item(down, {"result.json": b"{}"}, config.run)  # the operator then keeps all
    with pytest.raises(StoreUnreachable):
        write_folder(ev, records, tmp_path / "out", store_fetch(down))
    key = next(iter(object_keys(read_record(records[0])).values()))
    s3_client(server).put_object(Bucket=bucket, Key=key, Body=b"changed")
    with pytest.raises(PullError, match="sha256 differs"):
        write_folder(ev, records, tmp_path / "out", store_fetch(config.endpoint))
    assert not (tmp_path / "out").exists()


def test_the_server_stopped_and_started_again_keeps_its_port_and_data(server, tmp_path,
                                                                     monkeypatch):
    """What the real-cluster test does to the store mid-run (scripts/s3-server.sh stop,
    start), on a server of its own."""
    env = {**os.environ, "PROCTOR_S3_DIR": str(tmp_path / "s3")}

    def script(action: str) -> dict[str, str]:
        done = subprocess.run(["bash", str(SCRIPT), action], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return dict(line.split("=", 1) for line in done.stdout.split())

    own = script("up")
    for name, value in own.items():
        monkeypatch.setenv(name, value)
    try:
        s3_client(own).put_object(Bucket="proctor-results", Key="k", Body=b"kept")
        script("stop")
        with pytest.raises(StoreUnreachable):
            upload_item(own["AWS_ENDPOINT_URL"], {"x": b"y"}, S3Location(bucket="proctor-results"))
        assert script("start") == own
        body = s3_client(own).get_object(Bucket="proctor-results", Key="k")["Body"].read()
        assert body == b"kept"
    finally:
        script("down")


def test_items_kept_in_full_while_the_store_was_down_move_to_it_unchanged(
        server, bucket, tmp_path, monkeypatch):
    """The operator's move of the backlog (`act.moved_record`): the files of a full
    ConfigMap uploaded and read back, and a record made that pulls into the same folder;
    a store that is down makes no record (the full ConfigMap stays)."""
    run = tmp_path / "run"
    assert run_demo(run, server).returncode == 0
    ev, config, full, _ = kept_both_ways(run, server, bucket, monkeypatch)
    s3 = s3_client(server)
    for key in [k["Key"] for k in s3.list_objects_v2(Bucket=bucket)["Contents"]]:
        s3.delete_object(Bucket=bucket, Key=key)  # as if the uploads had failed
    kept = [result_configmap(ev, read_result(cm), cm.get("binaryData"), upload_failed=True)
            for cm in full]
    spec = ev.spec.model_dump(mode="json", by_alias=True)
    spec["results"]["store"]["endpoint"] = f"http://127.0.0.1:{free_port()}"  # none listens
    down = parse_resource({"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
                           "metadata": {"name": "gold", "namespace": "evals"}, "spec": spec})
    with pytest.raises(StoreUnreachable, match="cannot reach the object store"):
        moved_record(down, kept[0], read_result(kept[0]), {})
    records = [moved_record(ev, cm, read_result(cm), {}) for cm in kept]
    assert all(read_record(r) is not None and r["metadata"]["name"] != cm["metadata"]["name"]
               for r, cm in zip(records, kept, strict=True))
    assert max(len(json.dumps(r)) for r in records) <= 2048
    assert write_folder(ev, full, tmp_path / "configmaps") == 10
    assert write_folder(ev, records, tmp_path / "moved", store_fetch(config.endpoint)) == 10
    assert files_of(tmp_path / "moved") == files_of(tmp_path / "configmaps")
    # Moved again (the operator stopped before deleting the full one): the same record.
    assert moved_record(ev, kept[0], read_result(kept[0]), {}) == records[0]
