"""The reward: R = R_acc + w_fmt * R_fmt + R_tool, rule for rule the released ParaVT reward.

Pure and standalone (stdlib only).  With ``RewardConfig()`` (the PARA-GRPO configuration of the
released code: answer suffix on, lambda_anchor 0.5, penalty 0.3, R_tool on, w_fmt 1.0) and
``RewardConfig(answer_suffix=False, anchor_lambda=0.0)`` (vanilla GRPO, R_tool still on as in the
release), :func:`score` returns the numbers the released code returns for the same text, for
every text.  Where the released code raises (a malformed number such as "1.2.3" in a grounding
answer, JSON nested past the recursion limit) that term scores 0 here; where its regexes take
quadratic time (long digit runs, thousands of unclosed tags) ours scan in linear time.

Example::

    >>> from paravt_env.rewards import score
    >>> r = score("<think>\\nThe star is red, option B.</think><answer>B</answer>",
    ...           ground_truth="B", answer_type="mcq")
    >>> r.accuracy, r.format, r.tool, r.total, r.correct
    (1.0, 1.0, 0.0, 2.0, True)

The rules (``T`` is the scored text; "present" means a substring of ``T``):

* *substantive think*: the first ``<think>``'s body has >= 10 characters after strip.  Its body
  runs to the first ``</think>`` after it; if there is none, to the first ``<tool_``,
  ``<answer>``, ``<|im_end|>`` or the end.
* *non-empty answer*: some ``<answer>...</answer>`` pair (each ``<answer>`` paired with the next
  ``</answer>``) encloses non-whitespace.
* *parseable call*: a ``<tool_call>`` body (to the next ``</tool_call>`` or the end) that parses
  as a JSON object with a ``"name"`` key, or a ``<tool_code>`` body with a line that contains
  ``(`` and does not start with ``#``; bodies starting with ``<|im_end|>`` do not count.
* R_fmt: think +0.2 / +0.3 (answer-suffix / default weights); if a non-empty answer:
  ``<answer>`` +0.3 / +0.2 and ``</answer>`` +0.2 / +0.1.  If lambda > 0, lambda times
  [+0.4 if ``</think>`` present and substantive think; +0.3 if that and a non-empty answer and
  ``</answer>``; -gamma if ``<think>`` present and ``</think>`` absent].  +0.3 if substantive
  think, a parseable call and the first ``<think>`` before the first ``<tool_call>`` /
  ``<tool_code>``.  +0.1 if the score so far is > 0 and ``think``, ``tool_call``, ``tool_code``
  and ``answer`` each have as many opening as closing tags.  Capped at 1.0, never floored:
  an unclosed think with nothing else earns -lambda * gamma.
* R_tool: 0 without a parseable call, else 0.1, or 0.3 if the tool ran (``tool_executed``;
  ``None`` = ``<tool_response>`` present), plus 0.5 if R_acc > 0.
* R_acc of ``extract_answer(T)`` against the ground truth: 1 if equal after
  :func:`normalize_answer`; else by question type: ``mcq`` letter patterns (ground truth one
  letter A-D), ``tvg`` / ``grounding`` temporal IoU of the first ``"s, e"`` pair (reversed or
  zero-length intervals score 0), anything else (``oe`` / ``open``) token F1 on token sets,
  or 0 in ``exact`` mode, or a judge's score in ``llm`` mode.
* A text with >= 5 ``<|im_start|>`` and fewer than 300 characters scores 0 everywhere.

``correct`` in :class:`RewardBreakdown`: mcq R_acc == 1, otherwise R_acc >= 0.5.

The two switches below are ours, off by default (each changes numbers, so ablation rows that
compare to the paper leave them off):

* ``multi_turn_rules``: our environment scores a whole trajectory (every assistant turn with its
  prefilled ``<think>``, and the ``<tool_response>`` blocks).  Read as one response, a closed
  think in one turn hides an unclosed think in another, only the first turn's think is judged,
  text inside tool responses counts as model text, and the fallback answer after the first
  ``</think>`` swallows later turns.  With the switch, the think, anchor, penalty,
  think-before-tool and balance rules are checked in every assistant turn (the text between
  closed ``<tool_response>`` blocks) and must hold in all of them, the answer terms and R_acc
  read the last turn, and R_tool looks for calls in assistant text only (and, when
  ``tool_executed`` is not given, for a closed tool response as proof that a tool ran).  Turns are
  split at tool responses, so every ``<tool_response>`` in the text must be the environment's: the
  env keeps one that the agent writes as ``[tool_response]``.
* ``option_text_match``: multiple-choice answers are matched by option letter or option text
  ("(B)", "The answer is b", "red circle", letters beyond D) instead of the released
  ``\\b[A-D]\\b`` search, which credits "A red star" as option A; articles are kept when
  dropping them would leave nothing, so "The" no longer equals the ground truth "A".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

__all__ = [
    "RewardConfig",
    "RewardBreakdown",
    "COMMON_FORMAT_CONFIG",
    "score",
    "accuracy_reward",
    "format_reward",
    "tool_reward",
    "common_format_reward",
    "extract_answer",
    "normalize_answer",
    "temporal_iou",
    "token_f1",
    "is_correct",
]

ACCURACY_MODES = ("f1", "exact", "llm")
MIN_THINK_CHARS = 10
MAX_OPTION_SCAN = 2000          # option_text_match looks for letter phrases in the first chars only

# (think, <answer>, </answer>) weights
_SUFFIX_WEIGHTS = (0.2, 0.3, 0.2)
_DEFAULT_WEIGHTS = (0.3, 0.2, 0.1)
_ANCHOR_THINK_CLOSED = 0.4
_ANCHOR_FLOW = 0.3
_THINK_BEFORE_TOOL = 0.3
_BALANCED = 0.1
_TOOL_PARSEABLE = 0.1
_TOOL_EXECUTED = 0.3
_TOOL_CORRECT_BONUS = 0.5
_BALANCED_PAIRS = (("<think>", "</think>"), ("<tool_call>", "</tool_call>"),
                   ("<tool_code>", "</tool_code>"), ("<answer>", "</answer>"))
_FORMAT_KEYS = ("format/think", "format/answer_open", "format/answer_close", "format/anchor_think_closed",
                "format/anchor_flow", "format/penalty_unclosed_think", "format/think_before_tool",
                "format/balanced")
_TOOL_KEYS = ("tool/parseable", "tool/executed", "tool/correct_bonus")


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights and switches; the defaults are the released PARA-GRPO configuration.

    format_weight: w_fmt.  answer_suffix: answer-suffix weights (0.2/0.3/0.2) or default
    (0.3/0.2/0.1).  anchor_lambda: lambda_anchor (0 turns the anchor bonus and the penalty
    off).  penalty_gamma: the unclosed-think penalty inside the anchor bonus (0 for the
    "minus penalty" row).  tool_reward: R_tool on/off (off for the "minus R_tool" row).
    accuracy_mode: "f1" (released default), "exact" (open answers by normalised exact match
    only) or "llm" (open answers by ``judge(question, prediction, ground_truth) -> float``).
    multi_turn_rules, option_text_match: see the module docstring; off reproduces the release.
    """

    format_weight: float = 1.0
    answer_suffix: bool = True
    anchor_lambda: float = 0.5
    penalty_gamma: float = 0.3
    tool_reward: bool = True
    accuracy_mode: str = "f1"
    judge: Callable[[str, str, str], float] | None = field(default=None, compare=False)
    multi_turn_rules: bool = False
    option_text_match: bool = False

    def __post_init__(self):
        for name in ("format_weight", "anchor_lambda", "penalty_gamma"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"RewardConfig.{name} must be a finite number, got {v!r}")
        for name in ("answer_suffix", "tool_reward", "multi_turn_rules", "option_text_match"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"RewardConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if self.accuracy_mode not in ACCURACY_MODES:
            raise ValueError(f"RewardConfig.accuracy_mode must be one of {ACCURACY_MODES}, "
                             f"got {self.accuracy_mode!r}")
        if self.accuracy_mode == "llm" and not callable(self.judge):
            raise ValueError("accuracy_mode='llm' needs judge=f(question, prediction, ground_truth) -> float "
                             "(no LLM judge runs offline)")
        if self.judge is not None and self.accuracy_mode != "llm":
            raise ValueError("RewardConfig.judge is only used with accuracy_mode='llm'")


# The released PARA-GRPO format: one format metric for every ablation row, whatever it trains on.
COMMON_FORMAT_CONFIG = RewardConfig()


@dataclass(frozen=True)
class RewardBreakdown:
    """``components`` holds additive terms: ``accuracy``, the ``format/*`` terms (they sum to the
    format reward before its cap at 1.0) and the ``tool/*`` terms (they sum to ``tool``)."""

    accuracy: float
    format: float
    tool: float
    total: float
    components: dict[str, float] = field(default_factory=dict)
    correct: bool = False


# ---------------------------------------------------------------------------
# text helpers (str.find loops: linear time on any input, where the equivalent
# regexes backtrack quadratically on many unclosed tags)
# ---------------------------------------------------------------------------

def _first_think_body(text: str) -> str | None:
    start = text.find("<think>")
    if start < 0:
        return None
    start += len("<think>")
    end = text.find("</think>", start)
    if end < 0:
        ends = [i for i in (text.find(t, start) for t in ("<tool_", "<answer>", "<|im_end|>")) if i >= 0]
        end = min(ends, default=len(text))
    return text[start:end]


def _substantive_think(text: str) -> bool:
    body = _first_think_body(text)
    return body is not None and len(body.strip()) >= MIN_THINK_CHARS


def _pair_bodies(text: str, open_tag: str, close_tag: str, allow_unclosed: bool = False):
    """Bodies of ``open_tag ... close_tag`` pairs, left to right, each open paired with the
    next close; with ``allow_unclosed`` a last open without a close runs to the end."""
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return
        start += len(open_tag)
        end = text.find(close_tag, start)
        if end < 0:
            if allow_unclosed:
                yield text[start:]
            return
        yield text[start:end]
        pos = end + len(close_tag)


def _outside_blocks(text: str, open_tag: str, close_tag: str) -> list[str]:
    """The pieces of ``text`` around its closed ``open_tag ... close_tag`` blocks (each open
    paired with the next close, left to right), so ``len(pieces) - 1`` blocks were cut out."""
    pieces, pos = [], 0
    while True:
        start = text.find(open_tag, pos)
        end = text.find(close_tag, start + len(open_tag)) if start >= 0 else -1
        if end < 0:
            pieces.append(text[pos:])
            return pieces
        pieces.append(text[pos:start])
        pos = end + len(close_tag)


def _has_nonempty_answer(text: str) -> bool:
    return any(body.strip() for body in _pair_bodies(text, "<answer>", "</answer>"))


def _json_call(body: str) -> bool:
    if not body.startswith("{"):        # only an object can carry "name"
        return False
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):   # RecursionError: JSON nested past the interpreter's limit
        return False
    return isinstance(data, dict) and "name" in data


