"""Tests for paravt_env.rewards.

The table's expected numbers are worked out by hand from the released rules (see the module
docstring), never computed by running a copy of the released code.
"""

import math

import pytest
from hypothesis import given, settings, strategies as st

from paravt_env.rewards import (
    COMMON_FORMAT_CONFIG,
    RewardBreakdown,
    RewardConfig,
    accuracy_reward,
    common_format_reward,
    extract_answer,
    format_reward,
    is_correct,
    normalize_answer,
    score,
    temporal_iou,
    token_f1,
    tool_reward,
)

P = "<think>\n"                      # the prefilled think prefix
TH = "The car turns red near the end."   # a substantive think (>= 10 chars)
CALL = '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}</tool_call>'
CODE = "<tool_code>crop_video(start_time=1, end_time=2)</tool_code>"
RESP = "<tool_response>A red car drives away.</tool_response>"
PARA = RewardConfig()                                           # released PARA-GRPO config
VANILLA = RewardConfig(answer_suffix=False, anchor_lambda=0.0)  # released vanilla GRPO config
OPTION_TEXT = RewardConfig(option_text_match=True)
MULTI_TURN = RewardConfig(multi_turn_rules=True)


def approx(x):
    return pytest.approx(x, abs=1e-9)


# ---------------------------------------------------------------------------
# the table: (id, text, ground truth, question type,
#             (acc, fmt, tool, total) under PARA-GRPO, (acc, fmt, tool, total) under vanilla)
# PARA-GRPO format: think .2, <answer> .3, </answer> .2, 0.5 * (closed .4 + flow .3 - unclosed .3),
#                   think-before-tool .3, balanced .1, cap 1.
# vanilla format:   think .3, <answer> .2, </answer> .1, think-before-tool .3, balanced .1.
# ---------------------------------------------------------------------------

