"""proctor.runner: the steps of a work item (solve, test log, grade) and its transcript."""
