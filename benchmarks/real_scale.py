"""PARA-GRPO at real scale: a Qwen-VL of a published shape, its vision tower included, on long encoded videos, with
the paper's settings, through the trainers' own run loop (trainers.core.train with --model DIR).

    python benchmarks/real_scale.py --tiny                                  # CPU smoke run, about a minute
    python benchmarks/real_scale.py --shape qwen2.5-vl-3b --prompts 1 --out benchmarks/results/gpu/real_scale_3b
    python benchmarks/real_scale.py --shape qwen2.5-vl-3b --compare-samplers hf,hf-graph,hf-graph-compiled \\
        --out benchmarks/results/gpu/real_scale_3b
    python benchmarks/real_scale.py --shape qwen2.5-vl-3b --sft --out benchmarks/results/gpu/real_scale_3b

What is built (under --work, kept for later runs):
- the model: agents.lmm.qwen_shapes.build_checkpoint(--shape), the published text and vision configuration with
  random bf16 weights, this project's byte-level BPE as its tokenizer and transformers' Qwen2-VL image processor
  with the published settings (qwen_shapes' docstring says what is and is not the model's own);
- the data: --videos videos of the synthetic world, --minutes long, --video-side px square at --fps frames a
  second, encoded as H.264 mp4 by paravt_env.export, and their questions in the ParaVT release's row format
  (prompt / videos / extra_info), read by the trainer as any question file (--source, --video-root).

What runs: for each P of --prompts, smallest first, one process runs trainers/para_grpo.py's settings with
--prompts-per-step P for --steps steps: G = 8 rollouts a prompt, K drawn per prompt from --budgets (the paper's
4,8,16,32,64), up to 3 turns of up to 2048 new tokens, up to 5 parallel crops of up to 16 frames at 1 fps each
answered by the policy as its sub-agent in up to 512 tokens, frames of the side the model's processor takes
(448 px: 256 visual tokens a frame for Qwen2.5-VL, 196 for Qwen3-VL), --dtype bf16 (fp32 master weights and
AdamW state), --gradient-checkpointing, the frozen reference for the KL term in bf16 (--reference-dtype bf16; give
-- --reference-dtype fp32 for the trainer's default), --rollout-backend (hf-graph by default), and the settings that
follow a model other than the tiny builds (32k-token update chunks, decode caches freed before the update). Random weights never write a call or an answer, so the run is made to take the paper's most: each
main-agent turn opens with --calls crop calls (a forced prefix, like the think prefix: context, not trained), and
sampling is kept to plain text tokens (no end of turn, tag or id past the tokenizer: their logits are set to
-1e9, in training too). Every rollout then makes 3 turns of 2048 sampled tokens, 5 crops of 16 frames in each of
the first two (the last turn's calls do not run) and 10 sub-agent answers of 512 tokens. The G rollouts of a prompt
make the same calls (in a real group they differ), so the graph samplers prefill each group's sub-agent prompts
once: the sub-agents' prefill costs up to G times less than in a real run.

Measured per step, from the trainer's own step metrics (trainers/core.py): seconds of main-agent generation, of
the sub-agents' generation, of env and reward, of the whole update and of its parts (reference forward, log-prob
forward, backward, optimizer step), each with its share of the step; visual and text tokens per rollout (main
agent and sub-agents together) and the main agent's context; peak GPU memory (torch.cuda.max_memory_allocated
since the step began; on a CPU the process's peak resident size); the update's tokens per second (every token of
every trained sequence) and its MFU: (6N for the policy's forward and backward + 2N for the reference forward) FLOPs
per token, N = the language model's parameters (embeddings and output layer included; the frozen vision tower's
FLOPs and attention's sequence-length term left out, as benchmarks/scale_fsdp.py counts), over the update's
seconds x --peak-tflops. Rows report the mean over the steps after the first (the first records graphs and
warms up; it is in the JSON). Results go to --out/real_scale.json and .md after every P, merged with rows of
other P already there for the same shape; a P that runs out of memory is recorded and ends the search.

--compare-samplers B1,B2,...: the trainer's rollout collection (trainers.rollouts.collect_rollouts, the same
prompts, seeds and forced calls) with each sampler in turn, interleaved round by round in one process on one
shared model, --rounds rounds (the first a warm-up): generation seconds per sampler, the speed-up over the first
one, whether every rollout's tokens (main agent and sub-agents) equal the first sampler's, and the share of the
main agent's conversation before the first token that differs. In fp32 on a CPU the samplers agree token for token;
under bf16 on a GPU their logits differ in rounding (log-prob differences of 0.03-0.05 in
benchmarks/results/gpu/generation_graph), so long rollouts may part after a while. Each sampler's
kept caches are dropped after its round, as the trainer does at this scale (--no-keep-decode-caches).

--sft: the cold start of the same model folder (trainers/sft.py --model DIR, tool traces of the world rendered in
the model's chat template, bf16 autocast, activation checkpointing, vision tower frozen) for --sft-steps steps:
seconds per step, tokens per second, peak memory.

Time on one H100 / H200 (rough estimates, not yet measured; the first call on a machine also builds the 3B folder
and the videos, about 2 minutes; each run loads the model, about a minute):
  qwen2.5-vl-3b --prompts 1 (2 steps of ~2-3 min): ~6-8 min;   --prompts 2 --steps 1: ~6 min;
  --compare-samplers hf,hf-graph --rounds 1: ~7 min (stock generate alone ~4 min a round at 2048-token turns);
  --compare-samplers hf-graph,hf-graph-compiled --rounds 2: ~7 min;   --sft: ~4 min.
  Each should take under 10 minutes of one GPU (an estimate); a larger P or more steps may not. qwen2.5-vl-7b does not fit one GPU with AdamW in
  fp32 (~122 GB of weights, gradients and optimizer state).
--tiny: the tiny-qwen2.5-vl shape (2 layers, a 2-block vision tower) on a one-minute 56 px video, 2 steps of 1
prompt x G = 2 with 2 calls a turn and short turns, fp32 on the CPU, the samplers that run on a CPU compared, and a
short cold start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python benchmarks/real_scale.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.report import write_report  # noqa: E402
from benchmarks.scale_fsdp import H200_BF16_TFLOPS  # noqa: E402
from trainers import config, core, para_grpo  # noqa: E402

PARTS = ("generate_main", "generate_sub", "env", "backward", "reference_forward", "logprob_forward", "loss_backward",
         "optimizer")
GRAPH_BACKENDS = ("hf-graph", "hf-graph-compiled")


def parse(argv=None):
    from agents.lmm.qwen_shapes import SHAPES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-vl-3b")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: a tiny-* shape (tiny-qwen2.5-vl unless "
                                                       "--shape names one), short video, short turns, fp32")
    p.add_argument("--prompts", default=None, help="prompts per step P to try, smallest first (default 1,2,4,7; "
                                                   "--tiny: 1)")
    p.add_argument("--steps", type=int, default=2, help="steps per P (the first is a warm-up)")
    p.add_argument("--budgets", default="4,8,16,32,64", help="overview sizes K a prompt draws from (64 alone: "
                                                             "every prompt at the largest)")
    p.add_argument("--calls", type=int, default=None, help="crop calls opening every main-agent turn (default 5; "
                                                         "--tiny: 2)")
    p.add_argument("--rollout-backend", default=None, help="the trainer's sampler (default hf-graph on CUDA, hf "
                                                           "on a CPU)")
    p.add_argument("--compare-samplers", default="", help="comma list of samplers to compare instead of training, "
                                                          "e.g. hf,hf-graph,hf-graph-compiled")
    p.add_argument("--rounds", type=int, default=2, help="--compare-samplers: rounds (the first a warm-up)")
    p.add_argument("--sft", action="store_true", help="measure the cold start (trainers/sft.py --model) instead")
    p.add_argument("--sft-steps", type=int, default=None, help="--sft: optimizer steps (default 20; --tiny: 3)")
    p.add_argument("--videos", type=int, default=2, help="videos to encode (6 questions each)")
    p.add_argument("--minutes", type=float, default=None, help="length of each video (default 20; --tiny: 1)")
    p.add_argument("--fps", type=float, default=2.0, help="frame rate of the encoded videos")
    p.add_argument("--video-side", type=int, default=None, help="encoded frame side in px (default 448; --tiny: 56)")
    p.add_argument("--device", default=None, help="cuda when available, else cpu")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help=f"per-device peak for MFU (default {H200_BF16_TFLOPS:.0f} on CUDA, as benchmarks/scale_fsdp.py; "
                        "none on a CPU)")
    p.add_argument("--work", default="runs/real_scale", help="where the model folder, videos and runs go")
    p.add_argument("--out", default="runs/real_scale/results", help="folder of real_scale.json / .md (--out "
                                                                   "benchmarks/results/gpu/... for the record)")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)  # one P's training run, in its own process
    p.add_argument("extra", nargs="*", help="more trainers/para_grpo.py flags after --, e.g. -- --kl-coef 0")
    a = p.parse_args(argv)
    if a.child:
        return a
    if a.tiny and not a.shape.startswith("tiny"):
        a.shape = "tiny-qwen2.5-vl"
    a.tiny = tiny = a.shape.startswith("tiny")
    a.device = a.device or ("cuda" if torch.cuda.is_available() and not a.tiny else "cpu")
    defaults = dict(prompts="1" if tiny else "1,2,4,7", calls=2 if tiny else 5, minutes=1.0 if tiny else 20.0,
                    video_side=56 if tiny else 448, sft_steps=3 if tiny else 20,
                    rollout_backend="hf-graph" if a.device.startswith("cuda") else "hf")
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.rollout_backend != "hf" and "fp32" not in a.extra:  # fail before minutes of building, not at the first turn
        from agents.lmm.graph_decode import check_autocast_cache_support

        try:
            check_autocast_cache_support()
        except RuntimeError as exc:
            p.error(f"--rollout-backend {a.rollout_backend}: {exc}")
    a.prompt_list = [int(x) for x in a.prompts.split(",") if x.strip()]
    if not a.prompt_list or min(a.prompt_list) < 1 or a.steps < 1 or a.calls < 1 or a.rounds < 1:
        p.error("--prompts needs positive integers; --steps, --calls and --rounds must be >= 1")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda, but CUDA is not available")
    if a.peak_tflops is None and a.device.startswith("cuda"):
        a.peak_tflops = H200_BF16_TFLOPS
    return a


# ============================================================================================
# the model folder and the videos
# ============================================================================================
def prepare(a) -> dict:
    """The model folder, the videos and their question file (each made once under --work); what the rows need."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from agents.lmm.qwen_shapes import build_checkpoint, parameter_counts
    from paravt_env.export import export

    work = Path(a.work)
    t0 = time.perf_counter()
    model_dir = build_checkpoint(a.shape, work / a.shape / "model", device=a.device)
    built_s = time.perf_counter() - t0
    with torch.device("meta"):
        counts = parameter_counts(AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(model_dir)))
    side = a.video_side
    videos = work / f"videos_{a.videos}x{a.minutes:g}min_{side}px_{a.fps:g}fps"
    source = videos / "episodes.jsonl"
    t0 = time.perf_counter()
    if not source.is_file():
        export(videos, 6 * a.videos, seed=0, split="test", fps=a.fps, size=(side, side), duration=60 * a.minutes,
               release_format=True)
    return {"model": str(model_dir), "source": str(source), "video_root": str(videos),
            "duration": 60.0 * a.minutes, "parameters": counts, "build_seconds": built_s,
            "export_seconds": time.perf_counter() - t0}


