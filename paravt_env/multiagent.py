"""The PettingZoo twin of ``ParaVT-LongVideo-v0``: a main agent and one sub-agent per crop.

Agents: ``main`` and ``sub_0 ... sub_{N-1}`` (N = ``max_calls_per_turn``), all present from
``reset`` to the episode's end (PettingZoo forbids reviving agents, so idle ones stay).
The game alternates two phases:

* **main phase**: ``main`` emits a turn (same grammar as the Gymnasium env). An answer or an
  unparseable turn ends the episode. Otherwise its crop calls run concurrently; call i that
  ran activates sub-agent ``sub_j`` (in call order).
* **sub phase**: each active sub-agent sees only its crop's frames (uint8, padded to
  ``crop_max_frames``, with a mask and timestamps) and a prompt, and answers with text. The
  answers become ``main``'s tool responses, in call order; failed calls get in-band errors.

Actions of agents that are not on turn (``main`` during the sub phase, idle sub-agents) are
ignored; their observation carries ``active = 0``. The reward is shared: every agent gets the
episode reward when it ends. ``infos`` carry the Gymnasium env's info for ``main``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from .config import DEFAULTS
from .env import CHARSET, MAX_ACTION_CHARS, MAX_SECONDS, AnyText, MAX_TEXT, sanitize

SUBAGENT_PROMPT = ("You see a crop of a long video, {a:.1f}-{b:.1f} s. Describe what the frames show: "
                   "the scene, and every coloured object with its colour, shape, position and times.\n"
                   "The main agent's question: {question}")


class ParaVTParallelEnv(ParallelEnv):
    metadata = {"name": "paravt_longvideo_v0", "render_modes": ["rgb_array"], "is_parallelizable": True}

    def __init__(self, **kwargs):
        """The Gymnasium env's keyword arguments, with its defaults (``paravt_env.config.DEFAULTS``)."""
        # subagent: never consulted, the sub-agents write the summaries
        self.env = DEFAULTS.replace(**dict(kwargs, subagent="oracle")).make()
        self.render_mode = self.env.render_mode
        n = self.env.max_calls
        self.possible_agents = ["main"] + [f"sub_{i}" for i in range(n)]
        self.agents: list[str] = []
        h, w = self.env.frame_size
        m = self.env.crop_max_frames
        charset = "".join(sorted(CHARSET))
        main_space = dict(self.env.observation_space.spaces)
        main_space["active"] = spaces.Box(0, 1, (), np.int8)
        self._spaces = {
            "main": spaces.Dict(main_space),
            "sub": spaces.Dict({
                "frames": spaces.Box(0, 255, (m, h, w, 3), np.uint8),
                "frame_mask": spaces.Box(0, 1, (m,), np.int8),
                "timestamps": spaces.Box(0.0, MAX_SECONDS, (m,), np.float32),
                "active": spaces.Box(0, 1, (), np.int8),
                "text": spaces.Text(MAX_TEXT, min_length=0, charset=charset),
            }),
        }
        self._action_space = AnyText(MAX_ACTION_CHARS, min_length=0, charset=charset)

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return self._spaces["main" if agent == "main" else "sub"]

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return self._action_space

    def reset(self, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        self.pending = []  # (sub-agent name, crop result) during the sub phase
        self.results = []
        self._main_obs, self._main_info = obs, info
        return self._observations(), self._infos()

    @property
    def phase(self) -> str:
        return "sub" if self.pending else "main"

    def step(self, actions):
        if not self.agents:
            raise RuntimeError("episode over: call reset()")
        if not isinstance(actions, Mapping):
            raise TypeError(f"actions must be a dict of agent name -> text, got {type(actions).__name__}")
        reward, done, truncated = 0.0, False, False
        if self.phase == "main":
            finished, parsed, notes, results = self.env.begin_turn(actions.get("main", ""))
            if finished is not None:
                self._main_obs, reward, done, truncated, self._main_info = finished
            else:
                self.results = results
                ok = [r for r in results if r.ok]
                self.pending = [(f"sub_{i}", r) for i, r in enumerate(ok)]
                self._main_info = self.env._info(parse=parsed, notes=notes)
                if not self.pending:  # every call failed: errors go straight back to main
                    self._deliver({})
        else:
            self._deliver(actions)
        obs, infos = self._observations(), self._infos()
        agents = list(self.agents)
        rewards = {a: float(reward) for a in agents}
        terms = {a: bool(done) for a in agents}
        truncs = {a: bool(truncated) for a in agents}
        if done or truncated:
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def _deliver(self, actions):
        """Each sub-agent's text becomes the tool response of the call it served."""
        served_by = {id(r): name for name, r in self.pending}
        summaries = []
        for r in self.results:
            # a sub-agent's action is text like main's, taken the same way (bytes decoded, other types as text)
            summaries.append(self.env._coerce_action(actions.get(served_by[id(r)], ""))[0] if r.ok else "")
        self.env.deliver(self.results, summaries)
        self.pending, self.results = [], []
        self._main_obs = self.env._observation()
        self._main_info = self.env._info()

    def _observations(self):
        obs = {"main": dict(self._main_obs, active=np.array(self.phase == "main", np.int8))}
        active = dict(self.pending)
        question = self.env.episode.question.prompt()
        space = self._spaces["sub"]
        m = space["frames"].shape[0]
        for name in self.possible_agents[1:]:
            frames = np.zeros(space["frames"].shape, np.uint8)
            mask = np.zeros(m, np.int8)
            stamps = np.zeros(m, np.float32)
            text = ""
            r = active.get(name)
            if r is not None:
                n = len(r.frames.timestamps)
                frames[:n], mask[:n], stamps[:n] = r.frames.images, 1, r.frames.timestamps
                text = sanitize(SUBAGENT_PROMPT.format(a=r.window[0], b=r.window[1], question=question))
            obs[name] = {"frames": frames, "frame_mask": mask, "timestamps": stamps,
                         "active": np.array(r is not None, np.int8), "text": text[:MAX_TEXT]}
        return obs

    def _infos(self):
        infos = {a: {} for a in self.possible_agents}
        infos["main"] = self._main_info
        for name, r in self.pending:
            infos[name] = {"window": r.window, "images": r.frames.images, "timestamps": r.frames.timestamps}
        return infos

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()
