"""proctor.k8s, by role as the package is: evaluation, agents, features, children, machinery.

Here, what spans the roles: the controller, `proctor render`, the CRDs, prompt variants."""
