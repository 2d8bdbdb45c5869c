"""Turn / trajectory parser for the ParaVT output grammar.

Grammar (the output grammar of the ParaVT paper, Yang et al., 2026)::

    <think>...</think>
    <tool_call>{"name": "crop_video", "arguments": {...}}</tool_call>   (zero or more, parallel)
    <tool_code>crop_video(start_time=10, end_time=20)</tool_code>        (Python-call form)
    ... <tool_response>...</tool_response> (inserted by the environment) ...
    <think>...</think><answer>...</answer>

``parse_turn`` is pure, never raises on any ``str`` and never evaluates model text:
``<tool_call>`` bodies go through ``json.loads``; ``<tool_code>`` bodies through
``ast.parse(mode="eval")`` followed by a whitelist walk (a single ``name(...)`` call whose
arguments are plain literals).  Bodies longer than ``MAX_CALL_CHARS`` are rejected without
being parsed, and at most ``MAX_TOOL_CALLS`` call bodies are parsed per text, so
megabyte inputs stay fast.  Tag scanning is one linear regex pass (no backtracking).

It works on a single assistant turn or on a whole trajectory (all turns concatenated with
the environment's ``<tool_response>`` blocks in between).  The *body* of a closed
``<tool_response>`` block is opaque: tags inside it (e.g. a sub-agent summary that itself
contains ``<answer>``) are environment text, not model structure, and are ignored.

Pairing rule: each tag type is paired independently and non-nested.  A ``<X>`` that is
followed by another ``<X>`` before any ``</X>`` is *unclosed*; a ``</X>`` with no open ``<X>``
is *stray*.  The body of an unclosed block runs to the next recognised tag (or the end).

Example::

    >>> t = parse_turn('<think>\\nneed a closer look</think>'
    ...                '<tool_call>{"name": "crop_video", "arguments": {"start_time": 3, "end_time": 9}}</tool_call>')
    >>> t.think_closed, t.think_before_first_tool, t.tool_calls[0].arguments
    (True, True, {'start_time': 3, 'end_time': 9})
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "TOOL_NAME",
    "MAX_CALL_CHARS",
    "MAX_TOOL_CALLS",
    "MAX_TAGS",
    "KNOWN_TAGS",
    "Block",
    "ToolCall",
    "ParsedTurn",
    "parse_turn",
    "parse_json_call",
    "parse_python_call",
]

TOOL_NAME = "crop_video"
MAX_CALL_CHARS = 10_000     # longest tool-call body we attempt to parse
MAX_TOOL_CALLS = 64         # call bodies parsed per text; later ones get an error
MAX_ERRORS = 50             # error messages kept per text
MAX_TAGS = 10_000           # tags scanned per text; the rest is ignored (and flagged)


class _Errors(list):
    """List of error messages that keeps the first MAX_ERRORS and only counts the rest."""

    dropped = 0

    @property
    def full(self) -> bool:
        return len(self) >= MAX_ERRORS

    def append(self, msg: str) -> None:
        if len(self) < MAX_ERRORS:
            super().append(msg)
        else:
            self.dropped += 1

    def final(self) -> tuple[str, ...]:
        return tuple(self) + ((f"... {self.dropped} more errors",) if self.dropped else ())


# Tag pairs that count for ``tags_balanced`` (tool_response is environment text).
KNOWN_TAGS = ("think", "tool_call", "tool_code", "answer")
_TAG_RE = re.compile(r"<(/?)(think|tool_call|tool_code|answer|tool_response)>")

# Positional argument layouts for the Python-call form.
_POSITIONAL = {2: ("start_time", "end_time"), 3: ("video_path", "start_time", "end_time")}
_LITERAL_TYPES = (int, float, str, bool, type(None))


class Block(NamedTuple):
    """One tag block found in the text (a NamedTuple: cheap to build by the 100k).

    ``start`` is the index of the opening tag; ``end`` the index just past the closing tag
    (closed) or the end of the body (unclosed).  ``body`` is the raw text between the tags.
    """

    tag: str
    body: str
    start: int
    end: int
    closed: bool


@dataclass(frozen=True)
class ToolCall:
    name: str | None            # None iff unparseable (then ``error`` says why)
    arguments: dict             # parsed literal arguments ({} if unparseable)
    raw: str                    # the text inside the block
    syntax: str                 # "json" (<tool_call>) or "python" (<tool_code>)
    error: str | None           # human-readable problem, None iff parseable

    @property
    def parseable(self) -> bool:
        return self.name is not None


@dataclass(frozen=True)
class ParsedTurn:
    text: str
    think: str | None           # raw body of the first closed <think> block
    think_opened: bool          # any <think> tag
    think_closed: bool          # at least one closed <think>...</think> block
    tool_calls: tuple[ToolCall, ...]
    answer: str | None          # body of the LAST closed <answer> block, stripped
    answer_opened: bool
    answer_closed: bool
    think_before_first_tool: bool   # a closed think block ends before the first tool-call block opens
    tags_balanced: bool
    errors: tuple[str, ...]
    # --- extras (derived structure, handy for rewards / logging) ---
    think_unclosed: bool = False            # some <think> was never closed
    think_then_answer: bool = False         # a closed think ends before a closed, non-empty answer starts
    thinks: tuple[str, ...] = ()            # raw bodies of all closed think blocks
    answers: tuple[str, ...] = ()           # stripped bodies of all closed answer blocks
    tool_responses: tuple[str, ...] = ()    # raw bodies of closed <tool_response> blocks
    unclosed_tags: tuple[str, ...] = ()     # tag names with an unclosed opening, first-seen order
    blocks: tuple[Block, ...] = field(default=(), repr=False)

    @property
    def parseable_tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(c for c in self.tool_calls if c.name is not None)

    @property
    def has_tool_response(self) -> bool:
        return bool(self.tool_responses)


# ---------------------------------------------------------------------------
# tool-call bodies
# ---------------------------------------------------------------------------

def _strip_fence(body: str) -> str:
    """Remove a surrounding Markdown code fence (```json ... ``` / ```python ... ```)."""
    s = body.strip()
    if s.startswith("```"):
        nl = s.find("\n")
        s = s[nl + 1:] if nl >= 0 else s[3:]
        if s.rstrip().endswith("```"):
            s = s.rstrip()[:-3]
        s = s.strip()
    return s


def _problem(e: BaseException) -> str:
    """A short description of a parser exception, fit for an in-band error message."""
    text = str(e)
    if "integer string conversion" in text:  # Python's int-digit limit (4300 digits by default)
        return "a number has too many digits"
    return getattr(e, "msg", None) or type(e).__name__


def _bad(raw: str, syntax: str, msg: str) -> ToolCall:
    return ToolCall(name=None, arguments={}, raw=raw, syntax=syntax, error=msg)


def _prepare_body(raw, syntax: str, tag: str) -> tuple[str, ToolCall | None]:
    """The block body without code fences, or the error call for a non-text, huge or empty body."""
    if not isinstance(raw, str):
        return "", _bad("", syntax, f"{tag} body is not text")
    if len(raw) > MAX_CALL_CHARS:
        return "", _bad(raw, syntax, f"{tag} body too long ({len(raw)} > {MAX_CALL_CHARS} chars)")
    body = _strip_fence(raw)
    return body, (None if body else _bad(raw, syntax, f"empty {tag}"))


def parse_json_call(raw: str) -> ToolCall:
    """Parse a ``<tool_call>`` body: ``{"name": str, "arguments": {...}}``.

    ``arguments`` may also be a JSON string holding an object, or be given under
    ``"parameters"``; a missing ``arguments`` means ``{}``.
    """
    syntax = "json"
    body, bad = _prepare_body(raw, syntax, "tool_call")
    if bad is not None:
        return bad
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return _bad(raw, syntax, f"tool_call is not valid JSON: {e.msg} at char {e.pos}")
    except Exception as e:  # RecursionError on deep nesting, ValueError on a 5000-digit number
        return _bad(raw, syntax, f"tool_call is not valid JSON: {_problem(e)}")
    if not isinstance(obj, dict):
        return _bad(raw, syntax, f"tool_call JSON is a {type(obj).__name__}, expected an object")
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return _bad(raw, syntax, 'tool_call JSON has no string "name"')
    if "arguments" in obj:
        args = obj["arguments"]
    else:
        args = obj.get("parameters", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except Exception as e:
            return _bad(raw, syntax, f'tool_call "arguments" string is not valid JSON: {_problem(e)}')
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return _bad(raw, syntax, f'tool_call "arguments" is a {type(args).__name__}, expected an object')
    return ToolCall(name=name.strip(), arguments=args, raw=raw, syntax=syntax, error=None)


def _literal(node: ast.AST):
    """Value of a whitelisted literal node, else raise ValueError (never evaluates code)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, _LITERAL_TYPES):
            return node.value
        raise ValueError(f"unsupported constant type {type(node.value).__name__}")
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, (int, float))
            and not isinstance(node.operand.value, bool)):
        return ast.literal_eval(node)   # only ever a signed number here
    raise ValueError(f"not a literal ({type(node).__name__})")


