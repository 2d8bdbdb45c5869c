"""Array-only view of ``ParaVT-LongVideo-v0`` for classic RL (stable-baselines3 and kin).

:class:`StructuredActionWrapper` turns the text environment into an episode of exactly two
steps with a ``MultiDiscrete`` action and a flat ``Box(float32)`` observation:

* step 1 (``phase = 0``): the crop part of the action, ``n_crops`` integers in ``0..B``, picks
  up to ``n_crops`` windows among ``B`` equal segments of the video (``0`` = no crop, ``b`` =
  segment ``b``, duplicates run once). The wrapper writes the ``<think>`` + ``<tool_call>``
  text and steps the text environment, whose crops run in parallel. If every slot is ``0``
  no text turn is spent and the agent simply answers at step 2 from the overview.
* step 2 (``phase = 1``): the answer part picks an option; the wrapper writes
  ``<think>...</think><answer>X</answer>``. An index past the question's last option wraps
  around (``index % len(options)``) so that every action is a valid answer. The episode ends
  with the text environment's reward (``R_acc + w_fmt * R_fmt + R_tool``); ``info["correct"]``
  says whether the answer was right.

Only multiple-choice questions fit an option index: build the environment on the MCQ
families (``MCQ_FAMILIES``; :func:`make_structured_env` does) or the wrapper raises at reset.

Observation: a flat ``float32`` vector in ``[-1, 1]`` computed from what the agent is shown
(overview pixels, the crops' pixels, the question and option text) and nothing else:

======================  ==========================================================================
block                   content
======================  ==========================================================================
overview (per frame)    needle-colour pixel fractions (x10, clipped) and nearest-scene one-hot
crops (per slot)        segment one-hot, fraction of the crop's frames showing each needle colour,
                        scene histogram of the crop's frames
question                family one-hot, the scene the question names (one-hot), phase flag
options (per option)    valid flag, colour / shape / scene / number one-hots parsed from the text
perception              per segment: share of its overview frames in the question's scene; per
                        option: object seen (anywhere / in the question's scene), first sighting
                        time, share of overview frames in the option's scene, (numbers) the signed
                        gap to and equality with the count of distinct objects seen in the
                        question's scene, whether its object was sighted first of all options,
                        and a *support* score on one scale for every option kind (object seen in
                        the named scene / sighted first; scene seen; count close to the objects
                        seen): a hand-made evidence match, computed from perception only
======================  ==========================================================================

Objects are detected by colour (a tolerance around each ``world.COLOURS`` entry) and shape
(template match of the colour mask against ``world.shape_mask``); scenes by the distance of
each pixel to each ``world.SCENES`` stripe palette. Pure numpy, no torch.
"""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .config import DEFAULTS
from .questions import FAMILIES, LETTERS
from .world import COLOURS, NEEDLE_SCALE, SCENE_NAMES, SCENES, SHAPES, shape_mask

MCQ_FAMILIES = ("needle", "counting", "temporal_order", "global")
# make_structured_env's env settings: the env's defaults (paravt_env/config.py) but for K = 16, 32x32 frames,
# crops of up to 32 frames, and crops returned as frames (the wrapper reads pixels, no captions needed). The
# stable-baselines3 results in docs/env.md were measured with them.
STRUCTURED = DEFAULTS.replace(frame_budget=16, frame_size=(32, 32), crop_max_frames=32, subagent="frames")
BLOCKS = ("overview", "crops", "question", "options", "perception")
PER_OPTION = 8  # perception features per option
MAX_NUMBER = 16  # counting options are one-hot over 0..MAX_NUMBER-1 (larger values clip)
COLOUR_TOL = 30  # max per-channel distance of a pixel to a needle colour
MIN_PIXELS = 3  # a colour blob smaller than this is noise
_COLOUR_RGB = np.array(list(COLOURS.values()), np.int16)  # (C, 3)
_SCENE_A = np.array([SCENES[s][0] for s in SCENE_NAMES], np.float32)  # (S, 3)
_SCENE_B = np.array([SCENES[s][1] for s in SCENE_NAMES], np.float32)  # (S, 3)
_QUESTION_SCENE = re.compile(r"during the ([a-z]+) scene")
_WORD = re.compile(r"[a-z]+|\d+")
C, S, SH = len(COLOURS), len(SCENE_NAMES), len(SHAPES)
COLOUR_NAMES = tuple(COLOURS)


