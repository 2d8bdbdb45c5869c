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
import re
import stat
import threading
import warnings
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from .config import DEFAULTS
from .questions import ANSWER_TYPES, FAMILIES, LETTERS, Question, make_question
from .world import SyntheticVideo, check_size, uniform_timestamps

MAX_OVERVIEW_FRAMES = 512
MAX_CROP_FRAMES = 64
MAX_VIDEO_SECONDS = 48 * 3600.0  # as the synthetic world and the env's timestamp space
MAX_VIDEO_FRAMES = 10_000_000  # bounds the timestamp table (80 MB): 48 h at 58 fps
_PYAV_MAX_FORWARD = 64  # frames: decode on rather than seek when the next wanted frame is this close
SPLITS = ("train", "validation", "test")


class Frames(NamedTuple):
    images: np.ndarray  # uint8 (N, H, W, 3)
    timestamps: np.ndarray  # float64 (N,), seconds


class VideoError(ValueError):
    """A video that cannot be read or a window that does not fit it; ``video`` names the file
    where the error is the file's (None for a caller's mistake, such as a bad frame time)."""

    def __init__(self, message: str, video: str | None = None):
        super().__init__(message)
        self.video = video


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
        backend: ``"auto"`` (decord, falling back to PyAV for what decord cannot open or
            decodes wrongly, e.g. AV1, rotated phone videos, MPEG-TS, raw streams, mp4s whose
            edit list cuts the start), ``"decord"`` or ``"pyav"``.

    Time is the presentation time of the frames, counted from the first one: frame ``i``
    shows ``[start_i, start_{i+1})``, so variable-frame-rate files, streams that start at a
    non-zero timestamp and files whose header states no duration all map times to the right
    frame. Frames come out as a player shows them (the display rotation applied) and in the
    stream's first frame size if the size changes mid-stream.

    The file is probed at construction (first and last frame decoded), so a missing, corrupt,
    truncated or unsupported file fails early with :class:`VideoError`.
    """

    def __init__(self, path: str | os.PathLike, backend: str = "auto"):
        self.path = Path(path)
        self.name = str(self.path)
        if backend not in ("auto", "decord", "pyav"):
            raise ValueError(f"backend must be 'auto', 'decord' or 'pyav', got {backend!r}")
        problem = video_file_problem(self.path)
        if problem:
            raise VideoError(f"{self.path}: {problem}", video=self.name)
        self._lock = threading.Lock()  # decoders are not thread-safe; crops run in a pool
        self._reader = None
        self.backend = None
        errors = []
        for b in (("decord", "pyav") if backend == "auto" else (backend,)):
            try:
                self._open_decord() if b == "decord" else self._open_pyav()
                self.backend = b
                break
            except Exception as exc:  # decoders raise many unrelated types
                errors.append(f"{b}: {type(exc).__name__}: {str(exc).strip()[:200]}")
        if self.backend is None:
            raise VideoError(f"{self.path}: cannot decode video ({'; '.join(errors)})", video=self.name)

    # ---- opening: a timeline of frame start times ----------------------------------------------
    def _set_timeline(self, starts: np.ndarray, duration: float, height: int, width: int, rotation: int) -> None:
        n = len(starts)
        if n < 1 or not (math.isfinite(duration) and duration > 0):
            raise RuntimeError(f"no frames or no duration ({n} frames, {duration} s)")
        if duration > MAX_VIDEO_SECONDS:
            raise RuntimeError(f"lasts {duration / 3600:.1f} h; at most {MAX_VIDEO_SECONDS / 3600:.0f} h are supported")
        self._starts, self.num_frames, self.duration = starts, n, float(duration)
        self.fps = n / self.duration  # the average rate; frame lookup uses the timestamps
        self.rotation = int(round(rotation / 90.0)) % 4 * 90  # counter-clockwise, as players apply it
        self.frame_shape = (height, width)  # as stored, before the rotation

    def _open_decord(self) -> None:
        import decord

        probe = _pyav_probe(self.path)
        if probe.rotation % 360:  # decord 0.6 returns 4-channel, wrongly sized frames for these
            raise RuntimeError(f"display rotation {probe.rotation} degrees is not supported by decord")
        if probe.format in _DECORD_MISSEEKS:
            raise RuntimeError(f"decord seeks {probe.format} streams to the wrong frames")
        if probe.cut_start:  # decord counts and times the cut frames but returns only the shown ones
            raise RuntimeError("decord maps times to the wrong frames where an edit list cuts the start")
        reader = decord.VideoReader(str(self.path), num_threads=1)
        n = len(reader)
        if not 1 <= n <= MAX_VIDEO_FRAMES:
            raise RuntimeError(f"{n} frames")
        # decord plays on past frames missing from an AVI as if they never existed, shifting every later time
        _check_frame_count(n, probe.frames)
        first = reader[0].asnumpy()
        if first.ndim != 3 or first.shape[2] != 3:
            raise RuntimeError(f"decoded frames have shape {first.shape}")
        reader[n - 1]  # a truncated file fails here, not in the middle of an episode
        stamps = np.asarray(reader.get_frame_timestamp(np.arange(n)), np.float64).reshape(n, 2)
        starts = stamps[:, 0] - stamps[0, 0]
        if not (np.all(np.isfinite(stamps)) and np.all(np.diff(starts) > 0)):
            raise RuntimeError("frame timestamps are not increasing")
        fps = float(reader.get_avg_fps())
        grid = np.arange(n) / fps if math.isfinite(fps) and fps > 0 else None
        if grid is not None and np.abs(starts - grid).max() < 1e-3:
            starts, duration = grid, n / fps  # constant rate: exact times (decord's are float32)
        else:
            last = stamps[-1, 1] - stamps[-1, 0]
            duration = starts[-1] + (last if last > 0 else _typical_step(starts, fps))
        self._set_timeline(starts, duration, first.shape[0], first.shape[1], 0)
        self._reader = reader

    def _open_pyav(self) -> None:
        import av

        with av.open(str(self.path)) as container:
            stream = _video_stream(container)
            pts = array("q")  # 8 bytes a frame: a Python list would take 36
            top, last_duration, timed, count, cut = None, 0, True, 0, 0
            for packet in container.demux(stream):
                if packet.size == 0:  # flush packets
                    continue
                if packet.is_discard:  # frames an edit list cuts: stored (so counted in the header), never shown
                    cut += 1
                    continue
                count += 1
                if count > MAX_VIDEO_FRAMES:
                    raise RuntimeError(f"more than {MAX_VIDEO_FRAMES} frames")
                t = packet.pts if packet.pts is not None else packet.dts
                if t is None:
                    timed = False
                elif timed:
                    pts.append(t)
                    if top is None or t >= top:  # the last frame shown lasts its packet's duration
                        top, last_duration = t, packet.duration or 0
            if count == 0:
                raise RuntimeError("no video packets")
            _check_frame_count(count + cut, stream.frames)
            # the codec's rate (raw streams have no other; their container claims 25 fps)
            rate = float(stream.guessed_rate or stream.average_rate or stream.base_rate or 25)
            tb = stream.time_base
        first, rotation = self._pyav_first_frame()
        if timed and tb:
            table = np.unique(np.asarray(pts, np.int64))
            self._pts = table
            span = int(table[-1] - table[0])
            step = last_duration or (int(np.median(np.diff(table))) if len(table) > 1 else 0)
            duration = float((span + step) * tb) if step else span * float(tb) + 1.0 / rate
            starts = (table - table[0]) * tb.numerator / tb.denominator
            self._check_tail_pyav()
        else:  # a raw stream without timestamps: frames in decoding order at the nominal rate
            self._pts = None
            count = self._count_frames_pyav()
            starts, duration = np.arange(count) / rate, count / rate
        self._set_timeline(starts, duration, first.height, first.width, rotation)

    def _pyav_first_frame(self):
        import av

        with av.open(str(self.path)) as container:
            frame = next(container.decode(_video_stream(container)))  # fails here on a corrupt stream
            return frame, int(frame.rotation or 0)

    def _check_tail_pyav(self) -> None:
        """A truncated file fails here, not in the middle of an episode: decode the last frame."""
        import av

        n = len(self._pts)
        with av.open(str(self.path)) as container:
            last = max((k for k, _ in self._frames_from(container, n - 1)), default=-1)
        if last < n - 1:
            raise RuntimeError("cannot decode the end of the video (truncated?)")

    def _frames_from(self, container, want: int):
        """``(index, frame)`` pairs decoded from a keyframe at or before frame ``want`` on.

        A seek lands on a keyframe before its target in most containers, but after it in some
        (MPEG-TS): then seek again further back, and at last from the start."""
        stream = _video_stream(container)
        target = int(self._pts[want])
        back, second = 0, max(1, int(1 / stream.time_base))
        while True:
            at_start = target - back <= self._pts[0]
            container.seek(0 if at_start else target - back, stream=None if at_start else stream, backward=True)
            frames = container.decode(stream)
            first = next(frames, None)
            if first is None and not at_start:
                back = max(second, back * 4)
                continue
            if first is not None and first.pts is not None and first.pts > target and not at_start:
                back = max(second, back * 4)
                continue
            break
        if first is None:
            return
        k = self._index_of(first.pts, -1)
        yield k, first
        for frame in frames:
            k = self._index_of(frame.pts, k)
            yield k, frame

    def _index_of(self, pts, previous: int) -> int:
        """A decoded frame's place in the timeline: the last start at or before its pts."""
        if pts is None:
            return previous + 1
        return int(np.searchsorted(self._pts, pts, side="right")) - 1

    def _count_frames_pyav(self) -> int:
        import av

        with av.open(str(self.path)) as container:
            n = sum(1 for _ in container.decode(_video_stream(container)))
        if not 1 <= n <= MAX_VIDEO_FRAMES:
            raise RuntimeError(f"{n} decodable frames")
        return n

    # ---- decoding ---------------------------------------------------------------------------------
    def _to_array(self, frame) -> np.ndarray:
        h, w = self.frame_shape  # a mid-stream size change is scaled back to the first size
        # one thread: swscale's automatic thread pool, once started, makes every process forked afterwards
        # (AsyncVectorEnv's workers) hang or crash in its first conversion
        if (frame.height, frame.width) != (h, w):
            return frame.to_ndarray(format="rgb24", width=w, height=h, threads=1)
        return frame.to_ndarray(format="rgb24", threads=1)

    def _decode_pyav(self, idx: np.ndarray) -> np.ndarray:
        """Seek to a keyframe before a wanted frame and decode forward; a wanted frame at
        most ``_PYAV_MAX_FORWARD`` frames ahead is reached by decoding on, not by seeking
        again (a crop's frames share a GOP). Memory stays bounded by one GOP."""
        import av

        if self._pts is None:
            return self._decode_sequential(idx)
        out: dict[int, np.ndarray] = {}
        with av.open(str(self.path)) as container:
            decoded, k, last, last_array = None, -1, None, None
            for want in sorted(set(idx.tolist())):
                if decoded is None or want - k > _PYAV_MAX_FORWARD:
                    decoded, k, last, last_array = self._frames_from(container, want), -1, None, None
                if last is None or k < want:
                    for k, frame in decoded:
                        last, last_array = frame, None
                        if k >= want:
                            break
                if last is None:
                    raise VideoError(f"{self.path}: cannot decode frame {want}")
                if last_array is None:
                    last_array = self._to_array(last)
                out[want] = last_array
        return np.stack([out[i] for i in idx.tolist()])

    def _decode_sequential(self, idx: np.ndarray) -> np.ndarray:
        """Frames of a stream without timestamps (no seeking): decode from the start."""
        import av

        wanted, out, frame = set(idx.tolist()), {}, None
        with av.open(str(self.path)) as container:
            for k, frame in enumerate(container.decode(_video_stream(container))):
                if k in wanted:
                    out[k] = self._to_array(frame)
                if k >= max(wanted):
                    break
        if frame is None:
            raise VideoError(f"{self.path}: cannot decode frames")
        held = out[max(out)] if out else self._to_array(frame)  # past a short stream: its last frame
        return np.stack([out.get(i, held) for i in idx.tolist()])

    def frames_at(self, times, size=(64, 64)):
        size = check_size(size)
        try:
            t = np.asarray(times, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            raise VideoError(f"{self.path}: frame times must be numbers") from None
        if not np.all(np.isfinite(t)):
            raise VideoError(f"{self.path}: frame times must be finite")
        if len(t) == 0:
            return np.zeros((0, *size, 3), np.uint8)
        # frame i shows [start_i, start_{i+1}); the epsilon keeps t = i / fps on frame i
        # despite rounding (floor(61 / 7 * 7) == 60)
        idx = np.clip(np.searchsorted(self._starts, t + 1e-6, side="right") - 1, 0, self.num_frames - 1)
        with self._lock:
            try:
                if self.backend == "decord":
                    frames = self._reader.get_batch(idx.tolist()).asnumpy()
                else:
                    frames = self._decode_pyav(idx)
            except VideoError as exc:
                exc.video = self.name
                raise
            except Exception as exc:  # a decoder failing mid-file: the caller gets a VideoError
                raise VideoError(f"{self.path}: cannot decode frames ({type(exc).__name__}: "
                                 f"{str(exc).strip()[:200]})", video=self.name) from None
        frames = np.ascontiguousarray(frames, dtype=np.uint8)
        if self.rotation:
            frames = np.rot90(frames, k=self.rotation // 90, axes=(1, 2))
        return _resize(frames, size)


def _video_stream(container):
    """The stream a player shows, as decord picks it: FFmpeg's best video stream (a cover
    picture or a thumbnail track loses, whatever its place in the file)."""
    stream = container.streams.best("video")
    if stream is None:
        raise RuntimeError("no video stream")
    return stream


# containers whose frames decord 0.6 returns a GOP late (MPEG transport / program streams)
_DECORD_MISSEEKS = frozenset({"mpegts", "mpeg"})


class _Probe(NamedTuple):
    rotation: int  # display rotation, degrees counter-clockwise
    format: str  # container format
    frames: int  # frames the header states (0: it does not say)
    cut_start: bool  # an edit list hides the first stored frames (``ffmpeg -ss`` with stream copy)


def _pyav_probe(path: Path) -> _Probe:
    """What PyAV reads of a file's header and first frame; nothing known if PyAV cannot read it."""
    try:
        import av

        with av.open(str(path)) as container:
            stream = _video_stream(container)
            cut_start, frame = None, None
            for packet in container.demux(stream):
                if packet.size and cut_start is None:
                    cut_start = bool(packet.is_discard)
                frame = next(iter(packet.decode()), None)
                if frame is not None:
                    break
            return _Probe(int(frame.rotation or 0), container.format.name, int(stream.frames or 0), bool(cut_start))
    except Exception:  # PyAV unable to read the file: decord alone decides
        return _Probe(0, "", 0, False)


def _check_frame_count(present: int, stated: int) -> None:
    """A file holding fewer frames than its header states is cut short or damaged: refused at open, rather
    than played with its later frames at the wrong times or missing."""
    if stated and present < stated:
        raise RuntimeError(f"truncated or damaged: {present} of {stated} frames present")


def _typical_step(starts: np.ndarray, fps: float) -> float:
    """A frame's duration when the file does not say: the median gap, else 1 / fps."""
    if len(starts) > 1:
        return float(np.median(np.diff(starts)))
    return 1.0 / fps if math.isfinite(fps) and fps > 0 else 0.04


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

    def __init__(self, split: str = DEFAULTS.split, seed: int = DEFAULTS.world_seed, size: int = DEFAULTS.dataset_size,
                 duration: float | None = DEFAULTS.duration, families: Sequence[str] = FAMILIES):
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

# question types, ours and the release's (``mcq`` / ``tvg`` / ``oe``), -> our answer types
QUESTION_TYPES = {"mcq": "mcq", "multiple_choice": "mcq",
                  "open": "open", "oe": "open", "open_ended": "open", "free_form": "open",
                  "grounding": "grounding", "tvg": "grounding", "temporal_grounding": "grounding"}
_OPTION_LINE = re.compile(r"\s*\(?([A-J])[.):]\s+(\S.*?)\s*")  # "A. x", "(A) x", "A) x", "A: x"
_OPTIONS_HEADER = re.compile(r"\s*(options|choices)\s*:?\s*", re.IGNORECASE)
_LETTER_ANSWER = re.compile(r"\(?([A-J])\)?(?:[.):]\s*.*)?", re.DOTALL)  # "B", "(B)", "B. red star"
_LOWER_LETTER_ANSWER = re.compile(r"\(?([a-j])\)?[.):]?")  # "b", "(b)": but not "a. cat"-like text
_MARKERS = re.compile(r"<video>|<image>")


def _row_error(where: str, msg: str) -> DatasetError:
    return DatasetError(f"{where}: {msg}")


def _json_field(row: dict, key: str, where: str):
    """A field that may hold JSON text (the release stores ``extra_info`` that way)."""
    value = row.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            raise _row_error(where, f"field {key!r} is a string but not valid JSON") from None
    return value


def _float(x) -> float:
    """float(x), with ints past the float range as infinity (then rejected as not finite)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def _mcq_answer(answer: str, options: tuple[str, ...], where: str) -> str:
    """The option letter an MCQ answer names: ``"B"``, ``"(B)"``, ``"B. red star"`` or an
    option's exact text."""
    text = answer.strip()
    m = _LETTER_ANSWER.fullmatch(text) or _LOWER_LETTER_ANSWER.fullmatch(text)
    if m:
        letter = m.group(1).upper()
        if LETTERS.index(letter) >= len(options):
            raise _row_error(where, f"MCQ answer {text[:40]!r} is not among the options "
                                    f"A-{LETTERS[len(options) - 1]}")
        return letter
    lowered = [o.strip().lower() for o in options]
    if text.lower() in lowered:
        return LETTERS[lowered.index(text.lower())]
    raise _row_error(where, f"MCQ answer {text[:40]!r} is neither an option letter "
                            f"A-{LETTERS[len(options) - 1]} nor an option's text")


def _grounding_answer(answer: str, where: str) -> str:
    """``"start, end"`` seconds (brackets allowed), two finite numbers, 0 <= start < end."""
    text = answer.strip()
    if text[:1] in "[(" and text[-1:] in "])":
        text = text[1:-1]
    parts = text.split(",")
    try:
        if len(parts) != 2 or max(len(p) for p in parts) > 64:
            raise ValueError
        start, end = (float(p) for p in parts)
    except ValueError:
        raise _row_error(where, f"grounding answer must be 'start, end' in seconds, got {answer[:40]!r}") from None
    if not (math.isfinite(start) and math.isfinite(end) and 0.0 <= start < end):
        raise _row_error(where, f"grounding answer needs finite seconds with 0 <= start < end, got {answer[:40]!r}")
    return f"{start!r}, {end!r}"


def _question_from_row(row: dict, where: str) -> tuple[list[str], Question]:
    """Validate one row (our schema or the ParaVT release's) -> (video paths, question)."""
    if not isinstance(row, dict):
        raise _row_error(where, f"expected a JSON object, got {type(row).__name__}")
    if any(k in row for k in ("prompt", "videos", "extra_info", "messages", "video_paths")):
        row = _from_release_row(row, where)
    else:
        row = {**row, "videos": [row["video"]] if isinstance(row.get("video"), str) else row.get("video")}
    for key, types in (("id", (str, int)), ("videos", list), ("question", str), ("answer", (str, int, float)),
                       ("type", str)):
        if row.get(key) is None:
            raise _row_error(where, f"missing field {'video' if key == 'videos' else key!r}")
        if not isinstance(row[key], types) or isinstance(row[key], bool):
            raise _row_error(where, f"field {'video' if key == 'videos' else key!r} has type "
                                    f"{type(row[key]).__name__}")
    if not row["videos"] or not all(isinstance(v, str) and v.strip() for v in row["videos"]):
        raise _row_error(where, "video paths must be non-empty strings")
    if not row["question"].strip():
        raise _row_error(where, "field 'question' is empty")
    if row["type"] not in QUESTION_TYPES:
        raise _row_error(where, f"field 'type' must be one of {ANSWER_TYPES} (or the release's "
                                f"mcq/tvg/oe), got {str(row['type'])[:40]!r}")
    qtype = QUESTION_TYPES[row["type"]]
    options = row.get("options")
    if options is not None:
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise _row_error(where, "field 'options' must be a list of strings")
        if len(options) > len(LETTERS):
            raise _row_error(where, f"at most {len(LETTERS)} options (A-{LETTERS[-1]}), got {len(options)}")
        options = tuple(options) or None
    if qtype == "mcq" and not options:
        raise _row_error(where, "an 'mcq' row needs non-empty 'options'")
    if isinstance(row["answer"], float) and not math.isfinite(row["answer"]):
        raise _row_error(where, f"field 'answer' is {row['answer']!r}, not an answer")
    answer = row["answer"] if isinstance(row["answer"], str) else repr(row["answer"])
    if not answer.strip():
        raise _row_error(where, "field 'answer' is empty")
    if qtype == "mcq":
        answer = _mcq_answer(answer, options, where)
    elif qtype == "grounding":
        answer = _grounding_answer(answer, where)
    evidence = row.get("evidence") or []
    try:
        if not isinstance(evidence, (list, tuple)):
            raise TypeError
        evidence = tuple((_float(a), _float(b)) for a, b in evidence)
    except (TypeError, ValueError):
        raise _row_error(where, "field 'evidence' must be a list of [start, end] pairs") from None
    if not all(math.isfinite(a) and math.isfinite(b) and 0.0 <= a <= b for a, b in evidence):
        raise _row_error(where, "evidence windows must be finite with 0 <= start <= end")
    family = row.get("family") or "unknown"
    if not isinstance(family, str):
        raise _row_error(where, "field 'family' must be a string")
    q = Question(str(row["id"]), family, row["question"], answer, qtype, options, evidence)
    return row["videos"], q


def _user_text(messages, key: str, where: str) -> str:
    """The first user message's text, with the video/image markers removed."""
    if not isinstance(messages, list):
        raise _row_error(where, f"field {key!r} must be a list of chat messages")
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                content = "\n".join(c["text"] for c in content
                                    if isinstance(c, dict) and isinstance(c.get("text"), str))
            if isinstance(content, str) and _MARKERS.sub("", content).strip():
                return _MARKERS.sub("", content).strip()
    raise _row_error(where, f"no user message with text in {key!r}")


def _split_options(text: str) -> tuple[str, list[str]]:
    """Separate "A. ..." option lines (consecutive letters from A) from the question text;
    an "Options:" header and a "Question:" prefix go too."""
    lines = text.splitlines()
    options, keep = [], []
    for line in lines:
        m = _OPTION_LINE.fullmatch(line)
        if m and len(options) < len(LETTERS) and m.group(1) == LETTERS[len(options)]:
            options.append(m.group(2))
        else:
            keep.append(line)
    if not options:
        return text, []
    keep = [line for line in keep if not _OPTIONS_HEADER.fullmatch(line)]
    question = "\n".join(keep).strip()
    question = re.sub(r"^question\s*:\s*", "", question, flags=re.IGNORECASE)
    return question, options


def _from_release_row(row: dict, where: str) -> dict:
    """Map a ParaVT-release row to our schema.

    The released parquet rows: ``prompt`` (chat messages; a ``<video>`` marker where the video
    goes), ``videos`` (``[{"video": path}]``, paths possibly ``file://``) and ``extra_info``
    (a dict or JSON text with ``answer`` and ``question_type`` mcq / tvg / oe, default oe).
    MCQ options live in the prompt as "A. ..." lines. The release's loader output
    (``messages``, ``video_paths``, ``answer``, ``question_type``) is accepted too.
    """
    extra = _json_field(row, "extra_info", where) or {}
    if not isinstance(extra, dict):
        raise _row_error(where, "field 'extra_info' must be an object (or JSON text of one)")
    key = "prompt" if "prompt" in row else "messages"
    text = _user_text(_json_field(row, key, where), key, where)
    if "videos" in row:
        videos = _json_field(row, "videos", where)
        if not isinstance(videos, list) or not videos:
            raise _row_error(where, "field 'videos' must be a non-empty list of {\"video\": path}")
        videos = [v.get("video") if isinstance(v, dict) else v for v in videos]
    else:
        videos = row.get("video_paths")
        if not isinstance(videos, list) or not videos:
            raise _row_error(where, "field 'video_paths' must be a non-empty list of strings")

    def get(key, default=None):
        return row[key] if row.get(key) is not None else extra.get(key, default)

    qtype = get("question_type", get("type", "oe"))
    if not isinstance(qtype, str) or qtype not in QUESTION_TYPES:
        raise _row_error(where, f"unknown question_type {str(qtype)[:40]!r}; known: {sorted(QUESTION_TYPES)}")
    options = get("options")
    if options is None and QUESTION_TYPES[qtype] == "mcq":
        text, options = _split_options(text)
        if not options:
            raise _row_error(where, "an 'mcq' row needs options: no 'A. ...' lines in its prompt")
    return {"id": get("id", where), "videos": videos, "question": text, "answer": get("answer"),
            "type": qtype, "options": options, "family": get("family", qtype), "evidence": get("evidence")}


def _read_rows(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise DatasetError(f"{path}: question file not found")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            raise DatasetError(f"{path}: cannot read parquet ({str(exc)[:200]})") from None
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
        except (ValueError, RecursionError) as exc:  # a 5000-digit number, deep nesting
            raise DatasetError(f"{path}:{lineno}: not valid JSON ({str(exc)[:80]})") from None
    return out


def _resolve(video: str, root: Path) -> Path:
    """A row's video path: ``file://`` stripped, relative paths under ``root``."""
    video = video.strip()
    if video.startswith("file://"):
        video = video[len("file://"):]
    return Path(video) if os.path.isabs(video) else root / video


def _inside(path: Path, root_real: str) -> bool:
    """Whether ``path``, symlinks and ``..`` resolved, lies under ``root_real`` (itself resolved).
    Decided from the names alone, so the answer never depends on whether the file exists."""
    try:
        real = os.path.realpath(path)
    except ValueError:  # a NUL byte: no file has that name, and none is looked up
        real = os.path.abspath(path)
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def video_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a video file (None when it is a regular file). Never opens it: opening
    a FIFO would block."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # absent, a NUL byte, an over-long name
        return "video file not found"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a video file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO, socket or device), not a video file"
    if st.st_size == 0:
        return "video file is empty"
    return None


class FileDataset(Sequence):
    """Episodes from a JSONL or parquet question file; videos open lazily and are cached.

    Args:
        path: the question file (our schema or the ParaVT release's rows; see the README).
        backend: video decoder, as in :class:`FileVideoSource`.
        max_open_videos: decoders kept open at once.
        video_root: folder that relative video paths (``file://`` prefix allowed) resolve
            against; default: the question file's folder.
        strict: if True, a row whose video file is missing (or a folder, a FIFO, empty) stops
            loading with a :class:`VideoError` naming the file and line; by default such rows
            are skipped and one warning says how many (the released loader skips them too).
        allow_outside_root: if False (the default), every video path (relative, ``file://``,
            absolute, through symlinks) must resolve inside the video root, and a row pointing
            elsewhere stops loading naming the file and line: a question file from elsewhere
            reads only the videos under the folder it was given. True reads videos anywhere.

    Every row is validated when the file is read, so a bad row fails at once, naming the
    file and line: missing or mistyped fields, an MCQ answer outside its options, a
    grounding answer that is not "start, end", a duplicate id. A row may list several videos
    (the release's ``videos``); the first one present is used.
    """

    def __init__(self, path: str | os.PathLike, backend: str = "auto", max_open_videos: int = 8,
                 video_root: str | os.PathLike | None = None, strict: bool = False,
                 allow_outside_root: bool = False):
        self.path = Path(path)
        self.backend = backend
        root = self.path.parent if video_root is None else Path(video_root)
        if video_root is not None and not root.is_dir():
            raise DatasetError(f"video_root {root} is not a folder")
        root_real = os.path.realpath(root)
        self.rows = []
        self._where = []  # "file:line" of each row, for errors found when its video opens
        seen: dict[str, str] = {}  # id -> where it first appeared
        problems: dict[Path, str | None] = {}
        missing: list[tuple[str, Path, str]] = []
        total = 0
        for where, row in _read_rows(self.path):
            total += 1
            videos, q = _question_from_row(row, where)
            if q.id in seen:
                raise _row_error(where, f"duplicate id {q.id[:60]!r} (first at {seen[q.id]})")
            seen[q.id] = where
            paths = [_resolve(v, root) for v in videos]
            if not allow_outside_root:
                # checked before anything looks at the file, so the error says nothing of what lies outside
                outside = next((v for v, p in zip(videos, paths) if not _inside(p, root_real)), None)
                if outside is not None:
                    raise _row_error(where, f"video {outside[:200]!r} lies outside the video root {root}; "
                                            "allow_outside_root=True (--allow-videos-outside-root) reads videos "
                                            "anywhere")
            found = [p for p in paths if problems.setdefault(p, video_file_problem(p)) is None]
            if not found:
                if strict:
                    raise VideoError(f"{where}: {paths[0]}: {problems[paths[0]]}")
                missing.append((where, paths[0], problems[paths[0]]))
                continue
            self.rows.append((found[0], q))
            self._where.append(where)
        self.skipped = len(missing)
        if not self.rows:
            why = (f"the videos of all {total} rows are missing or unreadable (first: {missing[0][1]}: "
                   f"{missing[0][2]})" if missing else "no questions in file")
            raise DatasetError(f"{self.path}: {why}")
        if missing:
            where, video, problem = missing[0]
            warnings.warn(f"{self.path}: skipped {len(missing)} of {total} rows whose video file is missing or "
                          f"unreadable (first: {where}: {video}: {problem}); strict=True stops at the first instead",
                          stacklevel=2)
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
            # known only once the video opens, mid-run, and most often a video cut short: an episode's
            # VideoError, which trainers and evaluations skip, not a question file's DatasetError, which stops them
            if b > source.duration + 1.0:
                raise VideoError(f"{self._where[i]}: question {q.id!r}: evidence window [{a}, {b}] outside "
                                 f"{video_path} ({source.duration:.1f} s)", video=str(video_path))
        return Episode(source, q)


def load_dataset(source: str | os.PathLike | None = None, split: str = DEFAULTS.split, seed: int = DEFAULTS.world_seed,
                 **kwargs) -> Sequence[Episode]:
    """``None``/``"synthetic"`` -> :class:`SyntheticDataset`; a path -> :class:`FileDataset`
    (keyword arguments go to the chosen class: e.g. ``video_root=``, ``strict=`` for files)."""
    if source is None or source == "synthetic":
        return SyntheticDataset(split=split, seed=seed, **kwargs)
    return FileDataset(source, **kwargs)
