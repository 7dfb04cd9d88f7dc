"""proctor.agents: the reference agents and the llm agent, served for real."""