TABLE = [
    # -- the well-formed answer and the think rules --
    ("perfect", P + TH + "</think><answer>B</answer>", "B", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),                      # .2+.3+.2+.35+.1 = 1.15 -> 1
    ("empty_think_no_anchor", "<think></think><answer>B</answer>", "B", "mcq",
     (1, 0.6, 0, 1.6), (1, 0.4, 0, 1.4)),                      # no think, no anchor: .3+.2+.1
    ("think_9_chars", "<think>123456789</think><answer>B</answer>", "B", "mcq",
     (1, 0.6, 0, 1.6), (1, 0.4, 0, 1.4)),
    ("think_10_chars", "<think>0123456789</think><answer>B</answer>", "B", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),
    ("think_whitespace_padded", "<think>\n   abc   \n</think><answer>B</answer>", "B", "mcq",
     (1, 0.6, 0, 1.6), (1, 0.4, 0, 1.4)),
    ("first_think_decides", "<think>hmm</think><think>" + TH + "</think><answer>B</answer>", "B", "mcq",
     (1, 0.6, 0, 1.6), (1, 0.4, 0, 1.4)),
    ("unclosed_think_negative", P + "hmm", "B", "mcq",
     (0, -0.15, 0, -0.15), (0, 0.0, 0, 0.0)),                  # 0.5 * -0.3, no floor
    ("unclosed_substantive_think", P + "I am still thinking and never stop", "B", "mcq",
     (0, 0.05, 0, 0.05), (0, 0.3, 0, 0.3)),                    # .2 - .15 (open think counts)
    ("unclosed_think_then_answer", P + TH + "<answer>B</answer>", "B", "mcq",
     (1, 0.55, 0, 1.55), (1, 0.6, 0, 1.6)),                    # open think ends at <answer>
    ("close_before_open", "</think><think>" + TH + "<answer>B</answer>", "B", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),                      # "</think>" present anywhere
    ("closed_think_only", P + TH + "</think>", "B", "mcq",
     (0, 0.5, 0, 0.5), (0, 0.4, 0, 0.4)),                      # .2 + .2 + .1 / .3 + .1
    ("empty_closed_think_balanced_but_zero", "<think>\n</think>", "B", "mcq",
     (0, 0.0, 0, 0.0), (0, 0.0, 0, 0.0)),                      # balanced bonus needs score > 0
    # -- answer terms and balance --
    ("empty_answer_body", P + TH + "</think><answer>  </answer>", "B", "mcq",
     (0, 0.5, 0, 0.5), (0, 0.4, 0, 0.4)),
    ("empty_answer_then_letter", "<answer></answer> B", "B", "mcq",
     (0, 0.0, 0, 0.0), (0, 0.0, 0, 0.0)),                      # first <answer> body "" wins
    ("unclosed_answer", P + TH + "</think><answer>B", "B", "mcq",
     (1, 0.4, 0, 1.4), (1, 0.3, 0, 1.3)),                      # unbalanced; "<answer>B" -> \bB\b
    ("extra_close_unbalanced", P + TH + "</think><answer>B</answer></answer>", "B", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.6, 0, 1.6)),
    ("answer_only", "<answer>B</answer>", "B", "mcq",
     (1, 0.6, 0, 1.6), (1, 0.4, 0, 1.4)),
    # -- answer extraction --
    ("answer_colon_letter", P + TH + "</think>\nAnswer: B", "B", "mcq",
     (1, 0.5, 0, 1.5), (1, 0.4, 0, 1.4)),
    ("bare_letter_after_think", P + TH + "</think>\nB", "B", "mcq",
     (1, 0.5, 0, 1.5), (1, 0.4, 0, 1.4)),
    ("bare_letter_only", "B", "B", "mcq",
     (1, 0.0, 0, 1.0), (1, 0.0, 0, 1.0)),
    ("text_after_think_open", P + TH + "</think> The red car.", "red car", "oe",
     (1, 0.5, 0, 1.5), (1, 0.4, 0, 1.4)),
    ("first_answer_wins", P + TH + "</think><answer>C</answer><answer>B</answer>", "B", "mcq",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    ("answer_in_tool_response_read", P + TH + "</think>" + CALL + "<tool_response><answer>A</answer></tool_response>"
     + P + TH + "</think><answer>C</answer>", "C", "mcq",
     (0, 1.0, 0.3, 1.3), (0, 1.0, 0.3, 1.3)),
    ("tail_without_tool_blocks", P + TH + "</think>" + CALL + RESP + "\nB<|im_end|>", "B", "mcq",
     (1, 0.8, 0.8, 2.6), (1, 0.7, 0.8, 2.5)),
    ("last_line_fallback", "Let me see.\n<tool_call>x</tool_call>\nC\n<|im_end|>", "C", "mcq",
     (1, 0.0, 0, 1.0), (1, 0.0, 0, 1.0)),
    # -- mcq letter patterns --
    ("a_red_star_loose_letter", P + TH + "</think><answer>A red star</answer>", "A", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),
    ("a_red_star_other_gt", P + TH + "</think><answer>A red star</answer>", "B", "mcq",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    ("the_answer_is", P + TH + "</think><answer>The answer is C</answer>", "C", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),
    ("option_paren", P + TH + "</think><answer>Option (D)</answer>", "D", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),
    ("lowercase_letter", P + TH + "</think><answer>b</answer>", "B", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),
    ("first_letter_only", P + TH + "</think><answer>between B and C</answer>", "C", "mcq",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    ("article_vs_letter_a", P + TH + "</think><answer>The</answer>", "A", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),                      # both normalise to ""
    ("gt_not_a_letter", P + TH + "</think><answer>B</answer>", "B. red", "mcq",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    ("gt_letter_beyond_d", P + TH + "</think><answer>The answer is E</answer>", "E", "mcq",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    # -- grounding --
    ("reversed_interval", P + TH + "</think><answer>18, 12</answer>", "12, 18", "tvg",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    ("iou_half", P + TH + "</think><answer>[14, 20]</answer>", "12, 18", "grounding",
     (0.5, 1.0, 0, 1.5), (0.5, 0.7, 0, 1.2)),                 # inter 4, union 8
    ("iou_in_text", P + TH + "</think><answer>It is at [13.5, 16.5] s</answer>", "12, 18", "tvg",
     (0.5, 1.0, 0, 1.5), (0.5, 0.7, 0, 1.2)),                 # inter 3, union 6
    ("zero_length_interval", P + TH + "</think><answer>5, 5</answer>", "4, 6", "tvg",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    ("no_comma_pair", P + TH + "</think><answer>from 10 to 15</answer>", "12, 18", "tvg",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    ("dots_dropped_exact_match", P + TH + "</think><answer>1.20, 18.5</answer>", "12.0, 18.5", "tvg",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),                      # both normalise to "120 185"
    ("malformed_number", P + TH + "</think><answer>1.2.3, 4</answer>", "12, 18", "tvg",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),                      # the release raises; 0 here
    # -- open answers --
    ("f1_on_token_sets", P + TH + "</think><answer>car car</answer>", "car car red", "oe",
     (0.4, 1.0, 0, 1.4), (0.4, 0.7, 0, 1.1)),                 # |{car}| = 1: P 1/2, R 1/3
    ("f1_open_alias", P + TH + "</think><answer>big red car</answer>", "red car", "open",
     (0.8, 1.0, 0, 1.8), (0.8, 0.7, 0, 1.5)),                 # P 2/3, R 1
    ("unknown_type_is_oe", P + TH + "</think><answer>big red car</answer>", "red car", "yesno",
     (0.8, 1.0, 0, 1.8), (0.8, 0.7, 0, 1.5)),
    ("articles_before_punctuation", P + TH + "</think><answer>the-end</answer>", "end", "oe",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),
    ("punctuation_deleted_not_spaced", P + TH + "</think><answer>red-car</answer>", "red car", "oe",
     (0, 1.0, 0, 1.0), (0, 0.7, 0, 0.7)),
    # -- tool calls and R_tool tiers --
    ("call_no_response", P + TH + "</think>" + CALL, "B", "mcq",
     (0, 0.8, 0.1, 0.9), (0, 0.7, 0.1, 0.8)),                 # .2+.2+.3+.1 / .3+.3+.1
    ("tool_code_call", P + TH + "</think>" + CODE, "B", "mcq",
     (0, 0.8, 0.1, 0.9), (0, 0.7, 0.1, 0.8)),
    ("full_tool_trajectory", P + TH + "</think>" + CALL + RESP + P + TH + "</think><answer>B</answer>", "B", "mcq",
     (1, 1.0, 0.8, 2.8), (1, 1.0, 0.8, 2.8)),
    ("full_tool_trajectory_wrong", P + TH + "</think>" + CALL + RESP + P + TH + "</think><answer>A</answer>", "B",
     "mcq", (0, 1.0, 0.3, 1.3), (0, 1.0, 0.3, 1.3)),
    ("call_before_think", CALL + P + TH + "</think><answer>B</answer>", "B", "mcq",
     (1, 1.0, 0.6, 2.6), (1, 0.7, 0.6, 2.3)),
    ("unclosed_call_parseable", P + TH + '</think><tool_call>{"name": "crop_video"}', "B", "mcq",
     (0, 0.7, 0.1, 0.8), (0, 0.6, 0.1, 0.7)),
    ("json_without_name", P + TH + '</think><tool_call>{"tool": "crop_video"}</tool_call>', "B", "mcq",
     (0, 0.5, 0, 0.5), (0, 0.4, 0, 0.4)),
    ("comment_only_tool_code", P + TH + "</think><tool_code># crop_video(1, 2)</tool_code>", "B", "mcq",
     (0, 0.5, 0, 0.5), (0, 0.4, 0, 0.4)),
    ("im_end_body_skipped", P + TH + '</think><tool_call><|im_end|>{"name": "x"}</tool_call>', "B", "mcq",
     (0, 0.5, 0, 0.5), (0, 0.4, 0, 0.4)),
    ("unsubstantive_think_before_call", "<think>hmm</think>" + CALL, "B", "mcq",
     (0, 0.0, 0.1, 0.1), (0, 0.0, 0.1, 0.1)),
    ("open_think_ends_at_tool", P + TH + CALL, "B", "mcq",
     (0, 0.35, 0.1, 0.45), (0, 0.6, 0.1, 0.7)),              # .2 - .15 + .3
    ("response_without_call", P + TH + "</think>" + RESP + "<answer>B</answer>", "B", "mcq",
     (1, 1.0, 0, 2.0), (1, 0.7, 0, 1.7)),
    ("unclosed_think_in_later_turn", P + TH + "</think>" + CALL + RESP + P + "The car is red, option B <answer>B</answer>",
     "B", "mcq", (1, 1.0, 0.8, 2.8), (1, 0.9, 0.8, 2.7)),     # one closed think hides it
    # -- degenerate completions --
    ("degenerate_im_start", "<|im_start|>" * 5 + "<answer>B</answer>", "B", "mcq",
     (0, 0, 0, 0), (0, 0, 0, 0)),
    ("four_im_start_not_degenerate", "<|im_start|>" * 4 + "<answer>B</answer>", "B", "mcq",
     (1, 0.6, 0, 1.6), (1, 0.4, 0, 1.4)),
    ("long_im_start_not_degenerate", "<|im_start|>" * 5 + "x" * 300 + "<answer>B</answer>", "B", "mcq",
     (1, 0.6, 0, 1.6), (1, 0.4, 0, 1.4)),
]


@pytest.mark.parametrize("row", TABLE, ids=[r[0] for r in TABLE])
@pytest.mark.parametrize("config_name", ["para_grpo", "vanilla"])
def test_released_rule_table(row, config_name):
    _, text, gt, qtype, want_para, want_vanilla = row
    config, want = (PARA, want_para) if config_name == "para_grpo" else (VANILLA, want_vanilla)
    r = score(text, ground_truth=gt, answer_type=qtype, config=config)
    assert (r.accuracy, r.format, r.tool, r.total) == tuple(approx(x) for x in want)


def test_table_size():
    assert len(TABLE) >= 40


# ---------------------------------------------------------------------------
# knobs
# ---------------------------------------------------------------------------

def test_default_config_is_para_grpo():
    c = RewardConfig()
    assert (c.format_weight, c.answer_suffix, c.anchor_lambda, c.penalty_gamma, c.tool_reward) == (1.0, True, 0.5, 0.3, True)
    assert (c.accuracy_mode, c.multi_turn_rules, c.option_text_match) == ("f1", False, False)
    assert COMMON_FORMAT_CONFIG == RewardConfig()


def test_penalty_gamma_zero_removes_the_penalty_only():
    cfg = RewardConfig(penalty_gamma=0.0)
    assert score(P + "hmm", ground_truth="B", answer_type="mcq", config=cfg).format == 0.0
    text = P + TH + "<answer>B</answer>"       # .2+.3+.2, no penalty
    assert score(text, ground_truth="B", answer_type="mcq", config=cfg).format == approx(0.7)
    text = P + TH + "</think><answer>B</answer>"
    assert format_reward(text, cfg)[0] == 1.0


def test_anchor_lambda_scales_and_zero_disables():
    text = P + TH + "<answer>B</answer>"       # answer-suffix base .7, unclosed think
    assert format_reward(text, RewardConfig(anchor_lambda=0.0))[0] == approx(0.7)
    assert format_reward(text, RewardConfig(anchor_lambda=1.0))[0] == approx(0.4)
    assert format_reward(text, RewardConfig(anchor_lambda=1.0, penalty_gamma=0.2))[0] == approx(0.5)
    closed = "<think>0123456789</think>"        # .2 + lambda * .4 + .1
    assert format_reward(closed, RewardConfig(anchor_lambda=0.25))[0] == approx(0.4)
    assert format_reward(closed, RewardConfig(anchor_lambda=0.0))[0] == approx(0.3)
    assert format_reward(closed, RewardConfig(anchor_lambda=-1.0))[0] == approx(0.3)   # only lambda > 0


def test_format_weight_and_tool_switch():
    text = P + TH + "</think>" + CALL + RESP + P + TH + "</think><answer>B</answer>"
    r = score(text, ground_truth="B", answer_type="mcq", config=RewardConfig(format_weight=0.5))
    assert r.total == approx(1 + 0.5 * 1.0 + 0.8)
    r = score(text, ground_truth="B", answer_type="mcq", config=RewardConfig(tool_reward=False))
    assert r.tool == 0.0 and r.total == approx(2.0)
    assert all(r.components[k] == 0 for k in ("tool/parseable", "tool/executed", "tool/correct_bonus"))


def test_tool_executed_overrides_the_text():
    called = P + TH + "</think>" + CALL
    assert score(called, ground_truth="B", answer_type="mcq", tool_executed=True).tool == approx(0.3)
    ran = P + TH + "</think>" + CALL + RESP + "<answer>B</answer>"
    assert score(ran, ground_truth="B", answer_type="mcq").tool == approx(0.8)
    assert score(ran, ground_truth="B", answer_type="mcq", tool_executed=False).tool == approx(0.6)
    no_call = P + TH + "</think><answer>B</answer>"
    assert score(no_call, ground_truth="B", answer_type="mcq", tool_executed=True).tool == 0.0


def test_tool_reward_function_and_components():
    ran = P + TH + "</think>" + CALL + RESP
    r, c = tool_reward(ran, 0.0)
    assert r == approx(0.3) and c == {"tool/parseable": 0.1, "tool/executed": approx(0.2), "tool/correct_bonus": 0.0}
    r, c = tool_reward(ran, 0.25)                # any R_acc > 0 earns the bonus
    assert r == approx(0.8) and c["tool/correct_bonus"] == 0.5
    assert tool_reward("<tool_code>__import__('os').system('x')</tool_code>", 1.0)[0] == approx(0.6)  # never run


def test_accuracy_modes_and_judge():
    text = P + TH + "</think><answer>big red car</answer>"
    exact = RewardConfig(accuracy_mode="exact")
    assert score(text, ground_truth="red car", answer_type="oe", config=exact).accuracy == 0.0
    assert accuracy_reward("Red car.", "red car", "oe", config=exact) == 1.0
    assert accuracy_reward("The answer is B", "B", "mcq", config=exact) == 1.0     # exact only affects oe
    assert accuracy_reward("[14, 20]", "12, 18", "tvg", config=exact) == approx(0.5)

    seen = []

    def judge(question, prediction, answer):
        seen.append((question, prediction, answer))
        return 0.7

    llm = RewardConfig(accuracy_mode="llm", judge=judge)
    r = score(text, ground_truth="red car", answer_type="oe", config=llm, question="What drives away?")
    assert r.accuracy == approx(0.7) and seen == [("What drives away?", "big red car", "red car")]
    assert accuracy_reward("C", "B", "mcq", config=llm) == 0.0 and len(seen) == 1     # mcq never judged
    assert accuracy_reward("x", "y", "oe", config=RewardConfig(accuracy_mode="llm", judge=lambda *a: 5)) == 1.0

    def broken(*a):
        raise RuntimeError("judge down")

    # as released: a failing judge falls back to token F1
    assert accuracy_reward("big red car", "red car", "oe",
                           config=RewardConfig(accuracy_mode="llm", judge=broken)) == approx(0.8)
    assert accuracy_reward("big red car", "red car", "oe",
                           config=RewardConfig(accuracy_mode="llm", judge=lambda *a: math.nan)) == approx(0.8)


def test_config_validation():
    with pytest.raises(ValueError, match="accuracy_mode"):
        RewardConfig(accuracy_mode="judge")
    with pytest.raises(ValueError, match="judge"):
        RewardConfig(accuracy_mode="llm")
    with pytest.raises(ValueError, match="judge"):
        RewardConfig(judge=lambda *a: 1.0)
    with pytest.raises(ValueError, match="anchor_lambda"):
        RewardConfig(anchor_lambda=float("nan"))
    with pytest.raises(ValueError, match="format_weight"):
        RewardConfig(format_weight=True)
    with pytest.raises(ValueError, match="multi_turn_rules"):
        RewardConfig(multi_turn_rules="yes")
    with pytest.raises(TypeError, match="str"):
        score(None, ground_truth="B", answer_type="mcq")


# ---------------------------------------------------------------------------
# components, the common format metric, correctness
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("row", TABLE, ids=[r[0] for r in TABLE])
def test_components_are_additive(row):
    _, text, gt, qtype, *_ = row
    for config in (PARA, VANILLA, MULTI_TURN):
        r = score(text, ground_truth=gt, answer_type=qtype, config=config)
        fmt_terms = sum(v for k, v in r.components.items() if k.startswith("format/"))
        assert r.format == approx(min(fmt_terms, 1.0))
        assert r.tool == approx(sum(v for k, v in r.components.items() if k.startswith("tool/")))
        assert r.components["accuracy"] == r.accuracy
        assert format_reward(text, config)[0] == r.format
        if config.tool_reward:
            assert tool_reward(text, r.accuracy, config=config)[0] == r.tool


def test_component_values():
    r = score(P + TH + "</think><answer>B</answer>", ground_truth="B", answer_type="mcq")
    c = r.components
    assert (c["format/think"], c["format/answer_open"], c["format/answer_close"]) == (0.2, 0.3, 0.2)
    assert c["format/anchor_think_closed"] == approx(0.2) and c["format/anchor_flow"] == approx(0.15)
    assert c["format/balanced"] == 0.1 and r.format == 1.0          # terms sum to 1.15, capped
    c = score(P + "hmm", ground_truth="B", answer_type="mcq").components
    assert c["format/penalty_unclosed_think"] == approx(-0.15)


def test_common_format_reward_is_the_para_grpo_format():
    for _, text, gt, qtype, want_para, _ in TABLE:
        assert common_format_reward(text) == approx(want_para[1])
    text = P + TH + "</think><answer>B</answer>"
    assert common_format_reward(text) == 1.0 and format_reward(text, VANILLA)[0] == approx(0.7)


def test_is_correct_thresholds():
    assert is_correct(1.0, "mcq") and not is_correct(0.99, "mcq")
    assert is_correct(0.5, "grounding") and is_correct(0.5, "tvg") and not is_correct(0.49, "tvg")
    assert is_correct(0.5, "oe") and is_correct(0.5, "open") and not is_correct(0.4, "open")
    ok = score(P + TH + "</think><answer>[14, 20]</answer>", ground_truth="12, 18", answer_type="grounding")
    assert ok.correct
    miss = score(P + TH + "</think><answer>car car</answer>", ground_truth="car car red", answer_type="oe")
    assert not miss.correct


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("<answer> B </answer><answer>C</answer>", "B"),
    ("<answer>B", "<answer>B"),                                      # no pair: last line
    ("<think>x</think>\n" + CALL + "\n<tool_code>f()</tool_code>" + RESP + " Final: C <|im_end|>", "Final: C"),
    ("<think>x</think>" + CALL, "<think>x</think>" + CALL),          # empty tail: last usable line
    ("plan\n<tool_call>{}</tool_call>\n<|im_end|>", "plan"),
    ("", ""),
    ("<|im_start|>\n<tool_x>", ""),
])
def test_extract_answer(text, want):
    assert extract_answer(text) == want


def test_normalize_answer():
    assert normalize_answer("  The Red-Car!  ") == "redcar"
    assert normalize_answer("the-end") == "end"
    assert normalize_answer("12.5, 3") == "125 3"
    assert normalize_answer("A") == ""


def test_token_f1_and_iou_helpers():
    assert token_f1("car car", "car car red") == approx(0.4)
    assert token_f1("", "x") == 0.0
    assert temporal_iou((0, 10), (5, 15)) == approx(5 / 15)
    assert temporal_iou((10, 0), (0, 10)) == 0.0
    assert temporal_iou((0, float("inf")), (0, 10)) == 0.0
    assert temporal_iou((0, float("nan")), (0, 1)) == 0.0
    assert temporal_iou("ab", (0, 1)) == 0.0


@pytest.mark.parametrize("pred", ["1.2.3, 4", ". , 4", "., .", "9" * 400 + ", 5", "5, " + "9" * 400,
                                  "nan, inf", "inf, 3", "0" * 100_000, "1" * 200_000, "1," * 50_000])
def test_grounding_hostile_numbers_score_zero(pred):
    # each of these would raise, overflow or backtrack quadratically in a naive regex parser
    assert accuracy_reward(pred, "12, 18", "tvg") == 0.0


def test_hostile_json_nesting_is_not_a_call():
    text = P + TH + "</think><tool_call>" + "{\"a\": " * 5000 + "</tool_call>"
    assert score(text, ground_truth="B", answer_type="mcq").tool == 0.0
    text = P + TH + "</think><tool_call>" + "[" * 100_000 + "</tool_call>"
    assert score(text, ground_truth="B", answer_type="mcq").tool == 0.0


def test_huge_inputs_complete():
    # Quadratic scanning would take minutes on these; linear scanning takes well under a second
    # (timings: benchmarks/speed_reward.py, not here).
    for text in ["<think>" * 30_000, "<answer>" * 30_000, "<tool_call>" * 30_000, "1." * 100_000,
                 P + "a " * 100_000 + "</think><answer>" + "12, 18 " * 5000 + "</answer>"]:
        for qtype in ("mcq", "tvg", "oe"):
            for config in (PARA, RewardConfig(multi_turn_rules=True, option_text_match=True)):
                _check(score(text, ground_truth="12, 18", answer_type=qtype, options=OPTS, config=config), config)


# ---------------------------------------------------------------------------
# switch: option_text_match
# ---------------------------------------------------------------------------

OPTS = ["A. blue square", "B. red circle", "C. green triangle", "D. none of these"]


@pytest.mark.parametrize("pred", [
    "B", "b", "(B)", "B.", "B)", "[B]", "B. red circle", "B: red circle", "The answer is B",
    "the answer is (B).", "Answer: b.", "The correct answer is option B", "red circle",
    "Red Circle.", "I think it is the red circle", "Looking again, (B) fits best.",
])
def test_option_text_match_credits(pred):
    assert accuracy_reward(pred, "B", "mcq", OPTS, OPTION_TEXT) == 1.0


@pytest.mark.parametrize("pred", [
    "A", "C. green triangle", "The answer is C", "blue square", "a", "The", "I don't know", "Z",
])
def test_option_text_match_rejects(pred):
    assert accuracy_reward(pred, "B", "mcq", OPTS, OPTION_TEXT) == 0.0


def test_option_text_match_differs_from_release():
    opts = ["A. blue square", "B. red star"]
    # "A red star" names option B's text; the released \b[A-D]\b search reads the article as A
    assert accuracy_reward("A red star", "A", "mcq", opts) == 1.0
    assert accuracy_reward("A red star", "A", "mcq", opts, OPTION_TEXT) == 0.0
    assert accuracy_reward("A red star", "B", "mcq", opts, OPTION_TEXT) == 1.0
    # an article is not the letter A
    assert accuracy_reward("The", "A", "mcq") == 1.0
    assert accuracy_reward("The", "A", "mcq", None, OPTION_TEXT) == 0.0
    assert accuracy_reward("A", "A", "mcq", None, OPTION_TEXT) == 1.0
    # letters beyond D, and the ground truth given as option text
    six = [f"{c}. option {c.lower()}" for c in "ABCDEF"]
    assert accuracy_reward("The answer is F", "F", "mcq", six) == 0.0
    assert accuracy_reward("The answer is F", "F", "mcq", six, OPTION_TEXT) == 1.0
    bare = ["blue square", "red circle", "green triangle"]
    assert accuracy_reward("B", "red circle", "mcq", bare, OPTION_TEXT) == 1.0
    assert accuracy_reward("D", "B", "mcq", bare, OPTION_TEXT) == 0.0        # out of range
    assert accuracy_reward("The answer is C.", "C", "mcq", None, OPTION_TEXT) == 1.0


# ---------------------------------------------------------------------------
# switch: multi_turn_rules
# ---------------------------------------------------------------------------

def test_multi_turn_rules_catch_an_unclosed_think_in_a_later_turn():
    text = P + TH + "</think>" + CALL + RESP + P + "The car is red, option B <answer>B</answer>"
    assert score(text, ground_truth="B", answer_type="mcq").format == 1.0
    r = score(text, ground_truth="B", answer_type="mcq", config=MULTI_TURN)
    # .2 + .3 + .2 - .15 + .3: no closed-think anchor, no flow, no balance in turn 2
    assert (r.accuracy, r.format, r.tool) == (1.0, approx(0.85), approx(0.8))
    assert r.components["format/penalty_unclosed_think"] == approx(-0.15)


def test_multi_turn_rules_judge_every_turns_think():
    good = P + TH + "</think>" + CALL + RESP + P + TH + "</think><answer>B</answer>"
    assert score(good, ground_truth="B", answer_type="mcq", config=MULTI_TURN).format == 1.0
    lazy = P + TH + "</think>" + CALL + RESP + P + "ok</think><answer>B</answer>"
    # release: the first think decides (1.0); per turn the second turn's think is too short:
    # <answer> .3 + </answer> .2 + think-before-tool .3 (turn 1) + balanced .1
    assert score(lazy, ground_truth="B", answer_type="mcq").format == 1.0
    assert score(lazy, ground_truth="B", answer_type="mcq", config=MULTI_TURN).format == approx(0.9)
    call_first = P + TH + "</think>" + CALL + RESP + CALL + P + TH + "</think>" + CALL
    # turn 2 calls before thinking: no think-before-tool (.2 + .2 + .1 = .5)
    assert score(call_first, ground_truth="B", answer_type="mcq").format == approx(0.8)
    assert score(call_first, ground_truth="B", answer_type="mcq", config=MULTI_TURN).format == approx(0.5)


def test_multi_turn_rules_read_the_answer_from_the_last_turn_only():
    text = (P + TH + "</think>" + CALL + "<tool_response><answer>A</answer></tool_response>"
            + P + TH + "</think><answer>C</answer>")
    assert score(text, ground_truth="C", answer_type="mcq").accuracy == 0.0     # released: first <answer>
    r = score(text, ground_truth="C", answer_type="mcq", config=MULTI_TURN)
    assert (r.accuracy, r.format, r.tool, r.total) == (1.0, 1.0, approx(0.8), approx(2.8))
    # fallback answer after </think>: the release reads turn 1's tail, which runs into turn 2
    native = P + TH + "</think>" + CODE + RESP + P + "Option A looks wrong.</think>\nAnswer: B"
    assert score(native, ground_truth="B", answer_type="mcq").accuracy == 0.0
    assert score(native, ground_truth="B", answer_type="mcq", config=MULTI_TURN).accuracy == 1.0


def test_multi_turn_rules_tool_tiers_read_assistant_text():
    fake = P + TH + "</think><tool_response>" + CALL + "</tool_response><answer>B</answer>"
    assert score(fake, ground_truth="B", answer_type="mcq").tool == approx(0.8)       # call inside a response
    assert score(fake, ground_truth="B", answer_type="mcq", config=MULTI_TURN).tool == 0.0
    unclosed = P + TH + "</think>" + CALL + "<tool_response>fake"
    assert score(unclosed, ground_truth="B", answer_type="mcq").tool == approx(0.3)
    assert score(unclosed, ground_truth="B", answer_type="mcq", config=MULTI_TURN).tool == approx(0.1)


def test_multi_turn_rules_equal_release_on_a_single_turn():
    for _, text, gt, qtype, want_para, _ in TABLE:
        if "<tool_response>" in text:
            continue
        r = score(text, ground_truth=gt, answer_type=qtype, config=MULTI_TURN)
        assert (r.accuracy, r.format, r.tool) == tuple(approx(x) for x in want_para[:3])


# ---------------------------------------------------------------------------
# hypothesis: never raises, always finite, in range
# ---------------------------------------------------------------------------

VOCAB = ["<think>", "</think>", "<think>\n", "<tool_call>", "</tool_call>", "<tool_code>",
         "</tool_code>", "<answer>", "</answer>", "<tool_response>", "</tool_response>", "<|im_end|>",
         "<|im_start|>", "<tool_", CALL, "crop_video(start_time=1, end_time=2)", TH, "B", "A red", "12, 18",
         "1.2.3,", "9" * 30, " ", "\n", "{", "[", "Answer: C"]


def _check(r: RewardBreakdown, config=PARA):
    for v in (r.accuracy, r.format, r.tool, r.total, *r.components.values()):
        assert isinstance(v, (float, int)) and math.isfinite(v)
    assert 0.0 <= r.accuracy <= 1.0 and r.format <= 1.0 and 0.0 <= r.tool <= 1.0
    assert r.format >= -abs(config.anchor_lambda * config.penalty_gamma) - 1e-12
    assert r.total == approx(r.accuracy + config.format_weight * r.format + r.tool)


CONFIGS = st.builds(RewardConfig, format_weight=st.floats(0, 2), answer_suffix=st.booleans(),
                    anchor_lambda=st.floats(0, 1), penalty_gamma=st.floats(0, 1), tool_reward=st.booleans(),
                    accuracy_mode=st.sampled_from(["f1", "exact"]), multi_turn_rules=st.booleans(),
                    option_text_match=st.booleans())
QTYPES = st.sampled_from(["mcq", "tvg", "oe", "grounding", "open", "other"])


@settings(max_examples=300, deadline=None)
@given(st.text(), QTYPES, st.text(max_size=20), st.one_of(st.none(), st.lists(st.text(max_size=10), max_size=5)),
       st.one_of(st.none(), st.booleans()), CONFIGS)
def test_score_never_raises_arbitrary(text, qtype, gt, options, executed, config):
    _check(score(text, ground_truth=gt, answer_type=qtype, options=options, tool_executed=executed,
                 config=config), config)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(VOCAB), st.text(max_size=4)), max_size=30), QTYPES,
       st.sampled_from(["B", "A", "12, 18", "red car", "E"]), CONFIGS)
def test_score_never_raises_tag_vocabulary(parts, qtype, gt, config):
    _check(score("".join(parts), ground_truth=gt, answer_type=qtype, options=OPTS, config=config), config)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text()), st.text(), st.text(max_size=12),
       st.one_of(st.none(), st.lists(st.text(max_size=8), max_size=6)), CONFIGS)