def trainer_argv(a, data: dict, prompts: int, run_name: str) -> list[str]:
    """trainers/para_grpo.py's command line for one P: the paper's settings (--tiny: short turns, fp32 on a CPU)."""
    argv = ["--model", data["model"], "--source", data["source"], "--video-root", data["video_root"],
            "--device", a.device, "--runs-dir", str(Path(a.work) / a.shape / "runs"), "--run-name", run_name,
            "--prompts-per-step", str(prompts), "--total-steps", str(a.steps), "--gating-budgets", a.budgets,
            "--max-turns", "3", "--max-calls-per-turn", str(a.calls), "--rollout-backend", a.rollout_backend,
            "--gradient-checkpointing", "--learning-rate", "2e-6", "--eval-every", "0", "--checkpoint-every", "0",
            "--no-progress", "--seed", "1"]
    if a.tiny:
        argv += ["--group-size", "2", "--frame-size", str(a.video_side), "--crop-max-frames", "4",
                 "--max-new-tokens", "8", "--subagent-max-new-tokens", "4", "--micro-batch-tokens", "2048",
                 "--dtype", "fp32", "--torch-threads", "2"]
    else:  # the frame size, 16-frame crops, 2048/512-token turns and the chunk cap follow the model
        argv += ["--group-size", "8", "--dtype", "bf16", "--reference-dtype", "bf16"]
    return argv + list(a.extra)


