"""Video sources and datasets: overview/crop sampling and validation, the mp4 export round trip
through both decoders, the decord -> PyAV fallback, the export CLI, and bad input of every
kind failing early with an error that names the file (and row)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import av
import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paravt_env import (DatasetError, FileDataset, FileVideoSource, SyntheticDataset, SyntheticSource,
                        VideoError, load_dataset)
from paravt_env.export import export, main as export_main, write_video
from paravt_env.sources import MAX_CROP_FRAMES, MAX_OVERVIEW_FRAMES
from paravt_env.world import SyntheticVideo, uniform_timestamps

ROOT = Path(__file__).resolve().parents[1]
SEED, N, DURATION, SIZE, FPS = 3, 6, 60.0, (120, 160), 2.0
BACKENDS = ("decord", "pyav")


# ---- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One 60 s synthetic video (6 episodes) as h264 mp4 + episodes.jsonl."""
    return export(tmp_path_factory.mktemp("export"), n=N, seed=SEED, duration=DURATION, size=SIZE)


@pytest.fixture(scope="module")
def exported_av1(tmp_path_factory):
    return export(tmp_path_factory.mktemp("export_av1"), n=N, seed=SEED, duration=DURATION, size=SIZE,
                  codec="libsvtav1")


@pytest.fixture(scope="module")
def video_file(exported):
    return exported.parent / f"video_{SEED}_{SyntheticDataset('test', seed=SEED).video_index(0)}.mp4"


@pytest.fixture(scope="module")
def world_video():
    ep = SyntheticDataset("test", seed=SEED, size=N, duration=DURATION)[0]
    return ep.source.video


