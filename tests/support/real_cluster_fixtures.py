"""pytest plugin: the real Kubernetes of scripts/cluster.sh, for tests that need one.

Use it with ``pytest_plugins = ["support.real_cluster_fixtures"]``. Fixtures:

* ``real_cluster`` (session): the session's cluster (``cluster_kubeconfig`` of
  tests/conftest.py, from tests/support/real_cluster.py), checked to be a Kubernetes
  v1.35+ built here from its sources, with the proctor.dev CRDs of ``crds/`` applied
  (again before each test's namespace: on a shared cluster another checkout may apply
  its own).
* ``cluster_images``: the runner image and the demo task images, built here and imported
  into the node's containerd once per session, under names derived from a hash of their
  inputs: an unchanged rerun builds and imports nothing. Each test checks that the node
  still holds them (the kubelet's image GC removes unused images from a nearly full
  disk) and imports again what it lost.
* ``cluster_namespace``: a fresh namespace for one test, deleted afterwards (the session
  waits at its end until every one is gone).
* ``cluster_api_client``: an official ``kubernetes`` ApiClient for the cluster.
* ``admission_webhook``: admission webhooks served by this process (the API server runs
  on this host and calls them), limited to the test's namespace: they see every request
  they are registered for, and may refuse or change it.

And functions: ``in_process_operator``, `proctor.k8s.controller` run by kopf's KopfRunner
in this process against the cluster, serving one namespace; ``agent_image``, an image on
the node for sidecar agents.

Where no cluster can run, tests/support/real_cluster.py's one rule applies: the tests skip with one
line saying what is missing, or fail with PROCTOR_REQUIRE_CLUSTER=1 (CI).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kopf.testing import KopfRunner

from support.paths import ROOT
from support.real_cluster import unavailable

CLUSTER_SH = ROOT / "scripts" / "cluster.sh"
NODE = "proctor-node"
"""The node's name, fixed by scripts/cluster.sh."""
MIN_VERSION = (1, 35)
IMAGE_PREFIX = "proctor-test.local"
"""Registry part of the images imported here: names no other tool gives its images."""
RUNNER_BASE = os.environ.get("PROCTOR_RUNNER_BASE", "proctor/runner-base:bookworm")
RUNNER_CONTEXT = ("pyproject.toml", "README.md", "crds", "operator")
"""What runner-image/Dockerfile copies from the repository (its .dockerignore keeps the
rest out), less what that file excludes (see ``_runner_files``)."""


