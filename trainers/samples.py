"""Sample rollouts a person can look at: finished evaluation episodes as plain records and pictures.

    capture(env, info, reward, index)   one finished episode -> Sample (a JSON-able record + pictures),
                                         taken while the env still holds the episode
    write_samples(run_dir, step, ...)   RUN_DIR/samples/step_000010/{records.json, *.png}, and the same
                                         samples to TensorBoard (markdown text + timeline image)
    to_markdown(record)                 the TensorBoard text of one sample
    read_step(step_dir)                 the records of one step folder (what trainers/view.py renders)

Crop frames are cut again from the episode's video at the env's crop settings: a source's crop is a
pure function of the window (synthetic videos render, files decode the same frames), so these are
the frames the sub-agent saw, whichever sub-agent answered.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw

SAMPLES_DIR = "samples"
RECORDS = "records.json"
FORMAT_VERSION = 1
_FRAME_LABEL = re.compile(r"^<\d+(\.\d+)? seconds>$")  # the env's timestamp text before each image
_OPEN, _CLOSE = "<tool_response>\n", "\n</tool_response>\n"


@dataclass
class Sample:
    record: dict                                              # plain data only (json.dumps works)
    images: dict[str, np.ndarray] = field(default_factory=dict)  # file name -> RGB uint8 picture


def step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / SAMPLES_DIR / f"step_{int(step):06d}"


# ============================================================================================
# capture
# ============================================================================================
def capture(env, info: dict, reward: float, index: int = 0) -> Sample:
    """Record a finished episode of ``env`` (a ParaVTLongVideoEnv): question, overview, every turn's
    text, every executed crop's window, frames and tool response, the reward terms and the outcome.
    Call it before the env is reset again."""
    from paravt_env.render import draw_timeline

    ep, q = env.episode, env.episode.question
    prefix = f"sample{int(index)}"
    images = {f"{prefix}_timeline.png": draw_timeline(env)}
    overview = frame_grid(env.overview.images, env.overview.timestamps)
    if overview is not None:
        images[f"{prefix}_overview.png"] = overview
    turns, windows = [], list(env.executed_windows)
    responses = [resp for m in env.messages[2:] if m["role"] != "assistant" for resp in _tool_responses(m["content"])]
    executed = [r for r in responses if r["executed"]]
    if len(executed) != len(windows):  # the env's messages and window list disagree: show text only
        windows = [None] * len(executed)
    windows_left = iter(windows)
    n_assistant = 0
    for m in env.messages[2:]:
        if m["role"] == "assistant":
            n_assistant += 1
            turns.append({"role": "assistant", "turn": n_assistant, "text": str(m["content"])})
            continue
        out = []
        for j, resp in enumerate(_tool_responses(m["content"])):
            item = {"text": resp["text"], "executed": resp["executed"], "window": None, "image": None,
                    "timestamps": []}
            w = next(windows_left) if resp["executed"] else None
            if w is not None:
                item["window"] = [float(w[0]), float(w[1])]
                frames = ep.source.crop(w[0], w[1], env.crop_fps, env.crop_max_frames, env.frame_size)
                item["timestamps"] = [round(float(t), 3) for t in frames.timestamps]
                grid = frame_grid(frames.images, frames.timestamps)
                if grid is not None:
                    name = f"{prefix}_turn{n_assistant}_crop{j}.png"
                    images[name] = grid
                    item["image"] = name
            out.append(item)
        turns.append({"role": "tool", "turn": n_assistant, "responses": out})
    answer = info.get("answer")
    record = {
        "index": int(index),
        "episode_index": int(env.episode_index),
        "question_id": str(q.id),
        "family": str(q.family),
        "question": q.prompt(),
        "answer_type": str(q.answer_type),
        "truth": str(q.answer),
        "evidence": [[float(a), float(b)] for a, b in q.evidence],
        "duration": float(ep.source.duration),
        "frame_budget": int(env.k),
        "dispatch": str(env.dispatch),
        "subagent": env.subagent if isinstance(env.subagent, str) else "model",
        "overview": {"image": f"{prefix}_overview.png" if overview is not None else None,
                     "timestamps": [round(float(t), 3) for t in env.overview.timestamps]},
        "timeline": f"{prefix}_timeline.png",
        "turns": turns,
        "answer": None if answer is None else str(answer),
        "correct": bool(info.get("correct", False)),
        "reward": float(reward),
        "reward_components": {str(k): float(v) for k, v in info.get("reward_components", {}).items()},
        "format_reward": float(info.get("format_reward", 0.0)),
        "format_reward_common": float(info.get("format_reward_common", 0.0)),
        "num_tool_calls": int(info.get("num_tool_calls", 0)),
        "num_tool_calls_emitted": int(info.get("num_tool_calls_emitted", 0)),
        "tool_calls_per_turn": [int(n) for n in info.get("tool_calls_per_turn", [])],
    }
    return Sample(record, images)


def _tool_responses(content) -> list[dict]:
    """Split one tool message (the env's content parts) into its responses, in call order. The env
    opens each response with a text part starting '<tool_response>'; an executed crop's body starts
    with 'crop_video', a refused or failed call's with 'Error:'. Frame images and their timestamp
    labels (sub-agent 'frames') are left out here: the frames are cut again in `capture`."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    out: list[dict] = []
    for part in content:
        if part.get("type") != "text":
            continue
        text = str(part.get("text", ""))
        if text.startswith(_OPEN):
            out.append({"text": ""})
        elif not out or _FRAME_LABEL.match(text):
            continue
        out[-1]["text"] += text
    for r in out:
        r["text"] = r["text"].removeprefix(_OPEN).removesuffix(_CLOSE).strip("\n")
        r["executed"] = r["text"].startswith("crop_video ")
    return out


def frame_grid(images: np.ndarray, timestamps: Sequence[float], columns: int = 16) -> np.ndarray | None:
    """Frames side by side (``columns`` per row), each scaled to 64-128 px on its short side and
    labelled with its time, as one RGB uint8 picture; None for no frames."""
    images = np.asarray(images)
    n = len(images)
    if n == 0:
        return None
    h, w = images.shape[1:3]
    short = min(h, w)
    factor = math.ceil(64 / short) if short < 64 else (128 / short if short > 128 else 1)
    ch, cw = max(1, round(h * factor)), max(1, round(w * factor))
    pad, label = 4, 14
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    cell_w = max(cw, 44)  # room for a '1234.5 s' label under a small frame
    img = Image.new("RGB", (pad + cols * (cell_w + pad), pad + rows * (ch + label + pad)), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for i, (frame, t) in enumerate(zip(images, timestamps)):
        x = pad + (i % cols) * (cell_w + pad)
        y = pad + (i // cols) * (ch + label + pad)
        img.paste(Image.fromarray(np.ascontiguousarray(frame[..., :3])).resize((cw, ch), Image.NEAREST), (x, y))
        draw.text((x, y + ch + 1), f"{float(t):.1f} s", fill=(60, 60, 60))
    return np.asarray(img)


# ============================================================================================
# storage and TensorBoard
# ============================================================================================
def write_samples(run_dir: str | os.PathLike, step: int, samples: Sequence[Sample], writer=None) -> Path:
    """Write RUN_DIR/samples/step_NNNNNN/ (records.json and the pictures; a folder left by an
    earlier attempt at this step is replaced whole) and, given a SummaryWriter, one markdown text
    and one timeline image per sample under eval_samples/<i>."""
    out = step_dir(run_dir, step)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    records = []
    for s in samples:
        for name, picture in s.images.items():
            Image.fromarray(picture).save(tmp / name, compress_level=1)  # fast; these are small
        records.append(s.record)
    doc = {"version": FORMAT_VERSION, "step": int(step), "samples": records}
    (tmp / RECORDS).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    if writer is not None:
        for s in samples:
            i = s.record["index"]
            writer.add_text(f"eval_samples/{i}", to_markdown(s.record), step)
            timeline = s.images.get(s.record["timeline"])
            if timeline is not None:
                writer.add_image(f"eval_samples/{i}/timeline", timeline, step, dataformats="HWC")
    return out


def read_step(folder: str | os.PathLike) -> dict:
    """records.json of one step folder, checked for shape; ValueError naming the file otherwise."""
    path = Path(folder) / RECORDS
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list) \
            or not all(isinstance(r, dict) for r in doc["samples"]):
        raise ValueError(f"{path}: not a samples file (expected an object with a 'samples' list of objects)")
    return doc


# ============================================================================================
# markdown for TensorBoard
# ============================================================================================
def _code(text: Any) -> str:
    """An indented markdown code block: shown verbatim (tags included), nothing inside can end it."""
    lines = str(text).splitlines() or [""]
    return "\n".join("    " + line for line in lines)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|>])")


