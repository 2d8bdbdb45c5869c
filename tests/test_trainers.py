"""Tests of the GRPO trainers (trainers/core.py and the three scripts), on a tiny random model."""

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from trainers import config, core
from trainers.config import GRPOArgs
from trainers.core import (TrainSeq, anchor_loss, compute_advantages, grpo_token_loss, structural_ids, structural_mask)

ROOT = Path(__file__).resolve().parents[1]


def tiny_argv(tiny_dir, runs, *extra):
    return ["--model", tiny_dir, "--runs-dir", str(runs), "--total-steps", "2", "--group-size", "2",
            "--max-new-tokens", "8", "--subagent-max-new-tokens", "6", "--max-turns", "2", "--eval-every", "2",
            "--eval-episodes", "2", "--checkpoint-every", "1", "--dataset-size", "60", "--no-progress", *extra]


# ------------------------------------------------------------------ maths against hand computation
def test_advantages_group_then_batch_norm():
    r = [1.0, 0.0, 2.0, 2.0]
    groups = [0, 0, 1, 1]
    # group 0: mean 0.5, std 0.5 -> [1, -1]; group 1: std 0 -> [0, 0]; batch: mean 0, std sqrt(0.5)
    adv = compute_advantages(r, groups, group_norm="std", batch_norm="none", eps=0.0 + 1e-12)
    np.testing.assert_allclose(adv, [1, -1, 0, 0], atol=1e-9)
    adv = compute_advantages(r, groups, group_norm="std", batch_norm="std", eps=1e-12)
    np.testing.assert_allclose(adv, np.array([1, -1, 0, 0]) / math.sqrt(0.5), atol=1e-6)
    # Dr.GRPO: no std; scale and bias act before normalisation
    adv = compute_advantages(r, groups, scale=10, bias=-0.2, group_norm="mean", batch_norm="none")
    np.testing.assert_allclose(adv, [5, -5, 0, 0], atol=1e-9)
    adv = compute_advantages(r, groups, scale=10, bias=-0.2, group_norm="none", batch_norm="none")
    np.testing.assert_allclose(adv, [9.8, -0.2, 19.8, 19.8], atol=1e-9)


def test_ppo_clip_and_k3_kl_by_hand():
    logp = torch.tensor([-1.0, -1.0, -1.0, -2.0])
    old = torch.tensor([-1.0, -1.5, -0.5, -2.0])
    ref = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    for a in (1.0, -1.0):
        loss, st = grpo_token_loss(logp, old, ref, torch.tensor(a), mask, clip_eps=0.2, kl_coef=0.1)
        expect = []
        for lp, o, rf, m in zip(logp.tolist(), old.tolist(), ref.tolist(), mask.tolist()):
            ratio = math.exp(lp - o)
            pg = -min(ratio * a, min(max(ratio, 0.8), 1.2) * a)
            kl = math.exp(rf - lp) - (rf - lp) - 1
            expect.append((pg + 0.1 * kl) * m)
        torch.testing.assert_close(loss, torch.tensor(expect), atol=1e-6, rtol=0)
    # ratio e^0.5 with A > 0 is clipped; ratio e^-0.5 with A > 0 is not
    loss, st = grpo_token_loss(logp, old, ref, torch.tensor(1.0), mask, clip_eps=0.2, kl_coef=0.0)
    assert st["clipped"].tolist() == [0.0, 1.0, 0.0, 0.0]
    # token-mean aggregation of the loss over trained tokens
    assert float(loss.sum() / mask.sum()) == pytest.approx(-(1 + 1.2 + math.exp(-0.5)) / 3, abs=1e-6)


# ------------------------------------------------------------------ masking and the anchor
def _episode_conv(policy):
    """A finished two-turn conversation: prompt, generated turn with a tool call, tool response,
    generated answer turn. The prefilled <think> tokens are not generated."""
    msgs = [{"role": "system", "content": "You answer."}, {"role": "user", "content": [
        {"type": "text", "text": "<0.0 seconds>"}, {"type": "image", "image": np.zeros((28, 28, 3), np.uint8)},
        {"type": "text", "text": "Question: colour?"}]}]
    conv = policy.start(msgs)
    c1 = policy.completion_from_text('look</think><tool_call>{"name": "crop_video", "arguments": '
                                     '{"start_time": 1, "end_time": 2}}</tool_call>')
    prefix = policy.completion_from_text("<think>\n")
    prefix.generated_mask = [False] * len(prefix.token_ids)
    conv.append_completion(prefix)
    conv.append_completion(c1)
    conv = policy.extend(conv, [{"role": "user", "content": "<tool_response>\nred</tool_response>\n"}])
    conv.append_completion(policy.completion_from_text("red</think><answer>red</answer>"))
    conv.temperature = 0.7
    return conv