def _python_call(body: str) -> bool:
    return any(line and "(" in line and not line.startswith("#")
               for line in (raw.strip() for raw in body.splitlines()))


def _has_parseable_call(text: str) -> bool:
    for tag, check in (("tool_call", _json_call), ("tool_code", _python_call)):
        for body in _pair_bodies(text, f"<{tag}>", f"</{tag}>", allow_unclosed=True):
            body = body.strip()
            if body and not body.startswith("<|im_end|>") and check(body):
                return True
    return False


def _think_before_tool(text: str) -> bool:
    think = text.find("<think>")
    calls = [i for i in (text.find("<tool_call>"), text.find("<tool_code>")) if i >= 0]
    return think >= 0 and bool(calls) and think < min(calls)


def _tags_balanced(text: str) -> bool:
    return all(text.count(o) == text.count(c) for o, c in _BALANCED_PAIRS)


def _is_degenerate(text: str) -> bool:
    return len(text) < 300 and text.count("<|im_start|>") >= 5


def _assistant_turns(text: str) -> tuple[list[str], bool]:
    """(assistant turns, whether a closed tool response was found): the text around closed
    ``<tool_response>`` blocks, whitespace-only pieces dropped (at least one turn is returned)."""
    pieces = _outside_blocks(text, "<tool_response>", "</tool_response>")
    turns = [p for p in pieces if p.strip()]
    return (turns or [pieces[-1]]), len(pieces) > 1


