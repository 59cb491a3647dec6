"""A real vLLM server for tests: a tiny locally built model and a process that cleans up.

No model hub is reachable here, so :func:`build_tiny_model` makes a model from
nothing (a byte-level BPE trained on the Python standard library's sources and a
random-weight ``LlamaForCausalLM`` shaped like a :data:`profiles.models.PRESETS`
entry). Its output is junk: send ``ignore_eos: true`` and a fixed ``max_tokens``.

:class:`VLLMServer` starts ``python -m vllm.entrypoints.openai.api_server`` through
the door (:class:`ttlctl.server.owned.OwnedServer`) on 127.0.0.1 and a free port,
with the flags of ``../shared/docs/VLLM_CPU.md``, waits for ``/health`` and, on exit
(and on SIGTERM to the test process), stops the whole process group (API server,
engine core and their helpers) with SIGTERM, then SIGKILL::

    model = build_tiny_model(tmp_path / "tiny")
    with VLLMServer(model) as server:
        urllib.request.urlopen(f"{server.url}/v1/models")

The server is started with ``VLLM_SERVER_DEV_MODE=1`` so ``POST
/reset_prefix_cache`` exists, and with prefix caching and
``usage.prompt_tokens_details.cached_tokens`` on.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from ttlctl.server import client
from ttlctl.server.command import base_command, server_command, server_environment
from ttlctl.server.owned import OwnedServer, ServerStartError
from ttlctl.server.process import free_port

#: seconds a tiny-model server may take to answer /health: its start takes ~35 s of CPU
#: (45 s on a quiet 2-core machine), several times that at a load of 3 to 6 with a second
#: server starting beside it; a server that exits is reported at once, only a hang waits
STARTUP_S = 600.0

#: special tokens of the tiny tokenizer (ids 0, 1, 2)
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

#: characters of standard-library source the tokenizer is trained on (~2 s)
TRAIN_CHARS = 4_000_000


def _stdlib_text(limit: int = TRAIN_CHARS) -> Iterator[str]:
    """Python standard-library sources, in a fixed order, up to ``limit`` characters."""
    root = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(root.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        yield text
        total += len(text)
        if total >= limit:
            return


def build_tiny_model(dir: Path, preset: str = "tiny", seed: int = 0) -> Path:
    """Write a servable random-weight model shaped like ``PRESETS[preset]`` to ``dir``.

    The tokenizer is a byte-level BPE with the preset's vocabulary size, trained
    on local text, with ``<|bos|>``/``<|eos|>``/``<|pad|>`` and a simple chat
    template; the weights are bf16, seeded. Reuses ``dir`` when it already holds
    a model built here. Returns ``dir``. Takes about 5 s (cache it per session).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from profiles.models import PRESETS

    dir = Path(dir)
    marker = dir / ".ttlctl-tiny-model"
    if marker.is_file() and marker.read_text() == f"{preset} {seed}\n":
        return dir
    dir.mkdir(parents=True, exist_ok=True)
    preset_config = dict(PRESETS[preset])
    vocab_size = int(preset_config["vocab_size"])

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_stdlib_text(), trainer=trainer)
    fast: Any = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=int(preset_config["max_position_embeddings"]),
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(dir)

    for key in ("architectures", "model_type", "torch_dtype"):
        preset_config.pop(key, None)
    config = LlamaConfig(
        **preset_config,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(seed)
    model: Any = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    model = model.to(torch.bfloat16)
    model.save_pretrained(dir)
    marker.write_text(f"{preset} {seed}\n")
    return dir


class VLLMServerError(RuntimeError):
    """The server did not start; the message ends with the last lines of its log."""


#: the flags of every test server (../shared/docs/VLLM_CPU.md) but its size and name
FLAGS = ("--dtype", "bfloat16", "--enforce-eager", "--enable-prefix-caching")


@functools.cache
def vllm_cache_root() -> Path:
    """The ``VLLM_CACHE_ROOT`` of every test server and in-process engine of this test run.

    One folder for the run, removed at its end: vLLM caches there what it learned of the
    model's class (``modelinfos/``, keyed by the hash of the model's source file), which a
    fresh folder makes every server learn again in a subprocess that imports all of vLLM
    (10–15 s of CPU a start on two cores). What a test asserts of a server's own state (its
    prefix cache, counters, logs, pins) is not there: each server still starts empty.
    """
    root = Path(tempfile.mkdtemp(prefix="ttlctl-test-vllm-cache-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def offline_environment(base: Mapping[str, str], work_dir: Path) -> dict[str, str]:
    """A test server's environment on top of the door's: offline, vLLM's cache shared by the
    run's servers (:func:`vllm_cache_root`), its other files under ``work_dir``."""
    env = dict(base)
    env.update(
        VLLM_CACHE_ROOT=str(vllm_cache_root()),
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return env


class VLLMServer:
    """A vLLM OpenAI-compatible server on 127.0.0.1, as a context manager.

    The command, environment and process are the door's (:mod:`ttlctl.server`:
    :func:`~ttlctl.server.command.server_command`,
    :class:`~ttlctl.server.owned.OwnedServer`), with the tests' flags.
    ``kv_cache_bytes`` sizes the KV cache (``--kv-cache-memory-bytes``; vLLM
    takes most of the machine's memory otherwise); ``extra_args`` are appended to
    the command line; ``env`` adds to (or, with a value of ``None``, removes from)
    the environment; ``scheduler_cls`` is passed as ``--scheduler-cls``.

    Attributes once started: ``url`` (``http://127.0.0.1:PORT``), ``port``,
    ``log_path`` (the server's stdout and stderr), ``model`` (the served name),
    ``ready_s`` (seconds from start to a healthy server), ``pid``.
    """

    def __init__(
        self,
        model_dir: Path | str,
        *,
        kv_cache_bytes: str = "8M",
        block_size: int = 32,
        max_model_len: int = 2048,
        extra_args: Iterable[str] = (),
        env: Mapping[str, str | None] | None = None,
        scheduler_cls: str | None = None,
        served_model_name: str | None = None,
        startup_timeout_s: float = STARTUP_S,
        stop_grace_s: float = 15.0,
        work_dir: Path | str | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.kv_cache_bytes = kv_cache_bytes
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.extra_args = tuple(extra_args)
        self.env_overrides = dict(env or {})
        self.scheduler_cls = scheduler_cls
        self.model = served_model_name or self.model_dir.name
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="vllm-server-"))
        self.log_path = self.work_dir / "server.log"
        self.port = 0
        self.url = ""
        self.ready_s: float | None = None
        self._server: OwnedServer | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._server else None

    def command(self) -> list[str]:
        flags = [
            "--served-model-name", self.model, *FLAGS,
            "--block-size", str(self.block_size),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--max-model-len", str(self.max_model_len),
        ]  # fmt: skip
        return server_command(
            base_command(str(self.model_dir), flags),
            scheduler_cls=self.scheduler_cls,
            prompt_tokens_details=True,
            host="127.0.0.1",
            port=self.port,
            extra=self.extra_args,
        )

    def environment(self) -> dict[str, str]:
        env = offline_environment(
            server_environment(os.environ, dev_mode=True, local=True), self.work_dir
        )
        for key, value in self.env_overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers 200 (or raise)."""
        if self._server is not None:
            raise RuntimeError("server already started")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        server = OwnedServer(
            self.command(),
            self.environment(),
            self.log_path,
            self.url,
            cwd=self.work_dir,
            startup_timeout_s=self.startup_timeout_s,
            stop_grace_s=self.stop_grace_s,
        )
        try:
            server.start()
        except ServerStartError as exc:
            raise VLLMServerError(f"vLLM {exc}\n{self.log_tail()}") from None
        self._server = server
        atexit.register(self.stop)
        self.ready_s = server.ready_s
        return self

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``stop_grace_s``."""
        server, self._server = self._server, None
        if server is None:
            return
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        server.stop()

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- helpers for tests -------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def get(self, path: str, timeout: float = 10.0) -> bytes:
        return client.text(self.url, path, timeout_s=timeout).encode()

    def post_json(self, path: str, body: Any, timeout: float = 60.0) -> Any:
        return client.json_answer(self.url, path, body, method="POST", timeout_s=timeout)

    def __repr__(self) -> str:
        state = "running" if self._server is not None else "stopped"
        return f"VLLMServer({self.model_dir}, url={self.url or '-'}, {state})"
