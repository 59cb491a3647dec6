"""Replicas on GPUs of their own (``--gpus-per-replica K``): which GPUs, and how a server
is held to them.

A simulated replica is one engine on a device of its own, as in a production fleet: one
vLLM server per GPU (or per K GPUs, with tensor or pipeline parallelism). Started without
a placement, every vLLM server on a machine takes the first visible GPU, so the second
replica finds its memory already claimed. :func:`gpu_sets` gives replica ``i`` the
``i``-th run of ``K`` GPUs among those this process may use (``CUDA_VISIBLE_DEVICES`` when
it is set, else every GPU ``nvidia-smi -L`` lists), and :func:`placed_environment` starts
the server with ``CUDA_VISIBLE_DEVICES`` set to its own, so its workers see those alone.
:func:`check_parallel` refuses vLLM arguments that would use fewer or more GPUs per server
than each is given, on the command line or in its ``--config`` file
(``--tensor-parallel-size`` × ``--pipeline-parallel-size`` ×
``--prefill-context-parallel-size``, vLLM 0.32's ``ParallelConfig.world_size``, must be
``K``), and data parallelism (``--data-parallel-size`` D runs D engines in one server, each
with a KV cache of its own, which vLLM's API server balances: a simulated replica is one
engine). :func:`check_whole` refuses a GPU in MIG mode that a replica would be given
whole (by index or ``GPU-…`` UUID): CUDA sees no usable device there, MIG devices or not;
its MIG devices (``MIG-…`` UUIDs) are given instead. NVIDIA GPUs only (CUDA's variable and
tool).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from itertools import takewhile

from ttlctl.nouns import counted
from ttlctl.server import vllm_config
from ttlctl.server.command import CommandError
from ttlctl.server.vllm_options import option_set, shown

#: CUDA's list of the GPUs a process may use (indices or UUIDs)
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
#: the driver's tool that lists the GPUs
NVIDIA_SMI = "nvidia-smi"
#: nvidia-smi's query of each GPU's MIG mode; it prints one line per GPU, such as
#: ``1, GPU-2c3d…, Enabled``: ``Enabled`` or ``Disabled``, ``[N/A]`` where the GPU has no
#: MIG support
MIG_QUERY = ("--query-gpu=index,uuid,mig.mode.current", "--format=csv,noheader")
#: a GPU's UUID on its ``nvidia-smi -L`` line
_UUID = re.compile(r"\(UUID: (GPU-[^)\s]+)\)")
#: vLLM's options whose product is the GPUs one engine uses (its world size), with their
#: short forms
PARALLEL_FLAGS = (
    ("--tensor-parallel-size", "-tp"),
    ("--pipeline-parallel-size", "-pp"),
    ("--prefill-context-parallel-size", "-pcp"),
)
#: vLLM's data parallelism: that many engines in one server
DATA_PARALLEL_FLAGS = ("--data-parallel-size", "-dp")


def visible_gpus(env: Mapping[str, str]) -> tuple[str, ...]:
    """The GPUs a process started with ``env`` may use, as ``CUDA_VISIBLE_DEVICES``
    names them: that variable's list when it is set, else one index per GPU that
    ``nvidia-smi -L`` lists. :class:`CommandError` when neither says anything. Whether
    each may be used whole is :func:`check_whole`'s question."""
    given = env.get(VISIBLE_ENV)
    if given is not None:
        entries = [g.strip() for g in given.split(",") if g.strip()]
        # CUDA hides every GPU from the first invalid entry on (``-1``: hide them all)
        return tuple(takewhile(lambda g: not g.startswith("-"), entries))
    smi = shutil.which(NVIDIA_SMI)
    if smi is None:
        raise CommandError(
            f"--gpus-per-replica: no GPU found ({VISIBLE_ENV} is unset and {NVIDIA_SMI} "
            "is not on PATH)"
        )
    try:
        listed = _smi(smi, "-L")
    except (OSError, subprocess.SubprocessError) as exc:
        raise CommandError(f"--gpus-per-replica: {NVIDIA_SMI} -L failed: {exc}") from None
    return tuple(index for index, _, _ in _listed_mig(listed))


