"""The trainer as a library (trainers/core.py: train, TrainResult, callbacks, reward functions, question
files, precision, schedules, checkpointing switches), extra reward terms in the environment
(paravt_env/reward_terms.py), checkpoints that AutoProcessor loads without torchvision, and the
newcomer's command lines (render, evaluate, benchmarks' --out)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainers import config, core
from trainers.config import GRPOArgs
from trainers.core import TrainSeq

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ reward functions used below (by name too)
def length_term(trajectory: str, info: dict) -> float:
    """A term that differs between rollouts of one prompt: it must change the advantages."""
    return 0.01 * len(trajectory)


def two_terms(trajectory: str, info: dict) -> dict:
    return {"knows_answer": float(info["answer"] is not None), "family_is_str": float(isinstance(info["family"], str))}


SEEN_FACTS: list[dict] = []


def record_facts(trajectory: str, info: dict) -> float:
    SEEN_FACTS.append({"trajectory": trajectory, **info})
    info["reward_components"]["accuracy"] = 99.0  # a function's copy: the env's terms must not change
    return 0.0


def tiny_args(tiny_dir, runs, **kw) -> GRPOArgs:
    base = dict(model=tiny_dir, runs_dir=str(runs), total_steps=2, prompts_per_step=1, group_size=2,
                max_new_tokens=8, subagent_max_new_tokens=6, max_turns=2, eval_every=0, eval_episodes=2,
                checkpoint_every=0, dataset_size=60, progress=False, subagent="oracle", frame_budget=4)
    return GRPOArgs(**{**base, **kw})


def tiny_argv(tiny_dir, runs, *extra):
    return ["--model", tiny_dir, "--runs-dir", str(runs), "--total-steps", "1", "--prompts-per-step", "1",
            "--group-size", "2", "--max-new-tokens", "8", "--subagent-max-new-tokens", "6", "--max-turns", "2",
            "--eval-every", "0", "--eval-episodes", "2", "--checkpoint-every", "0", "--dataset-size", "60",
            "--subagent", "oracle", "--frame-budget", "4", "--no-progress", *extra]


# ------------------------------------------------------------------ extra reward terms in the environment
CALL = '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}</tool_call>'


def _play(env, seed=3):
    env.reset(seed=seed)
    env.step("look closer\n</think>" + CALL)
    return env.step("seen it\n</think><answer>A</answer>")


def test_reward_terms_add_to_the_reward_and_its_components():
    from paravt_env.env import ParaVTLongVideoEnv

    plain = ParaVTLongVideoEnv(frame_budget=4, dataset_size=30)
    extra = ParaVTLongVideoEnv(frame_budget=4, dataset_size=30, reward_fns=[length_term, two_terms, record_facts])
    _, r0, *_, info0 = _play(plain)
    SEEN_FACTS.clear()
    _, r1, *_, info1 = _play(extra)
    comps = info1["reward_components"]
    assert comps["length_term"] == pytest.approx(0.01 * len(extra.trajectory))
    assert comps["knows_answer"] == 1.0 and comps["family_is_str"] == 1.0 and comps["record_facts"] == 0.0
    assert r1 == pytest.approx(r0 + comps["length_term"] + 2.0)
    assert {k: v for k, v in comps.items() if k in info0["reward_components"]} == info0["reward_components"]
    [facts] = SEEN_FACTS
    q = extra.episode.question
    assert facts["trajectory"] == extra.trajectory and "<tool_response>" in facts["trajectory"]
    assert (facts["question"], facts["ground_truth"], facts["family"], facts["answer"]) == (q.text, q.answer, q.family, "A")
    assert facts["num_tool_calls"] == 1 and facts["turns"] == 2 and facts["frame_budget"] == 4
    assert comps["accuracy"] == info0["reward_components"]["accuracy"]  # the function's edit stayed in its copy


@pytest.mark.parametrize("fn, message", [
    (lambda t, i: float("nan"), "expected a finite number"),
    (lambda t, i: "1.0", "expected a finite number"),
    (lambda t, i: True, "expected a finite number"),
    (lambda t, i: {"tool": 1.0}, "'tool', which is already taken"),
    (lambda t, i: {"": 1.0}, "names must be non-empty strings"),
])
def test_bad_reward_terms_are_named(fn, message):
    from paravt_env.env import ParaVTLongVideoEnv

    env = ParaVTLongVideoEnv(frame_budget=4, dataset_size=30, reward_fns=[fn])
    with pytest.raises(ValueError, match=re.escape(message)) as exc:
        _play(env)
    assert "reward function <lambda>" in str(exc.value)
    with pytest.raises(ValueError, match="must be functions"):
        ParaVTLongVideoEnv(frame_budget=4, dataset_size=30, reward_fns=["mod:fn"])


def test_a_config_file_never_names_code_to_run(tmp_path, capsys):
    """A config file may be a run folder's args.json from elsewhere: a --reward-fn in it (code to import and run)
    stops the command before anything is imported; the same flag on the command line works."""
    from trainers import sweep

    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef f(trajectory, info):\n    return 0.0\n")
    args_json = tmp_path / "args.json"
    args_json.write_text(json.dumps({"total_steps": 3, "reward_fn": f"{evil}:f"}))
    with pytest.raises(SystemExit):
        config.parse_args(GRPOArgs, ["--config", str(args_json)])
    assert "reward_fn names code to run" in capsys.readouterr().err and not marker.exists()
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"rows: [grpo]\ntrainer:\n  reward_fn: {evil}:f\n")
    with pytest.raises(ValueError, match="reward_fn names code to run"):
        sweep.load_sweep_config(sweep_file)
    assert not marker.exists()
    args = config.parse_args(GRPOArgs, ["--config", str(args_json), "--reward-fn", "tests.test_library:length_term"])
    assert args.total_steps == 3 and args.reward_fn == "tests.test_library:length_term" and not marker.exists()


def test_reward_fn_flag_imports_modules_and_files(tmp_path, capsys):
    file = tmp_path / "my_rewards.py"
    file.write_text("def short(trajectory, info):\n    return -len(trajectory) / 1000\n")
    fns = config.resolve_reward_fns(f"tests.test_library:length_term, {file}:short")
    assert fns[0].__name__ == "length_term" and fns[0]("ab", {}) == 0.02 and fns[1]("abcd", {}) == -0.004
    args = config.parse_args(GRPOArgs, ["--reward-fn", "tests.test_library:length_term",
                                      "--reward-fn", f"{file}:short,tests.test_library:two_terms"])
    assert args.reward_fn == f"tests.test_library:length_term,{file}:short,tests.test_library:two_terms"
    assert config.parse_args(GRPOArgs, []).reward_fn == ""
    for bad, said in (("no_such_module_xyz:f", "cannot import 'no_such_module_xyz' (ModuleNotFoundError"),
                      ("tests.test_library:no_such_fn", "has no function 'no_such_fn'"),
                      ("length_term", "expected module:function"),
                      (f"{tmp_path}/missing.py:f", "cannot import"),
                      ("tests.test_library:SEEN_FACTS", "has no function 'SEEN_FACTS'")):
        with pytest.raises(SystemExit) as exc:
            config.parse_args(GRPOArgs, ["--reward-fn", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert said in err and repr(bad.strip()) in err, err


def test_reward_fns_change_the_rollouts_rewards_and_advantages(policy):
    """The trainer's own path: env built by make_env with reward_fns -> rollout.reward -> advantages."""
    args = tiny_args("", "", max_new_tokens=12)
    out = {}
    for name, fns in (("plain", None), ("length", [length_term])):
        envs = [core.make_env(args, "train", policy, reward_fns=fns) for _ in range(4)]
        rs = core.collect_rollouts(policy, envs, [5, 5, 6, 6], [0, 0, 1, 1], temperature=1.0, top_p=1.0,
                                   max_new_tokens=12, sub_max_new_tokens=6, think_prefix=False, gen_seed=7)
        out[name] = (np.array([r.reward for r in rs]), [r.env.trajectory for r in rs],
                     core.compute_advantages([r.reward for r in rs], [0, 0, 1, 1]))
    (r0, t0, a0), (r1, t1, a1) = out["plain"], out["length"]
    assert t0 == t1  # same seeds: the same rollouts
    np.testing.assert_allclose(r1 - r0, [0.01 * len(t) for t in t1])
    assert len(set(len(t) for t in t1[:2])) > 1 or len(set(len(t) for t in t1[2:])) > 1
    assert not np.allclose(a0, a1)


