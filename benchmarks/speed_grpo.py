"""Speed of a GRPO step and of parallel vs sequential dispatch, on one checkpoint.

    python benchmarks/speed_grpo.py                         # default strong-prior checkpoint, CPU
    python benchmarks/speed_grpo.py --device cuda --steps 5
    python benchmarks/speed_grpo.py --model path/to/checkpoint --group-size 8

Part 1 runs `--steps` PARA-GRPO steps at trainers/para_grpo.py's defaults (checkpointing and
evaluation off) and reports seconds per step, generated tokens per second, and where the time
goes: main-agent generation, sub-agent generation, env + reward (reset, parsing, cropping,
scoring, prompt rendering), and the update (log-prob forwards of policy and reference,
backward, optimizer). The first step is reported apart (warm-up) and excluded from the means.
The same steps then run again with every update chunk one padded batch of up to --micro-batch-size
rows (`--micro-batch-tokens` unbounded, the GPU setting): the update seconds side by side show what
the CPU's token cap on chunks buys (same seeds, so the first step's rollouts are the same).

Part 2 plays the same validation episodes (same reset seeds, hence same K) with the same
checkpoint under parallel and under sequential dispatch, the policy as its own sub-agent, all
episodes batched, and reports wall time, tokens per episode (main-agent and sub-agent generated
tokens, final context length), turns, executed and emitted calls, the share of turns that ran
two or more calls, accuracy and the common format reward.

Writes <--out>.json and <--out>.md (default: runs/benchmarks/speed_grpo.*).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace

if __name__ == "__main__" and not __package__:  # python benchmarks/speed_grpo.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.report import write_report  # noqa: E402
from trainers import config, core, para_grpo  # noqa: E402

PARTS = ("generate_main", "generate_sub", "env", "backward")


def grpo_steps(model: str, device: str, steps: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--model", model, "--device", device, "--runs-dir", tmp, "--total-steps", str(steps),
                "--eval-every", "0", "--checkpoint-every", "0", "--no-progress", *extra]
        hist = para_grpo.main(argv)
    rows = [{"step": h["step"], "seconds": h["perf/step_seconds"], "tokens_per_second": h["perf/tokens_per_second"],
             **{p: h.get(f"perf/{p}_seconds", 0.0) for p in PARTS},
             "tool_calls_per_rollout": h["train/tool_calls_per_rollout"],
             "main_tokens_per_rollout": h["train/main_tokens_per_rollout"],
             "sub_tokens_per_rollout": h["train/sub_tokens_per_rollout"]} for h in hist]
    steady = rows[1:] or rows
    mean = {k: float(np.mean([r[k] for r in steady])) for k in rows[0] if k != "step"}
    return {"steps": rows, "mean_after_first": mean, "first_step_seconds": rows[0]["seconds"]}


def dispatch_compare(model: str, device: str, episodes: int, base: config.GRPOArgs, seed: int = 10_000) -> dict:
    torch.set_num_threads(base.torch_threads)
    policy = core.load_policy(model, torch.device(device))
    policy.model.eval()
    out = {}
    for dispatch in ("parallel", "sequential"):
        args = replace(base, dispatch=dispatch, max_calls_per_turn=1 if dispatch == "sequential" else base.max_calls_per_turn)
        envs = [core.make_env(args, "validation", policy) for _ in range(episodes)]
        t0 = time.perf_counter()
        timer = core.Timer()
        rs = core.collect_rollouts(policy, envs, [seed + i for i in range(episodes)], list(range(episodes)),
                                   temperature=args.eval_temperature, top_p=1.0, max_new_tokens=args.max_new_tokens,
                                   sub_max_new_tokens=args.subagent_max_new_tokens, think_prefix=args.think_prefix,
                                   gen_seed=seed, timer=timer,
                                   reset_options=[{"episode_index": i} for i in range(episodes)])
        wall = time.perf_counter() - t0
        for e in envs:
            e.close()
        stats = core.episode_stats([core.episode_record(r) for r in rs])
        out[dispatch] = {
            "episodes": episodes, "wall_seconds": wall, "seconds_per_episode": wall / episodes,
            "main_tokens_per_episode": float(np.mean([r.main_tokens for r in rs])),
            "sub_tokens_per_episode": float(np.mean([r.sub_tokens for r in rs])),
            "context_tokens_per_episode": float(np.mean([len(r.conv) for r in rs])),
            "turns_per_episode": float(np.mean([r.info.get("turn", 0) for r in rs])),
            "tool_calls_per_episode": stats["tool_calls_per_rollout"],
            "tool_calls_emitted_per_episode": stats["tool_calls_emitted_per_rollout"],
            "parallel_turn_fraction": stats["parallel_turn_fraction"],
            "accuracy": stats["accuracy"], "format_reward_common": stats["format_reward_common"],
            "time": {k: float(v) for k, v in timer.totals.items()},
        }
    return out


UNCAPPED = ["--micro-batch-tokens", str(10**9)]


def markdown(res: dict) -> str:
    m = res["grpo"]["mean_after_first"]
    lines = [f"**GRPO speed** ({res['device']}, {res['threads']} torch thread(s), model `{res['model']}`)", "",
             f"PARA-GRPO defaults: G = {res['settings']['group_size']}, {res['settings']['prompts_per_step']} prompt(s)/step, "
             f"{res['settings']['max_new_tokens']} new tokens/turn, {res['settings']['subagent_max_new_tokens']} per sub-agent, "
             f"frames {res['settings']['frame_size']} px, gating {res['settings']['nframes_gating']}.", "",
             "| step | seconds | tokens/s | main gen | sub-agent gen | env+reward | update | tool calls/rollout |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["grpo"]["steps"]:
        lines.append(f"| {r['step']} | {r['seconds']:.2f} | {r['tokens_per_second']:.1f} | {r['generate_main']:.2f} | "
                     f"{r['generate_sub']:.2f} | {r['env']:.2f} | {r['backward']:.2f} | {r['tool_calls_per_rollout']:.2f} |")
    lines.append(f"| mean (excl. first) | {m['seconds']:.2f} | {m['tokens_per_second']:.1f} | {m['generate_main']:.2f} | "
                 f"{m['generate_sub']:.2f} | {m['env']:.2f} | {m['backward']:.2f} | {m['tool_calls_per_rollout']:.2f} |")
    cap = res["settings"]["micro_batch_tokens"] or "auto"
    lines += ["", f"**Update chunking** (the same steps again; update seconds: chunks of at most --micro-batch-tokens "
              f"{cap} rows x longest row, against one padded chunk of up to --micro-batch-size rows)", "",
              "| step | update, token-capped chunks | update, padded chunks | ratio |", "|---|---|---|---|"]
    for a, b in zip(res["grpo"]["steps"], res["grpo_padded"]["steps"]):
        lines.append(f"| {a['step']} | {a['backward']:.2f} | {b['backward']:.2f} | {b['backward'] / max(a['backward'], 1e-9):.2f} |")
    a, b = m["backward"], res["grpo_padded"]["mean_after_first"]["backward"]
    lines.append(f"| mean (excl. first) | {a:.2f} | {b:.2f} | {b / max(a, 1e-9):.2f} |")
    n = next(iter(res["dispatch"].values()))["episodes"]
    lines += ["", f"**Parallel vs sequential dispatch** (same checkpoint, the same {n} validation episodes, the policy "
              "as its own sub-agent, batched; calls: executed / emitted per episode; parallel turns: share of turns "
              "with calls that ran >= 2)", "",
              "| dispatch | wall s | s/episode | main tokens/ep | sub tokens/ep | context tokens/ep | turns/ep | "
              "calls/ep | parallel turns | accuracy | common format |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d, r in res["dispatch"].items():
        lines.append(f"| {d} | {r['wall_seconds']:.2f} | {r['seconds_per_episode']:.2f} | {r['main_tokens_per_episode']:.1f} | "
                     f"{r['sub_tokens_per_episode']:.1f} | {r['context_tokens_per_episode']:.0f} | {r['turns_per_episode']:.2f} | "
                     f"{r['tool_calls_per_episode']:.2f} / {r['tool_calls_emitted_per_episode']:.2f} | "
                     f"{r['parallel_turn_fraction']:.2f} | {r['accuracy']:.2f} | {r['format_reward_common']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="", help="checkpoint directory; default: default_checkpoint('strong')")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps to time (the first is warm-up)")
    p.add_argument("--episodes", type=int, default=64, help="validation episodes per dispatch mode")
    p.add_argument("--out", default="runs/benchmarks/speed_grpo", help="output path without extension (default: runs/benchmarks/speed_grpo, untracked; --out benchmarks/results/speed_grpo refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    p.add_argument("extra", nargs="*", help="extra trainers/para_grpo.py arguments after --, e.g. -- --group-size 4")
    a = p.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda but CUDA is not available")
    model = a.model or str(core.resolve_model(para_grpo.Args()))
    base = config.parse_args(para_grpo.Args, ["--model", model, *a.extra])
    res = {"model": model, "device": a.device, "threads": base.torch_threads,
           "settings": {k: getattr(base, k) for k in ("group_size", "prompts_per_step", "max_new_tokens",
                                                      "subagent_max_new_tokens", "frame_size", "nframes_gating",
                                                      "max_turns", "max_calls_per_turn", "micro_batch_size",
                                                      "micro_batch_tokens")},
           "grpo": grpo_steps(model, a.device, a.steps, list(a.extra)),
           "grpo_padded": grpo_steps(model, a.device, a.steps, [*a.extra, *UNCAPPED]),
           "dispatch": dispatch_compare(model, a.device, a.episodes, base)}
    write_report(a.out, res, markdown(res))
    return res


if __name__ == "__main__":
    main()