def check_whole(used: Sequence[str]) -> None:
    """:class:`CommandError` (one line) when one of the GPUs ``used`` (as
    ``CUDA_VISIBLE_DEVICES`` names them) is named whole, by index or ``GPU-…`` UUID, while
    in MIG mode: a process sees no usable device there, whether MIG devices were created
    on it or not. ``MIG-…`` names pass. The modes come from ``nvidia-smi`` (its MIG mode
    query, and the MIG devices ``-L`` lists under a GPU); where it is not on PATH or
    answers neither, nothing can be told and nothing is refused. Indices are read as
    nvidia-smi numbers the GPUs (PCI bus order), which is CUDA's order unless
    ``CUDA_DEVICE_ORDER`` or GPUs of different speeds make them differ. A UUID may be
    shortened to its first characters, as CUDA reads it (``GPU-2c3d`` for the whole)."""
    whole = [g for g in used if not g.startswith("MIG-")]
    smi = shutil.which(NVIDIA_SMI)
    if not whole or smi is None:
        return
    in_mig = _in_mig_mode(smi)
    split = list(
        dict.fromkeys(
            g
            for g in whole
            if g in in_mig or (g.startswith("GPU-") and any(m.startswith(g) for m in in_mig))
        )
    )
    if split:
        raise CommandError(
            f"--gpus-per-replica: GPU {', '.join(split)} in MIG mode (a process cannot use "
            f"it whole): set {VISIBLE_ENV} to its MIG devices' UUIDs (MIG-…, nvidia-smi "
            "-L; create them first if it lists none), one per replica, or disable MIG mode"
        )


def _smi(smi: str, *args: str) -> str:
    """What ``nvidia-smi args`` prints; OSError or SubprocessError when it fails."""
    return subprocess.run(
        [smi, *args], capture_output=True, text=True, timeout=30, check=True
    ).stdout


def _listed_mig(listed: str) -> list[tuple[str, str, bool]]:
    """Each GPU of an ``nvidia-smi -L`` listing: its index, its UUID (empty when the
    line shows none) and whether MIG devices are listed under it
    (``GPU 1: … (UUID: GPU-…)`` then ``  MIG 1g.18gb     Device  0: (UUID: MIG-…)``)."""
    gpus: list[tuple[str, str, bool]] = []
    for line in listed.splitlines():
        if line.startswith("GPU "):
            uuid = _UUID.search(line)
            gpus.append((str(len(gpus)), uuid.group(1) if uuid else "", False))
        elif line.strip().startswith("MIG ") and gpus:
            gpus[-1] = (*gpus[-1][:2], True)
    return gpus


def _in_mig_mode(smi: str) -> set[str]:
    """The indices and ``GPU-…`` UUIDs of the GPUs in MIG mode: ``Enabled`` in
    :data:`MIG_QUERY`'s answer, or MIG devices listed under them by ``-L``. Either
    source that fails (an older driver, a stand-in) adds nothing."""
    found: set[str] = set()
    try:
        answer = _smi(smi, *MIG_QUERY)
    except (OSError, subprocess.SubprocessError):
        answer = ""
    for line in answer.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[2] == "Enabled":
            found.update(fields[:2])
    try:
        listed = _smi(smi, "-L")
    except (OSError, subprocess.SubprocessError):
        listed = ""
    for index, uuid, mig in _listed_mig(listed):
        if mig:
            found.update(g for g in (index, uuid) if g)
    return found


def gpu_sets(
    replicas: int, per_replica: int, available: Sequence[str]
) -> tuple[tuple[str, ...], ...]:
    """``per_replica`` GPUs for each of ``replicas`` servers, none shared: replica ``i``
    gets ``available[i·K : (i+1)·K]``. :class:`CommandError` (one line) when there are
    too few."""
    if per_replica < 1:
        raise CommandError(f"--gpus-per-replica must be at least 1, not {per_replica}")
    if per_replica > 1 and any(g.startswith("MIG-") for g in available):
        raise CommandError(
            f"--gpus-per-replica {per_replica}: a process sees one MIG device only; give "
            "each replica one (--gpus-per-replica 1)"
        )
    need = replicas * per_replica
    if need > len(available):
        seen = gpu_list(available) or "none"
        raise CommandError(
            f"--gpus-per-replica {per_replica} with {counted(replicas, 'replica')} needs "
            f"{counted(need, 'GPU')}; "
            f"this process may use {len(available)} ({VISIBLE_ENV}: {seen})"
        )
    return tuple(tuple(available[i * per_replica : (i + 1) * per_replica]) for i in range(replicas))


