"""The public sub-agent: one prompt for corpus, env and trainer; frames fitted like the image
processor; episodes through gym.make with the shipped checkpoint."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import paravt_env  # noqa: F401  (registers the env)
from agents.lmm import Subagent, TransformersPolicy
from agents.lmm.corpus import WorldConfig, caption_sample
from agents.lmm.default import checkpoint_info, shipped_checkpoint
from agents.lmm.subagent import clean_summary, crop_window, fit_frames, subagent_messages, summary_of_passes
from paravt_env.world import merge_captions
from agents.lmm.tiny_qwen import build_image_processor
from paravt_env.sources import Frames, SyntheticDataset


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(2)
    path = shipped_checkpoint("strong")
    if path is None:
        pytest.skip("no shipped checkpoint")
    return TransformersPolicy(path)


def test_crop_window_recovers_the_requested_window():
    src = SyntheticDataset("validation", 0, 12)[0].source
    for a, b, mf in [(10.0, 40.0, 8), (100.0, 103.5, 16), (5.2, 250.7, 16), (0.0, 2.0, 8), (33.3, 34.4, 8)]:
        ts = src.crop_timestamps(a, b, 1.0, mf)
        wa, wb = crop_window(ts)
        if len(ts) > 1:
            assert wa == pytest.approx(a) and wb == pytest.approx(b)
        else:  # one frame: a 1 s window around it
            assert (wa, wb) == pytest.approx((ts[0] - 0.5, ts[0] + 0.5))


def test_one_prompt_for_corpus_subagent_and_env():
    """The corpus trains captions on exactly the messages ``Subagent`` sends for the same crop."""
    wc = WorldConfig()
    ep = SyntheticDataset("validation", 0, 12)[3]
    sample = caption_sample(ep, (120.0, 150.0), wc)
    frames = ep.source.crop(120.0, 150.0, 1.0, wc.crop_max_frames, wc.frame_size)
    sub = Subagent(None, frame_size=None)   # building messages needs no model
    mine = sub.messages(frames, ep.question.prompt())
    theirs = sample.messages[:-1]
    assert [p.get("text") for p in mine[0]["content"]] == [p.get("text") for p in theirs[0]["content"]]
    for p, q in zip(mine[0]["content"], theirs[0]["content"]):
        if "image" in p:
            np.testing.assert_array_equal(p["image"], q["image"])
    text = mine[0]["content"][-1]["text"]
    assert "120.0-150.0 s" in text and ep.question.prompt() in text
    assert sample.assistant_texts[0] == ep.source.caption(frames.timestamps)


def test_fit_frames_gives_what_the_image_processor_makes_of_a_64px_frame():
    proc = build_image_processor()
    frame = SyntheticDataset("validation", 0, 12)[0].source.frames_at([100.0, 300.0], (64, 64))
    direct = proc(images=list(frame), return_tensors="pt")["pixel_values"]
    fitted = proc(images=list(fit_frames(frame, (56, 56))), return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(direct, fitted, atol=0, rtol=0)
    assert fit_frames(frame, (64, 64)) is frame or np.array_equal(fit_frames(frame, (64, 64)), frame)
    with pytest.raises(ValueError, match="uint8"):
        fit_frames(frame.astype(np.float32), (56, 56))


def test_clean_summary_strips_chat_tokens():
    assert clean_summary(" Scenes: a.<|im_end|>") == "Scenes: a."
    assert clean_summary("x<|endoftext|><|endoftext|>\n") == "x"
    assert clean_summary("a <|vision_start|><|image_pad|><|vision_end|>b<|im_start|>") == "a b"


def test_auto_frame_size_comes_from_the_checkpoint(policy):
    trained = checkpoint_info(shipped_checkpoint("strong"))["args"]["frame_size"]
    assert Subagent(policy).frame_size == (trained, trained)
    assert Subagent(policy, frame_size=None).frame_size is None
    assert Subagent(policy, frame_size=(56, 56)).frame_size == (56, 56)
    # passes: this project's tiny builds look at a crop in parts; a model without sft_args.json in one pass
    assert Subagent(policy).frames_per_pass == 4 and Subagent(None).frames_per_pass is None
    assert Subagent(policy, frames_per_pass=None).frames_per_pass is None
    with pytest.raises(ValueError):
        Subagent(policy, max_new_tokens=0)


def test_batch_equals_single_calls_and_run_returns_training_sequences(policy):
    wc = WorldConfig()
    ds = SyntheticDataset("validation", 0, 30)
    crops = [(ds[i].source.crop(40.0 * i, 40.0 * i + 12, 1.0, 8, wc.frame_size), ds[i].question.prompt())
             for i in range(2)]
    sub = Subagent(policy, max_new_tokens=16)
    batched = sub.batch(crops)
    assert batched == [sub(f, q) for f, q in crops]
    res = sub.run(crops)
    assert [r.summary for r in res] == batched
    for r, (frames, _) in zip(res, crops):
        parts = sub.passes(frames)
        assert len(parts) == len(r.conversations) == len(r.completions) == 2   # 8 frames, passes of 4
        said = []
        for conv, comp in zip(r.conversations, r.completions):
            gen = [t for t, m in zip(conv.token_ids, conv.generated_mask) if m]
            assert gen == comp.token_ids and 0 < len(gen) <= 16
            said.append(clean_summary(policy.tokenizer.decode(gen)))
        merged = merge_captions(said, [p.timestamps for p in parts])
        assert r.summary == (merged if merged is not None else " ".join(said))
    one = Subagent(policy, max_new_tokens=16, frames_per_pass=None).run(crops)
    assert all(len(r.conversations) == 1 for r in one)
    empty = Frames(np.zeros((0, 56, 56, 3), np.uint8), np.zeros(0))
    assert sub.batch([(empty, "q")]) == ["No frames."]


def test_gym_make_with_subagent_runs_episodes_with_the_shipped_checkpoint(policy):
    """``gym.make(..., subagent=Subagent(policy))``: every executed crop's tool response is the
    sub-agent's own summary of that crop (default env: 64x64 frames, 16-frame crops)."""
    sub = Subagent(policy, max_new_tokens=24)
    env = gym.make("ParaVT-LongVideo-v0", subagent=sub, frame_budget=8, split="validation")
    for seed in (0, 1):
        obs, info = env.reset(seed=seed)
        d = info["video_duration"]
        calls = "".join('<tool_call>{"name": "crop_video", "arguments": {"start_time": %.1f, "end_time": %.1f}}'
                        "</tool_call>" % (a, a + 20) for a in (0.1 * d, 0.5 * d))
        obs, reward, term, trunc, info = env.step("Look.\n</think>" + calls)
        assert not term and info["num_tool_calls"] == 2
        responses = info["messages"][-1]["content"][0]["text"] + info["messages"][-1]["content"][1]["text"]
        crops = env.unwrapped.last_crops
        assert all(c.ok and c.frames.images.shape[1:] == (64, 64, 3) for c in crops)
        for c in crops:
            assert sub(c.frames, env.unwrapped.episode.question.prompt())[:40] in responses
        obs, reward, term, trunc, info = env.step("Done.\n</think><answer>A</answer>")
        assert term and "reward_components" in info
    env.close()


