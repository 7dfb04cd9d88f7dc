"""The arithmetic of the benchmarks under benchmarks/ (their runs are scripts, not tests)."""
