"""Play one episode with a scripted agent and save its timeline picture (paravt_env.render.draw_timeline).

    python -m agents.render --seed 3 --agent scene --frame-budget 16 --out timeline.png

The picture shows the overview strip, the evidence windows, the windows the agent cropped, its
answer and the reward terms.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
from PIL import Image

import paravt_env  # noqa: F401  (registers the env)
from agents.evaluate import HelpFormatter
from agents.scripted import AGENTS, make_agent


def render_episode(agent_name: str, seed: int = 0, **env_kwargs) -> tuple[np.ndarray, float]:
    """Play the episode of reset seed `seed` with a scripted agent; returns (RGB picture, final reward)."""
    env = gym.make("ParaVT-LongVideo-v0", render_mode="rgb_array", **env_kwargs)
    agent = make_agent(agent_name, env, seed=seed)
    obs, info = env.reset(seed=seed)
    reward, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        done = terminated or truncated
    picture = env.render()
    env.close()
    return picture, float(reward)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="reset seed: which video, question and K")
    p.add_argument("--agent", default="oracle", choices=sorted(AGENTS),
                   help="scripted agent that plays the episode (see agents/scripted.py)")
    p.add_argument("--frame-budget", type=int, default=16, help="K, overview frames")
    p.add_argument("--split", default="train", choices=["train", "validation", "test"], help="synthetic split")
    p.add_argument("--source", default=None, help="JSONL / parquet question file instead of the synthetic world")
    p.add_argument("--out", default="timeline.png", help="PNG file to write")
    a = p.parse_args(argv)
    dispatch = "sequential" if a.agent == "sequential" else "parallel"
    picture, reward = render_episode(a.agent, a.seed, frame_budget=a.frame_budget, split=a.split, source=a.source,
                                     dispatch=dispatch)
    Image.fromarray(picture).save(a.out)
    print(f"wrote {a.out} (reward {reward:.2f})")


if __name__ == "__main__":
    main()
