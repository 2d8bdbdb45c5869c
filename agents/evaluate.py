"""Evaluate an agent on ``ParaVT-LongVideo-v0``.

    python -m agents.evaluate --agent oracle --episodes 120 --frame-budget 16 --json out.json
    python -m agents.evaluate --agent no_tool --episodes 120 --gating

Episodes are the first N of the split (episode i is reset with seed i), so every agent is
scored on the same questions and, with gating, the same budgets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import paravt_env  # noqa: F401  (registers the env)
from paravt_env.config import DEFAULTS, GATING_BUDGETS
from paravt_env.sources import VideoError
from agents.scripted import AGENTS, make_agent


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help, unless the help already says it or there is none to show."""

    def _get_help_string(self, action):
        if action.default in (None, "") or "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


def run_episode(env, agent, seed: int, episode_index: int) -> dict | None:
    """One episode's record; None when its video does not decode (the env's reset names it)."""
    try:
        obs, info = env.reset(seed=seed, options={"episode_index": episode_index})
    except VideoError as exc:
        print(f"[data] leaving out episode {episode_index}, its video does not decode: {exc}", file=sys.stderr)
        return None
    reward, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        done = terminated or truncated
    return {"family": info["family"], "reward": reward, "correct": bool(info["correct"]),
            "accuracy": info["reward_components"]["accuracy"], "format": info["format_reward"],
            "tool_calls": info["num_tool_calls"], "frame_budget": info["frame_budget"]}


def evaluate(agent_name: str, episodes: int, seed: int = 0, first_episode: int = 0, agent_seed: int | None = None,
             **env_kwargs) -> dict:
    """Episodes first_episode .. first_episode + episodes - 1, episode i reset with seed + i. The agent's own random
    choices (a scripted agent's guesses) flow from `agent_seed`, `seed` when None.

    accuracy is the mean R_acc (partial credit: IoU, token F1); correct is the share answered right by the trainer's
    rule (`paravt_env.rewards.is_correct`), what an LMM run's eval/accuracy counts."""
    env = gym.make("ParaVT-LongVideo-v0", **env_kwargs)
    agent = make_agent(agent_name, env, seed=seed if agent_seed is None else agent_seed)
    t0 = time.perf_counter()
    indices = range(first_episode, first_episode + episodes)
    played = {i: run_episode(env, agent, seed + i, i) for i in tqdm(indices, desc=agent_name, leave=False)}
    wall = time.perf_counter() - t0
    env.close()
    # as the protocol evaluation does: an episode whose video does not decode is left out and named, so one bad
    # file costs its episodes, not the evaluation
    skipped = [i for i, r in played.items() if r is None]
    rows = [r for r in played.values() if r is not None]
    if not rows:
        raise VideoError(f"none of the {episodes} episodes has a video that decodes; repair or remove those videos")
    by_family, correct_by_family = defaultdict(list), defaultdict(list)
    for r in rows:
        by_family[r["family"]].append(r["accuracy"])
        correct_by_family[r["family"]].append(r["correct"])
    return {
        "agent": agent_name, "episodes": episodes, "first_episode": first_episode, "env": {k: str(v) for k, v in env_kwargs.items()},
        "accuracy": float(np.mean([r["accuracy"] for r in rows])),
        "accuracy_per_family": {f: float(np.mean(v)) for f, v in sorted(by_family.items())},
        "correct": float(np.mean([r["correct"] for r in rows])),
        "correct_per_family": {f: float(np.mean(v)) for f, v in sorted(correct_by_family.items())},
        "format_reward": float(np.mean([r["format"] for r in rows])),
        "tool_calls_per_episode": float(np.mean([r["tool_calls"] for r in rows])),
        "reward": float(np.mean([r["reward"] for r in rows])),
        "correct_per_episode": [bool(r["correct"]) for r in rows],
        "family_per_episode": [r["family"] for r in rows],
        "wall_seconds": wall,
        "videos_skipped": len(skipped),
        "skipped_episodes": skipped,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--agent", required=True, choices=sorted(AGENTS),
                   help="scripted agent to evaluate (see agents/scripted.py; oracle crops the evidence: a ceiling)")
    p.add_argument("--episodes", type=int, default=60, help="N episodes of the split (episode i: seed + i)")
    p.add_argument("--first-episode", type=int, default=0, help="index of the first episode (the trainer's "
                   "--eval-first-episode)")
    p.add_argument("--seed", type=int, default=0, help="reset seed of episode 0 and the agent's seed")
    p.add_argument("--split", default="validation", choices=["train", "validation", "test"], help="synthetic split")
    p.add_argument("--source", default=None, help="JSONL / parquet question file instead of the synthetic world")
    p.add_argument("--frame-budget", type=int, default=DEFAULTS.frame_budget,
                   help="K, overview frames (ignored with --gating)")
    budgets = ",".join(map(str, GATING_BUDGETS))
    p.add_argument("--gating", action="store_true", help=f"K ~ Uniform{{{budgets}}} per episode, a function of its seed")
    p.add_argument("--gating-budgets", default=None,
                   help=f"comma list of K for --gating (default: {budgets}; the default PARA-GRPO run gates over "
                        "4,8,16 and evaluates episode i with seed 10000 + i: --seed 10000 --gating-budgets 4,8,16 "
                        "plays its evaluation episodes)")
    p.add_argument("--dispatch", default=None, choices=["parallel", "sequential"],
                   help="parallel: several crops per turn; sequential: one (default: sequential for the "
                        "sequential agent, else parallel)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")
    a = p.parse_args(argv)
    if a.episodes < 1:
        p.error("--episodes must be at least 1")
    if a.first_episode < 0:
        p.error("--first-episode must be >= 0")
    extra = {}
    if a.gating_budgets:
        try:
            extra["gating_budgets"] = tuple(int(k) for k in a.gating_budgets.split(",") if k.strip())
        except ValueError:
            p.error(f"--gating-budgets must be a comma list of integers, got {a.gating_budgets!r}")
    dispatch = a.dispatch or ("sequential" if a.agent == "sequential" else "parallel")
    result = evaluate(a.agent, a.episodes, a.seed, a.first_episode, split=a.split, source=a.source,
                      frame_budget=a.frame_budget, nframes_gating=a.gating, dispatch=dispatch, **extra)
    print(f"agent {result['agent']}: accuracy {result['accuracy']:.3f}  format {result['format_reward']:.3f}  "
          f"tool calls/episode {result['tool_calls_per_episode']:.2f}  wall {result['wall_seconds']:.1f} s")
    for family, acc in result["accuracy_per_family"].items():
        print(f"  {family:17s} {acc:.3f}")
    if result["videos_skipped"]:
        print(f"  left out {result['videos_skipped']} of {a.episodes} episodes whose video does not decode: "
              f"{result['skipped_episodes']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