# ---------------------------------------------------------------------------
# answer extraction and accuracy
# ---------------------------------------------------------------------------

def extract_answer(text: str) -> str:
    """The prediction, as the released code reads it: the first closed ``<answer>`` body
    (stripped, possibly empty); else the text after the first ``</think>`` without closed
    tool_call / tool_code / tool_response blocks and chat tokens, if any is left; else the last
    non-empty line that does not start with ``<|im_`` or ``<tool_``; else ""."""
    for body in _pair_bodies(text, "<answer>", "</answer>"):
        return body.strip()
    if "</think>" in text:
        tail = text.split("</think>", 1)[1]
        for tag in ("tool_call", "tool_code", "tool_response"):
            tail = "".join(_outside_blocks(tail, f"<{tag}>", f"</{tag}>"))
        tail = tail.replace("<|im_end|>", "").replace("<|im_start|>", "").strip()
        if tail:
            return tail
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line and not line.startswith(("<|im_", "<tool_")):
            return line
    return ""


_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT_RE = re.compile(r"[^\w\s]")


def normalize_answer(s: str) -> str:
    """Lowercase, articles -> space, then every non-word non-space character deleted (so
    "12.5" -> "125" and "the-end" -> "end"), whitespace collapsed: the released rule."""
    s = _ARTICLES_RE.sub(" ", s.strip().lower())
    return " ".join(_PUNCT_RE.sub("", s).split())


