"""proctor.store: results in an S3-compatible object store."""
