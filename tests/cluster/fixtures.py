"""pytest fixtures of the test cluster; use with ``pytest_plugins = ["cluster.fixtures"]``.

* ``test_cluster`` (module scope): a running ``Cluster`` with the proctor.dev CRDs.
* ``k8s_namespace``: a fresh namespace in it for one test, deleted (with everything in it,
  its pods stopped) afterwards; the kubelet's faults and simulation are reset.
* ``kube_client``: an official ``kubernetes`` ApiClient for the cluster.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from cluster.emulator import Cluster, running_cluster


@pytest.fixture(scope="module")
def test_cluster() -> Iterator[Cluster]:
    with running_cluster(max_pods=2) as cluster:
        yield cluster


@pytest.fixture
def k8s_namespace(test_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base or 'test'}-{secrets.token_hex(3)}"
    test_cluster.store.ensure_namespace(name)
    yield name
    if test_cluster.kubelet is not None:
        test_cluster.kubelet.faults.clear()
        test_cluster.kubelet.simulation = None
    namespaces = test_cluster.store.resource("", "v1", "namespaces")
    test_cluster.store.delete(namespaces, None, name)
    # Gone only once its pods are: nothing of this test runs on into the next one. Finalizers
    # that no controller will remove any more (kopf's, once the operator stopped) are dropped.
    def gone() -> bool:
        return test_cluster.store.find(namespaces, None, name) is None
    try:
        test_cluster.wait_for(gone, 0.5)
    except TimeoutError:
        test_cluster.store.drop_finalizers(name)
        test_cluster.wait_for(gone, 30, message=f"namespace {name} was not deleted")


@pytest.fixture
def kube_client(test_cluster: Cluster) -> Iterator[Any]:
    client = test_cluster.api_client()
    yield client
    client.close()