def _grads(policy, seqs, args):
    model = policy.model
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    model.zero_grad(set_to_none=True)
    core.grpo_update(model, None, None, policy, _NoStep(opt), seqs, args, core.Dist(), structural_ids(policy.tokenizer))
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


class _NoStep:
    """An optimizer whose zero_grad/step leave gradients readable after the update."""

    def __init__(self, opt):
        self.opt = opt

    def zero_grad(self, set_to_none=True):
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self):
        pass


def test_masked_tokens_get_no_gradient(policy):
    conv = _episode_conv(policy)
    gen = torch.tensor(conv.generated_mask)
    assert gen.any() and (~gen).any()
    # per-token: d loss / d logp is zero wherever the mask is off (prompt, prefix, tool response)
    lp = torch.randn(len(conv), requires_grad=True)
    loss, _ = grpo_token_loss(lp, torch.tensor(conv.logprobs), lp.detach() - 0.1, torch.tensor(1.5),
                              gen.float(), clip_eps=0.2, kl_coef=0.01)
    loss.sum().backward()
    assert torch.all(lp.grad[~gen] == 0) and torch.all(lp.grad[gen] != 0)
    # whole update: garbage behaviour log-probs at masked positions change nothing
    args = GRPOArgs(kl_coef=0.0, max_grad_norm=1e9)
    g1 = _grads(policy, [TrainSeq(conv, 1.0, "main")], args)
    noisy = conv.copy()
    noisy.logprobs = [lp_ if m else -50.0 for lp_, m in zip(conv.logprobs, conv.generated_mask)]
    g2 = _grads(policy, [TrainSeq(noisy, 1.0, "main")], args)
    assert g1.keys() == g2.keys() and len(g1) > 0
    for k in g1:
        torch.testing.assert_close(g1[k], g2[k])


def test_logprob_anchor_touches_structural_positions_only(policy):
    conv = _episode_conv(policy)
    sids = structural_ids(policy.tokenizer)
    tok = policy.tokenizer
    smask = structural_mask(conv.token_ids, conv.generated_mask, sids)
    picked = [tok.convert_ids_to_tokens(t) for t, m in zip(conv.token_ids, smask) if m]
    assert picked == ["</think>", "<tool_call>", "</tool_call>", "</think>", "<answer>", "</answer>"]
    think_id = tok.convert_tokens_to_ids("<think>")
    prefilled = [i for i, t in enumerate(conv.token_ids) if t == think_id]
    assert prefilled and not any(smask[i] for i in prefilled)  # the forced prefix is not anchored
    lp = torch.randn(len(conv), requires_grad=True)
    anchor_loss(lp, torch.tensor(smask, dtype=torch.float32), 0.5, sum(smask)).backward()
    sm = torch.tensor(smask)
    assert torch.all(lp.grad[~sm] == 0)
    torch.testing.assert_close(lp.grad[sm], torch.full((int(sm.sum()),), -0.5 / sum(smask)))
    # in the full update: with zero advantage and no KL, only the anchor moves the weights
    args = GRPOArgs(kl_coef=0.0, anchor_mode="logprob", anchor_lambda=0.5, max_grad_norm=1e9)
    g = _grads(policy, [TrainSeq(conv, 0.0, "main")], args)
    assert any(v.abs().sum() > 0 for v in g.values())
    g0 = _grads(policy, [TrainSeq(conv, 0.0, "main")], replace(args, anchor_mode="bonus"))
    assert all(v.abs().sum() == 0 for v in g0.values())