class ForcedCalls:
    """The trainer's policy, with every main-agent turn opened by ``calls`` crop calls (a forced prefix, as the think
    prefix is: context, never trained) and its sampling kept to the tokenizer's plain text tokens: random weights
    then play the paper's longest rollouts (see the module docstring). Everything else is the policy's own."""

    def __init__(self, policy, calls: int, window: float, duration: float, suppress: bool = True):
        self.policy, self.calls, self.window, self.duration = policy, calls, window, duration
        self.turns = 0
        if suppress:  # once per model: policies sharing it share the hook
            tok = policy.tokenizer
            vocab = policy.model.get_output_embeddings().weight.shape[0]
            banned = set(tok.all_special_ids) | set(tok.get_added_vocab().values()) | set(range(len(tok), vocab))
            core.suppress_tokens(policy.model, sorted(banned))

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def windows(self) -> list[tuple[float, float]]:
        """Crops spread over the video, shifted from one turn to the next."""
        span, turn = self.duration - self.window, self.turns
        self.turns += 1
        starts = [span * (((j + 0.37 * turn) % self.calls) / self.calls) for j in range(self.calls)]
        return [(round(s, 1), round(s + self.window, 1)) for s in starts]

    def generate(self, convs, *, max_calls=None, prefix="", **kw):
        from agents.lmm.corpus import THINK_TOOL, render_turn

        if max_calls is not None:  # a main-agent turn: the sub-agents never stop on calls
            prefix = render_turn("paravt", THINK_TOOL, self.windows())
        return self.policy.generate(convs, max_calls=max_calls, prefix=prefix, **kw)


