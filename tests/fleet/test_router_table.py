"""One table of the routers' settings (``ttlctl.router_doc.SETTINGS``): the simulator's
router settings, the bundle's check, the command line and vllm-router's own parser take
the same settings, with the same types, ranges and defaults."""

from __future__ import annotations

import argparse
import inspect
import math
import typing
from typing import Any

import numpy as np
import pytest

from replay.fleet import asked
from replay.fleet.routers import TAKES, RouterSettings, make_router
from replay.fleet.routers.cache_aware import CacheAware
from replay.fleet.routers.kv_aware import KvAware
from replay.fleet.routers.pin_aware import PinAware
from tests.router_bin import FREE_PORT, router_or_skip, router_outputs
from ttlctl.cli import replay as replay_cli
from ttlctl.errors import ConfigError, TtlctlError
from ttlctl.router_doc import (
    POLICIES,
    PROGRAM_SCHEDULING,
    ROUTERS,
    SETTINGS,
    Flag,
    check_settings,
    flag_name,
    ttlctl_name,
)

#: every (router, setting, flag) of the table
TABLE = [(name, key, flag) for name, flags in SETTINGS.items() for key, flag in flags.items()]


def probes(flag: Flag) -> list[Any]:
    """Values at and beyond each end of the flag's range, and of each kind it refuses."""
    step = 1 if flag.integer else 0.5
    out: list[Any] = [flag.low, flag.low - step, flag.low + 0.5, float(flag.low), flag.low + 2]
    if not math.isinf(flag.high):
        out += [flag.high, flag.high + step, flag.high - 0.5]
    return [*out, True, False, "1", math.nan, math.inf, -math.inf]


def sim_refusal(name: str, key: str, value: Any) -> str | None:
    try:
        RouterSettings(name, **{key: value})
    except ConfigError as e:
        return str(e)
    return None


def bundle_refuses(name: str, key: str, value: Any) -> bool:
    try:
        check_settings(name, {key: value})
    except TtlctlError:
        return True
    return False


def test_the_table_names_every_router_and_every_setting_the_simulator_takes() -> None:
    assert set(SETTINGS) | {PROGRAM_SCHEDULING} == set(ROUTERS) == set(TAKES)
    for name, flags in SETTINGS.items():
        assert TAKES[name] == tuple(flags), name
    assert {ttlctl_name(policy) for policy in POLICIES} < set(ROUTERS)
    given = set(RouterSettings.__annotations__) - {"name"}
    assert given == {key for takes in TAKES.values() for key in takes}


@pytest.mark.parametrize(("name", "key", "flag"), TABLE, ids=[f"{n}.{k}" for n, k, _ in TABLE])
def test_the_simulator_refuses_what_the_bundle_refuses(name: str, key: str, flag: Flag) -> None:
    """At and beyond each end of the range, a fraction for an integer, a boolean, text and
    non-finite numbers: RouterSettings and the bundle's check agree on every value, and the
    simulator's refusal is one line naming the flag."""
    typed = "int | None" if flag.integer else "float | None"
    assert RouterSettings.__annotations__[key] == typed
    for value in probes(flag):
        why = sim_refusal(name, key, value)
        assert (why is not None) == bundle_refuses(name, key, value), (key, value)
        assert (why is not None) == (flag.refusal(value) is not None), (key, value)
        if why is not None:
            assert why.startswith(f"{flag_name(key)}: ") and "\n" not in why, why


@pytest.mark.parametrize("name", list(SETTINGS))
def test_unset_settings_take_the_tables_defaults(name: str) -> None:
    """resolved() (the replay JSON's settings) and the router model make_router builds."""
    flags = SETTINGS[name]
    assert RouterSettings(name).resolved() == {k: f.default for k, f in flags.items()}
    if not flags or name == "as-logged":
        return
    model = make_router(RouterSettings(name), 2, seed=0, block_size=16)
    for key, flag in flags.items():
        assert getattr(model, key) == flag.default, key


def test_the_router_models_own_defaults_are_the_tables() -> None:
    cache, kv, pin = CacheAware(), KvAware(np.random.default_rng(0)), PinAware()
    for model, name in ((cache, "cache-aware"), (kv, "kv-aware"), (pin, "pin-aware")):
        for key, flag in SETTINGS[name].items():
            assert getattr(model, key) == flag.default, (name, key)


