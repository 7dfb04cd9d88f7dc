"""Tests on the real Kubernetes of scripts/cluster.sh (marker `cluster`), and their checks.

Skipped where no cluster can start (a failure with PROCTOR_REQUIRE_CLUSTER=1)."""
