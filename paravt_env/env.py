"""``ParaVT-LongVideo-v0``: one question about one long video, answered with crop tools.

The agent first sees an *overview* of K frames, each preceded by its timestamp. Each step
it emits one turn of text: ``<think>...</think>`` then either ``<tool_call>`` blocks
(``crop_video`` with ``start_time``/``end_time``; several in one turn under parallel dispatch)
or ``<answer>...</answer>``. Crops of a turn run concurrently and come back, in call order,
as ``<tool_response>`` blocks in the next observation.

Observation (``Dict``):
    ``frames``       uint8 ``(K_max, H, W, 3)`` overview frames, zero-padded to the largest K
    ``frame_mask``   int8 ``(K_max,)``: 1 where a frame is real
    ``timestamps``   float32 ``(K_max,)`` seconds (0 where padded)
    ``crop_frames``  uint8 ``(max_calls * crop_max_frames, H, W, 3)``: frames the last turn's crops
                     returned when ``subagent="frames"`` (zeros otherwise), with ``crop_mask`` and
                     ``crop_timestamps``
    ``text``         the conversation as text (``Text`` space over printable ASCII; other
                     characters become ``?``; the tail is kept if it grows past ``MAX_TEXT``)
    ``info["messages"]`` holds the same conversation as chat messages with image entries.

Action: the agent's text for one turn (``str``). With a ``think_prefix`` (default
``"<think>\\n"``) the prefix counts as already written: pass the continuation; an action that
already starts with the prefix is not prefixed twice. Bytes are decoded as UTF-8 and any other object is
taken through ``str`` (with a note in ``info["notes"]``); a text past ``MAX_ACTION_CHARS`` is cut to it (with
a note). The PettingZoo twin takes every agent's action the same way.

Reward: 0 until the episode ends, then ``R = R_acc + w_fmt * R_fmt + R_tool`` scored by
:func:`paravt_env.rewards.score` on the full trajectory (prefix and tool responses included).
Each term is in ``info["reward_components"]``.

Termination: on an answer, or on a turn with neither an answer nor a tool call (unparseable).
Truncation: after ``max_turns`` turns without an answer.

Keyword arguments (every default is ``paravt_env.config.DEFAULTS``'s):
    source: ``None``/``"synthetic"`` for the procedural world, or a JSONL/parquet question file
        (our schema or the ParaVT release's ``prompt``/``videos``/``extra_info`` rows).
    video_root: folder that a question file's relative video paths resolve against (default:
        the file's folder). strict: if True, a row whose video is missing stops loading with an
        error naming the file and line; by default such rows are skipped with one warning.
        allow_videos_outside_root: by default every video path must resolve (symlinks too) inside
        the video root, and a row pointing elsewhere stops loading naming the file and line.
    split, world_seed, dataset_size, duration: which synthetic episodes (see ``SyntheticDataset``).
    frame_budget: K, the number of overview frames (ignored when ``nframes_gating``).
    nframes_gating: draw K per reset from ``gating_budgets`` = (4, 8, 16, 32, 64), a function of
        the reset seed only.
    dispatch: ``"parallel"`` (up to ``max_calls_per_turn`` crops per turn) or ``"sequential"``
        (one crop per turn; extra calls are answered with an error).
    max_turns: assistant turns per episode (3). max_calls_per_turn: 5.
    subagent: ``"oracle"`` (a truthful text summary of what the crop's frames show),
        ``"frames"`` (the crop's frames come back as images, LongVT style), or a callable
        ``f(frames: Frames, question: str) -> str`` (e.g. an LMM playing the sub-agent).
    think_prefix: text prefilled at the start of every assistant turn (``None`` for none).
    frame_size: (height, width) of every frame. crop_fps, crop_max_frames: crop sampling.
    reward_config: a :class:`~paravt_env.rewards.RewardConfig`.
    render_mode: ``None`` or ``"rgb_array"`` (a timeline picture of the episode).
    tools: ``False`` advertises no tool (the "without sub-agent" setting): calls are answered with an
        in-band error and never run.
    scoring: ``"trajectory"`` (default: the reward scores the whole trajectory, prefix and tool
        responses included) or ``"generated"`` (the released code's reading, kept to measure its defects:
        only the agent's own text of every turn, joined, without the prefilled prefix and the tool
        responses; whether a tool ran is then inferred from that text, so never, unless the agent writes a
        ``<tool_response>`` itself, which the release credits as a tool that ran). The trajectory holds only
        the env's tool responses: one the agent writes is kept as ``[tool_response]`` there.
    reward_fns: extra reward terms, functions ``f(trajectory, info) -> float | dict[str, float]`` called
        when an episode ends; each term is added to the reward and to ``info["reward_components"]``
        (see :mod:`paravt_env.reward_terms`).

Info (every step): ``messages``, ``frame_budget``, ``family``, ``turn``; tool calls as the released code
counts them: ``num_tool_calls`` = calls that executed (a crop ran and went to the sub-agent; kappa),
``num_tool_calls_emitted`` = parseable calls written in any turn, executed or not (a call in the answering
turn or the last allowed turn, or past the per-turn limit, is emitted only), ``tool_calls_per_turn`` =
executed calls of each assistant turn. At the end: ``reward_components``, ``format_reward`` (this env's
``reward_config``), ``format_reward_common`` (the released PARA-GRPO format on the same text, the metric
that compares runs trained on different rewards), ``format_reward_common_generated`` (that format on the
agent's own tokens alone, as the released code reads a response), ``correct``, ``answer``.
"""

