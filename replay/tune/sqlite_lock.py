"""A SQLite study that several processes share: every transaction begins with
``BEGIN IMMEDIATE``, so the one that reads is the one that writes.

Why: Optuna (5.1, ``Study._pop_waiting_trial_id``) takes an enqueued (waiting) trial by
reading it ``SELECT … FOR UPDATE`` and marking it running only if it is still waiting.
SQLite has no ``FOR UPDATE``, and Python's sqlite3 begins a transaction only at the first
write, so two processes could both read the trial waiting and both run it; the second to
finish then failed ("Cannot tell a COMPLETE trial") and took its worker down.

How: SQLAlchemy's recipe for serializable SQLite (its pysqlite dialect, "Serializable
isolation / Savepoints / Transactional DDL"): sqlite3 begins nothing
(``isolation_level=None``) and SQLAlchemy begins every transaction itself, here with
``BEGIN IMMEDIATE``, which takes the database's write lock at once. A second process then
waits for the first to commit (up to :data:`BUSY_TIMEOUT_S`) and reads what it wrote.
Reads wait too: a study's transactions are a few statements each, so workers take turns
in milliseconds.

What is left: Optuna makes the engine and creates its tables in ``RDBStorage``'s
constructor, before :func:`begin_immediate` can be attached; those statements are each
committed on their own, as sqlite3 ran them before. A tune command makes its study (and
the file) before it starts its workers, so they only read there. An ``RDBStorage`` that is
pickled and unpickled makes a new engine without the lock: tune's workers are given the
:class:`~replay.tune.storage.Storage` and open it themselves.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

#: seconds a process waits for another's transaction before failing ("database is locked")
BUSY_TIMEOUT_S = 60


def engine_kwargs() -> dict[str, Any]:
    """``RDBStorage``'s ``engine_kwargs`` for a SQLite URL: sqlite3 begins no transaction
    (:func:`begin_immediate` does) and waits for a busy database."""
    return {"connect_args": {"timeout": BUSY_TIMEOUT_S, "isolation_level": None}}


def begin_immediate(engine: Engine) -> None:
    """Begin each of ``engine``'s transactions with ``BEGIN IMMEDIATE`` (its connections
    made with :func:`engine_kwargs`)."""
    event.listen(engine, "begin", _begin_immediate)


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")
