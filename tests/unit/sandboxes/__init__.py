"""proctor.sandboxes: the process and Docker sandboxes, checkouts, the test step and task images."""