def test_the_command_line_takes_the_tables_types() -> None:
    """replay's router flags (and the library call they go through) are ints where the
    table's are, and their help gives the table's default."""
    hints = typing.get_type_hints(replay_cli.replay, include_extras=True)
    signature = inspect.signature(asked.router_settings).parameters
    typed = {True: "int | None", False: "float | None"}
    for _, key, flag in TABLE:
        kind, option = typing.get_args(hints[key])
        assert kind == (int | None if flag.integer else float | None), key
        assert flag_name(key) in (option.default, *option.param_decls), key  # typer's spelling
        assert signature[key].annotation == typed[flag.integer], key
        default = "off by default" if flag.default is None else f"; {flag.default:g})"
        assert default in option.help, (key, option.help)


def test_the_table_is_vllm_routers_parser() -> None:
    """vllm-router 0.1.17's own argument parser (``vllm_router/router_args.py``) as the
    oracle: its policies, each flag's type and default, and the session TTL's range."""
    router_args = pytest.importorskip("vllm_router.router_args")
    parser = argparse.ArgumentParser()
    router_args.RouterArgs.add_cli_args(parser)
    actions = {a.dest: a for a in parser._actions}
    assert set(actions["policy"].choices) == set(POLICIES)
    assert actions["policy"].default == POLICIES[0]
    for _, key, flag in TABLE:
        if not flag.vllm_router:
            assert key not in actions, key  # ttlctl's own router's
            continue
        assert actions[key].option_strings == [flag_name(key)]
        assert actions[key].type is (int if flag.integer else float), key
        assert actions[key].default == flag.default, key
    ttl = SETTINGS["kv-aware"]["kv_aware_session_affinity_ttl_secs"]
    for value in (ttl.low - 1, ttl.low, ttl.high, ttl.high + 1):
        args = router_args.RouterArgs(kv_aware_session_affinity_ttl_secs=int(value))
        try:
            args._validate_router_args()
            refused = False
        except ValueError:
            refused = True
        assert refused == (ttl.refusal(int(value)) is not None), value


#: the vllm-router flags of the table, each with the ``--policy`` that takes it
VLLM_FLAGS = [(name, key, flag) for name, key, flag in TABLE if flag.vllm_router]


def router_probes(flag: Flag) -> list[float]:
    """The table's ends of ``flag`` and a value just beyond each, and 2**64."""
    step = 1 if flag.integer else 0.01
    probes: list[float] = [flag.low, flag.low - step, 2**64]
    if not math.isinf(flag.high):
        probes += [flag.high, flag.high + step]
    return [int(value) if flag.integer else round(value, 6) for value in probes]


def router_args(policy: str, key: str, value: float) -> list[str]:
    """vllm-router's arguments to start with ``--policy policy --KEY VALUE``, on a port
    free at its start (router_outputs picks it)."""
    command = ["--host", "127.0.0.1", "--port", FREE_PORT]
    command += ["--worker-urls", "http://127.0.0.1:9", "--policy", policy]
    return [*command, flag_name(key), str(value)]


def policy_of(name: str) -> str:
    return next(p for p in POLICIES if ttlctl_name(p) == name)


@pytest.fixture(scope="module")
def router_started() -> dict[tuple[str, str, float], bool]:
    """Whether vllm-router gets past its own checks (its parser's, then its Rust config
    validation at start) with ``--KEY VALUE``, for each probe of each flag: it writes its
    first line on stdout once it starts serving, and exits 1 with nothing on stdout when it
    refuses. All the starts are forked from one import of its launcher (router_outputs)."""
    binary = router_or_skip()
    probes = [(name, key, value) for name, key, flag in VLLM_FLAGS for value in router_probes(flag)]
    runs = [router_args(policy_of(name), key, value) for name, key, value in probes]
    firsts = router_outputs(binary, runs, merge_stderr=False, until=[""])
    return {probe: bool(first) for probe, first in zip(probes, firsts, strict=True)}


@pytest.mark.parametrize(
    ("name", "key", "flag"), VLLM_FLAGS, ids=[f"{n}.{k}" for n, k, _ in VLLM_FLAGS]
)
def test_the_real_router_takes_what_the_table_takes(
    name: str, key: str, flag: Flag, router_started: dict[tuple[str, str, float], bool]
) -> None:
    """vllm-router 0.1.17 run as the oracle of each range: it starts with the table's
    ends and refuses a value just beyond each (some only when it starts, past its
    parser: balance_rel_threshold under 1), and it and the table agree on 2**64 (an
    integer its Rust side cannot hold)."""
    for value in router_probes(flag):
        taken = flag.refusal(value) is None
        assert router_started[(name, key, value)] == taken, (key, value, taken)
