"""The procedural world and its questions: determinism, lazy rendering, truthful evidence
and captions, split hygiene, question well-formedness, input validation.

"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paravt_env import SyntheticDataset
from paravt_env.questions import ANSWER_TYPES, FAMILIES, LETTERS, Question, make_question
from paravt_env.sources import SPLITS
from paravt_env.world import (COLOURS, DISTRACTOR_BUCKET, MAX_RENDER_PIXELS, NEEDLE_SCALE, POSITIONS,
                              SCENE_NAMES, SHAPES, SyntheticVideo, check_size, position_center, shape_mask,
                              uniform_timestamps)

SIZES = [(64, 64), (224, 224), (90, 160), (160, 90), (37, 53), (8, 8)]
FAMILY_TYPES = {"needle": "mcq", "needle_attribute": "open", "counting": "mcq", "temporal_order": "mcq",
                "grounding": "grounding", "global": "mcq"}


# ---- helpers -------------------------------------------------------------------------------


def needle_box(event, size):
    """(y0, x0, side) of the needle's painted box, as the spec says: side = 30 % of the shorter
    side, centred on the position's grid cell."""
    h, w = size
    side = max(3, int(round(NEEDLE_SCALE * min(h, w))))
    cy, cx = position_center(event.position)
    return int(round(cy * h - side / 2)), int(round(cx * w - side / 2)), side


def colour_count(frame, colour_name):
    return int(np.all(frame == np.array(COLOURS[colour_name], np.uint8), axis=-1).sum())


def expected_count(video, t, size, colour_name):
    """Pixels of exactly this needle colour at time t: the masks of every visible needle of it."""
    total = 0
    for e in video.events:
        if e.colour == colour_name and e.visible_at(t):
            y0, x0, side = needle_box(e, size)
            assert 0 <= y0 and y0 + side <= size[0] and 0 <= x0 and x0 + side <= size[1]
            total += int(shape_mask(e.shape, side).sum())
    return total


_NAME_RE = re.compile(r"\b(" + "|".join(COLOURS) + r") (" + "|".join(SHAPES) + r") at ("
                      + "|".join(sorted(POSITIONS, key=len, reverse=True)) + r") \(([^)]*)\)")


def caption_needles(text):
    """{"red star": ("top-left", "12.0-15.0 s"), ...} from a caption."""
    return {f"{c} {s}": (p, span) for c, s, p, span in _NAME_RE.findall(text)}


def scene_named(video, text):
    name = re.search(r"during the (\w+) scene", text).group(1)
    return next(s for s in video.scenes if s.name == name)


def option_of(q):
    return q.options[LETTERS.index(q.answer)]


def digest(video, times, size=(48, 64)):
    h = hashlib.sha256()
    h.update(video.frames_at(times, size).tobytes())
    h.update(video.caption(times).encode())
    h.update(repr(video.events).encode())
    h.update(repr(video.scenes).encode())
    return h.hexdigest()


# ---- determinism ---------------------------------------------------------------------------


def test_same_seed_and_index_give_identical_videos():
    times = np.random.default_rng(0).uniform(0, 2000, 40)
    a, b = SyntheticVideo(7, 3), SyntheticVideo(7, 3)
    assert a.duration == b.duration and a.scenes == b.scenes and a.events == b.events
    assert np.array_equal(a.frames_at(times, (40, 56)), b.frames_at(times, (40, 56)))
    assert a.caption(times) == b.caption(times)
    assert a.distractors_between(0, a.duration) == b.distractors_between(0, b.duration)


def test_rendering_is_repeatable_on_one_object():
    """Rendering other times (and painting needles) never corrupts the cached backgrounds."""
    v = SyntheticVideo(1, 2)
    e = v.events[0]
    t = np.array([e.start + 0.01, 3.0, v.duration / 2])
    first = v.frames_at(t, (64, 64)).copy()
    for _ in range(3):
        v.frames_at(np.array([ev.start + 0.01 for ev in v.events]), (64, 64))
    assert np.array_equal(v.frames_at(t, (64, 64)), first)


def test_different_index_or_seed_gives_different_video():
    times = uniform_timestamps(0, 600, 32)
    base = SyntheticVideo(7, 3, duration=600)
    for other in (SyntheticVideo(7, 4, duration=600), SyntheticVideo(8, 3, duration=600)):
        assert other.events != base.events
        assert not np.array_equal(other.frames_at(times), base.frames_at(times))


