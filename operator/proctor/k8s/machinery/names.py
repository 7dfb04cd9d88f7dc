"""Deterministic names and label values for the objects Proctor creates (pure).

Every child object is named from what it is, never with ``generateName``: creating it
twice answers 409 instead of making a twin, and a restarted operator finds what it made.

Job names: ``<evaluation>-<first 16 hex of the item id>`` (``-r<n>`` for the n-th retry).
A Job's name becomes the ``job-name`` label of its pods, so it must be a DNS-1123 label
of at most 63 characters. The item id is already a SHA-256 prefix, so its first 16 hex
digits are 64 uniformly distributed bits. By the birthday bound, n items collide with
probability about n² / 2**65: 2.7e-12 for 10,000 items, 1.1e-13 for 2,000. Eight hex
digits (32 bits), as in kubebuilder's examples, would give 1.2% at 10,000 items.

Item ids do not depend on the Evaluation's name (two Evaluations of the same agent on the
same dataset share them), so the Evaluation's name must stay distinguishable in the
Job's name: a name too long for its share of the 63 characters is cut and ends in a hash
of the whole name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

MAX_LABEL = 63
"""Longest DNS-1123 label and longest label value."""

ITEM_HASH_CHARS = 16
"""Hex digits of the item id kept in a Job's name (64 bits; see the module docstring)."""

OWNER_PART_MAX = MAX_LABEL - 1 - ITEM_HASH_CHARS - len("-r10")
"""Characters of a Job's name left for the Evaluation's name (42), with room for the retry
suffix (``runner.infraRetries`` is at most 10)."""

_NAME_HASH_CHARS = 6
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def is_dns_label(text: str) -> bool:
    """A valid DNS-1123 label: Job, Pod-name-safe, at most 63 characters."""
    return len(text) <= MAX_LABEL and bool(_DNS_LABEL.match(text))


def is_label_value(text: str) -> bool:
    """A valid Kubernetes label value (empty allowed)."""
    return len(text) <= MAX_LABEL and bool(_LABEL_VALUE.match(text))


def _dns_part(text: str, limit: int) -> str:
    """``text`` as a DNS-1123 label of at most ``limit`` characters, distinct per input.

    Kept as is when it already fits; otherwise lowered, cleaned, cut, and ended with a
    hash of the original, so that two names cut to the same prefix still differ.
    """
    if is_dns_label(text) and len(text) <= limit:
        return text
    clean = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    head = clean[: limit - _NAME_HASH_CHARS - 1].strip("-")
    tail = _digest(text)[:_NAME_HASH_CHARS]
    return f"{head}-{tail}" if head else tail


def owner_part(evaluation: str) -> str:
    """The Evaluation's name as it starts its children's names (at most 42 characters)."""
    return _dns_part(evaluation, OWNER_PART_MAX)


def job_name(evaluation: str, item_id: str, attempt: int = 0) -> str:
    """The Job of one attempt at one item (a hex id); attempt 0 is the first try."""
    if not 0 <= attempt <= 10:
        raise ValueError(f"attempt {attempt} is outside 0..10 (runner.infraRetries <= 10)")
    retry = f"-r{attempt}" if attempt else ""
    return f"{owner_part(evaluation)}-{item_id[:ITEM_HASH_CHARS]}{retry}"


def agent_service_name(agent: str) -> str:
    """A service agent's Deployment and Service: ``agent-<its name>``, a DNS-1035 label (a
    Service's name must start with a letter; an AgentUnderTest's may not)."""
    return "agent-" + _dns_part(agent, MAX_LABEL - len("agent-"))


def network_policy_name(evaluation: str) -> str:
    """An Evaluation's NetworkPolicy: ``proctor-<its name>``, cut and hashed to a DNS
    label (the prefix keeps it apart from the namespace's own policies)."""
    return "proctor-" + _dns_part(evaluation, MAX_LABEL - len("proctor-"))


def label_value(text: str) -> str:
    """``text`` as a label value: unchanged when valid, else cleaned, cut and hashed.

    Every SWE-bench instance id (at most 32 characters of letters, digits, ``_ . -``) is
    already a valid value, so a selector on ``proctor.dev/instance`` can use the id itself.
    """
    if is_label_value(text):
        return text
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)
    head = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", clean[: MAX_LABEL - 9])
    tail = _digest(text)[:8]
    return f"{head}-{tail}" if head else tail


def configmap_name(evaluation: str, kind: str, content_digest: str) -> str:
    """A content-addressed ConfigMap of an Evaluation: equal content, equal name.

    ``kind`` says what it holds (``task``, ``patch``, ``result``); 16 hex digits of the
    content's hash keep distinct contents apart with the same odds as Job names.
    """
    # Kept to 63 characters, like every name here, though a ConfigMap's may be longer.
    owner = _dns_part(evaluation, MAX_LABEL - len(kind) - 2 - ITEM_HASH_CHARS)
    return f"{owner}-{kind}-{content_digest[:ITEM_HASH_CHARS]}"


def selector(labels: Mapping[str, str]) -> str:
    """The label selector of the objects that carry all of ``labels``."""
    return ",".join(f"{k}={v}" for k, v in labels.items())
