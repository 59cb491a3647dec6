"""ttlctl: trace-driven trainer, tuner and engine plugin for KV-cache TTL policies."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ttlctl")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"
