"""Scripted agents: floors and ceilings for ``ParaVT-LongVideo-v0``.

Every agent has *perfect perception of what it is shown and nothing more*: it reads the
frames it saw (overview timestamps, crop responses) through the world's truthful caption
of exactly those frames, then answers with fixed rules. So differences between agents come
from *where they look*, which is what the tools are about.

=============  ==========================================================================
agent          strategy
=============  ==========================================================================
no_tool        answers from the overview alone (the skip-tool shortcut)
uniform        one turn of parallel crops tiling the whole video, then answers
scene          parallel crops tiling the scene the question names (found in the overview)
zoom           crops between the overview's printed times, then where those responses show the scene
sequential     the same windows as ``scene``, one crop per turn (use ``dispatch="sequential"``)
oracle         crops exactly the evidence windows (knows the truth: a ceiling)
random         random crops, random answer text
=============  ==========================================================================
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field

import numpy as np

from paravt_env.questions import LETTERS
from paravt_env.world import COLOURS, SHAPES

_SCENE_RE = re.compile(r"([a-z]+) scene \(([\d.]+)(?:-([\d.]+))? s\)")
_OBJ_RE = re.compile(r"\b(" + "|".join(COLOURS) + r") (" + "|".join(SHAPES) + r") at [a-z-]+ \(([\d.]+)(?:-([\d.]+))? s\)")
QUESTION_SCENE_RE = re.compile(r"during the ([a-z]+) scene")


@dataclass
class Memory:
    """What the agent has perceived: scene sightings and object sightings (time spans)."""

    scenes: list[tuple[str, float, float]] = field(default_factory=list)
    objects: dict[str, list[float]] = field(default_factory=dict)  # "red circle" -> [first, last]

    def read(self, caption: str | None) -> None:
        if not caption:
            return
        for name, a, b in _SCENE_RE.findall(caption):
            self.scenes.append((name, float(a), float(b or a)))
        for colour, shape, a, b in _OBJ_RE.findall(caption):
            span = self.objects.setdefault(f"{colour} {shape}", [float(a), float(b or a)])
            span[0], span[1] = min(span[0], float(a)), max(span[1], float(b or a))

    def scene_of(self, t: float) -> str | None:
        for name, a, b in self.scenes:
            if a - 1e-6 <= t <= b + 1e-6:
                return name
        return None

    def scene_span(self, name: str) -> tuple[float, float] | None:
        spans = [(a, b) for n, a, b in self.scenes if n == name]
        return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None


def format_call(start: float, end: float) -> str:
    args = {"name": "crop_video", "arguments": {"start_time": round(start, 1), "end_time": round(end, 1)}}
    return f"<tool_call>{json.dumps(args)}</tool_call>"


class ScriptedAgent:
    """Base class. ``act(obs, info) -> str`` emits one turn's full text."""

    name = "base"

    def __init__(self, env, seed: int | None = None):
        self.env = env.unwrapped
        self.rng = np.random.default_rng(seed)

    # perception ---------------------------------------------------------------------------
    def perceive(self, obs) -> Memory:
        memory = Memory()
        source = self.env.episode.source
        mask = obs["frame_mask"].astype(bool)
        memory.read(source.caption(obs["timestamps"][mask].astype(np.float64)))
        for r in self.env.last_crops:
            if r.ok:
                memory.read(source.caption(r.frames.timestamps))
        return memory

    def remember(self, obs, info) -> Memory:
        if info.get("turn", 0) == 0:
            self.memory = Memory()
        new = self.perceive(obs)
        self.memory.scenes += new.scenes
        for k, (a, b) in new.objects.items():
            span = self.memory.objects.setdefault(k, [a, b])
            span[0], span[1] = min(span[0], a), max(span[1], b)
        return self.memory

    # policy ---------------------------------------------------------------------------------
    def windows(self, memory: Memory) -> list[tuple[float, float]]:
        """The first turn's parallel crops (none: answer at once)."""
        return []

    def later_windows(self, memory: Memory, turn: int) -> list[tuple[float, float]]:
        """Crops of a later turn, after the responses to the earlier ones (none: answer)."""
        return []

    def act(self, obs, info) -> str:
        memory = self.remember(obs, info)
        turn = info.get("turn", 0)
        windows = self.windows(memory) if turn == 0 else self.later_windows(memory, turn)
        if windows:
            calls = "".join(format_call(a, b) for a, b in windows)
            return f"<think>\nI need a closer look at {len(windows)} windows.\n</think>\n{calls}"
        return f"<think>\nI have looked enough; answering.\n</think>\n<answer>{self.answer(memory)}</answer>"

    def answer(self, memory: Memory) -> str:
        """Answer the current question from what was perceived; guess where nothing was."""
        q = self.env.episode.question
        scene = (m.group(1) if (m := QUESTION_SCENE_RE.search(q.text)) else None)
        in_scene = {o: s for o, s in memory.objects.items() if scene and memory.scene_of(s[0]) == scene}
        options = list(q.options or [])

        def pick(option_text: str | None) -> str:
            if option_text is not None and option_text in options:
                return LETTERS[options.index(option_text)]
            return LETTERS[int(self.rng.integers(len(options)))]

        if q.family == "needle":
            return pick(next((o for o in options if o in in_scene), None))
        if q.family == "needle_attribute":
            shape = next((s for s in SHAPES if f" {s} " in q.text), None)
            seen = [o.split()[0] for o in in_scene if o.split()[1] == shape]
            return seen[0] if seen else str(self.rng.choice(list(COLOURS)))
        if q.family == "counting":
            count = len(in_scene)
            numeric = [int(o) for o in options]
            return pick(str(min(numeric, key=lambda n: (abs(n - count), n))))
        if q.family == "temporal_order":
            seen = [(memory.objects[o[4:]][0], o) for o in options if o[4:] in memory.objects]
            if len(seen) == 2:
                return pick(min(seen)[1])
            if len(seen) == 1:  # the one not seen early enough is likelier second... just a guess
                return pick(seen[0][1])
            return pick(None)
        if q.family == "grounding":
            target = q.text.split("is the ")[1].split(" visible")[0]
            if target in memory.objects:
                a, b = memory.objects[target]
                return f"{max(0.0, a - 0.5):.1f}, {b + 0.5:.1f}"
            d = self.env.episode.source.duration
            centre = float(self.rng.uniform(0, d))
            return f"{centre:.1f}, {centre + 5:.1f}"
        if q.family == "global":
            seen = {n for n, _, _ in memory.scenes}
            return pick(next((o for o in options if o in seen), None))
        return pick(None) if options else ""