def test_custom_reward_is_logged_in_train_and_eval(tiny_dir, tmp_path):
    argv = tiny_argv(tiny_dir, tmp_path / "a", "--learning-rate", "0", "--eval-every", "1")
    plain = core.main_for(GRPOArgs, argv)
    argv = tiny_argv(tiny_dir, tmp_path / "b", "--learning-rate", "0", "--eval-every", "1",
                     "--reward-fn", "tests.test_library:length_term")
    extra = core.main_for(GRPOArgs, argv)
    p, e = plain[-1], extra[-1]
    term = e["train/reward_components/length_term"]
    assert term > 0 and "eval/reward_components/length_term" in e
    assert e["train/reward"] == pytest.approx(p["train/reward"] + term)  # lr 0, same seed: same rollouts
    assert e["train/advantage_abs"] != pytest.approx(p["train/advantage_abs"])


# ------------------------------------------------------------------ train() as a library
class Recorder:
    def __init__(self, stop_at=None):
        self.steps, self.evals, self.stop_at = [], [], stop_at

    def on_step(self, step, metrics):
        self.steps.append((step, metrics))
        return step == self.stop_at

    def on_eval(self, step, metrics):
        self.evals.append((step, metrics))


def test_callbacks_early_stop_and_the_returned_policy(tiny_dir, tmp_path, capsys):
    rec, evals = Recorder(stop_at=2), []
    args = tiny_args(tiny_dir, tmp_path, total_steps=4, eval_every=1, checkpoint_every=3, progress=True)
    result = core.train(args, callbacks=rec, on_eval=lambda step, m: evals.append(step))
    assert [s for s, _ in rec.steps] == [1, 2] and [s for s, _ in rec.evals] == [0, 1, 2] and evals == [0, 1, 2]
    assert [h["step"] for h in result.history] == [0, 1, 2]
    assert rec.steps[-1][1] == {k: v for k, v in result.history[-1].items() if k != "step"}
    assert all(k.startswith("eval/") for k in rec.evals[0][1]) and "eval/accuracy" in rec.evals[0][1]
    run = result.run_dir
    # stopped at step 2: its checkpoint (checkpointing is on) and final_model are written, nothing later
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*.pt")) == ["step_000002.pt"]
    manifest = json.loads((run / "final_model" / "checkpoint_manifest.json").read_text())
    assert manifest["info"]["step"] == 2
    assert [h["step"] for h in json.loads((run / "history.json").read_text())] == [0, 1, 2]
    # the returned policy is the trained model: the same weights as final_model, not the starting ones
    live = result.policy.model.state_dict()
    saved = core.load_policy(str(run / "final_model"), torch.device("cpu")).model.state_dict()
    start = core.load_policy(tiny_dir, torch.device("cpu")).model.state_dict()
    assert live.keys() == saved.keys() and all(torch.equal(live[k], saved[k]) for k in live)
    assert not all(torch.equal(live[k], start[k]) for k in live)
    assert not result.policy.model.training
    # the closing summary
    out = capsys.readouterr().out
    assert "step 2 of 4" in out and str(run) in out and "eval at step 0:" in out and "eval at step 2:" in out
    assert f"tensorboard --logdir {tmp_path}" in out and "final_model" in out
    # --resume continues after the stop
    more = core.train(tiny_args(tiny_dir, tmp_path, total_steps=4, eval_every=1, checkpoint_every=3,
                                run_name=run.name, resume=True))
    assert [h["step"] for h in more.history] == [3, 4]
    with pytest.raises(TypeError, match="on_step"):
        core.train(tiny_args(tiny_dir, tmp_path), callbacks=[object()])