def gpu_list(gpus: Sequence[str]) -> str:
    """``0,1``: the list form ``CUDA_VISIBLE_DEVICES`` takes."""
    return ",".join(gpus)


def placed_environment(env: Mapping[str, str], gpus: Sequence[str]) -> dict[str, str]:
    """``env`` with the server held to ``gpus`` (``CUDA_VISIBLE_DEVICES``)."""
    return {**env, VISIBLE_ENV: gpu_list(gpus)}


def _size(parsed: Sequence[str], names: Sequence[str]) -> int:
    """The value of the option ``names`` (its long name, then short forms) among the
    arguments vLLM's parser parses (:attr:`~ttlctl.server.vllm_config.VllmArgs.parsed`):
    1 unless given, the last of a repeated one (as vLLM takes it), each argument read as
    vLLM's parser reads it (:func:`~ttlctl.server.vllm_options.option_set`: underscores,
    abbreviations). :class:`CommandError` on a value that is not a number, naming the
    option as given (``-t (abbreviates -tp)``)."""
    value, given = "1", names[0]
    for i, arg in enumerate(parsed):
        name = option_set(arg, names)
        if name is not None:
            _, sep, inline = arg.partition("=")
            value = inline if sep else (parsed[i + 1] if i + 1 < len(parsed) else "")
            given = shown(arg, name)
    try:
        return int(value)
    except ValueError:
        raise CommandError(f"{given} takes a number, not {value!r}") from None


def _parsed(args: Sequence[str], names: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """``args`` as vLLM's parser parses them, the file their ``--config`` names first."""
    return vllm_config.read(args, [n for forms in names for n in forms]).parsed


def parallel_size(args: Sequence[str]) -> int:
    """The GPUs one vLLM engine started with ``args`` uses: the product of its tensor,
    pipeline and prefill context parallel sizes (vLLM 0.32's world size; 1 each unless
    given, on the command line or in its ``--config`` file). :class:`CommandError` on a
    size that is not a number."""
    parsed = _parsed(args, PARALLEL_FLAGS)
    size = 1
    for names in PARALLEL_FLAGS:
        size *= _size(parsed, names)
    return size


def check_one_engine(args: Sequence[str]) -> None:
    """:class:`CommandError` when vLLM's ``args`` (or their ``--config`` file) run several
    engines in one server (``--data-parallel-size`` D: D engines, each with a KV cache of
    its own, balanced by the server), where validate simulates one engine per server."""
    data = _size(_parsed(args, (DATA_PARALLEL_FLAGS,)), DATA_PARALLEL_FLAGS)
    if data != 1:
        raise CommandError(
            f"--data-parallel-size {data} runs {data} engines in each server, each with a "
            "KV cache of its own, while validate simulates one engine per server: run "
            f"{data} servers instead (--replicas)"
        )


def check_parallel(args: Sequence[str], per_replica: int) -> None:
    """:class:`CommandError` unless a server started with ``args`` is one engine on
    exactly ``per_replica`` GPUs (a server given more GPUs than it uses would leave them
    idle, one given fewer would fail to start, and one of several data parallel engines
    is not the one engine a simulated replica is)."""
    check_one_engine(args)
    size = parallel_size(args)
    if size != per_replica:
        raise CommandError(
            f"--gpus-per-replica {per_replica}: each replica's vLLM uses {size} GPU(s) "
            "(--tensor-parallel-size × --pipeline-parallel-size × "
            f"--prefill-context-parallel-size, after -- or in its --config file); make them "
            f"{per_replica}"
        )
