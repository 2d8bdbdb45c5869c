"""Fast tests of the SFT pipeline: corpora, loss mask, batched loss, the recipe at small scale,
checkpoints and resume."""

import dataclasses
import json
import re

import numpy as np
import pytest
import torch

from agents.lmm.corpus import (THINK_DIRECT, THINK_TOOL, WorldConfig, build_corpus, caption_objects, encode_sample,
                               render_turn)
from agents.lmm.policy import TransformersPolicy
from agents.lmm.tiny_qwen import build_image_processor, build_tiny_model, load_checkpoint, save_checkpoint
from agents.lmm.tokenizer import build_tokenizer
from paravt_env.parsing import parse_turn

def _sft():
    from agents.lmm.default import _sft_module
    return _sft_module()


WC = WorldConfig(crop_max_frames=4)  # the LMM default: 56x56 frames


@pytest.fixture(scope="module")
def corpora():
    native = build_corpus(3, 3, 4, "native", seed=0, wc=WC, budgets=(4,), oracle_fraction=0.5, n_frame=3)
    paravt = build_corpus(0, 3, 4, "paravt", seed=1, wc=WC, budgets=(4,), index_range=(3000, 6000), oracle_fraction=0.5)
    return native, paravt


@pytest.fixture(scope="module")
def policy(corpora):
    texts = [m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
             for s in corpora[0] + corpora[1] for m in s.messages]
    tok = build_tokenizer(texts, vocab_size=600)
    return TransformersPolicy(build_tiny_model(tok, seed=0), tok, build_image_processor())


def test_native_corpus_uses_tool_code(corpora):
    native, _ = corpora
    tools = [s for s in native if s.kind == "tool"]
    assert tools and all(s.dialect == "native" for s in tools)
    for s in tools:
        first = s.assistant_texts[0]
        assert "<tool_code>crop_video(start_time=" in first and "<tool_call>" not in first
        assert all(c.parseable and c.syntax == "python" for c in parse_turn(first).tool_calls)
        assert "<answer>" not in s.assistant_texts[-1] and "Answer: " in s.assistant_texts[-1]
        # tool responses come from the env itself
        responses = [m for m in s.messages if m["role"] == "user"][1:]
        assert responses and all("<tool_response>" in p["text"] for m in responses for p in m["content"])
    caps = [s for s in native if s.kind in ("caption", "frame")]
    assert caps and all(caption_objects(s.assistant_texts[0]) is not None for s in caps)
    assert all(s.assistant_texts[0].startswith("Scenes: ") for s in caps)
    assert {s.kind for s in caps} == {"caption", "frame"}
    assert all(len(s.meta["timestamps"]) == 1 for s in caps if s.kind == "frame")


def test_cold_start_corpus_is_paravt(corpora):
    _, paravt = corpora
    for s in paravt:
        for text in s.assistant_texts:
            p = parse_turn(text)
            assert p.think_closed and "<tool_code>" not in text
            assert p.answer is not None or all(c.parseable and c.syntax == "json" for c in p.tool_calls)
        assert "<answer>" in s.assistant_texts[-1]
        assert s.meta["format"] > 0.5
    # the cold start teaches PARALLEL calls: the scene agent tiles a scene with several crops in one turn
    scene = build_corpus(0, 0, 2, "paravt", seed=2, wc=WC, budgets=(4,), oracle_fraction=0.0)
    assert scene and all(len(parse_turn(s.assistant_texts[0]).tool_calls) == WC.max_calls_per_turn for s in scene)


def test_zoom_traces_copy_the_scene_times_of_the_first_responses_into_a_second_turn_of_calls():
    """``search_agent="zoom"``: a trace's first calls end at the integer parts of times the prompt printed,
    its second tool turn thinks the question's scene and calls windows whose ends are the integer parts of
    times its first responses printed (copies, no arithmetic); the answer turn comes last."""
    traces = build_corpus(0, 0, 6, "paravt", seed=3, wc=WC, budgets=(4,), oracle_fraction=0.0,
                          search_agent="zoom", families=("needle", "needle_attribute"))
    zoomed = [s for s in traces if len(s.assistant_texts) == 3]
    assert len(zoomed) >= 3
    for s in zoomed:
        scene = re.search(r"during the (\w+) scene", s.messages[1]["content"][-1]["text"]).group(1)
        second = s.assistant_texts[1]
        assert f"I need a closer look during the {scene} scene." in second
        first_responses = next(m for m in s.messages[3:] if m["role"] == "user")
        printed = " ".join(p.get("text", "") for p in first_responses["content"]) if not isinstance(
            first_responses["content"], str) else first_responses["content"]
        whole = {t.split(".")[0] for t in re.findall(r"\d+\.\d", printed)}
        calls = parse_turn(second).tool_calls
        assert calls and all(c.syntax == "json" for c in calls)
        for c in calls:
            a, b = c.arguments["start_time"], c.arguments["end_time"]
            assert str(a) in whole and str(b) in whole and b > a
        assert parse_turn(s.assistant_texts[2]).answer is not None
        prompt = " ".join(p.get("text", "") for p in s.messages[1]["content"])
        shown = {t.split(".")[0] for t in re.findall(r"\d+\.\d", prompt)} | {"0"}
        first = parse_turn(s.assistant_texts[0]).tool_calls
        assert first and all(str(c.arguments["start_time"]) in shown and str(c.arguments["end_time"]) in shown
                             for c in first)


def test_sighting_zoom_line_writes_the_scene_as_the_first_responses_print_it():
    """``zoom_think="sighting"``: a sweep trace's second tool turn thinks each sighting of the question's scene
    word for word as the first responses printed it, and the middle window of each sighting (the scene's own
    printed first and last times) is among the calls that follow."""
    traces = build_corpus(0, 0, 6, "paravt", seed=3, wc=WC, budgets=(4,), oracle_fraction=0.0,
                          search_agent="sweep", families=("needle", "needle_attribute"), zoom_think="sighting")
    zoomed = [s for s in traces if len(s.assistant_texts) == 3]
    assert len(zoomed) >= 3
    for s in zoomed:
        scene = re.search(r"during the (\w+) scene", s.messages[1]["content"][-1]["text"]).group(1)
        line = parse_turn(s.assistant_texts[1]).think.strip()
        first_responses = next(m for m in s.messages[3:] if m["role"] == "user")
        printed = " ".join(p.get("text", "") for p in first_responses["content"])
        sightings = re.findall(rf"{scene} scene \(([\d.]+)(?:-([\d.]+))? s\)", printed)
        assert sightings and line.startswith(f"I need a closer look during the {scene} scene (")
        assert line.count(f"{scene} scene (") == len(sightings)
        windows = {(c.arguments["start_time"], c.arguments["end_time"])
                   for c in parse_turn(s.assistant_texts[1]).tool_calls}
        first, last = sightings[0]
        assert f"{scene} scene ({first}" in line
        if last:
            assert (int(float(first)), int(float(last))) in windows
    with pytest.raises(ValueError, match="zoom_think"):
        build_corpus(0, 0, 1, "paravt", seed=3, wc=WC, budgets=(4,), oracle_fraction=0.0, search_agent="sweep",
                     families=("needle",), zoom_think="sightings")
    from trainers import sft

    assert sft.corpus_plan(sft.Args(zoom_think="sighting"))["s2_tool"][1]["zoom_think"] == "sighting"
    assert "zoom_think" not in sft.corpus_plan(sft.Args())["s2_tool"][1]
    assert sft.data_key(sft.Args(zoom_think="sighting")) != sft.data_key(sft.Args())
    with pytest.raises(SystemExit):
        sft.parse_args(["--zoom-think", "sightings"])


def test_sighting_drills_are_the_second_tool_turn_on_text_alone(policy):
    """--stage2-sighting: each drill is a sweep trace of a needle question cut after its second tool turn, with no
    frames (the overview's timestamps kept), and only that turn is a target: the sighting line, then calls whose
    ends are the times it copied."""
    from agents.lmm.corpus import encode_record, encoding_policy
    from trainers import sft
    drills = build_corpus(0, 0, 0, "paravt", seed=4, wc=WC, budgets=(4,), oracle_fraction=0.0, search_agent="sweep",
                          families=("needle", "needle_attribute"), zoom_think="sighting", n_sighting=4)
    assert len(drills) == 4 and {s.kind for s in drills} == {"sighting"}
    enc, tok = encoding_policy(policy.tokenizer), policy.tokenizer
    for s in drills:
        assert [m["role"] for m in s.messages] == ["system", "user", "assistant", "user", "assistant"]
        overview = s.messages[1]["content"]
        assert all(p["type"] == "text" for p in overview) and re.match(r"<[\d.]+ seconds>", overview[0]["text"])
        record = encode_record(enc, s)
        assert record["frames"].shape[0] == 0
        target = tok.decode(record["ids"][record["mask"]])
        assert target.startswith("<think>\nI need a closer look during the ") and target.count("<tool_call>") >= 1
        assert target == tok.decode(tok(s.assistant_texts[1] + "<|im_end|>")["input_ids"])
        printed = " ".join(p["text"] for p in s.messages[3]["content"])
        for first, last in re.findall(r"scene \(([\d.]+)-([\d.]+) s\)", parse_turn(s.assistant_texts[1]).think):
            assert f"({first}-{last} s)" in printed and f'"start_time": {int(float(first))}, ' in target
    assert "s2_sighting" not in sft.corpus_plan(sft.Args())
    plan = sft.corpus_plan(sft.Args(stage2_sighting=5, zoom_think="sighting"))["s2_sighting"]
    assert plan[0] == {"n_sighting": 5} and plan[1]["zoom_think"] == "sighting"
    assert plan[1]["index_range"][0] == sft.Args().world().dataset_size  # fresh videos, none of stage 2's
    assert sft.data_key(sft.Args(stage2_sighting=5)) != sft.data_key(sft.Args())


def test_training_budgets_are_every_k_the_lineage_was_trained_on(tmp_path):
    """benchmarks read the K a checkpoint was trained on from its build record: a last step on small K alone does not
    hide the K its parents were trained on."""
    from agents.lmm.evaluate_lmm import training_budgets
    leaf, bare = tmp_path / "leaf", tmp_path / "bare"
    leaf.mkdir(), bare.mkdir()
    parent = {"args": {"budgets": "4,8,16,32,64"}, "parent": {"args": {"budgets": "4"}}}
    (leaf / "sft_args.json").write_text(json.dumps({"args": {"budgets": "16,8"}, "parent": parent}))
    assert training_budgets(str(leaf)) == (4, 8, 16, 32, 64)
    (leaf / "sft_args.json").write_text(json.dumps({"args": {"budgets": "16,8"}}))
    assert training_budgets(str(leaf)) == (8, 16)
    assert training_budgets(str(bare)) == (4, 8, 16, 32, 64)


def test_sighting_drills_with_frames_keep_the_overview(policy):
    """--sighting-frames: the same drills (same seed, same turns, same target) with the overview's frames kept, one
    image per printed timestamp, as the real second turn sees them."""
    from agents.lmm.corpus import encode_record, encoding_policy
    from trainers import sft
    kw = dict(seed=4, wc=WC, budgets=(4,), oracle_fraction=0.0, search_agent="sweep",
              families=("needle", "needle_attribute"), zoom_think="sighting", n_sighting=2)
    text, seen = (build_corpus(0, 0, 0, "paravt", sighting_frames=f, **kw) for f in (False, True))
    enc = encoding_policy(policy.tokenizer)
    for a, b in zip(text, seen):
        assert a.assistant_texts == b.assistant_texts
        images = [p for p in b.messages[1]["content"] if p["type"] == "image"]
        stamps = [p for p in b.messages[1]["content"] if p["type"] == "text" and re.match(r"<[\d.]+ seconds>", p["text"])]
        assert len(images) == len(stamps) == 4
        ra, rb = encode_record(enc, a), encode_record(enc, b)
        assert rb["frames"].shape[0] == 4 and ra["frames"].shape[0] == 0
        assert policy.tokenizer.decode(ra["ids"][ra["mask"]]) == policy.tokenizer.decode(rb["ids"][rb["mask"]])
    plan = sft.corpus_plan(sft.Args(stage2_sighting=5, sighting_frames=True))["s2_sighting"]
    assert plan[1]["sighting_frames"] is True
    assert sft.data_key(sft.Args(stage2_sighting=5, sighting_frames=True)) != sft.data_key(sft.Args(stage2_sighting=5))


def test_stage2_fresh_draws_stage_two_from_videos_no_other_part_uses():
    """--stage2-fresh: stage 2's parts come from the block of train episodes after the drills' (unseen videos), and
    samples built from that plan really carry such episodes; by default stage 2 keeps [--stage1-episodes, size)."""
    from trainers import sft
    size = sft.Args().world().dataset_size
    default, fresh = sft.corpus_plan(sft.Args()), sft.corpus_plan(sft.Args(stage2_fresh=True))
    assert default["s2_tool"][1]["index_range"] == (sft.Args().stage1_episodes, size)
    lo, hi = size + sft.DRILL_EPISODES, size + 2 * sft.DRILL_EPISODES
    for part in ("s2_tool", "s2_direct", "s2_frame", "s2_caption"):
        assert fresh[part][1]["index_range"] == (lo, hi) and fresh[part][1]["wc"].dataset_size == hi
    assert fresh["s1_frame"][1]["index_range"] == default["s1_frame"][1]["index_range"]
    kwargs = dict(fresh["s2_direct"][1], wc=dataclasses.replace(WC, dataset_size=hi), seed=0)
    samples = build_corpus(0, 2, 1, "paravt", **kwargs)
    assert samples and all(lo <= s.meta["index"] < hi for s in samples)
    assert sft.data_key(sft.Args(stage2_fresh=True)) != sft.data_key(sft.Args())


def test_render_turn_dialects():
    t = render_turn("native", "look", windows=[(1.0, 5.0)], rng=np.random.default_rng(0), close_think_p=0.0)
    assert "</think>" not in t and parse_turn(t).tool_calls[0].arguments == {"start_time": 1.0, "end_time": 5.0}
    t = render_turn("paravt", "look at it", answer="B")
    assert parse_turn(t).answer == "B"
    t = render_turn("paravt", "look", windows=[(3.0, 9.0)])
    assert '"start_time": 3, "end_time": 9' in t and parse_turn(t).tool_calls[0].syntax == "json"