def _inline(text: Any) -> str:
    """Text safe to place in a markdown line: no markup, no HTML, one line."""
    text = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def to_markdown(rec: dict) -> str:
    """One sample as TensorBoard markdown. Every piece of model or dataset text sits in an indented
    code block or is escaped, so tags like <think> show as written and nothing renders as HTML."""
    verdict = "RIGHT" if rec.get("correct") else "WRONG"
    out = [f"**sample {_inline(rec.get('index', ''))}: {verdict}**, reward {rec.get('reward', 0.0):.3f}, "
           f"question {_inline(rec.get('question_id', ''))} ({_inline(rec.get('family', ''))}), "
           f"K = {_inline(rec.get('frame_budget', ''))}, {_inline(rec.get('num_tool_calls', 0))} tool call(s) executed",
           "", "**question**", "", _code(rec.get("question", "")), "",
           _code(f"truth:  {rec.get('truth')}\nanswer: {rec.get('answer')}"), ""]
    comps = rec.get("reward_components", {})
    if comps:
        out += ["| reward term | value |", "|---|---|"]
        out += [f"| {_inline(k)} | {float(v):.3f} |" for k, v in comps.items()]
        out.append("")
    for t in rec.get("turns", []):
        if t.get("role") == "assistant":
            out += [f"**turn {_inline(t.get('turn', ''))}: assistant**", "", _code(t.get("text", "")), ""]
        else:
            out += [f"**after turn {_inline(t.get('turn', ''))}: tool responses**", ""]
            out += [_code("\n".join(r.get("text", "") for r in t.get("responses", []))), ""]
    return "\n".join(out)
