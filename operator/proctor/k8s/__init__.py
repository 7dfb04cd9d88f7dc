"""Proctor on Kubernetes: the operator, by role, each layer importing only those below it.

* ``controller`` (the kopf handlers; its docstring maps the operator), ``render`` (`proctor
  render`: what the operator would create) and ``pull`` (`proctor results pull`);
* ``evaluation``: an Evaluation's reconcile: observe and decide (``reconcile``, pure), its
  status, act (``act``: each item's API calls), the pass (``passes``);
* ``agents``: the agents under test: their probes, status and task slots;
* ``features``: the optional features, none importing another: Kueue's admission check,
  the object store's backlog, image pre-pull, leader election, the network policy, CRD
  apply, LLM prompt variants;
* ``children``: the objects an Evaluation or agent owns, as plain dicts (pure): each item's
  Job, the agents' Deployment and Service, kept results, what a Job's pod says;
* ``machinery``: what any controller needs: the API client (the one module that calls
  it), typed objects, kopf's indexes, the work queue, expectations, names, conditions.

Only this package imports kopf or the Kubernetes client (an import contract checks it; a
second holds the layers above).
"""