from __future__ import annotations

import math
import os
import re
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .config import DEFAULTS as D  # every constructor default below (paravt_env/config.py)
from .config import GATING_BUDGETS  # noqa: F401  (re-exported)
from .parsing import TOOL_NAME, ToolCall, parse_turn
from .reward_terms import check_reward_fns, extra_terms
from .rewards import RewardConfig, common_format_reward, score
from .sources import MAX_CROP_FRAMES, Episode, Frames, VideoError, load_dataset
from .world import check_size

CHARSET = frozenset(string.printable)
MAX_TEXT = 65536
MAX_SECONDS = 48 * 3600.0  # longest video a source may hold
MAX_ACTION_CHARS = 16384
MAX_SUMMARY_CHARS = 2048  # the paper cuts tool responses at 512 tokens
MAX_NUMBER_CHARS = 32  # a numeric string longer than this is not a timestamp

SYSTEM_PROMPT = """You answer questions about a long video. You see {k} frames sampled uniformly over the \
whole video, each preceded by its timestamp. To look closer, call the tool crop_video, which returns \
what a window of the video shows (sampled at 1 frame per second, at most {max_frames} frames):
<tool_call>{{"name": "crop_video", "arguments": {{"start_time": <seconds>, "end_time": <seconds>}}}}</tool_call>
{dispatch_rule}
Always think first inside <think>...</think>. When you know the answer, reply \
<think>...</think><answer>...</answer>. For multiple choice, answer with the option letter."""

# tools=False: the same episode with no tool advertised (the "without sub-agent" evaluation, and
# plain single-turn GRPO on a VLM); calls written anyway are answered with an in-band error.
NO_TOOL_SYSTEM_PROMPT = """You answer questions about a long video. You see {k} frames sampled uniformly over the \
whole video, each preceded by its timestamp. Always think first inside <think>...</think>, then reply \
<think>...</think><answer>...</answer>. For multiple choice, answer with the option letter."""
NO_TOOL_ERROR = "no tool is available in this episode; answer from the frames you were shown"

DISPATCH_RULES = {
    "parallel": "You may call crop_video up to {max_calls} times in one turn; the calls run in parallel. "
                "You have at most {max_turns} turns.",
    "sequential": "Call crop_video at most once per turn. You have at most {max_turns} turns.",
}


_OUTSIDE_CHARSET = re.compile("[^" + re.escape("".join(sorted(CHARSET))) + "]")
# Besides the grammar's tags: chat and vision tokens (``<|im_end|>``, ``<|image_pad|>``), which a tokenizer
# reads as chat structure or image slots (a tool response holding one makes the policy's next prompt fail to
# render, or lets the agent write chat structure), and the observation text's own image markers.
_STRUCTURAL_TAG = re.compile(r"</?(think|answer|tool_call|tool_code|tool_response|image|video)>|<\|\w+\|>")
_SURROGATE = re.compile("[\ud800-\udfff]")