def forced_calls(a, data: dict):
    """``load_policy`` for the trainer: the policy it loads, wrapped in ForcedCalls."""
    load = core.load_policy
    window = 2.0 * (4 if a.tiny else 16)  # every crop gets its frames at 1 fps

    def load_forced(*args, **kw):
        return ForcedCalls(load(*args, **kw), a.calls, window, data["duration"])

    return load_forced


# ============================================================================================
# one P: the trainer in its own process
# ============================================================================================
def child(spec_path: str) -> None:
    """Train with the spec's command line under ForcedCalls, writing the step records after every step; an
    out-of-memory error ends the run with its status written."""
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["result"])
    steps: list[dict] = []

    def write(status, error=""):
        out.write_text(json.dumps({"status": status, "error": error, "steps": steps}))

    def on_step(step, metrics):
        steps.append({"step": step, **metrics})
        write("running")

    args = config.parse_args(para_grpo.Args, spec["argv"])
    a = argparse.Namespace(**spec["bench"])
    core.load_policy = forced_calls(a, spec["data"])
    try:
        core.train(args, on_step=on_step)
        write("ok")
    except RuntimeError as exc:  # torch.cuda.OutOfMemoryError, or a CUDA library that failed to allocate
        if not any(x in str(exc).lower() for x in ("out of memory", "alloc_failed")):
            raise
        write("out of memory", str(exc).strip().splitlines()[0][:300])


