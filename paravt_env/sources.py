"""Video sources and episode datasets: one interface for synthetic and real videos.

Every source answers two questions, whatever is behind it:

* ``overview(k)``: ``k`` frames sampled uniformly over the whole video, with timestamps;
* ``crop(start, end, fps=1, max_frames=16)``: frames of one window, with timestamps.

Both return :class:`Frames` (uint8 ``(N, H, W, 3)`` images + float timestamps in seconds).
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from .questions import ANSWER_TYPES, FAMILIES, Question, make_question
from .world import SyntheticVideo, check_size, uniform_timestamps

MAX_OVERVIEW_FRAMES = 512
MAX_CROP_FRAMES = 64
_PYAV_MAX_FORWARD = 64  # frames: decode on rather than seek when the next wanted frame is this close
SPLITS = ("train", "validation", "test")


class Frames(NamedTuple):
    images: np.ndarray  # uint8 (N, H, W, 3)
    timestamps: np.ndarray  # float64 (N,), seconds


class VideoError(ValueError):
    """A video that cannot be read or a window that does not fit it."""


class DatasetError(ValueError):
    """A question file or row that cannot be used."""


class VideoSource:
    """Base class: subclasses set ``duration``/``name`` and implement ``frames_at``."""

    duration: float
    name: str

    def frames_at(self, times: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        raise NotImplementedError

    def caption(self, timestamps: np.ndarray) -> str | None:
        """A truthful caption of what these sampled frames show, if the source knows."""
        return None

    def overview(self, k: int, size: tuple[int, int] = (64, 64)) -> Frames:
        if not (isinstance(k, (int, np.integer)) and 1 <= k <= MAX_OVERVIEW_FRAMES):
            raise VideoError(f"{self.name}: overview needs 1..{MAX_OVERVIEW_FRAMES} frames, got {k!r}")
        times = uniform_timestamps(0.0, self.duration, int(k))
        return Frames(self.frames_at(times, check_size(size)), times)

    def crop_timestamps(self, start: float, end: float, fps: float = 1.0,
                        max_frames: int = 16) -> np.ndarray:
        """Timestamps a crop samples: ``fps`` over the window, at most ``max_frames``, at least 1."""
        try:
            start, end, fps = float(start), float(end), float(fps)
        except (TypeError, ValueError, OverflowError):
            raise VideoError(f"{self.name}: crop window and fps must be numbers of seconds") from None
        if not all(map(math.isfinite, (start, end, fps))):
            raise VideoError(f"{self.name}: crop window and fps must be finite numbers")
        if not 0.0 <= start < end <= self.duration + 1e-6:
            raise VideoError(f"{self.name}: crop window [{start}, {end}] is outside the video "
                             f"[0, {self.duration:.1f}] s or empty")
        if not 0 < fps <= 30:
            raise VideoError(f"{self.name}: crop fps must be in (0, 30], got {fps}")
        if not (isinstance(max_frames, (int, np.integer)) and 1 <= max_frames <= MAX_CROP_FRAMES):
            raise VideoError(f"{self.name}: max_frames must be in 1..{MAX_CROP_FRAMES}, got {max_frames!r}")
        n = int(min(max_frames, max(1, math.floor((end - start) * fps))))
        return uniform_timestamps(start, end, n)

    def crop(self, start: float, end: float, fps: float = 1.0, max_frames: int = 16,
             size: tuple[int, int] = (64, 64)) -> Frames:
        times = self.crop_timestamps(start, end, fps, max_frames)
        return Frames(self.frames_at(times, check_size(size)), times)


class SyntheticSource(VideoSource):
    """A :class:`~paravt_env.world.SyntheticVideo` behind the source interface."""

    def __init__(self, video: SyntheticVideo):
        self.video = video
        self.duration = video.duration
        self.name = video.name

    def frames_at(self, times, size=(64, 64)):
        return self.video.frames_at(times, size)

    def caption(self, timestamps):
        return self.video.caption(timestamps)


def _resize(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of a ``(N, H, W, 3)`` batch: cheap and dependency-free."""
    h, w = size
    if frames.shape[1:3] == (h, w):
        return frames
    ys = (np.arange(h) + 0.5) * frames.shape[1] / h
    xs = (np.arange(w) + 0.5) * frames.shape[2] / w
    return frames[:, ys.astype(int)][:, :, xs.astype(int)]


