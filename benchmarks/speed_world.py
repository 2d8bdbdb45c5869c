"""World speed: rendered frames/s, and decode frames/s of decord vs PyAV, side by side.

    python benchmarks/speed_world.py --out benchmarks/results [--seconds 2]

* Render: ``SyntheticVideo.frames_at`` on batches of 64 random times of a 10-minute video,
  at 64x64 and 224x224 (single process; the background tiles are cached, so the first,
  warm-up batch is not timed).
* Decode: one 10-minute video exported once with ``export.write_video`` at 320x240, 2 fps
  (1200 frames; libx264 crf 18, preset veryfast, default GOP of 250 frames = a keyframe every
  125 s), then through ``FileVideoSource`` with each backend: an overview (64 frames spread
  over the whole video) and a crop (16 frames of a random 10 s window), at the native size.
  Rounds alternate between the backends, so both see the same machine state.

Rates are frames per *median* call time (the mean is in the JSON too): a shared machine's
other jobs preempt some calls, and the median is robust to that. Every measurement runs twice: in this process with the default threading, and in a child
process pinned to one CPU core with OMP/OpenBLAS/MKL threads at 1 (the "one core" targets:
>= 20,000 frames/s at 64x64 and >= 2,000 at 224x224).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
BATCH = 64
RENDER_SIZES = ((64, 64), (224, 224))
DECODE_SIZE = (240, 320)  # (height, width)
DECODE_FPS = 2.0
VIDEO_SECONDS = 600.0
TARGETS = {"64x64": 20_000, "224x224": 2_000}


def render_speed(seconds: float, size: tuple[int, int], tick) -> dict:
    import numpy as np

    from paravt_env.world import SyntheticVideo

    video = SyntheticVideo(0, 1, duration=VIDEO_SECONDS)
    rng = np.random.default_rng(0)
    video.frames_at(rng.uniform(0, VIDEO_SECONDS, BATCH), size)  # warm the tile cache
    batches, elapsed = [], 0.0
    while elapsed < seconds or len(batches) < 5:
        t = rng.uniform(0, VIDEO_SECONDS, BATCH)
        t0 = time.perf_counter()
        video.frames_at(t, size)
        dt = time.perf_counter() - t0
        batches.append(dt)
        elapsed += dt
        tick(dt / seconds)
    b = np.array(batches)
    return {"frames_per_second": float(BATCH / np.median(b)), "frames_per_second_mean": float(BATCH * len(b) / b.sum()),
            "batches": len(b), "ms_per_batch_p50": float(np.median(b) * 1e3)}


def decode_speed(path: Path, seconds: float, tick) -> dict:
    import numpy as np

    from paravt_env.sources import FileVideoSource

    out = {}
    sources = {}
    for backend in ("decord", "pyav"):
        t0 = time.perf_counter()
        sources[backend] = FileVideoSource(path, backend)
        out[backend] = {"open_ms": (time.perf_counter() - t0) * 1e3}
    duration = sources["decord"].duration

    def crop(source, rng):
        start = float(rng.uniform(0, duration - 10.0))
        return source.crop(start, start + 10.0, fps=1.6, max_frames=16, size=DECODE_SIZE)

    jobs = {"overview": lambda source, rng: source.overview(64, DECODE_SIZE), "crop": crop}
    for name, job in jobs.items():
        times = {b: [] for b in sources}
        frames = {b: 0 for b in sources}
        rngs = {b: np.random.default_rng(1) for b in sources}  # the same windows for both
        for b, s in sources.items():
            job(s, np.random.default_rng(99))  # warm-up
        spent = 0.0
        while spent < 2 * seconds or min(len(v) for v in times.values()) < 3:
            for b, s in sources.items():  # alternate: side by side
                t0 = time.perf_counter()
                f = job(s, rngs[b])
                dt = time.perf_counter() - t0
                times[b].append(dt)
                frames[b] += len(f.images)
                spent += dt
                tick(dt / (2 * seconds))
        for b in sources:
            t = np.array(times[b])
            out[b][name] = {"frames_per_second": float(frames[b] / len(t) / np.median(t)),
                            "frames_per_second_mean": float(frames[b] / t.sum()), "calls": len(t),
                            "frames_per_call": frames[b] // len(t), "ms_per_call_p50": float(np.median(t) * 1e3)}
    return out


def measure(video_path: Path, seconds: float, label: str) -> dict:
    """All measurements of one threading mode, with a progress bar (on stderr)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    result = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True)) as progress:
        for size in RENDER_SIZES:
            key = f"{size[0]}x{size[1]}"
            task = progress.add_task(f"({label}) render {key}", total=1.0)
            result[f"render_{key}"] = render_speed(seconds, size, lambda f: progress.advance(task, f))
            progress.update(task, completed=1.0)
        task = progress.add_task(f"({label}) decode decord vs pyav", total=2.0)
        result["decode"] = decode_speed(video_path, seconds, lambda f: progress.advance(task, f))
        progress.update(task, completed=2.0)
    return result