def neutralize_tags(text: str) -> str:
    """Tool-response text (sub-agent summaries, errors and notes echoing the agent's values) must not forge
    structure (an ``<answer>``, a ``<|im_end|>`` or an ``<|image_pad|>`` inside a tool response), and must
    be text a tokenizer can encode: a lone surrogate, which a JSON escape such as ``"\\ud800"`` in a call
    produces, is written as its escape."""
    text = _STRUCTURAL_TAG.sub(lambda m: m.group(0).replace("<", "[").replace(">", "]"), text)
    return _SURROGATE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


_RESPONSE_TAG = re.compile(r"<(/?)tool_response>")


def neutralize_responses(text: str) -> str:
    """Only the environment writes tool responses into the trajectory it parses and scores. One the agent
    writes itself would hide its text from the parser (an answer inside it would not end the episode) and,
    under ``multi_turn_rules``, from the per-turn checks, which split turns at tool responses."""
    return _RESPONSE_TAG.sub(r"[\1tool_response]", text)


def sanitize(text: str) -> str:
    """Map characters outside the observation charset to '?' so the obs stays in its space."""
    return _OUTSIDE_CHARSET.sub("?", text)


@dataclass
class CropResult:
    """One tool call's fate: a window that ran, or an error the agent reads in-band."""

    call: ToolCall
    window: tuple[float, float] | None = None
    frames: Frames | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def _show(value: Any) -> str:
    """A short, safe rendering of an agent's value for an error message (``repr`` of an int
    past Python's digit limit raises, and a megabyte string must not flood the reply)."""
    if isinstance(value, int) and value.bit_length() > 64:  # no decimal conversion of huge ints
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    try:
        text = repr(value)
    except Exception:  # ValueError from the int-string limit inside a container, a broken __repr__
        return f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def _seconds(text: str) -> float:
    """``"90"``, ``"90s"``, ``"1:30"`` or ``"0:01:30"`` -> seconds (ValueError otherwise)."""
    text = text.strip().removesuffix("s").strip()
    if ":" not in text:
        return float(text)
    parts = text.split(":")
    if len(parts) > 3 or any(not p.strip() or p.strip()[0] in "+-" for p in parts):
        raise ValueError(text)
    x = 0.0
    for part in parts:
        x = x * 60 + float(part)
    return x


def _number(value: Any, name: str) -> float:
    """A tool call's time argument as finite seconds; ValueError (shown to the agent) otherwise.

    Takes ints of any size, floats and numeric strings (``"12.5"``, ``"90s"``, ``"1:30"``);
    never raises anything but ValueError, whatever the value.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number of seconds, got a boolean")
    if isinstance(value, int):
        if abs(value) > 2 ** 1000:  # float() would overflow; no video is that long
            raise ValueError(f"{name} is out of range ({_show(value)})")
        x = float(value)
    elif isinstance(value, float):
        x = value
    elif isinstance(value, str) and len(value) <= MAX_NUMBER_CHARS:
        try:
            x = _seconds(value)
        except ValueError:
            raise ValueError(f"{name} must be a number of seconds, got {_show(value)}") from None
    else:
        raise ValueError(f"{name} must be a number of seconds, got {_show(value)}")
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {_show(value)}")
    return x + 0.0  # -0.0 -> 0.0


def _index(value: Any, name: str) -> int:
    """A whole number from the caller (reset options): ints, numpy ints and integral floats;
    a clear ValueError for anything else (bools, strings, nan, 1e999, ...)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be an integer, got {_show(value)}")
    if isinstance(value, (float, np.floating)) and not (math.isfinite(value) and float(value).is_integer()):
        raise ValueError(f"{name} must be an integer, got {_show(value)}")
    return int(value)


_INT = (int, np.integer)
_REAL = (int, float, np.integer, np.floating)
_BOOL = (bool, np.bool_)
_PATH = (str, os.PathLike)


def _check_arg(name: str, value: Any, kinds: tuple, want: str, ok: Callable[[Any], bool] | None = None,
               optional: bool = False) -> None:
    """Constructor arguments fail at construction, naming the argument: a wrong type would otherwise
    surface at the first step as an error far from its cause. Booleans are not numbers here."""
    if optional and value is None:
        return
    if not isinstance(value, kinds) or (isinstance(value, _BOOL) and _BOOL[0] not in kinds):
        raise TypeError(f"{name} must be {want}, got {_show(value)}")
    if ok is not None and not ok(value):
        raise ValueError(f"{name} must be {want}, got {_show(value)}")