def parse_python_call(raw: str) -> ToolCall:
    """Parse a ``<tool_code>`` body like ``crop_video(start_time=10, end_time=20)``.

    Accepted: exactly one call ``name(...)`` whose func is a bare name and whose arguments
    are literals (numbers, strings, bools, None, signed numbers).  Positional arguments map
    to (start_time, end_time) if 2 are given, (video_path, start_time, end_time) if 3.
    Nothing is ever executed.
    """
    syntax = "python"
    body, bad = _prepare_body(raw, syntax, "tool_code")
    if bad is not None:
        return bad
    try:
        tree = ast.parse(body, mode="eval")
    except Exception as e:  # SyntaxError; MemoryError / RecursionError on pathological nesting
        return _bad(raw, syntax, f"tool_code is not a valid Python expression: {_problem(e)}")
    call = tree.body
    if not isinstance(call, ast.Call):
        return _bad(raw, syntax, f"tool_code must be a single function call, got {type(call).__name__}")
    if not isinstance(call.func, ast.Name):
        return _bad(raw, syntax,
                    f"tool_code must call a plain function name, got {type(call.func).__name__}")
    name = call.func.id
    args: dict = {}
    for kw in call.keywords:
        if kw.arg is None:
            return _bad(raw, syntax, "tool_code: **kwargs are not allowed")
        if kw.arg in args:
            return _bad(raw, syntax, f"tool_code: argument {kw.arg!r} given twice")
        try:
            args[kw.arg] = _literal(kw.value)
        except Exception as e:
            return _bad(raw, syntax, f"tool_code argument {kw.arg!r} is {e}")
    if call.args:
        if any(isinstance(a, ast.Starred) for a in call.args):
            return _bad(raw, syntax, "tool_code: *args are not allowed")
        layout = _POSITIONAL.get(len(call.args))
        if layout is None:
            return _bad(raw, syntax,
                        f"tool_code: {len(call.args)} positional arguments (expected 0, 2 or 3)")
        for pname, node in zip(layout, call.args):
            if pname in args:
                return _bad(raw, syntax, f"tool_code: argument {pname!r} given twice")
            try:
                args[pname] = _literal(node)
            except Exception as e:
                return _bad(raw, syntax, f"tool_code positional argument {pname!r} is {e}")
    return ToolCall(name=name, arguments=args, raw=raw, syntax=syntax, error=None)


