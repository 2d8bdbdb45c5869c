"""Environment speed: episodes/s with a scripted agent, crop latency parallel vs sequential.

    python benchmarks/speed_env.py --out benchmarks/results

An episode is reset + one turn of 5 parallel crops + an answer, at 64x64 (the uniform
agent). Crop latency is the wall time of one turn's crops, measured side by side for
parallel dispatch (5 calls in one turn, thread pool) and sequential dispatch (the same 5
windows, one per turn).
"""

import argparse
import json
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import paravt_env  # noqa: F401
from agents.scripted import format_call, make_agent


CANNED_CROPS = "<think>\nlooking at five windows\n</think>" + "".join(
    format_call(a, a + 30.0) for a in (10.0, 100.0, 200.0, 300.0, 400.0))
CANNED_ANSWER = "<think>\nI have seen enough\n</think><answer>A</answer>"


def episodes_per_second(n: int, size: int, agent_name: str | None) -> dict:
    """``agent_name=None`` replays canned text (the env's own cost); else a scripted agent,
    whose perception (captioning what it saw) is counted too."""
    env = gym.make("ParaVT-LongVideo-v0", frame_budget=64, frame_size=(size, size)).unwrapped
    agent = make_agent(agent_name, env, seed=0) if agent_name else None
    times = []
    for i in tqdm(range(n), desc=f"episodes {size}x{size} {agent_name or 'canned'}", leave=False):
        t0 = time.perf_counter()
        obs, info = env.reset(seed=i)
        done = False
        while not done:
            action = agent.act(obs, info) if agent else (CANNED_CROPS if info["turn"] == 0 else CANNED_ANSWER)
            obs, r, term, trunc, info = env.step(action)
            done = term or trunc
        times.append(time.perf_counter() - t0)
    env.close()
    t = np.array(times)
    return {"frame_size": size, "agent": agent_name or "canned text", "episodes": n,
            "episodes_per_second": float(n / t.sum()),
            "ms_per_episode_p50": float(np.median(t) * 1e3), "ms_per_episode_p99": float(np.quantile(t, 0.99) * 1e3)}


def crop_latency(n: int, size: int, calls: int = 5) -> dict:
    out = {}
    for dispatch in ("parallel", "sequential"):
        env = gym.make("ParaVT-LongVideo-v0", frame_budget=16, frame_size=(size, size), dispatch=dispatch,
                       max_turns=calls + 1).unwrapped
        lat = []
        for i in tqdm(range(n), desc=f"crops {dispatch}", leave=False):
            env.reset(seed=i)
            d = env.episode.source.duration
            windows = [(j * d / calls, j * d / calls + 15.0) for j in range(calls)]
            turns = (["".join(format_call(a, b) for a, b in windows)] if dispatch == "parallel"
                     else [format_call(a, b) for a, b in windows])
            t0 = time.perf_counter()
            for text in turns:
                env.step("<think>\nlooking\n</think>" + text)
            lat.append(time.perf_counter() - t0)
        env.close()
        lat = np.array(lat) * 1e3
        out[dispatch] = {"p50_ms": float(np.median(lat)), "p99_ms": float(np.quantile(lat, 0.99))}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=500)
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args()
    result = {"cpu_count": os.cpu_count(), "episodes": [episodes_per_second(a.episodes, s, agent)
                                                           for s in (64, 224) for agent in (None, "uniform")],
              "crop_latency_5_calls_64px": crop_latency(a.episodes, 64)}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed_env.json").write_text(json.dumps(result, indent=2))
    lines = ["| measurement | value |", "|---|---|"]
    for e in result["episodes"]:
        lines.append(f"| episodes/s at {e['frame_size']}x{e['frame_size']}, {e['agent']}, 5 parallel crops + answer "
                     f"| {e['episodes_per_second']:.0f} (p50 {e['ms_per_episode_p50']:.1f} ms, "
                     f"p99 {e['ms_per_episode_p99']:.1f} ms) |")
    for d, v in result["crop_latency_5_calls_64px"].items():
        lines.append(f"| 5 crops, {d} dispatch, 64x64 | p50 {v['p50_ms']:.2f} ms, p99 {v['p99_ms']:.2f} ms |")
    md = "\n".join(lines)
    (out / "speed_env.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
