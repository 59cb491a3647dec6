"""What ``ttlctl serve`` decides before it hands over to vLLM: the command line, the bundle
check, the Prometheus folder and the line ``--print-command`` shows.

The command is vLLM's OpenAI module with the TTL scheduler (:mod:`ttlctl.server.command`);
the options serve sets itself are refused among the forwarded vLLM arguments and in the
file their ``--config`` names (each read as vLLM reads it: abbreviations included). A bundle
that is missing or damaged is refused (a :class:`ServeError`) unless stock vLLM is
allowed, then it is a warning. The scheduler's ``ttlctl:pins_*`` counters reach
``/metrics`` through ``PROMETHEUS_MULTIPROC_DIR``: the folder given, the environment's,
or a temporary one removed when the server exits.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from ttlctl.bundle import read
from ttlctl.bundle_doc import BundleError
from ttlctl.errors import TtlctlError, os_reason
from ttlctl.filekind import binary_kind, document_kind, unmarked, wide_text
from ttlctl.pathname import TOO_LONG, too_long
from ttlctl.server import command, vllm_config
from ttlctl.server.command import SCHEDULER_CLS

#: options ``ttlctl serve`` sets itself; in the forwarded arguments they are refused
OWN_FLAGS = ("--model", "--scheduler-cls")
#: options ``ttlctl serve`` sets unless the forwarded arguments do
DEFAULTED_FLAGS = ("--host", "--port")
#: the ``PROMETHEUS_MULTIPROC_DIR`` ``--print-command`` shows when none is asked for
PRINTED_METRICS_DIR = Path(tempfile.gettempdir()) / "ttlctl-prom"
#: what every engine log line's ``schema`` starts with (ttlctl.engine.enginelog.SCHEMA's
#: name, any version; not imported: the engine is a layer above)
ENGINE_LOG_SCHEMA = "ttlctl.engine-log/"
#: the leading bytes of an existing ``--log`` judged (an engine log's lines are under 1 KB)
LOG_SNIFF_BYTES = 65_536
#: a file up to this size that is not JSON lines is read whole to name what it is (a fit)
LOG_DOCUMENT_BYTES = 16 * 1024 * 1024
#: the environment ``--print-command`` shows, in this order (when set)
SHOWN_ENV = (
    "TTLCTL_BUNDLE",
    "TTLCTL_LOG",
    "TTLCTL_REPLICA",
    "VLLM_SERVER_DEV_MODE",
    "PROMETHEUS_MULTIPROC_DIR",
)


class ServeError(TtlctlError):
    """A server ``ttlctl serve`` will not start as asked: one line."""


def build_command(
    model: str,
    *,
    host: str | None = None,
    port: int | None = None,
    extra: Sequence[str] = (),
    python: str | None = None,
    scheduler_cls: str | None = SCHEDULER_CLS,
) -> list[str]:
    """The server's command line: ours first, then ``extra`` verbatim. A ``--host`` or
    ``--port`` among ``extra`` (or in the file its ``--config`` names) replaces ours (not
    written twice; ours would win over the file's)."""
    command.refuse(
        extra, OWN_FLAGS, "ttlctl serve (MODEL and the TTL scheduler)", "the vLLM arguments"
    )
    given = vllm_config.read(extra, DEFAULTED_FLAGS)
    return command.server_command(
        command.base_command(model, python=python),
        scheduler_cls=scheduler_cls,
        host=None if given.sets("--host") else host,
        port=None if given.sets("--port") else port,
        extra=extra,
    )


def check_bundle(bundle: Path | None, allow_stock: bool) -> str | None:
    """None when the bundle is sound; else a warning (with ``allow_stock``) or a
    :class:`ServeError`."""
    if bundle is None:
        problem = "no --bundle given"
    else:
        try:
            read(bundle, router_settings=False)  # what the engine will serve
            return None
        except BundleError as exc:
            problem = f"bundle refused: {exc}"
    if not allow_stock:
        raise ServeError(f"{problem} (pass --allow-stock to serve as stock vLLM anyway)")
    return f"{problem}: serving as stock vLLM (no pins), as --allow-stock asks"


def check_model(model: str) -> None:
    """:class:`ServeError` for an empty MODEL (or only spaces): vLLM would be started with
    ``--model ''`` and fail after its start-up, in the server's output, and
    ``--print-command`` would print that line as if it could run."""
    if not model.strip():
        raise ServeError(f"MODEL {model!r}: give the model's name or folder")


def check_replica(replica: str | None) -> None:
    """:class:`ServeError` for an empty ``--replica`` (or only spaces): the engine reads it
    as no name (``TTLCTL_REPLICA`` stripped), so the server would serve unnamed while the
    command line says it was named."""
    if replica is not None and not replica.strip():
        raise ServeError(
            f"--replica {replica!r}: give this server's name in the engine log "
            "(leave the option out for none)"
        )


def check_log(log: Path | None, bundle: Path | None, *, starting: bool) -> None:
    """:class:`ServeError` for a ``--log`` the engine cannot append its lines to: the
    bundle (each line would damage it), a folder, another kind of file
    (:func:`not_an_engine_log`: a trace, a fit); and, when ``starting`` the server, a
    log whose folder does not exist or that cannot be appended to (the plugin would only
    warn once, in the server's output, and serve without a log). Appending is what is
    checked: a log made beforehand in a folder the server cannot write to is taken."""
    if log is None:
        return
    if str(log) == "-":  # no stdout here: the engine would append to a file named '-'
        raise ServeError(
            "--log -: the engine log is a file the engine appends to, not standard output; "
            "give a file's path"
        )
    if too_long(log):  # before pathlib's checks, which raise on it
        raise ServeError(f"--log {log}: cannot write here ({TOO_LONG})")
    if bundle is not None and log.resolve() == bundle.resolve():
        raise ServeError(f"--log {log}: is the bundle; the engine log needs a file of its own")
    if log.is_dir():
        raise ServeError(f"--log {log}: is a folder, not a file to append to")
    other = not_an_engine_log(log)
    if other is not None:
        raise ServeError(
            f"--log {log}: {other}; the engine appends a line per request to it, which would "
            "damage it (give the engine log's own path)"
        )
    if not starting:
        return
    if not log.parent.is_dir():
        raise ServeError(f"--log {log}: no folder {log.parent} to write it in")
    if not os.access(log if log.exists() else log.parent, os.W_OK):
        where = "the file" if log.exists() else f"its folder {log.parent}"
        raise ServeError(f"--log {log}: cannot be appended to ({where} is not writable)")


def not_an_engine_log(log: Path) -> str | None:
    """Why an existing, non-empty ``log`` is not an engine log the plugin can append to
    (a Parquet trace, a fit, other text), judged by its first line; None when it is one,
    empty, absent or unreadable (the append check says why). A first line that does not
    end in the bytes judged is not judged."""
    try:
        with log.open("rb") as file:
            head = file.read(LOG_SNIFF_BYTES)
    except OSError:
        return None
    kind = binary_kind(head)
    if kind is not None:
        return f"{kind}, not an engine log"
    wide = wide_text(head)  # json would read it: the engine writes UTF-8
    if wide is not None:
        return f"not an engine log as the engine writes it (UTF-8) but {wide}"
    if not head.strip():
        return None
    text = unmarked(head).lstrip()
    first, newline, _ = text.partition(b"\n")
    if not newline and len(head) == LOG_SNIFF_BYTES:
        return None
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    if isinstance(record, dict) and str(record.get("schema", "")).startswith(ENGINE_LOG_SCHEMA):
        return None
    kind = document_kind(record) or _document_kind(log)
    if kind is not None:
        return f"{kind}, not an engine log"
    return f'not an engine log (its first line has no "schema": "{ENGINE_LOG_SCHEMA}1")'


def _document_kind(path: Path) -> str | None:
    """Which of ttlctl's JSON documents a small file holds whole (None: none, or large)."""
    try:
        if path.stat().st_size > LOG_DOCUMENT_BYTES:
            return None
        return document_kind(json.loads(unmarked(path.read_bytes())))
    except (OSError, ValueError):
        return None


def require_vllm() -> None:
    """:class:`ServeError` when vLLM is not installed here."""
    if importlib.util.find_spec("vllm") is None:
        raise ServeError(
            "vLLM is not installed: install the engine extra "
            "(pip install 'ttlctl[engine-cpu]' on CPU, 'ttlctl[engine]' on a GPU)"
        )


def chosen_metrics_dir(given: Path | None, environ: Mapping[str, str]) -> Path | None:
    """The ``PROMETHEUS_MULTIPROC_DIR`` asked for: ``given``, else the environment's."""
    inherited = environ.get("PROMETHEUS_MULTIPROC_DIR")
    return given or (Path(inherited) if inherited else None)


def check_metrics_dir(given: Path | None, environ: Mapping[str, str]) -> None:
    """:class:`ServeError` for a ``PROMETHEUS_MULTIPROC_DIR`` a start could not make: the
    path, or a folder above it, is a file (the bundle, a log). Checked with
    ``--print-command`` too, as ``--log`` is; a folder that does not exist yet is taken (a
    start makes it; the printed command may be meant for another machine)."""
    if given is not None and str(given) == "-":  # a folder named '-', not stdout
        raise ServeError("--metrics-dir -: this is a folder, not standard output; give its path")
    chosen = chosen_metrics_dir(given, environ)
    if chosen is None:
        return
    if too_long(chosen):  # before pathlib's checks, which raise on it
        raise ServeError(f"{_metrics_origin(given)} {chosen}: cannot write here ({TOO_LONG})")
    for where in (chosen, *chosen.parents):
        if where.exists():
            if not where.is_dir():
                why = "not a folder" if where == chosen else f"{where} is not a folder"
                raise ServeError(
                    f"{_metrics_origin(given)} {chosen}: cannot make the folder ({why})"
                )
            return


def _metrics_origin(given: Path | None) -> str:
    """Where the ``PROMETHEUS_MULTIPROC_DIR`` came from, as an error names it."""
    return "--metrics-dir" if given is not None else "PROMETHEUS_MULTIPROC_DIR"


def printed_metrics_dir(given: Path | None, environ: Mapping[str, str]) -> tuple[Path, str | None]:
    """The ``PROMETHEUS_MULTIPROC_DIR`` ``--print-command`` shows (a command started without
    it loses the ``ttlctl:*`` series): the one asked for, else :data:`PRINTED_METRICS_DIR`,
    with a note that the folder must be made empty before the server starts (``ttlctl
    serve`` makes its own)."""
    chosen = chosen_metrics_dir(given, environ)
    if chosen is not None:
        return chosen, None
    return PRINTED_METRICS_DIR, (
        f"PROMETHEUS_MULTIPROC_DIR={PRINTED_METRICS_DIR}: make it, empty, before starting "
        "the server (without it the ttlctl:* series never reach /metrics); --metrics-dir "
        "names another"
    )


@contextmanager
def metrics_dir(given: Path | None, environ: Mapping[str, str]) -> Iterator[Path]:
    """The ``PROMETHEUS_MULTIPROC_DIR`` for the server, made: ``given``, else the
    environment's, else a temporary folder removed when the block ends."""
    chosen = chosen_metrics_dir(given, environ)
    if chosen is not None:
        try:
            chosen.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            why = "not a folder" if isinstance(exc, FileExistsError) else os_reason(exc)
            raise ServeError(
                f"{_metrics_origin(given)} {chosen}: cannot make the folder ({why})"
            ) from None
        yield chosen
        return
    own = Path(tempfile.mkdtemp(prefix="ttlctl-prom-"))
    try:
        yield own
    finally:
        shutil.rmtree(own, ignore_errors=True)


def stale_metrics(folder: Path) -> str | None:
    """A warning when the ``PROMETHEUS_MULTIPROC_DIR`` the server is about to use already
    holds an earlier server's files: prometheus_client reads every file there, so a dead
    process's gauges (``ttlctl:pinned_blocks`` …) and counts stay on ``/metrics``."""
    try:
        files = sum(1 for _ in folder.iterdir())
    except OSError:
        return None
    if not files:
        return None
    return (
        f"PROMETHEUS_MULTIPROC_DIR {folder} is not empty ({files} file(s) of an earlier "
        "server): their gauges and counts are added to this server's on /metrics; empty it "
        "before starting (vLLM says the same)"
    )


def shown_command(cmd: Sequence[str], env: Mapping[str, str]) -> str:
    """``--print-command``'s line: ttlctl's environment assignments, then the command."""
    shown = {k: env[k] for k in SHOWN_ENV if k in env}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items())
    return (assignments + " " if assignments else "") + shlex.join(cmd)
