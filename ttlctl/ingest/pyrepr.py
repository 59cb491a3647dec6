"""Python-repr text read back into values: how LiteLLM's logs store messages and
responses (the ``str()`` of a dict or of a provider's response object).

:func:`as_object` tries JSON, then :func:`ast.literal_eval`, then a tolerant parser
(:func:`parse_repr`) that also reads object reprs (``Name(a, k=v)``, ``<… object at 0x…>``).
"""

from __future__ import annotations

import ast
import io
import json
import tokenize
from typing import Any

# ---------------------------------------------------------------- values


def as_object(value: Any) -> Any:
    """A dict/list from a dict/list, JSON text or Python repr text; else None."""
    if value is None or isinstance(value, (dict, list)):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    try:
        return parse_repr(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- tolerant repr parser

_SKIP = {
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.COMMENT,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}
_CONSTANTS: dict[str, Any] = {
    "True": True,
    "False": False,
    "None": None,
    "inf": float("inf"),
    "nan": float("nan"),
}


def parse_repr(text: str) -> Any:
    """Read a Python repr that may contain object reprs; ValueError when it cannot.

    ``Name(a, k=v)`` becomes ``{"__type__": "Name", "k": v, "__args__": [a]}``,
    ``<… object at 0x…>`` becomes its text, tuples and sets become lists.
    """
    try:
        toks = [
            t
            for t in tokenize.generate_tokens(io.StringIO(text.strip()).readline)
            if t.type not in _SKIP
        ]
    except (tokenize.TokenError, SyntaxError) as exc:
        raise ValueError(f"cannot tokenize: {exc}") from None
    for tok in toks:
        if tok.type == tokenize.ERRORTOKEN and not tok.string.isspace():
            raise ValueError(f"unexpected {tok.string!r}")
    toks = [t for t in toks if t.type != tokenize.ERRORTOKEN]
    parser = _ReprParser(toks)
    try:
        value = parser.value()
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if parser.pos != len(toks):
        raise ValueError(f"trailing text at {toks[parser.pos].string!r}")
    return value


class _ReprParser:
    def __init__(self, toks: list[tokenize.TokenInfo]) -> None:
        self.toks = toks
        self.pos = 0

    def peek(self) -> tokenize.TokenInfo | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self) -> tokenize.TokenInfo:
        tok = self.peek()
        if tok is None:
            raise ValueError("unexpected end")
        self.pos += 1
        return tok

    def is_op(self, op: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.type == tokenize.OP and tok.string == op

    def expect(self, op: str) -> None:
        if not self.is_op(op):
            tok = self.peek()
            raise ValueError(f"expected {op!r}, got {tok.string if tok else 'end'!r}")
        self.pos += 1

    def value(self) -> Any:
        tok = self.take()
        if tok.type == tokenize.STRING:
            parts = [_string(tok.string)]
            while (nxt := self.peek()) is not None and nxt.type == tokenize.STRING:
                parts.append(_string(self.take().string))
            return "".join(parts)
        if tok.type == tokenize.NUMBER:
            return _literal(tok.string)
        if tok.type == tokenize.OP:
            return self._op_value(tok.string)
        if tok.type == tokenize.NAME:
            name = tok.string
            while self.is_op(".") and (nxt := self._peek_at(1)) and nxt.type == tokenize.NAME:
                self.pos += 1
                name += "." + self.take().string
            if self.is_op("("):
                self.pos += 1
                return self._call(name)
            return _CONSTANTS.get(name, name)
        raise ValueError(f"unexpected {tok.string!r}")

    def _peek_at(self, offset: int) -> tokenize.TokenInfo | None:
        index = self.pos + offset
        return self.toks[index] if index < len(self.toks) else None

    def _op_value(self, op: str) -> Any:
        if op in ("-", "+"):
            number = self.value()
            if not isinstance(number, (int, float)):
                raise ValueError("sign before a non-number")
            return -number if op == "-" else number
        if op == "[":
            return self._items("]")
        if op == "(":
            items = self._items(")")
            return items
        if op == "{":
            return self._brace()
        if op == "<":
            depth, parts = 1, ["<"]
            while depth:
                tok = self.take()
                depth += tok.string == "<"
                depth -= tok.string == ">"
                parts.append(tok.string)
            return " ".join(parts)
        if op == "...":
            return None
        raise ValueError(f"unexpected {op!r}")

    def _items(self, close: str) -> list[Any]:
        out: list[Any] = []
        while not self.is_op(close):
            out.append(self.value())
            if not self.is_op(close):
                self.expect(",")
        self.pos += 1
        return out

    def _brace(self) -> Any:
        if self.is_op("}"):
            self.pos += 1
            return {}
        first = self.value()
        if not self.is_op(":"):
            rest = [first]
            while not self.is_op("}"):
                self.expect(",")
                if self.is_op("}"):
                    break
                rest.append(self.value())
            self.pos += 1
            return rest
        out: dict[Any, Any] = {}
        key = first
        while True:
            self.expect(":")
            out[_hashable(key)] = self.value()
            if self.is_op("}"):
                break
            self.expect(",")
            if self.is_op("}"):
                break
            key = self.value()
        self.pos += 1
        return out

    def _call(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {"__type__": name}
        args: list[Any] = []
        while not self.is_op(")"):
            tok, nxt = self.peek(), self._peek_at(1)
            if (
                tok is not None
                and tok.type == tokenize.NAME
                and nxt is not None
                and nxt.type == tokenize.OP
                and nxt.string == "="
            ):
                self.pos += 2
                out[tok.string] = self.value()
            else:
                args.append(self.value())
            if not self.is_op(")"):
                self.expect(",")
        self.pos += 1
        if args:
            out["__args__"] = args
        return out


def _string(token: str) -> str:
    value = ast.literal_eval(token)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _literal(token: str) -> Any:
    try:
        return ast.literal_eval(token)
    except (ValueError, SyntaxError):
        raise ValueError(f"bad number {token!r}") from None


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        return json.dumps(key, default=str)
    return key