def test_revoice_native_keeps_the_content_and_changes_the_dialect():
    from agents.lmm.corpus import NATIVE_THINK_SPREAD, revoice_native
    rng = np.random.default_rng(0)
    tool = render_turn("paravt", f"{THINK_TOOL} The cave scene in the overview: red star.",
                       windows=[(0.0, 150.0), (150.0, 392.5)])
    native = revoice_native(tool, "tool", rng, close_think_p=0.0)
    p, q = parse_turn(tool), parse_turn(native)
    assert [c.arguments for c in q.tool_calls] == [c.arguments for c in p.tool_calls]
    assert all(c.syntax != "json" for c in q.tool_calls) and "</think>" not in native
    line = native.removeprefix("<think>\n")
    opener = next(o for o in NATIVE_THINK_SPREAD["tool"] if line.startswith(o))
    assert line[len(opener):].split("\n")[0] == " The cave scene in the overview: red star."  # the fixed line gives way
    answer = revoice_native(render_turn("paravt", "A. red star: yes.", answer="A"), "answer_after_tool", rng,
                            close_think_p=1.0)
    assert answer.endswith("</think>\nAnswer: A") and "A. red star: yes." in answer
    zoom = revoice_native(render_turn("paravt", "I need a closer look during the cave scene (1.0-9.0 s).",
                                      windows=[(1.0, 9.0)]), "tool", rng)
    assert "I need a closer look during the cave scene (1.0-9.0 s)." in zoom  # only the fixed line is replaced
    for broken in ("<think>\nlook", render_turn("paravt", "look", windows=[(1.0, 2.0)]) + "<answer>A</answer>",
                   '<think>\nlook\n</think>\n<tool_call>{"name": "crop_video", "arguments": {}}</tool_call>'):
        assert revoice_native(broken, "tool", rng) is None
    with pytest.raises(ValueError, match="decision"):
        revoice_native(tool, "call", rng)


def test_native_share_writes_each_format_marker_natively_with_that_probability():
    """--stage2-native-share: each marker (</think>, each call's wrapper, the answer's) is native with
    probability p, independently; p = 0 draws nothing from the rng and renders the plain ParaVT turn."""
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    plain = render_turn("paravt", "look", windows=[(1.0, 5.0), (6.0, 9.0)])
    assert render_turn("paravt", "look", windows=[(1.0, 5.0), (6.0, 9.0)], rng=rng, native_share=0.0) == plain
    assert rng.bit_generator.state == state
    native = render_turn("paravt", "look", windows=[(1.0, 5.0), (6.0, 9.0)], rng=rng, native_share=1.0)
    assert "</think>" not in native and native.count("<tool_code>") == 2 and "<tool_call>" not in native
    assert render_turn("paravt", "look", answer="B", rng=rng, native_share=1.0).endswith("Answer: B")
    counts = {"open think": 0, "native call": 0, "native answer": 0}
    for _ in range(2000):
        t = render_turn("paravt", "look", windows=[(1.0, 5.0), (6.0, 9.0)], rng=rng, native_share=0.3)
        counts["open think"] += "</think>" not in t
        counts["native call"] += t.count("<tool_code>") / 2
        a = render_turn("paravt", "look", answer="B", rng=rng, native_share=0.3)
        counts["native answer"] += "<answer>" not in a
        assert all(c.parseable for c in parse_turn(t).tool_calls)  # either way the env executes the calls
    assert all(abs(n / 2000 - 0.3) < 0.04 for n in counts.values()), counts
    # build_corpus: the direct answers and tool traces take it (the env still scores the native answers)
    for s in build_corpus(0, 2, 2, "paravt", seed=3, wc=WC, budgets=(4,), native_share=1.0):
        assert "Answer: " in s.assistant_texts[-1] and "<answer>" not in s.assistant_texts[-1], s.kind


def test_native_share_is_one_priors_knob(tmp_path):
    from trainers import sft
    with pytest.raises(SystemExit, match="one prior"):
        sft.main(sft.parse_args(["--tool-prior", "both", "--stage2-native-share", "0.3", "--out", str(tmp_path)]))
    with pytest.raises(SystemExit, match=r"\[0, 1\]"):
        sft.main(sft.parse_args(["--stage2-native-share", "1.5", "--out", str(tmp_path)]))
    plain, mixed = (sft.parse_args(["--stage2-native-share", x]) for x in ("0", "0.3"))
    assert sft.data_key(plain) == sft.data_key(sft.parse_args([]))  # corpora built before the knob keep their key
    assert sft.data_key(mixed) != sft.data_key(plain)
    for part in ("s2_tool", "s2_direct"):  # the cold start's traces and direct answers; nothing else
        assert sft.corpus_plan(mixed)[part][0]["native_share"] == 0.3 and "native_share" not in sft.corpus_plan(plain)[part][0]
    assert [k for k, (counts, _) in sft.corpus_plan(mixed).items() if "native_share" in counts] == ["s2_tool", "s2_direct"]


def test_varied_native_think_opens_native_turns_with_their_own_lines_and_leaves_paravt_alone():
    """--native-think varied: every native turn opens with one of NATIVE_THINK's lines for its decision (all of
    them used, none starting with a ParaVT line's first word); ParaVT traces keep the fixed lines; the default
    (fixed) renders what it always did, so the tokenizer's texts and old corpora do not change."""
    from agents.lmm.corpus import NATIVE_THINK, THINK_AFTER_TOOL
    from trainers import sft

    def opening(text):
        return text.removeprefix("<think>\n").split("\n")[0]

    fixed = build_corpus(0, 0, 6, "native", seed=5, wc=WC, budgets=(4,), oracle_fraction=0.5)
    again = build_corpus(0, 0, 6, "native", seed=5, wc=WC, budgets=(4,), oracle_fraction=0.5, native_think="fixed")
    assert [s.assistant_texts for s in fixed] == [s.assistant_texts for s in again]
    assert {opening(s.assistant_texts[0]) for s in fixed} == {THINK_TOOL}
    varied = build_corpus(0, 0, 24, "native", seed=5, wc=WC, budgets=(4,), oracle_fraction=0.5, native_think="varied")
    firsts = [opening(s.assistant_texts[0]) for s in varied]
    lasts = [opening(s.assistant_texts[-1]) for s in varied if s.meta["tool_calls"]]
    assert set(firsts) == set(NATIVE_THINK["tool"]) and set(lasts) <= set(NATIVE_THINK["answer_after_tool"])
    assert all("<tool_code>" in s.assistant_texts[0] for s in varied)
    paravt_first_words = {line.split()[0] for line in (THINK_TOOL, THINK_DIRECT, THINK_AFTER_TOOL)}
    assert not {line.split()[0].rstrip(",") for lines in NATIVE_THINK.values() for line in lines} & paravt_first_words
    paravt = build_corpus(0, 0, 4, "paravt", seed=5, wc=WC, budgets=(4,), native_think="varied")
    assert {opening(s.assistant_texts[0]) for s in paravt} == {THINK_TOOL}
    assert sft.data_key(sft.parse_args(["--native-think", "fixed"])) == sft.data_key(sft.parse_args([]))
    varied_args = sft.parse_args(["--native-think", "varied"])
    assert sft.data_key(varied_args) != sft.data_key(sft.parse_args([]))
    assert sft.corpus_plan(varied_args)["s1_native"][1]["native_think"] == "varied"
    assert sft.corpus_plan(varied_args)["s2_tool"][1]["native_think"] == "varied"  # for its native rollouts, if any


def test_native_traces_play_whole_rollouts_in_the_native_dialect():
    """--stage2-native-traces: each direct answer and tool trace is played wholly in one dialect, native with
    that probability; 0 draws nothing and renders what it always did."""
    from agents.lmm.corpus import NATIVE_THINK_SPREAD

    def dialect_of(text):
        return "native" if "<tool_code>" in text or "Answer: " in text else "paravt"

    plain = build_corpus(0, 3, 3, "paravt", seed=7, wc=WC, budgets=(4,))
    zero = build_corpus(0, 3, 3, "paravt", seed=7, wc=WC, budgets=(4,), native_trace_share=0.0)
    assert [s.assistant_texts for s in plain] == [s.assistant_texts for s in zero]
    every = build_corpus(0, 3, 3, "paravt", seed=7, wc=WC, budgets=(4,), native_trace_share=1.0, native_think="spread")
    assert {s.dialect for s in every} == {"native"}
    for s in every:
        assert all(dialect_of(t) == "native" and "<answer>" not in t and "<tool_call>" not in t
                   for t in s.assistant_texts), s.assistant_texts
    # spread openers come before a grounded line, which native rollouts still say
    grounded = build_corpus(0, 6, 6, "paravt", seed=7, wc=WC, budgets=(4,), native_trace_share=1.0,
                            native_think="spread", grounded_think=True, grounded_direct_think=True)
    said = [t.removeprefix("<think>\n").split("\n")[0] for s in grounded for t in s.assistant_texts]
    openers = {o for lines in NATIVE_THINK_SPREAD.values() for o in lines}
    assert all(any(line.startswith(o) for o in openers) for line in said), said
    assert any(" The crops show" in line or " The overview shows" in line for line in said), said
    half = build_corpus(0, 12, 12, "paravt", seed=7, wc=WC, budgets=(4,), native_trace_share=0.5)
    assert {s.dialect for s in half} == {"native", "paravt"}
    for s in half:  # one dialect per rollout, every turn of it
        assert {dialect_of(t) for t in s.assistant_texts} == {s.dialect}, s.assistant_texts


def test_direct_drills_can_be_played_without_a_tool_advertised():
    """--drill-no-tool-share: direct answers played in the env's tools=False setting carry its prompt (no tool
    advertised) and are still right; tool traces keep the tool prompt; 0 draws nothing."""
    from paravt_env.env import NO_TOOL_SYSTEM_PROMPT
    from trainers import sft
    no_tool_head = NO_TOOL_SYSTEM_PROMPT.split("{k}")[0]

    def system(s):
        return s.messages[0]["content"] if isinstance(s.messages[0]["content"], str) else s.messages[0]["content"][0]["text"]

    plain = build_corpus(0, 3, 3, "paravt", seed=7, wc=WC, budgets=(4, 64))
    zero = build_corpus(0, 3, 3, "paravt", seed=7, wc=WC, budgets=(4, 64), direct_no_tool_share=0.0)
    assert [s.assistant_texts for s in plain] == [s.assistant_texts for s in zero]
    every = build_corpus(0, 4, 3, "paravt", seed=7, wc=WC, budgets=(4, 64), direct_no_tool_share=1.0)
    direct = [s for s in every if s.kind == "direct"]
    tool = [s for s in every if s.kind == "tool"]
    assert direct and tool
    assert all(system(s).startswith(no_tool_head) and "crop_video" not in system(s) for s in direct)
    assert all(s.meta["correct"] for s in direct)
    assert all("crop_video" in system(s) for s in tool)
    args = sft.parse_args(["--stage1-direct-needle", "10", "--drill-no-tool-share", "1"])
    assert sft.corpus_plan(args)["s1_direct_needle"][1]["direct_no_tool_share"] == 1.0
    assert sft.data_key(args) != sft.data_key(sft.parse_args(["--stage1-direct-needle", "10"]))
    assert sft.data_key(sft.parse_args(["--drill-no-tool-share", "0"])) == sft.data_key(sft.parse_args([]))


def test_drills_can_leave_the_call_or_answer_decision_untrained(policy):
    """--no-drill-decisions: a direct answer's first think token and its <answer> tag (the two places where
    a turn picks answering over calling) are context, every other assistant token is still a target."""
    from agents.lmm.corpus import encode_record, encoding_policy
    from trainers import sft
    enc = encoding_policy(policy.tokenizer)
    tok = policy.tokenizer
    samples = build_corpus(0, 3, 0, "paravt", seed=5, wc=WC, budgets=(4, 64), decisions_trained=False)
    assert samples and all(not s.decisions_trained for s in samples)
    for s in samples:
        free = encode_record(enc, s)
        full = encode_record(enc, dataclasses.replace(s, decisions_trained=True))
        untrained = np.flatnonzero(full["mask"] & ~free["mask"])
        assert [tok.decode(free["ids"][p - 2:p]) for p in untrained][0] == "<think>\n"
        assert tok.convert_ids_to_tokens(int(free["ids"][untrained[1]])) == "<answer>"
        assert len(untrained) == 2 and "</answer>" in tok.decode(free["ids"][free["mask"]])
    kwargs = sft.corpus_plan(sft.parse_args(["--stage1-direct-needle", "5", "--no-drill-decisions"]))
    assert kwargs["s1_direct_needle"][1]["decisions_trained"] is False
    # without a tool advertised there is no choice to keep out of training
    no_tool = build_corpus(0, 3, 0, "paravt", seed=5, wc=WC, budgets=(4, 64), decisions_trained=False,
                           direct_no_tool_share=1.0)
    assert no_tool and all(s.decisions_trained and not s.meta["tools"] for s in no_tool)
    assert "decisions_trained" not in sft.corpus_plan(sft.parse_args(["--stage1-direct-needle", "5"]))["s1_direct_needle"][1]


def test_spread_native_openers_each_start_with_a_token_of_their_own():
    """--native-think spread: within a turn's choice (tool or direct first; answer after a tool) every native
    opener has a first token no other opener and no ParaVT think line (or restated option letter) starts with,
    so the native mass is spread over many first tokens and the ParaVT line stays the likeliest one."""
    from agents.lmm.corpus import NATIVE_THINK_SPREAD, THINK_AFTER_TOOL
    from agents.lmm.default import shipped_checkpoint
    path = shipped_checkpoint("strong")
    if path is None:
        pytest.skip("no shipped checkpoint (its tokenizer decides the first tokens)")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(path))

    def first(line):
        return tok.encode(line)[0]

    taken = {first(x) for x in (THINK_TOOL, THINK_DIRECT, THINK_AFTER_TOOL, "The crops show", "The overview shows",
                                "A. x", "B. x", "C. x", "D. x", "E. x")}
    for choice in (NATIVE_THINK_SPREAD["tool"] + NATIVE_THINK_SPREAD["direct"], NATIVE_THINK_SPREAD["answer_after_tool"]):
        firsts = [first(line) for line in choice]
        assert len(set(firsts)) == len(firsts) and not set(firsts) & taken, [tok.decode([f]) for f in firsts]


def test_drill_flags_refuse_runs_without_drills(tmp_path):
    """--drill-no-tool-share and --no-drill-decisions shape the drill parts only: given with --stage1-direct
    answers alone they once trained those in the tool prompt with their decisions, silently."""
    from trainers import sft
    with pytest.raises(SystemExit, match="--stage1-direct-needle"):
        sft.main(sft.parse_args(["--stage1-direct", "40", "--drill-no-tool-share", "1.0", "--out", str(tmp_path)]))
    with pytest.raises(SystemExit, match="none of"):
        sft.main(sft.parse_args(["--no-drill-decisions", "--out", str(tmp_path)]))
    with pytest.raises(SystemExit, match=r"\[0, 1\]"):
        sft.main(sft.parse_args(["--stage1-direct-needle", "8", "--drill-no-tool-share", "1.5", "--out", str(tmp_path)]))
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_native_traces_are_one_priors_knob(tmp_path):
    from trainers import sft
    with pytest.raises(SystemExit, match="one prior"):
        sft.main(sft.parse_args(["--tool-prior", "both", "--stage2-native-traces", "0.5", "--out", str(tmp_path)]))
    with pytest.raises(SystemExit, match=r"\[0, 1\]"):
        sft.main(sft.parse_args(["--stage2-native-traces", "-0.1", "--out", str(tmp_path)]))
    plain, mixed = (sft.parse_args(["--stage2-native-traces", x, "--native-think", "spread"]) for x in ("0", "0.5"))
    assert sft.data_key(sft.parse_args(["--stage2-native-traces", "0"])) == sft.data_key(sft.parse_args([]))
    assert sft.data_key(mixed) != sft.data_key(plain)
    assert [k for k, (counts, _) in sft.corpus_plan(mixed).items() if "native_trace_share" in counts] == \
        ["s2_tool", "s2_direct"]
    assert sft.corpus_plan(mixed)["s2_direct"][1]["native_think"] == "spread"


