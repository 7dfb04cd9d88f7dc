"""Each container's security profile in a work item's pod: the one place that states it.

Pod Security's `restricted` profile asks of every container: run as non-root,
allowPrivilegeEscalation false, capabilities drop ALL (NET_BIND_SERVICE alone may be added
back), and a RuntimeDefault (or Localhost) seccomp profile. Every step meets it except the
test step, which runs as root: its exceptions are listed in ``TEST_EXCEPTIONS`` with the
reason for each. They stay inside `baseline`, so a namespace that enforces baseline admits
the pods.

    step       image          user            root filesystem   capabilities added
    pull       task image     10001           read-only         none
    workspace  task image     10001           read-only         none  (sidecar agents)
    agent      agent image    10001           writable          none  (sidecar agents)
    solve      runner image   10001 (proctor) read-only         none
    test-log   runner image   10001 (proctor) read-only         none  (keeps the test log)
    test       task image     0 (root)        writable          TEST_CAPABILITIES (none)
    grade      runner image   10001 (proctor) read-only         none

The read-only steps write only to their volumes: /proctor, /workspace, /proctor-log, and /tmp (an
emptyDir of its own per pod, for Python's and git's temporary files). The test step and the
agent keep a writable root filesystem: an eval script installs the task's package into its
image (`pip install -e .`) and checks files out in /testbed, and an agent's image is the
agent author's, who may write anywhere in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NON_ROOT_USER = 10001
"""The runner image's own user (proctor); the other non-root steps run as it too, so that
every step but the test step reads and writes the shared volumes as one user."""

TEST_CAPABILITIES: dict[str, str] = {}
"""The capabilities the test step adds back after dropping ALL, each with why it is needed:
none. Measured: gold patches of real Verified rows (pytest-dev__pytest-5262, -7205, -7571,
pallets__flask-5014) resolve in Docker with every capability dropped and no new
privileges, and the demo's items on a real cluster, where root reads and writes the work
folder that the non-root solve step wrote (fsGroup shares it). Running the tests as an
unprivileged user would add SETUID and SETGID here, with that reason; each must stay in
`baseline`'s list."""

TEST_EXCEPTIONS: dict[str, str] = {
    "runAsNonRoot": "SWE-bench images run their eval scripts as root: /testbed, the conda "
                    "environment and the package's install are root's",
    "runAsUser": "0, for the same reason",
    **({"capabilities": "adds back " + ", ".join(TEST_CAPABILITIES) + " (TEST_CAPABILITIES)"}
       if TEST_CAPABILITIES else {}),
}
"""Where the test step departs from `restricted`, by the field `restricted` checks."""


@dataclass(frozen=True)
class Profile:
    """How one step runs."""

    user: int
    """The uid (and gid) it runs as."""
    read_only_root: bool
    """Whether its root filesystem is read-only (it then writes only to its volumes)."""
    add: tuple[str, ...] = ()
    """Capabilities added back after dropping ALL."""

    @property
    def restricted(self) -> bool:
        """Whether it meets Pod Security's `restricted` profile."""
        return self.user != 0 and set(self.add) <= {"NET_BIND_SERVICE"}


PROFILES: dict[str, Profile] = {
    "pull": Profile(NON_ROOT_USER, read_only_root=True),
    "workspace": Profile(NON_ROOT_USER, read_only_root=True),
    "agent": Profile(NON_ROOT_USER, read_only_root=False),
    "solve": Profile(NON_ROOT_USER, read_only_root=True),
    "test-log": Profile(NON_ROOT_USER, read_only_root=True),
    "test": Profile(0, read_only_root=False, add=tuple(TEST_CAPABILITIES)),
    "grade": Profile(NON_ROOT_USER, read_only_root=True),
    "variants": Profile(NON_ROOT_USER, read_only_root=True),  # an Evaluation's llm variants
}
"""Each step's profile, by container name."""

TMP_VOLUME = "tmp"
"""The emptyDir mounted at /tmp in the steps whose root filesystem is read-only."""


def container_security_context(step: str) -> dict[str, Any]:
    """The securityContext of the container named ``step`` (a key of ``PROFILES``)."""
    profile = PROFILES[step]
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if profile.add:
        capabilities["add"] = list(profile.add)
    return {
        "runAsNonRoot": profile.user != 0,
        "runAsUser": profile.user,
        "runAsGroup": profile.user,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": profile.read_only_root,
        "capabilities": capabilities,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    """The pod's securityContext: the RuntimeDefault seccomp profile for every container,
    and the non-root user's group owning the emptyDir volumes (fsGroup), so that the steps
    share them. Users are set per container (the test step's differs)."""
    return {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": NON_ROOT_USER}
