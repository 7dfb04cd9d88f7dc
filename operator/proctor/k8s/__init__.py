"""Proctor on Kubernetes: what should exist (pure) and the thin handlers that make it so.

The modules here split the way the style guide asks:

* ``names``: deterministic names and label values (pure);
* ``manifests``: the desired ConfigMaps and Jobs of an Evaluation's work items (pure);
* ``podstatus``: what a Job and its Pod say about an item: pending, running, succeeded
  with its compact result, or failed with a cause (pure);
* ``conditions``: status conditions and the Evaluation's status, rebuilt each pass (pure);
* ``render``: what the operator would create for an Evaluation, for `proctor render` (pure).

None of these imports the Kubernetes client: they take and return plain dicts shaped as
the API writes them, so they are tested on real objects without a cluster. Only the
handler module talks to the API.
"""
