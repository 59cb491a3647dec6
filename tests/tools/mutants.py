"""Small faults planted in the simulator, the pools, the pin rules and the retention class
(issue 18, item 4): each must make the differential, parity or equivalence suite fail.

A :class:`Mutant` is (file, an exact snippet of it, its replacement). ``python -m
tests.tools.mutants`` (``make mutants``) applies each to a temporary copy of the tree
(never the working tree), runs :data:`SUITES` there with ``-x`` (hypothesis does not
shrink: the profile ``mutants`` of tests/conftest.py), and prints which were caught and
the rate. ``tests/replay/test_mutant_list.py`` checks that every snippet still occurs
exactly once, so a refactor breaks the list loudly instead of leaving a fault unplanted.

Options: ``-j N`` mutants at once (default 2), ``-k TEXT`` only the mutants whose name
contains TEXT, ``--timeout S`` per mutant (default 600). A mutant whose suites run past
the timeout is counted apart (TIMEOUT), neither caught nor survived: on a loaded machine a
survivor's full run can take that long, and a hang is rare.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: the suites a mutant runs against
SUITES = (
    "tests/vllmsim/test_pin_parity.py",
    "tests/replay/test_equivalence.py",
    # the same for the pools with prefixes shared across programs
    "tests/replay/test_prefix_sharing.py",
    "tests/replay/test_pin_rules.py",
    # a call's output tokens and steps, counted by hand
    "tests/replay/test_output_tokens.py",
    # the retention class's own rules, stated case by case (the pin cap at its edge)
    "tests/engine/test_units.py",
    "tests/vllmsim/test_differential.py",
)
#: what the copy needs (the rest of the tree is not imported by the suites)
COPY = ("ttlctl", "replay", "fitting", "profiles", "tests", "pyproject.toml")


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    file: str
    original: str
    replacement: str


MUTANTS: tuple[Mutant, ...] = (
    # ------------------------------------------------------------ the simulator
    Mutant(
        "full-prompt reservation one token short",
        "replay/admission.py",
        "must_fit = max(need, cdiv(req.num_tokens, bs) - hit_blocks)",
        "must_fit = max(need, cdiv(req.num_tokens - 1, bs) - hit_blocks)",
    ),
    Mutant(
        "prefix hit may cover the whole prompt",
        "replay/admission.py",
        "reusable // bs, (req.num_tokens - 1) // bs",
        "reusable // bs, req.num_tokens // bs",
    ),
    Mutant(
        "running blocks: one block short (ceil as floor)",
        "replay/sched_fast.py",
        "need = max(0, cdiv(r.num_computed_tokens + num_new_tokens, bs) - r.blocks)",
        "need = max(0, (r.num_computed_tokens + num_new_tokens) // bs - r.blocks)",
    ),
    Mutant(
        "max_num_seqs off by one",
        "replay/sched_admit.py",
        "while waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:",
        "while waiting and budget > 0 and len(self.running) <= self.config.max_num_seqs:",
    ),
    Mutant(
        "one output token too many",
        "replay/step_apply.py",
        "        if r.generated >= r.output:\n",
        "        if r.generated > r.output:\n",
    ),
    Mutant(
        "preemption caches one block too many",
        "replay/sched_leave.py",
        'only the tokens already known)."""\n        return req.num_computed_tokens\n',
        'only the tokens already known)."""\n'
        "        return req.num_computed_tokens + self.config.block_size\n",
    ),
    Mutant(
        "pinned block-seconds count one block more",
        "replay/sched_pins.py",
        "self.stats.pinned_block_seconds += pinned * (now - self.clock)",
        "self.stats.pinned_block_seconds += (pinned + (pinned > 0)) * (now - self.clock)",
    ),
    Mutant(
        "step priced without the decodes' KV",
        "replay/step_price.py",
        "return cost.step_s(chunks, num_decodes, kv_tokens, cached) + plan.reload_s",
        "return cost.step_s(chunks, num_decodes, kv_tokens // 2, cached) + plan.reload_s",
    ),
    Mutant(
        "merged decode run one step long",
        "replay/decode_run.py",
        "steps = lo + 1 if now + cost.decode_run_s(seqs, kv0, lo) < horizon else lo",
        "steps = lo + 2 if now + cost.decode_run_s(seqs, kv0, lo) < horizon else lo + 1",
    ),
    # ------------------------------------------------------------ the decode set
    Mutant(
        "decode set: a block boundary one token late",
        "replay/decoders.py",
        "            if blocks + need > free:\n",
        "            if blocks + need > free + 1:\n",
    ),
    # ------------------------------------------------------------ the pools
    Mutant(
        "run pool: free-list order (the partial block last, not first)",
        "replay/kv/run_free.py",
        "            self._prepend(lo + full, lo + blocks)  # the partial last block: reused first",
        "            self._append(None, lo + full, lo + blocks)",
    ),
    Mutant(
        "run pool: room check off by one",
        "replay/kv/run_lookup.py",
        "        return new <= self._free - hit\n\n    def _ids",
        "        return new < self._free - hit\n\n    def _ids",
    ),
    Mutant(
        "block pool: new blocks from the tail of the free list",
        "replay/kv/block_pool.py",
        "    def grow(self, program: str, new: int) -> None:\n"
        "        if new > len(self._queue):\n"
        "            raise OutOfBlocks(program)\n"
        "        blocks = self._owned.setdefault(program, [])\n"
        "        for _ in range(new):\n"
        "            b, _ = self._queue.popitem(last=False)",
        "    def grow(self, program: str, new: int) -> None:\n"
        "        if new > len(self._queue):\n"
        "            raise OutOfBlocks(program)\n"
        "        blocks = self._owned.setdefault(program, [])\n"
        "        for _ in range(new):\n"
        "            b, _ = self._queue.popitem(last=True)",
    ),
    Mutant(
        "block pool: a shared block's second holder not counted",
        "replay/kv/block_pool.py",
        "                self._ref[b] = self._ref.get(b, 0) + 1\n",
        "                self._ref[b] = self._ref.get(b, 0) + (b not in self._ref)\n",
    ),
    # ------------------------------------------------------------ the simulator's pin glue
    Mutant(
        "a pin holds one cached block less",
        "replay/pinning.py",
        "            self._pool.pin(req.program, full)",
        "            self._pool.pin(req.program, max(0, full - 1))",
    ),
    Mutant(
        "no expiry at an arrival",
        "replay/pinning.py",
        "        if r.pins:\n            r.expire(now, waiting)\n        req.live",
        "        req.live",
    ),
    Mutant(
        "the valve releases without retrying (all pins at once)",
        "replay/pinning.py",
        '            r.release(program, "released")\n            yield program',
        '            r.release_all("released")\n            yield program',
    ),
    # ------------------------------------------------------------ the retention class
    Mutant(
        "pins live twice as long",
        "ttlctl/engine/retention.py",
        "expiry=now + ttl_s,",
        "expiry=now + 2 * ttl_s,",
    ),
    Mutant(
        "pin expiry 50 ms late",
        "ttlctl/engine/retention.py",
        "expiry=now + ttl_s,",
        "expiry=now + ttl_s + 0.05,",
    ),
    Mutant(
        "the cap check lets a pin reach one block past the cap",
        "ttlctl/engine/retention.py",
        "if held + len(blocks) > cap:",
        "if held + len(blocks) > cap + 1:",
    ),
    Mutant(
        "an expired pin whose program waits is released anyway",
        "ttlctl/engine/retention.py",
        "            if waiting(pin.program):\n",
        "            if False:\n",
    ),
    Mutant(
        "handover never happens (the pin stays after admission)",
        "ttlctl/engine/retention.py",
        "        if program is not None and program in self.pins:\n"
        '            self.release(program, "hit")',
        '        if False:\n            self.release(program, "hit")',
    ),
    Mutant(
        "valve: the head's own pin first when stalled",
        "ttlctl/engine/orders.py",
        "            order.append(head_program)",
        "            order.insert(0, head_program)",
    ),
    Mutant(
        "stall-only releases while something runs",
        "ttlctl/engine/orders.py",
        'if self._source.params.valve == "stall-only" and not stalled:',
        'if self._source.params.valve == "stall-only" and stalled:',
    ),
    Mutant(
        "queue key: a pinned program's call not first",
        "ttlctl/engine/orders.py",
        "pinned = 0.0 if program is not None and program in self.pins.pins else 1.0",
        "pinned = 1.0",
    ),
    # ------------------------------------------------------------ the pin table
    Mutant(
        "a pin due only after its expiry (< for <=)",
        "ttlctl/engine/pins.py",
        "while heap and heap[0][0] <= now:",
        "while heap and heap[0][0] < now:",
    ),
    Mutant(
        "valve order: earliest program first",
        "ttlctl/engine/pins.py",
        "key=lambda p: (-p.program_start, -p.program_seq, p.program),",
        "key=lambda p: (p.program_start, p.program_seq, p.program),",
    ),
)


