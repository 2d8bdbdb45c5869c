"""What the released scorer's defects do to the learning signal: the same rollouts scored three ways.

    python benchmarks/release_defects.py                          # strong cold start, CPU, ~3 min
    python benchmarks/release_defects.py --prompts 32 --out benchmarks/results/release_defects

The released code scores ONE response made of the model's generated tokens only (the released code of the ParaVT
paper, Yang et al., 2026): the forced ``<think>`` prefix is not in it, and tool responses are masked out, so
the anchor bonus, think-before-tool and balance terms cannot fire with the prefix on, and R_tool's
"the tool ran" tier (0.3) is unreachable. Our environment scores the whole trajectory with the
prefix and the tool responses, by the same rules (``RewardConfig()``); ``multi_turn_rules`` is our
further switch (rules checked per turn).

Rollouts: PARA-GRPO's default settings (trainers/para_grpo.py: forced think prefix, answer suffix,
anchor bonus, gating over K), --prompts training prompts x G rollouts at T = 0.7, the model as its own
sub-agent, played by the trainers' own rollout code. Each rollout is then scored
  released     rewards.score(the agent's own text of every turn, joined: the environment's
               ``agent_text``, what ``scoring="generated"`` reads; tool_executed inferred from a
               <tool_response> in that text, as released: never);
  ours         the environment's reward (the whole trajectory, the tool's execution from the env);
  multi_turn   ours with RewardConfig(multi_turn_rules=True).
Reported per scorer: mean reward, format and tool terms, how often each format/tool term fires, and
what GRPO would learn from it: group-normalised advantages, their correlation with ours, the share
of same-prompt rollout pairs ordered the other way round, and the share of groups with no signal
(every rollout scored alike). Writes <--out>.json and <--out>.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import time

if __name__ == "__main__" and not __package__:  # python benchmarks/release_defects.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.report import write_report  # noqa: E402
from paravt_env.rewards import score  # noqa: E402
from trainers import core, para_grpo  # noqa: E402
from trainers.config import parse_args  # noqa: E402

TERMS = ("format/think", "format/anchor_think_closed", "format/anchor_flow", "format/penalty_unclosed_think",
         "format/think_before_tool", "format/balanced", "tool/parseable", "tool/executed", "tool/correct_bonus")
SCORERS = ("released", "ours", "multi_turn")


def score_rollout(r, config) -> dict[str, dict]:
    env = r.env
    q = env.episode.question
    kw = {"ground_truth": q.answer, "answer_type": q.answer_type, "options": q.options, "question": q.text}
    # the environment's scoring="generated" reading: the agent's own text of every turn
    released = score(env.agent_text, tool_executed=None, config=config, **kw)
    multi = score(env.trajectory, tool_executed=bool(env.executed_windows),
                  config=dataclasses.replace(config, multi_turn_rules=True), **kw)
    ours = r.info["reward_components"]
    out = {"released": {"total": released.total, "format": released.format, "tool": released.tool,
                        **released.components},
           "ours": {"total": float(r.reward), **ours},
           "multi_turn": {"total": multi.total, "format": multi.format, "tool": multi.tool, **multi.components}}
    return out


def advantages(rewards: np.ndarray) -> np.ndarray:
    """GRPO's group-normalised advantage, rows = prompts."""
    std = rewards.std(axis=1, keepdims=True)
    return np.where(std > 1e-8, (rewards - rewards.mean(axis=1, keepdims=True)) / np.maximum(std, 1e-8), 0.0)


def flipped_pairs(a: np.ndarray, b: np.ndarray) -> float:
    """Of the same-prompt rollout pairs that `b` orders strictly, the share `a` orders the other way or ties."""
    total = flips = 0
    for ra, rb in zip(a, b):
        for i, j in itertools.combinations(range(len(ra)), 2):
            if abs(rb[i] - rb[j]) > 1e-9:
                total += 1
                flips += (ra[i] - ra[j]) * (rb[i] - rb[j]) <= 1e-12
    return flips / total if total else float("nan")


