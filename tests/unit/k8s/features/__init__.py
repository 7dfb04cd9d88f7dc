"""proctor.k8s.features: the operator's optional features, each on its own."""
