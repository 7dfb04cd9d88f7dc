"""Results in an S3-compatible object store: where they go (`location`, pure), the small
record of each item that points at them (`record`, pure), and the transfers (`s3`).

A run's folder is stored as it is on disk, one object per file under the run's prefix,
so that pulling it back gives the folder `proctor run` wrote, byte for byte.
"""