def token_f1(prediction: str, ground_truth: str) -> float:
    """Token F1 as released: the overlap is counted on token *sets*, precision and recall
    divide by the token *counts* of the normalised strings."""
    return _f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def _f1(p: list[str], g: list[str]) -> float:
    if not p or not g:
        return 0.0
    common = len(set(p) & set(g))
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


_token_f1 = token_f1   # the older private name, still imported by agents/lmm/evaluate_lmm.py


_MCQ_PATTERNS = (       # tried in order; any first hit equal to the ground truth counts
    re.compile(r"^\(?([A-D])\)?$"),
    re.compile(r"[Tt]he answer is\s*\(?([A-D])"),
    re.compile(r"[Oo]ption\s*\(?([A-D])"),
    re.compile(r"^([A-D])[.):]"),
    re.compile(r"\b([A-D])\b"),
)


def _mcq_released(pred: str, gt: str) -> float:
    gt = gt.strip().upper()
    if len(gt) != 1 or gt not in "ABCD":
        return 0.0
    pred = pred.strip()
    if pred.upper() == gt:
        return 1.0
    for pattern in _MCQ_PATTERNS:
        m = pattern.search(pred)
        if m and m.group(1) == gt:
            return 1.0
    return 0.0


# --- option_text_match: letters A-Z, option texts, "the answer is (b)" ---
_OPT_PREFIX_RE = re.compile(r"^\s*[\(\[]?([A-Za-z])[\)\]\.:]\s*(.*)$", re.DOTALL)
_LETTER_ONLY_RE = re.compile(r"^\s*[\(\[]?([A-Za-z])[\)\]]?[\.:]?\s*$")
_LETTER_LEAD_RE = re.compile(r"^\s*[\(\[]?([A-Z])[\)\]\.:](?:\s|$)")
_LETTER_PHRASE_RE = re.compile(   # possessive quantifiers: no backtracking blow-up
    r"\b(?i:answer|option|choice)\b(?:\s*+(?i:is)\b)?(?:\s*+:)?(?:\s*+(?i:option)\b)?\s*+[\(\[]?"
    r"(?:([A-Z])\b|([a-z])(?=[\)\]\.:]|\s*+$))")
_LETTER_PAREN_RE = re.compile(r"\(([A-Z])\)")
_PUNCT_SPACE_RE = re.compile(r"[^\w\s]|_")


def _plain(s: str) -> str:
    """Lowercase, punctuation -> space, articles dropped unless that leaves nothing."""
    s = _PUNCT_SPACE_RE.sub(" ", s.lower())
    kept = _ARTICLES_RE.sub(" ", s)
    return " ".join((kept if kept.split() else s).split())


def _options_table(options) -> list[tuple[str, str]]:
    """[(letter, option text)] from "A. text" style or bare option texts (at most 26)."""
    if options is None or isinstance(options, (str, bytes)):
        return []
    try:
        opts = [o if isinstance(o, str) else str(o) for o in list(options)[:26]]
    except TypeError:       # not a sequence: no option table
        return []
    if not opts:
        return []
    prefixed = [_OPT_PREFIX_RE.match(o) for o in opts]
    if all(prefixed):
        return [(m.group(1).upper(), m.group(2).strip()) for m in prefixed]
    return [(chr(ord("A") + i), o.strip()) for i, o in enumerate(opts)]