def test_questions_are_deterministic():
    for split in SPLITS:
        a, b = SyntheticDataset(split, seed=5, size=24), SyntheticDataset(split, seed=5, size=24)
        for i in range(len(a)):
            assert a[i].question == b[i].question
    # a family subset asks the same question about the same video as the full set
    sub = SyntheticDataset("train", seed=5, size=4, families=("counting", "grounding"))
    full = SyntheticDataset("train", seed=5, size=12)
    assert sub[0].question == full[2].question and sub[1].question == full[4].question
    assert sub[2].question == full[8].question


def test_determinism_across_processes():
    """Nothing depends on PYTHONHASHSEED or process state: a fresh interpreter agrees."""
    code = ("import json, sys, numpy as np\n"
            "sys.path.insert(0, 'tests')\n"
            "from paravt_env.world import SyntheticVideo\n"
            "from paravt_env import SyntheticDataset\n"
            "from test_world import digest\n"
            "v = SyntheticVideo(11, 4)\n"
            "t = np.linspace(0, v.duration, 50)\n"
            "q = [SyntheticDataset('test', seed=11, size=12)[i].question.to_dict() for i in range(12)]\n"
            "print(json.dumps([digest(v, t), q]))\n")
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, timeout=60)
    assert out.returncode == 0, out.stderr
    there = json.loads(out.stdout)
    v = SyntheticVideo(11, 4)
    here = [digest(v, np.linspace(0, v.duration, 50)),
            [SyntheticDataset("test", seed=11, size=12)[i].question.to_dict() for i in range(12)]]
    assert there == json.loads(json.dumps(here))


# ---- lazy rendering ------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_render_shapes_and_dtype(size):
    v = SyntheticVideo(0, 1)
    times = np.random.default_rng(1).uniform(0, v.duration, 7)
    frames = v.frames_at(times, size)
    assert frames.shape == (7, *size, 3) and frames.dtype == np.uint8
    assert frames.flags.writeable
    # list, scalar and empty inputs
    assert v.frames_at([1.0, 2.0], size).shape == (2, *size, 3)
    assert v.frames_at(5.0, size).shape == (1, *size, 3)
    assert v.frames_at(np.array([]), size).shape == (0, *size, 3)


def test_times_outside_the_video_are_clamped():
    v = SyntheticVideo(0, 1, duration=120)
    eps = np.nextafter(120.0, 0.0)
    assert np.array_equal(v.frames_at([-5.0, 1e9]), v.frames_at([0.0, eps]))


def test_scenes_look_different_and_tile_the_video():
    v = SyntheticVideo(3, 0)
    assert v.scenes[0].start == 0.0 and v.scenes[-1].end == v.duration
    assert all(a.end == b.start for a, b in zip(v.scenes, v.scenes[1:]))
    assert len({s.name for s in v.scenes}) == len(v.scenes)
    mids = [(s.start + s.end) / 2 for s in v.scenes]
    bg = v._tile((32, 32))
    means = bg.reshape(len(v.scenes), -1, 3).mean(1)
    assert len({tuple(np.round(m)) for m in means}) == len(v.scenes)
    # every scene is a distinct background in a rendered frame too
    frames = v.frames_at(mids, (32, 32)).astype(int)
    for i in range(len(mids)):
        for j in range(i + 1, len(mids)):
            assert np.abs(frames[i] - frames[j]).mean() > 3


_VIDEO_H = SyntheticVideo(2, 9, duration=300)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-50, 400, allow_nan=False), min_size=1, max_size=12),
       st.sampled_from([(32, 48), (24, 24), (40, 16)]))
def test_batch_rendering_equals_one_at_a_time(times, size):
    """A frame depends on its own time only, not on what it is batched with."""
    batch = _VIDEO_H.frames_at(times, size)
    single = np.concatenate([_VIDEO_H.frames_at([t], size) for t in times])
    assert np.array_equal(batch, single)


def test_background_cache_is_bounded():
    v = SyntheticVideo(0, 0)
    for k in range(20):
        v.frames_at([1.0], (16 + 2 * k, 16))
    assert len(v._tiles) <= 9