class NoToolAgent(ScriptedAgent):
    name = "no_tool"


class UniformCropAgent(ScriptedAgent):
    """Tiles the whole video with as many parallel crops as allowed."""

    name = "uniform"

    def windows(self, memory):
        d, n = self.env.episode.source.duration, self.env.max_calls
        edges = np.linspace(0.0, d, n + 1)
        return list(zip(edges[:-1], edges[1:]))


class SceneCropAgent(ScriptedAgent):
    """Tiles the scene the question names, located from the overview's scene cues."""

    name = "scene"

    def target(self, memory) -> tuple[float, float]:
        q, d = self.env.episode.question, self.env.episode.source.duration
        m = QUESTION_SCENE_RE.search(q.text)
        span = memory.scene_span(m.group(1)) if m else None
        if span is None:
            return 0.0, d
        # the scene extends up to one overview gap beyond the frames that showed it
        gap = d / max(1, self.env.k)
        return max(0.0, span[0] - gap), min(d, span[1] + gap)

    def windows(self, memory):
        a, b = self.target(memory)
        n = self.env.max_calls
        edges = np.linspace(a, b, n + 1)
        return list(zip(edges[:-1], edges[1:]))


class SequentialCropAgent(SceneCropAgent):
    """``scene``'s windows, one per turn, answering on the last turn."""

    name = "sequential"

    def act(self, obs, info):
        memory = self.remember(obs, info)
        turn = info.get("turn", 0)
        if turn == 0:
            a, b = self.target(memory)
            n = self.env.max_turns - 1
            edges = np.linspace(a, b, n + 1)
            self.plan = list(zip(edges[:-1], edges[1:]))
        if turn < len(self.plan):
            a, b = self.plan[turn]
            return f"<think>\nLooking at window {turn + 1}.\n</think>\n{format_call(a, b)}"
        return f"<think>\nAnswering from what I saw.\n</think>\n<answer>{self.answer(memory)}</answer>"


def scene_sightings(caption: str, name: str, window: tuple[float, float],
                    split: bool = False) -> list[tuple[float, float]]:
    """Where one crop's ``caption`` shows scene ``name``, as windows whose ends are numbers the crop's
    response prints: from the previous scene's last time (or the crop's start) to the next scene's first
    time (or the crop's end). The scene's own times are those of sampled frames; its true ends lie
    somewhere between them and its neighbours', so this reaches as far as it may. ``window``: the
    crop's (start, end), as its response header prints them (one decimal). ``split``: each sighting is cut
    at the scene's own printed first and last times into up to three windows (still copies), so each part
    gets a crop's whole frames instead of sharing one crop's."""
    seen = [(n, float(a), float(b or a)) for n, a, b in _SCENE_RE.findall(caption)]
    lo, hi = round(float(window[0]), 1), round(float(window[1]), 1)
    out = []
    for i, (n, first, last) in enumerate(seen):
        if n != name:
            continue
        start, end = seen[i - 1][2] if i > 0 else lo, seen[i + 1][1] if i + 1 < len(seen) else hi
        points = [start, first, last, end] if split else [start, end]
        out += [(a, b) for a, b in itertools.pairwise(points) if b > a]
    return out