def test_subagent_messages_window_argument_is_honoured():
    frames = Frames(np.zeros((2, 56, 56, 3), np.uint8), np.array([11.0, 13.0]))
    assert "10.0-14.0 s" in subagent_messages(frames, None, "q")[0]["content"][-1]["text"]
    assert "9.0-15.0 s" in subagent_messages(frames, (9.0, 15.0), "q")[0]["content"][-1]["text"]


def test_the_trainer_sub_agent_is_the_env_subagent(policy):
    """The GRPO rollout loop batches every crop of a turn through ``Subagent``: each sub-agent
    conversation it trains on starts with exactly the tokens and pixels ``Subagent(policy)``
    sends for that crop, and its summary is the one ``Subagent(policy)`` gives on its own."""
    from trainers import config, core

    args = config.GRPOArgs(think_prefix=True, dataset_size=200, max_turns=2, frame_budget=4, max_new_tokens=160,
                         subagent="policy", frame_size=56, crop_max_frames=8)
    probe = core.make_env(args, "train")
    needles = [i for i in range(200) if probe.dataset[i].question.family in ("needle", "needle_attribute")][:4]
    envs = [core.make_env(args, "train", policy) for _ in needles]
    assert all(isinstance(e.subagent, Subagent) for e in envs)   # plain env.step uses it too
    sent = {id(e): [] for e in envs}
    for e in envs:  # record the crops each env ran (the real run_calls, nothing replaced)
        def run_calls(calls, _e=e, _real=e.run_calls):
            out = _real(calls)
            sent[id(_e)] += [c for c in out if c.ok]
            return out
        e.run_calls = run_calls
    rs = core.collect_rollouts(policy, envs, list(range(len(envs))), list(range(len(envs))), temperature=0.0,
                               top_p=1.0, max_new_tokens=160, sub_max_new_tokens=12, think_prefix=True, gen_seed=0,
                               reset_options=[{"episode_index": i} for i in needles])
    ref = Subagent(policy, max_new_tokens=12)
    checked = 0
    for r in rs:
        crops, q = sent[id(r.env)], r.env.episode.question.prompt()
        assert len(crops) == r.info["num_tool_calls"]
        convs = iter(r.sub_convs)
        for crop in crops:
            parts = ref.passes(crop.frames)
            said = []
            for part in parts:  # one trained conversation per pass, in time order
                conv, mine = next(convs), policy.start(ref.messages(part, q))
                n = len(mine.token_ids)
                assert conv.token_ids[:n] == mine.token_ids and not any(conv.generated_mask[:n])
                assert all(conv.generated_mask[n:])
                assert len(conv.pixel_values) == len(mine.pixel_values)
                for a, b in zip(conv.pixel_values, mine.pixel_values):
                    torch.testing.assert_close(a, b, atol=0, rtol=0)
                said.append(clean_summary(policy.tokenizer.decode(conv.token_ids[n:])))
            summary = ref(crop.frames, q)
            merged = merge_captions(said, [p.timestamps for p in parts]) if len(said) > 1 else said[0]
            assert summary == (merged if merged is not None else " ".join(said))
            assert summary in policy.tokenizer.decode(r.conv.token_ids)   # what the main agent read
            checked += 1
        assert next(convs, None) is None
    assert checked >= 2