def run_prompts(a, data: dict, prompts: int) -> dict:
    """One P: the trainer in a child process (its memory is all given back after it); its status and steps."""
    run = Path(a.work) / a.shape / "runs"
    run.mkdir(parents=True, exist_ok=True)
    spec, result = run / f"p{prompts}.spec.json", run / f"p{prompts}.result.json"
    result.unlink(missing_ok=True)
    shutil.rmtree(run / f"p{prompts}", ignore_errors=True)  # an earlier measurement's run folder
    bench = {k: getattr(a, k) for k in ("tiny", "calls")}
    spec.write_text(json.dumps({"argv": trainer_argv(a, data, prompts, f"p{prompts}"), "data": data, "bench": bench,
                                "result": str(result)}))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(spec)])
    wall = time.perf_counter() - t0
    res = json.loads(result.read_text()) if result.is_file() else {"status": "failed", "error": "", "steps": []}
    if proc.returncode and res["status"] in ("ok", "running"):
        res["status"] = f"failed (exit code {proc.returncode})"
    res["wall_seconds"] = wall
    return res


def summarise(a, data: dict, prompts: int, res: dict) -> dict:
    """A row: the means over the steps after the first (all steps when there is one)."""
    steps = res["steps"]
    row = {"prompts": prompts, "status": res["status"], "error": res.get("error", ""), "steps_run": len(steps),
           "wall_seconds": res["wall_seconds"]}
    if not steps:
        return row
    timed = steps[1:] or steps

    def mean(key):
        return float(np.mean([s.get(key, 0.0) for s in timed]))

    step_s = mean("perf/step_seconds")
    row.update(sequences=prompts * int(_flag_value(data["argv"], "--group-size")), step_seconds=step_s,
               first_step_seconds=steps[0]["perf/step_seconds"])
    for part in PARTS:
        row[f"{part}_seconds"] = mean(f"perf/{part}_seconds")
        row[f"{part}_share"] = row[f"{part}_seconds"] / step_s if step_s else 0.0
    for key in ("visual_tokens_per_rollout", "text_tokens_per_rollout", "main_context_tokens", "frame_budget",
                "tool_calls_per_rollout", "main_tokens_per_rollout", "sub_tokens_per_rollout", "forward_tokens"):
        row[key] = mean(f"train/{key}")
    row["peak_memory_gb"] = float(max(s["perf/peak_memory_gb"] for s in steps))
    update_s = row["backward_seconds"]
    row["update_tokens_per_second"] = row["forward_tokens"] / update_s if update_s else 0.0
    n = data["parameters"]["language"]
    kl = float(_flag_value(data["argv"], "--kl-coef", "0.01")) != 0
    flops = (6 + 2 * kl) * n * row["forward_tokens"]
    row["mfu"] = flops / (update_s * a.peak_tflops * 1e12) if a.peak_tflops and update_s else None
    return row


def _flag_value(argv: list[str], flag: str, default: str = "") -> str:
    return argv[len(argv) - 1 - argv[::-1].index(flag) + 1] if flag in argv else default


