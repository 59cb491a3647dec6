"""``cache-aware``: vllm-router 0.1.17's default ``cache_aware`` policy
(``src/policies/cache_aware.rs``, itself SGLang's router's; the approximate tree of
``src/tree.rs``).

The rule, per request:

- the fleet is *imbalanced* when ``max_load − min_load > --balance-abs-threshold`` (64)
  **and** ``max_load > min_load × --balance-rel-threshold`` (1.5), loads being the
  router's own in-flight counts: then the request goes to the least loaded worker (the
  first of them), and its prompt is still taught to that worker's tree;
- otherwise the prompt is matched against the approximate prefix tree of what the router
  sent each worker: with a match rate (matched / prompt length) above
  ``--cache-threshold`` (0.3) the request goes to the worker with the longest match, else
  to the least loaded worker; the chosen worker's tree learns the prompt.

The tree holds prompts only (a response's text reaches the tree when the next prompt
repeats it). Deliberate differences: the tree counts tokens, not characters (the match
rate is a ratio, so the unit cancels for text of even density); it is never pruned (the
real one evicts least-recently-used leaves every ``--eviction-interval-secs`` past
``--max-tree-size`` characters per worker, 2²⁵ by default: more than the workloads here
send); two workers with the same longest match go to the lower index (the real tree
answers whichever tenant its node lists first).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from replay.fleet.prompts import Runs
from replay.fleet.routers.base import FleetView, RoutedCall, Stateless, least_loaded
from ttlctl.router_doc import default_of

#: the workers one run was sent to and the longest stretch of it each was sent: a pair
#: (worker, tokens) while one worker holds it (most runs: a program's own stream), a
#: dictionary once several do (a pair is a third the size, and untracked by the collector)
Holders = tuple[int, int] | dict[int, int]


@dataclass(slots=True)
class PromptTree:
    """The approximate tree: per content run, the longest stretch each worker was sent.

    A content id always follows the same content (see :mod:`replay.fleet.prompts`), so
    ``{run: {worker: tokens}}`` is a prefix tree folded by its edges (:data:`Holders`)."""

    _runs: dict[Hashable, Holders] = field(default_factory=dict)
    #: program -> the worker and the prompt of its last insert, and that prompt's tokens:
    #: the tree only grows, so that worker holds every run of that prompt in full (a
    #: prompt that starts with it, sent to the same worker, adds nothing for those runs)
    _last: dict[str, tuple[int, Runs, int]] = field(default_factory=dict)

    def known_prefix(self, prompt: Runs, program: str | None) -> tuple[int, int, int]:
        """(runs, worker, tokens) of the program's last prompt when ``prompt`` starts with
        it, else (0, -1, 0)."""
        last = None if program is None else self._last.get(program)
        if last is not None:
            worker, known, tokens = last
            if prompt[: len(known)] == known:
                return len(known), worker, tokens
        return 0, -1, 0

    def insert(
        self,
        prompt: Runs,
        worker: int,
        program: str | None = None,
        known: tuple[int, int, int] | None = None,
    ) -> None:
        """Teach ``worker``'s tree ``prompt`` (``known``: what :meth:`known_prefix` says of it,
        when the caller has asked already)."""
        runs = self._runs
        tokens = 0  # the prompt's, counted as its runs are taught
        whole = prompt
        if program is not None:
            skip, own, own_tokens = self.known_prefix(prompt, program) if known is None else known
            if skip and own == worker:
                tokens = own_tokens
                prompt = prompt[skip:]
        for cid, n in prompt:
            tokens += n
            held = runs.get(cid)
            if held is None:
                runs[cid] = (worker, n)
            elif isinstance(held, tuple):
                if held[0] == worker:
                    if held[1] < n:
                        runs[cid] = (worker, n)
                else:  # a second worker, also for a run of no tokens: it was sent it
                    runs[cid] = {held[0]: held[1], worker: n}
            elif held.get(worker, -1) < n:
                held[worker] = n
        if program is not None:
            self._last[program] = (worker, whole, tokens)

    def longest_match(
        self, prompt: Runs, program: str | None = None, known: tuple[int, int, int] | None = None
    ) -> tuple[int, int]:
        """(tokens matched, worker) of the worker sharing the longest prefix (the lowest
        index of those tied); (0, -1) when none shares any. Given the prompt's
        ``program``, the runs it repeats of the program's last prompt are not walked
        once only that prompt's worker still matches: that worker holds them in full
        (``known``: what :meth:`known_prefix` says of the prompt, when the caller has asked)."""
        runs = self._runs
        # the program's last prompt, if this one starts with it: (its length, worker, tokens)
        if program is None:
            known_runs, own, own_tokens = 0, -1, 0
        else:
            known_runs, own, own_tokens = (
                self.known_prefix(prompt, program) if known is None else known
            )
        best, best_worker = 0, -1
        # the workers that held every run so far in full: each has matched ``so_far``
        alive: list[int] | None = None  # None: every worker (the first run)
        so_far = 0
        i, length = 0, len(prompt)
        if known_runs and own_tokens > 0 and runs[prompt[0][0]].__class__ is tuple:
            # ``own`` alone holds the first run, and it holds the last prompt in full:
            # where the walk below stands once past the last prompt's runs
            best, best_worker, so_far = own_tokens, own, own_tokens
            alive, i = [own], known_runs
        while i < length:
            cid, n = prompt[i]
            i += 1
            held = runs.get(cid)
            if not held:
                break
            if alive is not None and len(alive) == 1:
                worker = alive[0]
                if worker == own and i <= known_runs:
                    # the rest of the last prompt: ``own`` matches it all, run by run
                    got = own_tokens
                    if got > best or (got == best and worker < best_worker):
                        best, best_worker = got, worker
                    so_far, i = own_tokens, known_runs
                    continue
                if isinstance(held, tuple):
                    m = held[1] if held[0] == worker else None
                else:
                    m = held.get(worker)
                if m is None:
                    break
                got = so_far + (m if m < n else n)
                if got > best or (got == best and worker < best_worker):
                    best, best_worker = got, worker
                if m < n:
                    break
                so_far += n
                continue
            nxt: list[int] = []
            for worker, m in (held,) if isinstance(held, tuple) else held.items():
                if alive is not None and worker not in alive:
                    continue
                got = so_far + (m if m < n else n)
                if got > best or (got == best and worker < best_worker):
                    best, best_worker = got, worker
                if m >= n:
                    nxt.append(worker)
            if not nxt:
                break
            alive = nxt
            so_far += n
        return best, best_worker


@dataclass(slots=True)
class CacheAware(Stateless):
    # vllm-router's defaults (ttlctl.router_doc's table)
    cache_threshold: float = default_of("cache-aware", "cache_threshold")
    balance_abs_threshold: int = int(default_of("cache-aware", "balance_abs_threshold"))
    balance_rel_threshold: float = default_of("cache-aware", "balance_rel_threshold")
    name: str = "cache-aware"
    tree: PromptTree = field(default_factory=PromptTree)

    def imbalanced(self, view: FleetView) -> bool:
        loads = view.loads()
        high = max(loads)
        if high <= self.balance_abs_threshold:  # no load is far enough above any (>= 0)
            return False
        low = min(loads)
        return high - low > self.balance_abs_threshold and high > low * self.balance_rel_threshold

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        tree = self.tree
        if self.imbalanced(view):
            worker = least_loaded(view)
        else:
            known = tree.known_prefix(call.prompt, call.program)  # asked once, for both
            matched, tenant = tree.longest_match(call.prompt, call.program, known)
            rate = matched / call.prompt_tokens if call.prompt_tokens else 0.0
            worker = tenant if rate > self.cache_threshold else least_loaded(view)
            tree.insert(call.prompt, worker, call.program, known)
            return worker
        tree.insert(call.prompt, worker, call.program)
        return worker
