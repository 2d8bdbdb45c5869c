"""Export synthetic episodes as real mp4 files plus ``episodes.jsonl``.

    python -m paravt_env.export --out DIR --n N --seed S [--split test] [--fps 2] [--release-format]

The JSONL follows the schema the file source reads (see README), or with ``--release-format`` the ParaVT
release's rows (``prompt`` / ``videos`` / ``extra_info``), so an export read back through
:class:`~paravt_env.sources.FileDataset` gives the same questions, and frames decoded at time t match the
world's render of t within codec tolerance.
"""

from __future__ import annotations

import argparse
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .sources import SPLITS, SyntheticDataset
from .world import SyntheticVideo, check_size


def write_video(video: SyntheticVideo, path: Path, fps: float = 2.0, size=(240, 320),
                codec: str = "libx264", batch: int = 256) -> None:
    """Encode ``video`` frame by frame (frame i shows time i / fps), in bounded batches."""
    import av

    h, w = check_size(size)
    if h % 2 or w % 2:
        raise ValueError(f"frame size {h}x{w}: yuv420p needs an even height and width")
    if not (math.isfinite(fps) and 0 < fps <= 30):
        raise ValueError(f"fps must be in (0, 30], got {fps!r}")
    n = int(np.floor(video.duration * fps))
    with av.open(str(path), "w") as container:
        # PyAV needs an int or a Fraction: a float rate such as 2.5 fails inside add_stream
        stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": "18", "preset": "veryfast"}
        for lo in range(0, n, batch):
            times = np.arange(lo, min(n, lo + batch)) / fps
            for img in video.frames_at(times, (h, w)):
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


# our answer types -> the release's question_type
RELEASE_TYPES = {"mcq": "mcq", "grounding": "tvg", "open": "oe"}


def release_row(question, video: str) -> dict:
    """``question`` about ``video`` as a ParaVT release row: the prompt's user message with the ``<video>`` marker
    and the lettered options, ``videos``, and ``extra_info`` (JSON text) holding the answer and question type."""
    info = {"id": question.id, "answer": question.answer, "question_type": RELEASE_TYPES[question.answer_type],
            "family": question.family, "evidence": [list(w) for w in question.evidence]}
    return {"prompt": [{"role": "user", "content": "<video>\n" + question.prompt()}], "videos": [{"video": video}],
            "extra_info": json.dumps(info)}


def export(out: str | Path, n: int, seed: int = 0, split: str = "test", fps: float = 2.0,
           size=(240, 320), duration: float | None = None, codec: str = "libx264",
           release_format: bool = False) -> Path:
    """Write the first ``n`` episodes of a split (rows in the release's shape with ``release_format``); returns
    the path of ``episodes.jsonl``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dataset = SyntheticDataset(split=split, seed=seed, size=n, duration=duration)
    written: set[int] = set()
    rows = []
    for i in tqdm(range(n), desc="export", unit="episode"):
        index = dataset.video_index(i)
        episode = dataset[i]
        name = f"video_{seed}_{index}.mp4"
        if index not in written:
            write_video(episode.source.video, out / name, fps=fps, size=size, codec=codec)
            written.add(index)
        rows.append(release_row(episode.question, name) if release_format
                    else {**episode.question.to_dict(), "video": name})
    path = out / "episodes.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--n", type=int, default=12, help="number of episodes (6 per video)")
    p.add_argument("--seed", type=int, default=0, help="world seed")
    p.add_argument("--split", choices=SPLITS, default="test")
    p.add_argument("--fps", type=float, default=2.0, help="frames per second of the mp4")
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--duration", type=float, default=None, help="seconds per video (default: world's)")
    p.add_argument("--codec", default="libx264", help="PyAV encoder, e.g. libx264, mpeg4, libsvtav1")
    p.add_argument("--release-format", action="store_true", help="rows in the ParaVT release's shape "
                                                                 "(prompt / videos / extra_info)")
    a = p.parse_args(argv)
    if a.n < 1:
        p.error("--n must be at least 1")
    if not 0 < a.fps <= 30:
        p.error("--fps must be in (0, 30]")
    if a.duration is not None and not (math.isfinite(a.duration) and 30 <= a.duration <= 48 * 3600):
        p.error("--duration must be in [30, 172800] seconds")
    try:
        check_size((a.height, a.width))
    except ValueError as exc:
        p.error(f"--height/--width: {exc}")
    if a.height % 2 or a.width % 2:
        p.error("--height and --width must be even (yuv420p)")
    path = export(a.out, a.n, a.seed, a.split, a.fps, (a.height, a.width), a.duration, a.codec, a.release_format)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
