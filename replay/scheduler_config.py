"""The simulated engine's settings (vLLM's ``SchedulerConfig`` and cache settings)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ttlctl import vllm_defaults
from ttlctl.errors import ConfigError

# The simulated engine's default size, read by :class:`SimSchedulerConfig`, by the
# commands' flags (``ttlctl.cli.options``: this module imports nothing heavy, so
# ``ttlctl --help`` stays light) and by the validations' library defaults
# (:func:`replay.validation.crosscheck.validate`, ``validate_fleet``).
#: the simulated KV cache, in tokens
KV_TOKENS = 600_000
#: vLLM's ``--block-size`` default up to 0.33 (0.34 on a GPU takes 64 where its attention
#: backend allows: docs/deploy.md, "vLLM 0.34")
BLOCK_SIZE = 16
#: ``--max-num-batched-tokens`` and ``--max-num-seqs``: vLLM's on a GPU
#: (:mod:`ttlctl.vllm_defaults`, which the profiler's engine reads too)
MAX_NUM_BATCHED_TOKENS = vllm_defaults.MAX_NUM_BATCHED_TOKENS
MAX_NUM_SEQS = vllm_defaults.MAX_NUM_SEQS
#: ``--max-model-len``
MAX_MODEL_LEN = 131_072


@dataclass(frozen=True, slots=True)
class SimSchedulerConfig:
    kv_tokens: int = KV_TOKENS
    block_size: int = BLOCK_SIZE
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS
    max_num_seqs: int = MAX_NUM_SEQS
    max_model_len: int = MAX_MODEL_LEN
    #: "runs" (fast) or "blocks" (the per-block reference)
    pool: str = "runs"
    #: take runs of decode-only steps in one event
    fast: bool = True
    #: admit a waiting request only if its whole prompt fits (vLLM 0.32's
    #: ``scheduler_reserve_full_isl``, on by default), not just its first chunk
    reserve_full_prompt: bool = True
    #: a prefill chunk's cap per request and step, vLLM's ``--long-prefill-token-threshold``
    #: (0: none); it applies only while more than one request runs or waits
    long_prefill_token_threshold: int = 0
    #: vLLM's ``--long-prefill-token-threshold-adaptive``: the cap is never below the token
    #: budget's fair share (the budget over the requests running and waiting)
    long_prefill_token_threshold_adaptive: bool = False
    #: vLLM's ``--watermark``: the share of the KV blocks that admitting a waiting request
    #: keeps free while another request runs (0: none; :attr:`watermark_blocks`)
    watermark: float = 0.0
    #: the step sizes (scheduled tokens) the engine ran before the replay: each other size
    #: pays the cost model's ``new_shape_s`` the first time it runs
    #: (:func:`replay.step_price.new_size_extra`). None: every size, an engine that has
    #: served for long (a replay's default); a set: one just started and warmed with those
    sizes_run: frozenset[int] | None = None

    def __post_init__(self) -> None:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        problem = _range_problem(values, _FLAG_OF.__getitem__)
        if problem is not None:
            raise ConfigError(problem)

    def to_json(self) -> dict[str, Any]:
        """The settings as JSON (``sizes_run`` as ascending sizes, and only when set; the
        prefill cap only when on, so that a document of an engine without one reads as
        before it was modelled)."""
        doc: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        sizes = doc.pop("sizes_run")
        if sizes is not None:
            doc["sizes_run"] = sorted(sizes)
        for key in _SHOWN_WHEN_ON:
            if not doc[key]:
                del doc[key]
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any], where: str = "engine") -> SimSchedulerConfig:
        """The settings :meth:`to_json` wrote; :class:`ConfigError` naming ``where.key``
        for a setting it does not have or one of the wrong type (a size that is not a
        whole number, a switch that is not true or false)."""
        for key, value in doc.items():
            problem = _type_problem(key, value)
            if problem is not None:
                raise ConfigError(f"{where}.{key} is {json.dumps(value)[:40]}; {problem}")
        sizes = doc.get("sizes_run")
        settings = {**doc, "sizes_run": None if sizes is None else frozenset(sizes)}
        defaults = {f.name: f.default for f in fields(cls)}
        problem = _range_problem({**defaults, **settings}, lambda key: f"{where}.{key}")
        if problem is not None:  # said with the document's fields, not the flags
            raise ConfigError(problem)
        return cls(**settings)

    @property
    def num_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    @property
    def watermark_blocks(self) -> int:
        """The free blocks admission keeps while a request runs: vLLM's
        ``int(watermark × num_blocks)``, whose block count takes in its null block (one
        more than :attr:`num_blocks`, the blocks that hold KV)."""
        return int(self.watermark * (self.num_blocks + 1)) if self.watermark else 0

    def resized(self, **sizes: Any) -> SimSchedulerConfig:
        """These settings with ``sizes`` (a flag's or an engine log's) in place. A prefill
        cap kept from these past a new, shorter ``max_model_len`` (a bundle's record of an
        engine with a longer one) is cut to it, where the settings would be refused as
        naming a threshold nobody gave: no prompt is longer, so it caps none either way."""
        length = sizes.get("max_model_len", self.max_model_len)
        if (
            "long_prefill_token_threshold" not in sizes
            and self.long_prefill_token_threshold > length
        ):
            sizes["long_prefill_token_threshold"] = length
        return replace(self, **sizes)

    def prefill_cap(self, num_eligible: int) -> int:
        """A prefill's tokens per step at most (0: no cap) in a step that starts with
        ``num_eligible`` requests running and waiting, as vLLM's ``schedule()`` sets it: the
        threshold, only when another request could be starved, floored at the budget's
        fair share when adaptive."""
        cap = self.long_prefill_token_threshold
        if cap <= 0 or num_eligible <= 1:
            return 0
        if self.long_prefill_token_threshold_adaptive:
            return max(cap, self.max_num_batched_tokens // num_eligible)
        return cap


#: each setting's flag, as the commands spell it (pool: no flag)
_FLAG_OF = {
    "kv_tokens": "--kv-tokens",
    "block_size": "--block-size",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs",
    "max_model_len": "--max-model-len",
    "long_prefill_token_threshold": "--long-prefill-token-threshold",
    "watermark": "--watermark",
    "pool": "pool",
}


def _range_problem(values: Mapping[str, Any], name: Callable[[str], str]) -> str | None:
    """The settings' ranges, THE rule (None: kept); ``name`` says each setting (its flag on
    the command line, its field in a document)."""
    if values["kv_tokens"] < values["block_size"] or values["block_size"] <= 0:
        kv, block = name("kv_tokens"), name("block_size")
        return (
            f"{kv} must hold at least one block ({block} tokens): "
            f"{kv} {values['kv_tokens']} with {block} {values['block_size']}"
        )
    if values["max_num_batched_tokens"] <= 0 or values["max_num_seqs"] <= 0:
        return f"{name('max_num_batched_tokens')} and {name('max_num_seqs')} must be positive"
    threshold = values["long_prefill_token_threshold"]
    if threshold < 0 or threshold > values["max_model_len"]:
        # vLLM refuses a threshold past the model's length as well
        return (
            f"{name('long_prefill_token_threshold')} must be from 0 (no cap) to "
            f"{name('max_model_len')} ({values['max_model_len']:,}), not {threshold:,}"
        )
    problem = watermark_problem(values["watermark"], name("watermark"))
    if problem is not None:
        return problem
    if values["pool"] not in ("runs", "blocks"):
        return f"{name('pool')} must be 'runs' or 'blocks'"
    return None


def watermark_problem(share: float, name: str = "--watermark") -> str | None:
    """What is wrong with ``share`` as vLLM's ``--watermark`` (None: in vLLM's range, 0 to
    below 1; a server would refuse to start with another): THE rule, for the commands that
    check it before building an engine (refit, validate) and for :class:`SimSchedulerConfig`."""
    if 0 <= share < 1:
        return None
    return f"{name} must be a share from 0 to below 1, not {share:g}"


#: the settings that are whole numbers (sizes), and those that are switches
_SIZES = frozenset(
    {
        "kv_tokens",
        "block_size",
        "max_num_batched_tokens",
        "max_num_seqs",
        "max_model_len",
        "long_prefill_token_threshold",
    }
)
_SWITCHES = frozenset({"fast", "reserve_full_prompt", "long_prefill_token_threshold_adaptive"})


#: the settings :meth:`SimSchedulerConfig.to_json` leaves out at their default (off)
_SHOWN_WHEN_ON = (
    "long_prefill_token_threshold",
    "long_prefill_token_threshold_adaptive",
    "watermark",
)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the setting ``key`` in a document (None: its type
    is right; the ranges: :func:`_range_problem`)."""
    if key in _SIZES:
        return None if _whole(value) else "a size, a whole number"
    if key in _SWITCHES:
        return None if isinstance(value, bool) else "a switch, true or false"
    if key == "watermark":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else "a share, a number from 0 to below 1"
    if key == "pool":
        return None if isinstance(value, str) else "'runs' or 'blocks'"
    if key == "sizes_run":
        ok = value is None or (isinstance(value, list) and all(_whole(v) for v in value))
        return None if ok else "the step sizes run, whole numbers"
    return "not a setting of the simulated engine"
