"""proctor.analysis: `proctor analyze`'s figures, tables and report."""