def _pred_letter(pred: str, table: list[tuple[str, str]]) -> str | None:
    valid = {letter for letter, _ in table}

    def ok(letter):
        letter = letter.upper()
        return letter if (not valid or letter in valid) else None

    head = pred[:MAX_OPTION_SCAN]
    for rx in (_LETTER_ONLY_RE, _LETTER_LEAD_RE):
        m = rx.match(head)
        if m and ok(m.group(1)):
            return ok(m.group(1))
    for m in _LETTER_PHRASE_RE.finditer(head):
        letter = ok(m.group(1) or m.group(2))
        if letter:
            return letter
    plain = _plain(pred)
    if table and plain:
        texts = [(letter, _plain(t)) for letter, t in table]
        exact = [letter for letter, t in texts if t == plain]
        if len(exact) == 1:
            return exact[0]
        contained = [letter for letter, t in texts if t and f" {t} " in f" {plain} "]
        if len(contained) == 1:
            return contained[0]
    m = _LETTER_PAREN_RE.search(head)
    return ok(m.group(1)) if m else None


def _gt_letter(gt: str, table: list[tuple[str, str]]) -> str | None:
    m = _LETTER_ONLY_RE.match(gt) or _LETTER_LEAD_RE.match(gt)
    if m:
        return m.group(1).upper()
    plain = _plain(gt)
    hits = [letter for letter, t in table if plain and _plain(t) == plain]
    return hits[0] if len(hits) == 1 else None


def _mcq_options(pred: str, gt: str, options) -> float:
    plain = _plain(pred)
    if plain and plain == _plain(gt):
        return 1.0
    table = _options_table(options)
    g, p = _gt_letter(gt, table), _pred_letter(pred, table)
    return 1.0 if (g is not None and g == p) else 0.0


# --- grounding ---
_RUN_RE = re.compile(r"[\d.]+")
_SECOND_RE = re.compile(r"\s*,\s*([\d.]+)")


def _interval(s: str) -> tuple[float, float] | None:
    """The first "start, end" pair the released regex finds (a run of digits and dots, a comma,
    another run), as floats; None if there is none or a run is not a number ("1.2.3", ".").
    One pass over the runs instead of the regex's quadratic backtracking on long digit runs."""
    for run in _RUN_RE.finditer(s):
        m = _SECOND_RE.match(s, run.end())
        if m:
            try:
                return float(run.group(0)), float(m.group(1))
            except ValueError:
                return None
    return None


def temporal_iou(pred: tuple[float, float], gt: tuple[float, float]) -> float:
    """IoU of two (start, end) intervals; 0 if either is reversed, empty or not finite."""
    try:
        ps, pe = (float(x) for x in pred)
        gs, ge = (float(x) for x in gt)
    except (TypeError, ValueError):
        return 0.0
    if not all(math.isfinite(x) for x in (ps, pe, gs, ge)) or pe <= ps or ge <= gs:
        return 0.0
    inter = max(0.0, min(pe, ge) - max(ps, gs))
    union = (pe - ps) + (ge - gs) - inter
    return inter / union if union > 0 else 0.0


def _question_type(answer_type) -> str:
    if answer_type == "mcq":
        return "mcq"
    if answer_type in ("tvg", "grounding"):
        return "tvg"
    return "oe"


