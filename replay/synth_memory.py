"""The memory ``ttlctl synth`` takes to build a trace, so that a ``--programs`` too large for
the machine is refused up front, in one line naming the flag, instead of the process being
killed by the kernel for memory with no message.

The estimate: the calls the trace will hold (the programs × the workload's mean turns, the
mean :func:`replay.synth_workloads.turns_distribution` holds exactly, known before any draw)
× the peak bytes one call takes, measured (:data:`PEAK_BYTES_PER_CALL`). The memory to compare
it with is the caller's to give (the command line reads the machine's once): this module
reads nothing, so a test gives it any figure.
"""

from __future__ import annotations

from replay.synth_workloads import spec_of
from ttlctl.errors import ConfigError

#: Peak memory per call of drawing a trace (:func:`replay.synth.synth`) and writing it
#: (:func:`ttlctl.trace.io.write`), ``ttlctl synth`` without ``--max-context``, in bytes.
#: Measured as the growth of the process's peak resident set
#: (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) over the draw and the write of one trace,
#: after a warm-up draw of 100 programs (imports, polars' thread pool): swe-bench, 1,000,000
#: programs (10.9 M calls) 152 bytes a call, 3,000,000 (32.7 M calls) 153; bfcl, 1,000,000
#: (6.3 M calls) 162 (polars 2.1, numpy 2.3, x86-64 Linux). Rounded up. The frame itself
#: holds about 70 bytes a call; numpy's per-call arrays, the program ids and the Parquet
#: writer's buffers take the rest at the peak.
PEAK_BYTES_PER_CALL = 170
#: The same with ``--max-context`` (:func:`replay.fit_context.fit_context` builds the scaled
#: trace beside the drawn one), measured alike: swe-bench, 1,000,000 programs, 236 bytes a
#: call; bfcl, 1,000,000, 241. Rounded up.
SCALED_PEAK_BYTES_PER_CALL = 250

GIB = 1 << 30


def peak_bytes(workload: str, programs: int, *, scaled: bool = False) -> int:
    """About the most memory building ``programs`` programs of ``workload`` takes (and
    writing them; ``scaled``: with ``--max-context``), in bytes."""
    per_call = SCALED_PEAK_BYTES_PER_CALL if scaled else PEAK_BYTES_PER_CALL
    return round(programs * spec_of(workload).turns_mean * per_call)


def check_fits(workload: str, programs: int, available_bytes: int, *, scaled: bool = False) -> None:
    """Refuse (:class:`~ttlctl.errors.ConfigError` naming ``--programs``) a trace whose
    building would take more than ``available_bytes`` (the memory the machine has free):
    with how many calls and how much memory it would take, and how many programs fit.
    ``available_bytes`` 0 or less (not known) checks nothing; an unknown workload is refused
    as :func:`replay.synth.synth` refuses it."""
    need = peak_bytes(workload, programs, scaled=scaled)
    if available_bytes <= 0 or need <= available_bytes:
        return
    per_program = need / programs
    calls = round(programs * spec_of(workload).turns_mean)
    raise ConfigError(
        f"--programs {programs:,}: a {workload} trace of about {calls:,} calls takes about "
        f"{need / GIB:,.1f} GiB of memory to build, more than the {available_bytes / GIB:,.1f} "
        f"GiB available; at most about {int(available_bytes // per_program):,} programs fit"
    )
