"""proctor.datasets: SWE-bench rows, by name or from files, and the bundled demo dataset."""