class FileVideoSource(VideoSource):
    """A video file, decoded with decord (one thread) or, failing that, PyAV.

    Args:
        path: the file.
        backend: ``"auto"`` (decord, falling back to PyAV for what decord cannot open, e.g.
            AV1), ``"decord"`` or ``"pyav"``.

    The file is opened lazily on first use and probed at construction, so a missing,
    corrupt, truncated or unsupported file fails early with :class:`VideoError`.
    """

    def __init__(self, path: str | os.PathLike, backend: str = "auto"):
        self.path = Path(path)
        self.name = str(self.path)
        if backend not in ("auto", "decord", "pyav"):
            raise ValueError(f"backend must be 'auto', 'decord' or 'pyav', got {backend!r}")
        if not self.path.is_file():
            raise VideoError(f"{self.path}: video file not found")
        if self.path.stat().st_size == 0:
            raise VideoError(f"{self.path}: video file is empty")
        self._lock = threading.Lock()  # decoders are not thread-safe; crops run in a pool
        self._reader = None
        self.backend = None
        errors = []
        for b in (("decord", "pyav") if backend == "auto" else (backend,)):
            try:
                self._open(b)
                self.backend = b
                break
            except Exception as exc:  # decoders raise many unrelated types
                errors.append(f"{b}: {type(exc).__name__}: {str(exc).strip()[:200]}")
        if self.backend is None:
            raise VideoError(f"{self.path}: cannot decode video ({'; '.join(errors)})")

    def _open(self, backend: str) -> None:
        if backend == "decord":
            import decord

            reader = decord.VideoReader(str(self.path), num_threads=1)
            n = len(reader)
            fps = float(reader.get_avg_fps())
            if n < 1 or not math.isfinite(fps) or fps <= 0:
                raise RuntimeError(f"no frames or bad frame rate ({n} frames, {fps} fps)")
            reader[n - 1]  # a truncated file fails here, not in the middle of an episode
            self._reader, self.num_frames, self.fps = reader, n, fps
        else:
            import av

            with av.open(str(self.path)) as container:
                if not container.streams.video:
                    raise RuntimeError("no video stream")
                stream = container.streams.video[0]
                fps = float(stream.average_rate or stream.guessed_rate or 0)
                if stream.frames:
                    n = int(stream.frames)
                elif stream.duration and stream.time_base:
                    n = int(float(stream.duration * stream.time_base) * fps)
                else:
                    n = int(float(container.duration or 0) / 1e6 * fps)
                next(container.decode(video=0))  # fails here on a corrupt stream
                if n < 1 or fps <= 0:
                    raise RuntimeError(f"no frames or bad frame rate ({n} frames, {fps} fps)")
                # a truncated file fails here, not in the middle of an episode: decode the tail
                container.seek(int((n - 1) / fps / stream.time_base), stream=stream, backward=True)
                k = -1
                for frame in container.decode(stream):
                    if frame.pts is not None:
                        k = max(k, int(round(float(frame.pts * stream.time_base) * fps)))
                if k < 0:
                    raise RuntimeError("cannot decode the end of the video (truncated?)")
                if k < n - 1:
                    if stream.frames:  # the header's exact count: the data stops short
                        raise RuntimeError(f"truncated: frames end at {k + 1} of {n}")
                    n = k + 1  # n was estimated from the duration
            self._reader, self.num_frames, self.fps = None, n, fps
        self.duration = self.num_frames / self.fps

    def _decode_pyav(self, idx: np.ndarray) -> np.ndarray:
        """Seek to the keyframe before a wanted frame and decode forward; a wanted frame at
        most ``_PYAV_MAX_FORWARD`` frames ahead is reached by decoding on, not by seeking
        again (a crop's frames share a GOP). Memory stays bounded by one GOP."""
        import av

        out: dict[int, np.ndarray] = {}
        with av.open(str(self.path)) as container:
            stream = container.streams.video[0]
            decoded, k, last, last_array = None, -1, None, None
            for want in sorted(set(idx.tolist())):
                if decoded is None or want - k > _PYAV_MAX_FORWARD:
                    container.seek(int(want / self.fps / stream.time_base), stream=stream, backward=True)
                    decoded, k, last, last_array = container.decode(stream), -1, None, None
                if last is None or k < want:
                    for frame in decoded:
                        k = int(round(float(frame.pts * stream.time_base) * self.fps)) if frame.pts is not None else want
                        last, last_array = frame, None
                        if k >= want:
                            break
                if last is None:
                    raise VideoError(f"{self.path}: cannot decode frame {want}")
                if last_array is None:
                    last_array = last.to_ndarray(format="rgb24")
                out[want] = last_array
        return np.stack([out[i] for i in idx.tolist()])

    def frames_at(self, times, size=(64, 64)):
        size = check_size(size)
        t = np.asarray(times, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(t)):
            raise VideoError(f"{self.path}: frame times must be finite")
        if len(t) == 0:
            return np.zeros((0, *size, 3), np.uint8)
        # frame i shows [i / fps, (i + 1) / fps); the epsilon keeps t = i / fps on frame i
        # despite rounding (floor(61 / 7 * 7) == 60)
        idx = np.clip(np.floor(t * self.fps + 1e-6).astype(np.int64), 0, self.num_frames - 1)
        with self._lock:
            if self.backend == "decord":
                frames = self._reader.get_batch(idx.tolist()).asnumpy()
            else:
                frames = self._decode_pyav(idx)
        return _resize(np.ascontiguousarray(frames, dtype=np.uint8), size)


