"""The Jobs and ConfigMaps of work items as the tests build and read them: what a pod
finds in /task (`task_files`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any


def task_files(job: Mapping[str, Any], configmaps: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """What /task holds in the pod of ``job``: path -> text, as a kubelet projects it from
    the ConfigMaps given and the pod template's annotations (written apart from the
    manifests, from Kubernetes' projected volumes; on the real cluster of
    tests/test_operator.py the runner steps read what a kubelet projects)."""
    by_name = {cm["metadata"]["name"]: cm.get("data", {}) for cm in configmaps}
    template = job["spec"]["template"]
    annotations = template["metadata"].get("annotations", {})
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "task"]
    files: dict[str, str] = {}
    for source in volume["projected"]["sources"]:
        if "configMap" in source:
            data = by_name[source["configMap"]["name"]]
            files |= {entry["path"]: data[entry["key"]] for entry in source["configMap"]["items"]}
        for entry in source.get("downwardAPI", {}).get("items", []):
            key = re.fullmatch(r"metadata\.annotations\['(.+)'\]", entry["fieldRef"]["fieldPath"])
            assert key is not None
            files[entry["path"]] = annotations[key.group(1)]
    return files