#: the tree as it is: the suites must pass on it, or no figure means anything
BASELINE = Mutant("none (the tree as it is)", "replay/scheduler.py", "class SimScheduler(", "")


def check_list(root: Path = REPO) -> list[str]:
    """The mutants whose snippet does not occur exactly once in its file (with the count)."""
    bad = []
    for m in MUTANTS:
        n = (root / m.file).read_text().count(m.original)
        if n != 1:
            bad.append(f"{m.name}: {m.file} holds its snippet {n} times")
    return bad


def _copy_tree(into: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".mypy_cache", "*.pyc")
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, into / name, ignore=ignore)
        else:
            shutil.copy2(src, into / name)


def run_one(m: Mutant, timeout: float) -> tuple[Mutant, bool | None, float, str]:
    """(mutant, caught (None: timed out), seconds, the first failing test or why)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ttlctl-mutant-") as tmp:
        root = Path(tmp)
        _copy_tree(root)
        path = root / m.file
        text = path.read_text()
        if text.count(m.original) != 1:
            return m, False, 0.0, "snippet not found once (tests/replay/test_mutant_list.py)"
        if m is not BASELINE:
            path.write_text(text.replace(m.original, m.replacement))
        env = dict(os.environ, PYTHONPATH=str(root), TTLCTL_DIFF_SEED="0")
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        cmd += ["--hypothesis-profile=mutants", *SUITES]
        try:
            proc = subprocess.run(
                cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return m, None, time.monotonic() - t0, f"timed out after {timeout:.0f} s"
        failed = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
        why = failed[0] if failed else proc.stdout.strip().splitlines()[-1:][0]
        return m, proc.returncode != 0, time.monotonic() - t0, why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("-k", default="")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    bad = check_list()
    if bad:
        print("mutants: " + "; ".join(bad), file=sys.stderr)
        return 2
    chosen = [m for m in MUTANTS if args.k in m.name]
    t0 = time.monotonic()
    caught = timed_out = 0
    with ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        runs = pool.map(lambda m: run_one(m, args.timeout), [BASELINE, *chosen])
        _, failed, secs, why = next(runs)
        failed = failed is not False
        print(
            f"[ 0/{len(chosen)}] {'FAILED' if failed else 'passed'} {secs:5.0f} s  "
            f"{BASELINE.name}\n          {why}",
            flush=True,
        )
        if failed:
            print("mutants: the suites fail on the tree as it is: fix that first", flush=True)
            return 2
        for i, (m, hit, secs, why) in enumerate(runs, 1):
            caught += hit is True
            timed_out += hit is None
            mark = "TIMEOUT " if hit is None else "caught  " if hit else "SURVIVED"
            print(f"[{i:2d}/{len(chosen)}] {mark} {secs:5.0f} s  {m.name}  ({m.file})", flush=True)
            print(f"          {why}", flush=True)
    rate = caught / len(chosen) if chosen else 0.0
    print(
        f"mutants: {caught} of {len(chosen)} caught ({rate:.0%}), {timed_out} timed out, "
        f"in {time.monotonic() - t0:.0f} s",
        flush=True,
    )
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