def one_core_child(video_path: Path, seconds: float) -> dict:
    """Re-run this script pinned to one CPU with 1 thread everywhere; it prints JSON."""
    env = {**os.environ, **{v: "1" for v in THREAD_VARS}}
    cpu = min(os.sched_getaffinity(0))
    cmd = [sys.executable, __file__, "--worker", "--video", str(video_path), "--seconds", str(seconds)]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    return json.loads(out.stdout)


def table(results: dict) -> str:
    modes = list(results)
    lines = ["| measurement | " + " | ".join(modes) + " | target (one core) |",
             "|---|" + "---|" * len(modes) + "---|"]
    for size in RENDER_SIZES:
        key = f"{size[0]}x{size[1]}"
        cells = [f"{results[m][f'render_{key}']['frames_per_second']:,.0f}" for m in modes]
        lines.append(f"| render {key}, frames/s (batches of {BATCH} random times) | " + " | ".join(cells)
                     + f" | >= {TARGETS[key]:,} |")
    for job, what in (("overview", "overview, 64 frames over 10 min"), ("crop", "crop, 16 frames of a 10 s window")):
        for backend in ("decord", "pyav"):
            cells = []
            for m in modes:
                r = results[m]["decode"][backend][job]
                cells.append(f"{r['frames_per_second']:,.0f} ({r['ms_per_call_p50']:.1f} ms/call)")
            lines.append(f"| decode {what}, {backend}, frames/s | " + " | ".join(cells) + " | |")
    for backend in ("decord", "pyav"):
        cells = [f"{results[m]['decode'][backend]['open_ms']:.1f}" for m in modes]
        lines.append(f"| open + probe (first and last frame), {backend}, ms | " + " | ".join(cells) + " | |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    p.add_argument("--seconds", type=float, default=2.0, help="time per measurement and backend")
    p.add_argument("--no-one-core", action="store_true", help="skip the pinned one-core re-run")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--video", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not a.seconds > 0:
        p.error("--seconds must be positive")

    if a.worker:
        print(json.dumps(measure(a.video, a.seconds, "1 core")))
        return

    import av
    import decord
    import numpy as np

    from paravt_env.export import write_video
    from paravt_env.world import SyntheticVideo

    with tempfile.TemporaryDirectory() as tmp:
        video_path = Path(tmp) / "ten_minutes.mp4"
        t0 = time.perf_counter()
        write_video(SyntheticVideo(0, 1, duration=VIDEO_SECONDS), video_path, fps=DECODE_FPS, size=DECODE_SIZE)
        export_s = time.perf_counter() - t0
        results = {f"default threads ({len(os.sched_getaffinity(0))} cores)": measure(video_path, a.seconds, "default")}
        if not a.no_one_core:
            results["1 core, 1 thread"] = one_core_child(video_path, a.seconds)
        file_mb = video_path.stat().st_size / 2**20

    info = {"python": platform.python_version(), "numpy": np.__version__, "decord": decord.__version__,
            "av": av.__version__, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "seconds_per_measurement": a.seconds, "batch": BATCH,
            "load_average_1min_at_end": round(os.getloadavg()[0], 2),
            "decode_video": {"duration_s": VIDEO_SECONDS, "fps": DECODE_FPS, "size_hw": DECODE_SIZE,
                             "codec": "libx264 crf 18 preset veryfast, default GOP (250 frames)",
                             "megabytes": round(file_mb, 2), "export_seconds": round(export_s, 2)}}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed_world.json").write_text(json.dumps({"info": info, "results": results}, indent=2) + "\n")
    md = table(results)
    note = (f"\n\nRender: `SyntheticVideo.frames_at`, a {VIDEO_SECONDS / 60:.0f}-minute video. Decode: that video "
            f"exported at {DECODE_SIZE[1]}x{DECODE_SIZE[0]}, {DECODE_FPS:g} fps ({info['decode_video']['codec']}), "
            f"read through `FileVideoSource` at native size. Rates use the median call time. CPU: {info['cpu']}, "
            f"{info['cores']} cores, load average {info['load_average_1min_at_end']} at the end of the run.\n")
    (out / "speed_world.md").write_text(md + note)
    print(md + note)


if __name__ == "__main__":
    main()