def write_counter(path, n=70, fps=7, gop=12, codec="libx264", size=(48, 64)):
    """Frame i is a flat grey of level 3 * i, so a decoded frame tells its own index. Short
    GOPs and B-frames make the decoders seek; 7 fps makes floor(i / 7 * 7) round down."""
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = size[1], size[0], "yuv420p"
        s.codec_context.gop_size = gop
        if codec == "libx264":
            s.options = {"crf": "10", "preset": "veryfast"}
        for i in range(n):
            img = np.full((*size, 3), 3 * i, np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


@pytest.fixture(scope="module")
def counter_file(tmp_path_factory):
    return write_counter(tmp_path_factory.mktemp("counter") / "counter.mp4")


def faststart_copy(src, dst):
    """Remux with the index (moov) first, as web videos are: truncating it then cuts the media
    data, not the index, so the file still opens."""
    with av.open(str(src)) as i, av.open(str(dst), "w", options={"movflags": "faststart"}) as o:
        s = i.streams.video[0]
        out = o.add_stream_from_template(s)
        for p in i.demux(s):
            if p.dts is None:
                continue
            p.stream = out
            o.mux(p)
    return dst


def frame_index(frames):
    return np.round(frames.reshape(len(frames), -1).mean(1) / 3).astype(int)


def mean_abs_diff(a, b):
    return np.abs(a.astype(np.int16) - b.astype(np.int16)).mean(axis=(1, 2, 3))


# ---- overview and crop on the synthetic source --------------------------------------------


@pytest.fixture(scope="module")
def synth():
    return SyntheticSource(SyntheticVideo(0, 1, duration=600.0))


def test_overview_timestamps_and_shapes(synth):
    for k, size in ((1, (64, 64)), (16, (48, 64)), (MAX_OVERVIEW_FRAMES, (8, 8))):
        f = synth.overview(k, size)
        assert f.images.shape == (k, *size, 3) and f.images.dtype == np.uint8
        assert np.allclose(f.timestamps, (np.arange(k) + 0.5) * 600.0 / k)
        assert np.array_equal(f.images, synth.video.frames_at(f.timestamps, size))


@pytest.mark.parametrize("start,end,fps,max_frames,n", [
    (100.0, 110.0, 1.0, 16, 10),
    (100.0, 110.0, 2.0, 16, 16),     # capped at max_frames
    (100.0, 110.0, 0.5, 16, 5),
    (100.0, 100.4, 1.0, 16, 1),      # shorter than one frame period: still one frame
    (0.0, 600.0, 30.0, MAX_CROP_FRAMES, MAX_CROP_FRAMES),
    (590.0, 600.0, 1.0, 4, 4),       # up to the very end
])
def test_crop_timestamps_and_shapes(synth, start, end, fps, max_frames, n):
    ts = synth.crop_timestamps(start, end, fps, max_frames)
    assert len(ts) == n and np.all((ts >= start) & (ts < end)) and np.all(np.diff(ts) > 0)
    assert np.allclose(ts, uniform_timestamps(start, end, n))
    f = synth.crop(start, end, fps, max_frames, size=(40, 72))
    assert f.images.shape == (n, 40, 72, 3)
    assert np.array_equal(f.timestamps, ts)
    assert np.array_equal(f.images, synth.video.frames_at(ts, (40, 72)))


CROP_ERRORS = [
    dict(start=-1.0, end=10.0), dict(start=590.0, end=601.0), dict(start=700.0, end=710.0),
    dict(start=10.0, end=10.0), dict(start=20.0, end=10.0),
    dict(start=float("nan"), end=10.0), dict(start=0.0, end=float("inf")), dict(start=-float("inf"), end=1.0),
    dict(fps=0.0), dict(fps=-1.0), dict(fps=float("nan")), dict(fps=float("inf")), dict(fps=31.0),
    dict(max_frames=0), dict(max_frames=MAX_CROP_FRAMES + 1), dict(max_frames=10**9), dict(max_frames=2.5),
    dict(max_frames="16"), dict(start=None), dict(end="later"),
]


@pytest.mark.parametrize("kwargs", CROP_ERRORS, ids=lambda k: repr(k))
def test_crop_validation_names_the_source(synth, kwargs):
    args = {"start": 0.0, "end": 10.0, "fps": 1.0, "max_frames": 16, **kwargs}
    with pytest.raises(VideoError, match=re.escape(synth.name)):
        synth.crop(**args)


@pytest.mark.parametrize("k", [0, -3, MAX_OVERVIEW_FRAMES + 1, 2.5, "8", None])
def test_overview_validation_names_the_source(synth, k):
    with pytest.raises(VideoError, match=re.escape(synth.name)):
        synth.overview(k)


def test_bad_sizes_raise(synth):
    with pytest.raises(ValueError, match="size"):
        synth.overview(4, (4, 4))
    with pytest.raises(ValueError, match="size"):
        synth.crop(0, 10, size=(64, -1))


# ---- export round trip ---------------------------------------------------------------------


def test_export_round_trip_questions(exported):
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(rows) == N and all(r["video"].endswith(".mp4") for r in rows)
    files = FileDataset(exported)
    synthetic = SyntheticDataset("test", seed=SEED, size=N, duration=DURATION)
    assert len(files) == N
    for i in range(N):
        a, b = files[i].question, synthetic[i].question
        assert (a.id, a.text, a.options, a.answer, a.answer_type, a.evidence, a.family) == \
               (b.id, b.text, b.options, b.answer, b.answer_type, b.evidence, b.family)
        assert a.prompt() == b.prompt()
        src = files[i].source
        assert isinstance(src, FileVideoSource) and src.backend == "decord"
        assert (src.num_frames, src.fps, src.duration) == (120, FPS, DURATION)
    assert files[0].source is files[5].source  # one decoder per video, cached


@pytest.mark.parametrize("backend", BACKENDS)
def test_decoded_frames_match_the_render(exported, world_video, backend):
    src = FileVideoSource(exported.parent / FileDataset(exported).rows[0][0].name, backend)
    assert src.backend == backend
    # at frame times, the file shows exactly the rendered instant (up to the codec)
    t = np.arange(src.num_frames) / FPS
    diff = mean_abs_diff(src.frames_at(t, SIZE), world_video.frames_at(t, SIZE))
    assert diff.max() < 8 and diff.mean() < 3, diff.max()
    # between frame times, the file holds the last frame (frame i covers [i / fps, (i + 1) / fps))
    ov = src.overview(64, SIZE)
    held = np.floor(ov.timestamps * FPS) / FPS
    assert mean_abs_diff(ov.images, world_video.frames_at(held, SIZE)).max() < 8
    crop = src.crop(20.0, 30.0, fps=1.6, max_frames=16, size=SIZE)
    assert len(crop.images) == 16
    held = np.floor(crop.timestamps * FPS) / FPS
    assert mean_abs_diff(crop.images, world_video.frames_at(held, SIZE)).max() < 8
    # other sizes resize
    assert src.overview(4, (60, 80)).images.shape == (4, 60, 80, 3)
    assert src.crop(0, 10, size=(200, 100)).images.shape == (10, 200, 100, 3)


def test_backends_agree(video_file):
    t = np.random.default_rng(0).uniform(0, DURATION, 40)
    a = FileVideoSource(video_file, "decord").frames_at(t, SIZE)
    b = FileVideoSource(video_file, "pyav").frames_at(t, SIZE)
    assert mean_abs_diff(a, b).max() < 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_frame_indexing_is_exact(counter_file, backend):
    """Frame i at t = i / fps (no float round-down), the frame held until (i + 1) / fps, any
    order and repeats, clamped at both ends."""
    src = FileVideoSource(counter_file, backend)
    assert (src.num_frames, src.fps) == (70, 7.0)
    i = np.arange(70)
    assert np.array_equal(frame_index(src.frames_at(i / 7.0)), i)
    assert np.array_equal(frame_index(src.frames_at((i + 0.98) / 7.0)), i)
    order = np.random.default_rng(1).permutation(70)[:25]
    order = np.concatenate([order, order[:5], [69, 0, 69]])
    assert np.array_equal(frame_index(src.frames_at(order / 7.0 + 0.01)), order)
    assert list(frame_index(src.frames_at([-5.0, 1e6]))) == [0, 69]
    assert src.frames_at([], (48, 64)).shape == (0, 48, 64, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_source_validation_names_the_file(video_file, backend):
    src = FileVideoSource(video_file, backend)
    for kwargs in (dict(start=50.0, end=61.0), dict(start=10.0, end=5.0), dict(start=float("nan"), end=5.0),
                   dict(start=0.0, end=5.0, fps=0.0), dict(start=0.0, end=5.0, max_frames=1000)):
        with pytest.raises(VideoError, match=re.escape(str(video_file))):
            src.crop(**kwargs)
    with pytest.raises(VideoError, match=re.escape(str(video_file))):
        src.frames_at([1.0, float("nan")])
    with pytest.raises(ValueError, match="size"):
        src.frames_at([1.0], (0, 64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_crops_are_safe(counter_file, backend):
    """The environment runs a turn's crops in a thread pool on one source."""
    src = FileVideoSource(counter_file, backend)
    windows = [(a, a + 2.0) for a in np.linspace(0, 7.5, 12)]
    want = [frame_index(src.crop(a, b, fps=3).images) for a, b in windows]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda w: frame_index(src.crop(w[0], w[1], fps=3).images), windows))
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


# ---- the decord -> PyAV fallback -----------------------------------------------------------


def test_av1_falls_back_to_pyav(exported_av1, world_video):
    """decord 0.6 cannot open AV1 (its FFmpeg has no AV1 decoder: 'cannot find video stream');
    PyAV decodes it with dav1d."""
    path = exported_av1.parent / FileDataset(exported_av1).rows[0][0].name
    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name in ("av1", "libdav1d", "libaom-av1")
    with pytest.raises(VideoError, match=re.escape(str(path)) + ".*decord"):
        FileVideoSource(path, "decord")
    src = FileVideoSource(path, "auto")
    assert src.backend == "pyav" and src.duration == DURATION
    t = np.arange(0, 120, 7) / FPS
    assert mean_abs_diff(src.frames_at(t, SIZE), world_video.frames_at(t, SIZE)).max() < 8
    ep = FileDataset(exported_av1)[0]
    assert ep.source.backend == "pyav"


def test_fallback_when_decord_fails(video_file, monkeypatch):
    import decord

    def broken(*args, **kwargs):
        raise RuntimeError("decord says no")

    monkeypatch.setattr(decord, "VideoReader", broken)
    src = FileVideoSource(video_file, "auto")
    assert src.backend == "pyav"
    assert src.overview(4, SIZE).images.shape == (4, *SIZE, 3)
    with pytest.raises(VideoError, match="decord says no"):
        FileVideoSource(video_file, "decord")


def test_both_backends_failing_reports_both(tmp_path):
    bad = tmp_path / "noise.mp4"
    bad.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(VideoError) as info:
        FileVideoSource(bad)
    msg = str(info.value)
    assert str(bad) in msg and "decord:" in msg and "pyav:" in msg


def test_unknown_backend(video_file):
    with pytest.raises(ValueError, match="backend"):
        FileVideoSource(video_file, "opencv")


# ---- bad video files -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bad_videos(tmp_path_factory, video_file):
    d = tmp_path_factory.mktemp("bad")
    data = video_file.read_bytes()
    (d / "empty.mp4").write_bytes(b"")
    (d / "noise.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 20000, dtype=np.uint8).tobytes())
    (d / "truncated.mp4").write_bytes(data[: len(data) // 2])
    fast = faststart_copy(video_file, d / "faststart.mp4")
    (d / "truncated_faststart.mp4").write_bytes(fast.read_bytes()[: fast.stat().st_size // 2])
    (d / "text.mp4").write_text("this is not a video\n" * 50)
    return d


@pytest.mark.parametrize("backend", ("auto",) + BACKENDS)
@pytest.mark.parametrize("name,match", [
    ("missing.mp4", "not found"),
    ("empty.mp4", "empty"),
    ("noise.mp4", "cannot decode"),
    ("truncated.mp4", "cannot decode"),            # index (moov) at the end: cut off
    ("truncated_faststart.mp4", "cannot decode"),  # index intact, media data cut: found at open
    ("text.mp4", "cannot decode"),
])
def test_bad_video_files_fail_early_naming_the_file(bad_videos, backend, name, match):
    path = bad_videos / name
    with pytest.raises(VideoError, match=re.escape(str(path)) + ".*" + match):
        FileVideoSource(path, backend)


def test_faststart_copy_is_fine(bad_videos, world_video):
    for backend in BACKENDS:
        src = FileVideoSource(bad_videos / "faststart.mp4", backend)
        assert src.num_frames == 120
        t = np.array([0.0, 30.0, 59.5])
        assert mean_abs_diff(src.frames_at(t, SIZE), world_video.frames_at(t, SIZE)).max() < 8


# ---- the export CLI ------------------------------------------------------------------------


def test_cli_exports(tmp_path):
    out = tmp_path / "cli"
    r = subprocess.run([sys.executable, "-m", "paravt_env.export", "--out", str(out), "--n", "7", "--seed", "1",
                        "--duration", "30", "--height", "48", "--width", "64", "--fps", "2.5"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "episodes.jsonl" in r.stdout
    data = FileDataset(out / "episodes.jsonl")
    assert len(data) == 7 and len(list(out.glob("*.mp4"))) == 2
    src = data[6].source
    assert (src.fps, src.num_frames) == (2.5, 75)
    assert data[0].question == SyntheticDataset("test", seed=1, size=7, duration=30)[0].question


def test_cli_rejects_bad_args_in_a_subprocess(tmp_path):
    r = subprocess.run([sys.executable, "-m", "paravt_env.export", "--out", str(tmp_path), "--n", "0"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "--n must be at least 1" in r.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv,match", [
    (["--n", "0"], "--n"), (["--n", "many"], "--n"),
    (["--fps", "0"], "--fps"), (["--fps", "31"], "--fps"), (["--fps", "nan"], "--fps"),
    (["--duration", "5"], "--duration"), (["--duration", "nan"], "--duration"),
    (["--duration", "1e9"], "--duration"),
    (["--height", "7"], "--height"), (["--width", "4000", "--height", "4000"], "--height"),
    (["--height", "65"], "even"),
    (["--split", "dev"], "--split"),
])
def test_cli_rejects_bad_args(tmp_path, capsys, argv, match):
    with pytest.raises(SystemExit) as info:
        export_main(["--out", str(tmp_path / "x")] + argv)
    assert info.value.code == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cli_requires_out(capsys):
    with pytest.raises(SystemExit):
        export_main(["--n", "2"])
    assert "--out" in capsys.readouterr().err


def test_write_video_validates(tmp_path):
    v = SyntheticVideo(0, 0, duration=30)
    with pytest.raises(ValueError, match="even"):
        write_video(v, tmp_path / "odd.mp4", size=(49, 64))
    with pytest.raises(ValueError, match="fps"):
        write_video(v, tmp_path / "nofps.mp4", fps=0.0)
    write_video(v, tmp_path / "frac.mp4", fps=1.5, size=(32, 32))  # float rates work
    src = FileVideoSource(tmp_path / "frac.mp4", "pyav")
    assert (src.fps, src.num_frames) == (1.5, 45)


# ---- question files: bad rows --------------------------------------------------------------


@pytest.fixture
def good_row(exported, tmp_path):
    row = json.loads(exported.read_text().splitlines()[0])
    video = tmp_path / row["video"]   # beside the question file each test writes: inside its video root
    os.link(exported.parent / row["video"], video)
    row["video"] = str(video)  # absolute paths work, inside the video root
    return row


def write_rows(path, rows, raw_lines=()):
    lines = [json.dumps(r) if not isinstance(r, str) else r for r in rows] + list(raw_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def without(row, key):
    return {k: v for k, v in row.items() if k != key}


BAD_ROWS = [
    # (mutation of a good mcq row, expected message)
    (lambda r: without(r, "id"), "missing field 'id'"),
    (lambda r: without(r, "video"), "missing field 'video'"),
    (lambda r: without(r, "question"), "missing field 'question'"),
    (lambda r: without(r, "answer"), "missing field 'answer'"),
    (lambda r: without(r, "type"), "missing field 'type'"),
    (lambda r: {**r, "question": None}, "missing field 'question'"),
    (lambda r: {**r, "id": [1]}, "field 'id' has type list"),
    (lambda r: {**r, "video": 5}, "field 'video' has type int"),
    (lambda r: {**r, "question": 7}, "field 'question' has type int"),
    (lambda r: {**r, "answer": True}, "field 'answer' has type bool"),
    (lambda r: {**r, "answer": ["A"]}, "field 'answer' has type list"),
    (lambda r: {**r, "type": 1}, "field 'type' has type int"),
    (lambda r: {**r, "type": "yes-no"}, "field 'type' must be one of"),
    (lambda r: {**r, "options": None}, "needs non-empty 'options'"),
    (lambda r: {**r, "options": []}, "needs non-empty 'options'"),
    (lambda r: without(r, "options"), "needs non-empty 'options'"),
    (lambda r: {**r, "options": "A, B"}, "'options' must be a list of strings"),
    (lambda r: {**r, "options": [1, 2]}, "'options' must be a list of strings"),
    (lambda r: {**r, "evidence": "soon"}, "'evidence' must be a list of"),
    (lambda r: {**r, "evidence": [[1.0]]}, "'evidence' must be a list of"),
    (lambda r: {**r, "evidence": [["a", "b"]]}, "'evidence' must be a list of"),
    (lambda r: {**r, "evidence": [[1, 2, 3]]}, "'evidence' must be a list of"),
    (lambda r: {**r, "evidence": 12}, "'evidence' must be a list of"),
    (lambda r: {**r, "evidence": [[5.0, 2.0]]}, "evidence windows must be finite"),
    (lambda r: {**r, "evidence": [[float("nan"), 2.0]]}, "evidence windows must be finite"),
    (lambda r: {**r, "evidence": [[0.0, float("inf")]]}, "evidence windows must be finite"),
    (lambda r: {**r, "evidence": [[-3.0, -1.0]]}, "evidence windows must be finite"),
    (lambda r: {**r, "family": 5}, "'family' must be a string"),
    (lambda r: [r["id"], r["question"]], "expected a JSON object, got list"),
    (lambda r: "just a string", "expected a JSON object, got str"),
]


@pytest.mark.parametrize("mutate,match", BAD_ROWS, ids=[m for _, m in BAD_ROWS])
def test_bad_rows_name_file_and_line(tmp_path, good_row, mutate, match):
    bad = mutate(dict(good_row))
    path = write_rows(tmp_path / "q.jsonl", [good_row, json.dumps(bad) if isinstance(bad, str) else bad])
    with pytest.raises(DatasetError, match=re.escape(f"{path}:2: ") + ".*" + re.escape(match)):
        FileDataset(path)


def test_invalid_json_line(tmp_path, good_row):
    path = write_rows(tmp_path / "q.jsonl", [good_row, good_row], raw_lines=['{"id": "x", "question": '])
    with pytest.raises(DatasetError, match=re.escape(f"{path}:3: not valid JSON")):
        FileDataset(path)


def test_blank_lines_are_skipped_and_lines_still_counted(tmp_path, good_row):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(good_row) + "\n\n   \n" + json.dumps(without(good_row, "id")) + "\n")
    with pytest.raises(DatasetError, match=re.escape(f"{path}:4: missing field 'id'")):
        FileDataset(path)
    path.write_text("\n" + json.dumps(good_row) + "\n\n")
    assert len(FileDataset(path)) == 1


def test_missing_empty_and_binary_question_files(tmp_path):
    with pytest.raises(DatasetError, match=re.escape(str(tmp_path / "nope.jsonl")) + ".*not found"):
        FileDataset(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DatasetError, match=re.escape(str(tmp_path / "empty.jsonl")) + ".*no questions"):
        FileDataset(tmp_path / "empty.jsonl")
    (tmp_path / "blank.jsonl").write_text("\n\n \n")
    with pytest.raises(DatasetError, match="no questions"):
        FileDataset(tmp_path / "blank.jsonl")
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00\x81" * 100)
    with pytest.raises(DatasetError, match=re.escape(str(tmp_path / "binary.jsonl")) + ".*not UTF-8"):
        FileDataset(tmp_path / "binary.jsonl")


def test_evidence_outside_the_video(tmp_path, good_row):
    """Found only once the video opens, mid-run: the episode's VideoError naming the video, which the
    trainers skip (a video cut short is the usual cause), never an error that ends the run."""
    from trainers.rollouts import BadVideos

    path = write_rows(tmp_path / "q.jsonl", [good_row, {**good_row, "id": "late", "evidence": [[100.0, 200.0]]}])
    data = FileDataset(path)  # the video's length is known only once it is opened
    assert data[0].question.id == good_row["id"]
    with pytest.raises(VideoError, match=re.escape(f"{path}:2: question 'late'") + ".*outside.*"
                       + re.escape(good_row["video"])) as caught:
        data[1]
    assert caught.value.video == good_row["video"]
    env = gym.make("ParaVT-LongVideo-v0", source=str(path), frame_budget=4).unwrapped
    skipped = BadVideos(redraw=False, log=lambda msg: None)
    assert skipped.reset(env, 0, {"episode_index": 1}) is None and skipped.episodes == [1]
    assert skipped.reset(env, 0, {"episode_index": 0})[1]["question_id"] == good_row["id"]


def test_missing_video_fails_naming_it(tmp_path, good_row):
    """Missing videos are skipped with a warning (as the release's loader does); with strict=True,
    or when no row is left, loading stops naming the file."""
    path = write_rows(tmp_path / "q.jsonl", [{**good_row, "video": "gone.mp4"}])
    with pytest.raises(DatasetError, match=re.escape(str(tmp_path / "gone.mp4"))):
        FileDataset(path)
    with pytest.raises(VideoError, match=re.escape(f"{path}:1: {tmp_path / 'gone.mp4'}: video file not found")):
        FileDataset(path, strict=True)


def test_relative_video_paths_and_cache_limit(tmp_path, video_file, good_row):
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        shutil.copy(video_file, tmp_path / name)
    rows = [{**good_row, "id": f"q{i}", "video": name} for i, name in enumerate(["a.mp4", "b.mp4", "c.mp4", "a.mp4"])]
    data = FileDataset(write_rows(tmp_path / "q.jsonl", rows), max_open_videos=2)
    names = [Path(data[i].source.name).name for i in range(4)]
    assert names == ["a.mp4", "b.mp4", "c.mp4", "a.mp4"]
    assert len(data._cache) <= 2


# ---- parquet and release-shaped rows -------------------------------------------------------


def test_parquet_round_trip(tmp_path, exported):
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    for r in rows:
        r["video"] = str(exported.parent / r["video"])
    path = tmp_path / "q.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    a, b = FileDataset(path, video_root=exported.parent), FileDataset(exported)
    assert [q for _, q in a.rows] == [q for _, q in b.rows]
    assert a[3].source.duration == DURATION


def test_parquet_bad_files_and_rows(tmp_path, good_row):
    bad = tmp_path / "noise.parquet"
    bad.write_bytes(b"PAR1" + os.urandom(500))
    with pytest.raises(DatasetError, match=re.escape(str(bad)) + ".*cannot read parquet"):
        FileDataset(bad)
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([good_row, {**good_row, "type": "essay"}]), path)
    with pytest.raises(DatasetError, match=re.escape(f"{path} row 1") + ".*'type'"):
        FileDataset(path)


def release_row(video, **kw):
    row = {"messages": [{"role": "system", "content": "You are a helpful video assistant."},
                        {"role": "user", "content": "<video>\nWhich of these scenes occurs in the video?"},
                        {"role": "assistant", "content": "<answer>B</answer>"}],
           "video_paths": [str(video)], "answer": "B", "question_type": "multiple_choice",
           "options": ["ocean", "forest", "cave", "sky"]}
    return {**row, **kw}


def test_release_shaped_rows_load(tmp_path, video_file):
    list_content = [{"type": "video", "video": str(video_file)},
                    {"type": "text", "text": "What colour is the star? Answer with one word."}]
    rows = [
        release_row(video_file, id="r0"),
        release_row(video_file, messages=[{"role": "user", "content": list_content}], answer="red",
                    question_type="open_ended", options=None),
        release_row(video_file, id=17, question_type="temporal_grounding", answer="12.0, 15.5", options=None,
                    evidence=[[12.0, 15.5]]),
    ]
    path = write_rows(tmp_path / "release.jsonl", rows)
    data = FileDataset(path, video_root=video_file.parent)
    q0, q1, q2 = (data[i].question for i in range(3))
    assert (q0.id, q0.text, q0.answer, q0.answer_type, q0.options) == \
           ("r0", "Which of these scenes occurs in the video?", "B", "mcq", ("ocean", "forest", "cave", "sky"))
    assert q0.family == "multiple_choice"
    assert (q1.text, q1.answer, q1.answer_type, q1.options) == \
           ("What colour is the star? Answer with one word.", "red", "open", None)
    assert q1.id == f"{path}:2"  # no id: the row's place stands in
    assert (q2.id, q2.answer_type, q2.evidence) == ("17", "grounding", ((12.0, 15.5),))
    assert data[0].source.duration == DURATION
    # and through parquet
    ppath = tmp_path / "release.parquet"
    pq.write_table(pa.Table.from_pylist([rows[0]]), ppath)
    assert FileDataset(ppath, video_root=video_file.parent)[0].question.text == q0.text


@pytest.mark.parametrize("kw,match", [
    (dict(video_paths=[]), "'video_paths' must be a non-empty list"),
    (dict(video_paths="a.mp4"), "'video_paths' must be a non-empty list"),
    (dict(messages="hi"), "'messages' is a string but not valid JSON"),
    (dict(messages=5), "'messages' must be a list"),
    (dict(messages=[{"role": "assistant", "content": "B"}]), "no user message"),
    (dict(messages=[{"role": "user", "content": "<video>"}]), "no user message"),
    (dict(question_type="essay"), "unknown question_type"),
    (dict(answer=None), "missing field 'answer'"),
    (dict(options=None), "no 'A. ...' lines in its prompt"),
])
def test_bad_release_rows(tmp_path, video_file, kw, match):
    path = write_rows(tmp_path / "release.jsonl", [release_row(video_file, **kw)])
    with pytest.raises(DatasetError, match=re.escape(f"{path}:1: ") + ".*" + re.escape(match)):
        FileDataset(path)


def test_load_dataset_dispatch(exported):
    assert isinstance(load_dataset(), SyntheticDataset)
    assert isinstance(load_dataset("synthetic", split="test", seed=2, size=12), SyntheticDataset)
    data = load_dataset(exported, backend="pyav")
    assert isinstance(data, FileDataset) and data[0].source.backend == "pyav"