def test_long_video_overview_works_with_bounded_state():
    """3 h and 48 h videos: needle count is capped, an overview renders, memory stays small."""
    for duration in (600.0, 3 * 3600.0, 48 * 3600.0):
        v = SyntheticVideo(0, 5, duration=duration)
        assert 4 <= len(v.events) <= len(COLOURS) * len(SHAPES)
        assert 4 <= len(v.scenes) <= 8
        ts = uniform_timestamps(0, duration, 16)
        tracemalloc.start()
        frames = v.frames_at(ts, (64, 64))
        v.caption(ts)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert frames.shape == (16, 64, 64, 3)
        assert peak < 8 * 2**20, f"{duration} s overview peaked at {peak / 2**20:.1f} MiB"


class _Work:
    """Spy on the per-object work of one video: Distractor objects built (world-wide) and
    shapes painted (on this video)."""

    def __init__(self, video, monkeypatch):
        import paravt_env.world as world

        self.distractors = 0
        self.paints = 0
        original_paint = video._paint
        base = world.Distractor
        work = self

        class Counted(base):
            def __init__(self, *args, **kwargs):
                work.distractors += 1
                super().__init__(*args, **kwargs)

        def paint(*args, **kwargs):
            work.paints += 1
            return original_paint(*args, **kwargs)

        monkeypatch.setattr(world, "Distractor", Counted)
        monkeypatch.setattr(video, "_paint", paint)

    def reset(self):
        self.distractors = self.paints = 0


@pytest.mark.parametrize("duration", [600.0, 3 * 3600.0, 48 * 3600.0])
def test_overview_work_is_bounded_by_the_frames_not_the_duration(duration, monkeypatch):
    """A K-frame overview builds at most K distractors and paints at most 2K shapes (one
    distractor and one needle per instant), however long the video."""
    k = 16
    v = SyntheticVideo(0, 5, duration=duration)
    work = _Work(v, monkeypatch)
    ts = uniform_timestamps(0, duration, k)
    v.frames_at(ts, (32, 32))
    assert work.distractors <= k and work.paints <= 2 * k
    work.reset()
    v.caption(ts)
    assert work.distractors <= k


def test_crop_of_a_long_video_touches_only_nearby_objects(monkeypatch):
    v = SyntheticVideo(0, 5, duration=3 * 3600.0)
    work = _Work(v, monkeypatch)
    for start in (0.0, 5000.0, v.duration - 10.0):
        work.reset()
        ts = uniform_timestamps(start, start + 10.0, 16)
        v.frames_at(ts, (64, 64))
        v.caption(ts)
        assert work.distractors <= 2 * 2 and work.paints <= 2 + 2
        assert len(v.events_between(start, start + 10.0)) <= 3
        assert len(v.distractors_between(start, start + 10.0)) <= 2


# ---- evidence correctness ------------------------------------------------------------------