def test_stop_at_the_first_evaluation(tiny_dir, tmp_path):
    result = core.train(tiny_args(tiny_dir, tmp_path, eval_every=1), on_eval=lambda step, m: True)
    assert [h["step"] for h in result.history] == [0]
    assert json.loads((result.run_dir / "final_model" / "checkpoint_manifest.json").read_text())["info"]["step"] == 0


def test_no_checkpoints_no_eval_envs(tiny_dir, tmp_path, monkeypatch):
    made = []
    real = core.make_env

    def spy(args, split, *a, **kw):  # records what was built, builds it for real
        made.append((split, kw.get("tools", a[1] if len(a) > 1 else None)))
        return real(args, split, *a, **kw)

    monkeypatch.setattr(core, "make_env", spy)
    result = core.train(tiny_args(tiny_dir, tmp_path, eval_every=0, eval_without_tools=True, checkpoint_every=0))
    assert {split for split, _ in made} == {"train"} and len(made) == 2
    assert not list(result.run_dir.glob("checkpoints/*"))
    assert (result.run_dir / "final_model" / "config.json").is_file()
    assert [h["step"] for h in result.history] == [1, 2] and not any("eval/" in k for k in result.history[-1])


def test_lr_schedules_by_hand(tiny_dir, tmp_path):
    def lrs(schedule, warm, total=6, base=1.0):
        args = GRPOArgs(learning_rate=base, lr_warmup_steps=warm, lr_schedule=schedule, total_steps=total)
        return [core.lr_at(s, args) for s in range(1, total + 1)]

    assert lrs("constant", 0) == [1.0] * 6
    assert lrs("constant", 3) == pytest.approx([1 / 3, 2 / 3, 1, 1, 1, 1])
    assert lrs("linear", 2) == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])
    cos = [0.5 * (1 + math.cos(math.pi * p)) for p in (0, 0.25, 0.5, 0.75)]
    assert lrs("cosine", 2) == pytest.approx([0.5, 1.0, *cos])
    assert lrs("cosine", 0, total=1) == [1.0] and lrs("linear", 10, total=4) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    # the optimizer follows it, and it is logged
    result = core.train(tiny_args(tiny_dir, tmp_path, total_steps=3, learning_rate=1e-3, lr_warmup_steps=2,
                                  lr_schedule="linear"))
    assert [h["train/learning_rate"] for h in result.history] == pytest.approx([5e-4, 1e-3, 1e-3])


# ------------------------------------------------------------------ precision, checkpointing, update epochs
def _generated_seqs(policy, n=4, seed=0):
    """Real sampled completions with their behaviour log-probs, from an env prompt (sampled in eval
    mode, as the trainer samples)."""
    policy.model.eval()
    env = core.make_env(GRPOArgs(dataset_size=30, frame_budget=4), "train")
    convs = [policy.start(env.reset(seed=seed)[1]["messages"]) for _ in range(n)]
    comps = policy.generate(convs, temperature=1.0, max_new_tokens=12, seed=seed)
    for c, comp in zip(convs, comps):
        c.append_completion(comp)
    return [TrainSeq(c, a, "main") for c, a in zip(convs, [1.0, -1.0, 0.5, -0.5][:n])]


def _fresh_policy(tiny_dir):
    return core.load_policy(tiny_dir, torch.device("cpu"))


def test_clip_fraction_is_zero_on_one_pass_and_measures_later_passes(tiny_dir):
    stats = {}
    for epochs in (1, 3):
        pol = _fresh_policy(tiny_dir)
        args = GRPOArgs(update_epochs=epochs, kl_coef=0.0, learning_rate=3e-2)
        seqs = _generated_seqs(pol)
        core.prepare_model(pol.model, args)
        opt = torch.optim.AdamW([p for p in pol.model.parameters() if p.requires_grad], lr=args.learning_rate)
        stats[epochs] = core.grpo_update(pol.model, None, None, pol, opt, seqs, args, core.Dist())
    # one pass: the policy that sampled is the one updated, so the ratio is 1 (up to numerics): no clip
    assert stats[1]["clip_fraction"] == 0.0
    assert 0.0 < stats[3]["clip_fraction"] <= 1.0


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_dir):
    out = {}
    for ckpt in (False, True):
        pol = _fresh_policy(tiny_dir)
        args = GRPOArgs(gradient_checkpointing=ckpt, kl_coef=0.0, max_grad_norm=1e9)
        seqs = _generated_seqs(pol)
        core.prepare_model(pol.model, args)
        assert any(getattr(m, "gradient_checkpointing", False) for m in pol.model.modules()) == ckpt
        opt = torch.optim.SGD(pol.model.parameters(), lr=0.0)
        upd = core.grpo_update(pol.model, None, None, pol, opt, seqs, args, core.Dist())
        out[ckpt] = upd, {n: p.grad.clone() for n, p in pol.model.named_parameters() if p.grad is not None}
    (u0, g0), (u1, g1) = out[False], out[True]
    assert u0["loss"] == pytest.approx(u1["loss"], rel=1e-5, abs=1e-7) and g0.keys() == g1.keys() and g0
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-6)