def test_anchor_modes_are_picked_by_name_from_the_registry(policy):
    """--anchor-mode's choices are trainers.algos.ANCHOR_MODES: a registered mode is a valid flag value whose loss
    the update adds (and whose reward side the env's RewardConfig follows)."""
    from trainers import algos
    from trainers.rollouts import reward_config

    assert list(algos.ANCHOR_MODES) == ["bonus", "logprob"]
    assert algos.get_anchor_mode("bonus").reward_bonus and algos.get_anchor_mode("bonus").loss is None
    assert algos.get_anchor_mode("logprob").loss is anchor_loss and not algos.get_anchor_mode("logprob").reward_bonus
    with pytest.raises(ValueError, match="registered: bonus, logprob"):
        algos.get_anchor_mode("sideways")
    with pytest.raises(ValueError, match="already registered"):
        algos.register_anchor_mode("bonus")
    assert reward_config(GRPOArgs(anchor_mode="bonus", anchor_lambda=0.5)).anchor_lambda == 0.5
    assert reward_config(GRPOArgs(anchor_mode="logprob", anchor_lambda=0.5)).anchor_lambda == 0.0

    def twice(logp, smask, lam, n_struct):
        return 2 * anchor_loss(logp, smask, lam, n_struct)

    algos.register_anchor_mode("twice", loss=twice, help="the log-prob anchor, doubled")
    try:
        args = config.parse_args(GRPOArgs, ["--anchor-mode", "twice", "--anchor-lambda", "0.5", "--kl-coef", "0",
                                            "--max-grad-norm", "1e9"])
        assert args.anchor_mode == "twice" and reward_config(args).anchor_lambda == 0.0
        conv = _episode_conv(policy)
        g2 = _grads(policy, [TrainSeq(conv, 0.0, "main")], args)
        g1 = _grads(policy, [TrainSeq(conv, 0.0, "main")], replace(args, anchor_mode="logprob"))
        for k in g1:
            torch.testing.assert_close(g2[k], 2 * g1[k])
    finally:
        del algos.ANCHOR_MODES["twice"]
    with pytest.raises(SystemExit):
        config.parse_args(GRPOArgs, ["--anchor-mode", "twice"])


def test_token_capped_chunks_change_the_speed_not_the_update(policy):
    """--micro-batch-tokens only regroups sequences: one padded chunk and one sequence per chunk give
    the same gradients, and every chunk respects both caps."""
    seqs = []
    for i, words in enumerate(["red", "a red and blue square at the top " * 3, "blue", "green " * 12]):
        conv = _episode_conv(policy)
        conv.append_completion(policy.completion_from_text(words))
        seqs.append(TrainSeq(conv, (-1.0) ** i, "main"))
    lens = sorted(len(s.conv) for s in seqs)
    assert lens[0] < lens[-1]  # padding happens in a shared chunk
    cap = 2 * lens[1]
    chunks = core._chunks(seqs, 3, cap)
    assert sorted(len(s.conv) for c in chunks for s in c) == lens
    assert all(len(c) <= 3 and (len(c) == 1 or len(c) * max(len(s.conv) for s in c) <= cap) for c in chunks)
    assert len(core._chunks(seqs, 16, None)) == 1 and len(core._chunks(seqs, 16, 1)) == 4
    args = GRPOArgs(kl_coef=0.0, max_grad_norm=1e9, micro_batch_size=16)
    together = _grads(policy, seqs, replace(args, micro_batch_tokens=10**9))
    alone = _grads(policy, seqs, replace(args, micro_batch_tokens=1))
    assert together.keys() == alone.keys() and len(together) > 0
    for k in together:
        torch.testing.assert_close(alone[k], together[k], atol=1e-5 * float(together[k].abs().max()) + 1e-7, rtol=0)
    assert core.micro_batch_tokens(GRPOArgs(), "cpu") == 2048 and core.micro_batch_tokens(GRPOArgs(), "cuda") is None


# ------------------------------------------------------------------ rollouts with sub-agents
CALL = '<tool_call>{"name": "crop_video", "arguments": {"start_time": %d, "end_time": %d}}</tool_call>'


@pytest.fixture(scope="module")
def caller():
    """The shipped strong cold start: a real model whose real `generate` writes several crop calls in
    one turn when the overview is too small to show the evidence (K = 4, needle questions)."""
    from agents.lmm.default import default_checkpoint

    torch.set_num_threads(2)
    return core.load_policy(str(default_checkpoint("strong")), torch.device("cpu"))


def _needle_episodes(n: int) -> list[int]:
    env = core.make_env(GRPOArgs(dataset_size=200, frame_budget=4), "train")
    return [i for i in range(200) if env.dataset[i].question.family in ("needle", "needle_attribute")][:n]


def _rollouts(pol, args, n=8):
    envs = [core.make_env(args, "train", pol) for _ in range(n)]
    idx = _needle_episodes(n)
    return core.collect_rollouts(pol, envs, list(range(n)), list(range(n)), temperature=0.0, top_p=1.0,
                                 max_new_tokens=args.max_new_tokens, sub_max_new_tokens=8, think_prefix=True,
                                 gen_seed=0, reset_options=[{"episode_index": i} for i in idx])