@pytest.mark.parametrize("size", [(64, 64), (90, 160), (160, 90), (37, 53)])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_needle_pixels_appear_exactly_inside_the_event_window(index, size):
    """Inside [start, end) the needle's colour covers exactly its mask at its position (the
    needle is painted over any distractor); just outside, the colour is gone unless another
    needle of that colour is on screen."""
    v = SyntheticVideo(4, index)
    times, checks = [], []
    for e in v.events:
        inside = [e.start, e.start + 0.01, (e.start + e.end) / 2, e.end - 0.01]
        outside = [e.start - 0.01, e.end, e.end + 0.01]
        for t in inside + outside:
            times.append(t)
            checks.append((e, t, t in inside))
    frames = v.frames_at(np.array(times), size)
    clean_outside = 0
    for frame, (e, t, inside) in zip(frames, checks):
        n = colour_count(frame, e.colour)
        assert n == expected_count(v, t, size, e.colour), (e, t)
        y0, x0, side = needle_box(e, size)
        centre = frame[y0 + side // 2, x0 + side // 2]
        if inside:
            assert n == shape_mask(e.shape, side).sum() > 0
            assert tuple(centre) == COLOURS[e.colour]
            ys, xs = np.nonzero(np.all(frame == COLOURS[e.colour], axis=-1))
            assert y0 <= ys.min() and ys.max() < y0 + side and x0 <= xs.min() and xs.max() < x0 + side
        elif expected_count(v, t, size, e.colour) == 0:
            assert n == 0 and tuple(centre) != COLOURS[e.colour]
            clean_outside += 1
    assert clean_outside >= len(v.events)  # the outside check is not vacuous


def test_needles_never_overlap_in_time():
    for index in range(40):
        v = SyntheticVideo(9, index, duration=None if index % 2 else 30.0 + 97.0 * index)
        starts = [e.start for e in v.events]
        assert starts == sorted(starts)
        assert all(a.end <= b.start for a, b in zip(v.events, v.events[1:]))
        assert all(0 <= e.start < e.end <= v.duration for e in v.events)
        assert all(e.end - e.start <= 10.0 + 1e-9 for e in v.events)
        assert len({e.name for e in v.events}) == len(v.events)


def test_events_between_is_exact():
    v = SyntheticVideo(4, 7)
    rng = np.random.default_rng(3)
    for _ in range(200):
        a = float(rng.uniform(-20, v.duration))
        b = a + float(rng.uniform(0.01, 60))
        want = [e for e in v.events if e.end > a and e.start < b]
        assert v.events_between(a, b) == want


def test_distractors_are_grey_and_under_needles():
    v = SyntheticVideo(0, 3, duration=600)
    ds = v.distractors_between(0, v.duration)
    assert 5 < len(ds) < 40 * 0.5 * 2  # about one per two 15 s buckets
    mids = np.array([(d.start + d.end) / 2 for d in ds])
    frames = v.frames_at(mids, (64, 64))
    grey = np.all(frames == 128, axis=-1).sum(axis=(1, 2))
    assert (grey > 0).mean() > 0.8  # visible unless a needle covers them
    assert all(d.end - d.start <= 4.0 + 1e-9 and d.start // DISTRACTOR_BUCKET == (d.end - 1e-9) // DISTRACTOR_BUCKET
               for d in ds)


# ---- captions ------------------------------------------------------------------------------


def test_caption_mentions_exactly_the_sampled_needles():
    for index in range(4):
        v = SyntheticVideo(6, index)
        rng = np.random.default_rng(index)
        for fps, window in ((1.0, 60.0), (0.5, 120.0), (2.0, 20.0)):
            for start in rng.uniform(0, v.duration - window, 10):
                t = np.sort(uniform_timestamps(start, start + window, int(window * fps)))
                text = v.caption(t)
                seen = caption_needles(text)
                want = {e.name: e for e in v.events if np.any(e.visible_at(t))}
                assert set(seen) == set(want), text
                for name, e in want.items():
                    vis = t[e.visible_at(t)]
                    span = f"{vis[0]:.1f} s" if vis[0] == vis[-1] else f"{vis[0]:.1f}-{vis[-1]:.1f} s"
                    assert seen[name] == (e.position, span)
                # the scenes named are those of the sampled frames
                named = re.findall(r"(\w+) scene \(", text)
                assert named == list(dict.fromkeys(v.scene_at(x).name for x in t))
                # distractors: mentioned iff one is on screen at a sampled time
                grey = any(np.any((t >= d.start) & (t < d.end)) for d in v.distractors_between(start, start + window))
                assert ("small grey" in text) == grey


def test_caption_omits_needles_that_fall_between_samples():
    v = SyntheticVideo(6, 1)
    for e in v.events:
        # one sample just before the needle, one exactly at its (exclusive) end
        t = np.array([e.start - 0.05, e.end])
        assert e.name not in caption_needles(v.caption(t))
        assert e.name in caption_needles(v.caption(np.array([e.start - 0.05, (e.start + e.end) / 2, e.end])))
        # the frames agree with the caption: the colour is absent unless another needle has it
        frames = v.frames_at(t, (48, 48))
        for f, x in zip(frames, t):
            assert colour_count(f, e.colour) == expected_count(v, x, (48, 48), e.colour)


def test_caption_edge_cases():
    v = SyntheticVideo(0, 0)
    assert v.caption([]) == "No frames."
    text = v.caption([v.duration / 2])
    assert text.startswith("Scenes: ") and "Objects: " in text


# ---- splits --------------------------------------------------------------------------------


def test_splits_share_no_video():
    n = 300
    videos, ids = {}, set()
    for split in SPLITS:
        data = SyntheticDataset(split, seed=0, size=n)
        assert len(data) == n
        idx = set()
        for i in range(n):
            ep = data[i]
            assert ep.source.video.index == data.video_index(i)
            assert ep.question.id not in ids
            ids.add(ep.question.id)
            idx.add(ep.source.video.index)
        assert len(idx) == n // len(FAMILIES)
        videos[split] = idx
    assert not videos["train"] & videos["validation"]
    assert not videos["train"] & videos["test"]
    assert not videos["validation"] & videos["test"]


def test_dataset_indexing_and_validation():
    data = SyntheticDataset("train", seed=0, size=6)
    with pytest.raises(IndexError):
        data[6]
    with pytest.raises(IndexError):
        data[-1]
    assert len(list(data)) == 6
    with pytest.raises(ValueError, match="split"):
        SyntheticDataset("dev")
    with pytest.raises(ValueError, match="families"):
        SyntheticDataset("train", families=("needle", "bogus"))
    with pytest.raises(ValueError, match="families"):
        SyntheticDataset("train", families=())


# ---- question families ---------------------------------------------------------------------


def _questions():
    """Default-length videos, short (30-60 s, the 4-needle floor) and long (3 h, the 48 cap)."""
    out = []
    for split, seed, size, duration in (("validation", 1, 6 * 30, None), ("train", 2, 6 * 6, 30.0),
                                        ("train", 3, 6 * 6, 60.0), ("test", 4, 6 * 2, 3 * 3600.0)):
        data = SyntheticDataset(split, seed=seed, size=size, duration=duration)
        out += [data[i] for i in range(len(data))]
    return out


def test_every_family_gives_well_formed_questions():
    episodes = _questions()
    assert {ep.question.family for ep in episodes} == set(FAMILIES)
    for ep in episodes:
        q, v = ep.question, ep.source.video
        assert q.answer_type == FAMILY_TYPES[q.family] and q.answer_type in ANSWER_TYPES
        assert q.text.strip() and q.evidence
        assert all(0.0 <= a < b <= v.duration for a, b in q.evidence), q
        if q.answer_type == "mcq":
            assert 2 <= len(q.options) <= len(LETTERS) and len(set(q.options)) == len(q.options)
            assert re.fullmatch(f"[{LETTERS[:len(q.options)]}]", q.answer), q
            prompt = q.prompt()
            assert prompt.startswith(q.text) and all(f"{LETTERS[i]}. {o}" in prompt for i, o in enumerate(q.options))
        else:
            assert q.options is None and q.prompt() == q.text
        d = q.to_dict()
        assert d["question"] == q.text and d["answer"] == q.answer and d["type"] == q.answer_type
        assert [tuple(w) for w in d["evidence"]] == list(q.evidence)
        json.dumps(d)

        events = {e.name: e for e in v.events}
        if q.family == "needle":
            e = events[option_of(q)]
            assert q.evidence == ((e.start, e.end),) and f"the {e.scene} scene" in q.text
            same_scene = {x.name for x in v.events if x.scene == e.scene}
            assert not same_scene & (set(q.options) - {e.name})
        elif q.family == "needle_attribute":
            assert q.answer in COLOURS
            shape = re.search(r"the large (\w+) that appears", q.text).group(1)
            e = events[f"{q.answer} {shape}"]
            assert q.evidence == ((e.start, e.end),) and f"the {e.scene} scene" in q.text
            assert sum(x.shape == shape and x.scene == e.scene for x in v.events) == 1
        elif q.family == "counting":
            scene = scene_named(v, q.text)
            assert option_of(q) == str(len(q.evidence))
            assert list(q.evidence) == [(e.start, e.end) for e in v.events if e.scene == scene.name]
            assert all(o.isdigit() for o in q.options)
        elif q.family == "temporal_order":
            a, b = (events[o.removeprefix("the ")] for o in q.options)
            first = min(a, b, key=lambda e: e.start)
            assert option_of(q) == f"the {first.name}"
            assert q.evidence[0] == (first.start, first.end) and q.evidence[0][0] < q.evidence[1][0]
        elif q.family == "grounding":
            start, end = (float(x) for x in q.answer.split(","))
            assert (start, end) == pytest.approx(q.evidence[0], abs=0.051)
            name = re.search(r"is the (\w+ \w+) visible", q.text).group(1)
            assert (events[name].start, events[name].end) == q.evidence[0]
        elif q.family == "global":
            present = {s.name for s in v.scenes}
            assert option_of(q) in present and not (set(q.options) - {option_of(q)}) & present
            assert set(q.options) <= set(SCENE_NAMES)
            longest = v.longest_scene
            assert q.evidence == ((longest.start, longest.end),)


def test_needle_questions_show_their_answer_at_the_evidence():
    for ep in _questions()[:120]:
        q, v = ep.question, ep.source.video
        if q.family not in ("needle", "needle_attribute", "grounding"):
            continue
        a, b = q.evidence[0]
        e = next(x for x in v.events if (x.start, x.end) == (a, b))
        frame = v.frames_at([(a + b) / 2], (64, 64))[0]
        assert colour_count(frame, e.colour) > 0
        assert e.name in caption_needles(v.caption([(a + b) / 2]))


def test_question_validation():
    v = SyntheticVideo(0, 0)
    with pytest.raises(ValueError, match="family"):
        make_question(v, "trivia", "q", np.random.default_rng(0))
    with pytest.raises(ValueError, match="answer type"):
        Question("q", "needle", "text", "A", "yes-no")


def test_scene_questions_agree_with_what_is_on_screen():
    data = SyntheticDataset("train", seed=0, size=6 * 90)
    for i in range(len(data)):
        ep = data[i]
        q, v = ep.question, ep.source.video
        if q.family not in ("needle", "counting", "needle_attribute"):
            continue
        scene = scene_named(v, q.text)
        during = [e for e in v.events if e.end > scene.start and e.start < scene.end]
        if q.family == "counting":
            assert option_of(q) == str(len(during)), (i, q)
        elif q.family == "needle":
            assert {e.name for e in during} & set(q.options) == {option_of(q)}, (i, q)
        else:
            shape = re.search(r"the large (\w+) that appears", q.text).group(1)
            assert sum(e.shape == shape for e in during) == 1, (i, q)


# ---- input validation ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [(7, 64), (64, 7), (0, 0), (-8, 64), (2048, 2048), (64,), None, "ab",
                                  ("x", 64)])