def test_bf16_runs_a_step_on_cpu(tiny_dir, tmp_path):
    result = core.train(tiny_args(tiny_dir, tmp_path, total_steps=1, dtype="bf16", learning_rate=1e-3))
    [h] = result.history
    assert math.isfinite(h["train/loss"]) and math.isfinite(h["train/kl"]) and h["train/trained_tokens"] > 0
    model = result.policy.model
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay fp32
    before = core.load_policy(tiny_dir, torch.device("cpu")).model.state_dict()
    after = model.state_dict()
    assert before.keys() == after.keys() and not all(torch.equal(before[k], after[k]) for k in before)


def test_bf16_autocast_covers_the_log_prob_forward(policy):
    seqs = _generated_seqs(policy, n=2)
    convs = [s.conv for s in seqs]
    with torch.no_grad():
        fp32 = core.sequence_logprobs(policy.model, policy, convs)[0]
        with core.autocast(GRPOArgs(dtype="bf16"), torch.device("cpu")):
            bf16 = core.sequence_logprobs(policy.model, policy, convs)[0]
        with core.autocast(GRPOArgs(dtype="fp32"), torch.device("cpu")):
            again = core.sequence_logprobs(policy.model, policy, convs)[0]
    for a, b, c in zip(fp32, bf16, again):
        assert torch.equal(a, c) and not torch.equal(a, b)  # bf16 really ran, and nowhere else
        torch.testing.assert_close(b, a, atol=0.15, rtol=0.05)  # and is close to fp32


# ------------------------------------------------------------------ question files and --no-tools
@pytest.fixture(scope="module")
def question_file(tmp_path_factory):
    from paravt_env.export import export

    return export(tmp_path_factory.mktemp("q") / "data", n=3, seed=0, split="validation", fps=1.0, size=(56, 56),
                  duration=60.0)


def test_source_file_trains_and_evaluates_on_its_questions(tiny_dir, tmp_path, question_file, monkeypatch):
    from paravt_env.sources import FileDataset

    envs = []
    real = core.make_env

    def spy(*a, **kw):
        env = real(*a, **kw)
        envs.append(env)
        return env

    monkeypatch.setattr(core, "make_env", spy)
    hist = core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path, "--source", str(question_file), "--eval-every", "1"))
    assert [h["step"] for h in hist] == [0, 1] and "eval/accuracy" in hist[-1]
    ids = {json.loads(line)["id"] for line in question_file.read_text().splitlines()}
    datasets = {id(e.dataset) for e in envs}
    assert len(datasets) == 1 and all(isinstance(e.dataset, FileDataset) for e in envs)  # read once, shared
    assert {envs[0].dataset[i].question.id for i in range(len(envs[0].dataset))} == ids
    assert all(e.episode is None or e.episode.question.id in ids for e in envs)
    # more evaluation episodes than questions, a missing file: one line each, before any run folder
    with pytest.raises(SystemExit, match=r"--eval-episodes 5 is more than the 3 questions of"):
        core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path / "x", "--source", str(question_file),
                                          "--eval-every", "1", "--eval-episodes", "5"))
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        config.parse_args(GRPOArgs, ["--source", str(tmp_path / "nope.jsonl")])


def write_video_corrupt_mid_file(path, duration=60.0, fps=1.0, size=(56, 56)):
    """A real h264 mp4 (a keyframe every 4 frames) whose header, first and last frames are intact and
    whose middle fifth of the frame data is zeroed: it opens, and decoding its middle fails."""
    import struct
    from fractions import Fraction

    import av

    from paravt_env.world import SyntheticVideo

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = size[1], size[0], "yuv420p"
        stream.options = {"g": "4", "keyint_min": "4", "preset": "veryfast"}
        for img in SyntheticVideo(1, 2, duration=duration).frames_at(np.arange(int(duration * fps)) / fps, size):
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    data = bytearray(path.read_bytes())
    at = 0
    while data[at + 4:at + 8] != b"mdat":
        at += struct.unpack(">I", data[at:at + 4])[0]
    size_ = struct.unpack(">I", data[at:at + 4])[0]
    lo, hi = at + 8 + int(size_ * 0.4), at + 8 + int(size_ * 0.6)
    data[lo:hi] = bytes(hi - lo)
    path.write_bytes(bytes(data))
    return path


