"""Pod Security's `restricted` profile as the Kubernetes documentation states it, written
out here rather than taken from the code under test: by which fields a container fails it."""

from __future__ import annotations

from typing import Any


def restricted_departures(pod: dict[str, Any], container: dict[str, Any]) -> set[str]:
    """The fields by which a container fails Pod Security's `restricted` profile, as the
    Kubernetes documentation states the profile (pod-level settings count for it)."""
    pod_ctx, ctx = pod.get("securityContext") or {}, container.get("securityContext") or {}
    found = set()
    if not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
        found.add("runAsNonRoot")
    if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
        found.add("runAsUser")
    if ctx.get("allowPrivilegeEscalation") is not False:
        found.add("allowPrivilegeEscalation")
    capabilities = ctx.get("capabilities") or {}
    if "ALL" not in capabilities.get("drop", []) or set(capabilities.get("add", [])) - {
            "NET_BIND_SERVICE"}:
        found.add("capabilities")
    seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        found.add("seccompProfile")
    if ctx.get("privileged"):
        found.add("privileged")
    return found
