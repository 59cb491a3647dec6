"""Where the study lives: :class:`Storage` (an Optuna URL or a journal file, opened by
each worker for itself) and the default storage and study name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from replay.tune.context import TuneContext, TuneError
from replay.tune.sqlite_lock import begin_immediate, engine_kwargs
from ttlctl.filekind import binary_kind, not_json_text
from ttlctl.jsonio import check_writable


@dataclass(frozen=True, slots=True)
class Storage:
    """An Optuna storage every worker opens for itself: a URL or a journal-file path."""

    target: str
    #: seconds between a running trial's heartbeats (RDB storages)
    heartbeat_s: int = 60
    #: a trial whose heartbeat is older than this is failed (None: 2 × heartbeat)
    grace_s: int | None = None
    #: times a trial failed that way is retried
    max_retry: int = 2

    @property
    def is_url(self) -> bool:
        return "://" in self.target

    @property
    def file(self) -> Path | None:
        """The local file the study is written to: the journal file, or a SQLite URL's
        database (None: a server's database, or SQLite in memory)."""
        if not self.is_url:
            return Path(self.target)
        if self.target.startswith("sqlite"):
            database = self.target.split(":///", 1)[-1].split("?", 1)[0]
            if database and database != ":memory:" and ":///" in self.target:
                return Path(database)
        return None

    def open(self) -> optuna.storages.BaseStorage:
        if not self.is_url:
            return self._journal()
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        sqlite = self.target.startswith("sqlite")
        if sqlite:  # processes that share the file take turns (replay/tune/sqlite_lock.py)
            kwargs = engine_kwargs()
            database = self.target.split(":///", 1)[-1].split("?", 1)[0]
            if database and database != ":memory:":
                check_writable(Path(database))  # one line naming it, not sqlite3's words
                refuse_not_sqlite(Path(database), self.shown())
                Path(database).parent.mkdir(parents=True, exist_ok=True)
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.8
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    self.target,
                    engine_kwargs=kwargs,
                    heartbeat_interval=self.heartbeat_s,
                    grace_period=self.grace_s,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=self.max_retry
                    ),
                )
        except ImportError as exc:
            raise TuneError(f"storage {self.shown()}: missing driver ({exc})") from None
        except Exception as exc:  # sqlalchemy's errors: bad URL, refused, auth, ...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TuneError(f"storage {self.shown()}: cannot open ({first})") from None
        if sqlite:
            begin_immediate(storage.engine)
        return storage

    def _journal(self) -> optuna.storages.BaseStorage:
        path = Path(self.target)
        if path.is_dir():
            raise TuneError(f"{path}: is a directory, not a journal file")
        if path.is_file():
            refuse_not_journal(path)
        check_writable(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))

    def shown(self) -> str:
        """The target with any password hidden."""
        if not self.is_url:
            return self.target
        try:
            return make_url(self.target).render_as_string(hide_password=True)
        except Exception:
            return self.target.split("://", 1)[0] + "://…"

    def commands(self, study: str) -> dict[str, str]:
        """The commands Optuna users know, for this storage and study."""
        if self.is_url:
            shown = self.shown()
            return {
                "dashboard": f"optuna-dashboard {shown}",
                "best_trial": f"optuna best-trial --study-name {study} --storage {shown} -f json",
            }
        path = Path(self.target).resolve()
        return {
            "dashboard": f"optuna-dashboard {path}",
            "best_trial": f"optuna best-trial --study-name {study} --storage {path} "
            "--storage-class JournalFileBackend -f json",
        }


#: what --storage takes, said where a file given is none of it
_TAKES = "--storage takes a journal file tune wrote, a new path, or a URL"
#: the most of a journal's first line read to tell it is one (a record is far shorter)
_FIRST_LINE_BYTES = 1 << 20


def refuse_not_journal(path: Path) -> None:
    """Refuse an existing file that is not an Optuna journal (Optuna would fail on it
    with a traceback, or append to someone's file): a SQLite database (named as the URL
    to give), another binary file, or text whose first line is no journal record. An
    empty file is a new journal. Nothing is written."""
    with path.open("rb") as fh:
        first = fh.readline(_FIRST_LINE_BYTES)
    if first.startswith(b"SQLite format 3\x00"):
        raise TuneError(
            f"{path}: is a SQLite database, not a journal file; "
            f"pass it as a URL: sqlite:///{path.resolve()}"
        )
    problem = not_json_text(first, "an Optuna journal file")
    if problem is not None:
        raise TuneError(f"{path}: {problem}; {_TAKES}")
    if first and not _is_journal_record(first):
        raise TuneError(
            f"{path}: not an Optuna journal file (line 1 is no journal record); {_TAKES}"
        )