def summarize(scored: list[dict], groups: int, g: int) -> dict:
    res = {}
    totals = {s: np.array([x[s]["total"] for x in scored]).reshape(groups, g) for s in SCORERS}
    adv = {s: advantages(t) for s, t in totals.items()}
    for s in SCORERS:
        rows = [x[s] for x in scored]
        res[s] = {
            "reward_mean": float(np.mean([r["total"] for r in rows])),
            "format_mean": float(np.mean([r["format"] for r in rows])),
            "tool_mean": float(np.mean([r["tool"] for r in rows])),
            "term_fires": {t: float(np.mean([abs(r.get(t, 0.0)) > 1e-12 for r in rows])) for t in TERMS},
            "groups_without_signal": float(np.mean(totals[s].std(axis=1) <= 1e-8)),
            "advantage_corr_with_ours": float(np.corrcoef(adv[s].ravel(), adv["ours"].ravel())[0, 1])
            if adv[s].std() > 0 and adv["ours"].std() > 0 else float("nan"),
            "pairs_ordered_unlike_ours": flipped_pairs(totals[s], totals["ours"]),
            "rollouts_scored_unlike_ours": float(np.mean(np.abs(totals[s] - totals["ours"]) > 1e-9)),
        }
    return res


def markdown(res: dict) -> str:
    s = res["settings"]
    lines = [f"Same {s['rollouts']} rollouts ({s['prompts']} training prompts x G = {s['group_size']}, T = "
             f"{s['temperature']}, PARA-GRPO defaults, model `{res['model']}` as its own sub-agent; "
             f"{res['calls_per_rollout']:.2f} executed tool calls per rollout) scored three ways.", "",
             "| scorer | reward | format | R_tool | groups without signal | advantage corr. with ours | "
             "pairs ordered unlike ours | rollouts scored unlike ours |", "|---|---|---|---|---|---|---|---|"]
    for name in SCORERS:
        r = res["scorers"][name]
        lines.append(f"| {name} | {r['reward_mean']:.3f} | {r['format_mean']:.3f} | {r['tool_mean']:.3f} | "
                     f"{r['groups_without_signal']:.2f} | {r['advantage_corr_with_ours']:.2f} | "
                     f"{r['pairs_ordered_unlike_ours']:.2f} | {r['rollouts_scored_unlike_ours']:.2f} |")
    lines += ["", "Share of rollouts in which each term is non-zero:", "",
              "| term | " + " | ".join(SCORERS) + " |", "|---|" + "---|" * len(SCORERS)]
    for t in TERMS:
        lines.append(f"| {t} | " + " | ".join(f"{res['scorers'][n]['term_fires'][t]:.2f}" for n in SCORERS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="", help="checkpoint directory; default: default_checkpoint('strong')")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompts", type=int, default=16, help="training prompts, G rollouts each")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="runs/benchmarks/release_defects", help="output path without extension")
    p.add_argument("extra", nargs="*", help="trainers/para_grpo.py arguments after --, e.g. -- --group-size 4")
    a = p.parse_args(argv)
    model = a.model or str(core.resolve_model(para_grpo.Args()))
    args = parse_args(para_grpo.Args, ["--model", model, *a.extra])
    torch.set_num_threads(args.torch_threads)
    policy = core.load_policy(model, torch.device(a.device))
    policy.model.eval()
    g = args.group_size
    envs = [core.make_env(args, "train", policy) for _ in range(a.prompts * g)]
    reset_seeds = [core.derive_seed(a.seed, i // g) for i in range(len(envs))]
    t0 = time.perf_counter()
    with torch.no_grad():
        rollouts = core.collect_rollouts(policy, envs, reset_seeds, [i // g for i in range(len(envs))],
                                         temperature=args.temperature, top_p=args.top_p,
                                         max_new_tokens=args.max_new_tokens,
                                         sub_max_new_tokens=args.subagent_max_new_tokens,
                                         think_prefix=args.think_prefix, gen_seed=a.seed)
    wall = time.perf_counter() - t0
    config = core.reward_config(args)
    scored = [score_rollout(r, config) for r in rollouts]
    res = {"model": model, "seed": a.seed, "rollout_seconds": wall,
           "settings": {"prompts": a.prompts, "group_size": g, "rollouts": len(rollouts), "temperature": args.temperature,
                        "reward_config": dataclasses.asdict(config)},
           "calls_per_rollout": float(np.mean([len(r.env.executed_windows) for r in rollouts])),
           "scorers": summarize(scored, a.prompts, g)}
    for e in envs:
        e.close()
    write_report(a.out, res, markdown(res))
    return res


if __name__ == "__main__":
    main()