def test_continuation_keeps_its_parents_world(tmp_path):
    """--init-from carries the parent's frame size, crop frames and K over (benchmarks read them from the last
    build's record), unless a flag says otherwise; a preset does not override them."""
    from trainers import sft
    parent = tmp_path / "parent"
    (parent / "cold_start").mkdir(parents=True)
    (parent / "sft_args.json").write_text(json.dumps({"args": {"budgets": "4,8,16,32,64", "frame_size": 64,
                                                               "crop_max_frames": 16}}))
    init = ["--init-from", str(parent / "cold_start"), "--preset", "cpu"]
    args = sft.parse_args(init)
    assert (args.budgets, args.frame_size, args.crop_max_frames) == ("4,8,16,32,64", 64, 16)
    args = sft.parse_args(init + ["--budgets", "4,8", "--frame-size", "56"])
    assert (args.budgets, args.frame_size, args.crop_max_frames) == ("4,8", 56, 16)
    assert sft.parse_args(["--preset", "cpu"]).budgets == sft.PRESETS["cpu"].get("budgets", sft.Args.budgets)
    bare = tmp_path / "bare"  # a folder without a build record: nothing to inherit
    bare.mkdir()
    assert sft.parse_args(["--init-from", str(bare)]).budgets == sft.Args.budgets


def test_crop_sampling_leaves_the_vocabulary_as_it_is():
    """A build may continue its parent in a world of other crop sampling (--crop-max-frames 16 from an
    8-frame parent): the BPE's texts are the same, so the tokenizer is and --init-from is not refused. The
    frames a response lists do change, so the corpus of such a build differs."""
    from agents.lmm.corpus import tokenizer_texts, tool_response_text
    eight, sixteen = WorldConfig(crop_max_frames=8), WorldConfig(crop_max_frames=16)
    assert tokenizer_texts(sixteen, n=12) == tokenizer_texts(eight, n=12)
    env = sixteen.env("train")
    env.reset(seed=0, options={"episode_index": 0, "frame_budget": 4})
    env.step('<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 60}}</tool_call>')
    assert "(16 frames)" in tool_response_text(env.unwrapped)
    env.close()


def test_round_windows_whole_seconds():
    from agents.lmm.corpus import round_windows
    assert round_windows([(12.3, 20.6), (0.0, 4.0)]) == [(12.0, 21.0), (0.0, 4.0)]


def test_loss_mask_covers_assistant_tokens_only(corpora, policy):
    sample = next(s for s in corpora[1] if s.kind == "tool")
    conv = encode_sample(policy, sample.messages)
    tok = policy.tokenizer
    masked = tok.decode([t for t, m in zip(conv.token_ids, conv.generated_mask) if m])
    expected = "".join(t + "<|im_end|>" for t in sample.assistant_texts)
    assert masked == expected
    unmasked = tok.decode([t for t, m in zip(conv.token_ids, conv.generated_mask) if not m])
    assert "<tool_response>" in unmasked and "<tool_response>" not in masked
    # same tokens as rendering the whole chat with the template (which adds a final "\n")
    full = policy.start(sample.messages, add_generation_prompt=False)
    assert conv.token_ids == full.token_ids[:len(conv.token_ids)] and len(full) == len(conv) + 1


def test_args_cli_documents_every_knob(capsys):
    import dataclasses
    sft = _sft()
    a = sft.parse_args(["--tool-prior", "weak", "--stage1-steps", "3", "--no-progress"])
    assert a.tool_prior == "weak" and a.stage1_steps == 3 and a.progress is False
    assert all(f.metadata.get("help") for f in dataclasses.fields(sft.Args))


def test_default_checkpoint_builds(tmp_path):
    from agents.lmm.default import default_checkpoint
    path = default_checkpoint("weak", cache_dir=str(tmp_path), progress=False, stage1_steps=2, stage2_steps=2,
                              stage1_frame=4, stage1_caption=4, stage1_direct=4, stage2_tool=4, stage2_direct=4,
                              stage2_frame=2, stage2_caption=2, eval_frames=0, eval_crops=0)
    TransformersPolicy(path)


def test_corpus_teaches_when_tools_are_needed(corpora):
    """Direct answers only where the overview shows the evidence, tool traces only where it does
    not, and every kept final answer is correct (keep_wrong=0)."""
    for s in corpora[0] + corpora[1]:
        if s.kind in ("caption", "frame"):
            continue
        assert s.meta["correct"] or s.meta["accuracy"] >= 0.5
        assert s.meta["visible"] == (s.kind == "direct")
        first = s.assistant_texts[0]
        assert (THINK_DIRECT in first) == (s.kind == "direct") and (THINK_TOOL in first) == (s.kind == "tool")
        thinks = [t.split("<think>\n", 1)[1].split("\n", 1)[0] for t in s.assistant_texts]
        assert not any(ch.isdigit() for t in thinks for ch in t)  # fixed, number-free think lines


def test_evidence_visible_matches_tool_necessity_rule():
    from agents.lmm.corpus import evidence_visible
    ev = [(10.0, 12.0), (50.0, 51.0)]
    assert evidence_visible([11.0, 30.0], ev, "needle") and not evidence_visible([11.0, 30.0], ev, "counting")
    assert evidence_visible([11.0, 50.5], ev, "temporal_order") and not evidence_visible([12.0], ev, "needle")
    assert not evidence_visible([1.0], [], "global")


def test_gpu_preset_and_explicit_flags_win():
    sft = _sft()
    a = sft.parse_args(["--preset", "gpu", "--stage1-steps", "7"])
    assert a.stage1_steps == 7 and a.stage2_steps == sft.PRESETS["gpu"]["stage2_steps"]
    assert a.device == "cuda" and a.time_budget_s > 0 and a.frame_size == 56
    # the recipe that learned objects on the H200 (bf16 + lr >= 1e-3 did not): fp32, lr 6e-4, batch 256
    assert (a.amp, a.stage1_lr, a.batch_size, a.batch_tokens, a.perception_warmup) == (False, 6e-4, 256, 65536, 0.6)
    # both priors in one 10-minute GPU call, the corpus included
    assert a.time_budget_s <= 570
    assert sft.parse_args(["--preset", "gpu", "--amp"]).amp is True
    assert sft.parse_args([]).stage1_steps == sft.Args().stage1_steps


def test_a_config_file_sets_flags_the_command_line_and_preset_order_holds(tmp_path):
    """--config FILE: its values beat the preset's, the command line beats both; booleans are --x / --no-x; a
    build record (sft_args.json) loads its arguments; an unknown key is refused by name."""
    sft = _sft()
    cfg = tmp_path / "build.yaml"
    cfg.write_text("preset: gpu\nstage1_steps: 9\namp: true\nbudgets: [4, 8, 16]\n")
    a = sft.parse_args(["--config", str(cfg), "--stage1-steps", "11"])
    assert (a.stage1_steps, a.amp, a.budgets) == (11, True, "4,8,16")
    assert a.stage2_steps == sft.PRESETS["gpu"]["stage2_steps"]  # the preset still fills what no one set
    assert sft.parse_args(["--config", str(cfg), "--no-amp"]).amp is False
    from agents.lmm.default import shipped_checkpoint
    record = shipped_checkpoint("strong") / "sft_args.json"
    built = json.loads(record.read_text())["args"]
    again = sft.parse_args(["--config", str(record)])
    assert (again.stage1_steps, again.tool_prior, again.seed) == (built["stage1_steps"], built["tool_prior"],
                                                                   built["seed"])
    cfg.write_text("stage1_stepz: 9\n")
    with pytest.raises(SystemExit):
        sft.parse_args(["--config", str(cfg)])


def test_default_checkpoint_prefers_shipped(tmp_path, monkeypatch):
    import agents.lmm.default as d
    ck = tmp_path / "tiny-strong" / "cold_start"
    ck.mkdir(parents=True)
    (ck / "config.json").write_text("{}")
    monkeypatch.setattr(d, "SHIPPED_ROOT", tmp_path)
    monkeypatch.delenv("PARAVT_NO_SHIPPED", raising=False)
    assert d.default_checkpoint("strong", cache_dir=str(tmp_path / "cache")) == ck


# ------------------------------------------------------------------ captions as the sub-agent sees crops
def test_caption_samples_follow_env_crop_sampling_and_subagent_prompt():
    from agents.lmm.corpus import CaptionConfig, caption_samples
    from agents.lmm.subagent import Subagent
    from paravt_env.sources import Frames, SyntheticDataset

    ds = SyntheticDataset("train", 0, 60)
    rng = np.random.default_rng(3)
    cc = CaptionConfig(max_frames=(8, 16), aug_p=0.5, per_episode=1)
    eps = []
    samples = caption_samples(6, 12, rng=rng, wc=WC, ds=ds, pick=lambda: eps.append(int(rng.integers(60))) or eps[-1],
                              cc=cc)
    assert sum(s.kind == "frame" for s in samples) == 6 and sum(s.kind == "caption" for s in samples) == 12
    sizes, max_frames = set(), set()
    for s, i in zip(samples, eps):
        src = ds[i].source
        a, b = s.meta["window"]
        ts = src.crop_timestamps(a, b, 1.0, s.meta["max_frames"])      # the env's crop sampling
        np.testing.assert_allclose(s.meta["timestamps"], ts)
        assert (len(ts) == 1) == (s.kind == "frame")
        max_frames.add(s.meta["max_frames"]) if s.kind == "caption" else None
        assert s.assistant_texts[0] == src.caption(np.asarray(ts))      # the world's caption of those frames
        images = [p["image"] for p in s.messages[0]["content"] if p.get("type") == "image"]
        assert all(im.shape == (56, 56, 3) for im in images)              # 64x64 renders fitted to 56
        sizes.add(s.meta["render_size"])
        # the very messages the public Subagent sends for these frames
        mine = Subagent(None, frame_size=(56, 56)).messages(Frames(np.stack(images), np.asarray(ts)), s.meta["question"])
        assert [p.get("text") for p in mine[0]["content"]] == [p.get("text") for p in s.messages[0]["content"]]
    assert sizes == {(56, 56), (64, 64)} and max_frames == {8, 16}


# ------------------------------------------------------------------ pre-rendered records and the batched loss
@pytest.fixture(scope="module")
def records(corpora, policy):
    from agents.lmm.corpus import encode_record, encoding_policy
    enc = encoding_policy(policy.tokenizer)
    samples = [s for s in corpora[0] + corpora[1]]
    return samples, [encode_record(enc, s) for s in samples]


def test_grid_only_encoding_equals_the_real_processor(records, policy):
    samples, recs = records
    kinds = set()
    for s, r in zip(samples, recs):
        conv = encode_sample(policy, s.messages)   # the real image processor
        assert r["ids"].tolist() == conv.token_ids and r["mask"].tolist() == conv.generated_mask
        assert r["frames"].dtype == np.uint8 and len(r["frames"]) == len(conv.images)
        np.testing.assert_array_equal(r["frames"], np.stack(conv.images))
        kinds.add(s.kind)
    assert kinds == {"frame", "caption", "direct", "tool"}


def _load(recs, tmp_path):
    from agents.lmm.corpus import pack_records
    sft = _sft()
    (tmp_path / "part").mkdir(exist_ok=True)
    half = len(recs) // 2
    np.savez(tmp_path / "part" / "chunk_00000.npz", **pack_records(recs[:half]))
    np.savez(tmp_path / "part" / "chunk_00001.npz", **pack_records(recs[half:]))
    return sft.Records.load(tmp_path / "part")


def test_batched_loss_equals_policy_nll_and_gradients(records, policy, tmp_path):
    """The training loss (pre-rendered frames, left-padded batch, logits only at targets) equals
    the policy's mean NLL over assistant tokens, and so do its gradients (fp32)."""
    sft = _sft()
    samples, recs = records
    loaded = _load(recs, tmp_path)
    assert len(loaded) == len(recs) and loaded.kinds() == {k: sum(s.kind == k for s in samples)
                                                           for k in {s.kind for s in samples}}
    idx = np.array([0, 3, len(recs) - 1, 5])
    tr = sft.Trainee(policy.model, policy.tokenizer, policy.image_processor, "cpu", fast=False)
    model = policy.model
    model.zero_grad()
    loss, n = tr.loss(tr.collate(loaded, idx))
    loss.backward()
    g1 = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    ref, n_ref = sft.nll_loss(policy, [encode_sample(policy, samples[i].messages) for i in idx])
    ref.backward()
    assert n == n_ref and abs(loss.item() - ref.item()) < 1e-5
    g2 = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    assert g1.keys() == g2.keys() and any("visual" in k for k in g1)
    for k in g1:
        torch.testing.assert_close(g1[k], g2[k], atol=1e-6, rtol=1e-4)
    model.zero_grad()


@pytest.fixture
def sampling_policy(policy):
    """``policy`` as the trainers load one: an untrained model must not sample image tokens."""
    from trainers.core import FORBIDDEN_TOKENS, suppress_tokens
    hook = suppress_tokens(policy.model, [policy.tokenizer.convert_tokens_to_ids(t) for t in FORBIDDEN_TOKENS])
    yield policy
    hook.remove()