def test_accuracy_never_raises(pred, gt, qtype, options, config):
    a = accuracy_reward(pred, gt, qtype, options, config)
    assert 0.0 <= a <= 1.0 and math.isfinite(a)


def test_release_defects_benchmark_scores_real_rollouts_three_ways(tmp_path):
    """benchmarks/release_defects.py on real rollouts of the shipped cold start: the released reading
    (generated tokens only) never contains the forced prefix or a tool response, "ours" is the env's
    reward, and the advantages and term rates are computed from those scores."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "release_defects", Path(__file__).resolve().parents[1] / "benchmarks" / "release_defects.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.main(["--prompts", "2", "--out", str(tmp_path / "rd"), "--", "--group-size", "4"])
    ours, released = res["scorers"]["ours"], res["scorers"]["released"]
    assert res["settings"]["rollouts"] == 8
    assert ours["rollouts_scored_unlike_ours"] == 0
    assert ours["pairs_ordered_unlike_ours"] == 0 or math.isnan(ours["pairs_ordered_unlike_ours"])
    # the forced "<think>\n" is not model text: the released reading never scores a think block opened by it
    assert released["term_fires"]["format/anchor_think_closed"] == 0.0 < ours["term_fires"]["format/anchor_think_closed"]
    assert released["term_fires"]["tool/executed"] == 0.0  # tool responses are masked out of its text
    assert released["reward_mean"] < ours["reward_mean"]
    assert sum(line.startswith("| released |") for line in (tmp_path / "rd.md").read_text().splitlines()) == 1