def test_bad_sizes_raise(size):
    with pytest.raises(ValueError, match="size"):
        check_size(size)
    with pytest.raises(ValueError, match="size"):
        SyntheticVideo(0, 0).frames_at([1.0], size)


def test_largest_allowed_size_renders():
    assert check_size((1024, 1024)) == (1024, 1024)
    assert 1024 * 1024 == MAX_RENDER_PIXELS
    assert SyntheticVideo(0, 0).frames_at([1.0], (8, 1024)).shape == (1, 8, 1024, 3)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_times_raise(bad):
    v = SyntheticVideo(0, 0)
    with pytest.raises(ValueError, match="finite"):
        v.frames_at([1.0, bad])


@pytest.mark.parametrize("duration", [np.nan, np.inf, 29.0, 0.0, -60.0, 48 * 3600 + 1, 10 ** 400, 10 ** 5000,
                                      "600", True, [600], object()],
                         ids=lambda d: type(d).__name__)  # no repr of a 5000-digit int
def test_bad_durations_raise(duration):
    with pytest.raises(ValueError, match="duration"):
        SyntheticVideo(0, 0, duration=duration)


def test_bad_shapes_and_positions_raise():
    with pytest.raises(ValueError, match="shape"):
        shape_mask("hexagon", 10)
    with pytest.raises(ValueError):
        position_center("middle")
    for s in SHAPES:  # every shape has a filled centre and fits its box
        m = shape_mask(s, 21)
        assert m[10, 10] and 0.2 < m.mean() < 0.95