def _args(**kw):
    return GRPOArgs(**{**dict(think_prefix=True, dataset_size=200, max_turns=2, frame_budget=4, max_new_tokens=160,
                              subagent="oracle"), **kw})


def test_evaluation_plays_episodes_from_eval_first_episode(caller):
    """--eval-first-episode F evaluates validation episodes F..F+N-1, each reset with 10000 + its index,
    the episodes `python -m agents.evaluate --seed 10000 --first-episode F` plays (a sweep picks its settings
    on episodes the reported evaluation never sees); a negative F is refused."""
    args = _args(eval_episodes=3, eval_first_episode=7, eval_samples=3, max_new_tokens=8, max_turns=1)
    envs = [core.make_env(args, "validation", caller) for _ in range(2)]
    kept: list = []
    core.evaluate(caller, envs, args, core.Dist(), samples=kept)
    assert [s.record["episode_index"] for s in kept] == [7, 8, 9]
    want = core.make_env(args, "validation")
    for s in kept:
        info = want.reset(seed=10_000 + s.record["episode_index"], options={"episode_index": s.record["episode_index"]})[1]
        assert s.record["question_id"] == str(info["question_id"])
    with pytest.raises(ValueError, match="--eval-first-episode"):
        config.validate_args(replace(args, eval_first_episode=-1))
    with pytest.raises(ValueError, match="--dataset-size"):  # episodes 199..201 of a 200-episode split
        config.validate_args(replace(args, eval_first_episode=199))


def test_eval_subagent_temperature_sets_how_the_summaries_are_decoded(caller):
    """--eval-subagent-temperature: by default the evaluation's sub-agents decode as its main agent does (greedy
    here, so 0 changes nothing); sampled at 1.5 they write other summaries of the same first crops, while the
    main agent's first turn, which comes before any summary, stays the same."""
    def transcripts(sub_temperature: float) -> list[list[dict]]:
        args = _args(eval_episodes=6, eval_first_episode=0, eval_samples=6, eval_temperature=0.0, max_turns=2,
                     subagent="policy", subagent_max_new_tokens=24, eval_subagent_temperature=sub_temperature)
        envs = [core.make_env(args, "validation", caller) for _ in range(6)]
        kept: list = []
        core.evaluate(caller, envs, args, core.Dist(), samples=kept)
        return [s.record["turns"] for s in kept]

    def said(turns, role):
        return [t["text"] if role == "assistant" else [x["text"] for x in t["responses"]]
                for t in turns if t["role"] == role]

    default, greedy, sampled = transcripts(-1.0), transcripts(0.0), transcripts(1.5)
    assert default == greedy
    assert sum(len(said(t, "tool")) for t in default) >= 2  # the calls ran: there are summaries to compare
    assert [said(t, "assistant")[:1] for t in sampled] == [said(t, "assistant")[:1] for t in default]
    first = [(said(a, "tool")[:1], said(b, "tool")[:1]) for a, b in zip(default, sampled) if said(a, "tool")]
    assert any(x != y for x, y in first)


def test_evaluation_draw_resamples_the_same_episodes(caller):
    """evaluation_records(draw=d): d = 0 is the trainer's evaluation, repeated exactly; another draw samples other
    texts of the same episodes (the same questions and overview K)."""
    args = _args(eval_episodes=4, eval_first_episode=0, eval_samples=4, eval_temperature=1.5, max_new_tokens=24,
                 max_turns=1, nframes_gating=True, gating_budgets="4,8,16")
    envs = [core.make_env(args, "validation", caller) for _ in range(4)]

    def play(draw):
        kept: list = []
        core.evaluation_records(caller, envs, args, core.Dist(), samples=kept, draw=draw)
        return [(s.record["question_id"], s.record["frame_budget"], s.record["turns"][0]["text"]) for s in kept]

    trainer, again, other = play(0), play(0), play(1)
    assert trainer == again
    assert [r[:2] for r in other] == [r[:2] for r in trainer]
    assert len({r[1] for r in trainer}) > 1  # gating drew several K, and each episode kept its own
    assert [r[2] for r in other] != [r[2] for r in trainer]


