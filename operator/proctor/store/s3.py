"""Transfers to and from an S3-compatible store, with boto3 (the shell of this package).

The endpoint comes from --s3-endpoint or AWS_ENDPOINT_URL (none: AWS itself), the keys
from the environment as boto3 reads them (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, a
profile, ...). Requests are path-style (`endpoint/bucket/key`), which every S3-compatible
server serves, unlike bucket-named hosts. Every failure is one line: a bad URL, no
credentials, no such bucket or nothing stored there is bad input (exit 2); a store that
does not answer, or refuses the keys, is NotRun (exit 3).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)

from proctor.core.exits import NotRun
from proctor.store.location import S3Location, StoreError

# Retries cover a blip; a store that is down fails in seconds, not boto3's minutes.
_CONFIG = Config(s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=60,
                 retries={"max_attempts": 3, "mode": "standard"})
_REFUSED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "403")
# Only a named bucket: a bare 404 (HEAD of an object removed meanwhile) is no bucket's.
_NO_BUCKET = ("NoSuchBucket",)
# Transfers at once: a run of 500 items is about 8,000 small files, which one at a time
# spend their time in round trips.
TRANSFERS = 8
NO_CREDENTIALS = ("no credentials for the object store: set AWS_ACCESS_KEY_ID and "
                  "AWS_SECRET_ACCESS_KEY (or an AWS profile)")


T = TypeVar("T")


class StoreUnreachable(NotRun):
    """The store does not answer, or refuses the request; the message says which."""


def client(endpoint: str | None = None) -> Any:
    """An S3 client for `endpoint` (or AWS_ENDPOINT_URL); a StoreError when there are no
    credentials, the AWS profile named is missing, or the endpoint is not a URL."""
    try:
        session = boto3.session.Session()
        if session.get_credentials() is None:  # known before anything runs
            raise StoreError(NO_CREDENTIALS)
        # S3-compatible servers take any region; boto3 has no default for one.
        return session.client("s3", endpoint_url=endpoint or None, config=_CONFIG,
                              region_name=session.region_name or "us-east-1")
    except (ValueError, BotoCoreError) as exc:
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"cannot use the object store (endpoint "
                         f"{endpoint or os.environ.get('AWS_ENDPOINT_URL') or 'AWS S3'}): "
                         f"{exc}") from None


def endpoint_of(s3: Any) -> str:
    return str(s3.meta.endpoint_url)


@contextlib.contextmanager
def translated(s3: Any, action: str, where: S3Location) -> Iterator[None]:
    """boto3's exceptions as the one line a person reads."""
    at = endpoint_of(s3)
    try:
        yield
    except (NoCredentialsError, PartialCredentialsError):
        raise StoreError(NO_CREDENTIALS) from None
    except ConnectionError as exc:  # refused, timed out, DNS: nothing answered
        raise StoreUnreachable(f"cannot reach the object store at {at} to {action} "
                               f"{where}: {exc}") from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        if code in _NO_BUCKET:
            raise StoreError(f"no bucket {where.bucket!r} at {at} (to {action} "
                             f"{where})") from None
        said = f"{code}: {error.get('Message', '')}".rstrip(": ")
        advice = " (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)" \
            if code in _REFUSED else ""
        raise StoreUnreachable(f"the object store at {at} refused to {action} {where}: "
                               f"{said}{advice}") from None
    except BotoCoreError as exc:
        raise StoreUnreachable(f"the object store at {at} failed to {action} {where}: "
                               f"{exc}") from None


def upload_folder(s3: Any, folder: Path, to: S3Location,
                  skip: Collection[str] = ()) -> int:
    """Put every file under `folder` at its relative path under `to` (names in `skip`
    left out, at any depth); the number of files."""
    files = sorted(p for p in folder.rglob("*")
                   if p.is_file() and not p.is_symlink() and p.name not in skip)

    def put(path: Path) -> None:
        s3.upload_file(str(path), to.bucket, to.key(path.relative_to(folder).as_posix()))

    with translated(s3, "upload to", to):
        each(put, files)
    return len(files)


