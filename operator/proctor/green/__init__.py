"""Proctor as an Agentbeats green agent (`proctor green serve`): it runs the embedded
engine, so it stands above `proctor.local` in the import layers."""