def test_generate_stops_after_the_call_limit_not_the_first_call(caller):
    """Greedy decoding is deterministic, so a limit of L calls must give exactly the unlimited text cut
    right after its L-th closed call, in either call form (or the unlimited text, when that has fewer calls)."""
    import re

    from agents.lmm.policy import CALL_CLOSERS

    closer = re.compile("|".join(map(re.escape, CALL_CLOSERS)))
    env = core.make_env(_args(), "train")
    convs = [caller.start(env.reset(seed=0, options={"episode_index": i})[1]["messages"]) for i in _needle_episodes(6)]
    free = caller.generate([c.copy() for c in convs], temperature=0.0, max_new_tokens=160, max_calls=None)
    assert max(c.text.count("</tool_call>") for c in free) >= 2  # several calls in one turn
    for limit in (1, 2, 5):
        for c, u in zip(caller.generate([c.copy() for c in convs], temperature=0.0, max_new_tokens=160,
                                        max_calls=limit), free):
            ends = [m.end() for m in closer.finditer(u.text)]
            if len(ends) >= limit:
                assert c.text == u.text[:ends[limit - 1]] and c.finish_reason == "stop"
            else:
                assert c.text == u.text


@pytest.mark.parametrize("subagent", ["policy", "oracle"])
def test_rollout_executes_parallel_calls_in_one_turn(caller, subagent):
    """Real model, real generate, the trainer's own rollout loop: one turn executes several crops,
    answered by the policy as sub-agents (batched) or by the world's oracle; the answers come back
    as tool responses (masked), and the env counts executed and emitted calls per turn."""
    args = _args(subagent=subagent)
    rs = _rollouts(caller, args)
    assert any(n >= 2 for r in rs for n in r.info["tool_calls_per_turn"])
    for r in rs:
        assert r.done
        per_turn = r.info["tool_calls_per_turn"]
        assert all(n <= args.max_calls_per_turn for n in per_turn)
        assert r.info["num_tool_calls"] == sum(per_turn) <= r.info["num_tool_calls_emitted"]
        if subagent == "policy":  # one trained conversation per pass over a crop (Subagent.passes)
            most = -(-args.crop_max_frames // 4) * r.info["num_tool_calls"]
            assert r.info["num_tool_calls"] <= len(r.sub_convs) <= most
        else:
            assert r.sub_convs == []
        assert all(any(c.generated_mask) for c in r.sub_convs)
        text = caller.tokenizer.decode(r.conv.token_ids)
        assert text.count("<tool_response>") == text.count("</tool_response>")
        if subagent == "oracle":
            assert text.count("Scenes:") == r.info["num_tool_calls"]
        assert (r.info["reward_components"]["tool/executed"] > 0) == (r.info["num_tool_calls"] > 0)
        resp = caller.tokenizer.convert_tokens_to_ids("<tool_response>")
        assert not any(g for t, g in zip(r.conv.token_ids, r.conv.generated_mask) if t == resp)
    stats = core.episode_stats([core.episode_record(r) for r in rs])
    assert stats["parallel_turn_fraction"] > 0 and stats["tool_calls_per_rollout"] > 0


def test_call_limits_sequential_dispatch_and_the_last_turn(caller):
    # a limit of 1 per turn under parallel dispatch: generation stops after the 1st call
    rs = _rollouts(caller, _args(max_calls_per_turn=1))
    assert all(n <= 1 for r in rs for n in r.info["tool_calls_per_turn"])
    assert any(r.info["num_tool_calls"] for r in rs)
    # sequential dispatch: one call per turn is written and run
    rs = _rollouts(caller, _args(dispatch="sequential", max_calls_per_turn=1))
    for r in rs:
        assert all(n <= 1 for n in r.info["tool_calls_per_turn"])
        text = caller.tokenizer.decode(r.conv.token_ids)
        assert "was not run" not in text  # generation never wrote a second call into a sequential turn
    # one allowed turn: its calls are emitted, never executed, and counted so
    rs = _rollouts(caller, _args(max_turns=1))
    assert any(r.info["num_tool_calls_emitted"] >= 1 for r in rs)
    for r in rs:
        assert r.info["num_tool_calls"] == 0 and r.info["reward_components"]["tool/executed"] == 0


def test_episode_stats_by_hand():
    recs = [{"reward": 1.0, "family": "a", "correct": 1.0, "format_reward": 0.5, "format_reward_common": 0.4,
             "format_reward_common_generated": 0.2, "executed": 3.0, "emitted": 4.0, "calls_per_turn": [3, 0],
             "frame_budget": 4.0, "components": {"x": 1.0}},
            {"reward": 0.0, "family": "b", "correct": 0.0, "format_reward": 1.0, "format_reward_common": 0.8,
             "format_reward_common_generated": 0.6, "executed": 1.0, "emitted": 1.0, "calls_per_turn": [1, 0, 0],
             "frame_budget": 8.0, "components": {"x": 0.0}},
            {"reward": 0.5, "family": "b", "correct": 1.0, "format_reward": 0.0, "format_reward_common": 0.0,
             "format_reward_common_generated": 0.1, "executed": 0.0, "emitted": 2.0, "calls_per_turn": [0],
             "frame_budget": 8.0, "components": {"x": 0.5}}]
    s = core.episode_stats(recs, per_family=True)
    assert s["tool_calls_per_rollout"] == pytest.approx(4 / 3) and s["tool_calls_emitted_per_rollout"] == pytest.approx(7 / 3)
    assert s["parallel_turn_fraction"] == pytest.approx(0.5)  # turns with calls: 3 and 1
    assert s["format_reward_common"] == pytest.approx(0.4) and s["accuracy/b"] == pytest.approx(0.5)
    assert s["format_reward_common_generated"] == pytest.approx(0.3)
    assert s["reward_components/x"] == pytest.approx(0.5)
    assert core.episode_stats(recs[2:])["parallel_turn_fraction"] == 0.0


# ------------------------------------------------------------------ scripts
@pytest.mark.parametrize("script", ["para_grpo", "grpo", "sequential_tool"])
def test_two_step_smoke(script, tiny_dir, tmp_path):
    import importlib

    mod = importlib.import_module(f"trainers.{script}")
    hist = mod.main(tiny_argv(tiny_dir, tmp_path))
    assert [h["step"] for h in hist] == [0, 1, 2]  # the starting policy's evaluation, then the steps
    assert all(k.startswith("eval/") for k in hist[0] if k != "step")
    for key in ("train/format_reward", "train/format_reward_common", "train/tool_calls_per_rollout",
                "train/tool_calls_emitted_per_rollout", "train/parallel_turn_fraction", "train/accuracy",
                "train/reward", "train/frame_budget", "train/entropy", "train/kl", "train/clip_fraction",
                "perf/step_seconds", "perf/tokens_per_second", "eval/accuracy", "eval/format_reward",
                "eval/format_reward_common", "eval/tool_calls_per_rollout", "eval/tool_calls_emitted_per_rollout",
                "eval/parallel_turn_fraction"):
        assert key in hist[-1], key
    assert any(k.startswith("train/reward_components/") for k in hist[-1])
    assert any(k.startswith("eval/accuracy/") for k in hist[-1])
    run = next(tmp_path.iterdir())
    assert list(run.glob("events.out.tfevents.*")) and (run / "checkpoints" / "latest").is_file()
    assert (run / "final_model" / "config.json").is_file()


def test_final_model_keeps_the_build_record_its_subagent_reads(tiny_dir, tmp_path):
    """A model built by trainers/sft.py has a build record (sft_args.json) that agents.lmm.Subagent's "auto"
    reads: the frame size and passes of 4 frames per crop. The trained final_model carries it, so passing
    it to --model (or to Subagent) runs the sub-agent the way the training run did; a model without one
    gets none."""
    import json
    import shutil

    from agents.lmm import Subagent
    from agents.lmm.subagent import TINY_FRAMES_PER_PASS
    from trainers import para_grpo

    built = tmp_path / "built" / "cold_start"
    shutil.copytree(tiny_dir, built)
    (built.parent / "sft_args.json").write_text(json.dumps({"args": {"frame_size": 56, "tool_prior": "strong"}}))
    para_grpo.main(tiny_argv(str(built), tmp_path / "a", "--eval-every", "0", "--total-steps", "1", "--run-name", "r"))
    record = json.loads((tmp_path / "a" / "r" / "final_model" / "sft_args.json").read_text())
    assert record["args"] == {"frame_size": 56, "tool_prior": "strong"} and record["trained_from"] == str(built)
    trained = core.load_policy(str(tmp_path / "a" / "r" / "final_model"), torch.device("cpu"))
    sub = Subagent(trained)
    assert sub.frames_per_pass == TINY_FRAMES_PER_PASS and sub.frame_size == (56, 56)
    para_grpo.main(tiny_argv(tiny_dir, tmp_path / "b", "--eval-every", "0", "--total-steps", "1", "--run-name", "r"))
    assert not (tmp_path / "b" / "r" / "final_model" / "sft_args.json").exists()


def test_resume_reproduces_uninterrupted_run(tiny_dir, tmp_path):
    from trainers import para_grpo

    straight = para_grpo.main(tiny_argv(tiny_dir, tmp_path / "a", "--eval-every", "0"))
    first = para_grpo.main(tiny_argv(tiny_dir, tmp_path / "b", "--eval-every", "0", "--total-steps", "1"))
    second = para_grpo.main(tiny_argv(tiny_dir, tmp_path / "b", "--eval-every", "0", "--resume"))
    assert [h["step"] for h in first] == [1] and [h["step"] for h in second] == [2]
    for got, want in ((first[0], straight[0]), (second[0], straight[1])):
        for k, v in want.items():
            if k.startswith("perf/"):
                continue
            assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-7), k


