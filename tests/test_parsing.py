"""Tests for paravt_env.parsing (pure turn parser)."""

import json
import sys

import pytest
from hypothesis import given, settings, strategies as st

from paravt_env.parsing import (
    MAX_CALL_CHARS,
    MAX_TAGS,
    MAX_TOOL_CALLS,
    TOOL_NAME,
    ParsedTurn,
    ToolCall,
    parse_json_call,
    parse_python_call,
    parse_turn,
)

CALL_JSON = '{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}'


def tc(body):
    return f"<tool_call>{body}</tool_call>"


# ---------------------------------------------------------------------------
# JSON syntax
# ---------------------------------------------------------------------------

def test_json_tool_call_basic():
    p = parse_turn("<think>\nlook closer at the end</think>" + tc(CALL_JSON))
    assert len(p.tool_calls) == 1
    c = p.tool_calls[0]
    assert c == ToolCall(name=TOOL_NAME, arguments={"start_time": 10, "end_time": 20},
                         raw=CALL_JSON, syntax="json", error=None)
    assert c.parseable and p.parseable_tool_calls == (c,)
    assert p.think == "\nlook closer at the end"
    assert p.think_before_first_tool and p.tags_balanced and p.errors == ()


def test_json_arguments_as_string_and_whitespace_and_fence():
    body = json.dumps({"name": "crop_video",
                       "arguments": json.dumps({"video_path": "v.mp4", "start_time": 1.5, "end_time": 9})})
    c = parse_turn(tc("\n  " + body + "\n")).tool_calls[0]
    assert c.name == "crop_video"
    assert c.arguments == {"video_path": "v.mp4", "start_time": 1.5, "end_time": 9}
    fenced = parse_turn(tc("```json\n" + CALL_JSON + "\n```")).tool_calls[0]
    assert fenced.arguments == {"start_time": 10, "end_time": 20}


def test_json_missing_arguments_is_empty_dict_and_parameters_alias():
    assert parse_json_call('{"name": "crop_video"}').arguments == {}
    c = parse_json_call('{"name": "crop_video", "parameters": {"start_time": 1, "end_time": 2}}')
    assert c.arguments == {"start_time": 1, "end_time": 2}


@pytest.mark.parametrize("body, fragment", [
    ('{"name": "crop_video" "arguments": {}}', "not valid JSON: Expecting ',' delimiter at char"),
    ("", "empty tool_call"),
    ("[1, 2]", "is a list, expected an object"),
    ('{"arguments": {}}', 'no string "name"'),
    ('{"name": 3}', 'no string "name"'),
    ('{"name": "crop_video", "arguments": [1, 2]}', '"arguments" is a list'),
    ('{"name": "crop_video", "arguments": "{oops"}', '"arguments" string is not valid JSON'),
    ("[" * 5000, "not valid JSON"),        # deep nesting: RecursionError is caught
])
def test_json_errors(body, fragment):
    c = parse_json_call(body)
    assert c.name is None and c.arguments == {} and c.syntax == "json"
    assert fragment in c.error
    p = parse_turn(tc(body))
    assert p.tool_calls[0].error == c.error
    assert p.parseable_tool_calls == ()
    assert any(fragment in e for e in p.errors)


def test_json_error_message_position():
    c = parse_json_call('{"name": "crop_video" "arguments": {}}')
    assert c.error == "tool_call is not valid JSON: Expecting ',' delimiter at char 22"


def test_json_body_too_long():
    body = '{"name": "crop_video", "arguments": {"x": "' + "a" * MAX_CALL_CHARS + '"}}'
    c = parse_json_call(body)
    assert c.name is None and "too long" in c.error


# ---------------------------------------------------------------------------
# Python syntax
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("body, args", [
    ("crop_video(start_time=10, end_time=20)", {"start_time": 10, "end_time": 20}),
    ('crop_video(video_path="x.mp4", start_time=1.5, end_time=9)',
     {"video_path": "x.mp4", "start_time": 1.5, "end_time": 9}),
    ("crop_video(10, 20)", {"start_time": 10, "end_time": 20}),
    ('crop_video("x.mp4", 10, 20.5)', {"video_path": "x.mp4", "start_time": 10, "end_time": 20.5}),
    ('crop_video(10, 20, video_path="v.mp4")', {"video_path": "v.mp4", "start_time": 10, "end_time": 20}),
    ("crop_video(start_time=-1, end_time=+2.5)", {"start_time": -1, "end_time": 2.5}),
    ("crop_video(flag=True, other=None)", {"flag": True, "other": None}),
    ("crop_video()", {}),
    ("```python\ncrop_video(start_time=1, end_time=2)\n```", {"start_time": 1, "end_time": 2}),
    ("  crop_video(start_time=1,\n end_time=2)  ", {"start_time": 1, "end_time": 2}),
])
def test_python_tool_code_ok(body, args):
    p = parse_turn(f"<tool_code>{body}</tool_code>")
    c = p.tool_calls[0]
    assert c.error is None, c.error
    assert c.name == "crop_video" and c.syntax == "python" and c.arguments == args
    assert c.raw == body