def test_passes_split_a_crop_into_consecutive_runs_of_frames():
    frames = Frames(np.zeros((10, 8, 8, 3), np.uint8), np.arange(10, dtype=float) + 100.5)
    for per, sizes in ((4, [3, 4, 3]), (5, [5, 5]), (16, [10]), (1, [1] * 10), (None, [10])):
        parts = Subagent(None, frame_size=None, frames_per_pass=per).passes(frames)
        assert [len(p.timestamps) for p in parts] == sizes
        np.testing.assert_array_equal(np.concatenate([p.timestamps for p in parts]), frames.timestamps)
    for bad in (0, -1, 2.5, True, "4", "all"):
        with pytest.raises((ValueError, TypeError)):
            Subagent(None, frames_per_pass=bad)
    from agents.lmm.subagent import parse_frames_per_pass  # the command lines' form: auto, 0 (one pass) or N
    assert [parse_frames_per_pass(v) for v in ("auto", "0", " 3 ")] == ["auto", None, 3]
    for bad in ("-1", "2.5", "all", ""):
        with pytest.raises(ValueError, match="frames_per_pass"):
            parse_frames_per_pass(bad)


def test_passes_caption_long_crops_better_than_one_pass(policy):
    """The reason passes are the default: default-env crops (16 frames, 64 px) captioned by the shipped model in
    passes of 4 frames name the world's objects, with their times, far more often than in one pass (0.958 against
    0.863 object F1 on 200 held-out crops; here 48)."""
    from dataclasses import replace as dc_replace

    from agents.lmm.corpus import CaptionConfig
    from agents.lmm.perception import caption_items, score_captions
    items = caption_items(48, "caption", dc_replace(WorldConfig(), frame_size=(64, 64)), seed=1,
                          cc=CaptionConfig(max_frames=(16,), aug_p=0.0, per_episode=1))
    f1 = {}
    for per in (None, 4):
        preds = Subagent(policy, frames_per_pass=per).batch([(it.frames, it.question) for it in items])
        f1[per] = score_captions(preds, items)["object_f1"]
    assert f1[4] > f1[None] + 0.03 and f1[4] > 0.9, f1


def test_a_summary_in_the_caption_grammar_reads_as_the_world_writes_it():
    """One pass or several: a caption the grammar parses comes back in the world's own spelling (a sighting of one
    frame as one time, times with one decimal, objects by first sighting); any other text is left as it was said."""
    said = "Scenes: cave scene (00.1 s). Objects: small grey triangle (2.5-2.5 s); red star at top (0.5-2.5 s)."
    assert summary_of_passes([said], [[0.1, 2.5]]) == \
        "Scenes: cave scene (0.1 s). Objects: red star at top (0.5-2.5 s); small grey triangle (2.5 s)."
    parts = ["Scenes: sky scene (1.5-2.5 s). Objects: red star at top (2.5 s).",
             "Scenes: sky scene (3.5 s). Objects: red star at top (3.5 s)."]
    assert summary_of_passes(parts, [[1.5, 2.5], [3.5]]) == \
        "Scenes: sky scene (1.5-3.5 s). Objects: red star at top (2.5-3.5 s)."
    for free in (["A red star drifts across a cave."], ["A red star.", parts[1]]):
        assert summary_of_passes(free, [[0.5]] * len(free)) == " ".join(free)
