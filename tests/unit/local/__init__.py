"""proctor.local: the embedded engine, `proctor run`."""
