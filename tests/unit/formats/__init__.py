"""proctor.formats: manifests and the Agentbeats files."""
