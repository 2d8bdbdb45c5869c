"""The procedural long-video world.

A :class:`SyntheticVideo` is a pure function of ``(seed, index)``: a timeline of scenes
(long segments with a distinct look), sparse *needle* events (a coloured shape at one of
nine positions, visible for 1-10 s) and grey *distractors*. Nothing is stored: any instant
renders lazily, at any resolution, vectorised with numpy.

Why the layout looks like this:

* Needles are few and bounded (at most ``len(COLOURS) * len(SHAPES)`` distinct objects),
  so the event log stays small however long the video is.
* Distractors are unbounded in number, so they are never listed: a counter-based hash of
  ``(seed, index, bucket)`` decides whether a 15 s bucket holds one, which keeps memory
  and time per frame independent of the video's duration (3 h costs what 3 min costs).
* Scenes are long and visually distinct, so an overview of a few frames shows where each
  scene lies: a good agent can crop precisely; a blind one must crop widely.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

SCENES: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    # name: (colour A, colour B) of a stripe pattern; muted so saturated needles stand out
    "beach": ((176, 160, 112), (150, 136, 96)),
    "desert": ((160, 110, 60), (130, 88, 48)),
    "forest": ((34, 80, 40), (24, 56, 28)),
    "ocean": ((20, 50, 110), (14, 36, 80)),
    "snowfield": ((190, 195, 205), (165, 170, 182)),
    "city": ((90, 90, 100), (60, 60, 70)),
    "night": ((14, 14, 34), (30, 26, 56)),
    "meadow": ((100, 140, 50), (80, 112, 40)),
    "canyon": ((120, 60, 40), (90, 44, 30)),
    "lagoon": ((40, 120, 120), (28, 90, 90)),
    "cave": ((50, 40, 34), (36, 28, 24)),
    "sky": ((110, 150, 200), (90, 126, 172)),
}
SCENE_NAMES = tuple(SCENES)

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (235, 20, 20),
    "green": (20, 230, 40),
    "blue": (40, 70, 255),
    "yellow": (250, 240, 20),
    "magenta": (240, 20, 240),
    "cyan": (20, 240, 240),
    "orange": (255, 140, 0),
    "white": (255, 255, 255),
}
DISTRACTOR_COLOUR = (128, 128, 128)
DISTRACTOR_COLOUR_NAME = "grey"

SHAPES = ("circle", "square", "triangle", "diamond", "star", "cross")

POSITIONS = (
    "top-left", "top", "top-right",
    "left", "center", "right",
    "bottom-left", "bottom", "bottom-right",
)

NEEDLE_SCALE = 0.30  # needle side as a fraction of the frame's shorter side
DISTRACTOR_SCALE = 0.14
DISTRACTOR_BUCKET = 15.0  # seconds
DISTRACTOR_PROBABILITY = 0.5
MAX_EVENT_SECONDS = 10.0
MAX_DISTRACTOR_SECONDS = 4.0
DEFAULT_DURATION_RANGE = (600.0, 1200.0)  # seconds: see README "Tool necessity"
MAX_RENDER_PIXELS = 1024 * 1024  # per frame; protects against absurd sizes


@dataclass(frozen=True)
class Event:
    """One needle: a coloured shape at a grid position over ``[start, end)`` seconds."""

    start: float
    end: float
    colour: str
    shape: str
    position: str
    scene: str

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"

    def visible_at(self, t: np.ndarray | float) -> np.ndarray | bool:
        return (np.asarray(t) >= self.start) & (np.asarray(t) < self.end)


@dataclass(frozen=True)
class Scene:
    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Distractor:
    start: float
    end: float
    shape: str
    center: tuple[float, float]  # (y, x) in [0, 1]


def check_size(size: tuple[int, int]) -> tuple[int, int]:
    """Validate a (height, width) frame size."""
    try:
        h, w = (int(size[0]), int(size[1]))
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"frame size must be (height, width) integers, got {size!r}") from None
    if h < 8 or w < 8 or h * w > MAX_RENDER_PIXELS:
        raise ValueError(f"frame size {h}x{w} outside [8x8, {MAX_RENDER_PIXELS} pixels]")
    return h, w


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """Counter-based hash: the same input always gives the same 64 random bits."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)).astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _unit_floats(bits: np.ndarray) -> np.ndarray:
    return (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def shape_mask(shape: str, side: int) -> np.ndarray:
    """Boolean ``side x side`` mask of a shape centred in its box."""
    c = (np.arange(side) + 0.5) / side * 2.0 - 1.0  # [-1, 1]
    y, x = np.meshgrid(c, c, indexing="ij")
    if shape == "circle":
        return x * x + y * y <= 0.9
    if shape == "square":
        return (np.abs(x) <= 0.8) & (np.abs(y) <= 0.8)
    if shape == "triangle":
        return (y <= 0.85) & (y >= -0.85 + 2.0 * np.abs(x) * 0.95)
    if shape == "diamond":
        return np.abs(x) + np.abs(y) <= 0.95
    if shape == "star":
        r = np.hypot(x, y)
        theta = np.arctan2(x, -y)
        return r <= 0.95 * (0.55 + 0.45 * np.abs(np.cos(2.5 * theta)) ** 3)
    if shape == "cross":
        return ((np.abs(x) <= 0.3) | (np.abs(y) <= 0.3)) & (np.abs(x) <= 0.9) & (np.abs(y) <= 0.9)
    raise ValueError(f"unknown shape {shape!r}; known: {SHAPES}")


def position_center(position: str) -> tuple[float, float]:
    """(y, x) centre in [0, 1] of one of the nine named grid positions."""
    i = POSITIONS.index(position)
    return ((i // 3) + 0.5) / 3.0, ((i % 3) + 0.5) / 3.0


class SyntheticVideo:
    """A long procedural video, a pure function of ``(seed, index)``.

    Args:
        seed: world seed; together with ``index`` it fixes everything.
        index: which video of the world.
        duration: length in seconds; by default drawn from ``DEFAULT_DURATION_RANGE``.
        num_needles: needle events; by default about one per 40 s, at most
            ``len(COLOURS) * len(SHAPES)`` (every needle is a distinct object).
    """

    fps = 30.0  # nominal, used when exporting to a file

    def __init__(self, seed: int, index: int, duration: float | None = None,
                 num_needles: int | None = None):
        self.seed = int(seed)
        self.index = int(index)
        rng = np.random.default_rng([self.seed, self.index, 0x5EED])
        if duration is None:
            duration = float(rng.uniform(*DEFAULT_DURATION_RANGE))
        try:
            seconds = math.nan if isinstance(duration, (str, bool)) else float(duration)
        except (TypeError, ValueError, OverflowError):  # not a number, or an int past the float range
            seconds = math.nan
        if not 30.0 <= seconds <= 48 * 3600:  # nan fails too
            shown = (repr(seconds) if math.isfinite(seconds) or isinstance(duration, float)
                     else f"a {type(duration).__name__}")  # no str() of a 5000-digit int
            raise ValueError(f"duration must be a number of seconds in [30 s, 48 h], got {shown}")
        self.duration = seconds
        self.scenes = self._make_scenes(rng)
        self._scene_starts = np.array([s.start for s in self.scenes])
        if num_needles is None:
            num_needles = int(round(self.duration / 40.0))
        num_needles = int(np.clip(num_needles, 4, len(COLOURS) * len(SHAPES)))
        self.events = self._make_needles(rng, num_needles)
        self._event_starts = np.array([e.start for e in self.events])
        self._tiles: dict[tuple[int, int], np.ndarray] = {}
        self._masks: dict[tuple[str, int], np.ndarray] = {}
        self._hash_key = int(_splitmix64(np.array([(self.seed * 1_000_003 + self.index) % (1 << 64)], np.uint64))[0])

    @property
    def name(self) -> str:
        return f"synthetic-{self.seed}-{self.index}"

    # ---- timeline -------------------------------------------------------------------
    def _make_scenes(self, rng: np.random.Generator) -> tuple[Scene, ...]:
        n = int(np.clip(round(self.duration / 150.0), 4, 8))
        n = min(n, len(SCENE_NAMES))
        names = rng.choice(len(SCENE_NAMES), size=n, replace=False)
        # Dirichlet lengths with a floor so that every scene is visible in a 16-frame overview
        # half of the time, and the longest scene in every one.
        weights = rng.dirichlet(np.full(n, 3.0))
        lengths = (0.5 / n + 0.5 * weights) * self.duration
        bounds = np.concatenate([[0.0], np.cumsum(lengths)])
        bounds[-1] = self.duration
        return tuple(Scene(SCENE_NAMES[k], float(a), float(b))
                     for k, a, b in zip(names, bounds[:-1], bounds[1:]))

    def _make_needles(self, rng: np.random.Generator, n: int) -> tuple[Event, ...]:
        combos = rng.permutation(len(COLOURS) * len(SHAPES))[:n]
        colours, shapes = list(COLOURS), SHAPES
        # Non-overlapping slots keep one needle on screen at a time, so a caption is unambiguous.
        slot = self.duration / n
        events = []
        for k, combo in enumerate(combos):
            length = float(rng.uniform(1.0, MAX_EVENT_SECONDS))
            length = min(length, slot * 0.8)
            start = round(k * slot + float(rng.uniform(0.0, slot - length)), 1)
            end = round(start + length, 1)
            scene = self.scene_at(start)
            if end > scene.end:  # keep each needle inside one scene: "during the X scene" is unambiguous
                if scene.end - start >= 1.1:
                    end = math.floor(scene.end * 10) / 10
                else:
                    start = math.ceil(scene.end * 10) / 10
                    end = min(round(start + length, 1), math.floor((k + 1) * slot * 10) / 10)
                    scene = self.scene_at(start)
                    if end - start < 1.0 or end > scene.end:
                        continue  # no clean place in this slot: fewer needles, never ambiguous ones
            colour, shape = colours[combo // len(SHAPES)], shapes[combo % len(SHAPES)]
            position = POSITIONS[int(rng.integers(len(POSITIONS)))]
            events.append(Event(start, end, colour, shape, position, scene.name))
        return tuple(events)

    def scene_at(self, t: float) -> Scene:
        i = int(np.searchsorted([s.start for s in self.scenes], t, side="right")) - 1
        return self.scenes[max(0, min(i, len(self.scenes) - 1))]

    def scene_indices(self, times: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self._scene_starts, times, side="right") - 1
        return np.clip(i, 0, len(self.scenes) - 1)

    def events_between(self, start: float, end: float) -> list[Event]:
        """Needles whose visible span intersects ``[start, end)``."""
        lo = np.searchsorted(self._event_starts, start - MAX_EVENT_SECONDS, side="left")
        hi = np.searchsorted(self._event_starts, end, side="left")
        return [e for e in self.events[lo:hi] if e.end > start and e.start < end]

    def distractors_between(self, start: float, end: float,
                            timestamps: np.ndarray | None = None) -> list[Distractor]:
        """Distractors intersecting ``[start, end)``; with ``timestamps`` (sorted), only those
        visible at one of them. Vectorised over 15 s buckets: cost grows with the window asked
        for, never with the video."""
        first = max(0, int(math.floor(start / DISTRACTOR_BUCKET)) - 1)
        last = int(math.floor(min(end, self.duration) / DISTRACTOR_BUCKET))
        if last < first:
            return []
        buckets = np.arange(first, last + 1, dtype=np.uint64)
        base = _splitmix64(buckets * np.uint64(8) + np.uint64(self._hash_key))
        present, u_len, u_off, u_shape, u_y, u_x = (_unit_floats(_splitmix64(base + np.uint64(j)))
                                                     for j in range(6))
        length = 1.0 + (MAX_DISTRACTOR_SECONDS - 1.0) * u_len
        starts = np.round(buckets.astype(np.float64) * DISTRACTOR_BUCKET + u_off * (DISTRACTOR_BUCKET - length), 2)
        ends = np.round(np.minimum(starts + length, self.duration), 2)
        keep = (present < DISTRACTOR_PROBABILITY) & (starts < self.duration) & (ends > start) & (starts < end)
        if timestamps is not None:
            keep &= np.searchsorted(timestamps, starts, "left") < np.searchsorted(timestamps, ends, "left")
        return [Distractor(float(starts[i]), float(ends[i]), SHAPES[int(u_shape[i] * len(SHAPES))],
                           (0.1 + 0.8 * float(u_y[i]), 0.1 + 0.8 * float(u_x[i])))
                for i in np.flatnonzero(keep)]

    # ---- rendering ----------------------------------------------------------------------
    def _tile(self, size: tuple[int, int]) -> np.ndarray:
        """Backgrounds of every scene at one size, shape (num_scenes, H, W, 3)."""
        tile = self._tiles.get(size)
        if tile is None:
            h, w = size
            yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
            tiles = []
            for k, scene in enumerate(self.scenes):
                a, b = (np.array(c, np.float32) for c in SCENES[scene.name])
                angle = (SCENE_NAMES.index(scene.name) * 0.7 + 0.3) % math.pi
                freq = 2.0 + SCENE_NAMES.index(scene.name) % 3
                wave = 0.5 + 0.5 * np.sin(2 * math.pi * freq * (xx * math.cos(angle) + yy * math.sin(angle)))
                tiles.append(a + (b - a) * wave[..., None].astype(np.float32))
            tile = np.stack(tiles).round().astype(np.uint8)
            if len(self._tiles) > 8:
                self._tiles.clear()
            self._tiles[size] = tile
        return tile

    def _mask(self, shape: str, side: int) -> np.ndarray:
        key = (shape, side)
        if key not in self._masks:
            self._masks[key] = shape_mask(shape, side)
        return self._masks[key]

    def _paint(self, frames: np.ndarray, which: np.ndarray, shape: str, center: tuple[float, float],
               scale: float, colour: tuple[int, int, int]) -> None:
        n, h, w, _ = frames.shape
        side = max(3, int(round(scale * min(h, w))))
        mask = self._mask(shape, side)
        y0 = int(round(center[0] * h - side / 2))
        x0 = int(round(center[1] * w - side / 2))
        ys, xs = slice(max(0, y0), min(h, y0 + side)), slice(max(0, x0), min(w, x0 + side))
        m = mask[ys.start - y0: ys.stop - y0, xs.start - x0: xs.stop - x0]
        region = frames[which, ys, xs]
        region[:, m] = colour
        frames[which, ys, xs] = region

    def frames_at(self, times: np.ndarray | list[float], size: tuple[int, int] = (64, 64)) -> np.ndarray:
        """Render frames at ``times`` (seconds) as uint8 ``(N, H, W, 3)``."""
        size = check_size(size)
        t = np.asarray(times, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(t)):
            raise ValueError("frame times must be finite")
        t = np.clip(t, 0.0, np.nextafter(self.duration, 0.0))
        frames = self._tile(size)[self.scene_indices(t)]
        if len(t) == 0:
            return frames
        lo, hi = float(t.min()), float(t.max())
        for d in self.distractors_between(lo, hi + 1e-9, np.sort(t)):
            which = np.flatnonzero((t >= d.start) & (t < d.end))
            if len(which):
                self._paint(frames, which, d.shape, d.center, DISTRACTOR_SCALE, DISTRACTOR_COLOUR)
        for e in self.events_between(lo, hi + 1e-9):
            which = np.flatnonzero(e.visible_at(t))
            if len(which):
                self._paint(frames, which, e.shape, position_center(e.position), NEEDLE_SCALE,
                            COLOURS[e.colour])
        return frames

    # ---- truth --------------------------------------------------------------------------
    def caption(self, timestamps: np.ndarray | list[float]) -> str:
        """What frames sampled at ``timestamps`` show, and nothing more.

        Objects are reported with the first and last sampled time at which they are
        visible, so a needle that falls between two samples is honestly absent.
        """
        t = np.asarray(timestamps, dtype=np.float64).reshape(-1)
        if len(t) == 0:
            return "No frames."
        scenes = []
        scene_idx = self.scene_indices(t)
        for k in dict.fromkeys(scene_idx.tolist()):
            seen = t[scene_idx == k]
            scenes.append(CaptionEntry(f"{self.scenes[k].name} scene", float(seen[0]), float(seen[-1])))
        objects = []
        lo, hi = float(t.min()), float(t.max()) + 1e-9
        for e in self.events_between(lo, hi):
            seen = t[e.visible_at(t)]
            if len(seen):
                objects.append(CaptionEntry(f"{e.colour} {e.shape} at {e.position}", float(seen[0]), float(seen[-1])))
        for d in self.distractors_between(lo, hi, np.sort(t)):
            seen = t[(t >= d.start) & (t < d.end)]
            if len(seen):
                what = f"small {DISTRACTOR_COLOUR_NAME} {d.shape}"
                objects.append(CaptionEntry(what, float(seen[0]), float(seen[-1])))
        return render_caption(scenes, objects)

    @cached_property
    def longest_scene(self) -> Scene:
        return max(self.scenes, key=lambda s: s.end - s.start)


# ---------------------------------------------------------------------------------------------
# the caption grammar: "Scenes: ocean scene (100.0-148.0 s); cave scene (154.0 s). Objects: red circle at
# bottom-left (124.0 s); small grey star (130.0-133.0 s)."
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaptionEntry:
    """One thing a caption lists: a scene ("ocean scene") or an object ("red star at top", "small grey
    circle"), with the first and last sampled time that shows it."""
    what: str
    first: float
    last: float

    def span(self) -> str:
        return f"{self.first:.1f} s" if self.first == self.last else f"{self.first:.1f}-{self.last:.1f} s"

    def text(self) -> str:
        return f"{self.what} ({self.span()})"


def render_caption(scenes: list[CaptionEntry], objects: list[CaptionEntry]) -> str:
    """The caption of these entries; objects in order of first sighting (ties by their text)."""
    objects = sorted(objects, key=lambda e: (e.first, e.text()))
    text = "Scenes: " + "; ".join(e.text() for e in scenes) + "."
    return text + " Objects: " + ("; ".join(e.text() for e in objects) if objects else "none") + "."


_CAPTION = re.compile(r"Scenes: (.+?)\. Objects: (.+)\.", re.S)
_CAPTION_ENTRY = re.compile(r"(.+?) \((\d+\.\d)(?:-(\d+\.\d))? s\)")
MAX_CAPTION_CHARS = 20_000  # a caption of 16 frames is a few hundred characters


def parse_caption(text: str) -> tuple[list[CaptionEntry], list[CaptionEntry]] | None:
    """(scenes, objects) of a caption written in the world's grammar; None for any other text."""
    m = _CAPTION.fullmatch(text.strip()) if isinstance(text, str) and len(text) <= MAX_CAPTION_CHARS else None
    if m is None:
        return None
    out: list[list[CaptionEntry]] = []
    for body in m.groups():
        entries = []
        for part in ([] if body == "none" and out else body.split("; ")):
            e = _CAPTION_ENTRY.fullmatch(part)
            if e is None:
                return None
            entries.append(CaptionEntry(e[1], float(e[2]), float(e[3] or e[2])))
        out.append(entries)
    return out[0], out[1]


def _longest_sighting(what: str) -> float:
    """How long the thing a caption entry names can stay on screen."""
    if what.endswith(" scene"):
        return math.inf
    return MAX_DISTRACTOR_SECONDS if what.startswith("small ") else MAX_EVENT_SECONDS


def merge_captions(parts: list[str], timestamps: list) -> str | None:
    """The caption of consecutive crops taken together, from each crop's own caption: ``parts[i]``
    describes frames at ``timestamps[i]``, parts in time order. Where every part is the world's caption
    of its frames, the result is the world's caption of all the frames. A thing seen up to one part's
    last frame and again from the next part's first frame is one sighting; any other repeat of a name
    stays a separate entry, as the world lists two scenes or needles that share a name, and so does a
    joined sighting longer than such a thing lasts (two grey distractors of one shape in adjacent frames).
    None when a part is not in the caption grammar."""
    scenes: list[CaptionEntry] = []
    objects: list[CaptionEntry] = []
    previous_last = None
    for text, ts in zip(parts, timestamps, strict=True):
        parsed = parse_caption(text)
        ts = np.asarray(ts, dtype=np.float64).reshape(-1)
        if parsed is None or len(ts) == 0:
            return None
        first = f"{ts[0]:.1f}"  # times compared as the captions print them
        for merged, new in ((scenes, parsed[0]), (objects, parsed[1])):
            for e in new:
                j = next((j for j, m in enumerate(merged) if previous_last is not None and m.what == e.what
                          and f"{m.last:.1f}" == previous_last and f"{e.first:.1f}" == first
                          and e.last - m.first <= _longest_sighting(e.what) + 0.1), None)
                if j is None:
                    merged.append(e)
                else:
                    merged[j] = CaptionEntry(e.what, merged[j].first, e.last)
        previous_last = f"{ts[-1]:.1f}"
    return render_caption(scenes, objects)


def uniform_timestamps(start: float, end: float, n: int) -> np.ndarray:
    """``n`` timestamps at the centres of ``n`` equal bins of ``[start, end)``."""
    return start + (np.arange(n) + 0.5) * ((end - start) / n)