# ---------------------------------------------------------------------------
# tag scanning
# ---------------------------------------------------------------------------

def _scan(text: str):
    """Return (tokens, response_blocks, errors, truncated_message_or_None).

    tokens: list of (pos, end, is_close, tag) for tags outside closed tool_response blocks.
    Only the first MAX_TAGS tags are looked at (real trajectories have a few dozen).
    """
    tokens = []
    responses: list[Block] = []
    errors = _Errors()
    it = _TAG_RE.finditer(text)
    pending_resp = None  # (start, body_start) of an open <tool_response>
    resp_tokens: list = []  # tokens seen since the open <tool_response>
    truncated = None  # message when the tag limit was hit
    for n, m in enumerate(it):
        if n >= MAX_TAGS:
            truncated = f"more than {MAX_TAGS} tags; tags from char {m.start()} on are ignored"
            break
        is_close = m.group(1) == "/"
        tag = m.group(2)
        tok = (m.start(), m.end(), is_close, tag)
        if pending_resp is not None:
            if tag == "tool_response" and is_close:
                s, bs = pending_resp
                responses.append(Block("tool_response", text[bs:m.start()], s, m.end(), True))
                pending_resp, resp_tokens = None, []
            else:
                resp_tokens.append(tok)
            continue
        if tag == "tool_response":
            if is_close:
                errors.append(f"stray </tool_response> at char {m.start()}")
            else:
                pending_resp = (m.start(), m.end())
            continue
        tokens.append(tok)
    if pending_resp is not None:
        # Unclosed response: ignore the tag itself, keep scanning what followed it.
        errors.append(f"unclosed <tool_response> at char {pending_resp[0]}")
        for tok in resp_tokens:
            if tok[3] == "tool_response":
                if tok[2]:
                    errors.append(f"stray </tool_response> at char {tok[0]}")
                continue  # a second, also-unclosed <tool_response>
            tokens.append(tok)
    return tokens, responses, errors, truncated


