"""PARA-GRPO reward: R = R_acc + w_fmt * R_fmt + R_tool (PAPER.md, "Reward").

Pure and standalone (stdlib only).  Scores the FULL assistant trajectory text: every
assistant turn *including* its prefilled ``<think>\\n`` prefix, with the environment's
``<tool_response>...</tool_response>`` blocks between turns.  Scoring the full text is what
fixes released-code defects 1 and 2 (prefix missing from the scored text, so the anchor /
think-before-tool / balance terms never fire; tool responses masked, so R_tool's
"executed" tier is unreachable).

Example::

    >>> from paravt_env.rewards import score, RewardConfig
    >>> traj = ('<think>\\nThe clue is near the end, crop it.</think>'
    ...         '<tool_call>{"name": "crop_video", "arguments": {"start_time": 50, "end_time": 60}}</tool_call>'
    ...         '<tool_response>A red car drives away.</tool_response>'
    ...         '<think>\\nThe car is red, so option B.</think><answer>B</answer>')
    >>> r = score(traj, ground_truth="B", answer_type="mcq", options=["A. blue", "B. red"])
    >>> r.accuracy, r.format, r.tool, r.total, r.correct
    (1.0, 1.0, 0.8, 2.8, True)

R_acc (``accuracy_reward``), answer types "mcq" / "open" / "grounding":
  * normalised exact match (lowercase, drop punctuation, articles, extra whitespace) -> 1.0;
  * mcq: option letter from the prediction ("B", "(B)", "B.", "B. red", "The answer is B")
    or the prediction matching one option's text, compared to the ground-truth letter
    (the ground truth may be a letter or an option's text) -> 1.0 / 0.0;
  * grounding: temporal IoU of the first two numbers in the prediction vs the ground truth
    ("12.0, 18.5" or "[12.0, 18.5]"); computed *before* exact match, because punctuation
    stripping would make "1.20, 18.5" exact-match "12.0, 18.5";
  * open: token F1 on normalised tokens.
  * ``mode="exact"``: normalised exact match only.  Unknown answer types are scored as "open".
  ``correct`` (in RewardBreakdown): mcq -> accuracy == 1; grounding -> IoU >= 0.5;
  open -> token F1 >= 0.5; exact mode -> accuracy == 1.

R_fmt (``format_reward``), clamped to [0, 1]; all terms are reported in ``components``:
  * base (answer-suffix mode / default mode): substantive think, i.e. some closed think block
    with >= 10 stripped chars (+0.2 / +0.3); non-empty answer body opened ``<answer>``
    (+0.3 / +0.2); closed ``</answer>`` with non-empty body (+0.2 / +0.1);
  * anchor bonus, every term times lambda_anchor: all think blocks closed (+0.4); a closed
    think followed later by a closed non-empty answer (+0.3); penalty: a ``<think>`` opened
    but never closed (-gamma).  The penalty sits *inside* the anchor bullet of PAPER.md, so
    it is scaled by lambda too (effective -0.15 at the defaults), and lambda = 0 disables it;
  * think before the first tool call +0.3 (only if there is a tool call);
  * all tag pairs balanced +0.1, only if the score so far is > 0.

R_tool (``tool_reward``): 0 without a parseable call; 0.1 parseable; 0.3 if the tool ran
(``tool_executed``; ``None`` = a ``<tool_response>`` block is present); +0.5 if R_acc > 0;
capped at 1.0.  Components are additive: tool/parseable 0.1, tool/executed +0.2,
tool/correct_bonus +0.5.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from paravt_env.parsing import ParsedTurn, parse_turn

__all__ = [
    "RewardConfig",
    "RewardBreakdown",
    "accuracy_reward",
    "format_reward",
    "tool_reward",
    "score",
    "is_correct",
    "normalize_answer",
    "temporal_iou",
]

ANSWER_TYPES = ("mcq", "open", "grounding")
ACCURACY_MODES = ("default", "exact")
MAX_PRED_CHARS = 20_000         # predictions are truncated to this before scoring
MIN_THINK_CHARS = 10            # "substantive" think

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


@dataclass(frozen=True)
class RewardConfig:
    format_weight: float = 1.0          # w_fmt
    answer_suffix: bool = True          # answer-suffix weights (0.2/0.3/0.2) vs default (0.3/0.2/0.1)
    anchor_lambda: float = 0.5          # lambda_anchor; 0 disables the anchor bonus (and the penalty)
    penalty_gamma: float = 0.3          # penalty for <think> opened but never closed; 0 disables
    tool_reward: bool = True            # R_tool on/off
    accuracy_mode: str = "default"      # "default" (EM -> letter -> IoU -> token F1) or "exact"

    def __post_init__(self):
        for name in ("format_weight", "anchor_lambda", "penalty_gamma"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"RewardConfig.{name} must be a finite number, got {v!r}")
        if self.accuracy_mode not in ACCURACY_MODES:
            raise ValueError(f"RewardConfig.accuracy_mode must be one of {ACCURACY_MODES}, "
                             f"got {self.accuracy_mode!r}")


@dataclass(frozen=True)
class RewardBreakdown:
    accuracy: float
    format: float
    tool: float
    total: float
    components: dict[str, float] = field(default_factory=dict)
    correct: bool = False


# ---------------------------------------------------------------------------
# accuracy
# ---------------------------------------------------------------------------

_PUNCT_TABLE = str.maketrans({c: " " for c in string.punctuation})
_ARTICLES_RE = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(s, drop_articles: bool = True) -> str:
    """Lowercase, punctuation -> space, drop articles, collapse whitespace."""
    if not isinstance(s, str):
        s = "" if s is None else str(s)
    s = s.lower().translate(_PUNCT_TABLE)
    if drop_articles:
        s = _ARTICLES_RE.sub(" ", s)
    return " ".join(s.split())


def _exact_match(pred: str, gt: str) -> bool:
    p, g = normalize_answer(pred), normalize_answer(gt)
    if not p or not g:
        # e.g. ground truth "A" (an article!) -- compare without dropping articles
        p, g = normalize_answer(pred, False), normalize_answer(gt, False)
    return bool(p) and p == g


def _token_f1(pred: str, gt: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gt).split()
    if not p or not g:
        p, g = normalize_answer(pred, False).split(), normalize_answer(gt, False).split()
    if not p or not g:
        return 0.0
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


# --- mcq ---
_OPT_PREFIX_RE = re.compile(r"^\s*[\(\[]?([A-Za-z])[\)\]\.:]\s*(.*)$", re.DOTALL)
_LETTER_ONLY_RE = re.compile(r"^\s*[\(\[]?([A-Za-z])[\)\]]?[\.:]?\s*$")
_LETTER_LEAD_RE = re.compile(r"^\s*[\(\[]?([A-Z])[\)\]\.:](?:\s|$)")
_LETTER_PHRASE_RE = re.compile(   # possessive quantifiers: no backtracking blow-up
    r"\b(?i:answer|option|choice)\b(?:\s*+(?i:is)\b)?(?:\s*+:)?(?:\s*+(?i:option)\b)?\s*+[\(\[]?"
    r"(?:([A-Z])\b|([a-z])(?=[\)\]\.:]|\s*+$))")
_LETTER_PAREN_RE = re.compile(r"\(([A-Z])\)")


def _options_table(options) -> list[tuple[str, str]]:
    """[(letter, option text)]; options may be "A. text" style or bare texts."""
    table = []
    if not options:
        return table
    try:
        opts = [o if isinstance(o, str) else str(o) for o in list(options)[:26]]
    except Exception:
        return table
    prefixed = [_OPT_PREFIX_RE.match(o) for o in opts]
    use_prefix = all(m is not None for m in prefixed)
    for i, o in enumerate(opts):
        if use_prefix:
            m = prefixed[i]
            table.append((m.group(1).upper(), m.group(2).strip()))
        else:
            table.append((chr(ord("A") + i), o.strip()))
    return table


def _extract_letter(pred: str, table: list[tuple[str, str]]) -> str | None:
    valid = {l for l, _ in table} if table else None

    def ok(letter):
        if letter is None:
            return None
        letter = letter.upper()
        return letter if (valid is None or letter in valid) else None

    head = pred[:2000]
    for rx in (_LETTER_ONLY_RE, _LETTER_LEAD_RE):
        m = rx.match(head)
        if m and ok(m.group(1)):
            return ok(m.group(1))
    for m in _LETTER_PHRASE_RE.finditer(head):
        letter = ok(m.group(1) or m.group(2))
        if letter:
            return letter
    if table:
        # prediction equals one option's text, or contains exactly one option's text
        np_ = normalize_answer(pred)
        if np_:
            exact = [l for l, t in table if normalize_answer(t) == np_]
            if len(exact) == 1:
                return exact[0]
            padded = f" {np_} "
            contained = [l for l, t in table
                         if normalize_answer(t) and f" {normalize_answer(t)} " in padded]
            if len(contained) == 1:
                return contained[0]
    m = _LETTER_PAREN_RE.search(head)
    if m and ok(m.group(1)):
        return ok(m.group(1))
    return None


def _gt_letter(gt: str, table: list[tuple[str, str]]) -> str | None:
    m = _LETTER_ONLY_RE.match(gt) or _LETTER_LEAD_RE.match(gt)
    if m:
        return m.group(1).upper()
    if table:
        ng = normalize_answer(gt)
        hits = [l for l, t in table if ng and normalize_answer(t) == ng]
        if len(hits) == 1:
            return hits[0]
    return None


# --- grounding ---
_NUM_RE = re.compile(r"\d+(?:\.\d+)?|\.\d+")   # unsigned: "12-18" is a span, not 12 and -18


def _two_numbers(s: str) -> tuple[float, float] | None:
    vals = []
    for m in _NUM_RE.finditer(s[:MAX_PRED_CHARS]):
        tok = m.group(0)
        if len(tok) > 32:          # absurd digit strings: garbage
            return None
        v = float(tok)
        if not math.isfinite(v):
            return None
        vals.append(v)
        if len(vals) == 2:
            a, b = vals
            return (a, b) if a <= b else (b, a)
    return None


def temporal_iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    """IoU of two [start, end] intervals; 0 for invalid input."""
    try:
        s1, e1 = sorted(float(x) for x in a)
        s2, e2 = sorted(float(x) for x in b)
    except Exception:
        return 0.0
    if not all(math.isfinite(x) for x in (s1, e1, s2, e2)):
        return 0.0
    inter = max(0.0, min(e1, e2) - max(s1, s2))
    union = max(e1, e2) - min(s1, s2)
    if union <= 0.0:
        return 1.0 if (s1 == s2 and e1 == e2) else 0.0
    return max(0.0, min(1.0, inter / union))


def accuracy_reward(prediction: str | None, ground_truth: str, answer_type: str,
                    options: Sequence[str] | None = None, mode: str = "default") -> float:
    """R_acc in [0, 1]. Never raises; None/empty prediction -> 0."""
    try:
        return _accuracy(prediction, ground_truth, answer_type, options, mode)
    except Exception:  # defensive: a reward must never crash a training step
        return 0.0


def _accuracy(prediction, ground_truth, answer_type, options, mode) -> float:
    if prediction is None:
        return 0.0
    pred = prediction if isinstance(prediction, str) else str(prediction)
    pred = pred[:MAX_PRED_CHARS]
    gt = ground_truth if isinstance(ground_truth, str) else ("" if ground_truth is None else str(ground_truth))
    if not pred.strip() or not gt.strip():
        return 0.0
    if mode == "exact":
        return 1.0 if _exact_match(pred, gt) else 0.0
    atype = (answer_type or "open").lower() if isinstance(answer_type, str) else "open"

    if atype == "grounding":
        g, p = _two_numbers(gt), _two_numbers(pred)
        if g is not None and p is not None:
            return temporal_iou(p, g)
        return 1.0 if _exact_match(pred, gt) else 0.0

    if _exact_match(pred, gt):
        return 1.0
    if atype == "mcq":
        table = _options_table(options)
        g_letter = _gt_letter(gt, table)
        p_letter = _extract_letter(pred, table)
        if g_letter is not None and p_letter is not None:
            return 1.0 if g_letter == p_letter else 0.0
        return 0.0
    return _token_f1(pred, gt)


def is_correct(accuracy: float, answer_type: str, mode: str = "default") -> bool:
    """mcq / exact mode: accuracy == 1; grounding: IoU >= 0.5; open: token F1 >= 0.5."""
    if mode == "exact" or answer_type == "mcq":
        return accuracy >= 1.0
    return accuracy >= 0.5


# ---------------------------------------------------------------------------
# format
# ---------------------------------------------------------------------------

def _format_from_parsed(p: ParsedTurn, config: RewardConfig) -> tuple[float, dict[str, float]]:
    w_think, w_open, w_close = _SUFFIX_WEIGHTS if config.answer_suffix else _DEFAULT_WEIGHTS
    lam, gamma = float(config.anchor_lambda), float(config.penalty_gamma)
    answer_blocks = [b for b in p.blocks if b.tag == "answer"]

    c: dict[str, float] = {}
    c["format/think"] = w_think if any(len(t.strip()) >= MIN_THINK_CHARS for t in p.thinks) else 0.0
    c["format/answer_open"] = w_open if any(b.body.strip() for b in answer_blocks) else 0.0
    c["format/answer_close"] = w_close if any(b.closed and b.body.strip() for b in answer_blocks) else 0.0
    # Anchor bonus: every term, the penalty included, is scaled by lambda_anchor
    # (PAPER.md lists gamma inside the "anchor bonus, times lambda_anchor" bullet).
    all_thinks_closed = p.think_closed and not p.think_unclosed
    c["format/anchor_think_closed"] = lam * _ANCHOR_THINK_CLOSED if all_thinks_closed else 0.0
    c["format/anchor_flow"] = lam * _ANCHOR_FLOW if p.think_then_answer else 0.0
    c["format/penalty_unclosed_think"] = -lam * gamma if p.think_unclosed else 0.0
    c["format/think_before_tool"] = _THINK_BEFORE_TOOL if p.think_before_first_tool else 0.0
    so_far = sum(c.values())
    c["format/balanced"] = _BALANCED if (p.tags_balanced and so_far > 0) else 0.0
    raw = so_far + c["format/balanced"]
    c["format/raw"] = raw
    return min(1.0, max(0.0, raw)), c


def format_reward(trajectory_text: str, config: RewardConfig = RewardConfig()) -> tuple[float, dict[str, float]]:
    """R_fmt in [0, 1] and its components (uncapped individual terms + "format/raw")."""
    return _format_from_parsed(parse_turn(trajectory_text), config)


# ---------------------------------------------------------------------------
# tool
# ---------------------------------------------------------------------------

def _tool_from_parsed(p: ParsedTurn, accuracy: float, tool_executed: bool | None) -> tuple[float, dict]:
    c = {"tool/parseable": 0.0, "tool/executed": 0.0, "tool/correct_bonus": 0.0}
    if not p.parseable_tool_calls:
        return 0.0, c
    executed = p.has_tool_response if tool_executed is None else bool(tool_executed)
    c["tool/parseable"] = _TOOL_PARSEABLE
    if executed:
        c["tool/executed"] = _TOOL_EXECUTED - _TOOL_PARSEABLE   # tier 0.1 -> 0.3
    try:
        acc_positive = float(accuracy) > 0
    except Exception:
        acc_positive = False
    if acc_positive:
        c["tool/correct_bonus"] = _TOOL_CORRECT_BONUS
    return min(1.0, sum(c.values())), c


def tool_reward(trajectory_text: str, accuracy: float, tool_executed: bool | None = None) -> tuple[float, dict]:
    """R_tool in [0, 1] and its additive components."""
    return _tool_from_parsed(parse_turn(trajectory_text), accuracy, tool_executed)


# ---------------------------------------------------------------------------
# total
# ---------------------------------------------------------------------------

def score(trajectory_text: str, *, ground_truth: str, answer_type: str, options=None,
          tool_executed: bool | None = None, config: RewardConfig = RewardConfig()) -> RewardBreakdown:
    """Full reward R = R_acc + w_fmt * R_fmt + R_tool for one trajectory."""
    p = parse_turn(trajectory_text)
    acc = accuracy_reward(p.answer, ground_truth, answer_type, options, mode=config.accuracy_mode)
    fmt, comps = _format_from_parsed(p, config)
    if config.tool_reward:
        tool, tcomps = _tool_from_parsed(p, acc, tool_executed)
    else:
        tool, tcomps = 0.0, {"tool/parseable": 0.0, "tool/executed": 0.0, "tool/correct_bonus": 0.0}
    components = {"accuracy": acc, **comps, **tcomps}
    total = acc + float(config.format_weight) * fmt + tool
    return RewardBreakdown(
        accuracy=acc, format=fmt, tool=tool, total=total, components=components,
        correct=is_correct(acc, answer_type, config.accuracy_mode),
    )
