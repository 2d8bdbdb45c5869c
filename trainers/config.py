"""The trainers' configuration: every knob of the GRPO-family trainers with its help text, TRL-style (a config
dataclass beside its trainer, trainers/core.py).

    GRPOArgs             the knobs; a script subclasses it to change defaults (trainers/para_grpo.py)
    arg                  a dataclass field carrying its --help text, choices, repeatability
    parse_args           a dataclass -> argparse command line, checked by validate_args
    validate_args        stops bad settings before any work (train() calls it too)
    resolve_reward_fns   --reward-fn's entries as functions

    from trainers.config import GRPOArgs, parse_args
    args = parse_args(GRPOArgs, ["--total-steps", "20"])    # or GRPOArgs(total_steps=20)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from agents.lmm.corpus import WorldConfig
from agents.lmm.graph_decode import DECODE_ATTENTION, FUSABLE
from paravt_env.config import DEFAULTS as ENV_DEFAULTS
from paravt_env.config import GATING_BUDGETS
from trainers import run_state
from trainers.algos import ANCHOR_MODES, NORM_MODES, anchor_modes_help
from trainers.rollouts import subagent_passes
from trainers.run_state import RunStateError

LR_SCHEDULES = ("constant", "linear", "cosine")


# ============================================================================================
# arguments
# ============================================================================================
def arg(default, help: str, choices: Sequence | None = None, repeat: bool = False):
    """A dataclass field carrying its --help text (and choices; `repeat`: the flag may be given several
    times, the values joined with commas)."""
    return field(default=default, metadata={"help": help, "choices": choices, "repeat": repeat})


@dataclass
class GRPOArgs:
    # run
    exp_name: str = arg("grpo", "experiment name; the run lands in runs/<run name>/")
    run_name: str = arg("", "run name (default <exp_name>__s<seed>, a time suffix is added if that folder exists and "
                            "--resume is off)")
    runs_dir: str = arg("runs", "root folder of TensorBoard runs and checkpoints")
    seed: int = arg(1, "seed of prompts, sampling and the optimizer; same seed -> same run")
    model: str = arg("", "local checkpoint directory (tiny or any Qwen-VL style); default: "
                         "agents.lmm.default.default_checkpoint(--prior)")
    prior: str = arg("strong", "tool prior of the default checkpoint (when --model is empty)", ("strong", "weak"))
    device: str = arg("auto", "auto (cuda when available) | cpu | cuda | cuda:N")
    dtype: str = arg("fp32", "compute precision: fp32, or bf16 (weights and optimizer stay fp32; rollouts, "
                             "log-prob and reference forwards run under bf16 autocast, on CUDA or CPU)", ("fp32", "bf16"))
    gradient_checkpointing: bool = arg(False, "recompute the language model's activations in the backward pass "
                                              "(less memory, more time; same gradients)")
    torch_threads: int = arg(1, "CPU threads for torch per process (1 is fastest for the tiny model's small ops)")
    rollout_backend: str = arg("hf", "who samples the rollouts: hf (Hugging Face generate on the trained model), "
                                     "hf-static (the same with a static KV cache: compiled decoding on a GPU), "
                                     "hf-graph (a static KV cache and the decode step replayed as a CUDA graph on a "
                                     "GPU, agents/lmm/graph_decode.py), hf-graph-compiled (the same around the "
                                     "torch.compile'd decode step: fastest after ~20 s of compiling; see "
                                     "benchmarks/speed_generation_scale.py) or "
                                     "vllm (a vLLM engine in the same process, weights synced after every update; "
                                     "single process only; see agents/lmm/vllm_policy.py)", ("hf", "hf-static", "hf-graph", "hf-graph-compiled", "vllm"))
    decode_attention: str = arg("sdpa", "with --rollout-backend hf-graph*: the decode step's attention kernel; triton "
                                        "(agents/lmm/cascade_kernel.py, needs CUDA and triton) reads each group's shared "
                                        "prompt once for its G rollouts", DECODE_ATTENTION)
    fuse_projections: str = arg("", "with --rollout-backend hf-graph*: comma list of attention (one query/key/value "
                                    "product per layer) and mlp (one gate/up product) computed as one during decode "
                                    "steps, from a kept copy of those weights (at 7B bf16: 0.9 / 7.6 GB)")
    keep_decode_caches: bool = arg(True, "the hf-static and hf-graph* samplers keep up to 4 KV caches (and their "
                                         "recorded graphs) from one call and step to the next; "
                                         "--no-keep-decode-caches keeps only the latest call's and frees it before "
                                         "every update, whose activations then get that memory back (each new "
                                         "shape records its graph again: about a second at 3B)")
    reference_dtype: str = arg("fp32", "weights of the frozen reference model: fp32, or bf16 with --dtype bf16 (its "
                                       "forward runs under bf16 autocast either way; half the memory: 7.5 GB less "
                                       "at 3B)", ("fp32", "bf16"))
    fsdp: bool = arg(False, "shard the policy, the reference and the optimizer state over the processes with FSDP2 "
                            "(torchrun; gloo on CPU, nccl on GPUs) instead of DDP; checkpoints are saved sharded "
                            "(torch.distributed.checkpoint), final_model as one plain folder; rollouts gather the "
                            "whole model (see trainers/distributed.py)")
    # schedule
    total_steps: int = arg(40, "GRPO steps")
    prompts_per_step: int = arg(2, "prompts per step per process (paper: 7)")
    group_size: int = arg(8, "G, rollouts per prompt, all from one env state (paper: 8)")
    # sampling
    temperature: float = arg(0.7, "training sampling temperature (paper: 0.7)")
    eval_temperature: float = arg(0.6, "evaluation temperature (paper: 0.6); 0 = greedy")
    eval_subagent_temperature: float = arg(-1.0, "temperature of the sub-agents' summaries in evaluation; "
                                                 "negative: --eval-temperature, as the main agent (0 = greedy)")
    top_p: float = arg(1.0, "nucleus sampling")
    max_new_tokens: int = arg(192, "new tokens per main-agent turn (paper: 2048); 192 holds the shipped strong "
                                   "model's widest turn, a think line and five crop calls (about 170 tokens)")
    subagent_max_new_tokens: int = arg(32, "new tokens per sub-agent answer (paper cuts tool responses at 512)")
    subagent_frames_per_pass: str = arg("auto", "the policy's sub-agent looks at a crop in parts of at most this "
                                                "many frames and merges their captions (agents.lmm.Subagent); 0: one "
                                                "pass over the whole crop, as the paper's sub-agent; auto: 4 for this "
                                                "project's tiny builds, one pass for any other model")
    # data and environment
    source: str = arg("", "JSONL / parquet question file to train on (see the README's question-file format, "
                          "release rows too); default: the synthetic world's train split")
    eval_source: str = arg("", "question file to evaluate on; default: --source's file (its first "
                               "--eval-episodes questions), else the synthetic validation split")
    video_root: str = arg("", "folder that relative video paths of --source / --eval-source resolve against "
                              "(default: each question file's folder)")
    strict: bool = arg(False, "a question row whose video file is missing stops the run (default: such rows are "
                              "skipped with one warning)")
    max_bad_video_fraction: float = arg(0.05, "an episode whose video does not decode (damaged mid-file, a folder "
                                              "or FIFO in its place) is skipped, counted in TensorBoard "
                                              "(data/videos_skipped) and its video named once; more than this "
                                              "share of the run's draws so far (counted as at least 100; a "
                                              "--resume counts on from its checkpoint) failing stops the run")
    allow_videos_outside_root: bool = arg(False, "read videos anywhere on disk: by default every video path of a "
                                                  "question file (relative, file://, absolute, symlinked) must "
                                                  "resolve inside --video-root (default: the question file's "
                                                  "folder), and a row pointing elsewhere stops the run naming its "
                                                  "file and line")
    dispatch: str = arg(ENV_DEFAULTS.dispatch, "parallel: several crops per turn go to sub-agents; sequential: one "
                                               "per turn", ("parallel", "sequential"))
    max_turns: int = arg(ENV_DEFAULTS.max_turns, "assistant turns per episode (paper: 3)")
    max_calls_per_turn: int = arg(ENV_DEFAULTS.max_calls_per_turn, "parallel crop calls per turn (paper: 5)")
    frame_budget: int = arg(ENV_DEFAULTS.frame_budget, "K overview frames when nFrames gating is off", GATING_BUDGETS)
    frame_size: int = arg(WorldConfig.frame_size[0], "frame height = width in pixels (56 = 4 visual tokens per frame, "
                                                     "what the tiny model was pretrained on; 28 gives 1 token, too few "
                                                     "to see objects)")
    crop_max_frames: int = arg(WorldConfig.crop_max_frames, "frames per crop (1 fps)")
    tools: bool = arg(ENV_DEFAULTS.tools, "advertise the crop tool; --no-tools is plain single-turn GRPO on the "
                                          "overview frames alone: no tool in the prompt and one turn per episode "
                                          "(--max-turns becomes 1; a call written anyway is never run)")
    world_seed: int = arg(ENV_DEFAULTS.world_seed, "synthetic world seed")
    dataset_size: int = arg(ENV_DEFAULTS.dataset_size, "episodes per split")
    # PARA-GRPO knobs
    nframes_gating: bool = arg(ENV_DEFAULTS.nframes_gating, "per prompt K ~ Uniform(--gating-budgets), a function of "
                                                            "the prompt's reset seed")
    gating_budgets: str = arg(",".join(map(str, GATING_BUDGETS)), "comma list of K values nFrames gating draws from, "
                              "a subset of 4,8,16,32,64 (the paper draws from all five; so were the shipped cold "
                              "starts trained)")
    think_prefix: bool = arg(False, "prefill '<think>\\n' at the start of every assistant turn")
    answer_suffix: bool = arg(False, "answer-suffix format weights (0.2/0.3/0.2) instead of default (0.3/0.2/0.1)")
    anchor_lambda: float = arg(0.0, "lambda_anchor: weight of the exploration anchor (0 = off)")
    anchor_mode: str = arg("bonus", anchor_modes_help(), ANCHOR_MODES)  # choices: trainers.algos's registry
    penalty_gamma: float = arg(0.0, "penalty for a <think> never closed (scaled by lambda; bonus mode only)")
    tool_reward: bool = arg(True, "R_tool term of the reward (the released code adds it in every configuration, "
                                  "vanilla GRPO included; --no-tool-reward is the 'minus R_tool' ablation)")
    format_weight: float = arg(1.0, "w_fmt")
    scoring: str = arg(ENV_DEFAULTS.scoring, "what the reward reads: trajectory (the whole multi-turn trajectory, "
                                             "prefix and tool responses included) or generated (the released code's "
                                             "reading, to measure its defects: the agent's own tokens only, so no "
                                             "prefilled <think> and no tool response)", ("trajectory", "generated"))
    reward_fn: str = arg("", "extra reward terms: module:function or path/to/file.py:function (repeat the flag or "
                             "give a comma list); f(trajectory, info) returns a number or a dict of named numbers, "
                             "added to the reward before advantages and logged as train/reward_components/<name> "
                             "(see paravt_env/reward_terms.py)", repeat=True)
    # GRPO
    learning_rate: float = arg(1e-4, "AdamW peak learning rate (paper: 2e-6 for an 8B model; the tiny model takes "
                                     "more); 0 skips the update: the steps then measure the starting policy")
    lr_warmup_steps: int = arg(0, "steps of linear warm-up: step s <= N uses s/N of the learning rate")
    lr_schedule: str = arg("constant", "after warm-up: constant (the paper), linear or cosine decay towards 0 over "
                                       "the remaining steps (the last step keeps a small positive rate)",
                           LR_SCHEDULES)
    weight_decay: float = arg(0.01, "AdamW weight decay (paper: 0.01)")
    max_grad_norm: float = arg(1.0, "gradient clipping (paper: 1.0)")
    clip_eps: float = arg(0.2, "PPO clip epsilon (paper: 0.2)")
    kl_coef: float = arg(0.01, "k3 KL to the frozen reference (paper: 0.01); 0 skips the reference model")
    reward_scale: float = arg(1.0, "r' = scale * r + bias before normalisation (paper: 10; a no-op with std "
                                   "normalisation, matters for --group-norm mean)")
    reward_bias: float = arg(0.0, "see --reward-scale (paper: -0.2)")
    group_norm: str = arg("std", "per-group advantage: std = (r - mean)/std, mean = r - mean (Dr.GRPO), none",
                          NORM_MODES)
    batch_norm: str = arg("std", "then over the whole batch: std, mean, or none (Dr.GRPO: mean or none)", NORM_MODES)
    update_epochs: int = arg(1, "optimizer steps over each batch of rollouts. With 1 (the paper's recipe: one "
                                "update per batch) the policy being updated is the one that sampled, so the PPO ratio "
                                "is 1 up to numerics and train/clip_fraction stays ~0; from the 2nd pass the ratio "
                                "moves and train/clip_fraction (then the mean over passes 2..N) measures the clip")
    micro_batch_size: int = arg(16, "sequences per forward/backward chunk")
    micro_batch_tokens: int = arg(0, "at most this many rows x longest row per chunk (a longer sequence goes alone); "
                                     "0 = auto: 2048 on a CPU, no cap on a GPU. Why: on a CPU, attention over a "
                                     "padded batch takes its slow masked path; a 16-rollout chunk of 340-1483 tokens "
                                     "took 4.4x as long as its rows one at a time")
    freeze_vision: bool = arg(True, "freeze the vision tower (RL adapts the language model; no backward through "
                                    "the image encoder, the bulk of CPU step time)")
    subagent: str = arg("policy", "who summarises each crop: policy (the model itself, as in the paper) or oracle "
                        "(the world's truthful caption of the crop's frames: for models too small to see needles)",
                        choices=("policy", "oracle"))
    train_subagents: bool = arg(True, "sub-agent turns share the episode reward and are trained (the released code "
                                      "leaves them out of the loss by default; the paper trains them)")
    # logging / eval / checkpoints
    eval_every: int = arg(10, "evaluate on the validation split every N steps (and before/after training); 0 = "
                              "never (no evaluation environments are built)")
    eval_episodes: int = arg(24, "validation episodes per evaluation (split across processes)")
    eval_first_episode: int = arg(0, "index of the first evaluation episode: episodes F..F+N-1 are evaluated (a "
                                     "sweep can choose its settings on episodes the reported evaluation never sees)")
    eval_without_tools: bool = arg(False, "also evaluate every time with no tool advertised (eval/no_tools/*: "
                                          "accuracy without the sub-agent, the paper's 'w/o sub' columns)")
    eval_samples: int = arg(4, "finished evaluation rollouts kept per evaluation for people to read: "
                               "RUN_DIR/samples/step_N/ (python -m trainers.view RUN_DIR) and TensorBoard eval_samples/*; "
                               "0 = none")
    checkpoint_every: int = arg(10, "save model + optimizer + RNG every N steps and at the end (--resume needs "
                                    "them); 0 = none (final_model is still written)")
    resume: bool = arg(False, "continue runs/<run name>/ from its latest checkpoint")
    progress: bool = arg(True, "progress bar (with evaluation notices) and a closing summary")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help, unless the help already says it or there is none to show."""

    def _get_help_string(self, action):
        if action.default in (None, "") or "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


