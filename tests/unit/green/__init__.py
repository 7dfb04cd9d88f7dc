"""proctor.green: Proctor as an Agentbeats green agent."""