def accuracy_reward(prediction: str | None, ground_truth, answer_type: str, options: Sequence[str] | None = None,
                    config: RewardConfig = RewardConfig(), *, question: str = "") -> float:
    """R_acc in [0, 1] of an extracted prediction (see :func:`extract_answer`).

    answer_type: "mcq", "tvg" or "grounding", anything else is an open answer ("oe" / "open").
    options: the option texts; only ``option_text_match`` reads them.  question: passed to an
    ``llm`` judge.
    """
    pred = "" if prediction is None else str(prediction)
    gt = "" if ground_truth is None else str(ground_truth)
    if not pred or not gt:
        return 0.0
    qtype = _question_type(answer_type)
    if qtype == "mcq" and config.option_text_match:
        return _mcq_options(pred, gt, options)
    norm_pred, norm_gt = normalize_answer(pred), normalize_answer(gt)
    if norm_pred == norm_gt:
        return 1.0
    if qtype == "mcq":
        return _mcq_released(pred, gt)
    if qtype == "tvg":
        p, g = _interval(pred), _interval(gt)
        return 0.0 if p is None or g is None else temporal_iou(p, g)
    if config.accuracy_mode == "exact":
        return 0.0
    if config.accuracy_mode == "llm":
        # As released: the judge's score clipped to [0, 1]; token F1 if the judge fails.
        try:
            value = float(config.judge(question, pred, gt))
        except Exception:
            value = math.nan
        if math.isfinite(value):
            return min(max(value, 0.0), 1.0)
    return _f1(norm_pred.split(), norm_gt.split())


def is_correct(accuracy: float, answer_type: str) -> bool:
    """mcq: R_acc == 1; grounding (IoU) and open answers (F1): R_acc >= 0.5."""
    return accuracy >= (1.0 if _question_type(answer_type) == "mcq" else 0.5)


# ---------------------------------------------------------------------------
# format and tool
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Facts:
    think: bool             # substantive think
    answer: bool            # non-empty answer pair
    answer_open: bool       # "<answer>" present
    answer_close: bool      # "</answer>" present
    think_closed: bool      # anchor +0.4 condition
    flow: bool              # anchor +0.3 condition
    unclosed: bool          # penalty condition
    think_tool: bool        # think-before-tool condition
    balanced: bool
    call: bool              # parseable call
    responded: bool         # a tool response in the text


def _facts_released(text: str) -> _Facts:
    think, answer, call = _substantive_think(text), _has_nonempty_answer(text), _has_parseable_call(text)
    closed = "</think>" in text and think
    return _Facts(
        think=think, answer=answer, answer_open="<answer>" in text, answer_close="</answer>" in text,
        think_closed=closed, flow=closed and answer and "</answer>" in text,
        unclosed="<think>" in text and "</think>" not in text,
        think_tool=think and call and _think_before_tool(text),
        balanced=_tags_balanced(text), call=call, responded="<tool_response>" in text)


def _facts_per_turn(text: str) -> _Facts:
    turns, responded = _assistant_turns(text)
    last = turns[-1]
    thinks = [_substantive_think(t) for t in turns]
    closed = all(th and "</think>" in t for th, t in zip(thinks, turns))
    answer = _has_nonempty_answer(last)
    calls = [_has_parseable_call(t) for t in turns]
    tool_turns = [(th, t) for th, t in zip(thinks, turns) if "<tool_call>" in t or "<tool_code>" in t]
    return _Facts(
        think=all(thinks), answer=answer, answer_open="<answer>" in last, answer_close="</answer>" in last,
        think_closed=closed, flow=closed and answer and "</answer>" in last,
        unclosed=any("<think>" in t and "</think>" not in t for t in turns),
        think_tool=any(calls) and all(th and _think_before_tool(t) for th, t in tool_turns),
        balanced=all(_tags_balanced(t) for t in turns), call=any(calls), responded=responded)


def _facts(text: str, config: RewardConfig) -> _Facts:
    return _facts_per_turn(text) if config.multi_turn_rules else _facts_released(text)


def _format(f: _Facts, config: RewardConfig) -> tuple[float, dict[str, float]]:
    """R_fmt and its additive terms.  The value is accumulated in the released order of
    operations, so it is bit-identical to the release; the terms sum to it before the cap."""
    w_think, w_open, w_close = _SUFFIX_WEIGHTS if config.answer_suffix else _DEFAULT_WEIGHTS
    lam, gamma = float(config.anchor_lambda), float(config.penalty_gamma)
    c = dict.fromkeys(_FORMAT_KEYS, 0.0)
    score = 0.0
    if f.think:
        score += w_think
        c["format/think"] = w_think
    if f.answer:
        if f.answer_open:
            score += w_open
            c["format/answer_open"] = w_open
        if f.answer_close:
            score += w_close
            c["format/answer_close"] = w_close
    if lam > 0:
        bonus = 0.0
        if f.think_closed:
            bonus += _ANCHOR_THINK_CLOSED
            c["format/anchor_think_closed"] = lam * _ANCHOR_THINK_CLOSED
        if f.flow:
            bonus += _ANCHOR_FLOW
            c["format/anchor_flow"] = lam * _ANCHOR_FLOW
        if f.unclosed:
            bonus -= gamma
            c["format/penalty_unclosed_think"] = -lam * gamma
        score += lam * bonus
    if f.think_tool:
        score += _THINK_BEFORE_TOOL
        c["format/think_before_tool"] = _THINK_BEFORE_TOOL
    if score > 0 and f.balanced:
        score += _BALANCED
        c["format/balanced"] = _BALANCED
    return min(score, 1.0), c