def wait_for(what: Callable[[], Any], timeout: float = 60, interval: float = 0.2,
             message: str | Callable[[], str] = "") -> Any:
    """Poll ``what`` until it returns something truthy; that value. ``message`` (or what it
    returns, called then) says what was waited for when the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            said = message() if callable(message) else message
            raise TimeoutError(said or f"waited {timeout:.0f}s in vain for {what!r}")
        time.sleep(interval)


# --- The cluster ----------------------------------------------------------------------------


def not_built_here(version: dict[str, str]) -> str | None:
    """Why a server's /version is not a Kubernetes v1.35+ built by scripts/cluster.sh, or None.

    cluster.sh stamps the version (gitVersion, gitMajor, gitMinor) into the binaries it
    builds from the Go module proxy's sources, and nothing else: with no git tree to read,
    gitCommit keeps the sources' unexpanded ``$Format:%H$`` and buildDate the epoch. Every
    released binary (kind's node image, a cloud's control plane) names its commit and date.
    """
    found = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version.get("gitVersion", ""))
    if not found or (int(found[1]), int(found[2])) < MIN_VERSION:
        return (f"the API server is {version.get('gitVersion')!r}, "
                "not a release v1.35 or newer")
    if version.get("gitCommit") != "$Format:%H$" or \
            version.get("buildDate") != "1970-01-01T00:00:00Z":
        return (f"the API server {version['gitVersion']} was not built by scripts/cluster.sh "
                f"(commit {version.get('gitCommit')!r}, built {version.get('buildDate')!r})")
    return None


@dataclass(frozen=True)
class RealCluster:
    """A running cluster of scripts/cluster.sh."""

    kubeconfig: Path
    version: dict[str, str]
    node_ip: str
    """The node's address: pods reach a server of this host that listens there."""

    def api_client(self) -> Any:
        return kubernetes.config.new_client_from_config(str(self.kubeconfig))

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        from support import k8s_tools

        done = subprocess.run([str(k8s_tools.tool_binary("kubectl")), "--kubeconfig",
                               str(self.kubeconfig), *args], input=stdin, capture_output=True,
                              text=True, timeout=180)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def apply_crds(self) -> None:
        """This checkout's CRDs (crds/, the one source of their schema). CRDs are
        cluster-wide: on a shared cluster another checkout may have applied its own since,
        whose new fields' defaults this checkout's operator would refuse as unknown."""
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     "crd/evaluations.proctor.dev", "crd/agentundertests.proctor.dev")

    def images(self) -> set[str]:
        """The image names the node's containerd holds."""
        return set(_cluster_sh("images").split())

    def import_images(self, names: list[str]) -> None:
        """`docker save` the images into the node's containerd."""
        save = subprocess.Popen(["docker", "save", *names], stdout=subprocess.PIPE)
        done = subprocess.run(["bash", str(CLUSTER_SH), "import", "-"], stdin=save.stdout,
                              capture_output=True, text=True, timeout=1200)
        save.wait(timeout=60)
        assert save.returncode == 0 and done.returncode == 0, done.stderr[-2000:]