def test_rollout_rows_train_exactly_the_tokens_the_model_sampled(corpora, sampling_policy, tmp_path):
    """A conversation the policy played (frames, a prompt, two sampled turns with a tool response between), written
    as a rollout record and loaded as a corpus part: its training loss is the policy's mean NLL at T = 1 over the
    tokens it sampled, and nothing else is a target."""
    from agents.lmm.corpus import pack_records, rollout_record
    sft, policy = _sft(), sampling_policy
    sample = next(s for s in corpora[1] if s.kind == "direct")
    prompt = [m for m in sample.messages if m["role"] != "assistant"]
    conv = policy.start(prompt)
    first = policy.generate([conv], temperature=1.0, max_new_tokens=12, seed=3)[0]
    conv.append_completion(first)
    policy.extend(conv, [{"role": "user", "content": "a tool response"}])
    conv.append_completion(policy.generate([conv], temperature=1.0, max_new_tokens=12, seed=4)[0])
    assert sum(conv.generated_mask) >= 2 and len(conv.images) >= 1
    (tmp_path / "rows").mkdir()
    np.savez(tmp_path / "rows" / "chunk_00000.npz",
             **pack_records([rollout_record(conv.token_ids, conv.generated_mask, conv.images)]))
    loaded = sft.stage2_rows(str(tmp_path / "rows"))
    assert loaded.kinds() == {"rollout": 1} and loaded.mask.tolist() == conv.generated_mask
    tr = sft.Trainee(policy.model, policy.tokenizer, policy.image_processor, "cpu", fast=False)
    with torch.no_grad():
        loss, n = tr.loss(tr.collate(loaded, np.array([0])))
        lp = policy.conversation_logprobs([conv], temperature=1.0)[0]
    mask = torch.tensor(conv.generated_mask)
    assert n == int(mask.sum()) and abs(loss.item() + lp[mask].mean().item()) < 1e-5
    with pytest.raises(SystemExit, match="no chunk_"):
        sft.stage2_rows(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="one generated-mask entry per token"):
        rollout_record(conv.token_ids, conv.generated_mask[:-1], conv.images)


def test_answer_weight_scales_exactly_the_answer_tokens(records, policy, tmp_path):
    """--answer-weight: the tokens inside <answer>...</answer> (ParaVT) or after a native
    'Answer:' count w times in the loss, every other assistant token once, the mean still over
    all of them; prompt text that happens to say 'Answer:' is not weighted."""
    sft = _sft()
    tok = policy.tokenizer
    marks = sft.answer_marks(tok)
    text = "<think>\nok\n</think>\n<answer>yellow</answer><|im_end|>user: Answer: D<|im_end|>Answer: C<|im_end|>"
    ids = np.array([tok.encode(text, add_special_tokens=False)])
    user = len(tok.encode("<think>\nok\n</think>\n<answer>yellow</answer><|im_end|>", add_special_tokens=False))
    user_end = len(tok.encode("<think>\nok\n</think>\n<answer>yellow</answer><|im_end|>user: Answer: D<|im_end|>",
                              add_special_tokens=False))
    mask = np.ones(ids.shape, np.bool_)
    mask[0, user:user_end] = False
    weighted = tok.decode(ids[0][sft.answer_token_mask(ids, mask, marks)[0]].tolist())
    assert weighted.replace(" ", "") == "yellow</answer>C<|im_end|>"

    _, recs = records
    loaded = _load(recs, tmp_path)
    idx = np.array([i for i in range(len(recs)) if recs[i]["kind"] in ("direct", "tool")][:3])
    plain = sft.Trainee(policy.model, tok, policy.image_processor, "cpu", fast=False)
    heavy = sft.Trainee(policy.model, tok, policy.image_processor, "cpu", fast=False, answer_weight=5.0)
    b1, b5 = plain.collate(loaded, idx), heavy.collate(loaded, idx)
    assert "loss_weight" not in b1
    is_answer = b5["loss_weight"] == 5.0
    assert int(is_answer.sum()) >= len(idx) and bool((is_answer <= b5["loss_mask"]).all())
    with torch.no_grad():
        l1, n1 = plain.loss(b1)
        l5, n5 = heavy.loss(b5)
        only = dict(b1, loss_weight=is_answer.float())      # the answer tokens' share of the mean
        la, _ = plain.loss(only)
    assert n1 == n5 and abs(l5.item() - (l1.item() + 4.0 * la.item())) < 1e-4 and la.item() > 0


def test_training_steps_lower_the_loss_and_checkpoints_reload(records, policy, tmp_path):
    """A few AdamW steps of the real training path on packed records lower the loss; the saved
    checkpoint reloads to the same loss."""
    sft = _sft()
    _, recs = records
    loaded = _load(recs, tmp_path)
    idx = np.argsort(loaded.lens)[:2]          # the shortest sequences: a fast test
    torch.manual_seed(0)
    tr = sft.Trainee(policy.model, policy.tokenizer, policy.image_processor, "cpu", fast=False)
    batch = tr.collate(loaded, idx)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=3e-3)
    with torch.no_grad():
        before, _ = tr.loss(batch)
    for _ in range(5):
        loss, n = tr.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after, _ = tr.loss(batch)
    assert n > 0 and after.item() < before.item() - 0.1
    save_checkpoint(str(tmp_path / "ck"), policy.model, policy.tokenizer, policy.image_processor)
    model, tok, proc = load_checkpoint(str(tmp_path / "ck"))
    with torch.no_grad():
        again, _ = sft.Trainee(model, tok, proc, "cpu", fast=False).loss(batch)
    assert abs(again.item() - after.item()) < 1e-4


def test_fast_path_trains_on_what_the_stock_path_trains_on_and_an_unusable_one_falls_back(records, policy, tmp_path,
                                                                                           capsys):
    """Trainee(fast=True) patches its model with agents.lmm.fast_qwen and builds pixel values in torch; on the
    same left-padded batch with frames, its pixel values, loss and gradients equal those of the stock Hugging
    Face forward and image processor (Trainee(fast=False) on an unpatched copy). A model the fast path cannot
    patch trains on the stock path, saying why."""
    import copy

    from agents.lmm.fast_qwen import disable_fast_path, is_fast_path_enabled
    sft = _sft()
    stock_model = disable_fast_path(copy.deepcopy(policy.model))  # the policy patched its own model
    fast_model = disable_fast_path(copy.deepcopy(policy.model))
    stock = sft.Trainee(stock_model, policy.tokenizer, policy.image_processor, "cpu", fast=False)
    fast = sft.Trainee(fast_model, policy.tokenizer, policy.image_processor, "cpu")
    assert fast.fast and is_fast_path_enabled(fast_model) and not is_fast_path_enabled(stock_model)
    loaded = _load(records[1], tmp_path)
    idx = np.argsort(loaded.lens)[:3]
    batch = stock.collate(loaded, idx)
    assert "frames" in batch and len(set(loaded.lens[idx].tolist())) > 1  # images, and rows of unequal padding
    for a, b in zip(fast.pixel_values(batch["frames"]), stock.pixel_values(batch["frames"])):
        torch.testing.assert_close(a, b)
    losses = {}
    for name, trainee in (("fast", fast), ("stock", stock)):
        trainee.model.zero_grad()
        loss, n = trainee.loss(batch)
        loss.backward()
        losses[name] = loss.item(), n
    assert losses["fast"][1] == losses["stock"][1] > 0
    assert losses["fast"][0] == pytest.approx(losses["stock"][0], abs=1e-5)
    stock_grads = dict(stock_model.named_parameters())
    for name, p in fast_model.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, stock_grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)

    unusable = disable_fast_path(copy.deepcopy(policy.model))
    del unusable.model.visual.blocks[0].attn.scaling  # vision attention of another transformers release
    capsys.readouterr()
    assert not sft.Trainee(unusable, policy.tokenizer, policy.image_processor, "cpu").fast
    assert "fast path unavailable (FastPathUnavailable: " in capsys.readouterr().err
    assert not is_fast_path_enabled(unusable)


def test_batcher_packs_within_limits_and_covers_each_epoch():
    sft = _sft()
    lens = np.random.default_rng(0).integers(10, 300, 500)
    b = sft.Batcher(lens, max_seqs=32, max_tokens=3000, rng=np.random.default_rng(1))
    seen = [b.next()]
    while b.queue:                            # the rest of that epoch
        seen.append(b.next())
    for idx in seen:
        assert 1 <= len(idx) <= 32 and (len(idx) == 1 or len(idx) * lens[idx].max() <= 3000)
    assert sorted(np.concatenate(seen).tolist()) == list(range(500))   # one epoch: every sequence once
    assert abs(len(seen) - b.per_epoch) <= 2 and len(seen) < 500 / 8


def test_corpus_chunks_do_not_depend_on_which_parts_a_build_asks_for():
    sft = _sft()
    strong, weak = sft.parse_args(["--tool-prior", "strong"]), sft.parse_args(["--tool-prior", "weak"])
    js, jw = sft.chunk_jobs(strong, sft.corpus_plan(strong)), sft.chunk_jobs(weak, sft.corpus_plan(weak))
    assert {j[0] for j in js} - {j[0] for j in jw} == {"s1_native"}
    seeds = lambda jobs: {(n, i): (c, kw["seed"]) for n, i, c, kw in jobs if n != "s1_native"}  # noqa: E731
    assert seeds(js) == seeds(jw) and sft.data_key(strong) == sft.data_key(weak)
    assert len({kw["seed"] for *_, kw in js}) == len(js)
    both = sft.parse_args(["--tool-prior", "both"])
    assert set(sft.corpus_plan(both)) == set(sft.corpus_plan(strong))


def test_learning_rate_warmup_then_cosine_to_floor():
    sft = _sft()
    assert sft.learning_rate(1.0, 0, 0.0, warmup=10) == pytest.approx(0.1)
    assert sft.learning_rate(1.0, 20, 0.0, warmup=10) == pytest.approx(1.0)
    assert sft.learning_rate(1.0, 20, 0.5, warmup=10) == pytest.approx(0.55)
    assert sft.learning_rate(1.0, 20, 1.0, warmup=10) == pytest.approx(0.1)


# ------------------------------------------------------------------ the recipe at small scale on the CPU
TINY = ["--stage1-frame", "12", "--stage1-caption", "6", "--stage1-direct", "3", "--stage1-tool", "3",
        "--stage2-tool", "3", "--stage2-direct", "2", "--stage2-frame", "2", "--stage2-caption", "2",
        "--budgets", "4,8", "--vocab-size", "600", "--eval-frames", "3", "--eval-crops", "2", "--eval-max-new-tokens", "12",
        "--threads", "2", "--no-progress"]


@pytest.fixture(scope="module")
def shared_corpus(tmp_path_factory):
    """One pre-rendered TINY corpus for the tests below (same data settings, so the same corpus)."""
    return str(tmp_path_factory.mktemp("corpus"))


def _tags(runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tags = set()
    for ev in runs.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(ev))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    return tags


def test_gpu_preset_recipe_small_on_cpu(tmp_path, shared_corpus):
    """``--preset gpu`` logic (time budget, packed batches, perception warm-up, held-out caption
    F1 in TensorBoard, both stages, checkpoints) at tiny sizes on the CPU."""
    sft = _sft()
    args = sft.parse_args(["--preset", "gpu", "--device", "cpu", "--workers", "0", "--out", str(tmp_path / "out"),
                           "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
                           "--stage1-steps", "6", "--stage2-steps", "3",
                           "--eval-every", "3", "--log-every", "1", "--batch-size", "8", *TINY])
    assert args.batch_tokens == sft.PRESETS["gpu"]["batch_tokens"] and args.time_budget_s > 60
    path = sft.main(args)
    assert path == tmp_path / "out" / "cold_start" and (path / "config.json").is_file()
    assert (tmp_path / "out" / "base" / "config.json").is_file() and not (tmp_path / "out" / sft.STATE_FILE).exists()
    info = json.loads((tmp_path / "out" / "sft_args.json").read_text())
    assert info["stage1_steps_done"] == 6 and info["stage2_steps_done"] == 3
    assert info["args"]["frame_size"] == 56 and info["args"]["budgets"] == "4,8"
    assert [e["step"] for e in info["stage1_eval"]] == [3, 6] and "crop_object_f1" in info["stage1_eval"][0]
    assert set(info["corpus"]) == {"s1_frame", "s1_caption", "s1_direct", "s1_native", "s2_tool", "s2_direct",
                                   "s2_frame", "s2_caption"}
    tags = _tags(tmp_path / "runs")
    assert {"stage1/loss", "stage1/eval/frame_object_f1", "stage1/eval/crop_object_f1", "stage2/loss",
            "stage1/loss/s1_frame"} <= tags
    # the corpus is rendered once: a weak build with the same data settings reuses it
    cdir = sft.resolve_corpus_dir(args)
    before = {p: p.stat().st_mtime_ns for p in cdir.rglob("chunk_*.npz")}
    weak = sft.main(sft.parse_args(["--preset", "gpu", "--device", "cpu", "--tool-prior", "weak", "--out",
                                    str(tmp_path / "weak"), "--runs-dir", str(tmp_path / "runs"),
                                    "--corpus-dir", shared_corpus, "--stage1-steps", "1",
                                    "--stage2-steps", "1", "--batch-size", "8", *TINY, "--eval-frames", "0",
                                    "--eval-crops", "0"]))
    assert weak.is_dir() and before == {p: p.stat().st_mtime_ns for p in cdir.rglob("chunk_*.npz")}
    winfo = json.loads((tmp_path / "weak" / "sft_args.json").read_text())
    assert "s1_native" not in winfo["corpus"]          # the weak prior saw no native traces