# A model that is not one of this project's tiny builds gets the paper's settings unless a flag says otherwise:
# crops of up to 16 frames, 2048 new tokens a turn, sub-agent answers of up to 512 tokens, one sub-agent pass per
# crop, and frames as large as its processor takes, up to FRAME_SIDE_CAP (64 such frames are 16k visual tokens
# for Qwen2.5-VL).
REAL_MODEL_SETTINGS = {"crop_max_frames": (16, "the paper's crops hold up to 16 frames"),
                       "max_new_tokens": (2048, "the paper's turns are up to 2048 new tokens"),
                       "subagent_max_new_tokens": (512, "the paper cuts tool responses at 512 tokens"),
                       "subagent_frames_per_pass": ("0", "the paper's sub-agent looks at a crop in one pass"),
                       "micro_batch_tokens": (32768, "rollouts of 10-40k tokens: at most 32k padded tokens in a "
                                                     "forward/backward chunk, so a chunk's activations stay bounded"),
                       "keep_decode_caches": (False, "the samplers' KV caches of such rollouts take GBs that the "
                                                     "update needs")}
FRAME_SIDE_CAP = 448


def processor_frame_side(folder: Path) -> tuple[int, str] | None:
    """The largest square frame side (a multiple of the processor's patch x merge size, at most FRAME_SIDE_CAP)
    whose pixels the model's video (else image) processor takes without shrinking it, and why; None without one."""
    for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            cfg = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        size = cfg.get("size") if isinstance(cfg, dict) else None
        if not isinstance(cfg, dict) or not isinstance(size or {}, dict):
            raise ValueError(f"{path}: not an image processor's settings (expected an object whose size is one)")
        max_pixels = cfg.get("max_pixels") or (size or {}).get("longest_edge")
        numbers = (cfg.get("patch_size", 14), cfg.get("merge_size", 2), max_pixels or 1)
        if not all(type(n) in (int, float) and 1 <= n < 2**40 for n in numbers):
            raise ValueError(f"{path}: patch_size, merge_size and max_pixels (or size.longest_edge) must be "
                             f"positive numbers, got {', '.join(str(n)[:20] for n in numbers)}")
        unit = int(numbers[0]) * int(numbers[1])
        if not max_pixels:
            continue
        side = max(unit, min(FRAME_SIDE_CAP, int(int(max_pixels) ** 0.5) // unit * unit))
        return side, f"{name} takes up to {int(max_pixels)} pixels a frame in {unit} px blocks (capped at " \
                     f"{FRAME_SIDE_CAP})"
    return None


def chosen_settings(model: str | Path, table: dict, given) -> dict[str, tuple]:
    """`table` (name -> (value, why)) with the frame side `model`'s processor takes, less the fields `given`."""
    settings = dict(table)
    frame = processor_frame_side(Path(model))
    if frame is not None:
        settings["frame_size"] = frame
    return {k: v for k, v in settings.items() if k not in given}


def model_settings(model: str, given: set[str]) -> tuple[dict, list[str]]:
    """The settings a --model that is not one of this project's tiny builds changes, for every field not `given`,
    and one line each saying why. A tiny build (its sft_args.json names a frame size) keeps the defaults."""
    if not model or not Path(model).is_dir():
        return {}, []
    from agents.lmm.tiny_qwen import is_tiny_build

    if is_tiny_build(model):
        return {}, []
    settings = chosen_settings(model, REAL_MODEL_SETTINGS, given)
    notes = [f"{flag_text(k, value)}: {why} (a model other than this project's tiny builds)"
             for k, (value, why) in settings.items()]
    return {k: value for k, (value, _) in settings.items()}, notes


def flag_text(name: str, value) -> str:
    """How a command line sets `name` to `value`: --x 3, --x / --no-x for a boolean."""
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"


def parse_args(cls, argv: Sequence[str] | None = None, description: str = ""):
    """Build an argparse parser from a dataclass (help texts from the field metadata, looked up
    through the base classes so a script can override a default with a plain annotation)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=_HelpFormatter)
    add_config_flag(parser)
    meta = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            for f in dataclasses.fields(klass):
                if f.metadata:
                    meta[f.name] = f.metadata
    for f in dataclasses.fields(cls):
        m = meta.get(f.name, {})
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        kw: dict[str, Any] = dict(default=default, help=m.get("help", ""))
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
            continue
        if m.get("repeat"):
            parser.add_argument(flag, action="append", type=type(default), metavar=f.name.upper(),
                                default=argparse.SUPPRESS, help=kw["help"] + " (default: none)")
            continue
        if m.get("choices"):
            kw["choices"] = list(m["choices"])
        parser.add_argument(flag, type=type(default), **kw)
    values, argv = read_command_line(parser, cls, argv)
    for f in dataclasses.fields(cls):
        if meta.get(f.name, {}).get("repeat"):
            given = values.get(f.name)
            values[f.name] = ",".join(given) if given is not None else f.default
    args = cls(**values)
    try:
        validate_args(args)
    except RunStateError as exc:  # a path problem: one line, not the whole usage
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except ValueError as exc:
        parser.error(str(exc))
    try:  # once --model is known to be sound
        changes, notes = model_settings(args.model, given_dests(parser, argv))
    except ValueError as exc:  # a settings file of the folder that cannot be read: one line naming it
        parser.exit(2, f"{parser.prog}: error: --model {args.model}: {exc}\n")
    for line in notes:
        print(f"settings: {line}", file=sys.stderr)
    args = dataclasses.replace(args, **changes)
    return args


def validate_args(args) -> None:
    """Stop before any work on settings that cannot run."""
    run_state.check_name("--exp-name", args.exp_name)
    if args.run_name:
        run_state.check_name("--run-name", args.run_name)
    problem = run_state.model_dir_problem(args.model) if args.model else None
    if problem:
        raise RunStateError(f"--model {args.model}: {problem}")
    if args.group_size < 2:
        raise ValueError("--group-size must be >= 2 (GRPO compares rollouts within a group)")
    for name in ("total_steps", "prompts_per_step", "max_new_tokens", "subagent_max_new_tokens", "max_turns",
                 "max_calls_per_turn", "frame_size", "crop_max_frames", "micro_batch_size", "update_epochs"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.eval_samples < 0:
        raise ValueError("--eval-samples must be >= 0")
    subagent_passes(args)  # a bad --subagent-frames-per-pass is refused here, before anything loads
    if not args.learning_rate >= 0:
        raise ValueError("--learning-rate must be >= 0 (0 measures the starting policy without updating it)")
    if args.temperature <= 0:
        raise ValueError("--temperature must be > 0 (GRPO samples)")
    try:
        budgets = [int(k) for k in str(args.gating_budgets).split(",") if k.strip()]
    except ValueError:
        budgets = []
    if not budgets or any(k not in GATING_BUDGETS for k in budgets):
        raise ValueError(f"--gating-budgets must be a comma list from {GATING_BUDGETS}, got {args.gating_budgets!r}")
    unknown = set(fused_kinds(args)) - set(FUSABLE)
    if unknown:
        raise ValueError(f"--fuse-projections: comma list of {', '.join(FUSABLE)}, got {args.fuse_projections!r}")
    if (args.decode_attention != "sdpa" or fused_kinds(args)) and not args.rollout_backend.startswith("hf-graph"):
        raise ValueError("--decode-attention and --fuse-projections choose what a graph sampler's decode step runs: "
                         f"use --rollout-backend hf-graph or hf-graph-compiled, not {args.rollout_backend}")
    for name in ("lr_warmup_steps", "eval_every", "eval_first_episode", "checkpoint_every", "micro_batch_tokens"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
    if args.eval_every and not (args.eval_source or args.source) and \
            args.eval_first_episode + args.eval_episodes > args.dataset_size:
        raise ValueError(f"--eval-first-episode {args.eval_first_episode} + --eval-episodes {args.eval_episodes} is "
                         f"more than the {args.dataset_size} episodes of the validation split (--dataset-size)")
    if args.reference_dtype == "bf16" and args.dtype != "bf16":
        raise ValueError("--reference-dtype bf16 needs --dtype bf16 (its forward runs under bf16 autocast)")
    for name, allowed in (("dtype", ("fp32", "bf16")), ("reference_dtype", ("fp32", "bf16")),
                          ("lr_schedule", LR_SCHEDULES), ("anchor_mode", ANCHOR_MODES)):
        if getattr(args, name) not in allowed:
            raise ValueError(f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}, got {getattr(args, name)!r}")
    for name in ("source", "eval_source"):
        path = getattr(args, name)
        if path and not os.path.isfile(path):
            raise ValueError(f"--{name.replace('_', '-')} {path}: no such file (a JSONL or parquet question file)")
    if not 0.0 <= args.max_bad_video_fraction <= 1.0:
        raise ValueError(f"--max-bad-video-fraction must be in [0, 1], got {args.max_bad_video_fraction}")
    if args.video_root and not os.path.isdir(args.video_root):
        raise ValueError(f"--video-root {args.video_root}: no such folder")
    resolve_reward_fns(args.reward_fn)  # an entry that does not import stops here, named
    if args.dispatch == "sequential" and args.max_calls_per_turn != 1:
        args.max_calls_per_turn = 1  # the env enforces it anyway; keep the prompt honest
    if not args.tools:
        args.max_turns = 1  # nothing is advertised, so a second turn could only bring an error message


def resolve_reward_fns(spec: str) -> list[Callable]:
    """--reward-fn's entries (comma separated; module:function or path/to/file.py:function, a module
    importable from the current folder too) as functions; a ValueError names the entry that fails."""
    fns = []
    for entry in (e.strip() for e in str(spec or "").split(",")):
        if not entry:
            continue
        where, _, attr = entry.rpartition(":")
        if not where or not attr:
            raise ValueError(f"--reward-fn {entry!r}: expected module:function or path/to/file.py:function")
        try:
            module = _import_module_or_file(where)
        except Exception as exc:  # whatever importing the user's module raised, named with the entry
            raise ValueError(f"--reward-fn {entry!r}: cannot import {where!r} ({type(exc).__name__}: {exc})") from None
        fn = module
        for part in attr.split("."):
            fn = getattr(fn, part, None)
        if not callable(fn):
            raise ValueError(f"--reward-fn {entry!r}: {where!r} has no function {attr!r}")
        fns.append(fn)
    return fns


def _import_module_or_file(where: str):
    import hashlib
    import importlib
    import importlib.machinery
    import importlib.util

    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such file {where}")
        name = f"paravt_reward_fn_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
        return sys.modules[name]
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        top = where.partition(".")[0]
        # `python trainers/x.py` does not put the current folder on the path: look for the module there too,
        # after everything on the path (as if the folder came last), without changing sys.path
        spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()]) if exc.name == top else None
        if spec is None:
            raise
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        if spec.loader is not None:
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[top]
        raise
    return importlib.import_module(where)


def fused_kinds(args) -> tuple[str, ...]:
    return tuple(k.strip() for k in args.fuse_projections.split(",") if k.strip())


# ============================================================================================
# config files
# ============================================================================================
def load_config(path: str | Path) -> dict:
    """The mapping in a .yaml / .yml / .json file (ValueError naming the file when it holds anything else)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - any parse error becomes one line naming the file
        raise ValueError(f"--config {path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'} ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values, got {type(data).__name__}")
    return data


def flag_name(flag: str) -> str:
    """'--no-think-prefix' / '--think-prefix=x' -> 'think_prefix'; '' for a value."""
    if not flag.startswith("--"):
        return ""
    return flag[2:].split("=", 1)[0].removeprefix("no-").replace("-", "_")


def named_flags(flags) -> set[str]:
    """The flag names a command line gives (see flag_name)."""
    return {n for n in map(flag_name, flags) if n}


# Flags that name code to run. A config file may come from elsewhere (a run folder's args.json, a shared sweep
# file), and a file is data: such a flag is taken from the command line only.
CODE_FLAGS = ("reward_fn",)


def config_flags(mapping: dict, known: set[str] | None = None, source: str = "config") -> list[str]:
    """``{"total_steps": 40, "think_prefix": False, "seeds": [1, 2]}`` -> ``--total-steps 40 --no-think-prefix
    --seeds 1,2``. With ``known`` (flag names with underscores), an unknown key is a ValueError naming it; a key
    of ``CODE_FLAGS`` with a value is a ValueError too."""
    if known is not None:
        unknown = sorted(k for k in mapping if k.replace("-", "_") not in known)
        if unknown:
            raise ValueError(f"{source}: unknown keys {', '.join(unknown)}")
    code = sorted(k for k, v in mapping.items() if k.replace("-", "_") in CODE_FLAGS and v not in (None, "", []))
    if code:
        raise ValueError(f"{source}: {', '.join(code)} names code to run, which a file may not set; give "
                         f"{', '.join('--' + k.replace('_', '-') for k in code)} on the command line")
    out: list[str] = []
    for key, value in mapping.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, dict):
            raise ValueError(f"{source}: {key} holds a mapping; flags take numbers, text, true/false or lists")
        else:
            out += [flag, str(value)]
    return out


