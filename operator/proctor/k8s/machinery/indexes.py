"""What kopf's indexes hold, as a pass reads them: the objects under a key, and an
Evaluation's or AgentUnderTest's spec parsed once per generation.

kopf keeps the indexes current from its watches (`proctor.k8s.controller`), so a pass
lists nothing: it reads them here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from proctor.core.spec import AgentUnderTest, Evaluation, Resource
from proctor.formats.manifest import parse_kind
from proctor.k8s.machinery.objects import Event, Job, MutableObj, Pod

Key = tuple[str, str]  # (namespace, Evaluation label value): how the indexes key its objects
_Kind = TypeVar("_Kind", Evaluation, AgentUnderTest)
PARSED_KEPT = 1000  # parsed specs kept before the cache starts again (old generations)


class Indexes:
    """kopf's live indexes by name (evaluations, agents, jobs, pods, results, warnings)."""

    def __init__(self, indexes: Mapping[str, Any]):
        self._indexes = indexes
        self._parsed: dict[tuple[Any, Any], Resource] = {}  # by (uid, generation)

    def keys(self, index: str) -> list[Any]:
        """The index's keys now (a copy: a pass may await while kopf changes it)."""
        return list(self._indexes[index])

    def one(self, index: str, key: Any) -> MutableObj | None:
        return next(iter(self._indexes[index].get(key) or ()), None)

    def all(self, index: str, key: Any) -> list[Any]:
        return list(self._indexes[index].get(key) or ())

    # kopf's indexes hold what its watches delivered: the API server's JSON of each kind.
    def jobs(self, key: Key) -> list[Job]:
        """An Evaluation's Jobs: its items', its pull Jobs, its llm variants Job."""
        return self.all("jobs", key)

    def pods(self, key: Key) -> list[Pod]:
        """The pods of an Evaluation's Jobs."""
        return self.all("pods", key)

    def warnings(self, namespace: str, name: str) -> list[Event]:
        """The Warning events about one Job or pod."""
        return self.all("warnings", (namespace, name))

    def kept(self, key: Key) -> list[Any]:
        """The kept results (the index holds each as a `store_backlog.Kept`)."""
        return [kept.result for kept in self.all("results", key)]

    def parse(self, body: MutableObj, kind: type[_Kind]) -> _Kind:
        """An Evaluation or AgentUnderTest checked against its CRD (once per generation)."""
        version = (body["metadata"].get("uid"), body["metadata"].get("generation"))
        parsed = self._parsed.get(version)
        if not isinstance(parsed, kind):  # not seen yet (a uid is never of two kinds)
            if len(self._parsed) > PARSED_KEPT:
                self._parsed.clear()
            parsed = self._parsed[version] = parse_kind(body, kind)
        return parsed