def _is_journal_record(line: bytes) -> bool:
    """Whether ``line`` is one of Optuna's journal records: a JSON object with an op_code."""
    try:
        record = json.loads(line)
    except ValueError:  # not JSON, or not UTF-8
        return False
    return isinstance(record, dict) and "op_code" in record


def refuse_not_sqlite(database: Path, shown: str) -> None:
    """Refuse a SQLite URL's existing file that is no SQLite database (an empty file is a
    new one): sqlite3 would say 'file is not a database' and name nothing."""
    if not database.is_file():
        return
    with database.open("rb") as fh:
        head = fh.read(16)
    if head and head != b"SQLite format 3\x00":
        kind = binary_kind(head)
        raise TuneError(
            f"{database}: {kind + ', ' if kind else ''}not a SQLite database; --storage "
            f"{shown} needs one, or a path where none is yet"
        )


#: what SQLite and Optuna's journal file write beside the study's file
_SIDECARS = ("-journal", "-wal", "-shm", ".lock")
#: the trial's user attribute naming the tune command that ran it (:func:`this_run`)
RUN_ATTR = "ttlctl.run"
#: a study with a trial in one of these (anyone's) is used: they count toward ``--trials``
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def this_run() -> str:
    """This tune command, as its trials name it: host and process (its worker processes
    are given their parent's, see :class:`~replay.tune.workers.WorkerJob`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def removed_if_unused(storage: Storage) -> Iterator[None]:
    """Run the block; if it fails, remove the study's file when the block made it (it
    did not exist before) and nobody else uses it (:func:`_in_use`), with what SQLite
    wrote beside it and the folders made for it, when empty. A file that existed (a
    user's storage, a resumed study) and a server's database are never removed.

    Two tune commands started together with one new ``--storage`` file both see it
    missing: the one that fails first keeps it when the other has a trial in it (running,
    failed or finished). What is left: the other command's first moments, after it
    opened the file and before its first trial started (it creates the study and enqueues
    the default trials, which name no command), when the file can still be removed
    under it; its next write then makes a new, empty file."""
    path = storage.file
    if path is None or path.exists() or path.is_symlink():
        yield
        return
    run = this_run()
    folders = [p for p in path.absolute().parents if not p.exists()]  # deepest first
    try:
        yield
    except BaseException:
        if path.is_file() and not _in_use(storage, run):
            for extra in (path, *(path.with_name(path.name + s) for s in _SIDECARS)):
                extra.unlink(missing_ok=True)
            for folder in folders:
                with contextlib.suppress(OSError):  # not empty: something else is there
                    folder.rmdir()
        raise


def _in_use(storage: Storage, run: str) -> bool:
    """Whether a study in ``storage`` has a finished trial (complete or pruned, anyone's)
    or a trial another tune command than ``run`` started (in any state); enqueued trials
    that never started (waiting, naming no command) are nobody's. True when it cannot be
    read: then it is kept."""
    try:
        opened = storage.open()
        return any(
            trial.state in _FINISHED or not _nobody_elses(trial, run)
            for name in optuna.get_all_study_names(opened)
            for trial in optuna.load_study(study_name=name, storage=opened).get_trials(
                deepcopy=False
            )
        )
    except Exception:
        return True


def _nobody_elses(trial: optuna.trial.FrozenTrial, run: str) -> bool:
    """``run``'s own trial, or one enqueued that no command has started."""
    owner = trial.user_attrs.get(RUN_ATTR)
    if owner is None:
        return trial.state == TrialState.WAITING
    return bool(owner == run)


def default_storage(output: Path) -> str:
    """A SQLite file next to the bundle (absolute, so the printed commands work anywhere)."""
    return f"sqlite:///{output.resolve().parent / (output.stem + '.optuna.db')}"


def default_study_name(ctx: TuneContext, inputs: Mapping[str, str]) -> str:
    """Deterministic from the inputs' hashes and the objective's settings."""
    return "ttlctl-tune-" + digest({"inputs": dict(inputs), "objective": ctx.fingerprint()})[:16]


def digest(data: Any) -> str:
    """SHA-256 of ``data``'s canonical JSON (keys sorted): names and compares settings."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def differing(stored: Any, now: Any, prefix: str = "") -> list[str]:
    """The settings in which two fingerprints differ, dotted (``fleet.worker_urls``,
    ``inputs.trace``); a value that is no object in both is one setting."""
    if not (isinstance(stored, Mapping) and isinstance(now, Mapping)):
        return [] if digest(stored) == digest(now) else [prefix.rstrip(".") or "settings"]
    return [
        name
        for key in sorted(set(stored) | set(now))
        for name in differing(stored.get(key), now.get(key), f"{prefix}{key}.")
    ]