def test_a_video_corrupt_mid_file_is_skipped_counted_and_named_once(tiny_dir, tmp_path, question_file, capsys):
    """Its episodes are replaced by others, data/videos_skipped counts them, the log names the video once;
    past --max-bad-video-fraction the run stops with one line."""
    import shutil

    from paravt_env.sources import FileVideoSource, VideoError

    data = tmp_path / "data"
    shutil.copytree(question_file.parent, data)
    bad = write_video_corrupt_mid_file(data / "bad.mp4")
    source = FileVideoSource(bad)                      # the header is fine: it opens ...
    with pytest.raises(VideoError, match="cannot decode frames"):
        source.overview(16)                            # ... and its middle does not decode
    rows = [json.loads(line) for line in (data / "episodes.jsonl").read_text().splitlines()]
    mixed = data / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows + [dict(r, id=f"bad{i}", video="bad.mp4")
                                                                   for i, r in enumerate(rows)]))
    hist = core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path / "runs", "--source", str(mixed), "--total-steps",
                                             "2", "--max-bad-video-fraction", "0.5"))
    assert [h["step"] for h in hist] == [1, 2] and hist[-1]["data/videos_skipped"] > 0
    err = capsys.readouterr().err
    assert err.count("[data] skipping episodes of a video that does not decode: ") == 1 and str(bad) in err
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next((tmp_path / "runs").iterdir())))
    acc.Reload()
    assert [e.value for e in acc.Scalars("data/videos_skipped")][-1] == hist[-1]["data/videos_skipped"]

    all_bad = data / "bad.jsonl"
    all_bad.write_text("".join(json.dumps(dict(r, video="bad.mp4")) + "\n" for r in rows))
    with pytest.raises(SystemExit) as exc:
        core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path / "runs2", "--source", str(all_bad)))
    assert str(exc.value.code) == (f"error: 6 of 6 episode draws had a video that does not decode, more than "
                                   f"--max-bad-video-fraction 0.05 allows (first: {bad}); repair or remove those "
                                   "videos")


def test_a_question_whose_evidence_lies_past_its_video_is_skipped_not_the_end_of_the_run(tiny_dir, tmp_path,
                                                                                       question_file, capsys):
    """An evidence window past the video's end is known only once the video opens, mid-run: that episode is
    skipped and counted like one whose video does not decode (the error names the question and the window), and
    the run goes on."""
    rows = [json.loads(line) for line in question_file.read_text().splitlines()]
    mixed = tmp_path / "late_evidence.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows + [dict(r, id=f"late{i}", evidence=[[100.0, 200.0]])
                                                                   for i, r in enumerate(rows)]))
    hist = core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path / "runs", "--source", str(mixed), "--video-root",
                                             str(question_file.parent), "--total-steps", "2",
                                             "--max-bad-video-fraction", "0.5"))
    assert [h["step"] for h in hist] == [1, 2] and hist[-1]["data/videos_skipped"] > 0
    err = capsys.readouterr().err
    assert "[data] skipping episodes of a video" in err and "question 'late" in err and "outside" in err


def _with_bad_videos(question_file, data, bad_after):
    """A copy of the question file's folder, a video damaged mid-file in it, and mixed.jsonl: its rows, each
    row i in ``bad_after`` followed by a copy of it on the damaged video."""
    import shutil

    shutil.copytree(question_file.parent, data)
    bad = write_video_corrupt_mid_file(data / "bad.mp4")
    rows = []
    for i, line in enumerate((data / "episodes.jsonl").read_text().splitlines()):
        rows.append(json.loads(line))
        if i in bad_after:
            rows.append(dict(rows[-1], id=f"bad{i}", video="bad.mp4"))
    (data / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data / "mixed.jsonl", bad


def test_a_protocol_evaluation_leaves_out_episodes_whose_video_does_not_decode(tiny_dir, tmp_path, question_file,
                                                                              capsys):
    """trainers/evaluation.py: an episode whose video is damaged mid-file is left out of its batch, counted and
    named by index in every condition, and the evaluation goes on; it is the same for a given draw, and another
    row (another model) leaves out the same episodes and plays the others at the same K."""
    from agents.lmm import build_tiny_model, build_tokenizer, save_checkpoint
    from trainers import evaluation

    mixed, bad = _with_bad_videos(question_file, tmp_path / "data", bad_after=(0, 2))  # episodes 1 and 4 are bad
    base = tiny_args(tiny_dir, tmp_path / "runs", eval_source=str(mixed))
    protocol = evaluation.Protocol(eval_first_episode=0, eval_episodes=5, batch=4)  # a mixed batch, an all-bad one
    record = evaluation.evaluate_steps(base, [0], tmp_path / "evals", protocol, ["tools", "no_tools"], draw=1,
                                       device="cpu", log=lambda *_: None)[0]
    assert json.loads((tmp_path / "evals" / "step_000000.json").read_text()) == record
    conditions = record["conditions"]
    for c in conditions.values():
        assert (c["episodes"], c["videos_skipped"], c["skipped_episodes"]) == (3, 2, [1, 4])
        assert len(c["correct"]) == len(c["frame_budget"]) == 3
    assert conditions["tools"]["frame_budget"] == conditions["no_tools"]["frame_budget"]
    assert str(bad) in capsys.readouterr().err
    dataset = core.load_question_files(base)[1]
    again = evaluation.evaluate_policy(core.load_policy(tiny_dir, torch.device("cpu")), base, protocol, "tools", 1,
                                       dataset)
    assert again == {k: v for k, v in conditions["tools"].items() if k != "seconds"}  # the same draw, the same play
    tok = build_tokenizer()
    save_checkpoint(str(tmp_path / "other"), build_tiny_model(tok, seed=1), tok)
    other = evaluation.evaluate_policy(core.load_policy(str(tmp_path / "other"), torch.device("cpu")), base, protocol,
                                       "tools", 1, dataset)
    assert other["skipped_episodes"] == [1, 4] and other["frame_budget"] == conditions["tools"]["frame_budget"]


def test_the_trainers_own_evaluation_leaves_out_a_bad_video_and_goes_on(tiny_dir, tmp_path, question_file, capsys):
    """An evaluation episode on a video damaged mid-file is left out and counted (eval/videos_skipped); the run
    evaluates before and after its step and ends normally."""
    mixed, bad = _with_bad_videos(question_file, tmp_path / "data", bad_after=(0,))  # episode 1 is bad
    hist = core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path / "runs", "--eval-source", str(mixed),
                                             "--eval-every", "1", "--eval-episodes", "4", "--eval-samples", "0"))
    evals = [h for h in hist if "eval/videos_skipped" in h]
    assert [h["step"] for h in evals] == [0, 1] and all(h["eval/videos_skipped"] == 1 for h in evals)
    assert hist[-1]["step"] == 1 and str(bad) in capsys.readouterr().err