def config_argv(argv, known: set[str]) -> list[str]:
    """``argv`` with the flags of its ``--config FILE`` (if any) put in front, so the command line's own flags win.
    ``known`` are the flag names (with underscores) the file may set; anything else is a ValueError."""
    argv, path, rest = list(argv), "", []
    i = 0
    while i < len(argv):  # --config FILE / --config=FILE, the last one given (a plain scan: no second parser)
        if argv[i] == "--config" and i + 1 < len(argv):
            path, i = argv[i + 1], i + 2
            continue
        if argv[i].startswith("--config="):
            path = argv[i].split("=", 1)[1]
        else:
            rest.append(argv[i])
        i += 1
    if not path:
        return argv
    data = load_config(path)
    if isinstance(data.get("args"), dict) and "args" not in known:  # a build record (sft_args.json): its arguments
        data = data["args"]
    # a flag on the command line replaces the file's (a repeatable flag too, rather than adding to it)
    given = named_flags(rest)
    data = {k: v for k, v in data.items() if k.replace("-", "_") not in given}
    return config_flags(data, known, source=f"--config {path}") + rest


def given_dests(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The destinations a command line sets explicitly (a flag given with its default value counts as given)."""
    unset = object()
    saved = [(a, a.default) for a in parser._actions]
    try:
        for a in parser._actions:  # an appending flag builds on its default, so it starts from None instead
            a.default = None if isinstance(a, (argparse._AppendAction, argparse._CountAction)) else unset
        ns, _ = parser.parse_known_args(list(argv))
    finally:
        for a, default in saved:
            a.default = default
    return {k for k, v in vars(ns).items() if v is not unset and v is not None}


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="", help="a YAML or JSON file of flag names and values, e.g. a run's "
                                                     "args.json (flags on the command line win)")


def read_command_line(parser: argparse.ArgumentParser, cls, argv) -> tuple[dict, list[str]]:
    """Parse ``argv`` (default: sys.argv[1:]) for the dataclass ``cls`` with its ``--config`` file's flags in front;
    returns the values (without ``config``) and the command line as parsed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = config_argv(argv, {f.name for f in dataclasses.fields(cls)})
    except ValueError as exc:
        parser.error(str(exc))
    values = vars(parser.parse_args(argv))
    values.pop("config", None)
    return values, argv
