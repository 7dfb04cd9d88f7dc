"""Proctor: evaluate AI coding agents on SWE-bench Verified, on Kubernetes or one machine."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("proctor")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"