def _cluster_sh(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["bash", str(CLUSTER_SH), *args], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"scripts/cluster.sh {' '.join(args)}: {done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="session")
def real_cluster(cluster_kubeconfig: Path) -> RealCluster:
    """The session's cluster (tests/conftest.py starts it, or finds it running), checked."""
    client = kubernetes.config.new_client_from_config(str(cluster_kubeconfig))
    with client:
        version = client.sanitize_for_serialization(
            kubernetes.client.VersionApi(client).get_code())
        problem = not_built_here(version)
        assert problem is None, problem  # never run the cluster's tests elsewhere
        node = kubernetes.client.CoreV1Api(client).read_node(NODE)
    address = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    cluster = RealCluster(cluster_kubeconfig, version, address)
    cluster.apply_crds()
    return cluster


# --- Images ---------------------------------------------------------------------------------


def _runner_files() -> list[Path]:
    """The files the runner image is built from, as its .dockerignore lets them through."""
    files = [ROOT / "runner-image" / "Dockerfile"]
    for top in RUNNER_CONTEXT:
        path = ROOT / top
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    skipped = ("__pycache__", ".egg-info", str(Path("datasets", "demo", "repos")))
    return [f for f in files if not any(s in str(f.relative_to(ROOT)) for s in skipped)]


def digest(parts: list[bytes]) -> str:
    """A short hash of ``parts``, in order."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(hashlib.sha256(part).digest())
    return hasher.hexdigest()[:12]


def _docker_id(image: str) -> str | None:
    done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass(frozen=True)
class ClusterImages:
    runner: str
    """The runner image: the operator under test names it (PROCTOR_RUNNER_IMAGE)."""
    instance_registry: str
    """An Evaluation's spec.runner.instanceImageRegistry under which the node has the demo
    tasks' images."""
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    """Each image on the node -> the Docker image it was imported from."""


def _docker_missing() -> str | None:
    if not shutil.which("docker"):
        return "no docker client to build the cluster's images with"
    if subprocess.run(["docker", "version"], capture_output=True).returncode != 0:
        return "no Docker daemon answers (scripts/docker-daemon.sh starts one)"
    if _docker_id(RUNNER_BASE) is None and not shutil.which("mmdebstrap"):
        return "mmdebstrap is missing, so the runner image's base cannot be built"
    return None


def _runner_image(cluster: RealCluster, in_docker: bool = False) -> str:
    """The runner image's name, built unless the node or Docker has it (Docker, with
    ``in_docker``: to build other images on it)."""
    if _docker_id(RUNNER_BASE) is None:
        subprocess.run(["bash", str(ROOT / "runner-image" / "offline-base.sh"), RUNNER_BASE],
                       check=True, capture_output=True, timeout=1800)
    base = _docker_id(RUNNER_BASE) or ""
    inputs = [base.encode()] + [f.read_bytes() for f in _runner_files()]
    tag = f"{IMAGE_PREFIX}/proctor-runner:{digest(inputs)}"
    if (in_docker or tag not in cluster.images()) and _docker_id(tag) is None:
        built = subprocess.run(["docker", "build", "-q", "--network", "host", "--build-arg",
                                f"BASE={RUNNER_BASE}", "-f", "runner-image/Dockerfile",
                                "-t", tag, "."], cwd=ROOT, capture_output=True, text=True,
                               timeout=3600)
        assert built.returncode == 0, built.stderr[-3000:]
    return tag


def _demo_images() -> tuple[str, dict[str, str]]:
    """The registry the demo images go under on the node, and their names there -> here."""
    import docker

    from proctor.sandboxes.demo_images import build_demo_images, demo_tasks

    build_demo_images(docker.from_env(), log=lambda _: None)
    names = sorted(demo_tasks())
    ids = [_docker_id(name) or "" for name in names]
    registry = f"{IMAGE_PREFIX}/demo-{digest([i.encode() for i in ids])}"
    return registry, {f"{registry}/{name}": name for name in names}


def _ensure_on_node(cluster: RealCluster, images: ClusterImages) -> None:
    """Import what the node lacks. On a nearly full disk the kubelet's image GC removes
    images no container uses (and the pause image: `cluster.sh up` restores that)."""
    held = cluster.images()
    if not any(name.startswith("proctor.local/pause:") for name in held):
        _cluster_sh("up")
    missing = sorted(set(images.sources) - held)
    if not missing:
        return
    renamed = [name for name in missing if images.sources[name] != name]
    for name in renamed:
        subprocess.run(["docker", "tag", images.sources[name], name], check=True)
    try:
        cluster.import_images(missing)
    finally:
        if renamed:
            subprocess.run(["docker", "rmi", *renamed], capture_output=True)


@pytest.fixture(scope="session")
def _session_images(real_cluster: RealCluster) -> ClusterImages:
    why = _docker_missing()
    if why is not None:
        unavailable(why)
    runner = _runner_image(real_cluster)
    registry, demo = _demo_images()
    images = ClusterImages(runner, registry, {runner: runner, **demo})
    _ensure_on_node(real_cluster, images)
    return images


def agent_image(cluster: RealCluster, images: ClusterImages) -> str:
    """An agent image on the node: the runner image with `proctor agent serve` as its
    entrypoint, as a sidecar agent's image needs (the pod passes it only arguments, as
    Agentbeats does). Built and imported once: its name is hashed from the runner's."""
    tag = f"{IMAGE_PREFIX}/proctor-agent:{digest([images.runner.encode()])}"
    if tag in cluster.images():
        return tag
    if _docker_id(tag) is None:
        _runner_image(cluster, in_docker=True)
        dockerfile = (f"FROM {images.runner}\n"
                      'ENTRYPOINT ["/usr/bin/tini", "--", "proctor", "agent", "serve"]\n')
        built = subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile,
                               capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stderr[-3000:]
    cluster.import_images([tag])
    return tag


@pytest.fixture
def cluster_images(real_cluster: RealCluster, _session_images: ClusterImages
                   ) -> ClusterImages:
    """The session's images, checked (and imported again if need be) before each test."""
    _ensure_on_node(real_cluster, _session_images)
    return _session_images


# --- Per test -------------------------------------------------------------------------------


@pytest.fixture
def cluster_api_client(real_cluster: RealCluster) -> Iterator[Any]:
    client = real_cluster.api_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def _deleted_namespaces(real_cluster: RealCluster) -> Iterator[list[str]]:
    """Namespaces the tests deleted: the session ends once they are gone."""
    deleted: list[str] = []
    yield deleted
    with real_cluster.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)

        def gone(name: str) -> bool:
            try:
                core.read_namespace(name)
            except kubernetes.client.ApiException as exc:
                return exc.status == 404
            return False
        for name in deleted:
            wait_for(lambda: gone(name), 180, 0.5,  # noqa: B023 (called at once)
                     f"namespace {name} was not deleted within 180 s")