def test_the_bad_video_count_and_its_stop_rule_carry_across_resume(tiny_dir, tmp_path, question_file):
    """data/videos_skipped and --max-bad-video-fraction count the whole run: the checkpoint keeps the run's
    [draws, skipped] as plain ints; a run resumed from step 2 counts on from there, and stops where the
    uninterrupted run stops, with the same counts."""
    mixed, bad = _with_bad_videos(question_file, tmp_path / "data", bad_after=(0, 1, 2))

    def train(name, *extra):
        return core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path / "runs", "--source", str(mixed), "--run-name",
                                                 name, "--total-steps", "4", "--checkpoint-every", "2", *extra))

    whole = [h["data/videos_skipped"] for h in train("whole", "--max-bad-video-fraction", "1")]
    assert whole == sorted(whole) and 0 < whole[1] < whole[3]  # skips before and after step 2
    run = tmp_path / "runs" / "whole"
    state = torch.load(run / "checkpoints" / "step_000002.pt", weights_only=True)
    draws, skipped = state["bad_videos"]
    assert type(draws) is type(skipped) is int and skipped == whole[1]
    assert draws == 2 * 2 + skipped  # each of 2 steps' 2 rollouts drawn once, and every draw that failed
    (run / "checkpoints" / "step_000004.pt").unlink()
    resumed = train("whole", "--max-bad-video-fraction", "1", "--resume")
    assert [h["step"] for h in resumed] == [3, 4] and [h["data/videos_skipped"] for h in resumed] == whole[2:]
    # a limit the run crosses only after step 2: the resumed run stops at the same draw as the uninterrupted one
    limit = ["--max-bad-video-fraction", str(whole[1] / 100)]  # stops at the first skip past step 2's count
    with pytest.raises(SystemExit) as uninterrupted:
        train("limited", *limit)
    (run / "checkpoints" / "step_000004.pt").unlink()
    with pytest.raises(SystemExit) as after_resume:
        train("whole", *limit, "--resume")
    said = str(uninterrupted.value.code)
    assert said.startswith(f"error: {int(whole[1]) + 1} of ") and f"(first: {bad})" in said
    assert str(after_resume.value.code) == said


def test_no_tools_is_single_turn_with_no_tool_advertised(tiny_dir, tmp_path):
    """The shipped strong checkpoint writes crop calls at K = 4; with --no-tools nothing advertises
    the tool, each episode is one turn, and no call ever runs."""
    from agents.lmm.default import default_checkpoint

    args = config.parse_args(GRPOArgs, ["--no-tools", "--frame-budget", "4", "--dataset-size", "200",
                                      "--think-prefix", "--subagent", "oracle"])
    assert args.max_turns == 1 and not args.tools
    caller = core.load_policy(str(default_checkpoint("strong")), torch.device("cpu"))
    envs = [core.make_env(args, "train", caller) for _ in range(8)]
    rs = core.collect_rollouts(caller, envs, list(range(8)), list(range(8)), temperature=0.0, top_p=1.0,
                               max_new_tokens=160, sub_max_new_tokens=8, think_prefix=True, gen_seed=0)
    for r in rs:
        system = r.env.messages[0]["content"]
        assert "crop_video" not in system and "tool" not in system.lower()
        assert r.done and len(r.info["tool_calls_per_turn"]) == 1 and r.info["num_tool_calls"] == 0
        assert r.info["reward_components"]["tool/executed"] == 0
    # and a training step end to end
    hist = core.main_for(GRPOArgs, tiny_argv(tiny_dir, tmp_path, "--no-tools", "--eval-every", "1"))
    assert hist[-1]["train/tool_calls_per_rollout"] == 0 and hist[-1]["eval/tool_calls_per_rollout"] == 0


# ------------------------------------------------------------------ AutoProcessor without torchvision
PROCESSOR_CHECK = r"""
import sys
sys.modules["torchvision"] = None  # not importable, even where it is installed
try:
    import torchvision  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("torchvision is importable")
import numpy as np, torch
from PIL import Image
from transformers import AutoProcessor
from transformers.utils import is_torchvision_available
assert not is_torchvision_available()
from paravt_env.env import ParaVTLongVideoEnv
from agents.lmm.policy import TransformersPolicy
path = sys.argv[1]
processor = AutoProcessor.from_pretrained(path)
policy = TransformersPolicy(path)
env = ParaVTLongVideoEnv(frame_budget=4, frame_size=(56, 56), dataset_size=30)
_, info = env.reset(seed=1)
messages = info["messages"]
images = [part["image"] for m in messages if isinstance(m["content"], list) for part in m["content"]
          if part["type"] == "image"]
text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
batch = processor(text=[text], images=[Image.fromarray(i) for i in images], return_tensors="pt")
conv = policy.start(messages)
assert batch["input_ids"][0].tolist() == conv.token_ids, "token ids differ"
assert torch.equal(batch["image_grid_thw"], torch.cat(conv.image_grid_thw).reshape(-1, 3))
torch.testing.assert_close(batch["pixel_values"], torch.cat(conv.pixel_values), atol=1e-5, rtol=0)
out = policy.model(**{k: v for k, v in batch.items() if k != "mm_token_type_ids"})
print("ok", type(processor).__name__, len(images), tuple(out.logits.shape))
"""


