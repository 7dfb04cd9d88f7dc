"""proctor.cli: the commands as a user runs them, bad input included."""
