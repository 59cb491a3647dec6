"""The first program a shell command runs: the ``tool`` of an agent's shell action.

The command's first word after skipping leading environment assignments (``FOO=1``), the
wrappers ``sudo``, ``env``, ``time``, ``nohup`` (with their ``-options``) and ``timeout
[-options] N``, any number of leading ``cd DIR &&`` / ``cd DIR;`` prefixes, ``# comment``
lines and a leading ``(`` or ``{``; a command that is only ``cd DIR`` gives ``cd``. The word
is kept as written (``./tests/runtests.py``, ``/usr/bin/python3``). Used by the
mini-swe-agent and SWE-agent readers.
"""

from __future__ import annotations

import re
import shlex

_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_DURATION = re.compile(r"^\d+(?:\.\d+)?[smhd]?$")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "|&"})
_OPENERS = frozenset({"(", "{", "!"})
_WRAPPERS = frozenset({"sudo", "env", "time", "nohup"})
#: Tokens looked at, at most, to find the first program.
_MAX_TOKENS = 200


def first_program(command: str) -> str | None:
    """The first program ``command`` runs (the rule in the module docstring), or None."""
    words = _shell_words(command)
    i, n = 0, len(words)
    while i < n:
        word = words[i]
        if word in _SEPARATORS or word in _OPENERS or _ASSIGN.match(word):
            i += 1
            continue
        if word in _WRAPPERS or word == "timeout":
            i += 1
            while i < n and words[i].startswith("-"):
                i += 1
            while word == "env" and i < n and _ASSIGN.match(words[i]):
                i += 1
            if word == "timeout" and i < n and _DURATION.match(words[i]):
                i += 1
            continue
        if word == "cd":
            j = i + 1
            while j < n and words[j] not in _SEPARATORS:
                j += 1
            if j < n and words[j] in ("&&", ";"):
                i = j + 1
                continue
            return "cd"
        return word
    return None


def _shell_words(command: str) -> list[str]:
    """Shell words and operators of ``command``: newlines read as ``;``, comment lines dropped."""
    lines = command.replace("\r", "").replace("\\\n", " ").split("\n")
    text = " ; ".join(line for line in lines if not line.lstrip().startswith("#"))
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = ""
        words: list[str] = []
        for word in lexer:
            words.append(word)
            if len(words) >= _MAX_TOKENS:
                break
        return words
    except ValueError:  # unbalanced quotes: split on blanks and operators instead
        return re.findall(r"&&|\|\||[;&|(){}]|[^\s;&|()]+", text)[:_MAX_TOKENS]
