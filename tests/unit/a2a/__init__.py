"""proctor.a2a: the A2A client, the message to the agent, and what is read back from its reply."""
