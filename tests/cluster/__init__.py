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
validation per kind), ``patching``, ``selectors``, ``kubelet`` (Job controller, scheduler,
kubelets), ``podrun`` (one pod's containers as local processes), ``shapes`` (status and
event shapes), ``faults`` (failure injection, simulated runs).

kmock 0.8's own ``KubernetesEmulator`` keeps objects in a way the operator cannot use, so
the store replaces it and kmock serves discovery, ``/version`` and error rendering. What
kmock lacks, and this adds: uid / resourceVersion / creationTimestamp / generation (kopf's
finalizer JSON patch tests resourceVersion and fails forever without one), label and field
selectors, PUT, 201 on create and 409 on a taken name, the ``/status`` subresource, GET
/api/v1/namespaces (its path parser answers 500), watches that resume from a
resourceVersion and end at timeoutSeconds, garbage collection, pod logs, and anything acting
on objects (controllers, kubelet). Its pytest plugin (needing pytest-asyncio) is not used.
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
