"""Proctor on Kubernetes: what should exist (pure) and the thin shell that makes it so.

Pure (plain dicts shaped as the API writes them; tested on real objects, no cluster):
``names``, ``manifests`` (ConfigMaps and Jobs), ``store`` (kept results), ``podstatus``
(what a Job and its pod say), ``reconcile`` (`decide`, the status), ``conditions``,
``expectations``, ``render`` (what the operator would create, for `proctor render`),
``leader`` (the Lease rules of `--leader-election`).
The shell: ``controller`` (the kopf handlers and the reconcile; its
docstring maps the operator), ``act`` (each item's API calls), ``workqueue``, ``election``
(kopf runs while this process holds the Lease), ``api``
(the one module that calls the Kubernetes client), ``pull`` (`proctor results pull`).
Only this package imports kopf or the Kubernetes client (an import contract checks it).
"""
