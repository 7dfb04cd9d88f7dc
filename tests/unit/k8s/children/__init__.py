"""proctor.k8s.children: the objects an Evaluation owns, and how their pods read."""