def test_time_budget_stops_cleanly_and_the_same_command_resumes(tmp_path, shared_corpus):
    sft = _sft()
    argv = ["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "3", "--stage2-steps", "1", "--checkpoint-every-s", "0", *TINY]
    # a budget over before stage 1 can start: it stops cleanly, still saves, and says how to resume
    stopped = sft.main(sft.parse_args(argv + ["--time-budget-s", "5"]))
    assert stopped == tmp_path / "out" / "base" and (stopped / "config.json").is_file()
    state = torch.load(tmp_path / "out" / sft.STATE_FILE, weights_only=True)
    assert state["stage"] == "stage1" and state["step"] == 0 and not (tmp_path / "out" / "cold_start").exists()
    with pytest.raises(SystemExit, match="other settings"):   # a resume must not mix settings
        sft.main(sft.parse_args(argv + ["--stage1-lr", "1e-4"]))
    done = sft.main(sft.parse_args(argv))        # the same command, no budget: resumes and finishes
    info = json.loads((tmp_path / "out" / "sft_args.json").read_text())
    assert done.name == "cold_start" and info["stage1_steps_done"] == 3 and info["stage2_steps_done"] == 1
    assert info["stage2_stopped"] is None
    assert not (tmp_path / "out" / sft.STATE_FILE).exists()
    assert sft.main(sft.parse_args(argv)) == done  # already built: nothing to do


def test_a_planted_pickle_train_state_is_skipped_and_never_run(tmp_path, shared_corpus, capsys):
    """train_state.pt loads as data only: one holding code is skipped by name and the build starts afresh."""
    class Planted:
        def __reduce__(self):
            return open, (str(tmp_path / "ran"), "w")

    sft = _sft()
    out = tmp_path / "out"
    out.mkdir()
    torch.save({"key": "x", "stage": "stage1", "step": 0, "model": Planted()}, out / sft.STATE_FILE)
    argv = ["--out", str(out), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "3", "--stage2-steps", "1", *TINY, "--time-budget-s", "5"]
    assert sft.main(sft.parse_args(argv)) == out / "base"
    assert not (tmp_path / "ran").exists()
    assert (f"[sft] skipping {out / sft.STATE_FILE} is not a data-only checkpoint (it refers to io.open); it was "
            "not loaded and nothing in it ran; starting afresh") in capsys.readouterr().err
    state = torch.load(out / sft.STATE_FILE, weights_only=True)  # replaced by this build's own state
    assert state["stage"] == "stage1" and state["step"] == 0


@pytest.mark.parametrize("content,said", [([1, 2], "it holds list, not a saved state"),
                                           ({"key": "x", "stage": "stage1", "step": "four"}, "field 'step' is str"),
                                           ({"key": "x", "stage": "stage9", "step": 0, "train_seconds": 0.0,
                                             "alloc_seconds": 1.0, "model": {}, "opt": {}, "history": {},
                                             "info_done": {}}, "stage 'stage9' step 0 is not a place")])
def test_a_train_state_of_another_shape_is_skipped_by_name(tmp_path, shared_corpus, capsys, content, said):
    """A train_state.pt that loads as data but is not a saved state (a file from elsewhere) is skipped, saying why,
    and the build starts afresh instead of failing on a missing or mistyped field."""
    sft = _sft()
    out = tmp_path / "out"
    out.mkdir()
    torch.save(content, out / sft.STATE_FILE)
    argv = ["--out", str(out), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "3", "--stage2-steps", "1", *TINY, "--time-budget-s", "5"]
    assert sft.main(sft.parse_args(argv)) == out / "base"
    assert f"[sft] skipping {out / sft.STATE_FILE}: {said}" in capsys.readouterr().err


def test_an_exp_name_that_is_not_one_folder_name_is_refused_before_anything_is_written(tmp_path):
    sft = _sft()
    with pytest.raises(SystemExit, match=r"--exp-name '\.\./x' contains a path separator"):
        sft.main(sft.parse_args(["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"),
                                 "--exp-name", "../x", *TINY]))
    assert list(tmp_path.iterdir()) == []


