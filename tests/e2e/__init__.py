"""Whole-program tests: the README, the docs, the demo, the scripts, real rows end to end."""