# ---- perception (pixels -> colours, shapes, scenes) --------------------------------------------
def _palette(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct colours of a batch ``(U, 3)`` and each pixel's index into them ``(N, H, W)``;
    synthetic frames hold few colours, so per-colour work on ``U`` is cheap."""
    x = frames.astype(np.int32)
    packed = (x[..., 0] << 16) | (x[..., 1] << 8) | x[..., 2]
    uniq, inverse = np.unique(packed.reshape(-1), return_inverse=True)
    rgb = np.stack([(uniq >> 16) & 255, (uniq >> 8) & 255, uniq & 255], axis=-1)
    return rgb, inverse.reshape(frames.shape[:3])


def colour_match(rgb: np.ndarray, tol: int = COLOUR_TOL) -> np.ndarray:
    """Boolean ``(U, C)``: colour within ``tol`` (per channel) of needle colour ``c``."""
    return np.abs(rgb[:, None, :].astype(np.int16) - _COLOUR_RGB).max(axis=-1) <= tol


def nearest_scene(rgb: np.ndarray) -> np.ndarray:
    """Index into ``SCENE_NAMES`` of the stripe palette (segment A-B in RGB) nearest each colour."""
    ab = _SCENE_B - _SCENE_A  # (S, 3)
    rel = rgb[:, None, :].astype(np.float32) - _SCENE_A  # (U, S, 3)
    t = np.clip((rel * ab).sum(-1) / np.maximum((ab * ab).sum(-1), 1e-6), 0.0, 1.0)
    return ((rel - t[..., None] * ab) ** 2).sum(-1).argmin(-1)


def colour_masks(frames: np.ndarray, tol: int = COLOUR_TOL) -> np.ndarray:
    """Boolean ``(N, H, W, C)``: pixel within ``tol`` (per channel) of needle colour ``c``."""
    rgb, inverse = _palette(frames)
    return colour_match(rgb, tol)[inverse]


def scene_ids(frames: np.ndarray) -> np.ndarray:
    """Index into ``SCENE_NAMES`` of each frame: majority vote of its background pixels (those
    of no needle colour), each assigned to the nearest scene palette."""
    return _frame_scenes(*_palette(frames))


def _frame_scenes(rgb: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    n = len(inverse)
    if n == 0:
        return np.zeros(0, np.int64)
    scene_of = nearest_scene(rgb)
    background = ~colour_match(rgb).any(-1)
    ids = np.where(background, scene_of, S)[inverse].reshape(n, -1)  # S = "needle pixel, no vote"
    votes = np.stack([np.bincount(row, minlength=S + 1) for row in ids])[:, :S]
    return votes.argmax(-1)


class ShapeMatcher:
    """Classify a colour blob's shape by exact template match (IoU) of its bounding box."""

    def __init__(self, size: tuple[int, int]):
        side = max(3, int(round(NEEDLE_SCALE * min(size))))
        self.templates = []
        for k, name in enumerate(SHAPES):
            for s in (side - 1, side, side + 1):
                m = shape_mask(name, s)
                ys, xs = np.nonzero(m)
                self.templates.append((k, m[ys.min():ys.max() + 1, xs.min():xs.max() + 1]))

    def __call__(self, mask: np.ndarray) -> int:
        """Best shape index for a boolean mask holding one blob, or -1 if nothing fits."""
        ys, xs = np.nonzero(mask)
        blob = mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        best, best_iou = -1, 0.5
        for k, t in self.templates:
            if t.shape != blob.shape:
                continue
            iou = (t & blob).sum() / max(1, (t | blob).sum())
            if iou > best_iou:
                best, best_iou = k, iou
        return best


def detect(frames: np.ndarray, matcher: ShapeMatcher) -> tuple[np.ndarray, np.ndarray, list[list[tuple[int, int]]]]:
    """Per frame: colour pixel fractions ``(N, C)``, scene index ``(N,)`` and the objects seen
    as ``(colour index, shape index or -1)`` pairs."""
    n = len(frames)
    if n == 0:
        return np.zeros((0, C), np.float32), np.zeros(0, np.int64), []
    rgb, inverse = _palette(frames)
    masks = colour_match(rgb)[inverse]  # (N, H, W, C)
    counts = masks.sum(axis=(1, 2))  # (N, C)
    fractions = counts / float(frames.shape[1] * frames.shape[2])
    objects = [[(int(c), matcher(masks[i, :, :, c])) for c in np.flatnonzero(counts[i] >= MIN_PIXELS)]
               for i in range(n)]
    return fractions.astype(np.float32), _frame_scenes(rgb, inverse), objects


def parse_option(text: str) -> tuple[int, int, int, int]:
    """(colour, shape, scene, number) indices named in an option's text; -1 where absent."""
    colour = shape = scene = number = -1
    for w in _WORD.findall(text.lower()):
        if w.isdigit():
            number = int(w)
        elif w in COLOURS:
            colour = COLOUR_NAMES.index(w)
        elif w in SHAPES:
            shape = SHAPES.index(w)
        elif w in SCENES:
            scene = SCENE_NAMES.index(w)
    return colour, shape, scene, number


def _one_hot(i: int, n: int) -> np.ndarray:
    v = np.zeros(n, np.float32)
    if 0 <= i < n:
        v[i] = 1.0
    return v


# ---- the wrapper ------------------------------------------------------------------------------
class StructuredActionWrapper(gym.Wrapper):
    """Two-step episodes with ``MultiDiscrete([B + 1] * n_crops + [n_options])`` actions and a
    flat ``Box(float32)`` observation; see the module docstring.

    Args:
        env: a ``ParaVT-LongVideo-v0`` environment (``gym.make`` or the class) with a fixed
            frame budget, ``max_turns >= 2`` and ``max_calls_per_turn >= n_crops``.
        num_segments: B, the equal segments the crop part chooses from.
        n_crops: crop slots per episode (at most the env's ``max_calls_per_turn``).
        n_options: answer slots; a question with more options raises at reset.
        blocks: which observation blocks to concatenate, in this order (default: all of
            ``BLOCKS``); e.g. ``("question", "options", "perception")`` drops the per-frame
            and per-crop pixel statistics for a smaller, faster-to-learn vector.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}

    def __init__(self, env: gym.Env, num_segments: int = 8, n_crops: int = 4, n_options: int = 4,
                 blocks: tuple[str, ...] = None):
        super().__init__(env)
        base = env.unwrapped
        if not 1 <= num_segments <= 64 or not 1 <= n_options <= len(LETTERS):
            raise ValueError(f"num_segments must be in 1..64 and n_options in 1..{len(LETTERS)}")
        if not 1 <= n_crops <= base.max_calls:
            raise ValueError(f"n_crops ({n_crops}) must be in 1..max_calls_per_turn ({base.max_calls})")
        if len(base.budgets) != 1:
            raise ValueError("the wrapper needs a fixed frame budget (nframes_gating=False)")
        if base.max_turns < 2:
            raise ValueError("the wrapper needs max_turns >= 2 (one crop turn, one answer turn)")
        self.B, self.n_crops, self.n_options = int(num_segments), int(n_crops), int(n_options)
        self.K = base.budgets[0]
        self.matcher = ShapeMatcher(base.frame_size)
        self.min_fraction = MIN_PIXELS / float(base.frame_size[0] * base.frame_size[1])
        self.action_space = spaces.MultiDiscrete([self.B + 1] * self.n_crops + [self.n_options])
        sizes = {
            "overview": self.K * (C + S),
            "crops": self.n_crops * ((self.B + 1) + C + S),
            "question": len(FAMILIES) + (S + 1) + 1,
            "options": self.n_options * (1 + C + SH + S + MAX_NUMBER),
            "perception": self.B + self.n_options * PER_OPTION,
        }
        blocks = BLOCKS if blocks is None else tuple(blocks)
        if not blocks or len(set(blocks)) != len(blocks) or not set(blocks) <= set(BLOCKS):
            raise ValueError(f"blocks must be distinct names among {BLOCKS}, got {blocks!r}")
        self.blocks = {b: sizes[b] for b in blocks}  # name -> width, in observation order
        dim = sum(self.blocks.values())
        self.observation_space = spaces.Box(-1.0, 1.0, (dim,), np.float32)
        self.phase = None

    # ---- lifecycle -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        _, info = self.env.reset(seed=seed, options=options)
        base = self.env.unwrapped
        q = base.episode.question
        if q.answer_type != "mcq" or not q.options:
            raise ValueError(f"question {q.id!r} ({q.family}) is not multiple choice; build the env on "
                             f"MCQ families, e.g. make_structured_env() or families={MCQ_FAMILIES}")
        if len(q.options) > self.n_options:
            raise ValueError(f"question {q.id!r} has {len(q.options)} options > n_options={self.n_options}")
        self.phase = 0
        self.duration = float(base.episode.source.duration)
        self.question_scene = (SCENE_NAMES.index(m.group(1))
                               if (m := _QUESTION_SCENE.search(q.text)) and m.group(1) in SCENES else -1)
        self.options_parsed = [parse_option(o) for o in q.options]
        ov = base.overview
        self.ov_frac, self.ov_scene, self.ov_objects = detect(ov.images, self.matcher)
        self.ov_times = np.asarray(ov.timestamps, np.float64)
        self.slot_segments = [0] * self.n_crops
        self.crop_feats: dict[int, tuple] = {}  # segment -> (fractions, scenes, objects, times)
        return self._observation(), self._info(info)

    def _check_action(self, action) -> np.ndarray:
        try:
            a = np.asarray(action)
        except Exception:
            a = None
        if (a is None or a.shape != self.action_space.shape or not np.issubdtype(a.dtype, np.number)
                or not np.all(np.isfinite(a)) or not np.all(a == np.round(a))):
            raise ValueError(f"action must be {self.n_crops + 1} integers (MultiDiscrete "
                             f"{self.action_space.nvec.tolist()}), got {action!r}")
        a = a.astype(np.int64)
        if np.any(a < 0) or np.any(a >= self.action_space.nvec):
            raise ValueError(f"action {a.tolist()} out of range: each entry i must be in "
                             f"0..{(self.action_space.nvec - 1).tolist()}[i]")
        return a

    def step(self, action):
        if self.phase is None:
            raise RuntimeError("call reset() before step(), and again after the episode ends")
        a = self._check_action(action)
        base = self.env.unwrapped
        if self.phase == 0:
            self.phase = 1
            self.slot_segments = [int(x) for x in a[: self.n_crops]]
            segments = sorted({s for s in self.slot_segments if s > 0})
            info: dict[str, Any] = {}
            reward, terminated, truncated = 0.0, False, False
            if segments:
                calls = "".join(self._call(s) for s in segments)
                text = (f"<think>\nI will crop {len(segments)} segment(s) of the video: "
                        f"{', '.join(map(str, segments))}.\n</think>\n{calls}")
                _, reward, terminated, truncated, info = self.env.step(text)
                for seg, r in zip(segments, base.last_crops):
                    if r.ok:
                        self.crop_feats[seg] = detect(r.frames.images, self.matcher) + (
                            np.asarray(r.frames.timestamps, np.float64),)
            else:
                info = base._info()
            if terminated or truncated:  # cannot happen with max_turns >= 2, but stay honest
                self.phase = None
            info["crop_segments"] = segments
            return self._observation(), float(reward), bool(terminated), bool(truncated), self._info(info)
        q = base.episode.question
        letter = LETTERS[int(a[-1]) % len(q.options)]
        text = f"<think>\nFrom the frames I saw, the answer is option {letter}.\n</think>\n<answer>{letter}</answer>"
        _, reward, terminated, truncated, info = self.env.step(text)
        self.phase = None
        info["choice"] = letter
        obs = self._observation(final=True)
        return obs, float(reward), bool(terminated), bool(truncated), self._info(info)

    def _call(self, segment: int) -> str:
        a = (segment - 1) * self.duration / self.B
        b = min(self.duration, segment * self.duration / self.B)
        args = {"name": "crop_video", "arguments": {"start_time": round(a, 3), "end_time": round(b, 3)}}
        return f"<tool_call>{json.dumps(args)}</tool_call>"

    def _info(self, info: dict) -> dict:
        info = {k: v for k, v in info.items() if k != "messages"}  # keep VecEnv infos light
        info["phase"] = self.phase
        return info

    # ---- observation ---------------------------------------------------------------------------
    def _observation(self, final: bool = False) -> np.ndarray:
        make = {"overview": self._overview_block, "crops": self._crops_block,
                "question": lambda: self._question_block(final), "options": self._options_block,
                "perception": self._perception}
        obs = np.concatenate([make[b]() for b in self.blocks]).astype(np.float32)
        return np.clip(obs, -1.0, 1.0)

    def _overview_block(self) -> np.ndarray:
        parts = []
        for i in range(self.K):
            parts.append(np.clip(self.ov_frac[i] * 10.0, 0.0, 1.0))
            parts.append(_one_hot(int(self.ov_scene[i]), S))
        return np.concatenate(parts)

    def _crops_block(self) -> np.ndarray:
        parts = []
        for seg in self.slot_segments:
            parts.append(_one_hot(seg, self.B + 1))
            feats = self.crop_feats.get(seg) if seg > 0 else None
            if feats is None or len(feats[0]) == 0:
                parts.append(np.zeros(C + S, np.float32))
            else:
                frac, scenes, _, _ = feats
                parts.append((frac >= self.min_fraction).mean(0).astype(np.float32))
                parts.append(np.bincount(scenes, minlength=S).astype(np.float32) / len(scenes))
        return np.concatenate(parts)

    def _question_block(self, final: bool) -> np.ndarray:
        q = self.env.unwrapped.episode.question
        return np.concatenate([
            _one_hot(FAMILIES.index(q.family) if q.family in FAMILIES else -1, len(FAMILIES)),
            _one_hot(self.question_scene if self.question_scene >= 0 else S, S + 1),
            np.array([1.0 if self.phase == 1 or final else 0.0], np.float32)])

    def _options_block(self) -> np.ndarray:
        parts = []
        for j in range(self.n_options):
            if j < len(self.options_parsed):
                colour, shape, scene, number = self.options_parsed[j]
                parts += [np.ones(1, np.float32), _one_hot(colour, C), _one_hot(shape, SH), _one_hot(scene, S),
                          _one_hot(min(number, MAX_NUMBER - 1) if number >= 0 else -1, MAX_NUMBER)]
            else:
                parts.append(np.zeros(1 + C + SH + S + MAX_NUMBER, np.float32))
        return np.concatenate(parts)

    def _sightings(self):
        """Every frame seen so far: (time, scene, objects), overview and crops together."""
        out = list(zip(self.ov_times.tolist(), self.ov_scene.tolist(), self.ov_objects))
        for _, scenes, objects, times in self.crop_feats.values():
            out += list(zip(times.tolist(), scenes.tolist(), objects))
        return out

    def _perception(self) -> np.ndarray:
        seg_match, per_option = self.perception()
        return np.concatenate([seg_match, per_option.reshape(-1)])

    def support(self) -> np.ndarray:
        """The hand-made evidence-support score of each option slot (0 past the last option)."""
        return self.perception()[1][:, 7]

    def perception(self) -> tuple[np.ndarray, np.ndarray]:
        """``(segment scene match (B,), per-option features (n_options, PER_OPTION))`` from what
        was seen so far; the ``perception`` block of the observation is the two, flattened."""
        seg_match = np.zeros(self.B, np.float32)
        if self.question_scene >= 0:
            seg = np.minimum((self.ov_times / self.duration * self.B).astype(int), self.B - 1)
            for b in range(self.B):
                sel = seg == b
                if sel.any():
                    seg_match[b] = float((self.ov_scene[sel] == self.question_scene).mean())
        sightings = self._sightings()
        first: dict[tuple[int, int], float] = {}
        in_scene: set[tuple[int, int]] = set()
        for t, scene, objects in sightings:
            for obj in objects:
                first[obj] = min(first.get(obj, np.inf), t)
                if scene == self.question_scene:
                    in_scene.add(obj)
        seen_colours = {c for c, _ in first}
        count = len(in_scene)
        per_option = np.zeros((self.n_options, PER_OPTION), np.float32)
        for j, (colour, shape, scene, number) in enumerate(self.options_parsed):
            if colour >= 0:
                key = (colour, shape)
                per_option[j, 0] = 1.0 if key in first else (0.5 if colour in seen_colours else 0.0)
                per_option[j, 1] = 1.0 if key in in_scene else 0.0
                per_option[j, 2] = first[key] / self.duration if key in first else 1.0
            if scene >= 0:
                per_option[j, 3] = float((self.ov_scene == scene).mean())
            if number >= 0 and self.question_scene >= 0:
                per_option[j, 4] = np.clip((number - count) / 8.0, -1.0, 1.0)
                per_option[j, 5] = 1.0 if number == count else 0.0
        # earliest sighting among the options' objects (temporal order as a per-option bit)
        times = [first.get((c, sh), np.inf) if c >= 0 else np.inf for c, sh, _, _ in self.options_parsed]
        if times and np.isfinite(min(times)):
            per_option[int(np.argmin(times)), 6] = 1.0
        # support: how well what was seen fits the option, one scale for every option kind
        for j, (colour, shape, scene, number) in enumerate(self.options_parsed):
            if colour >= 0:  # an object: seen in the scene the question names, else sighted first
                per_option[j, 7] = per_option[j, 1] if self.question_scene >= 0 else per_option[j, 6]
            elif scene >= 0:  # a scene: seen in the overview
                per_option[j, 7] = 1.0 if per_option[j, 3] > 0 else 0.0
            elif number >= 0 and self.question_scene >= 0:  # a count: close to the objects seen
                per_option[j, 7] = max(0.0, 1.0 - abs(number - count) / 3.0)
        return seg_match, per_option

    def render(self):
        return self.env.render()


CROP_RULES = ("none", "uniform", "scene")


def crop_rule_action(env: StructuredActionWrapper, rule: str) -> list[int]:
    """The crop slots of a hand-written crop rule: ``"none"``; ``"uniform"`` (segments spread
    evenly over the video); ``"scene"`` (the segments whose overview frames show the scene the
    question names most, by the perception block's segment match; uniform when the question
    names no scene or the overview never shows it)."""
    if rule not in CROP_RULES:
        raise ValueError(f"crop rule must be one of {CROP_RULES}, got {rule!r}")
    if rule == "none":
        return [0] * env.n_crops
    uniform = [1 + (k * env.B) // env.n_crops for k in range(env.n_crops)]
    if rule == "uniform":
        return uniform
    match = env.perception()[0]
    if not (match > 0).any():
        return uniform
    ranked = [int(b) + 1 for b in np.argsort(-match, kind="stable") if match[b] > 0][: env.n_crops]
    return ranked + [0] * (env.n_crops - len(ranked))


def support_policy(env: StructuredActionWrapper, crops: str = "scene"):
    """A policy with no learning: crop by ``crops`` (see :func:`crop_rule_action`), then answer
    the option whose hand-made support feature is highest (the first on ties). It shows what
    the feature alone is worth, next to what a learner makes of it."""
    if crops not in CROP_RULES:
        raise ValueError(f"crop rule must be one of {CROP_RULES}, got {crops!r}")

    def act(obs) -> np.ndarray:
        if env.phase == 0:
            return np.array(crop_rule_action(env, crops) + [0])
        n = len(env.options_parsed)
        return np.array([0] * env.n_crops + [int(np.argmax(env.support()[:n]))])

    return act


def make_structured_env(split: str = STRUCTURED.split, seed: int = STRUCTURED.world_seed,
                        size: int = STRUCTURED.dataset_size, frame_budget: int = STRUCTURED.frame_budget,
                        frame_size: tuple[int, int] = STRUCTURED.frame_size,
                        crop_max_frames: int = STRUCTURED.crop_max_frames,
                        families: tuple[str, ...] = MCQ_FAMILIES, num_segments: int = 8, n_crops: int = 4,
                        n_options: int = 4, blocks: tuple[str, ...] | None = None,
                        **env_kwargs) -> StructuredActionWrapper:
    """``ParaVT-LongVideo-v0`` on the MCQ families, wrapped in :class:`StructuredActionWrapper`; the env's
    settings are ``STRUCTURED`` with the arguments' changes (``env_kwargs``: any other env setting)."""
    from .sources import SyntheticDataset

    env_kwargs.setdefault("max_calls_per_turn", max(n_crops, 1))
    config = STRUCTURED.replace(split=split, world_seed=seed, dataset_size=size, frame_budget=frame_budget,
                                frame_size=frame_size, crop_max_frames=crop_max_frames, **env_kwargs)
    env = config.replace(dataset=SyntheticDataset(split, seed=seed, size=size, families=families)).make()
    return StructuredActionWrapper(env, num_segments=num_segments, n_crops=n_crops, n_options=n_options,
                                   blocks=blocks)
