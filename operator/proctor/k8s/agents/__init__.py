"""The agents under test: their probes and status, and the task slots their Evaluations share."""
