"""Video files as other tools write them, made here with PyAV: odd sizes, display rotation,
variable frame rate, audio tracks, MJPEG/AVI, VP9/WebM, MPEG-TS with a start offset, a raw
H.264 stream, one-frame videos, headers without a duration, a mid-stream size change, 10-bit
HEVC, an mp4 cut with an edit list, AVIs missing frames. Each must open, map times to the right
frame with both decoders (or fall back to PyAV where decord goes wrong) and play through the
environment."""

from __future__ import annotations

import io
import json
import re
from fractions import Fraction

import av
import gymnasium as gym
import numpy as np
import pytest

import paravt_env  # noqa: F401  (registers the env)
from paravt_env import FileDataset, FileVideoSource, VideoError

LEVEL = 8  # frame i is a flat grey of level LEVEL * i (at most 31 frames), so it tells its index
RED = np.array([255, 0, 0])


def frame_image(i, h, w):
    img = np.full((h, w, 3), LEVEL * i, np.uint8)
    img[: h // 4, : w // 4] = RED  # a red corner shows the orientation
    return img


def encode(path, codec="libx264", n=30, fps=10, size=(48, 64), pix_fmt="yuv420p", times=None, fmt=None,
           options=None, rotation=None, audio=None, opts=None):
    """Write ``n`` frames; ``times`` (seconds) gives each frame's timestamp (variable rate)."""
    h, w = size
    with av.open(path if isinstance(path, io.IOBase) else str(path), "w", format=fmt, options=options or {}) as c:
        s = c.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = w, h, pix_fmt
        if opts:
            s.options = opts
        if rotation is not None:
            s.set_display_rotation(rotation)
        if times is not None:
            s.codec_context.time_base = Fraction(1, 1000)
        a = c.add_stream(audio, rate=48000) if audio else None
        for i in range(n):
            f = av.VideoFrame.from_ndarray(frame_image(i, h, w), format="rgb24")
            if times is not None:
                f.pts, f.time_base = int(round(times[i] * 1000)), Fraction(1, 1000)
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
        if a is not None:
            size_ = a.codec_context.frame_size or 1024
            fmt_ = a.codec_context.format
            for k in range(0, int(48000 * n / fps), size_):
                tone = (np.sin((np.arange(size_) + k) / 20.0) * 0.3).astype(np.float32)
                arr = np.stack([tone, tone]) if fmt_.is_planar else np.stack([tone, tone]).T.reshape(1, -1)
                if fmt_.name.startswith("s16"):  # libopus takes 16-bit samples, aac floats
                    arr = (arr * 32767).astype(np.int16)
                af = av.AudioFrame.from_ndarray(arr, format=fmt_.name, layout="stereo")
                af.sample_rate, af.pts = 48000, k
                for p in a.encode(af):
                    c.mux(p)
            for p in a.encode():
                c.mux(p)
    return path


class NoSeek(io.RawIOBase):
    """A pipe-like sink: the muxer cannot go back to write the duration or the index."""

    def __init__(self, f):
        self.f = f

    def writable(self):
        return True

    def seekable(self):
        return False

    def write(self, b):
        return self.f.write(b)


def frame_indices(frames):
    """Index of each decoded frame from its grey level (read away from the red corner)."""
    h, w = frames.shape[1:3]
    return np.round(frames[:, h // 2:, w // 2:].reshape(len(frames), -1).mean(1) / LEVEL).astype(int)


def red_corner(frame):
    """Which corner of a frame is red: 'tl', 'tr', 'bl' or 'br'."""
    h, w = frame.shape[:2]
    corners = {"tl": frame[: h // 8, : w // 8], "tr": frame[: h // 8, -(w // 8):],
               "bl": frame[-(h // 8):, : w // 8], "br": frame[-(h // 8):, -(w // 8):]}
    return min(corners, key=lambda k: np.abs(corners[k].astype(int) - RED).mean())


VFR_TIMES = [0, 0.1, 0.2, 0.3, 1.0, 1.1, 1.2, 2.5, 2.6, 2.7, 2.8, 4.0, 4.05, 4.1, 4.15, 5.0, 5.5, 6.0, 6.1, 6.2]

CASES = {
    # name: (writer kwargs, expected duration in s, backend "auto" ends up with)
    "odd_444.mp4": (dict(size=(239, 321), pix_fmt="yuv444p"), 3.0, "decord"),
    "odd_mpeg4.avi": (dict(codec="mpeg4", size=(239, 321)), 3.0, "decord"),
    "mjpeg.avi": (dict(codec="mjpeg", pix_fmt="yuvj420p"), 3.0, "decord"),
    "vp9.webm": (dict(codec="libvpx-vp9"), 3.0, "decord"),
    "aac_audio.mp4": (dict(audio="aac"), 3.0, "decord"),
    "opus_audio.webm": (dict(codec="libvpx-vp9", audio="libopus"), 3.0, "decord"),
    "one_frame.mp4": (dict(n=1), 0.1, "decord"),
    "one_frame.webm": (dict(codec="libvpx-vp9", n=1), 0.1, "decord"),
    "vfr.mp4": (dict(n=20, times=VFR_TIMES), None, "decord"),
    "vfr.mkv": (dict(n=20, times=VFR_TIMES), 6.3, "decord"),
    "gop12.ts": (dict(fmt="mpegts", opts={"g": "12"}), 3.0, "pyav"),       # starts at 0.2 s; decord misseeks
    "one_gop.ts": (dict(fmt="mpegts"), 3.0, "pyav"),                         # every seek lands past the end
    "mpeg2.mpg": (dict(codec="mpeg2video", fmt="mpeg", opts={"g": "12"}), 3.0, "pyav"),
    "raw.h264": (dict(fmt="h264"), 3.0, "pyav"),                             # no timestamps, no duration
    "fragmented.mp4": (dict(options={"movflags": "frag_keyframe+empty_moov"}), 3.0, "decord"),
    "hevc10.mp4": (dict(codec="libx265", pix_fmt="yuv420p10le"), 3.0, "decord"),
    "rotated.mp4": (dict(rotation=-90), 3.0, "pyav"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("elsewhere")
    for name, (kw, _, _) in CASES.items():
        encode(d / name, **kw)
    with open(d / "live.webm", "wb") as f:  # as a browser's MediaRecorder writes: no duration, no cues
        encode(NoSeek(f), codec="libvpx-vp9", fmt="webm")
    return d


def expected_index(name, t):
    if name.startswith("vfr"):
        return np.searchsorted(VFR_TIMES, t + 1e-9, side="right") - 1
    n = CASES.get(name, ({},))[0].get("n", 30)
    return np.minimum(np.floor(np.asarray(t) * 10 + 1e-6).astype(int), n - 1)


@pytest.mark.parametrize("backend", ["auto", "pyav", "decord"])
@pytest.mark.parametrize("name", list(CASES) + ["live.webm"])
def test_files_from_other_encoders_map_times_to_the_right_frame(files, name, backend):
    _, duration, auto_backend = CASES.get(name, (None, 3.0, "pyav"))
    if backend == "decord" and (auto_backend == "pyav" or name == "live.webm"):
        with pytest.raises(VideoError, match="decord"):  # refused at open, never wrong frames later
            FileVideoSource(files / name, backend)
        return
    src = FileVideoSource(files / name, backend)
    assert src.backend == (auto_backend if backend == "auto" else backend)
    if duration is not None:
        assert src.duration == pytest.approx(duration, abs=1e-6)
    else:  # the mp4 muxer stores the last frame's duration as the previous gap or so
        assert 6.2 < src.duration <= 6.3 + 1e-6
    rng = np.random.default_rng(0)
    t = np.concatenate([rng.uniform(0, src.duration, 12), [0.0, src.duration - 1e-3]])
    frames = src.frames_at(t, (48, 64))
    assert frames.shape == (len(t), 48, 64, 3) and frames.dtype == np.uint8
    assert np.array_equal(frame_indices(frames), expected_index(name, t)), (frame_indices(frames),
                                                                           expected_index(name, t))
    ov = src.overview(8, (32, 32))
    assert np.array_equal(frame_indices(ov.images), expected_index(name, ov.timestamps))
    crop = src.crop(0.0, src.duration, fps=4, max_frames=8, size=(32, 32))
    assert 1 <= len(crop.timestamps) <= 8
    assert np.array_equal(frame_indices(crop.images), expected_index(name, crop.timestamps))


@pytest.mark.parametrize("rotation, corner, shape", [(-90, "tr", (64, 48)), (90, "bl", (64, 48)),
                                                     (180, "br", (48, 64))])
def test_rotated_phone_videos_come_out_upright(tmp_path, rotation, corner, shape):
    """Stored 64x48 with the red corner top-left; the display matrix turns it as a player would
    (-90: clockwise, the phone held upright)."""
    path = encode(tmp_path / "rot.mp4", rotation=rotation)
    src = FileVideoSource(path)
    assert src.backend == "pyav" and src.frame_shape == (48, 64)
    [frame] = src.frames_at([1.05], shape)
    assert red_corner(frame) == corner
    assert frame_indices(src.frames_at([1.05], shape)).tolist() == [10]
    with pytest.raises(VideoError, match="rotation"):
        FileVideoSource(path, "decord")
    assert red_corner(FileVideoSource(encode(tmp_path / "plain.mp4")).frames_at([1.05])[0]) == "tl"


def test_a_mid_stream_size_change_keeps_the_first_size(tmp_path):
    path = tmp_path / "sizes.mkv"
    with av.open(str(path), "w") as c:
        s = c.add_stream("mjpeg", rate=10)
        s.width, s.height, s.pix_fmt = 64, 48, "yuvj420p"
        for i in range(30):
            h, w = (48, 64) if i < 15 else (96, 128)
            enc = av.CodecContext.create("mjpeg", "w")
            enc.width, enc.height, enc.pix_fmt, enc.time_base = w, h, "yuvj420p", Fraction(1, 10)
            frame = av.VideoFrame.from_ndarray(frame_image(i, h, w), format="rgb24").reformat(format="yuvj420p")
            frame.pts = i
            for p in enc.encode(frame):
                p.stream, p.pts, p.dts, p.time_base = s, i, i, Fraction(1, 10)
                c.mux(p)
    with av.open(str(path)) as c:
        assert {(f.width, f.height) for f in c.decode(video=0)} == {(64, 48), (128, 96)}
    for backend in ("decord", "pyav"):
        src = FileVideoSource(path, backend)
        t = np.arange(30) / 10 + 0.05
        frames = src.frames_at(t, (48, 64))
        assert np.array_equal(frame_indices(frames), np.arange(30))
        assert src.frames_at(t, (96, 128)).shape == (30, 96, 128, 3)


def test_truncated_transport_stream_fails_at_open(files, tmp_path):
    data = (files / "gop12.ts").read_bytes()
    cut = tmp_path / "cut.ts"
    cut.write_bytes(data[: len(data) // 2])
    src = FileVideoSource(cut)  # a cut stream is still a stream: it is simply shorter
    assert src.backend == "pyav" and 0.5 < src.duration < 3.0
    t = np.linspace(0, src.duration - 0.01, 6)
    assert np.array_equal(frame_indices(src.frames_at(t)), expected_index("gop12.ts", t))


def test_files_from_elsewhere_play_through_the_env(files, tmp_path):
    names = ["vfr.mkv", "gop12.ts", "raw.h264", "live.webm", "one_frame.mp4", "odd_mpeg4.avi"]
    rows = [{"id": name, "video": name, "question": "What colour is the corner?", "answer": "red",
             "type": "open"} for name in names]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = gym.make("ParaVT-LongVideo-v0", source=str(path), video_root=str(files), frame_budget=4,
                   frame_size=(32, 32), subagent="frames").unwrapped
    for i in range(len(names)):
        obs, info = env.reset(seed=i, options={"episode_index": i})
        assert env.observation_space.contains(obs)
        d = info["video_duration"]
        obs, *_ = env.step('look\n</think><tool_call>{"name": "crop_video", "arguments": '
                           f'{{"start_time": 0, "end_time": {d}}}}}</tool_call>')
        assert obs["crop_mask"].sum() >= 1 and env.observation_space.contains(obs)
        *_, reward, term, _, info = env.step("ok\n</think><answer>red</answer>")
        assert term and info["correct"]


def test_dataset_of_such_files_opens_each_with_a_working_backend(files, tmp_path):
    rows = [{"id": n, "video": n, "question": "q?", "answer": "x", "type": "open"} for n in list(CASES)]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = FileDataset(path, video_root=files)
    assert [data[i].source.backend for i in range(len(data))] == [CASES[n][2] for n in CASES]


def test_a_picture_stream_before_the_video_is_not_the_video(tmp_path):
    """A cover picture / thumbnail track as stream 0: both decoders read the real video."""
    path = tmp_path / "cover.mkv"
    with av.open(str(path), "w") as c:
        art = c.add_stream("mjpeg", rate=1)
        art.width, art.height, art.pix_fmt = 32, 32, "yuvj420p"
        v = c.add_stream("libx264", rate=10)
        v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
        picture = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 200, np.uint8), format="rgb24")
        for p in art.encode(picture.reformat(format="yuvj420p")):
            c.mux(p)
        for p in art.encode():
            c.mux(p)
        for i in range(30):
            for p in v.encode(av.VideoFrame.from_ndarray(frame_image(i, 48, 64), format="rgb24")):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name == "mjpeg"
    t = np.arange(30) / 10 + 0.05
    for backend in ("decord", "pyav"):
        src = FileVideoSource(path, backend)
        assert src.num_frames == 30 and src.duration == pytest.approx(3.0)
        assert np.array_equal(frame_indices(src.frames_at(t, (48, 64))), np.arange(30))


def test_a_fifo_or_a_folder_named_like_a_video_says_what_it_is(tmp_path):
    """Neither is opened (a FIFO would block the reader), and neither is reported as missing."""
    import os

    os.mkfifo(tmp_path / "pipe.mp4")
    (tmp_path / "folder.mp4").mkdir()
    with pytest.raises(VideoError, match=re.escape(f"{tmp_path / 'pipe.mp4'}: is not a regular file (a FIFO")):
        FileVideoSource(tmp_path / "pipe.mp4")
    with pytest.raises(VideoError, match=re.escape(f"{tmp_path / 'folder.mp4'}: is a folder, not a video file")):
        FileVideoSource(tmp_path / "folder.mp4")
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "q", "video": "folder.mp4", "question": "Which?", "answer": "red",
                                "type": "open"}) + "\n")
    with pytest.raises(VideoError, match=re.escape(f"{path}:1: {tmp_path / 'folder.mp4'}: is a folder")):
        FileDataset(path, strict=True)


def test_an_edit_list_that_cuts_the_start_plays_as_a_player_shows_it(tmp_path):
    """``ffmpeg -ss 0.5 -c copy`` keeps the keyframe GOP before the cut and writes an edit list hiding its first
    frames: the video starts at frame 5 and lasts 2.5 s. decord counts and times the hidden frames but returns
    only the shown ones (every time 0.5 s late, the last half second frozen), so it is refused for these files."""
    src = encode(tmp_path / "src.mp4", opts={"bf": "3", "g": "12"})
    cut = tmp_path / "cut.mp4"
    with av.open(str(src)) as i, av.open(str(cut), "w") as o:
        s = i.streams.video[0]
        out = o.add_stream_from_template(s)
        shift = int(Fraction(1, 2) / s.time_base)
        for p in i.demux(s):
            if p.dts is None:
                continue
            p.pts, p.dts, p.stream = p.pts - shift, p.dts - shift, out
            o.mux(p)
    with av.open(str(cut)) as c:
        assert any(p.is_discard for p in c.demux(video=0))
    with pytest.raises(VideoError, match="edit list"):
        FileVideoSource(cut, "decord")
    for backend in ("auto", "pyav"):
        src = FileVideoSource(cut, backend)
        assert src.backend == "pyav" and src.num_frames == 25 and src.duration == pytest.approx(2.5)
        t = np.arange(25) / 10 + 0.05
        assert np.array_equal(frame_indices(src.frames_at(t, (48, 64))), np.arange(5, 30))
        ov = src.overview(4, (32, 32))
        assert np.array_equal(frame_indices(ov.images), 5 + np.floor(ov.timestamps * 10).astype(int))


@pytest.mark.parametrize("damage", ["cut at half", "zeroed in the middle"])
def test_an_avi_missing_frames_fails_at_open_with_either_decoder(tmp_path, damage):
    """The AVI header states 30 frames; decord plays on over the missing ones as if they never existed (every
    later time on the wrong frame), so the count is checked whichever decoder opens the file."""
    data = bytearray(encode(tmp_path / "full.avi", codec="mjpeg", pix_fmt="yuvj420p").read_bytes())
    if damage == "cut at half":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2: len(data) // 2 + 2000] = bytes(2000)
    path = tmp_path / "damaged.avi"
    path.write_bytes(bytes(data))
    for backend in ("auto", "decord", "pyav"):
        with pytest.raises(VideoError, match=re.escape(str(path)) + ".*truncated or damaged: .* of 30 frames"):
            FileVideoSource(path, backend)


FORKED_AFTER_DECODING = """
import json, sys
import gymnasium as gym
import paravt_env

video = sys.argv[1]
rows = [{"id": "q", "video": video, "question": "Which corner is red?", "answer": "top right", "type": "open"}]
with open(sys.argv[2], "w") as f:
    f.write(json.dumps(rows[0]) + "\\n")
kw = dict(source=sys.argv[2], frame_budget=4, frame_size=(32, 32))
env = gym.make("ParaVT-LongVideo-v0", **kw)
env.reset(seed=0)  # this process decodes with PyAV (a rotated video) before forking
assert env.unwrapped.episode.source.backend == "pyav"
vec = gym.make_vec("ParaVT-LongVideo-v0", num_envs=2, vectorization_mode="async", vector_kwargs={"context": "fork"},
                   **kw)
vec.reset_async(seed=[0, 1])
obs, info = vec.reset_wait(timeout=30)
vec.close(terminate=True)
print("ok", obs["frames"].shape)
"""


def test_workers_forked_after_decoding_decode_too(tmp_path):
    """AsyncVectorEnv forks its workers from a process that may have decoded already (an env played first):
    the workers must decode as well, not hang or crash in their first frame conversion."""
    import subprocess
    import sys

    encode(tmp_path / "rot.mp4", rotation=-90)
    run = subprocess.run([sys.executable, "-c", FORKED_AFTER_DECODING, str(tmp_path / "rot.mp4"),
                          str(tmp_path / "q.jsonl")], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0 and "ok (2, 4, 32, 32, 3)" in run.stdout, run.stderr[-2000:]
