"""Jobs, pods and events as real clusters returned them: the objects of
shared/data/k8s-status (a skip, for the whole module that imports this, without the shared
data), and the ones most tests start from."""

from __future__ import annotations

import json
from typing import Any

import yaml

from support.paths import SHARED_DATA, shared

K8S = shared(SHARED_DATA / "k8s-status")  # every test reads these real objects
REAL_FILES = sorted(p.name for p in K8S.iterdir() if p.suffix in (".json", ".yaml"))


def real(name: str) -> Any:
    text = (K8S / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def real_items(name: str) -> list[dict[str, Any]]:
    obj = real(name)
    return obj.get("items", [obj])


COMPLETE_131 = real("job-complete-successcriteriamet_k8s131plus.yaml")
FAILED_131 = real("job-failed-backofflimitexceeded-failuretarget_k8s131plus.yaml")
OOM_POD = real_items("podlist-oomkilled-job-pod_troubleshoot.json")[0]
EVICTED_POD = real("pod-evicted-emptydir-sizelimit_aiops-e2e-report_k8s1.26.yaml")