@pytest.mark.parametrize("body, fragment", [
    ("__import__('os').system('x')", "plain function name"),
    ("crop_video(start_time=open('f'), end_time=2)", "not a literal (Call)"),
    ("crop_video(start_time=x, end_time=2)", "not a literal (Name)"),
    ("crop_video(start_time=lambda: 1)", "not a literal (Lambda)"),
    ("crop_video(start_time=[i for i in range(9)])", "not a literal (ListComp)"),
    ("crop_video(start_time=[1, 2])", "not a literal (List)"),
    ("crop_video(start_time=1+2)", "not a literal (BinOp)"),
    ("crop_video(start_time=-(1))", None),  # parenthesised constant is still a Constant -> ok
    ("crop_video(start_time=--1)", "not a literal (UnaryOp)"),
    ("crop_video(start_time=1j)", "unsupported constant type complex"),
    ("crop_video(start_time=b'x')", "unsupported constant type bytes"),
    ("crop_video(**{'start_time': 1})", "**kwargs"),
    ("crop_video(*[1, 2])", "*args"),
    ("crop_video(1)", "1 positional arguments"),
    ("crop_video(1, 2, 3, 4)", "4 positional arguments"),
    ("crop_video(1, 2, start_time=3)", "given twice"),
    ("os.system('rm -rf /')", "plain function name"),
    ("print(crop_video(start_time=1, end_time=2))", "1 positional arguments"),
    ("crop_video(start_time=1); import os", "not a valid Python expression"),
    ("import os", "not a valid Python expression"),
    ("crop_video", "single function call, got Name"),
    ("(lambda: __import__('os'))()", "plain function name"),
    ("crop_video(start_time=1, start_time=2)", "given twice"),
    ("crop_video(start_time=" + "-" * 9000 + "1)", "not a valid Python expression"),
    ("crop_video(start_time=" + "(" * 300 + "1" + ")" * 300 + ")", "not a valid Python expression"),
    ("crop_video(start_time=" + "1" * 5000 + ")", "not a valid Python expression"),
    ("", "empty tool_code"),
])
def test_python_tool_code_rejected(body, fragment):
    c = parse_python_call(body)
    if fragment is None:
        assert c.error is None and c.arguments == {"start_time": -1}
        return
    assert c.name is None and c.arguments == {} and c.syntax == "python", c
    assert fragment in c.error, c.error


def test_python_injection_never_executes(tmp_path):
    marker = tmp_path / "pwned"
    mod = "_paravt_pwned_marker"
    bodies = [
        f"crop_video(start_time=open({str(marker)!r}, 'w'), end_time=2)",
        f"__import__('sys').modules.__setitem__({mod!r}, 1)",
        f"crop_video(start_time=__import__('sys').modules.__setitem__({mod!r}, 1))",
        f"exec(\"open({str(marker)!r}, 'w')\")",
        f"eval(\"__import__('sys').modules.__setitem__({mod!r}, 1)\")",
    ]
    for b in bodies:
        p = parse_turn(f"<think>\nx</think><tool_code>{b}</tool_code>")
        assert len(p.tool_calls) == 1
        # exec("...")/eval("...") parse as a name call with a string literal: 1 positional -> error
        assert p.tool_calls[0].error is not None
    assert not marker.exists()
    assert mod not in sys.modules


def test_python_call_with_any_plain_name_parses_but_is_not_run():
    # The parser only reports structure; the env decides which names are real tools.
    c = parse_python_call("eval(start_time='1', end_time=2)")
    assert c.name == "eval" and c.arguments == {"start_time": "1", "end_time": 2}


def test_python_body_too_long():
    c = parse_python_call("crop_video(start_time=1, end_time=2)" + " " * MAX_CALL_CHARS)
    assert c.name is None and "too long" in c.error


# ---------------------------------------------------------------------------
# structure: think / answer / ordering / balance
# ---------------------------------------------------------------------------

def test_parallel_calls_in_textual_order_both_syntaxes():
    text = ("<think>\nthree windows</think>"
            + tc('{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 5}}')
            + "<tool_code>crop_video(start_time=5, end_time=10)</tool_code>"
            + tc("not json")
            + tc('{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 15}}'))
    p = parse_turn(text)
    assert [c.syntax for c in p.tool_calls] == ["json", "python", "json", "json"]
    assert [c.arguments.get("start_time") for c in p.tool_calls] == [0, 5, None, 10]
    assert len(p.parseable_tool_calls) == 3
    assert any(e.startswith("tool_call #3:") for e in p.errors)
    assert p.tags_balanced


