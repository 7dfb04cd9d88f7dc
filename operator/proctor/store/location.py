"""Where results go in an object store: `s3://bucket/prefix` and the keys under it (pure)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

from proctor.core.exits import BadInput

# S3's bucket naming rules, the part a typo breaks: 3-63 lower-case letters, digits,
# dots and hyphens, starting and ending with a letter or digit.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
ITEMS = "items"
"""The folder of the items' work folders, in a results folder and under a run's prefix."""


class StoreError(BadInput):
    """The store cannot be used as given (a bad URL, no credentials, no such bucket or
    run); the message names the problem."""


class S3Location(BaseModel):
    """A bucket and a key prefix (no leading or trailing slash; empty for the bucket's top)."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    """The bucket's name."""
    prefix: str = ""
    """The keys' common start, without a trailing slash."""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def child(self, name: str) -> S3Location:
        """The location of `name` under this one."""
        return S3Location(bucket=self.bucket, prefix=key_under(self.prefix, name))

    def key(self, relative: str) -> str:
        """The key of a file at `relative` (a POSIX path) under this location."""
        return key_under(self.prefix, relative)

    def relative(self, key: str) -> str | None:
        """The path under this location of `key`, or None for a key outside it or one
        that would leave the folder it is written into (`..`, absolute)."""
        start = f"{self.prefix}/" if self.prefix else ""
        if not key.startswith(start) or key.endswith("/"):
            return None
        rest = key[len(start):]
        parts = PurePosixPath(rest).parts
        if not parts or rest.startswith("/") or any(p in ("..", ".") for p in parts):
            return None
        return rest


def key_under(prefix: str, relative: str) -> str:
    return f"{prefix}/{relative}" if prefix else relative


def parse_s3_url(text: str) -> S3Location:
    """`s3://bucket/prefix` (the prefix optional); a StoreError naming what is wrong."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme != "s3":
        raise StoreError(f"{text!r} is not an s3:// URL (expected s3://bucket/prefix)")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise StoreError(f"{text!r}: {bucket!r} is not a bucket name (3-63 lower-case "
                         f"letters, digits, dots and hyphens)")
    prefix = prefix.strip("/")
    if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
        raise StoreError(f"{text!r}: the prefix {prefix!r} has an empty, . or .. part")
    return S3Location(bucket=bucket, prefix=prefix)


def item_location(run: S3Location, instance_id: str, variant_id: str,
                  repeat: int) -> S3Location:
    """Where one item's artefacts go under a run's location: the same path as its work
    folder in the results folder (`ResultsFolder.work_dir`)."""
    return run.child(f"{ITEMS}/{instance_id}/{variant_id}/{repeat}")