def parse_turn(text: str) -> ParsedTurn:
    """Parse one assistant turn or a whole trajectory. Never raises on any ``str``."""
    if not isinstance(text, str):
        text = ""
    tokens, responses, errors, truncated = _scan(text)
    n_tok = len(tokens)

    blocks: list[Block] = []
    open_at: dict[str, int | None] = {t: None for t in KNOWN_TAGS}  # index into tokens
    depth = {t: 0 for t in KNOWN_TAGS}
    opens = {t: 0 for t in KNOWN_TAGS}
    closes = {t: 0 for t in KNOWN_TAGS}
    went_negative = {t: False for t in KNOWN_TAGS}
    unclosed: list[str] = []

    def _unclosed_block(i: int) -> Block:
        pos, end, _, tag = tokens[i]
        body_end = tokens[i + 1][0] if i + 1 < n_tok else len(text)
        if tag not in unclosed:
            unclosed.append(tag)
        if errors.full:
            errors.dropped += 1
        else:
            errors.append(f"unclosed <{tag}> at char {pos}")
        return Block(tag, text[end:body_end], pos, body_end, False)

    for i, (pos, end, is_close, tag) in enumerate(tokens):
        if is_close:
            closes[tag] += 1
            depth[tag] -= 1
            if depth[tag] < 0:
                went_negative[tag] = True
            j = open_at[tag]
            if j is None:
                errors.append(f"stray </{tag}> at char {pos}")
            else:
                blocks.append(Block(tag, text[tokens[j][1]:pos], tokens[j][0], end, True))
                open_at[tag] = None
        else:
            opens[tag] += 1
            depth[tag] += 1
            if open_at[tag] is not None:
                blocks.append(_unclosed_block(open_at[tag]))
            open_at[tag] = i
    for tag in KNOWN_TAGS:
        if open_at[tag] is not None:
            blocks.append(_unclosed_block(open_at[tag]))
    blocks.sort(key=lambda b: b.start)

    tags_balanced = truncated is None and all(
        opens[t] == closes[t] and not went_negative[t] for t in KNOWN_TAGS)

    # --- tool calls, textual order, both syntaxes ---
    tool_calls: list[ToolCall] = []
    n_parsed = 0
    for b in blocks:
        if b.tag not in ("tool_call", "tool_code"):
            continue
        syntax = "json" if b.tag == "tool_call" else "python"
        if not b.closed:
            tc = _bad(b.body, syntax, f"unclosed <{b.tag}>")
        elif n_parsed >= MAX_TOOL_CALLS:
            tc = _bad(b.body, syntax, f"too many tool calls (only the first {MAX_TOOL_CALLS} are parsed)")
        else:
            n_parsed += 1
            tc = parse_json_call(b.body) if syntax == "json" else parse_python_call(b.body)
        if tc.error is not None and b.closed:
            errors.append(f"{b.tag} #{len(tool_calls) + 1}: {tc.error}")
        tool_calls.append(tc)

    think_blocks = [b for b in blocks if b.tag == "think"]
    closed_thinks = [b for b in think_blocks if b.closed]
    answer_blocks = [b for b in blocks if b.tag == "answer"]
    closed_answers = [b for b in answer_blocks if b.closed]
    call_blocks = [b for b in blocks if b.tag in ("tool_call", "tool_code")]

    think_before_first_tool = bool(call_blocks) and any(
        b.end <= call_blocks[0].start for b in closed_thinks)
    nonempty_closed_answers = [b for b in closed_answers if b.body.strip()]
    think_then_answer = bool(closed_thinks) and bool(nonempty_closed_answers) and (
        closed_thinks[0].end <= nonempty_closed_answers[-1].start)

    return ParsedTurn(
        text=text,
        think=closed_thinks[0].body if closed_thinks else None,
        think_opened=opens["think"] > 0,
        think_closed=bool(closed_thinks),
        tool_calls=tuple(tool_calls),
        answer=closed_answers[-1].body.strip() if closed_answers else None,
        answer_opened=opens["answer"] > 0,
        answer_closed=bool(closed_answers),
        think_before_first_tool=think_before_first_tool,
        tags_balanced=tags_balanced,
        errors=((truncated,) if truncated else ()) + errors.final(),
        think_unclosed=any(not b.closed for b in think_blocks),
        think_then_answer=think_then_answer,
        thinks=tuple(b.body for b in closed_thinks),
        answers=tuple(b.body.strip() for b in closed_answers),
        tool_responses=tuple(b.body for b in responses),
        unclosed_tags=tuple(unclosed),
        blocks=tuple(blocks),
    )