def each(action: Callable[[T], None], things: Iterable[T]) -> None:
    """`action` on every one of `things`, TRANSFERS at once (boto3's clients are
    thread-safe); the first exception is raised once all have ended."""
    with ThreadPoolExecutor(TRANSFERS) as pool:
        for _ in pool.map(action, things):
            pass


def list_keys(s3: Any, where: S3Location) -> list[str]:
    """The keys under `where` (as a folder: `prefix/...`)."""
    keys: list[str] = []
    start = f"{where.prefix}/" if where.prefix else ""
    with translated(s3, "list", where):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=where.bucket,
                                                                   Prefix=start):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys


def download_folder(s3: Any, where: S3Location, out: Path) -> int:
    """Write every object under `where` to its relative path under `out`; the number of
    files. Everything is listed first, so a store that is down, or holds nothing there,
    leaves `out` as it was."""
    keys = list_keys(s3, where)
    if not keys:
        raise StoreError(f"nothing stored at {where}/ (at {endpoint_of(s3)})")
    paths = {key: where.relative(key) for key in keys}
    unsafe = sorted(k for k, rel in paths.items() if rel is None)
    if unsafe:  # a key such as a/../../x would write outside `out`
        raise StoreError(f"{where}: {len(unsafe)} keys cannot be a file under "
                         f"{out}/, e.g. {unsafe[0]!r}; nothing was written")

    def get(key: str) -> None:
        target = out / str(paths[key])
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(where.bucket, key, str(target))  # boto3 writes, then renames

    with translated(s3, "download", where):
        each(get, keys)
    return len(keys)


@functools.lru_cache(maxsize=8)
def _operator_client(endpoint: str) -> Any:
    """One client per endpoint for the operator's uploads: making one takes about 150 ms
    of CPU (boto3 loads its service model), which once per item would cost a
    100,000-item cluster 4 CPU-hours. (A failure to make one is not kept: the next
    upload tries again. The keys are read once: the chart's come from the Secret at
    the pod's start.)"""
    return client(endpoint or None)


def upload_item(endpoint: str, files: Mapping[str, bytes], to: S3Location) -> None:
    """Put each of an item's files (name -> bytes) under `to`, with a client of the
    operator's credentials for `endpoint` (empty: AWS_ENDPOINT_URL, else AWS S3)."""
    s3 = _operator_client(endpoint)

    def put(name: str) -> None:
        s3.put_object(Bucket=to.bucket, Key=to.key(name), Body=files[name])

    with translated(s3, "upload to", to):
        each(put, sorted(files))


def fetch_objects(s3: Any, bucket: str, keys: Collection[str]) -> dict[str, bytes]:
    """The bytes of each of `keys` in `bucket`, TRANSFERS at once."""
    found: dict[str, bytes] = {}

    def get(key: str) -> None:
        found[key] = s3.get_object(Bucket=bucket, Key=key)["Body"].read()

    with translated(s3, "download", S3Location(bucket=bucket)):
        each(get, sorted(keys))
    return found


def upload_checked(endpoint: str, files: Mapping[str, bytes], to: S3Location) -> None:
    """`upload_item`, then each file read back and compared: what a full ConfigMap is
    deleted on the word of (`k8s.backlog`). A file stored otherwise is StoreUnreachable,
    naming it."""
    upload_item(endpoint, files, to)
    s3 = _operator_client(endpoint)
    keys = {to.key(name): name for name in files}
    stored = fetch_objects(s3, to.bucket, keys)
    differ = differing(files, {keys[key]: data for key, data in stored.items()})
    if differ:
        raise StoreUnreachable(f"the object store at {endpoint_of(s3)} did not keep "
                               f"{to}/{differ[0]} as uploaded ({len(differ)} files differ)")


def differing(sent: Mapping[str, bytes], read: Mapping[str, bytes]) -> list[str]:
    """The names of the files read back otherwise than they were sent (or not at all)."""
    return sorted(name for name, data in sent.items() if read.get(name) != data)
