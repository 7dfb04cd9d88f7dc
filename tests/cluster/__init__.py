"""A test cluster: Kubernetes API server, Job controller, scheduler and kubelets on loopback.

    from cluster import Simulation, running_cluster

    with running_cluster(namespaces=["evals"]) as cluster:       # a free loopback port
        batch = kubernetes.client.BatchV1Api(cluster.api_client())
        with cluster.kubeconfig_env(), KopfRunner(["run", "--standalone", "-A", path]):
            ...                                                   # kopf logs in through it
        cluster.kubelet.faults.add("oom", instance="proctor-demo__datekit-1", step="test")
        cluster.kubelet.simulation = Simulation({"solve": 2.0, "test": 1.0})

Or in pytest, ``pytest_plugins = ["cluster.fixtures"]``: ``test_cluster`` (module scope),
``k8s_namespace`` (fresh per test, deleted after), ``kube_client``.

Parts: ``emulator`` (``Cluster``, the HTTP server ``ClusterEmulator`` on kmock's scaffold,
``write_kubeconfig``), ``store`` (objects and API semantics), ``admission`` (defaults and
validation per kind), ``patching``, ``selectors``, ``discovery`` (discovery and OpenAPI v3
documents), ``tables`` (server-side tables), ``kubelet`` (Job controller, scheduler,
kubelets), ``podrun`` (one pod's containers as local processes), ``shapes`` (status and
event shapes), ``faults`` (failure injection, simulated runs). ``python -m cluster`` serves
one until stopped; README.md lists where it still differs from a real API server.

kmock 0.8's own ``KubernetesEmulator`` keeps objects in a way the operator cannot use, so
the store replaces it and kmock serves ``/version`` and error rendering. What
kmock lacks, and this adds: uid / resourceVersion / creationTimestamp / generation (kopf's
finalizer JSON patch tests resourceVersion and fails forever without one), label and field
selectors, PUT, 201 on create and 409 on a taken name, the ``/status`` subresource, GET
/api/v1/namespaces (its path parser answers 500), watches that resume from a
resourceVersion and end at timeoutSeconds, garbage collection, pod logs, discovery as
kubectl reads it (kmock's names the core group ``/v1``), OpenAPI v3, server-side tables,
watch-lists, strict field validation, and anything acting on objects (controllers,
kubelet). Its pytest plugin (needing pytest-asyncio) is not used.
"""

from cluster.emulator import (
    Cluster,
    ClusterEmulator,
    register_proctor_crds,
    running_cluster,
    write_kubeconfig,
)
from cluster.errors import ApiError
from cluster.faults import Fault, Faults, Simulation
from cluster.kubelet import Kubelet
from cluster.store import Store

__all__ = ["ApiError", "Cluster", "ClusterEmulator", "Fault", "Faults", "Kubelet",
           "Simulation", "Store", "register_proctor_crds", "running_cluster",
           "write_kubeconfig"]
