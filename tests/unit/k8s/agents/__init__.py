"""proctor.k8s.agents: the probes of an agent and its task slots over Evaluations."""