# ============================================================================================
# the samplers side by side
# ============================================================================================
def compare_samplers(a, data: dict) -> dict:
    """The trainer's rollout collection with each sampler in turn, round by round, on one shared model."""
    from agents.lmm.policy import TransformersPolicy
    from trainers.rollouts import Timer, collect_rollouts, derive_seed, make_env

    backends = [b.strip() for b in a.compare_samplers.split(",") if b.strip()]
    prompts = a.prompt_list[0]
    argv = trainer_argv(a, data, prompts, "samplers")
    args = config.parse_args(para_grpo.Args, argv)
    torch.set_num_threads(args.torch_threads)
    device = torch.device(a.device if a.device != "cuda" else "cuda:0")
    train_ds, _ = core.load_question_files(args)
    base = core.load_policy(data["model"], device)
    window = 2.0 * (4 if a.tiny else 16)
    policies, envs = {}, {}
    for b in backends:
        cache = b.removeprefix("hf-") if b.startswith("hf-") else "dynamic"
        kw = dict(decode_attention=args.decode_attention, fuse_projections=config.fused_kinds(args)) \
            if b in GRAPH_BACKENDS else {}
        inner = TransformersPolicy(base.model, base.tokenizer, base.image_processor, device=device,
                                   generation_cache=cache, **kw)
        inner.kept_caches.max_kept = 1  # as the trainer keeps them at this scale (--no-keep-decode-caches)
        policies[b] = ForcedCalls(inner, a.calls, window, data["duration"], suppress=not policies)
        envs[b] = [make_env(args, "train", policies[b], dataset=train_ds)
                   for _ in range(prompts * args.group_size)]
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    groups = [i // args.group_size for i in range(prompts * args.group_size)]
    rounds = []
    base.model.eval()
    for r in range(a.rounds):
        seeds = [derive_seed(args.seed, r + 1, 0, g) for g in groups]
        tokens, row = {}, {}
        for b in backends:
            policies[b].turns = 0
            timer = Timer(sync=sync)
            t0 = time.perf_counter()
            with core.autocast(args, device):
                rs = collect_rollouts(policies[b], envs[b], seeds, groups, temperature=args.temperature,
                                      top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                                      sub_max_new_tokens=args.subagent_max_new_tokens,
                                      sub_frames_per_pass=core.subagent_passes(args), think_prefix=args.think_prefix,
                                      gen_seed=derive_seed(args.seed, r + 1, 0, 999), timer=timer)
            wall = time.perf_counter() - t0
            policies[b].kept_caches.clear()  # as the trainer does at this scale
            tokens[b] = [[r_.conv.token_ids] + [c.token_ids for c in r_.sub_convs] for r_ in rs]
            row[b] = {"wall_seconds": wall, **{f"{k}_seconds": float(v) for k, v in timer.totals.items()},
                      "generated_tokens": int(sum(r_.gen_tokens for r_ in rs)),
                      "same_rollouts": sum(x == y for x, y in zip(tokens[b], tokens[backends[0]])),
                      "main_agreement": float(np.mean([_common_prefix(x[0], y[0]) / max(len(y[0]), 1)
                                                       for x, y in zip(tokens[b], tokens[backends[0]])])),
                      "rollouts": len(rs)}
        rounds.append(row)
    timed = rounds[1:] or rounds
    summary = {}
    for b in backends:
        gen = [x[b].get("generate_main_seconds", 0.0) + x[b].get("generate_sub_seconds", 0.0) for x in timed]
        summary[b] = {"generation_seconds": float(np.mean(gen)),
                      "main_seconds": float(np.mean([x[b].get("generate_main_seconds", 0.0) for x in timed])),
                      "sub_seconds": float(np.mean([x[b].get("generate_sub_seconds", 0.0) for x in timed])),
                      "first_round_seconds": rounds[0][b].get("generate_main_seconds", 0.0)
                      + rounds[0][b].get("generate_sub_seconds", 0.0),
                      "generated_tokens": float(np.mean([x[b]["generated_tokens"] for x in timed])),
                      "same_tokens_as_first": all(x[b]["same_rollouts"] == x[b]["rollouts"] for x in rounds),
                      "same_rollouts": sum(x[b]["same_rollouts"] for x in rounds),
                      "main_agreement": float(np.mean([x[b]["main_agreement"] for x in rounds])),
                      "rollouts": sum(x[b]["rollouts"] for x in rounds)}
    first = summary[backends[0]]["generation_seconds"]
    for b in backends:
        summary[b]["speedup"] = first / summary[b]["generation_seconds"] if summary[b]["generation_seconds"] else None
    for e in (e for es in envs.values() for e in es):
        e.close()
    return {"prompts": prompts, "group_size": args.group_size, "rounds": rounds, "summary": summary,
            "backends": backends}


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


# ============================================================================================
# the cold start
# ============================================================================================
def sft_measure(a, data: dict) -> dict:
    """trainers/sft.py --model on the model folder for --sft-steps steps; seconds, tokens and memory a step."""
    from trainers import sft

    out = Path(a.work) / a.shape / "sft"
    argv = ["--model", data["model"], "--out", str(out), "--device", a.device, "--runs-dir", str(out / "tb"),
            "--stage2-steps", str(a.sft_steps), "--no-progress", "--corpus-dir", str(out / "corpus")]
    if a.tiny:
        argv += ["--frame-size", str(a.video_side), "--crop-max-frames", "4", "--budgets", "4", "--stage2-tool", "4",
                 "--stage2-direct", "2", "--stage2-frame", "2", "--stage2-caption", "2", "--stage1-tool", "2",
                 "--batch-size", "2", "--threads", "2"]
    else:  # enough samples for the steps: the corpus at 448 px is 0.6 MB a frame
        argv += ["--stage2-tool", "64", "--stage2-direct", "32", "--stage2-frame", "16", "--stage2-caption", "16",
                 "--stage1-tool", "32", "--workers", str(min(8, os.cpu_count() or 1))]
    args = sft.parse_args(argv)
    shutil.rmtree(out / "cold_start", ignore_errors=True)  # measured afresh, never resumed
    for name in ("sft_args.json", "train_state.pt"):
        (out / name).unlink(missing_ok=True)
    if a.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    sft.main(args)
    wall = time.perf_counter() - t0
    record = json.loads((out / "sft_args.json").read_text())
    steps, seconds = record["stage2_steps_done"], record["stage2_seconds"]
    tokens = record.get("stage2_tokens", 0)
    return {"steps": steps, "seconds_per_step": seconds / max(steps, 1), "tokens_per_second": tokens / seconds
            if seconds else 0.0, "tokens_per_step": tokens / max(steps, 1), "wall_seconds": wall,
            "corpus_seconds": record.get("corpus_seconds", 0.0),
            "peak_memory_gb": core.peak_memory_gb(torch.device(a.device if a.device != "cuda" else "cuda:0")),
            "settings": {k: record["args"][k] for k in ("frame_size", "crop_max_frames", "budgets", "batch_size",
                                                        "batch_tokens", "stage2_lr", "gradient_checkpointing",
                                                        "freeze_vision", "amp")}}


# ============================================================================================
# the report
# ============================================================================================
def markdown(res: dict) -> str:
    m = res["meta"]
    n = m["parameters"]
    lines = [f"PARA-GRPO at real scale: {m['shape']} ({_count(n['language'])} language + {_count(n['vision'])} "
             f"vision parameters, random weights) on {m['device_name']}, {m['videos']} videos of {m['minutes']:g} min "
             f"({m['video_side']} px, {m['fps']:g} fps, H.264), K from {m['budgets']}, {m['calls']} forced calls a "
             f"turn, sampler {m['rollout_backend']}; means over the steps after the first; MFU against "
             f"{m['peak_tflops_per_device'] or 'no'} TFLOP/s a device.", ""]
    if res.get("rows"):
        lines += ["| P | sequences | status | s/step | main gen s | sub gen s | env s | update s | ref fwd s | "
                  "log-prob fwd s | backward s | optimizer s | visual tok/rollout | text tok/rollout | main context | "
                  "K | peak memory | update tok/s | MFU |", "|" + "---|" * 19]
        for r in sorted(res["rows"], key=lambda r: r["prompts"]):
            if "step_seconds" not in r:
                lines.append(f"| {r['prompts']} | | {r['status']} |" + " |" * 16)
                continue

            def part(k):
                return f"{r[f'{k}_seconds']:.1f} ({100 * r[f'{k}_share']:.0f}%)"
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
            lines.append(f"| {r['prompts']} | {r['sequences']} | {r['status']} | {r['step_seconds']:.1f} | "
                         f"{part('generate_main')} | {part('generate_sub')} | {part('env')} | {part('backward')} | "
                         f"{r['reference_forward_seconds']:.1f} | {r['logprob_forward_seconds']:.1f} | "
                         f"{r['loss_backward_seconds']:.1f} | {r['optimizer_seconds']:.1f} | "
                         f"{r['visual_tokens_per_rollout']:,.0f} | {r['text_tokens_per_rollout']:,.0f} | "
                         f"{r['main_context_tokens']:,.0f} | {r['frame_budget']:.0f} | {r['peak_memory_gb']:.1f} GB | "
                         f"{r['update_tokens_per_second']:,.0f} | {mfu} |")
    if res.get("samplers"):
        s = res["samplers"]
        lines += ["", f"Samplers in the trainer's rollouts ({s['prompts']} prompt(s) x G = {s['group_size']}, "
                      f"{len(s['rounds'])} interleaved rounds, the first a warm-up):", "",
                  "| sampler | generation s | main s | sub-agents s | first round s | speed-up | same tokens as "
                  f"{s['backends'][0]} | main-agent tokens before they part |", "|---|---|---|---|---|---|---|---|"]
        for b, x in s["summary"].items():
            speed = f"{x['speedup']:.2f}x" if x["speedup"] else "n/a"
            lines.append(f"| {b} | {x['generation_seconds']:.2f} | {x['main_seconds']:.2f} | {x['sub_seconds']:.2f} | "
                         f"{x['first_round_seconds']:.2f} | {speed} | {x['same_rollouts']} of {x['rollouts']} "
                         f"rollouts | {100 * x['main_agreement']:.0f}% |")
    if res.get("sft"):
        x = res["sft"]
        lines += ["", f"Cold start (trainers/sft.py --model): {x['steps']} steps, {x['seconds_per_step']:.2f} s a step, "
                      f"{x['tokens_per_step']:,.0f} tokens a step, {x['tokens_per_second']:,.0f} tokens/s, peak memory "
                      f"{x['peak_memory_gb']:.1f} GB (settings {x['settings']})."]
    return "\n".join(lines) + "\n"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"


def load_previous(out: Path, meta: dict) -> dict:
    """What an earlier run of the same shape and settings wrote to --out (rows of other P are kept)."""
    path = out / "real_scale.json"
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return {}
    same = all(old.get("meta", {}).get(k) == meta[k] for k in ("shape", "budgets", "calls", "rollout_backend",
                                                                "minutes", "video_side", "steps", "extra"))
    return old if same else {}


def main(argv=None):
    a = parse(argv)
    if a.child:
        return child(a.child)
    torch.set_num_threads(2 if a.tiny else torch.get_num_threads())
    data = prepare(a)
    data["argv"] = trainer_argv(a, data, 1, "p1")
    cuda = a.device.startswith("cuda")
    meta = {"shape": a.shape, "parameters": data["parameters"], "device": a.device,
            "device_name": torch.cuda.get_device_name(0) if cuda else "CPU", "budgets": a.budgets, "calls": a.calls,
            "rollout_backend": a.rollout_backend, "videos": a.videos, "minutes": a.minutes, "video_side": a.video_side,
            "fps": a.fps, "steps": a.steps, "extra": list(a.extra), "peak_tflops_per_device": a.peak_tflops,
            "build_seconds": data["build_seconds"], "export_seconds": data["export_seconds"],
            "torch": torch.__version__, "command": " ".join(sys.argv),
            "date": time.strftime("%Y-%m-%d")}
    out = Path(a.out)
    res = load_previous(out, meta)
    res["meta"] = meta
    if a.compare_samplers:
        res["samplers"] = compare_samplers(a, data)
    elif a.sft:
        res["sft"] = sft_measure(a, data)
    else:
        rows = {r["prompts"]: r for r in res.get("rows", [])}
        for prompts in a.prompt_list:
            got = run_prompts(a, data, prompts)
            rows[prompts] = summarise(a, data, prompts, got)
            res["rows"] = [rows[k] for k in sorted(rows)]
            write_report(out / "real_scale", res, markdown(res))  # after every P: a later failure keeps it
            if got["status"] != "ok":
                print(f"P = {prompts}: {got['status']} {got.get('error', '')}; the search ends here", file=sys.stderr)
                break
    write_report(out / "real_scale", res, markdown(res))
    return res


if __name__ == "__main__":
    main()
