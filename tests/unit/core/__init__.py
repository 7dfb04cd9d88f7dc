"""proctor.core: grading, metrics, patches, integrity and the spec models."""
