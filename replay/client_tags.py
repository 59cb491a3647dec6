"""What a replayed client tags each call with (``--client-tags``): one rule for every backend.

An agent's client tags each request in ``vllm_xargs`` with its ``program_id``, the
``tool`` the agent will run after the answer and ``is_last`` on the program's last call
(docs/deploy.md, "Tag your agent's calls"). A client often cannot know the last two
before the model has answered, so a replay can tag as such a client does:

- ``full``: as the trace says (each call names the tool that follows it; the last call
  says ``is_last``);
- ``tool``: tools as the trace says, but no call says ``is_last`` (the last call looks like
  one more call, tagged with its trace tool: normally none);
- ``none``: the program alone (no tool, no ``is_last``);
- ``session``: the program alone, by the ``X-Session-ID`` header only: the live client's
  body carries no ``vllm_xargs`` and no ``return_token_ids`` (it reads the answer's token
  ids from ``logprobs``, which a server started with vLLM's ``--return-tokens-as-token-ids``
  writes as ``token_id:N``), so vllm-router's ``kv_aware`` credits it with its cached
  prefix (:mod:`replay.fleet.routers.kv_credit`). The engine's plugin takes the header's
  session for the program, so the scheduler sees what it sees under ``none``: the
  simulators tag such a call as ``none`` does.

:func:`tagged` is the rule, applied where a request's tags are made: the fast
backend's requests (:func:`replay.sim.arriving`, one engine and a fleet's replicas, and
so the vLLM fleet's), the vLLM backend's single engine
(:func:`replay.vllmsim.sent_call.call_request`) and the live client
(:mod:`replay.live.driver`); :func:`vllm_xargs` is the body's ``vllm_xargs`` those send.
The evaluation-only oracle reads its own table of the trace's pauses, not the tags.
"""

from __future__ import annotations

from typing import Any

from ttlctl.errors import ConfigError

#: ``--client-tags``'s choices, the default first
CLIENT_TAGS = ("full", "tool", "none", "session")
FULL = CLIENT_TAGS[0]
#: the program by the ``X-Session-ID`` header alone (no ``vllm_xargs`` in the live body)
SESSION = CLIENT_TAGS[3]


def check(mode: str) -> str:
    """``mode`` when it is one of :data:`CLIENT_TAGS`; else :class:`ConfigError`, one line."""
    if mode not in CLIENT_TAGS:
        raise ConfigError(f"--client-tags must be one of {', '.join(CLIENT_TAGS)}, got {mode!r}")
    return mode


def tagged(tool: str | None, is_last: bool, mode: str) -> tuple[str | None, bool]:
    """The (tool, is_last) a client tagging as ``mode`` sends for a call the trace says is
    followed by ``tool`` and is (``is_last``) or not its program's last."""
    check(mode)
    if mode in ("none", SESSION):
        return None, False
    if mode == "tool":
        return tool, False
    return tool, is_last


def vllm_xargs(program_id: str, tool: str | None, is_last: bool, mode: str) -> dict[str, Any]:
    """The request's ``vllm_xargs``, tagged as ``mode`` (:func:`tagged`): ``program_id``;
    ``is_last`` (0/1) where the client says it (``full``); the tool on a call that is not
    the last, when there is one. Under ``session`` what the engine's plugin reads from the
    header (the program alone): the live body sends none (:func:`in_body`)."""
    tool, is_last = tagged(tool, is_last, mode)
    xargs: dict[str, Any] = {"program_id": program_id}
    if mode == FULL:
        xargs["is_last"] = int(is_last)
    if tool and not is_last:
        xargs["tool"] = tool
    return xargs


def in_body(mode: str) -> bool:
    """Whether a live request tagged as ``mode`` carries its tags (and asks for its
    answer's token ids) in the body; False under ``session``: the header alone."""
    return check(mode) != SESSION