# ---- no question answerable from its text alone ---------------------------------------------


def _scene_counts(video):
    return [sum(e.scene == s.name for e in video.events) for s in video.scenes]


def test_counting_options_are_counts_the_video_holds():
    """The invariant behind text-only chance: every option is a count some scene of this video
    holds (so each is the answer equally often, whatever the options), ascending; the answer is
    the named scene's count. Short and 3-hour videos too."""
    episodes = [ep for ep in _questions() if ep.question.family == "counting"]
    data = SyntheticDataset("validation", seed=7, size=300, families=("counting",))
    episodes += [data[i] for i in range(len(data))]
    fallbacks = 0
    for ep in episodes:
        q, v = ep.question, ep.source.video
        values = [int(o) for o in q.options]
        assert values == sorted(set(values)) and 2 <= len(values) <= 4
        held = {c for c in _scene_counts(v) if c > 0}
        assert int(option_of(q)) == sum(e.scene == scene_named(v, q.text).name for e in v.events)
        if len(held) > 1:
            assert set(values) <= held and len(values) == min(4, len(held))
        else:  # every scene holds the same count: that count and a neighbour
            fallbacks += 1
            (c,) = held
            assert c in values and (set(values) - {c}) <= {c - 1, c + 1} - {0}
    assert fallbacks < 0.05 * len(episodes)