@pytest.fixture
def cluster_namespace(real_cluster: RealCluster, _deleted_namespaces: list[str],
                      request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace named after the test (``pt-`` and a random suffix), deleted afterwards.

    Its deletion (the namespace controller removes what is in it, pods stop) goes on while
    the next tests run, each in a namespace of its own; the session waits for it at its end.
    """
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:44].strip("-")
    name = f"pt-{base or 'test'}-{secrets.token_hex(3)}"
    real_cluster.apply_crds()  # again: another checkout may have applied its own meanwhile
    with real_cluster.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespace({"metadata": {"name": name}})
        yield name
        core.delete_namespace(name, propagation_policy="Background")
        _deleted_namespaces.append(name)


# --- The operator ---------------------------------------------------------------------------


@contextmanager
def in_process_operator(cluster: RealCluster, namespace: str, runner_image: str | None = None,
                        probe_port: int | None = None, allow_local: bool = False
                        ) -> Iterator[KopfRunner]:
    """`proctor.k8s.controller` in this process, serving one namespace: ``runner_image`` is
    its default runner image (PROCTOR_RUNNER_IMAGE; None: its own), ``allow_local`` lets it
    ask agents on loopback (as `proctor operator --allow-local-endpoints`)."""
    import kubernetes.config.kube_config as kube_config

    args = ["run", "--standalone", "--namespace", namespace, "-m", "proctor.k8s.controller"]
    if probe_port:
        args += ["--liveness", f"http://127.0.0.1:{probe_port}/healthz"]
    env = {"KUBECONFIG": str(cluster.kubeconfig), "PROCTOR_RUNNER_IMAGE": runner_image or "",
           "PROCTOR_ALLOW_LOCAL_ENDPOINTS": "1" if allow_local else ""}
    before = {k: os.environ.get(k) for k in env}
    default = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    os.environ.update(env)
    # The kubernetes package read KUBECONFIG when first imported: kopf's login reads this.
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(cluster.kubeconfig)
    try:
        with KopfRunner(args, timeout=60) as runner:
            yield runner
    finally:
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = default
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert runner.exception is None, runner.output[-3000:]


# --- Admission webhooks ---------------------------------------------------------------------


Handler = Callable[[dict[str, Any]], "Answer | None"]


@dataclass(frozen=True)
class Answer:
    """A webhook's answer other than a plain "allowed": a refusal, or a change."""

    refuse: str | None = None
    """The refusal's message: the client gets it with ``code``."""
    code: int = 500
    patch: list[dict[str, Any]] | None = None
    """JSON patch operations on the object (mutating webhooks only)."""


@dataclass
class Hook:
    name: str
    mutating: bool
    handler: Handler
    seen: list[dict[str, Any]] = field(default_factory=list)
    """Every AdmissionRequest it was sent, with ``answer`` added."""


class AdmissionWebhook:
    """HTTPS admission webhooks served on 127.0.0.1 (the API server's host), each limited
    to one namespace by its configuration's namespaceSelector."""

    def __init__(self, cluster: RealCluster, namespace: str, workdir: Path):
        self.cluster, self.namespace = cluster, namespace
        self.hooks: dict[str, Hook] = {}
        self.probes: set[str] = set()
        self.configurations: list[tuple[bool, str]] = []
        cert, key = workdir / "tls.crt", workdir / "tls.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True,
                       capture_output=True)
        self.ca_bundle = base64.b64encode(cert.read_bytes()).decode()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._request_class())
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True,
                         name="admission-webhook").start()

    def _request_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        webhook = self

        class Request(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                # The API server adds ?timeout=... to the webhook's URL.
                name = urllib.parse.urlsplit(self.path).path.strip("/")
                body = json.dumps(webhook.answer(name, review["request"]))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        return Request

    def answer(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
        if name.startswith("probe-"):
            self.probes.add(name)
            return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": response}
        hook = self.hooks[name]
        answer = hook.handler(request)
        if answer is not None and answer.refuse is not None:
            response.update(allowed=False, status={"code": answer.code,
                                                   "message": answer.refuse})
        elif answer is not None and answer.patch:
            response.update(patchType="JSONPatch", patch=base64.b64encode(
                json.dumps(answer.patch).encode()).decode())
        hook.seen.append({**request, "answer": response})
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": response}

    def register(self, rules: list[dict[str, Any]], handler: Handler,
                 mutating: bool = False) -> Hook:
        """A webhook sent the requests ``rules`` match in the namespace, answered by
        ``handler`` (None: allowed). Returns once the API server calls it."""
        name = f"hook-{len(self.hooks)}"
        hook = self.hooks[name] = Hook(name, mutating, handler)
        probe = f"probe-{len(self.hooks)}"
        in_namespace = {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}

        def webhook(path: str, rules: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
            return {"name": f"{path}.{self.namespace}.proctor.test",
                    "clientConfig": {"url": f"https://127.0.0.1:{self.port}/{path}",
                                     "caBundle": self.ca_bundle},
                    "rules": rules, "namespaceSelector": in_namespace,
                    "sideEffects": "None", "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail", "timeoutSeconds": 10, **extra}
        # A second webhook in the same configuration, sent only the probe's dry-run
        # ConfigMap: once it is called, the API server has loaded the configuration.
        probe_rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                      "resources": ["configmaps"], "scope": "Namespaced"}
        body = {"metadata": {"name": f"{self.namespace}-{name}"},
                "webhooks": [webhook(name, rules),
                             webhook(probe, [probe_rule], objectSelector={
                                 "matchLabels": {"proctor.test/probe": probe}})]}
        admission = kubernetes.client.AdmissionregistrationV1Api(self._client)
        if mutating:
            for w in body["webhooks"]:
                w["reinvocationPolicy"] = "Never"
            admission.create_mutating_webhook_configuration(body)
        else:
            admission.create_validating_webhook_configuration(body)
        self.configurations.append((mutating, body["metadata"]["name"]))
        core = kubernetes.client.CoreV1Api(self._client)

        def probed() -> bool:
            core.create_namespaced_config_map(self.namespace, {"metadata": {
                "name": "probe", "labels": {"proctor.test/probe": probe}}}, dry_run="All")
            return probe in self.probes
        wait_for(probed, 30, 0.2, f"the API server never called webhook {name}")
        return hook

    @property
    def _client(self) -> Any:
        if not hasattr(self, "_api_client"):
            self._api_client = self.cluster.api_client()
        return self._api_client

    def close(self) -> None:
        admission = kubernetes.client.AdmissionregistrationV1Api(self._client)
        for mutating, name in self.configurations:
            delete = (admission.delete_mutating_webhook_configuration if mutating
                      else admission.delete_validating_webhook_configuration)
            delete(name)
        self._client.close()
        self.server.shutdown()


@pytest.fixture
def admission_webhook(real_cluster: RealCluster, cluster_namespace: str
                      ) -> Iterator[AdmissionWebhook]:
    with tempfile.TemporaryDirectory(prefix="proctor-webhook-") as tmp:
        webhook = AdmissionWebhook(real_cluster, cluster_namespace, Path(tmp))
        try:
            yield webhook
        finally:
            webhook.close()