def printed_sightings(caption: str, name: str) -> list[str]:
    """Scene ``name`` as one crop's ``caption`` prints it, once per sighting: ["meadow scene (147.4-278.9 s)"]."""
    return [m.group(0) for m in _SCENE_RE.finditer(caption) if m.group(1) == name]


class ZoomCropAgent(ScriptedAgent):
    """Two turns of parallel crops whose every end is a number the agent was shown, then the answer.

    Turn 1 crops between the overview's printed times (0, its frames' timestamps, the video's length)
    around where the overview shows the named scene, or over the whole video when it does not, grouped
    into at most ``max_calls`` windows. Turn 2 crops each place where those responses show the named
    scene (:func:`scene_sightings`). The scene agent's windows (a scene's span padded by a gap and cut
    into equal parts) need arithmetic on the times; these need only copies, which is what a small model
    can learn to emit, and where the first crops were long the second ones hold the named scene alone,
    so the answer is read off a short list instead of sorting objects into scenes by their times."""

    name = "zoom"
    copies_times = True  # window ends are printed numbers: a corpus writes them as their integer parts
    split_sightings = False  # scene_sightings(split=...) for the second turn

    def printed_bounds(self) -> list[float]:
        """0, the overview's timestamps and the video's length, as the prompt prints them (one decimal)."""
        d = round(float(self.env.episode.source.duration), 1)
        return [0.0] + [round(float(t), 1) for t in self.env.overview.timestamps] + [d]

    def grouped_windows(self, lo: int, hi: int) -> list[tuple[float, float]]:
        """The intervals between printed bounds ``lo`` .. ``hi``, grouped into at most ``max_calls`` windows."""
        bounds, n = self.printed_bounds(), hi - lo
        cut = [lo + int(round(x)) for x in np.linspace(0, n, min(n, self.env.max_calls) + 1)]
        return [(bounds[a], bounds[b]) for a, b in itertools.pairwise(cut) if bounds[b] > bounds[a]]

    def windows(self, memory):
        ts = self.printed_bounds()[1:-1]
        m = QUESTION_SCENE_RE.search(self.env.episode.question.text)
        seen = [i + 1 for i, t in enumerate(ts) if m and memory.scene_of(t) == m.group(1)]
        return self.grouped_windows(*((seen[0] - 1, seen[-1] + 1) if seen else (0, len(ts) + 1)))

    def later_windows(self, memory, turn):
        m = QUESTION_SCENE_RE.search(self.env.episode.question.text)
        if turn != 1 or turn + 1 >= self.env.max_turns or not m:
            return []
        source, out = self.env.episode.source, []
        for r in self.env.last_crops:
            if r.ok:
                out += [w for w in scene_sightings(source.caption(r.frames.timestamps), m.group(1), r.window,
                                                   split=self.split_sightings) if w not in out]
        return out[: self.env.max_calls]


class SweepCropAgent(ZoomCropAgent):
    """``zoom``'s two turns, but the first always sweeps the whole video between the overview's printed times,
    whatever the overview showed, and the second cuts each place where the responses show the named scene at that
    scene's own printed times (:func:`scene_sightings` with ``split``). The first turn is one fixed pattern of
    copies, the same for every question, the easiest calls a small model can learn; it finds the named scene in the
    responses even where the overview missed or mistook it, and the second turn spends all its crops' frames there.
    Every window end is still a number the agent was shown."""

    name = "sweep"
    split_sightings = True

    def windows(self, memory):
        return self.grouped_windows(0, len(self.printed_bounds()) - 1)


class OracleCropAgent(ScriptedAgent):
    """Crops the evidence windows themselves (a ceiling, not a fair agent)."""

    name = "oracle"

    def windows(self, memory):
        ev = list(self.env.episode.question.evidence)[: self.env.max_calls]
        d = self.env.episode.source.duration
        return [(max(0.0, a - 1.0), min(d, b + 1.0)) for a, b in ev]


class RandomAgent(ScriptedAgent):
    """Random windows on the first turn, then a random option or word."""

    name = "random"

    def windows(self, memory):
        d = self.env.episode.source.duration
        n = int(self.rng.integers(0, self.env.max_calls + 1))
        starts = self.rng.uniform(0, d, n)
        return [(s, min(d, s + float(self.rng.uniform(2, 60)))) for s in starts]

    def answer(self, memory):
        q = self.env.episode.question
        if q.options:
            return LETTERS[int(self.rng.integers(len(q.options)))]
        if q.answer_type == "grounding":
            s = float(self.rng.uniform(0, self.env.episode.source.duration))
            return f"{s:.1f}, {s + 5:.1f}"
        return str(self.rng.choice(list(COLOURS)))


AGENTS = {cls.name: cls for cls in (NoToolAgent, UniformCropAgent, SceneCropAgent, ZoomCropAgent, SweepCropAgent,
                                      SequentialCropAgent, OracleCropAgent, RandomAgent)}


def make_agent(name: str, env, seed: int | None = None) -> ScriptedAgent:
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; known: {sorted(AGENTS)}")
    return AGENTS[name](env, seed=seed)