def test_answer_is_last_closed_and_stripped():
    p = parse_turn("<think>\nhmm hmm hmm</think><answer> A </answer> more <answer>\n B \n</answer>")
    assert p.answer == "B" and p.answers == ("A", "B")
    assert p.answer_opened and p.answer_closed and p.think_then_answer


def test_empty_and_plain_text():
    for text in ["", "just text, no tags", "<thinking>nope</thinking>", "< think >"]:
        p = parse_turn(text)
        assert isinstance(p, ParsedTurn)
        assert p.think is None and p.answer is None and p.tool_calls == ()
        assert not p.think_opened and not p.answer_opened
        assert p.tags_balanced and p.errors == ()


def test_unclosed_think():
    p = parse_turn("<think>\nreasoning <answer>B</answer>")
    assert p.think_opened and not p.think_closed and p.think is None
    assert p.think_unclosed and p.unclosed_tags == ("think",)
    assert p.answer == "B" and not p.tags_balanced
    assert not p.think_then_answer
    assert any("unclosed <think>" in e for e in p.errors)


def test_unclosed_tool_call_yields_error_call():
    p = parse_turn("<think>\nok go</think><tool_call>" + CALL_JSON)
    assert len(p.tool_calls) == 1
    c = p.tool_calls[0]
    assert c.name is None and c.error == "unclosed <tool_call>" and c.raw == CALL_JSON
    assert not p.tags_balanced and p.parseable_tool_calls == ()
    assert p.think_before_first_tool   # structure still counts


def test_nested_tool_call_tags():
    p = parse_turn("<tool_call><tool_call>" + CALL_JSON + "</tool_call>")
    assert [c.error for c in p.tool_calls] == ["unclosed <tool_call>", None]
    assert p.tool_calls[1].arguments == {"start_time": 10, "end_time": 20}
    assert not p.tags_balanced


def test_stray_close_and_close_before_open_unbalanced():
    p = parse_turn("</think><think>\nabc</think>")  # counts 1 open / 2 close
    assert not p.tags_balanced
    p = parse_turn("</answer>x<answer>")           # equal counts, but closes before it opens
    assert not p.tags_balanced and p.answer is None and p.answer_opened and not p.answer_closed
    assert any("stray </answer>" in e for e in p.errors)


def test_missing_prefix_has_no_closed_think():
    # released-code defect 1: without the prefilled "<think>\n" the </think> is stray
    p = parse_turn("reasoning here</think><answer>B</answer>")
    assert not p.think_opened and not p.think_closed and not p.tags_balanced
    q = parse_turn("<think>\n" + "reasoning here</think><answer>B</answer>")
    assert q.think_closed and q.tags_balanced and q.think_then_answer


def test_think_before_first_tool():
    assert parse_turn("<think>\nplan</think>" + tc(CALL_JSON)).think_before_first_tool
    assert not parse_turn(tc(CALL_JSON) + "<think>\nplan</think>").think_before_first_tool
    assert not parse_turn("<think>\nplan" + tc(CALL_JSON) + "</think>").think_before_first_tool
    assert not parse_turn("<think>\nplan</think><answer>B</answer>").think_before_first_tool


def test_garbled_interleaving_does_not_crash():
    texts = [
        "<think><answer></think></answer>",
        "<tool_call><think></tool_call></think>",
        "<tool_code></tool_call><tool_call></tool_code>",
        "<answer><answer><answer>",
        "</think></think></tool_call></tool_code></answer></tool_response>",
        "<tool_response><tool_response></tool_response></tool_response>",
        "<<think>>><</think>",
    ]
    for t in texts:
        p = parse_turn(t)
        assert isinstance(p, ParsedTurn)
        for c in p.tool_calls:
            assert (c.name is None) == (c.error is not None)


def test_tool_response_body_is_opaque():
    text = ("<think>\nlook at it</think>" + tc(CALL_JSON)
            + "<tool_response><think>sub-agent</think><answer>Z</answer>"
              "<tool_call>{\"name\": \"evil\"}</tool_call></tool_response>"
            + "<think>\nfinal thought</think><answer>B</answer>")
    p = parse_turn(text)
    assert p.answer == "B" and p.answers == ("B",)
    assert [c.name for c in p.tool_calls] == ["crop_video"]
    assert p.thinks == ("\nlook at it", "\nfinal thought")
    assert p.has_tool_response and p.tool_responses[0].startswith("<think>sub-agent")
    assert p.tags_balanced and p.errors == ()