def test_bad_arguments_stop_early(tmp_path, capsys):
    from trainers import para_grpo

    for bad in (["--anchor-mode", "sideways"], ["--frame-budget", "12"], ["--model", str(tmp_path / "nope")],
                ["--group-size", "1"], ["--subagent-frames-per-pass", "-1"], ["--subagent-frames-per-pass", "two"],
                ["--micro-batch-tokens", "-1"], ["--micro-batch-size", "0"]):
        with pytest.raises(SystemExit) as exc:
            config.parse_args(para_grpo.Args, bad)
        assert exc.value.code == 2, bad
        assert "error" in capsys.readouterr().err
    from trainers.rollouts import subagent_passes
    assert [subagent_passes(config.parse_args(para_grpo.Args, ["--subagent-frames-per-pass", v])) for v in
            ("auto", "0", "2")] == ["auto", None, 2]
    p = subprocess.run([sys.executable, "trainers/para_grpo.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "--no-think-prefix" in p.stdout and "--anchor-mode" in p.stdout
    assert "--micro-batch-tokens" in p.stdout


def test_torchrun_two_processes_cpu(tiny_dir, tmp_path):
    cmd = ["torchrun", "--nproc_per_node=2", "trainers/para_grpo.py", *tiny_argv(tiny_dir, tmp_path), "--device", "cpu"]
    cmd[0] = str(Path(sys.executable).with_name("torchrun"))
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    run = next(tmp_path.iterdir())
    assert (run / "checkpoints" / "latest").is_file()


def test_gating_budget_is_a_function_of_the_prompt_seed():
    """K per prompt must not depend on Python's salted hash() (as in the released ParaVT code); here it is drawn by the env
    from the reset seed, and the reset seed from (seed, step, rank, prompt) through numpy's SeedSequence."""
    args = GRPOArgs(nframes_gating=True, dataset_size=60)
    seeds = [core.derive_seed(1, step, 0, 0) for step in range(1, 9)]
    assert seeds == [core.derive_seed(1, step, 0, 0) for step in range(1, 9)]
    ks = []
    for _ in range(2):
        env = core.make_env(args, "train")
        ks.append([env.reset(seed=s)[1]["frame_budget"] for s in seeds])
    assert ks[0] == ks[1] and len(set(ks[0])) > 1
    code = "from trainers.core import derive_seed; print(derive_seed(1, 3, 0, 0))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}).stdout  # another hash salt than this process
    assert out == f"{core.derive_seed(1, 3, 0, 0)}\n"


def test_sweep_runs_rows_resumes_and_reports(tiny_dir, tmp_path):
    from trainers import sweep

    out = tmp_path / "out"
    flags = tiny_argv(tiny_dir, tmp_path)
    i = flags.index("--runs-dir")
    del flags[i:i + 2]
    flags[flags.index("--model")] = "--strong-model"  # the sweep's own flag for the model of the strong rows
    argv = ["--rows", "cold_start,grpo", "--seeds", "1,2", "--jobs", "2", "--out", str(out), "--no-progress",
            "--eval-first-episode", "40", "--eval-episodes", "2", *flags]
    results = sweep.main(argv)
    assert {"cold_start", "grpo"} <= set(results) and results["grpo"]["seeds"] == [1, 2]
    for row in ("cold_start", "grpo"):
        r = results[row]
        assert r["f_tau"]["n"] == 2 and r["kappa"]["n"] == 2 and r["steps"]["mean"] == 2
        assert not math.isnan(r["eval_accuracy_no_subagent"]["mean"])
    assert (out / "runs" / "grpo__s2" / "final_model").is_dir()
    table = (out / "results.md").read_text()
    assert "| grpo |" in table and "| cold_start |" in table
    # beside the paper: its numbers for the row, ours from the runs (accuracy in %)
    side = (out / "side_by_side.md").read_text()
    acc = f"{100 * results['grpo']['eval_accuracy']['mean']:.1f} ± "
    assert "| grpo | + GRPO | 2 | 0.13 |" in side and "| 0.02 |" in side and acc in side
    assert (out / "curves.png").stat().st_size > 1000
    # the cold start is never updated: the same weights at the end
    import safetensors.torch as st

    a = st.load_file(str(Path(tiny_dir) / "model.safetensors"))
    b = st.load_file(str(out / "runs" / "cold_start__s1" / "final_model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # rerunning skips every finished run; the report is rebuilt from the run folders
    stamp = (out / "runs" / "grpo__s1" / "history.json").stat().st_mtime_ns
    again = sweep.main(argv)
    assert (out / "runs" / "grpo__s1" / "history.json").stat().st_mtime_ns == stamp
    assert again["grpo"]["f_tau"]["mean"] == pytest.approx(results["grpo"]["f_tau"]["mean"])
    with pytest.raises(SystemExit):
        sweep.main(["--rows", "nonsense"])
    with pytest.raises(SystemExit):
        sweep.main(["--rows", "grpo", "--runs-dir", "elsewhere"])


def test_sweep_spread_statistics():
    from trainers.sweep import spread

    s = spread([1.0, 2.0, 3.0])
    assert s["mean"] == 2.0 and s["std"] == pytest.approx(1.0) and s["n"] == 3
    assert s["ci95"] == pytest.approx([2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)], rel=1e-6)
    assert spread([float("nan")])["n"] == 0 and math.isnan(spread([5.0])["ci95"][0])


def test_gating_budgets_flag_reaches_the_env_and_is_validated():
    args = config.parse_args(GRPOArgs, ["--nframes-gating", "--gating-budgets", "4,8"])
    env = core.make_env(args, "train")
    assert env.budgets == (4, 8) and env.nframes_gating
    with pytest.raises(SystemExit):
        config.parse_args(GRPOArgs, ["--gating-budgets", "4,7"])


def _advantages_worker(rank, world, init_file, rewards, groups, out_dir):
    import torch.distributed as td

    td.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        dist = core.Dist(rank, world, rank)
        mine = [i for i in range(len(rewards)) if i // 4 % world == rank]  # whole groups of 4 per process
        adv = compute_advantages([rewards[i] for i in mine], [groups[i] for i in mine], group_norm="std",
                                 batch_norm="std", sum_over_processes=lambda a: core.sum_array(a, dist))
        np.save(f"{out_dir}/adv_{rank}.npy", np.stack([np.array(mine, dtype=float), adv]))
    finally:
        td.destroy_process_group()


def test_batch_normalisation_spans_every_process(tmp_path):
    """Under data parallelism the batch-level normalisation uses the global batch: two processes give the
    advantages one process computes on the union of their rollouts."""
    rng = np.random.default_rng(0)
    rewards = (rng.random(16) * 3).tolist()
    rewards[:4] = [1.0] * 4  # a group without spread (all zeros after group normalisation) on process 0 only
    groups = [i // 4 for i in range(16)]
    whole = compute_advantages(rewards, groups, group_norm="std", batch_norm="std")
    torch.multiprocessing.spawn(_advantages_worker, args=(2, str(tmp_path / "init"), rewards, groups, str(tmp_path)),
                                nprocs=2, join=True)
    got = np.zeros(16)
    for rank in range(2):
        idx, adv = np.load(tmp_path / f"adv_{rank}.npy")
        got[idx.astype(int)] = adv
        # a process's own rollouts alone would give other numbers (groups differ in spread)
        local = compute_advantages([rewards[int(i)] for i in idx], [groups[int(i)] for i in idx])
        assert not np.allclose(local, adv)
    np.testing.assert_allclose(got, whole, rtol=1e-9, atol=1e-9)


def test_sweep_maps_each_prior_to_its_model_and_refuses_a_global_model():
    from trainers import sweep

    models = {"strong": "/ckpt/strong", "weak": "/ckpt/weak"}
    for row, spec in sweep.ROWS.items():
        argv = sweep.run_argv(row, 3, Path("runs"), [], models)
        assert argv[argv.index("--model") + 1] == models[spec.prior] and "--prior" not in argv
    default = sweep.run_argv("weak_full", 3, Path("runs"), [])
    assert default[default.index("--prior") + 1] == "weak" and "--model" not in default
    with pytest.raises(SystemExit):
        sweep.main(["--rows", "grpo", "--model", "/ckpt/strong", "--report-only"])

