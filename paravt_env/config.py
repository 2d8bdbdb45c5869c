"""The settings of ``ParaVT-LongVideo-v0`` and their defaults, in one place.

Everything that builds the environment takes its defaults from :data:`DEFAULTS`: the env's own
constructor (so ``gym.make("ParaVT-LongVideo-v0")``), the PettingZoo twin (``paravt_env.parallel_env``),
the structured-action wrapper for stable-baselines3 (``paravt_env.wrappers.make_structured_env``), the
GRPO trainers (``trainers.core.GRPOArgs``, ``trainers.rollouts.make_env``) and the tiny LMM's world
(``agents.lmm.corpus.WorldConfig``, shared by the SFT builder and its corpora). A builder that wants
another value says so on a copy, ``DEFAULTS.replace(frame_budget=16)``, instead of writing a number again.

    from paravt_env.config import DEFAULTS
    env = DEFAULTS.replace(frame_budget=16, dispatch="sequential").make()
    # the same env as gym.make("ParaVT-LongVideo-v0", **DEFAULTS.replace(...).kwargs()), without
    # Gymnasium's checking wrappers (callers that drive env.begin_turn / env.deliver need the env itself)

This module is the environment's floor: it imports nothing from the rest of the project at module level
(never agents, trainers or torch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

ENV_ID = "ParaVT-LongVideo-v0"
ENTRY_POINT = "paravt_env.env:ParaVTLongVideoEnv"
GATING_BUDGETS = (4, 8, 16, 32, 64)  # the paper's nFrames gating set of overview sizes K
THINK_PREFIX = "<think>\n"  # prefilled at the start of every assistant turn (the released PARA-GRPO)


@dataclass(frozen=True)
class EnvConfig:
    """Every keyword argument of ``ParaVTLongVideoEnv`` (documented there and in docs/env.md), with its default."""

    source: str | None = None
    split: str = "train"
    world_seed: int = 0
    dataset_size: int = 6000
    duration: float | None = None
    frame_budget: int = 64
    nframes_gating: bool = False
    gating_budgets: tuple[int, ...] = GATING_BUDGETS
    dispatch: str = "parallel"
    max_turns: int = 3
    max_calls_per_turn: int = 5
    subagent: Any = "oracle"
    think_prefix: str | None = THINK_PREFIX
    frame_size: tuple[int, int] = (64, 64)
    crop_fps: float = 1.0
    crop_max_frames: int = 16
    reward_config: Any = None  # None: paravt_env.rewards.RewardConfig()
    render_mode: str | None = None
    dataset: Any = None  # episodes to use instead of source/split/world_seed/dataset_size/duration
    video_root: str | None = None
    strict: bool = False
    allow_videos_outside_root: bool = False
    tools: bool = True
    reward_fns: Any = None
    scoring: str = "trajectory"

    def replace(self, **changes) -> EnvConfig:
        """A copy with ``changes``; an unknown setting is a TypeError naming it."""
        return dataclasses.replace(self, **changes)

    def kwargs(self) -> dict[str, Any]:
        """The settings as keyword arguments of the env (values as they are, not copied)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def make(self):
        """The env these settings describe: ``ParaVTLongVideoEnv``, the class the registered id builds."""
        from .env import ParaVTLongVideoEnv

        return ParaVTLongVideoEnv(**self.kwargs())


DEFAULTS = EnvConfig()