def test_checkpoints_load_through_autoprocessor_without_torchvision(tiny_dir, tmp_path):
    script = tmp_path / "check.py"
    script.write_text(PROCESSOR_CHECK)
    p = subprocess.run([sys.executable, str(script), tiny_dir], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "PATH": "", "HOME": str(tmp_path)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.startswith("ok PaddleOCRVLProcessor 4 ")


# ------------------------------------------------------------------ package boundaries and command lines
def test_paravt_env_imports_nothing_from_agents():
    code = ("import importlib, pkgutil, sys, paravt_env\n"
            "for m in pkgutil.iter_modules(paravt_env.__path__):\n"
            "    importlib.import_module('paravt_env.' + m.name)\n"
            "bad = sorted(n for n in sys.modules if n == 'agents' or n.startswith(('agents.', 'trainers', 'torch')))\n"
            "print(bad)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr[-2000:]
    for f in (ROOT / "paravt_env").glob("*.py"):
        assert not re.search(r"^\s*(from|import)\s+(agents|trainers)\b", f.read_text(), re.M), f


def test_render_and_evaluate_commands(tmp_path):
    from agents.render import main as render

    render(["--seed", "2", "--agent", "scene", "--frame-budget", "8", "--out", str(tmp_path / "t.png")])
    assert (tmp_path / "t.png").stat().st_size > 1000
    for module in ("agents.render", "agents.evaluate"):
        p = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0 and "(default: " in p.stdout and "(default: None)" not in p.stdout, p.stdout
    p = subprocess.run([sys.executable, "-m", "paravt_env.render"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "python -m agents.render" in p.stderr


def test_help_texts_cite_only_what_the_repository_holds():
    p = subprocess.run([sys.executable, "trainers/para_grpo.py", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "PAPER" not in p.stdout and "(default: )" not in p.stdout
    for flag in ("--reward-fn", "--source", "--dtype", "--lr-schedule", "--gradient-checkpointing",
                 "--update-epochs", "--no-tools"):
        assert flag in p.stdout, flag


def test_benchmarks_do_not_overwrite_committed_results_by_default():
    for f in sorted((ROOT / "benchmarks").glob("*.py")):
        if f.name == "update_readme.py":  # the one command that writes the README, from benchmarks/results
            continue
        text = f.read_text()
        assert not re.search(r"default=[^,)]*benchmarks/results", text), f.name
        assert 'a.out or f"benchmarks/results' not in text, f.name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device (run on the GPU machine)")
@pytest.mark.parametrize("backend", ["hf-graph", "hf-graph-compiled"])
def test_graph_rollouts_train_on_a_gpu(tiny_dir, tmp_path, backend):
    """The trainer's own forward hooks (suppressed tokens) inside recorded graphs: a short run on CUDA
    goes through rollouts, updates and evaluations with replayed decode steps, never falls back to
    eager decoding, and gives the stock backend's run step for step (fp32: the same tokens)."""
    runs = {}
    for name in ("hf", backend):
        res = core.train(tiny_args(tiny_dir, tmp_path / name, rollout_backend=name, device="cuda", eval_every=2,
                                   total_steps=3, max_new_tokens=24))
        runs[name] = res.history
        if name == backend:
            entries = list(res.policy.kept_caches.entries.values())
            assert res.policy.kept_caches.graphs_failed is None
            assert entries and all(e.graph is not None for e in entries if e.ids is not None)
    keys = ("train/reward", "train/tool_calls_per_rollout", "train/main_tokens_per_rollout", "eval/accuracy")
    for a, b in zip(runs["hf"], runs[backend], strict=True):
        for k in keys:
            if k in a:
                assert a[k] == pytest.approx(b[k], abs=1e-6), k


@pytest.mark.parametrize("backend,cache,fused", [("hf-static", "static", ""), ("hf-graph", "graph", ""),
                                                 ("hf-graph", "graph", "attention,mlp")])
def test_kept_cache_rollouts_train_like_the_default_backend(tiny_dir, tmp_path, backend, cache, fused):
    """--rollout-backend hf-static / hf-graph (also with --fuse-projections, whose kept weight copy must
    follow every update) go through the whole trainer (rollouts, update, evaluation) and, the sampler
    being the only difference, give the default backend's run step for step."""
    runs, policies = {}, {}
    for name in ("hf", backend):
        res = core.train(tiny_args(tiny_dir, tmp_path / name, rollout_backend=name, eval_every=2,
                                   fuse_projections=fused if name == backend else ""))
        runs[name], policies[name] = res.history, res.policy
    assert policies["hf"].generation_cache == "dynamic" and not len(policies["hf"].kept_caches)
    assert policies[backend].generation_cache == cache and len(policies[backend].kept_caches)  # used
    assert (policies[backend].kept_caches.fused is not None) == bool(fused)
    keys = ("train/reward", "train/tool_calls_per_rollout", "train/main_tokens_per_rollout", "eval/accuracy")
    for a, b in zip(runs["hf"], runs[backend], strict=True):
        for k in keys:
            if k in a:
                assert a[k] == pytest.approx(b[k], abs=1e-6), k


def test_default_run_seeds_evaluates_each_run_before_and_after(tiny_dir, tmp_path):
    """benchmarks/default_run_seeds.py runs the trainer once per (setting, seed) in its own process, evaluates
    each on the same episodes from --eval-first-episode before and after, and scores the no-tool agent on the
    episodes each run evaluated (its world and K, read from the run's args.json)."""
    import json

    from agents.evaluate import evaluate
    from benchmarks.default_run_seeds import GUESS_SEEDS, eval_env_settings, main, parse_configs, parse_seeds

    small = "--total-steps 1 --group-size 2 --max-new-tokens 8 --subagent-max-new-tokens 6 --max-turns 2 " \
            "--dataset-size 60 --checkpoint-every 0"
    out = tmp_path / "r"
    main(["--model", tiny_dir, "--configs", f"a:{small}|b:{small} --learning-rate 0|k4:{small} --gating-budgets 4",
          "--seeds", "3", "--eval-episodes", "3", "--eval-first-episode", "5", "--jobs", "2",
          "--out", str(out)])
    result = json.loads(out.with_suffix(".json").read_text())
    runs_dir = tmp_path / "r_runs"  # --runs-dir defaults to OUT_runs: sweeps with different --out never collide
    runs = {r["setting"]: r for r in result["runs"]}
    assert {(n, r["seed"], r["returncode"]) for n, r in runs.items()} == {("a", 3, 0), ("b", 3, 0), ("k4", 3, 0)}
    for r in runs.values():
        assert r["steps"] == 1 and 0.0 <= r["after"]["accuracy"] <= 1.0
    # the same starting model on the same episodes: the same "before"; no update (lr 0): "after" is a rerun
    assert runs["a"]["before"] == runs["b"]["before"] and runs["b"]["after"] == runs["b"]["before"]
    history = json.loads((runs_dir / "a__s3" / "history.json").read_text())
    assert [h["step"] for h in history if "eval/accuracy" in h] == [0, 1]
    for name, budgets in (("a", (4, 8, 16)), ("k4", (4,))):
        run_args = json.loads((runs_dir / f"{name}__s3" / "args.json").read_text())
        assert dict(eval_env_settings(run_args)) == {"split": "validation", "world_seed": 0, "dataset_size": 60,
                                                     "nframes_gating": True, "gating_budgets": budgets,
                                                     "frame_budget": 64, "frame_size": (56, 56)}
        # counted as the trainer counts (share right), one draw of its guesses and their mean over guess seeds
        draws = [evaluate("no_tool", 3, 10_000, 5, agent_seed=10_000 + g, split="validation", dataset_size=60,
                          nframes_gating=True, gating_budgets=budgets, frame_size=(56, 56))["correct"]
                 for g in range(GUESS_SEEDS)]
        assert runs[name]["no_tool"]["accuracy"] == pytest.approx(draws[0])
        assert runs[name]["no_tool"]["accuracy_expected"] == pytest.approx(sum(draws) / len(draws))
    assert "| a s3" in out.with_suffix(".md").read_text() and out.with_suffix(".png").stat().st_size > 1000
    assert parse_seeds("1-3,7") == [1, 2, 3, 7] and parse_seeds("4") == [4]
    for bad in ("1-x", "", "a"):
        with pytest.raises(SystemExit, match="--seeds"):
            parse_seeds(bad)
    with pytest.raises(SystemExit, match="unique"):
        parse_configs("a:|a:--learning-rate 0")
    with pytest.raises(SystemExit, match="plain name"):
        parse_configs(":--learning-rate 0")


def test_eval_draws_first_draw_is_the_trainers_evaluation(tmp_path):
    """benchmarks/eval_draws.py: draw 0 is the accuracy the trainer's own evaluation gives on those episodes (the
    default run's settings, the shipped strong cold start); the no-tool agent's draws are the ones
    default_run_seeds reports for the same episodes; JSON, markdown and PNG are written."""
    import dataclasses
    import json

    import torch

    from agents.lmm.default import default_checkpoint
    from benchmarks.default_run_seeds import eval_env_settings, no_tool_accuracy
    from benchmarks.eval_draws import main
    from trainers import core
    from trainers.para_grpo import Args

    model = str(default_checkpoint("strong"))
    out = tmp_path / "d"
    main(["--models", model, "--names", "v", "--first", "3", "--episodes", "4", "--draws", "2", "--out", str(out)])
    result = json.loads((tmp_path / "d.json").read_text())
    rows = [line for line in (tmp_path / "d.md").read_text().splitlines() if line.startswith("| v |")]
    assert len(rows) == 1 and (tmp_path / "d.png").exists()
    args = dataclasses.replace(Args(), model=model, eval_first_episode=3, eval_episodes=4)
    policy = core.load_policy(model, torch.device("cpu"))
    envs = [core.make_env(args, "validation", policy) for _ in range(4)]
    trainer = core.evaluate(policy, envs, args, core.Dist())["accuracy"]
    row = result["models"]["v"]
    assert row["first_draw"] == pytest.approx(trainer) and len(row["draws"]) == 2
    # the per-episode shares are the draws seen the other way round: their mean is the mean accuracy
    assert len(row["per_episode"]) == 4 and sum(row["per_episode"]) / 4 == pytest.approx(row["mean"])
    assert set(row["per_episode"]) <= {0.0, 0.5, 1.0} and set(row["called_per_episode"]) <= {0.0, 0.5, 1.0}
    executed = [[r["executed"] > 0 for r in sorted(core.evaluation_records(policy, envs, args, core.Dist(), draw=d),
                                                     key=lambda r: r["episode"])] for d in (0, 1)]
    assert row["called_per_episode"] == [sum(ep) / 2 for ep in zip(*executed)] and any(map(any, executed))
    no_tool = no_tool_accuracy(3, 4, eval_env_settings(dataclasses.asdict(args)))
    assert json.loads(json.dumps(no_tool)) == result["no_tool"]
    assert sum(no_tool["expected_per_episode"]) / 4 == pytest.approx(no_tool["accuracy_expected"])
    md = (tmp_path / "d.md").read_text()
    assert "| episode | family | v | no-tool agent |" in md and all(f"| {i} | " in md for i in range(3, 7))