@dataclass(frozen=True)
class Episode:
    """One question about one video."""

    source: VideoSource
    question: Question


class SyntheticDataset(Sequence):
    """Episodes of the procedural world for one split; split videos never overlap.

    Episode ``i`` asks family ``FAMILIES[i % 6]`` about video ``3 * (i // 6) + split_id``:
    the split is the video index modulo 3, so no video is shared between splits.
    """

    def __init__(self, split: str = "train", seed: int = 0, size: int = 6000,
                 duration: float | None = None, families: Sequence[str] = FAMILIES):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        unknown = set(families) - set(FAMILIES)
        if unknown or not families:
            raise ValueError(f"families must be a non-empty subset of {FAMILIES}, got {families!r}")
        self.split, self.seed, self.size, self.duration = split, int(seed), int(size), duration
        self.families = tuple(families)

    def __len__(self) -> int:
        return self.size

    def video_index(self, i: int) -> int:
        return 3 * (i // len(self.families)) + SPLITS.index(self.split)

    def __getitem__(self, i):
        if not 0 <= i < self.size:
            raise IndexError(i)
        index = self.video_index(i)
        family = self.families[i % len(self.families)]
        video = SyntheticVideo(self.seed, index, self.duration)
        rng = np.random.default_rng([self.seed, index, FAMILIES.index(family)])
        qid = f"{self.split}-{self.seed}-{index}-{family}"
        return Episode(SyntheticSource(video), make_question(video, family, qid, rng))


# ---- question files ------------------------------------------------------------------------


def _row_error(where: str, msg: str) -> DatasetError:
    return DatasetError(f"{where}: {msg}")


def _question_from_row(row: dict, where: str) -> tuple[str, Question]:
    """Validate one row (our schema or the ParaVT release's) -> (video path, question)."""
    if not isinstance(row, dict):
        raise _row_error(where, f"expected a JSON object, got {type(row).__name__}")
    if "messages" in row or "video_paths" in row:
        row = _from_release_row(row, where)
    for key, types in (("id", (str, int)), ("video", str), ("question", str), ("answer", (str, int, float)),
                       ("type", str)):
        if key not in row or row[key] is None:
            raise _row_error(where, f"missing field {key!r}")
        if not isinstance(row[key], types) or isinstance(row[key], bool):
            raise _row_error(where, f"field {key!r} has type {type(row[key]).__name__}")
    if row["type"] not in ANSWER_TYPES:
        raise _row_error(where, f"field 'type' must be one of {ANSWER_TYPES}, got {row['type']!r}")
    options = row.get("options")
    if options is not None:
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise _row_error(where, "field 'options' must be a list of strings")
        options = tuple(options) or None
    if row["type"] == "mcq" and not options:
        raise _row_error(where, "an 'mcq' row needs non-empty 'options'")
    evidence = row.get("evidence") or []
    try:
        evidence = tuple((float(a), float(b)) for a, b in evidence)
    except (TypeError, ValueError):
        raise _row_error(where, "field 'evidence' must be a list of [start, end] pairs") from None
    if not all(math.isfinite(a) and math.isfinite(b) and 0.0 <= a <= b for a, b in evidence):
        raise _row_error(where, "evidence windows must be finite with 0 <= start <= end")
    family = row.get("family") or "unknown"
    if not isinstance(family, str):
        raise _row_error(where, "field 'family' must be a string")
    q = Question(str(row["id"]), family, row["question"], str(row["answer"]), row["type"], options, evidence)
    return row["video"], q


def _from_release_row(row: dict, where: str) -> dict:
    """Map a ParaVT-release row (chat ``messages``, ``video_paths``, ...) to our schema."""
    paths = row.get("video_paths")
    if not isinstance(paths, list) or not paths or not isinstance(paths[0], str):
        raise _row_error(where, "field 'video_paths' must be a non-empty list of strings")
    messages = row.get("messages")
    if not isinstance(messages, list):
        raise _row_error(where, "field 'messages' must be a list of chat messages")
    text = None
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
            if isinstance(content, str):
                text = content.replace("<video>", "").replace("<image>", "").strip()
                break
    if not text:
        raise _row_error(where, "no user message with text in 'messages'")
    qtype = row.get("question_type", row.get("type", "open"))
    mapping = {"multiple_choice": "mcq", "mcq": "mcq", "open_ended": "open", "open": "open",
               "free_form": "open", "temporal_grounding": "grounding", "grounding": "grounding"}
    if qtype not in mapping:
        raise _row_error(where, f"unknown question_type {qtype!r}; known: {sorted(mapping)}")
    return {"id": row.get("id", where), "video": paths[0], "question": text, "answer": row.get("answer"),
            "type": mapping[qtype], "options": row.get("options"), "family": row.get("family", qtype),
            "evidence": row.get("evidence")}


def _read_rows(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise DatasetError(f"{path}: question file not found")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            raise DatasetError(f"{path}: cannot read parquet ({exc})") from None
        return [(f"{path} row {i}", r) for i, r in enumerate(rows)]
    out = []
    with open(path, encoding="utf-8") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                out.append((f"{path}:{lineno}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        except UnicodeDecodeError:
            raise DatasetError(f"{path}: not UTF-8 text after line {lineno} (is this a JSONL file?)") from None
    return out


class FileDataset(Sequence):
    """Episodes from a JSONL or parquet question file; videos open lazily and are cached.

    Every row is validated when the file is read, so a bad row fails at once, naming the
    file and line. Video paths are relative to the question file unless absolute.
    """

    def __init__(self, path: str | os.PathLike, backend: str = "auto", max_open_videos: int = 8):
        self.path = Path(path)
        self.backend = backend
        self.rows = []
        self._where = []  # "file:line" of each row, for errors found when its video opens
        for where, row in _read_rows(self.path):
            video, q = _question_from_row(row, where)
            video_path = Path(video) if os.path.isabs(video) else self.path.parent / video
            self.rows.append((video_path, q))
            self._where.append(where)
        if not self.rows:
            raise DatasetError(f"{self.path}: no questions in file")
        self._cache: dict[Path, FileVideoSource] = {}
        self._max_open = max_open_videos

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        video_path, q = self.rows[i]
        source = self._cache.get(video_path)
        if source is None:
            source = FileVideoSource(video_path, self.backend)
            if len(self._cache) >= self._max_open:
                self._cache.pop(next(iter(self._cache)))
            self._cache[video_path] = source
        for a, b in q.evidence:
            if b > source.duration + 1.0:
                raise DatasetError(f"{self._where[i]}: question {q.id!r}: evidence window [{a}, {b}] outside "
                                   f"{video_path} ({source.duration:.1f} s)")
        return Episode(source, q)


def load_dataset(source: str | os.PathLike | None = None, split: str = "train", seed: int = 0,
                 **kwargs) -> Sequence[Episode]:
    """``None``/``"synthetic"`` -> :class:`SyntheticDataset`; a path -> :class:`FileDataset`."""
    if source is None or source == "synthetic":
        return SyntheticDataset(split=split, seed=seed, **kwargs)
    return FileDataset(source, **kwargs)