def _tool(f: _Facts, accuracy: float, tool_executed: bool | None) -> tuple[float, dict[str, float]]:
    c = dict.fromkeys(_TOOL_KEYS, 0.0)
    if not f.call:
        return 0.0, c
    reward = _TOOL_PARSEABLE
    c["tool/parseable"] = _TOOL_PARSEABLE
    if f.responded if tool_executed is None else bool(tool_executed):
        reward = _TOOL_EXECUTED
        c["tool/executed"] = _TOOL_EXECUTED - _TOOL_PARSEABLE
    if accuracy > 0:
        reward += _TOOL_CORRECT_BONUS
        c["tool/correct_bonus"] = _TOOL_CORRECT_BONUS
    return min(reward, 1.0), c


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"the scored text must be a str, got {type(text).__name__}")
    return text


def format_reward(text: str, config: RewardConfig = RewardConfig()) -> tuple[float, dict[str, float]]:
    """(R_fmt, its additive terms): the format value :func:`score` reports for ``text``."""
    text = _check_text(text)
    if _is_degenerate(text):
        return 0.0, dict.fromkeys(_FORMAT_KEYS, 0.0)
    return _format(_facts(text, config), config)


def common_format_reward(text: str) -> float:
    """The released PARA-GRPO format reward of ``text`` (``COMMON_FORMAT_CONFIG``): one format
    metric for every ablation row, whatever reward the row trains with."""
    return format_reward(text, COMMON_FORMAT_CONFIG)[0]


def tool_reward(text: str, accuracy: float, tool_executed: bool | None = None,
                config: RewardConfig = RewardConfig()) -> tuple[float, dict[str, float]]:
    """(R_tool, its additive terms) given R_acc; ``config.tool_reward`` is not consulted."""
    text = _check_text(text)
    if _is_degenerate(text):
        return 0.0, dict.fromkeys(_TOOL_KEYS, 0.0)
    return _tool(_facts(text, config), accuracy, tool_executed)


# ---------------------------------------------------------------------------
# total
# ---------------------------------------------------------------------------

def score(text: str, *, ground_truth, answer_type: str, options: Sequence[str] | None = None,
          tool_executed: bool | None = None, config: RewardConfig = RewardConfig(),
          question: str = "") -> RewardBreakdown:
    """R = R_acc + w_fmt * R_fmt + R_tool for one assistant response (or, in our environment,
    a whole trajectory).  ``tool_executed``: None infers it from a ``<tool_response>`` (as
    released); True/False overrides (our env writes error messages inside tool responses too).
    ``question`` is only read by an ``llm`` judge."""
    text = _check_text(text)
    if _is_degenerate(text):
        components = {"accuracy": 0.0, **dict.fromkeys(_FORMAT_KEYS, 0.0), **dict.fromkeys(_TOOL_KEYS, 0.0)}
        return RewardBreakdown(0.0, 0.0, 0.0, 0.0, components, False)
    facts = _facts(text, config)
    answer_text = _assistant_turns(text)[0][-1] if config.multi_turn_rules else text
    acc = accuracy_reward(extract_answer(answer_text), ground_truth, answer_type, options, config,
                          question=question)
    fmt, fcomps = _format(facts, config)
    if config.tool_reward:
        tool, tcomps = _tool(facts, acc, tool_executed)
    else:
        tool, tcomps = 0.0, dict.fromkeys(_TOOL_KEYS, 0.0)
    total = acc + float(config.format_weight) * fmt + tool
    return RewardBreakdown(accuracy=acc, format=fmt, tool=tool, total=total,
                           components={"accuracy": acc, **fcomps, **tcomps},
                           correct=is_correct(acc, answer_type))
