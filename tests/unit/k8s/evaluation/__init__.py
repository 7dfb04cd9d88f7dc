"""proctor.k8s.evaluation: the reconcile decision, the status, figures and metrics."""
