"""Tests for paravt_env.rewards: every PAPER.md term, hand-computed."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from paravt_env.rewards import (
    RewardBreakdown,
    RewardConfig,
    accuracy_reward,
    format_reward,
    is_correct,
    score,
    temporal_iou,
    tool_reward,
)

P = "<think>\n"                      # the prefilled think prefix
CALL = '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}</tool_call>'
RESP = "<tool_response>A red car drives away.</tool_response>"
THINK = "The car turns red near the end."   # >= 10 chars
NO_ANCHOR = RewardConfig(anchor_lambda=0.0)


def approx(x):
    return pytest.approx(x, abs=1e-9)


def comps(text, config=RewardConfig()):
    return format_reward(text, config)[1]


# ---------------------------------------------------------------------------
# format: base terms
# ---------------------------------------------------------------------------

def test_base_terms_answer_suffix_mode():
    # lambda = 0 isolates the base terms: think .2 + <answer> .3 + </answer> .2 + balanced .1
    f, c = format_reward(P + THINK + "</think><answer>B</answer>", NO_ANCHOR)
    assert f == approx(0.8)
    assert c["format/think"] == 0.2 and c["format/answer_open"] == 0.3
    assert c["format/answer_close"] == 0.2 and c["format/balanced"] == 0.1
    assert c["format/anchor_think_closed"] == 0 and c["format/anchor_flow"] == 0


def test_base_terms_default_mode():
    cfg = RewardConfig(anchor_lambda=0.0, answer_suffix=False)
    f, c = format_reward(P + THINK + "</think><answer>B</answer>", cfg)
    assert (c["format/think"], c["format/answer_open"], c["format/answer_close"]) == (0.3, 0.2, 0.1)
    assert f == approx(0.7)


def test_think_must_be_substantive():
    f, c = format_reward(P + "short</think><answer>B</answer>", NO_ANCHOR)   # "short" < 10 chars
    assert c["format/think"] == 0 and f == approx(0.6)
    f, c = format_reward(P + "0123456789</think><answer>B</answer>", NO_ANCHOR)   # exactly 10
    assert c["format/think"] == 0.2


def test_empty_answer_body_gets_no_answer_credit():
    f, c = format_reward(P + THINK + "</think><answer>  \n </answer>", NO_ANCHOR)
    assert c["format/answer_open"] == 0 and c["format/answer_close"] == 0
    assert f == approx(0.2 + 0.1)


def test_unclosed_answer_gets_open_credit_only():
    f, c = format_reward(P + THINK + "</think><answer>B", NO_ANCHOR)
    assert c["format/answer_open"] == 0.3 and c["format/answer_close"] == 0
    assert c["format/balanced"] == 0          # <answer> unbalanced
    assert f == approx(0.5)


# ---------------------------------------------------------------------------
# format: anchor bonus (times lambda) and the gamma penalty
# ---------------------------------------------------------------------------

def test_perfect_answer_suffix_response_caps_at_one():
    f, c = format_reward(P + THINK + "</think><answer>B</answer>")
    # .2 + .3 + .2 + 0.5 * (.4 + .3) + .1 = 1.15 -> capped at 1.0
    assert c["format/anchor_think_closed"] == approx(0.2)
    assert c["format/anchor_flow"] == approx(0.15)
    assert c["format/raw"] == approx(1.15)
    assert f == 1.0


def test_anchor_fires_only_with_the_prefilled_prefix():
    # Released-code defect 1: scoring without the prefilled "<think>\n" loses the anchor,
    # the balance term and the substantive-think term.
    body = THINK + "</think><answer>B</answer>"
    f_without, c_without = format_reward(body, RewardConfig(answer_suffix=False))
    assert c_without["format/anchor_think_closed"] == 0 and c_without["format/anchor_flow"] == 0
    assert c_without["format/balanced"] == 0 and c_without["format/think"] == 0
    assert f_without == approx(0.2 + 0.1)
    f_with, c_with = format_reward(P + body, RewardConfig(answer_suffix=False))
    assert c_with["format/anchor_think_closed"] == approx(0.2)
    assert c_with["format/anchor_flow"] == approx(0.15)
    # .3 + .2 + .1 + .2 + .15 + .1 = 1.05 -> 1.0
    assert c_with["format/raw"] == approx(1.05) and f_with == 1.0


def test_anchor_flow_needs_think_before_answer():
    _, c = format_reward("<answer>B</answer>" + P + THINK + "</think>")
    assert c["format/anchor_think_closed"] == approx(0.2)
    assert c["format/anchor_flow"] == 0


def test_unclosed_think_penalty_scaled_by_lambda():
    text = P + THINK + "<answer>B</answer>"
    f, c = format_reward(text)
    # think 0 (not closed); answer .3 + .2; anchor 0; penalty -0.5*0.3; balanced 0 (think unbalanced)
    assert c["format/penalty_unclosed_think"] == approx(-0.15)
    assert c["format/think"] == 0 and c["format/anchor_think_closed"] == 0
    assert c["format/balanced"] == 0
    assert f == approx(0.35)
    # gamma = 0 disables it
    f0, c0 = format_reward(text, RewardConfig(penalty_gamma=0.0))
    assert c0["format/penalty_unclosed_think"] == 0 and f0 == approx(0.5)
    # lambda = 0 disables the whole anchor bullet, penalty included
    assert format_reward(text, NO_ANCHOR)[1]["format/penalty_unclosed_think"] == 0
    # other lambda / gamma values
    assert format_reward(text, RewardConfig(anchor_lambda=1.0, penalty_gamma=0.2))[0] == approx(0.3)


def test_format_never_below_zero():
    f, c = format_reward(P + "I am still thinking and never stop")
    assert c["format/raw"] == approx(-0.15)
    assert f == 0.0


def test_unclosed_think_in_a_later_turn():
    text = (P + "plan the crop now</think>" + CALL + RESP + P + "it is red <answer>B</answer>")
    f, c = format_reward(text)
    # think .2 + .3 + .2 + flow .15 + penalty -.15 + think_before_tool .3 ; no closed-anchor, no balance
    assert c["format/anchor_think_closed"] == 0
    assert c["format/anchor_flow"] == approx(0.15)
    assert c["format/penalty_unclosed_think"] == approx(-0.15)
    assert c["format/think_before_tool"] == 0.3 and c["format/balanced"] == 0
    assert f == approx(1.0)
    cfg = RewardConfig(answer_suffix=False)   # .3 + .2 + .1 + .15 - .15 + .3 = 0.9
    assert format_reward(text, cfg)[0] == approx(0.9)


# ---------------------------------------------------------------------------
# format: think-before-tool and balance
# ---------------------------------------------------------------------------

def test_think_before_tool_only_with_a_tool_call():
    # tool-call turn alone, lambda 0: think .2 + think_before_tool .3 + balanced .1
    f, c = format_reward(P + THINK + "</think>" + CALL, NO_ANCHOR)
    assert c["format/think_before_tool"] == 0.3 and f == approx(0.6)
    # with lambda .5 the closed think adds .2
    assert format_reward(P + THINK + "</think>" + CALL)[0] == approx(0.8)
    # no tool call -> no term
    assert comps(P + THINK + "</think><answer>B</answer>")["format/think_before_tool"] == 0
    # tool call first -> no term
    assert comps(CALL + P + THINK + "</think>")["format/think_before_tool"] == 0


def test_balanced_only_if_score_positive():
    f, c = format_reward("")
    assert f == 0 and c["format/balanced"] == 0
    f, c = format_reward("<answer></answer>", NO_ANCHOR)   # balanced, but nothing else earned
    assert f == 0 and c["format/balanced"] == 0


def test_full_tool_trajectory_format():
    text = P + THINK + "</think>" + CALL + RESP + P + THINK + "</think><answer>B</answer>"
    f, c = format_reward(text, RewardConfig(answer_suffix=False, anchor_lambda=0.0))
    # .3 + .2 + .1 + think_before_tool .3 + balanced .1
    assert f == approx(1.0)
    f, c = format_reward(text)
    assert c["format/raw"] == approx(0.2 + 0.3 + 0.2 + 0.2 + 0.15 + 0.3 + 0.1) and f == 1.0


def test_component_keys():
    _, c = format_reward("x")
    assert set(c) == {"format/think", "format/answer_open", "format/answer_close",
                      "format/anchor_think_closed", "format/anchor_flow",
                      "format/penalty_unclosed_think", "format/think_before_tool",
                      "format/balanced", "format/raw"}


# ---------------------------------------------------------------------------
# tool reward
# ---------------------------------------------------------------------------

def test_tool_tiers():
    no_call = P + THINK + "</think><answer>B</answer>"
    assert tool_reward(no_call, 1.0)[0] == 0.0
    assert tool_reward(no_call + RESP, 1.0, tool_executed=True)[0] == 0.0   # needs a parseable call

    parse_only = P + THINK + "</think>" + CALL + P + "x</think><answer>B</answer>"
    assert tool_reward(parse_only, 0.0)[0] == approx(0.1)
    assert tool_reward(parse_only, 1.0)[0] == approx(0.6)

    ran = P + THINK + "</think>" + CALL + RESP + P + "x</think><answer>B</answer>"
    r, c = tool_reward(ran, 0.0)                # executed tier is reachable: response present
    assert r == approx(0.3)
    assert c == {"tool/parseable": 0.1, "tool/executed": approx(0.2), "tool/correct_bonus": 0.0}
    r, c = tool_reward(ran, 0.25)               # any R_acc > 0 earns the bonus
    assert r == approx(0.8) and c["tool/correct_bonus"] == 0.5
    assert r <= 1.0
    # explicit tool_executed overrides inference
    assert tool_reward(ran, 0.0, tool_executed=False)[0] == approx(0.1)
    assert tool_reward(parse_only, 0.0, tool_executed=True)[0] == approx(0.3)


def test_tool_python_syntax_and_unparseable():
    code = "<tool_code>crop_video(start_time=1, end_time=2)</tool_code>"
    assert tool_reward(P + "x</think>" + code, 0.0)[0] == approx(0.1)
    bad = '<tool_call>{"name": "crop_video", </tool_call>'
    assert tool_reward(P + "x</think>" + bad + RESP, 1.0)[0] == 0.0
    injected = "<tool_code>__import__('os').system('x')</tool_code>"
    assert tool_reward(injected + RESP, 1.0)[0] == 0.0


def test_tool_reward_can_be_disabled():
    text = P + THINK + "</think>" + CALL + RESP + P + THINK + "</think><answer>B</answer>"
    r = score(text, ground_truth="B", answer_type="mcq", config=RewardConfig(tool_reward=False))
    assert r.tool == 0.0 and r.total == approx(r.accuracy + r.format)


# ---------------------------------------------------------------------------
# score
# ---------------------------------------------------------------------------

def test_score_full_trajectory():
    text = P + THINK + "</think>" + CALL + RESP + P + THINK + "</think><answer>B</answer>"
    r = score(text, ground_truth="B", answer_type="mcq", options=["A. blue", "B. red"])
    assert isinstance(r, RewardBreakdown)
    assert (r.accuracy, r.format, r.tool) == (1.0, 1.0, approx(0.8))
    assert r.total == approx(2.8) and r.correct
    assert r.components["accuracy"] == 1.0
    for key in ("format/think", "format/answer_open", "format/answer_close",
                "format/anchor_think_closed", "format/anchor_flow",
                "format/penalty_unclosed_think", "format/think_before_tool",
                "format/balanced", "tool/parseable", "tool/executed", "tool/correct_bonus"):
        assert key in r.components
    r2 = score(text, ground_truth="A", answer_type="mcq", options=["A. blue", "B. red"],
               config=RewardConfig(format_weight=0.5))
    assert r2.accuracy == 0 and r2.tool == approx(0.3) and not r2.correct
    assert r2.total == approx(0.5 * 1.0 + 0.3)


def test_score_answer_comes_from_last_closed_answer_outside_responses():
    text = (P + THINK + "</think>" + CALL + "<tool_response><answer>A</answer></tool_response>"
            + P + THINK + "</think><answer>C</answer>")
    assert score(text, ground_truth="C", answer_type="mcq").accuracy == 1.0
    assert score(text, ground_truth="A", answer_type="mcq").accuracy == 0.0


def test_score_no_answer():
    r = score(P + THINK + "</think>", ground_truth="B", answer_type="mcq")
    assert r.accuracy == 0 and not r.correct


def test_score_exact_mode():
    text = P + THINK + "</think><answer>B. red</answer>"
    assert score(text, ground_truth="B", answer_type="mcq").accuracy == 1.0
    cfg = RewardConfig(accuracy_mode="exact")
    assert score(text, ground_truth="B", answer_type="mcq", config=cfg).accuracy == 0.0


def test_config_validation():
    with pytest.raises(ValueError):
        RewardConfig(accuracy_mode="judge")
    with pytest.raises(ValueError):
        RewardConfig(anchor_lambda=float("nan"))


# ---------------------------------------------------------------------------
# accuracy
# ---------------------------------------------------------------------------

OPTS = ["A. blue square", "B. red circle", "C. green triangle", "D. none of these"]


@pytest.mark.parametrize("pred", [
    "B", "b", "(B)", "B.", "B)", "[B]", "B. red circle", "B: red circle", "The answer is B",
    "the answer is (B).", "Answer: b.", "The correct answer is option B", "red circle",
    "Red Circle.", "I think it is the red circle", "Looking again, (B) fits best.",
])
def test_mcq_letter_match(pred):
    assert accuracy_reward(pred, "B", "mcq", OPTS) == 1.0


@pytest.mark.parametrize("pred", [
    "A", "C. green triangle", "The answer is C", "blue square", "a", "The", "", "   ",
    "I don't know", "Z",
])
def test_mcq_mismatch(pred):
    assert accuracy_reward(pred, "B", "mcq", OPTS) == 0.0


def test_mcq_gt_forms_and_bare_options():
    bare = ["blue square", "red circle", "green triangle"]
    assert accuracy_reward("B", "red circle", "mcq", bare) == 1.0     # gt given as option text
    assert accuracy_reward("(B)", "B. red circle", "mcq", bare) == 1.0
    assert accuracy_reward("red circle", "B", "mcq", bare) == 1.0
    assert accuracy_reward("D", "B", "mcq", bare) == 0.0               # out of range
    # article-letter ground truth "A" must not exact-match "The"/"an"
    assert accuracy_reward("A", "A", "mcq") == 1.0
    assert accuracy_reward("the", "A", "mcq") == 0.0
    assert accuracy_reward("an", "A", "mcq") == 0.0
    # without options, letters still work
    assert accuracy_reward("The answer is C.", "C", "mcq") == 1.0


def test_grounding_iou_hand_computed():
    gt = "12.0, 18.5"
    assert accuracy_reward("12.0, 18.5", gt, "grounding") == 1.0
    assert accuracy_reward("[12, 18.5]", "[12.0, 18.5]", "grounding") == 1.0
    # [14, 20] vs [12, 18.5]: inter 4.5, union 8
    assert accuracy_reward("[14, 20]", gt, "grounding") == approx(4.5 / 8)
    # "from 10 to 15 seconds": inter 3, union 8.5
    assert accuracy_reward("from 10 to 15 seconds", gt, "grounding") == approx(3 / 8.5)
    # reversed interval is sorted
    assert accuracy_reward("18.5 - 12", gt, "grounding") == 1.0
    # "12.0-18.5" is a span, not 12 and -18.5
    assert accuracy_reward("12.0-18.5", gt, "grounding") == 1.0
    # disjoint
    assert accuracy_reward("20, 30", gt, "grounding") == 0.0
    # "1.20, 18.5" must not exact-match "12.0, 18.5" after punctuation stripping
    assert accuracy_reward("1.20, 18.5", gt, "grounding") == approx(6.5 / 17.3)
    # garbage / too few numbers / non-finite
    for bad in ["nan, inf", "about 12", "no idea", "", None, "9" * 400 + ", 5"]:
        assert accuracy_reward(bad, gt, "grounding") == 0.0
    # zero-length intervals
    assert accuracy_reward("5, 5", "5, 5", "grounding") == 1.0
    assert accuracy_reward("5, 5", "6, 6", "grounding") == 0.0


def test_temporal_iou_helper():
    assert temporal_iou((0, 10), (5, 15)) == approx(5 / 15)
    assert temporal_iou((0, float("nan")), (0, 1)) == 0.0
    assert temporal_iou("ab", (0, 1)) == 0.0


def test_open_token_f1():
    assert accuracy_reward("the red car", "A red car", "open") == 1.0       # EM after normalisation
    assert accuracy_reward("Red car!", "red car", "open") == 1.0
    assert accuracy_reward("red truck", "red car", "open") == approx(0.5)
    assert accuracy_reward("big red car", "red car", "open") == approx(0.8)  # p 2/3, r 1
    assert accuracy_reward("blue", "red car", "open") == 0.0
    assert accuracy_reward(None, "red car", "open") == 0.0
    assert accuracy_reward("", "red car", "open") == 0.0
    assert accuracy_reward("red car", "", "open") == 0.0
    assert accuracy_reward("red", "red car", "open", mode="exact") == 0.0
    assert accuracy_reward("Red car.", "red car", "open", mode="exact") == 1.0
    assert accuracy_reward("red car", "red car", "weird-type") == 1.0     # unknown -> open


def test_is_correct_thresholds():
    assert is_correct(1.0, "mcq") and not is_correct(0.99, "mcq")
    assert is_correct(0.5, "grounding") and not is_correct(0.49, "grounding")
    assert is_correct(0.5, "open") and not is_correct(0.4, "open")
    assert not is_correct(0.8, "open", mode="exact")
    text = P + THINK + "</think><answer>[14, 20]</answer>"
    assert score(text, ground_truth="12, 18.5", answer_type="grounding").correct
    text = P + THINK + "</think><answer>from 10 to 15</answer>"
    assert not score(text, ground_truth="12, 18.5", answer_type="grounding").correct


# ---------------------------------------------------------------------------
# hypothesis: never raises, always finite, always in range
# ---------------------------------------------------------------------------

VOCAB = ["<think>", "</think>", "<think>\n", "<tool_call>", "</tool_call>", "<tool_code>",
         "</tool_code>", "<answer>", "</answer>", "<tool_response>", "</tool_response>",
         CALL, "crop_video(start_time=1, end_time=2)", THINK, "B", "12, 18", " ", "\n", "{"]


def _check(r: RewardBreakdown, config=RewardConfig()):
    for v in (r.accuracy, r.format, r.tool, r.total, *r.components.values()):
        assert isinstance(v, float) or isinstance(v, int)
        assert math.isfinite(v)
    assert 0.0 <= r.accuracy <= 1.0 and 0.0 <= r.format <= 1.0 and 0.0 <= r.tool <= 1.0
    assert r.total == approx(r.accuracy + config.format_weight * r.format + r.tool)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.sampled_from(["mcq", "open", "grounding"]), st.text(max_size=20),
       st.one_of(st.none(), st.lists(st.text(max_size=10), max_size=5)),
       st.one_of(st.none(), st.booleans()))
def test_score_never_raises_arbitrary(text, atype, gt, options, executed):
    _check(score(text, ground_truth=gt, answer_type=atype, options=options, tool_executed=executed))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(VOCAB), st.text(max_size=4)), max_size=30),
       st.sampled_from(["mcq", "open", "grounding"]),
       st.builds(RewardConfig, format_weight=st.floats(0, 2), answer_suffix=st.booleans(),
                 anchor_lambda=st.floats(0, 1), penalty_gamma=st.floats(0, 1),
                 tool_reward=st.booleans(), accuracy_mode=st.sampled_from(["default", "exact"])))
def test_score_never_raises_tag_vocabulary(parts, atype, config):
    text = "".join(parts)
    _check(score(text, ground_truth="B", answer_type=atype, options=OPTS, config=config), config)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text()), st.text(), st.text(max_size=12),
       st.one_of(st.none(), st.lists(st.text(max_size=8), max_size=6)))
def test_accuracy_never_raises(pred, gt, atype, options):
    for mode in ("default", "exact"):
        a = accuracy_reward(pred, gt, atype, options, mode=mode)
        assert 0.0 <= a <= 1.0 and math.isfinite(a)


def test_huge_trajectory_scores_fast():
    import time
    text = P + "a " * 500_000 + "</think><answer>" + "12, 18 " * 5000 + "</answer>"
    t0 = time.perf_counter()
    for atype in ("mcq", "open", "grounding"):
        _check(score(text, ground_truth="12, 18", answer_type=atype, options=OPTS))
    assert time.perf_counter() - t0 < 2.0