def test_unclosed_tool_response_is_ignored_not_swallowing():
    p = parse_turn("<tool_response>summary <think>\nok then</think><answer>B</answer>")
    assert not p.has_tool_response and p.answer == "B"
    assert any("unclosed <tool_response>" in e for e in p.errors)


def test_multiturn_trajectory():
    text = ("<think>\nI should crop twice.</think>"
            + tc('{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 30}}')
            + tc('{"name": "crop_video", "arguments": {"start_time": 30, "end_time": 60}}')
            + "<tool_response>a dog</tool_response><tool_response>a cat</tool_response>"
            + "<think>\nThe cat appears later.</think><answer>C</answer>")
    p = parse_turn(text)
    assert len(p.parseable_tool_calls) == 2 and len(p.tool_responses) == 2
    assert p.think == "\nI should crop twice." and p.answer == "C"
    assert p.think_before_first_tool and p.think_then_answer and p.tags_balanced


def test_too_many_tool_calls_capped():
    n = MAX_TOOL_CALLS + 5
    p = parse_turn(tc(CALL_JSON) * n)
    assert len(p.tool_calls) == n
    assert len(p.parseable_tool_calls) == MAX_TOOL_CALLS
    assert "too many tool calls" in p.tool_calls[-1].error


def test_non_str_input_is_treated_as_empty():
    assert parse_turn(None).text == ""  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# performance
# ---------------------------------------------------------------------------

MB = 1_000_000


@pytest.mark.parametrize("text", [
    "<" * MB,
    "x" * MB,
    "<think>" * (MB // 7),
    "<think></think>" * (MB // 15),
    tc(CALL_JSON) * (MB // 90),
    "<tool_code>crop_video(start_time=1, end_time=2)</tool_code>" * (MB // 60),
    "<tool_call>" + "[" * MB + "</tool_call>",
    "<tool_code>" + "(" * MB + "</tool_code>",
    "<tool_call>" + "{" * MB,
    "<tool_response>" * (MB // 15),
    "<think><answer></tool_call><tool_code></answer>" * (MB // 48),
    "<think>\n" + "a " * (MB // 2) + "</think><answer>" + "b" * 1000 + "</answer>",
], ids=lambda t: repr(t[:25]))
def test_huge_inputs_parse_with_bounded_errors(text):
    # their speed (linear, no regex backtracking) is measured in benchmarks/speed_reward.py, not timed here
    p = parse_turn(text)
    assert isinstance(p, ParsedTurn)
    assert len(p.errors) <= 52


def test_tag_limit_is_flagged():
    p = parse_turn("<think>\nok so far</think>" * (MAX_TAGS // 2 + 1))
    assert not p.tags_balanced
    assert p.errors[0].startswith(f"more than {MAX_TAGS} tags")
    assert len(p.thinks) == MAX_TAGS // 2


# ---------------------------------------------------------------------------
# hypothesis: never raises
# ---------------------------------------------------------------------------

VOCAB = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_code>", "</tool_code>",
         "<answer>", "</answer>", "<tool_response>", "</tool_response>", "\n", " ", "B",
         CALL_JSON, "crop_video(start_time=1, end_time=2)", "{", "}", "(", ")", '"', "x" * 12,
         "__import__('os').system('x')", "<", ">", "/", "crop_video(", "[1.5, 2]"]


def _check_invariants(p: ParsedTurn, text: str):
    assert p.text == text
    assert p.think_closed == (p.think is not None)
    assert p.answer_closed == (p.answer is not None)
    if p.answer is not None:
        assert p.answer == p.answer.strip()
    if p.think_closed:
        assert p.think_opened
    for c in p.tool_calls:
        assert (c.name is None) == (c.error is not None)
        assert isinstance(c.arguments, dict) and c.syntax in ("json", "python")
        if c.name is None:
            assert c.arguments == {}
    assert all(isinstance(e, str) for e in p.errors)
    starts = [b.start for b in p.blocks]
    assert starts == sorted(starts)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_arbitrary_text(text):
    _check_invariants(parse_turn(text), text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(VOCAB), st.text(max_size=5)), max_size=40))
def test_never_raises_tag_vocabulary(parts):
    text = "".join(parts)
    _check_invariants(parse_turn(text), text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="crop_video(=)1.5,-'\"[]{}*:lambda x", max_size=80))
def test_python_call_parser_never_raises(body):
    c = parse_python_call(body)
    assert (c.name is None) == (c.error is not None)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5),
                    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=5), ch, max_size=3),
                    max_leaves=10))
def test_json_call_parser_never_raises(obj):
    for body in (json.dumps(obj), json.dumps({"name": "crop_video", "arguments": obj}),
                 json.dumps({"name": obj, "arguments": {}})):
        c = parse_json_call(body)
        assert (c.name is None) == (c.error is not None)