def test_counting_text_only_rules_stay_near_chance():
    """Rules that read only the options scored 0.63 (the number nearest the middle) and 0.78
    (which option won for this option set) with wrong counts drawn near the true one."""
    train = SyntheticDataset("train", seed=0, size=600, families=("counting",))
    val = SyntheticDataset("validation", seed=0, size=600, families=("counting",))
    won: dict = {}
    for i in range(len(train)):
        q = train[i].question
        won.setdefault(q.options, []).append(q.answer)
    middle = table = chance = 0.0
    for i in range(len(val)):
        q = val[i].question
        values = [int(o) for o in q.options]
        mid = (values[0] + values[-1]) / 2
        middle += LETTERS[int(np.argmin([abs(x - mid) for x in values]))] == q.answer
        seen = won.get(q.options, ["A"])
        table += max(set(seen), key=seen.count) == q.answer
        chance += 1 / len(values)
    n = len(val)
    assert middle / n < chance / n + 0.06 and table / n < chance / n + 0.06, (middle / n, table / n, chance / n)


def test_text_only_benchmark_runs_and_writes_its_tables(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import text_only

    results = text_only.main(["--episodes", "40", "--train-episodes", "40", "--out", str(tmp_path)])
    assert set(results) == {"needle", "counting", "temporal_order", "global"}
    saved = json.loads((tmp_path / "text_only.json").read_text())
    assert saved["families"]["temporal_order"]["chance"] == 0.5
    for r in saved["families"].values():
        assert {"letter A", "naive Bayes (fit on train)", "option-set table (fit on train)"} <= set(r["agents"])
        assert all(0.0 <= a["accuracy"] <= 1.0 and a["ci95"][0] <= a["accuracy"] <= a["ci95"][1]
                   for a in r["agents"].values())
    md = (tmp_path / "text_only.md").read_text()
    assert md.startswith("| text-only agent |") and "| **chance** (mean 1/#options) |" in md


def test_merged_part_captions_are_the_caption_of_all_frames():
    """merge_captions: the world's captions of consecutive parts of a crop give, merged, the world's caption of
    the whole crop: sightings joined across a cut, separate things of one name kept apart."""
    from paravt_env.world import merge_captions, parse_caption, render_caption

    rng = np.random.default_rng(0)
    joined = 0
    for i in range(120):
        v = SyntheticVideo(5, i)
        for _ in range(5):
            lo = rng.uniform(0, v.duration - 40)
            t = uniform_timestamps(lo, min(v.duration, lo + rng.uniform(2, 400)), int(rng.integers(1, 17)))
            per = int(rng.integers(1, 6))
            cuts = np.linspace(0, len(t), -(-len(t) // per) + 1).round().astype(int)
            parts = [t[a:b] for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
            whole = v.caption(t)
            said = [v.caption(p) for p in parts]
            assert merge_captions(said, parts) == whole
            assert render_caption(*parse_caption(whole)) == whole
            joined += len(parts) > 1 and sum(len(parse_caption(s)[0]) for s in said) > len(parse_caption(whole)[0])
    assert joined > 50   # many crops had a scene seen on both sides of a cut
    # two grey crosses in adjacent frames are two distractors when no one distractor lasts that long
    a, b = "Scenes: city scene (350.0 s). Objects: small grey cross (350.0 s).", \
        "Scenes: city scene (356.0 s). Objects: small grey cross (356.0 s)."
    merged = merge_captions([a, b], [[350.0], [356.0]])
    assert merged.endswith("small grey cross (350.0 s); small grey cross (356.0 s).")
    assert "city scene (350.0-356.0 s)" in merged
    # anything outside the grammar: no merge
    assert merge_captions([a, "Scenes: city scene"], [[350.0], [356.0]]) is None
    assert merge_captions([a, b], [[350.0], []]) is None
    for bad in ("", "No frames.", "Scenes: . Objects: none.", "Scenes: x (1.0 s). Objects: y (2 s).", "x" * 30_000,
                None):
        assert parse_caption(bad) is None
