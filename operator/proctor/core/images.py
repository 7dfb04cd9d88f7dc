"""Names of the SWE-bench instance images, shared by both engines (pure)."""

from __future__ import annotations

from proctor.core.model import Instance


def instance_image(instance: Instance, registry: str = "") -> str:
    """The task's image, pulled from ``registry`` instead of its own when one is given.

    Docker's rule decides whether the image names a registry: its first component has a dot
    or a colon, or is ``localhost``. Only that part is replaced; the path is kept, as pull-
    through caches and mirrors expect (``mirror:5000/swebench/sweb.eval...``).
    """
    if not registry:
        return instance.image
    first, _, rest = instance.image.partition("/")
    has_registry = bool(rest) and ("." in first or ":" in first or first == "localhost")
    return f"{registry.rstrip('/')}/{rest if has_registry else instance.image}"