def test_stage2_rows_join_stage_two_as_a_part_of_their_own(tmp_path, shared_corpus):
    """--stage2-rows: the folder's rows are sampled in stage 2 beside the rendered parts (their own loss curve),
    and the build records them; one prior at a time."""
    import shutil
    sft = _sft()
    argv = ["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "2", "--stage2-steps", "4", "--log-every", "1", *TINY]
    base = sft.parse_args(argv)
    _, cdir, _ = sft.prepare_corpus(base, sft.corpus_plan(base), progress=False)
    rows = tmp_path / "rows"
    rows.mkdir()
    for chunk in sorted((cdir / "s2_tool").glob("chunk_*.npz")):   # stand-ins for a model's rollouts
        shutil.copy(chunk, rows / chunk.name)
    sft.main(sft.parse_args(argv + ["--stage2-rows", str(rows), "--stage2-rows-weight", "1000"]))
    info = json.loads((tmp_path / "out" / "sft_args.json").read_text())
    assert info["corpus"]["s2_rows"] == {"tool": 3} and info["args"]["stage2_rows"] == str(rows)
    assert "stage2/loss/s2_rows" in _tags(tmp_path / "runs")
    with pytest.raises(SystemExit, match="one prior"):
        sft.main(sft.parse_args(argv + ["--tool-prior", "both", "--stage2-rows", str(rows)]))


def test_stage1_horizon_keeps_time_for_stage2():
    sft = _sft()
    st = sft.Stage("stage1", {}, {}, steps=100, lr=1.0, end_by=1000.0, next_steps=50, next_share=0.2)
    assert st.horizon(0.0, 900.0, None) == pytest.approx(80.0)           # 100 s left, 20 % kept
    assert st.horizon(10.0, 900.0, 0.5) == pytest.approx(10 + 100 - 50 * 0.5 * 1.3 - 15)
    assert st.horizon(30.0, 999.0, 0.5) == 30.0                          # out of time: the horizon is now
    assert sft.Stage("s", {}, {}, 5, 1.0, alloc_s=7.0).horizon(1.0, 0.0, 0.1) == 7.0   # no budget


def test_a_fitted_last_stage_keeps_one_horizon_when_its_step_time_is_measured():
    """--stage2-fit: the last stage keeps its 15 s from the first step. Kept only once 20 steps had measured the
    step time, they shrank the horizon at once: a stage with under 15 s left then ended at that step, its
    learning rate still near the peak (0.43 of it in a loaded CI run)."""
    sft = _sft()
    last = sft.Stage("stage2", {}, {}, 100000, 1.0, end_by=1000.0)      # no next stage
    assert last.horizon(5.0, 970.0, None) == last.horizon(5.0, 970.0, 0.3) == pytest.approx(5 + 30 - 15)
    progress = [t / last.horizon(t, 960.0 + t, 0.3 if t >= 4 else None) for t in np.arange(0.0, 25.5, 0.5)]
    assert all(b >= a for a, b in zip(progress, progress[1:])) and progress[-1] >= 1.0
    assert max(b - a for a, b in zip(progress, progress[1:])) < 0.05   # no jump: it anneals step by step


@pytest.mark.slow
def test_a_cut_cold_start_still_saves_and_resumes(tmp_path, shared_corpus):
    """A 60 s budget cuts a cold start of 100,000 steps (CI runs
    test_a_cold_start_cut_by_a_short_budget_saves_its_state)."""
    sft = _sft()
    argv = ["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "1", "--stage2-steps", "100000", *TINY, "--eval-frames", "0", "--eval-crops", "0"]
    path = sft.main(sft.parse_args(argv + ["--time-budget-s", "60"]))
    info = json.loads((tmp_path / "out" / "sft_args.json").read_text())
    assert path.name == "cold_start" and (path / "config.json").is_file() and info["stage2_stopped"] == "time budget"
    state = torch.load(tmp_path / "out" / sft.STATE_FILE, weights_only=True)
    assert state["stage"] == "stage2" and state["step"] == info["stage2_steps_done"] > 0


@pytest.mark.slow
def test_a_fitted_cold_start_ends_annealed_before_its_budget(tmp_path, shared_corpus):
    """--stage2-fit: the same run, its cosine stretched over the time left, ends on its own before the budget (not
    stopped by it) with fewer steps than asked, its last learning rate near the cosine's floor (10 % of the peak).
    CI runs test_a_fitted_cold_start_ends_annealed_at_ci_size and
    test_a_fitted_last_stage_keeps_one_horizon_when_its_step_time_is_measured."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    sft = _sft()
    argv = ["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "1", "--stage2-steps", "100000", *TINY, "--eval-frames", "0", "--eval-crops", "0",
            "--stage2-fit", "--time-budget-s", "60", "--log-every", "1"]
    args = sft.parse_args(argv)
    path = sft.main(args)
    info = json.loads((tmp_path / "out" / "sft_args.json").read_text())
    assert path.name == "cold_start" and info["stage2_stopped"] is None
    assert 0 < info["stage2_steps_done"] < 100000 and info["total_seconds"] < 60
    events = EventAccumulator(str(next((tmp_path / "runs").iterdir())))
    events.Reload()
    assert events.Scalars("stage2/lr")[-1].value < 0.15 * args.stage2_lr


def _rendered(sft, argv):
    """``argv`` parsed, its corpus rendered first (as ``main`` renders it): a time budget then starts with the build."""
    args = sft.parse_args(argv)
    sft.prepare_corpus(args, sft.corpus_plan(args), progress=False)
    return args


def test_a_cold_start_cut_by_a_short_budget_saves_its_state(tmp_path, shared_corpus):
    """The cut cold start above at CI size: stage 2 stopped by a 20 s budget saves cold_start and the state to
    resume it from. One torch thread: beside other tests' processes on two cores it steps about twice as fast
    as with two."""
    sft = _sft()
    argv = ["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "1", "--stage2-steps", "100000", *TINY, "--eval-frames", "0", "--eval-crops", "0",
            "--time-budget-s", "20", "--threads", "1"]
    path = sft.main(_rendered(sft, argv))
    info = json.loads((tmp_path / "out" / "sft_args.json").read_text())
    assert path.name == "cold_start" and (path / "config.json").is_file() and info["stage2_stopped"] == "time budget"
    assert info["stage1_steps_done"] == 1
    state = torch.load(tmp_path / "out" / sft.STATE_FILE, weights_only=True)
    assert state["stage"] == "stage2" and state["step"] == info["stage2_steps_done"] > 0


def test_a_fitted_cold_start_ends_annealed_at_ci_size(tmp_path, shared_corpus):
    """The fitted cold start above at CI size: a 45 s budget leaves stage 2 about 15 s before its end (the budget
    less 10 s of margin and 15 s for the final eval and save); it ends there on its own, past its warm-up, its
    last learning rate near the cosine's floor. A time-fitted cosine ends within one step of its floor, so the
    window must hold many steps: one torch thread keeps them fast beside other tests' processes."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    sft = _sft()
    argv = ["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus,
            "--stage1-steps", "1", "--stage2-steps", "100000", *TINY, "--eval-frames", "0", "--eval-crops", "0",
            "--stage2-fit", "--time-budget-s", "45", "--log-every", "1", "--threads", "1"]
    args = _rendered(sft, argv)
    path = sft.main(args)
    info = json.loads((tmp_path / "out" / "sft_args.json").read_text())
    assert path.name == "cold_start" and info["stage2_stopped"] is None
    assert args.warmup <= info["stage2_steps_done"] < 100000 and info["total_seconds"] < 45 - 15
    events = EventAccumulator(str(next((tmp_path / "runs").iterdir())))
    events.Reload()
    assert events.Scalars("stage2/lr")[-1].value < 0.15 * args.stage2_lr


@pytest.mark.slow
def test_both_priors_one_corpus_worker_processes(tmp_path):
    """``--tool-prior both``: the corpus rendered by worker processes once, then the strong and
    the weak build side by side (CI runs test_both_priors_build_in_worker_processes_at_ci_size)."""
    sft = _sft()
    args = sft.parse_args(["--tool-prior", "both", "--workers", "2", "--out", str(tmp_path / "out"), "--runs-dir",
                           str(tmp_path / "runs"), "--stage1-steps", "2", "--stage2-steps", "1", *TINY])
    sft.main(args)
    for prior in ("strong", "weak"):
        info = json.loads((tmp_path / "out" / prior / "sft_args.json").read_text())
        assert info["args"]["tool_prior"] == prior and (tmp_path / "out" / prior / "cold_start" / "config.json").is_file()
    assert len(list(sft.resolve_corpus_dir(args).rglob("chunk_*.npz"))) >= 8


def test_both_priors_build_in_worker_processes_at_ci_size(tmp_path):
    """The both-priors build above at CI size: a fresh corpus rendered by two worker processes, then the strong
    and the weak build side by side in their own processes, one step of each stage, no caption evals."""
    sft = _sft()
    args = sft.parse_args(["--tool-prior", "both", "--workers", "2", "--out", str(tmp_path / "out"), "--runs-dir",
                           str(tmp_path / "runs"), "--corpus-dir", str(tmp_path / "corpus"), "--stage1-steps", "1",
                           "--stage2-steps", "1", *TINY, "--eval-frames", "0", "--eval-crops", "0"])
    assert sft.main(args) == tmp_path / "out"
    for prior in ("strong", "weak"):
        info = json.loads((tmp_path / "out" / prior / "sft_args.json").read_text())
        assert info["args"]["tool_prior"] == prior and info["stage1_steps_done"] == info["stage2_steps_done"] == 1
        assert (tmp_path / "out" / prior / "cold_start" / "config.json").is_file()
    assert "s1_native" in json.loads((tmp_path / "out" / "strong" / "sft_args.json").read_text())["corpus"]
    assert "s1_native" not in json.loads((tmp_path / "out" / "weak" / "sft_args.json").read_text())["corpus"]
    assert len(list((tmp_path / "corpus").rglob("chunk_*.npz"))) >= 8


def test_init_from_continues_a_checkpoint_and_refuses_another_tokenizer(tmp_path, shared_corpus):
    """``--init-from``: a build can start from earlier weights (so GPU builds accumulate over several
    calls); a checkpoint with another tokenizer is refused by name."""
    sft = _sft()
    common = ["--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus, "--stage1-steps", "1",
              "--stage2-steps", "1", *TINY, "--eval-frames", "0", "--eval-crops", "0"]
    first = sft.main(sft.parse_args(["--out", str(tmp_path / "strong"), *common]))
    trained, tok, _ = load_checkpoint(str(first))
    args = sft.parse_args(["--out", str(tmp_path / "next"), "--init-from", str(tmp_path / "{prior}" / "cold_start"),
                           *common])
    start = sft.build_base(args, tok)
    for name, value in trained.state_dict().items():
        torch.testing.assert_close(start.state_dict()[name], value, rtol=0, atol=0)
    random_start = sft.build_base(sft.parse_args(common), tok)
    assert not torch.equal(random_start.lm_head.weight, start.lm_head.weight)
    assert sft.main(args).name == "cold_start"   # the whole build runs from there
    record = json.loads((tmp_path / "next" / "sft_args.json").read_text())
    assert record["args"]["init_from"].endswith("cold_start")
    # the build record carries its parent's, so what the weights were trained on is not lost with the last step
    assert record["parent"] == json.loads((tmp_path / "strong" / "sft_args.json").read_text())
    assert "parent" not in record["parent"]
    # a cold start alone (benchmarks/cold_start_length.py): --stage1-steps 0 leaves the base as it came
    alone = sft.main(sft.parse_args(["--out", str(tmp_path / "alone"), "--init-from", str(tmp_path / "strong" / "base"),
                                     *common, "--stage1-steps", "0"]))
    info = json.loads((tmp_path / "alone" / "sft_args.json").read_text())
    assert alone.name == "cold_start" and info["stage1_steps_done"] == 0 and info["stage2_steps_done"] == 1
    base_in, _, _ = load_checkpoint(str(tmp_path / "strong" / "base"))
    base_out, _, _ = load_checkpoint(str(tmp_path / "alone" / "base"))
    for name, value in base_in.state_dict().items():
        torch.testing.assert_close(base_out.state_dict()[name], value, rtol=0, atol=0)
    other_tok = build_tokenizer(["another corpus altogether"], vocab_size=300)
    save_checkpoint(str(tmp_path / "other"), build_tiny_model(other_tok, seed=0), other_tok)
    with pytest.raises(SystemExit, match="tokenizer differs"):
        sft.build_base(sft.parse_args(["--init-from", str(tmp_path / "other"), *common]), tok)
    with pytest.raises(SystemExit, match="not a checkpoint folder"):
        sft.build_base(sft.parse_args(["--init-from", str(tmp_path / "missing"), *common]), tok)


def test_grow_layers_starts_from_the_parents_function_and_trains_the_new_layers(tmp_path, shared_corpus):
    """``--grow-layers``: the grown model computes exactly the parent's logits at the start (the new layers add
    zero to the residual stream), the build trains them away from zero, and the saved child reloads with the
    grown depth, which a further ``--init-from`` keeps."""
    sft = _sft()
    common = ["--runs-dir", str(tmp_path / "runs"), "--corpus-dir", shared_corpus, "--stage1-steps", "2",
              "--stage2-steps", "0", *TINY, "--eval-frames", "0", "--eval-crops", "0"]
    parent_dir = sft.main(sft.parse_args(["--out", str(tmp_path / "parent"), *common]))
    parent, tok, _ = load_checkpoint(str(parent_dir))
    grown = sft.build_base(sft.parse_args(["--init-from", str(parent_dir), "--grow-layers", "2", *common]), tok)
    assert len(grown.model.language_model.layers) == len(parent.model.language_model.layers) + 2
    ids = torch.randint(10, len(tok) - 1, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(grown(input_ids=ids).logits, parent(input_ids=ids).logits, rtol=0, atol=0)
        out_parent = parent.generate(input_ids=ids[:, :12], max_new_tokens=8, do_sample=False)
        out_grown = grown.generate(input_ids=ids[:, :12], max_new_tokens=8, do_sample=False)  # the KV cache too
    assert torch.equal(out_parent, out_grown)
    child_dir = sft.main(sft.parse_args(["--out", str(tmp_path / "child"), "--init-from", str(parent_dir),
                                         "--grow-layers", "2", *common]))
    child, _, _ = load_checkpoint(str(child_dir))
    layers = child.model.language_model.layers
    assert len(layers) == child.config.text_config.num_hidden_layers == len(parent.model.language_model.layers) + 2
    assert [i for i, layer in enumerate(layers) if layer.self_attn.layer_idx != i] == []
    assert any(layer.self_attn.o_proj.weight.abs().sum() == 0 for layer in grown.model.language_model.layers)
    assert all(layer.self_attn.o_proj.weight.abs().sum() > 0 for layer in layers)   # trained off zero
    again = sft.build_base(sft.parse_args(["--init-from", str(child_dir), *common]), tok)
    assert len(again.model.language_model.layers) == len(layers)
    with pytest.raises(SystemExit, match="with --init-from"):   # refused before any corpus is rendered
        sft.main(sft.parse_args(["--out", str(tmp_path / "refused"), "--grow-layers", "2", *common]))


def test_grounded_think_names_the_needle_the_responses_show():
    """--grounded-think: after tool turns on needle questions the think line names the needle as the
    tool responses name it (and it is the answer); other families keep the fixed line; the corpus
    gets its own data key, the default key is unchanged by the new field."""
    from agents.lmm.corpus import THINK_AFTER_TOOL, caption_objects
    from trainers import sft

    samples = build_corpus(0, 0, 30, "paravt", seed=5, wc=WorldConfig(), oracle_fraction=1.0, grounded_think=True,
                           index_range=(3000, 6000))
    grounded = 0
    for s in samples:
        last = s.assistant_texts[-1].split("</think>")[0]
        responses = " ".join(p.get("text", "") for m in s.messages[3:] if m["role"] == "user"
                             for p in m["content"] if isinstance(p, dict))
        if s.meta["family"] in ("needle", "needle_attribute") and "The crops show a " in last:
            obj = last.split("The crops show a ")[1].rstrip(".\n")
            assert obj in caption_objects(responses) and s.meta["correct"]
            grounded += 1
        elif s.meta["family"] not in ("needle", "needle_attribute"):
            assert THINK_AFTER_TOOL in last
    assert grounded >= 5
    assert sft.data_key(sft.Args(grounded_think=True)) != sft.data_key(sft.Args())


def test_count_order_think_reads_counts_and_orders_off_the_crops():
    """--count-order-think: a tool trace on a counting question closes by listing the named scene's coloured
    objects as the responses print them and their number, on a temporal-order question by each option's first
    time and the earlier one; the letter it ends with is the answer the trace gives, and that option's value is
    the number or the object it derived. Without the flag those traces keep the fixed line; its own data key."""
    from agents.lmm.corpus import THINK_AFTER_TOOL, caption_needles
    from trainers import sft

    # counting: the scene agent tiles the named scene; temporal order: the oracle crops both objects (a sweep of the
    # whole video rarely catches two needles of a few seconds, and then the trace keeps the fixed line)
    kw = dict(seed=7, wc=WorldConfig(), search_agent="scene", grounded_think="options")
    count_kw, order_kw = dict(kw, families=("counting",), oracle_fraction=0.0), dict(kw, families=("temporal_order",),
                                                                                   oracle_fraction=1.0)
    chained = {"counting": 0, "temporal_order": 0}
    for s in [*build_corpus(0, 0, 12, "paravt", count_order_think=True, **count_kw),
              *build_corpus(0, 0, 12, "paravt", count_order_think=True, **order_kw)]:
        think, answer = s.assistant_texts[-1].split("</think>")
        letter = re.search(r"<answer>([A-E])</answer>", answer).group(1)
        options = dict(re.findall(r"^([A-E])\. (.+)$", s.messages[1]["content"][-1]["text"], re.M))
        responses = " ".join(p.get("text", "") for m in s.messages[3:] if m["role"] == "user"
                             for p in m["content"] if isinstance(p, dict))
        if (m := re.search(r"The ([a-z]+) scene in the crops: (.+): (\d+) ([A-E])\.", think)):
            listed = [] if m.group(2) == "nothing" else m.group(2).split(", ")
            seen = {f"{c} {sh}" for c, sh, _ in caption_needles(responses)}
            assert set(listed) <= seen and len(listed) == int(m.group(3)) == int(options[letter])
            assert m.group(4) == letter and s.meta["family"] == "counting"
            chained["counting"] += 1
        elif (m := re.search(r"The crops show the (.+) at ([\d.]+) s, the (.+) at ([\d.]+) s; first the (.+) ([A-E])\.",
                             think)):
            first = m.group(1) if float(m.group(2)) < float(m.group(4)) else m.group(3)
            assert m.group(5) == first and options[letter] == f"the {first}" and m.group(6) == letter
            chained["temporal_order"] += 1
        else:
            assert THINK_AFTER_TOOL in think
    assert chained["counting"] >= 3 and chained["temporal_order"] >= 3, chained
    for s in [*build_corpus(0, 0, 4, "paravt", **count_kw), *build_corpus(0, 0, 4, "paravt", **order_kw)]:
        assert THINK_AFTER_TOOL in s.assistant_texts[-1]
    assert sft.data_key(sft.Args(count_order_think=True)) != sft.data_key(sft.Args())


def test_option_think_restates_the_options_letter_after_object_and_ends_with_the_answer_letter():
    """--option-think: the grounded line of a needle (multiple-choice) answer restates every option in the
    prompt's order with its letter after the object, then names the seen object followed by its letter, and
    that letter is the answer; needle_attribute keeps the plain grounded line. Its own data key; without
    --grounded-think it is refused."""
    import re

    from trainers import sft

    samples = build_corpus(0, 0, 0, "paravt", seed=2, wc=WorldConfig(), n_reading=24, grounded_think="options",
                           families=("needle", "needle_attribute"), oracle_fraction=1.0, index_range=(0, 3000))
    restated = 0
    for s in samples:
        last = s.assistant_texts[-1]
        think, answer = last.split("</think>")[0], re.search(r"<answer>(.*?)</answer>", last).group(1)
        if s.meta["family"] == "needle" and "The crops show a " in think:
            q = s.messages[1]["content"][-1]["text"]
            options = re.findall(r"^([A-D])\. (.+)$", q, flags=re.M)
            assert think.startswith("<think>\n" + "; ".join(f"{k}. {o} {k}" for k, o in options) + ". ")
            seen, letter = re.search(r"The crops show a (\w+ \w+) ([A-D])\.", think).groups()
            assert letter == answer and dict(options)[letter] == seen and s.meta["correct"]
            restated += 1
        elif s.meta["family"] == "needle_attribute":
            assert "; " not in think
    assert restated >= 5
    key = sft.data_key(sft.Args(grounded_think=True, option_think=True))
    assert key != sft.data_key(sft.Args(grounded_think=True)) and sft.data_key(sft.Args()) == sft.data_key(
        sft.Args(option_think=False))
    with pytest.raises(SystemExit, match="--grounded-think"):
        sft.main(sft.Args(option_think=True, out="/nonexistent/never-written"))


def _assert_presence_chain(think: str, answer: str, seen: set[str], family: str, question_text: str) -> None:
    """The presence chain's contract, checked without the code that writes it: yes/no checks in a fixed order (the
    options; for a colour question every colour with the named shape), every "no" a candidate ``seen`` lacks, and
    one "yes", the last check, on a seen candidate that is the answer."""
    from paravt_env.world import COLOURS

    checks = [c.rsplit(": ", 1) for c in think.rstrip(".").split("; ")]
    objects = [re.sub(r"^[A-D]\. ", "", head) for head, _ in checks]
    assert [v for _, v in checks] == ["no"] * (len(checks) - 1) + ["yes"]
    assert not set(objects[:-1]) & seen and objects[-1] in seen
    if family == "needle":
        options = re.findall(r"^([A-D])\. (.+)$", question_text, flags=re.M)
        assert [h for h, _ in checks] == [f"{k}. {o}" for k, o in options][:len(checks)]
        assert checks[-1][0][0] == answer
    else:
        assert [o.split()[0] for o in objects] == list(COLOURS)[:len(checks)] and objects[-1].split()[0] == answer


def test_presence_think_checks_each_candidate_against_the_responses_up_to_the_answer():
    """--presence-think: the answer after tool turns on needle questions is a chain of yes/no checks in a fixed
    order (the options; for a colour question every colour with the named shape) whose every "no" is a candidate
    the responses do not name and whose one "yes", the last check, is the answer; ambiguous chains are not
    written. With --direct-think presence a direct answer's chain checks the overview's frames the same way. Its
    own data key; refused without --grounded-think."""
    import re

    from agents.lmm.corpus import caption_needles, caption_objects, presence_line
    from paravt_env.questions import Question
    from trainers import sft

    samples = build_corpus(0, 0, 0, "paravt", seed=2, wc=WorldConfig(), n_reading=30, grounded_think="presence",
                           families=("needle", "needle_attribute"), oracle_fraction=0.3, index_range=(0, 3000))
    chains = {"needle": 0, "needle_attribute": 0}
    for s in samples:
        last = s.assistant_texts[-1]
        think = last.split("</think>")[0].removeprefix("<think>\n").strip()
        answer = re.search(r"<answer>(.*?)</answer>", last).group(1)
        if ": yes." not in think:
            continue
        responses = " ".join(p.get("text", "") for m in s.messages[3:] if m["role"] == "user"
                             for p in m["content"] if isinstance(p, dict))
        _assert_presence_chain(think, answer, caption_objects(responses), s.meta["family"],
                               s.messages[1]["content"][-1]["text"])
        assert s.meta["correct"]
        chains[s.meta["family"]] += 1
    assert min(chains.values()) >= 5

    # --direct-think presence: a direct answer checks the candidates against what the overview's frames show
    env = WorldConfig().env("train", nframes_gating=True)
    direct = build_corpus(0, 16, 0, "paravt", seed=3, wc=WorldConfig(), families=("needle", "needle_attribute"),
                          grounded_think="options", grounded_direct_think="presence", index_range=(0, 3000))
    overview_chains = 0
    for s in direct:
        think = s.assistant_texts[-1].split("</think>")[0].removeprefix("<think>\n").strip()
        if ": yes." in think:
            env.reset(seed=s.meta["index"], options={"episode_index": s.meta["index"], "frame_budget": s.meta["k"]})
            u = env.unwrapped
            assert think == presence_line(u.episode.question, u.episode.source.caption(u.overview.timestamps))
            overview_chains += 1
    assert overview_chains >= 8
    # transcribe_presence: the same chain after a list of every needle the overview shows
    for s in build_corpus(0, 8, 0, "paravt", seed=3, wc=WorldConfig(), families=("needle", "needle_attribute"),
                          grounded_think="options", grounded_direct_think="transcribe_presence",
                          index_range=(0, 3000)):
        think = s.assistant_texts[-1].split("</think>")[0].removeprefix("<think>\n").strip()
        if ": yes." in think:
            env.reset(seed=s.meta["index"], options={"episode_index": s.meta["index"], "frame_budget": s.meta["k"]})
            u = env.unwrapped
            said = u.episode.source.caption(u.overview.timestamps)
            listed, chain = re.fullmatch(r"The overview shows (.*?)\. (.*)", think).groups()
            assert set(listed.split(", ")) == {f"{c} {sh}" for c, sh, _ in caption_needles(said)}
            assert chain == presence_line(u.episode.question, said)
            overview_chains += 1
    env.close()

    def q(family, text, answer, options=None):
        return Question("q", family, text, answer, "mcq" if options else "open", options, ((0.0, 1.0),))
    said = "Objects: red star at top (3.0 s); blue star at left (9.0 s); green circle at center (5.0 s)."
    colour = "What colour is the large star that appears during the cave scene? Answer with one word."
    assert presence_line(q("needle_attribute", colour, "red"), said) == "red star: yes."
    assert presence_line(q("needle_attribute", colour, "blue"), said) is None      # an earlier candidate is named
    assert presence_line(q("needle_attribute", colour, "white"), said) is None     # the answer is not named
    options = ("white cross", "green circle", "red star", "cyan diamond")
    assert presence_line(q("needle", "Which?", "B", options), said) == "A. white cross: no; B. green circle: yes."
    assert presence_line(q("global", "Which scene?", "B", options), said) is None
    assert sft.data_key(sft.Args(grounded_think=True, presence_think=True)) != sft.data_key(
        sft.Args(grounded_think=True)) and sft.data_key(sft.Args()) == sft.data_key(sft.Args(presence_think=False))
    with pytest.raises(SystemExit, match="--grounded-think"):
        sft.main(sft.Args(presence_think=True, out="/nonexistent/never-written"))


def test_presence_probes_are_text_drills_whose_only_target_is_a_chain_ending_at_the_answer():
    """--stage1-presence: text-only probes in a reading drill's shape; each one's think is the presence chain of its
    own responses (the chain's contract holds) and ends at its answer, at most max_objects objects are listed,
    the final turn is the only target, and the rows are their own corpus part and data key."""
    import re

    from agents.lmm.corpus import presence_probe, presence_records
    from trainers import sft

    rng = np.random.default_rng(0)
    families = set()
    for max_objects in (2, 4, 12):
        for _ in range(40):
            s = presence_probe(rng, max_objects)
            q_text, responses, last = s.messages[0]["content"], s.messages[2]["content"], s.messages[3]["content"]
            seen = caption_objects(responses)
            assert 1 <= len(seen) <= max_objects and len(re.findall(r" at [a-z-]+ \(", responses)) == len(seen)
            think, answer = re.fullmatch(r"<think>\n(.*)\n</think>\n<answer>(.*)</answer>", last).groups()
            _assert_presence_chain(think, answer, seen, s.meta["family"], q_text)
            families.add(s.meta["family"])
    assert families == {"needle", "needle_attribute"}
    probes = [presence_probe(np.random.default_rng(i), 12) for i in range(50)]
    tok = build_tokenizer([m["content"] for p in probes for m in p.messages], vocab_size=400)
    for r in presence_records(tok, 3, np.random.default_rng(1)):
        assert r["kind"] == "presence" and len(r["frames"]) == 0
        trained = tok.decode(np.asarray(r["ids"])[r["mask"]].tolist())
        assert ": yes." in trained and "Objects:" not in trained and "crop_video" not in trained
    plan = sft.corpus_plan(sft.Args(stage1_presence=50))
    assert plan["s1_presence"][0] == {"n_presence": 50} and "s1_presence" not in sft.corpus_plan(sft.Args())
    assert sft.data_key(sft.Args(stage1_presence=50)) != sft.data_key(sft.Args())


def test_scene_presence_chain_checks_each_named_candidate_in_its_scene():
    """scene_presence_line: a named candidate is checked by the scene whose printed span holds its sighting, and
    only the question's scene says yes; object_scenes agrees with the world on real captions of wide crops; the
    text probes of it always end at their answer and carry rivals in other scenes."""
    import re

    from agents.lmm.corpus import caption_needles, object_scenes, scene_presence_line, scene_presence_probe
    from paravt_env.questions import Question

    def q(family, text, answer, options=None):
        return Question("q", family, text, answer, "mcq" if options else "open", options, ((0.0, 1.0),))
    said = ("Scenes: sky scene (210.0-330.0 s); meadow scene (340.0-420.0 s). Objects: red star at top (273.9 s); "
            "yellow diamond at left (344.0 s); blue star at left (400.0 s); green star at left (500.0 s).")
    colour = "What colour is the large star that appears during the meadow scene? Answer with one word."
    assert object_scenes(said) == {"red star": ["sky"], "yellow diamond": ["meadow"], "blue star": ["meadow"]}
    assert scene_presence_line(q("needle_attribute", colour, "blue"), said) == (
        "red star: sky scene, no; green star: no; blue star: meadow scene, yes.")  # green's 500 s is in no span
    assert scene_presence_line(q("needle_attribute", colour, "red"), said) is None  # not seen in the meadow
    options = ("red star", "white cross", "yellow diamond", "cyan circle")
    assert scene_presence_line(q("needle", "Which of these objects appears during the meadow scene?", "C", options),
                               said) == "A. red star: sky scene, no; B. white cross: no; C. yellow diamond: meadow scene, yes."
    assert scene_presence_line(q("needle", "Which of these objects appears?", "C", options), said) is None  # no scene
    # real captions of 200 s crops: every sighting is put in the scene the world shows at that time
    checked = 0
    env = WorldConfig().env("validation")
    for index in range(20):
        source = env.unwrapped.dataset[index].source
        stamps = np.linspace(0.5, min(200.0, source.duration) - 0.5, 16)
        caption = source.caption(stamps)
        scenes = object_scenes(caption)
        for (colour, shape, _), (first, _) in caption_needles(caption).items():
            assert source.video.scene_at(first).name in scenes[f"{colour} {shape}"]
            checked += 1
    env.close()
    assert checked > 20
    rng, rivals = np.random.default_rng(0), 0
    for i in range(300):
        s = scene_presence_probe(rng, max_objects=(2, 4, 12)[i % 3])
        assert len(re.findall(r" at [a-z-]+ \(", s.messages[2]["content"])) <= (2, 4, 12)[i % 3]
        think, answer = re.fullmatch(r"<think>\n(.*)\n</think>\n<answer>(.*)</answer>", s.messages[3]["content"]).groups()
        last = think.rstrip(".").split("; ")[-1]
        assert last.endswith(" scene, yes") and (last.startswith(f"{answer}.") or last.startswith(f"{answer} "))
        rivals += s.meta["rivals"] > 0 and ", no" in think
    assert rivals > 30  # rivals the chain passes over by their scene
    for i in range(40):  # one scene a response: an object's scene is its response's
        responses = scene_presence_probe(np.random.default_rng(i), scenes_per_response=1).messages[2]["content"]
        assert all(r.count(" scene (") == 1 for r in responses.split("</tool_response>")[:-1])


def test_scene_presence_flag_shapes_the_answers_after_tool_turns_and_the_probes():
    """--scene-presence (with --presence-think): tool traces answer by the scene-checking chain of their own
    responses, the presence probes take its form, the data key is new while the old keys stay, and the flag
    alone is refused."""
    import re

    from agents.lmm.corpus import presence_records, scene_presence_line
    from trainers import sft

    samples = build_corpus(0, 0, 40, "paravt", seed=3, wc=WorldConfig(), oracle_fraction=0.0,
                           grounded_think="scene_presence", index_range=(0, 3000), search_agent="uniform")
    env, chains = WorldConfig().env("train"), 0
    for s in samples:
        think = s.assistant_texts[-1].split("</think>")[0].removeprefix("<think>\n").strip()
        if think.endswith(" scene, yes."):
            env.reset(seed=s.meta["index"], options={"episode_index": s.meta["index"], "frame_budget": s.meta["k"]})
            said = " ".join(p.get("text", "") for m in s.messages[2:] if m["role"] == "user"
                            for p in m["content"] if isinstance(p, dict))
            assert think == scene_presence_line(env.unwrapped.episode.question, said)
            chains += 1
    env.close()
    assert chains >= 3
    tok = build_tokenizer([m["content"] for s in samples for m in s.messages if isinstance(m["content"], str)]
                          + ["meadow scene, yes. sky scene, no."], vocab_size=400)
    for r in presence_records(tok, 3, np.random.default_rng(1), scene=True):
        assert re.search(r"scene, yes\.", tok.decode(np.asarray(r["ids"])[r["mask"]].tolist()))
    args = sft.Args(grounded_think=True, presence_think=True, scene_presence=True, stage1_presence=50)
    assert sft.grounded_think_mode(args) == "scene_presence"
    assert sft.corpus_plan(args)["s1_presence"][1] == {"scene_presence": True}
    assert sft.data_key(args) != sft.data_key(dataclasses.replace(args, scene_presence=False))
    assert sft.data_key(sft.Args()) == sft.data_key(sft.Args(scene_presence=False))
    with pytest.raises(SystemExit, match="--presence-think"):
        sft.main(sft.Args(grounded_think=True, scene_presence=True, out="/nonexistent/never-written"))


def test_direct_think_names_the_needle_or_scene_the_overview_shows_then_its_letter():
    """--direct-think: a direct answer on a needle question thinks what the overview shows of the needle
    (the object is in the world's caption of the overview frames and is the answer; multiple choice
    restates the options and ends with the answer's letter); with "all" a global answer names the option
    scene the overview shows, with "needle" it keeps the fixed line; tool traces are untouched; its own
    data key, the default key unchanged."""
    import re

    from agents.lmm.corpus import THINK_DIRECT, caption_objects, caption_scenes
    from trainers import sft

    env = WorldConfig().env("train", nframes_gating=True)
    grounded = {"needle": 0, "needle_attribute": 0, "global": 0}
    for mode in ("needle", "all"):
        samples = [s for fams in (("needle", "needle_attribute"), ("global",))
                   for s in build_corpus(0, 20 if len(fams) == 2 else 6, 0, "paravt", seed=4, wc=WorldConfig(),
                                         grounded_think="options", grounded_direct_think=mode, families=fams,
                                         index_range=(0, 3000), budgets=(32, 64))]
        for s in samples:
            think, answer = s.assistant_texts[-1].split("</think>")
            answer = re.search(r"<answer>(.*?)</answer>", answer).group(1)
            env.reset(seed=s.meta["index"], options={"episode_index": s.meta["index"], "frame_budget": s.meta["k"]})
            shown = env.unwrapped.episode.source.caption(env.unwrapped.overview.timestamps)
            assert s.meta["correct"]
            if s.meta["family"] == "global":
                if mode == "needle":
                    assert THINK_DIRECT in think
                    continue
                scene = re.search(r"The overview shows the (\w+) scene ([A-D])\.", think)
                assert scene.group(1) in caption_scenes(shown) and scene.group(2) == answer and "; " in think
            else:
                seen = re.search(r"The overview shows a (\w+ \w+)", think).group(1)
                assert seen in caption_objects(shown)
                if s.meta["family"] == "needle":
                    assert think.rstrip().endswith(f"{seen} {answer}.") and "; " in think
                else:
                    assert seen.split()[0] == answer and "; " not in think
            grounded[s.meta["family"]] += 1
    env.close()
    assert min(grounded.values()) >= 4, grounded
    tools = build_corpus(0, 0, 6, "paravt", seed=4, wc=WorldConfig(), grounded_direct_think="all",
                         families=("needle", "global"), index_range=(0, 3000), budgets=(4,))
    assert not any("overview shows" in t for s in tools for t in s.assistant_texts)
    keys = {sft.data_key(sft.Args(direct_think=m)) for m in ("none", "needle", "all")}
    assert len(keys) == 3 and sft.data_key(sft.Args()) == sft.data_key(sft.Args(direct_think="none"))
    assert sft.parse_args(["--direct-think", "all"]).direct_think == "all"


def test_timed_direct_think_names_the_frame_that_shows_the_needle():
    """--direct-think needle_time: the line opens with the time of an overview frame (as the prompt prints it)
    that shows the named object, and the object is the answer."""
    import re

    env = WorldConfig().env("train", nframes_gating=True)
    samples = build_corpus(0, 16, 0, "paravt", seed=4, wc=WorldConfig(), grounded_think="options",
                           grounded_direct_think="needle_time", families=("needle", "needle_attribute"),
                           index_range=(0, 3000), budgets=(32, 64))
    timed = 0
    for s in samples:
        think = s.assistant_texts[-1].split("</think>")[0]
        m = re.search(r"At (\d+\.\d) s the overview shows a (\w+ \w+)", think)
        if m is None:
            continue
        env.reset(seed=s.meta["index"], options={"episode_index": s.meta["index"], "frame_budget": s.meta["k"]})
        printed = [p["text"] for p in s.messages[1]["content"] if p.get("type") == "text"]
        assert f"<{m.group(1)} seconds>" in printed
        frame = env.unwrapped.episode.source.caption([float(m.group(1))])
        assert m.group(2) in caption_objects(frame) and s.meta["correct"]
        timed += 1
    env.close()
    assert timed >= 4, timed


@pytest.mark.parametrize("view_mode", ["scene", "scene_compact", "scene_span", "scene_chain", "scene_chain_calls",
                                       "scene_chain_decide"])
def test_scene_view_captions_the_overview_frames_of_the_question_scene_in_first_turns(view_mode):
    """--direct-think scene: every first turn on a needle question opens with the question's scene and the world's
    caption of exactly the overview frames of that scene (each frame's scene read from its own caption); it names
    the answer object when (and only when) the overview shows the evidence, a direct answer then names it in the
    grounded line, and a tool turn keeps its decision line after the caption. Later turns are untouched.
    scene_compact: the same objects by name alone (no positions, times or span); scene_span: those names after the
    scene's span as the full caption prints it; scene_chain: the compact names, then a direct answer checks the
    candidates one by one against them, up to the answer ("...: yes."); scene_chain_calls: a first tool turn says
    that whole line too before its decision line, here on tool traces half of which are drawn where the overview
    already shows the answer (--tool-on-visible); scene_chain_decide: the same after its decision line."""
    import re

    from agents.lmm.corpus import (CHAIN_CALL_VIEWS, THINK_TOOL, answer_object, caption_scenes, named_objects,
                                   presence_line,
                                   scene_overview_caption)
    from agents.scripted import QUESTION_SCENE_RE
    from trainers import sft

    env = WorldConfig().env("train", nframes_gating=True)
    samples = build_corpus(0, 10, 10, "paravt", seed=6, wc=WorldConfig(), grounded_think="options",
                           grounded_direct_think=view_mode, families=("needle", "needle_attribute"),
                           index_range=(0, 3000), tool_visible_share=0.5 if view_mode in CHAIN_CALL_VIEWS else 0.0)
    compact = view_mode != "scene"
    kinds = {"direct": 0, "tool": 0, "chain": 0, "tool_chain": 0}
    chains = view_mode in ("scene_chain", *CHAIN_CALL_VIEWS)
    decide_first = view_mode == "scene_chain_decide"
    for s in samples:
        env.reset(seed=s.meta["index"], options={"episode_index": s.meta["index"], "frame_budget": s.meta["k"]})
        ep, overview = env.unwrapped.episode, env.unwrapped.overview
        scene = QUESTION_SCENE_RE.search(ep.question.text).group(1)
        shown = [t for t in overview.timestamps if caption_scenes(ep.source.caption([t])) == [scene]]
        view = scene_overview_caption(env.unwrapped, view=view_mode)
        full_span = re.search(r"scene \(([^)]*)\)", scene_overview_caption(env.unwrapped))
        head = f"The {scene} scene in the overview" + (f" ({full_span[1]})" if view_mode == "scene_span" and shown else "")
        assert view.startswith(f"{head}: ")
        if compact:
            listed = view[len(head) + 2:].rstrip(".").split(", ")
            truth = caption_objects(ep.source.caption(shown)) if shown else set()
            assert set(listed) == (truth or {"nothing"}) and " at " not in view
            assert view.count("(") == (view_mode == "scene_span" and bool(shown))
        else:
            assert view.endswith("no frame.") if not shown else view.endswith(ep.source.caption(shown))
        assert (answer_object(ep.question) in (caption_objects if compact else named_objects)(view)) == s.meta["visible"]
        first, *later = s.assistant_texts
        think = first.split("</think>")[0]
        opening = f"<think>\n{THINK_TOOL} " if decide_first and s.kind == "tool" else "<think>\n"
        assert think.startswith(f"{opening}{view}")
        chain = chains and presence_line(ep.question, scene_overview_caption(env.unwrapped))
        if s.kind == "direct" and chain:
            assert think.rstrip() == f"<think>\n{view} {chain}" and chain.endswith(f"{answer_object(ep.question)}: yes.")
            assert "The overview shows" not in think
            kinds["chain"] += 1
        elif s.kind == "direct":
            assert re.search(rf"The overview shows a {answer_object(ep.question)}\b", think)
        else:
            assert "<tool_call>" in first and not any("in the overview:" in t for t in later)
            said = think[len(f"{opening}{view}"):].strip()
            if decide_first and chain:  # the decision said first, then the reading, chain and all
                assert said == chain
                kinds["tool_chain"] += 1
            elif decide_first and not s.meta["visible"]:
                assert said == ""
            elif view_mode == "scene_chain_calls" and chain:
                assert said == f"{chain} {THINK_TOOL}"
                kinds["tool_chain"] += 1
            elif view_mode != "scene_chain_calls" or not s.meta["visible"]:
                assert said == THINK_TOOL
        kinds[s.kind] += 1
    env.close()
    assert min(kinds["direct"], kinds["tool"]) >= 5 and (kinds["chain"] >= 5) == chains, kinds
    assert (kinds["tool_chain"] >= 2) == (view_mode in CHAIN_CALL_VIEWS), kinds
    assert sft.data_key(sft.Args(direct_think=view_mode)) != sft.data_key(sft.Args(direct_think="needle"))
    assert sft.parse_args(["--direct-think", view_mode]).direct_think == view_mode


def test_tool_families_restrict_the_tool_traces_and_nothing_else(tmp_path):
    """--tool-families: the tool traces (stage 2's and stage 1's native ones) come from those question families
    alone, direct answers from all; an unknown family is refused at parse time; the corpus key changes."""
    from trainers import sft

    args = sft.parse_args(["--tool-families", "needle,needle_attribute", "--stage1-tool", "10", "--stage2-tool", "10"])
    plan = sft.corpus_plan(args, priors=("strong",))
    assert plan["s2_tool"][1]["families"] == plan["s1_native"][1]["families"] == ("needle", "needle_attribute")
    assert "families" not in plan["s2_direct"][1] and "families" not in plan["s1_direct"][1]
    traces = build_corpus(0, 0, 8, "paravt", seed=0, wc=WC, budgets=(4,), oracle_fraction=0.0, search_agent="sweep",
                          **{k: v for k, v in plan["s2_tool"][1].items() if k == "families"})
    assert traces and {s.meta["family"] for s in traces} <= {"needle", "needle_attribute"}
    assert sft.data_key(args) != sft.data_key(sft.Args()) == sft.data_key(sft.Args(tool_families=""))
    with pytest.raises(SystemExit):
        sft.parse_args(["--tool-families", "needle,needles"])


def test_tool_on_visible_draws_that_share_of_tool_traces_where_the_overview_shows_the_evidence():
    """--tool-on-visible: the share of tool traces drawn where a direct answer would have done (the strong prior's
    needless calls), in stage 2's traces and stage 1's native ones; 0 leaves the corpus and its key as they were."""
    from trainers import sft

    for share, lo, hi in ((0.0, 0, 0), (0.5, 3, 17), (1.0, 20, 20)):
        samples = build_corpus(0, 0, 20, "paravt", seed=4, wc=WorldConfig(), families=("needle", "needle_attribute"),
                               index_range=(0, 3000), tool_visible_share=share)
        assert len(samples) == 20 and all(s.kind == "tool" and s.meta["tool_calls"] for s in samples)
        assert lo <= sum(s.meta["visible"] for s in samples) <= hi, share
    plan = sft.corpus_plan(sft.Args(tool_on_visible=0.3, stage1_tool=10, stage2_tool=10))
    assert plan["s2_tool"][1]["tool_visible_share"] == plan["s1_native"][1]["tool_visible_share"] == 0.3
    assert "tool_visible_share" not in sft.corpus_plan(sft.Args())["s2_tool"][1]
    assert sft.data_key(sft.Args(tool_on_visible=0.3)) != sft.data_key(sft.Args()) == sft.data_key(sft.Args(tool_on_visible=0.0))


def test_drills_reading_trains_only_the_answer_after_the_responses_and_direct_keeps_to_needles():
    """--stage1-reading: tool traces on needle questions from train episodes past dataset_size,
    whose loss mask covers the final answer turn alone (calls and responses are context); the
    plan keeps them off the weak prior unless --weak-tool-fraction says so, and the default data
    key does not change."""
    import dataclasses

    from agents.lmm.corpus import encode_record, encoding_policy
    from trainers import sft

    wide = dataclasses.replace(WC, dataset_size=WC.dataset_size + 600)
    samples = build_corpus(0, 0, 0, "paravt", seed=3, wc=wide, budgets=(4,), index_range=(6000, 6600),
                           oracle_fraction=0.5, n_reading=5)
    assert len(samples) == 5
    tok = build_tokenizer(["crop_video needle answer"] * 4, vocab_size=600)
    enc = encoding_policy(tok)
    for s in samples:
        assert s.targets == "last" and s.kind == "tool" and s.meta["tool_calls"] >= 1
        assert s.meta["family"] in ("needle", "needle_attribute") and 6000 <= s.meta["index"] < 6600
        rec = encode_record(enc, s)
        trained = tok.decode(rec["ids"][rec["mask"]])
        assert trained.startswith("<think>") and "<answer>" in trained and "<tool_call>" not in trained
        assert trained.count("<|im_end|>") == 1
        first = encode_record(enc, dataclasses.replace(s, targets="all"))
        assert first["mask"].sum() > rec["mask"].sum()  # the calls turn is trained only without "last"
    strong = sft.Args(stage1_reading=40)
    plan = sft.corpus_plan(strong)
    counts, kwargs = plan["s1_reading"]
    assert counts == {"n_reading": 40} and kwargs["index_range"][0] == strong.world().dataset_size
    assert kwargs["wc"].dataset_size == kwargs["index_range"][1]
    assert sft.native_count(sft.Args(tool_prior="weak", stage1_reading=40), "weak", 40) == 0
    assert "s1_reading" not in sft.corpus_plan(sft.Args(tool_prior="weak", stage1_reading=40))
    assert kwargs["oracle_fraction"] == strong.reading_oracle_fraction == 0.5
    fewer = sft.Args(stage1_reading=40, reading_oracle_fraction=0.2)
    assert sft.corpus_plan(fewer)["s1_reading"][1]["oracle_fraction"] == 0.2
    assert sft.data_key(fewer) != sft.data_key(strong)
    assert sft.data_key(strong) != sft.data_key(sft.Args()) and "stage1_reading" in sft.DATA_FIELDS
    counts, kwargs = sft.corpus_plan(sft.Args(tool_prior="weak", stage1_direct_needle=7))["s1_direct_needle"]
    assert counts == {"n_direct": 7} and kwargs["families"] == ("needle", "needle_attribute")
    direct = build_corpus(0, 4, 0, "paravt", seed=4, wc=kwargs["wc"], budgets=(64,), index_range=kwargs["index_range"],
                          families=kwargs["families"])
    assert len(direct) == 4 and all(s.kind == "direct" and s.meta["visible"] and s.meta["correct"] and
                                    s.meta["family"] in ("needle", "needle_attribute") for s in direct)


def test_recall_rows_target_exactly_the_recalled_tokens_and_train_through_the_sft_path(tmp_path):
    """A recall row's targets are the answers of its queries (forward: the value after the key; backward: the key
    before the value) and the repeated span, nothing else; the rows go through write_chunk, Records and Trainee
    like any part, and a weak prior gets them too."""
    from agents.lmm.corpus import RECALL_MARKS, recall_records, recall_row, recall_words, write_chunk

    sft = _sft()
    from paravt_env.world import COLOURS, SCENE_NAMES, SHAPES

    tok = build_tokenizer([" ".join([*COLOURS, *SHAPES, *SCENE_NAMES, ">", "<", "|"])] * 8, vocab_size=400)
    words = recall_words(tok)
    assert len(words) >= 36 and all(tok.decode([int(w)]).startswith(" ") or tok.decode([int(w)]).isupper()
                                    for w in words)
    marks = [tok.encode(m, add_special_tokens=False)[0] for m in RECALL_MARKS]
    rng = np.random.default_rng(0)
    for _ in range(50):
        ids, mask = recall_row(rng, words, marks)
        fence = np.flatnonzero(ids == marks[2])
        assert len(fence) == 2
        first_query = int(np.flatnonzero(np.isin(ids, marks[:2]))[0])
        listed = ids[:first_query].tolist()
        assert len(set(listed)) == len(listed) and not mask[:first_query].any()
        q = first_query
        while q < fence[0]:  # each query: its mark, a cue, then the answer (exactly the targets)
            m = q + 1 + int(np.argmax(mask[q + 1:]))  # the answer's first token
            cue, end = ids[q + 1:m].tolist(), m + int(np.argmin(mask[m:]))
            answer = ids[m:end].tolist()
            at = listed.index(cue[0])
            if ids[q] == marks[0]:  # forward: a one-token head, its tail follows it in the list
                assert len(cue) == 1 and listed[at + 1:at + 1 + len(answer)] == answer
            else:  # backward: a tail of one or two tokens, its head just before it
                assert len(answer) == 1 and listed[at - 1] == answer[0] and listed[at:at + len(cue)] == cue
            assert 1 <= len(answer) <= 2 and 1 <= len(cue) <= 2 and not mask[q:m].any()
            q = end
        assert q == fence[0]
        span = ids[fence[0] + 1:fence[1]]
        assert np.array_equal(ids[fence[1] + 1:], span) and mask[fence[1] + 1:].all()
        assert not mask[fence[0]:fence[1] + 1].any()
    with pytest.raises(ValueError, match="word tokens"):
        recall_records(build_tokenizer(["ab"] * 4, vocab_size=300), 1, rng)
    path = tmp_path / "s1_recall" / "chunk_00000.npz"
    path.parent.mkdir()
    assert write_chunk(tok, {"n_recall": 6}, {"seed": 3}, str(path)) == {"kinds": {"recall": 6}}
    recs = sft.Records.load(path.parent)
    assert len(recs) == 6 and recs.kinds() == {"recall": 6} and len(recs.frames) == 0
    tr = sft.Trainee(build_tiny_model(tok, seed=0), tok, build_image_processor(), "cpu", fast=False)
    loss, n = tr.loss(tr.collate(recs, np.arange(6)))
    assert n == int(recs.mask.sum()) and torch.isfinite(loss)
    for prior in ("strong", "weak"):
        plan = sft.corpus_plan(sft.Args(tool_prior=prior, stage1_recall=100))
        assert plan["s1_recall"][0] == {"n_recall": 100}
    assert "s1_recall" not in sft.corpus_plan(sft.Args())
    assert sft.data_key(sft.Args(stage1_recall=100)) != sft.data_key(sft.Args())


def test_recall_warmup_opens_stage1_on_recall_rows_alone_at_its_own_rate():
    """--recall-warmup-steps N: the first N steps of stage 1 train the recall part only, at --recall-warmup-lr;
    then every part is sampled again at the stage's own schedule."""
    from agents.lmm.corpus import pack_records, recall_records

    sft = _sft()
    from paravt_env.world import COLOURS, SCENE_NAMES, SHAPES
    tok = build_tokenizer([" ".join([*COLOURS, *SHAPES, *SCENE_NAMES, ">", "<", "|"])] * 8, vocab_size=400)

    def part(seed):
        p = pack_records(recall_records(tok, 16, np.random.default_rng(seed)))
        return sft.Records(p["ids"], p["mask"], p["tok_off"], p["frames"], p["img_off"], p["kind"])

    class Scalars:
        def __init__(self):
            self.rows = []

        def add_scalar(self, tag, value, step):
            self.rows.append((tag, value, step))

    args = sft.Args(batch_size=4, warmup=1, log_every=1, eval_every=0, progress=False, checkpoint_every_s=1e9)
    tr = sft.Trainee(build_tiny_model(tok, seed=0), tok, build_image_processor(), "cpu", fast=False)
    stage = sft.Stage("stage1", {"s1_recall": part(0), "s1_native": part(1)}, {}, steps=12, lr=1e-3,
                      lead_part="s1_recall", lead_steps=4, lead_lr=5e-3)
    writer = Scalars()
    r = sft.train_stage(tr, stage, args, writer, deadline=float("inf"), state=None, save_state=None, evaluate=None)
    assert r["steps"] == 12
    parts = {step: tag.rsplit("/", 1)[1] for tag, _, step in writer.rows if tag.startswith("stage1/loss/s1_")}
    lrs = {step: v for tag, v, step in writer.rows if tag == "stage1/lr"}
    assert [parts[s] for s in range(1, 5)] == ["s1_recall"] * 4 and all(lrs[s] == 5e-3 for s in range(1, 5))
    assert "s1_native" in {parts[s] for s in range(5, 13)} and all(lrs[s] <= 1e-3 for s in range(5, 13))
    # --recall-warmup-share: the lead steps mix in the other parts (rehearsal), all at the lead rate
    stage = sft.Stage("stage1", {"s1_recall": part(0), "s1_native": part(1)}, {}, steps=40, lr=1e-3,
                      lead_part="s1_recall", lead_steps=30, lead_lr=5e-3, lead_share=0.5)
    writer = Scalars()
    sft.train_stage(tr, stage, args, writer, deadline=float("inf"), state=None, save_state=None, evaluate=None)
    parts = {step: tag.rsplit("/", 1)[1] for tag, _, step in writer.rows if tag.startswith("stage1/loss/s1_")}
    lrs = {step: v for tag, v, step in writer.rows if tag == "stage1/lr"}
    lead = [parts[s] for s in range(1, 31)]
    assert 8 <= lead.count("s1_recall") <= 22 and all(lrs[s] == 5e-3 for s in range(1, 31))


def test_cold_start_length_builds_of_different_recipes_get_different_folders(tmp_path, monkeypatch):
    """benchmarks/cold_start_length.py reuses a finished build by its folder: two builds that differ in any
    learning flag (here only the learning rate, which the folder name once left out) must not share one,
    and the same recipe must map to the same folder. sft.main is replaced by a recorder: what is checked is
    the folder each recipe is sent to, not training."""
    import argparse

    from benchmarks import cold_start_length as csl
    sent = []
    monkeypatch.setattr(csl.sft, "main", lambda args: sent.append(args) or args.out)

    def recipe(**kw):
        return argparse.Namespace(**{**dict(native_by="trace", native_think="spread", native_close_think_p=0.3,
                                            sft_args="", stage2_lr=4e-4, batch_size=64, device="cpu", workers=1,
                                            build_dir=str(tmp_path)), **kw})

    a = csl.build("strong", "BASE", 50, recipe(), share=0.6)
    b = csl.build("strong", "BASE", 50, recipe(stage2_lr=2e-4), share=0.6)
    c = csl.build("strong", "BASE", 50, recipe(sft_args="--grounded-think"), share=0.6)
    assert len({a, b, c}) == 3
    assert csl.build("strong", "BASE", 50, recipe(workers=4, device="cuda"), share=0.6) == a  # runtime only
    assert sent[1].stage2_lr == 2e-4 and sent[0].stage2_native_traces == 0.6 and sent[2].grounded_think
    assert csl.build("strong", "BASE", 0, recipe()) == "BASE"