class AnyText(spaces.Text):
    """A Text space holding any string up to its length (``step`` takes any text: an answer in any
    script is valid); ``sample`` draws from the printable charset."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class ParaVTLongVideoEnv(gym.Env):
    __doc__ = __doc__
    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}

    def __init__(self, source: str | None = D.source, split: str = D.split, world_seed: int = D.world_seed,
                 dataset_size: int = D.dataset_size, duration: float | None = D.duration,
                 frame_budget: int = D.frame_budget, nframes_gating: bool = D.nframes_gating,
                 gating_budgets: tuple[int, ...] = D.gating_budgets, dispatch: str = D.dispatch,
                 max_turns: int = D.max_turns, max_calls_per_turn: int = D.max_calls_per_turn,
                 subagent: str | Callable[[Frames, str], str] = D.subagent,
                 think_prefix: str | None = D.think_prefix, frame_size: tuple[int, int] = D.frame_size,
                 crop_fps: float = D.crop_fps, crop_max_frames: int = D.crop_max_frames,
                 reward_config: RewardConfig | None = D.reward_config, render_mode: str | None = D.render_mode,
                 dataset=D.dataset, video_root: str | None = D.video_root, strict: bool = D.strict,
                 allow_videos_outside_root: bool = D.allow_videos_outside_root, tools: bool = D.tools,
                 reward_fns=D.reward_fns, scoring: str = D.scoring):
        _check_arg("source", source, _PATH, "a question file's path or 'synthetic'", optional=True)
        _check_arg("split", split, (str,), "a split name")
        _check_arg("world_seed", world_seed, _INT, "an integer >= 0", lambda v: v >= 0)
        _check_arg("dataset_size", dataset_size, _INT, "an integer >= 1", lambda v: v >= 1)
        _check_arg("duration", duration, _REAL, "None or seconds > 0", lambda v: math.isfinite(v) and v > 0,
                   optional=True)
        _check_arg("frame_budget", frame_budget, _INT, "an integer")
        for name in ("nframes_gating", "strict", "allow_videos_outside_root", "tools"):
            _check_arg(name, locals()[name], _BOOL, "True or False")
        _check_arg("gating_budgets", gating_budgets, (tuple, list), "a tuple of integers",
                   lambda v: all(isinstance(k, _INT) and not isinstance(k, _BOOL) for k in v))
        _check_arg("max_turns", max_turns, _INT, "an integer in 1..32", lambda v: 1 <= v <= 32)
        _check_arg("max_calls_per_turn", max_calls_per_turn, _INT, "an integer in 1..16", lambda v: 1 <= v <= 16)
        _check_arg("think_prefix", think_prefix, (str,), "a string or None", optional=True)
        _check_arg("crop_fps", crop_fps, _REAL, "a number of frames per second in (0, 30]",
                   lambda v: 0 < v <= 30)
        _check_arg("crop_max_frames", crop_max_frames, _INT, f"an integer in 1..{MAX_CROP_FRAMES}",
                   lambda v: 1 <= v <= MAX_CROP_FRAMES)
        _check_arg("reward_config", reward_config, (RewardConfig,), "a RewardConfig or None", optional=True)
        _check_arg("video_root", video_root, _PATH, "a folder's path or None", optional=True)
        if dispatch not in DISPATCH_RULES:
            raise ValueError(f"dispatch must be one of {tuple(DISPATCH_RULES)}, got {dispatch!r}")
        if not (subagent in ("oracle", "frames") or callable(subagent)):
            raise ValueError(f"subagent must be 'oracle', 'frames' or a callable, got {subagent!r}")
        budgets = tuple(int(k) for k in gating_budgets) if nframes_gating else (int(frame_budget),)
        if not budgets or any(not 1 <= k <= 512 for k in budgets):
            raise ValueError(f"frame budgets must be in 1..512, got {budgets}")
        if not 1 <= max_turns <= 32 or not 1 <= max_calls_per_turn <= 16:
            raise ValueError("max_turns must be in 1..32 and max_calls_per_turn in 1..16")
        if not 1 <= int(crop_max_frames) <= MAX_CROP_FRAMES or not 0 < float(crop_fps) <= 30:
            raise ValueError(f"crop_max_frames must be in 1..{MAX_CROP_FRAMES} and crop_fps in (0, 30]")
        if scoring not in ("trajectory", "generated"):
            raise ValueError(f"scoring must be 'trajectory' or 'generated', got {scoring!r}")
        self.scoring = scoring
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.dataset = dataset if dataset is not None else load_dataset(
            source, split=split, seed=world_seed,
            **({"size": dataset_size, "duration": duration} if source in (None, "synthetic")
               else {"video_root": video_root, "strict": strict, "allow_outside_root": allow_videos_outside_root}))
        self.budgets, self.nframes_gating = budgets, nframes_gating
        self.dispatch, self.max_turns, self.max_calls = dispatch, max_turns, max_calls_per_turn
        self.subagent, self.think_prefix = subagent, think_prefix or ""
        self.frame_size = check_size(frame_size)
        self.crop_fps, self.crop_max_frames = float(crop_fps), int(crop_max_frames)
        self.reward_config = reward_config or RewardConfig()
        self.render_mode = render_mode
        self.tools = bool(tools)
        self.reward_fns = check_reward_fns(reward_fns)

        h, w = self.frame_size
        k_max, c_max = max(budgets), self.max_calls * self.crop_max_frames
        self.observation_space = spaces.Dict({
            "frames": spaces.Box(0, 255, (k_max, h, w, 3), np.uint8),
            "frame_mask": spaces.Box(0, 1, (k_max,), np.int8),
            "timestamps": spaces.Box(0.0, MAX_SECONDS, (k_max,), np.float32),
            "crop_frames": spaces.Box(0, 255, (c_max, h, w, 3), np.uint8),
            "crop_mask": spaces.Box(0, 1, (c_max,), np.int8),
            "crop_timestamps": spaces.Box(0.0, MAX_SECONDS, (c_max,), np.float32),
            "text": spaces.Text(MAX_TEXT, min_length=0, charset="".join(sorted(CHARSET))),  # sanitized
        })
        self.action_space = AnyText(MAX_ACTION_CHARS, min_length=0, charset="".join(sorted(CHARSET)))
        self._pool: ThreadPoolExecutor | None = None
        self.episode: Episode | None = None

    # ---- episode lifecycle -----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode. ``options`` may pin ``episode_index`` and/or ``frame_budget``."""
        super().reset(seed=seed)
        options = options or {}
        if not isinstance(options, dict):
            raise ValueError(f"options must be a dict, got {type(options).__name__}")
        index = options.get("episode_index")
        if index is None:
            index = int(self.np_random.integers(len(self.dataset)))
        if not 0 <= _index(index, "episode_index") < len(self.dataset):
            raise ValueError(f"episode_index {_show(index)} outside 0..{len(self.dataset) - 1}")
        k = options.get("frame_budget")
        if k is None:
            k = self.budgets[int(self.np_random.integers(len(self.budgets)))]
        if _index(k, "frame_budget") not in self.budgets:
            raise ValueError(f"frame_budget {_show(k)} not among this env's budgets {self.budgets}")
        self.episode = self.dataset[int(index)]
        self.episode_index, self.k = int(index), int(k)
        self.overview = self.episode.source.overview(self.k, self.frame_size)
        self.turn = 0
        self.done = False
        self.trajectory = ""  # every assistant turn (prefix included) and tool response, in order
        self.agent_text = ""  # the agent's own text of every turn (no prefix, no tool responses)
        self.calls_emitted = 0  # parseable calls written in any turn, executed or not
        self.calls_executed_per_turn: list[int] = []  # crops that ran, per assistant turn
        self.executed_windows: list[tuple[float, float]] = []
        self.last_crops: list[CropResult] = []
        self.last_reward_info: dict = {}
        self.messages = self._initial_messages()
        return self._observation(), self._info()

    def _initial_messages(self) -> list[dict]:
        q = self.episode.question
        system = SYSTEM_PROMPT.format(
            k=self.k, max_frames=self.crop_max_frames,
            dispatch_rule=DISPATCH_RULES[self.dispatch].format(max_calls=self.max_calls, max_turns=self.max_turns)
        ) if self.tools else NO_TOOL_SYSTEM_PROMPT.format(k=self.k)
        content: list[dict] = []
        for img, t in zip(self.overview.images, self.overview.timestamps):
            content.append({"type": "text", "text": f"<{t:.1f} seconds>"})
            content.append({"type": "image", "image": img})
        content.append({"type": "text", "text": f"The video lasts {self.episode.source.duration:.1f} seconds.\n"
                                                f"Question: {q.prompt()}"})
        return [{"role": "system", "content": system}, {"role": "user", "content": content}]

    def step(self, action):
        finished, parsed, notes, results = self.begin_turn(action)
        if finished is not None:
            return finished
        self.deliver(results, self.summarize(results))
        return self._observation(), 0.0, False, False, self._info(parse=parsed, notes=notes)

    def begin_turn(self, action):
        """Record and parse one assistant turn; end the episode or run its crops.

        Returns ``(step_result, parsed, notes, crop_results)``: ``step_result`` is the final
        ``step`` tuple when the episode ended, else ``None`` and the crops await sub-agent
        summaries (:meth:`summarize` or, in the PettingZoo twin, the sub-agents) and
        :meth:`deliver`.
        """
        if self.episode is None or self.done:
            raise RuntimeError("call reset() before step(), and again after the episode ends")
        text, notes = self._coerce_action(action)
        if self.think_prefix and not text.startswith(self.think_prefix):
            text = self.think_prefix + text
        self.turn += 1
        self.agent_text += text[len(self.think_prefix):]  # the prefix is prefilled, never the agent's
        self.messages.append({"role": "assistant", "content": text})
        text = neutralize_responses(text)
        self.trajectory += text
        parsed = parse_turn(text)
        calls = list(parsed.tool_calls)
        self.calls_emitted += len(parsed.parseable_tool_calls)
        self.calls_executed_per_turn.append(0)
        self.last_crops = []
        # A call in the answering turn or in the last allowed turn is emitted but never executed.
        if parsed.answer is not None or not calls or self.turn >= self.max_turns:
            terminated = parsed.answer is not None or not calls
            return self._finish(parsed, notes, terminated=terminated, truncated=not terminated), parsed, notes, []
        return None, parsed, notes, self.run_calls(calls)

    def _coerce_action(self, action) -> tuple[str, list[str]]:
        notes = []
        if isinstance(action, bytes):
            action = action.decode("utf-8", errors="replace")
        elif not isinstance(action, str):
            notes.append(f"action of type {type(action).__name__} converted to text")
            try:
                action = str(action)
            except Exception:  # an int past the int-string limit, a broken __str__
                action = ""
        if len(action) > MAX_ACTION_CHARS:
            notes.append(f"action truncated from {len(action)} to {MAX_ACTION_CHARS} characters")
            action = action[:MAX_ACTION_CHARS]
        return action, notes

    def _finish(self, parsed, notes, terminated: bool, truncated: bool):
        q = self.episode.question
        released = self.scoring == "generated"
        breakdown = score(self.agent_text if released else self.trajectory, ground_truth=q.answer,
                          answer_type=q.answer_type, options=q.options,
                          tool_executed=None if released else bool(self.executed_windows),
                          config=self.reward_config, question=q.text)
        self.done = True
        components = dict(breakdown.components, accuracy=breakdown.accuracy, format=breakdown.format,
                          tool=breakdown.tool)
        total = float(breakdown.total)
        if self.reward_fns:
            facts = {"question": q.text, "options": q.options, "ground_truth": q.answer,
                     "answer_type": q.answer_type, "family": q.family, "question_id": q.id,
                     "answer": parsed.answer, "correct": breakdown.correct, "reward_components": components,
                     "num_tool_calls": len(self.executed_windows), "num_tool_calls_emitted": self.calls_emitted,
                     "frame_budget": self.k, "turns": self.turn}
            extra = extra_terms(self.reward_fns, self.trajectory, facts, taken=components)
            components.update(extra)
            total += sum(extra.values())
        self.last_reward_info = {
            "reward_components": components,
            "format_reward": breakdown.format,
            # the released PARA-GRPO format on the same text, whatever this env's reward_config: one
            # format metric that ablation rows trained on different rewards can be compared by
            "format_reward_common": common_format_reward(self.trajectory),
            # the same format read as the released code reads it: the agent's own tokens only (no prefilled
            # <think>, no tool responses)
            "format_reward_common_generated": common_format_reward(self.agent_text),
            "correct": breakdown.correct,
            "answer": parsed.answer,
        }
        return self._observation(), total, terminated, truncated, self._info(parse=parsed, notes=notes)

    # ---- tools ---------------------------------------------------------------------------------
    def run_calls(self, calls: list[ToolCall]) -> list[CropResult]:
        """Validate every call, then crop the valid ones concurrently; results in call order."""
        results = [self._validate(c) for c in calls]
        allowed = 1 if self.dispatch == "sequential" else self.max_calls
        for i, r in enumerate(results):
            if not self.tools and r.ok:
                r.error = NO_TOOL_ERROR
            elif i >= allowed and r.ok:
                r.error = ("sequential dispatch runs one call per turn; this call was not run"
                           if self.dispatch == "sequential"
                           else f"at most {self.max_calls} calls per turn; this call was not run")
        todo = [r for r in results if r.ok]
        if todo:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_calls, thread_name_prefix="crop")
            futures = [self._pool.submit(self._crop, r.window) for r in todo]
            for r, fut in zip(todo, futures):
                try:
                    r.frames = fut.result()
                except VideoError as exc:
                    r.error = str(exc)
        for r in results:
            if r.ok:
                self.executed_windows.append(r.window)
        if self.calls_executed_per_turn:
            self.calls_executed_per_turn[-1] += sum(r.ok for r in results)
        return results

    def _crop(self, window: tuple[float, float]) -> Frames:
        return self.episode.source.crop(window[0], window[1], self.crop_fps, self.crop_max_frames,
                                        self.frame_size)

    def _validate(self, call: ToolCall) -> CropResult:
        r = CropResult(call)
        if call.error is not None or call.name is None:
            r.error = call.error or "unparseable tool call"
        elif call.name != TOOL_NAME:
            r.error = f"unknown tool {str(call.name)[:40]!r}; the only tool is {TOOL_NAME}"
        elif not isinstance(call.arguments, dict):
            r.error = "arguments must be an object"
        else:
            args = call.arguments
            missing = [k for k in ("start_time", "end_time") if k not in args]
            if missing:
                r.error = f"missing argument(s): {', '.join(missing)}"
                return r
            try:
                start, end = _number(args["start_time"], "start_time"), _number(args["end_time"], "end_time")
            except ValueError as exc:
                r.error = str(exc)
                return r
            if start >= end:
                r.error = f"start_time ({start:g}) must be before end_time ({end:g})"
                return r
            duration = self.episode.source.duration
            lo, hi = max(0.0, start), min(duration, end)
            if lo >= hi:
                r.error = f"window [{start:g}, {end:g}] s lies outside the video (0 to {duration:.1f} s)"
                return r
            if (lo, hi) != (start, end):
                r.notes.append(f"window clamped to the video: [{lo:.1f}, {hi:.1f}] s")
            extra = sorted(set(args) - {"start_time", "end_time", "video_path"})
            if extra:
                r.notes.append(f"ignored argument(s): {', '.join(str(e)[:20] for e in extra[:5])}")
            r.window = (lo, hi)
        return r

    def summarize(self, results: list[CropResult]) -> list[str]:
        """The sub-agent's text for each successful crop (the built-in sub-agents)."""
        question = self.episode.question.prompt()
        out = []
        for r in results:
            if not r.ok:
                out.append("")
            elif self.subagent == "oracle":
                out.append(self.episode.source.caption(r.frames.timestamps)
                           or "No caption is available for this video source.")
            elif self.subagent == "frames":
                out.append("")
            else:
                try:
                    out.append(str(self.subagent(r.frames, question)))
                except Exception as exc:  # a faulty sub-agent must not crash the episode
                    out.append(f"(sub-agent failed: {type(exc).__name__})")
        return out

    def deliver(self, results: list[CropResult], summaries: list[str]) -> None:
        """Append the tool responses, in call order, to the trajectory and the messages."""
        text_parts, content = [], []
        for r, summary in zip(results, summaries):
            if r.ok:
                a, b = r.window
                head = f"crop_video {a:.1f}-{b:.1f} s ({len(r.frames.timestamps)} frames)"
                head += "".join(f" [{n}]" for n in r.notes)
                body = f"{head}: {summary[:MAX_SUMMARY_CHARS]}" if summary else f"{head}:"
            else:
                body = f"Error: {r.error}"
            body = neutralize_tags(body)  # summaries, and errors and notes echoing the agent's values
            text = f"<tool_response>\n{body}\n</tool_response>\n"
            text_parts.append(text)
            if r.ok and self.subagent == "frames":
                content.append({"type": "text", "text": f"<tool_response>\n{body}\n"})
                for img, t in zip(r.frames.images, r.frames.timestamps):
                    content.append({"type": "text", "text": f"<{t:.1f} seconds>"})
                    content.append({"type": "image", "image": img})
                content.append({"type": "text", "text": "\n</tool_response>\n"})
            else:
                content.append({"type": "text", "text": text})
        self.last_crops = results
        self.trajectory += "".join(text_parts)
        self.messages.append({"role": "user", "content": content})

    # ---- observation -------------------------------------------------------------------------
    def conversation_text(self) -> str:
        parts = []
        for m in self.messages:
            c = m["content"]
            body = c if isinstance(c, str) else "".join(
                p["text"] if p["type"] == "text" else "<image>" for p in c)
            parts.append(f"<|{m['role']}|>\n{body}\n")
        return "".join(parts)

    def _observation(self) -> dict:
        space = self.observation_space
        k_max = space["frames"].shape[0]
        frames = np.zeros(space["frames"].shape, np.uint8)
        mask = np.zeros(k_max, np.int8)
        stamps = np.zeros(k_max, np.float32)
        frames[: self.k] = self.overview.images
        mask[: self.k] = 1
        stamps[: self.k] = self.overview.timestamps
        crop_frames = np.zeros(space["crop_frames"].shape, np.uint8)
        crop_mask = np.zeros(space["crop_mask"].shape, np.int8)
        crop_stamps = np.zeros(space["crop_timestamps"].shape, np.float32)
        if self.subagent == "frames":
            i = 0
            for r in self.last_crops:
                if r.ok:
                    n = len(r.frames.timestamps)
                    crop_frames[i:i + n] = r.frames.images
                    crop_stamps[i:i + n] = r.frames.timestamps
                    crop_mask[i:i + n] = 1
                    i += n
        text = sanitize(self.conversation_text())
        if len(text) > MAX_TEXT:
            text = text[-MAX_TEXT:]
        return {"frames": frames, "frame_mask": mask, "timestamps": stamps, "crop_frames": crop_frames,
                "crop_mask": crop_mask, "crop_timestamps": crop_stamps, "text": text}

    def _info(self, parse=None, notes=()) -> dict:
        q = self.episode.question
        info = {
            "messages": self.messages,
            "question_id": q.id,
            "family": q.family,
            "answer_type": q.answer_type,
            "frame_budget": self.k,
            "episode_index": self.episode_index,
            "turn": self.turn,
            "num_tool_calls": len(self.executed_windows),
            "num_tool_calls_emitted": self.calls_emitted,
            "tool_calls_per_turn": list(self.calls_executed_per_turn),
            "tool_windows": list(self.executed_windows),
            "video_duration": self.episode.source.duration,
            "notes": list(notes),
        }
        if parse is not None:
            info["parse"] = {
                "think_closed": parse.think_closed, "answer": parse.answer,
                "num_tool_calls": len(parse.tool_calls),
                "tool_call_errors": [c.error for c in parse.tool_calls if c.error],
                "tool_errors": [r.error for r in self.last_crops if not r.ok],
                "tags_balanced": parse.tags_balanced, "errors": list(parse.errors),
            }
        info.update(self.last_reward_info)
        return info

    # ---- rendering ------------------------------------------------------------------------------
    def render(self):
        if self.render_mode != "rgb_array" or self.episode is None:
            return None
        from .render import draw_timeline

        return draw_timeline(self)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
