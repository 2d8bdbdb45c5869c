"""Static HTML pages of the sample rollouts a training run logged at each evaluation.

    python -m trainers.view runs/para_grpo__s1            # -> runs/para_grpo__s1/samples/index.html
    python -m trainers.view runs/para_grpo__s1 --screenshot shot.png   # also a picture of the last step's page

The trainers write RUN_DIR/samples/step_NNNNNN/ (records.json + PNGs, trainers/samples.py) every
evaluation (--eval-samples per evaluation). This writes an index.html into each step folder (the
question, the overview frames, every turn's text, every crop's frames and tool response, the reward
terms, right or wrong) and RUN_DIR/samples/index.html linking the steps. Plain HTML and inline CSS,
no script; images by relative path, so the folder can be copied or served as it is. All model and
dataset text is escaped: nothing the model writes can become markup.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from trainers.run_state import atomic_write
from trainers.samples import RECORDS, SAMPLES_DIR, read_step

_IMAGE_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.png$")  # a file inside the step folder, nothing else
_TAG = re.compile(r"&lt;/?(?:think|answer|tool_call|tool_code|tool_response)&gt;")
_STEP_DIR = re.compile(r"^step_(\d{1,12})$")

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; color: #222; background: #fafafa; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin: 0 0 .4em 0; } h3 { font-size: 1em; margin: .8em 0 .3em 0; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: .4em 0; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; font-size: .9em; }
section.sample { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 1em; margin: 1.2em 0; }
pre { white-space: pre-wrap; word-break: break-word; background: #f3f3f3; padding: .5em; margin: .3em 0;
      border-radius: 4px; font-size: .85em; }
pre.assistant { background: #eef4ff; border-left: 4px solid #3b6fd8; }
pre.tool { background: #f2faf0; border-left: 4px solid #3c9a4a; }
pre.error { background: #fff1f0; border-left: 4px solid #c83c3c; }
.tag { color: #a0338f; font-weight: bold; }
.right { color: #fff; background: #2e8b46; padding: 1px 8px; border-radius: 4px; }
.wrong { color: #fff; background: #c83c3c; padding: 1px 8px; border-radius: 4px; }
img.frames { image-rendering: pixelated; max-width: 100%; display: block; margin: .3em 0; }
.crop { margin: .5em 0 .5em 1em; }
.meta { color: #555; font-size: .9em; }
.cols { display: flex; gap: 1.5em; align-items: flex-start; }
.episode { flex: 1; min-width: 0; }
.outcome { flex: 0 0 290px; }
"""


def _e(text) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _model_text(text) -> str:
    """Escaped text with the grammar tags highlighted (the highlight wraps already-escaped tags)."""
    return _TAG.sub(lambda m: f'<span class="tag">{m.group(0)}</span>', _e(text))


def _img(name, alt: str) -> str:
    if not isinstance(name, str) or not _IMAGE_NAME.match(name):
        return ""
    return f'<img class="frames" src="{_e(name)}" alt="{_e(alt)}">'


def _num(x, fmt: str = ".3f") -> str:
    try:
        return format(float(x), fmt)
    except (TypeError, ValueError):
        return _e(x)


def _verdict(rec: dict) -> str:
    return '<span class="right">right</span>' if rec.get("correct") else '<span class="wrong">wrong</span>'


def render_sample(rec: dict) -> str:
    """One sample: the episode on the left (question, overview, turns, crops), the outcome and the
    reward terms on the right, the timeline picture below."""
    i = _e(rec.get("index", ""))
    answer = rec.get("answer")
    parts = [f'<section class="sample" id="sample{i}">',
             f"<h2>Sample {i}: {_verdict(rec)} &nbsp; reward {_num(rec.get('reward'))}</h2>",
             f'<p class="meta">question {_e(rec.get("question_id"))} ({_e(rec.get("family"))}), '
             f"video {_num(rec.get('duration'), '.1f')} s, K = {_e(rec.get('frame_budget'))} overview frames, "
             f"{_e(rec.get('dispatch'))} dispatch, sub-agent: {_e(rec.get('subagent'))}, "
             f"{_e(rec.get('num_tool_calls'))} crop(s) executed of {_e(rec.get('num_tool_calls_emitted'))} written</p>",
             '<div class="cols"><div class="episode">',
             "<h3>Question</h3>", f'<pre class="question">\n{_e(rec.get("question"))}</pre>']
    ov = rec.get("overview")
    parts += ["<h3>Overview frames</h3>", _img(ov.get("image") if isinstance(ov, dict) else None, "overview frames")]
    for t in rec.get("turns") or []:
        if not isinstance(t, dict):
            continue
        if t.get("role") == "assistant":
            parts += [f"<h3>Turn {_e(t.get('turn'))}: assistant</h3>",
                      f'<pre class="assistant">\n{_model_text(t.get("text"))}</pre>']
            continue
        parts.append(f"<h3>Tool responses to turn {_e(t.get('turn'))}</h3>")
        for j, r in enumerate(t.get("responses") or []):
            if not isinstance(r, dict):
                continue
            w = r.get("window")
            head = (f"crop {j}: {_num(w[0], '.1f')}-{_num(w[1], '.1f')} s"
                    if isinstance(w, list) and len(w) == 2 else f"call {j}: not run")
            css = "tool" if r.get("executed") else "error"
            parts += [f'<div class="crop"><b>{head}</b>', _img(r.get("image"), f"frames of crop {j}"),
                      f'<pre class="{css}">\n{_model_text(r.get("text"))}</pre></div>']
    parts += ['</div><div class="outcome">', "<h3>Outcome</h3>",
              "<table><tr><th>truth</th><td>" + _e(rec.get("truth")) + "</td></tr>"
              f"<tr><th>answer</th><td>{_e(answer) if answer is not None else '(none)'}</td></tr>"
              f"<tr><th>result</th><td>{_verdict(rec)}</td></tr></table>"]
    comps = rec.get("reward_components") or {}
    if isinstance(comps, dict) and comps:
        parts.append("<h3>Reward terms</h3><table><tr><th>term</th><th>value</th></tr>")
        parts += [f"<tr><td>{_e(k)}</td><td>{_num(v)}</td></tr>" for k, v in comps.items()]
        parts.append(f"<tr><th>total reward</th><th>{_num(rec.get('reward'))}</th></tr></table>")
    parts += ["</div></div>", "<h3>Episode timeline</h3>", _img(rec.get("timeline"), "episode timeline"),
              "</section>"]
    return "\n".join(p for p in parts if p)


# Every <pre> opens with a newline: an HTML parser drops the first newline after <pre>, so a text's
# own leading newline survives.
def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def render_step(doc: dict, run_name: str, prev_step: str | None, next_step: str | None) -> str:
    recs = [r for r in doc["samples"] if isinstance(r, dict)]
    step = _e(doc.get("step"))
    nav = ['<nav><a href="../index.html">all steps</a>']
    if prev_step:
        nav.append(f'<a href="../{_e(prev_step)}/index.html">previous step</a>')
    if next_step:
        nav.append(f'<a href="../{_e(next_step)}/index.html">next step</a>')
    nav.append("</nav>")
    right = sum(bool(r.get("correct")) for r in recs)
    rows = "".join(
        f'<tr><td><a href="{sample_page_name(j)}">{_e(r.get("index"))}</a></td>'
        f'<td><a href="#sample{_e(r.get("index"))}">{_e(r.get("question_id"))}</a></td>'
        f"<td>{_e(r.get('family'))}</td><td>{_e(r.get('frame_budget'))}</td><td>{_e(r.get('num_tool_calls'))}</td>"
        f"<td>{_e(r.get('answer'))}</td><td>{_e(r.get('truth'))}</td><td>{_verdict(r)}</td>"
        f"<td>{_num(r.get('reward'))}</td></tr>" for j, r in enumerate(recs))
    body = "\n".join(nav + [
        f"<h1>{_e(run_name)}: evaluation at step {step}</h1>",
        f'<p class="meta">{len(recs)} sample rollout(s), {right} right; # opens a sample on its own page</p>',
        "<table><tr><th>#</th><th>question</th><th>family</th><th>K</th><th>crops</th><th>answer</th>"
        f"<th>truth</th><th>result</th><th>reward</th></tr>{rows}</table>",
        *[render_sample(r) for r in recs]])
    return _page(f"{run_name} step {doc.get('step')}", body)


def sample_page_name(position: int) -> str:
    """The page of the sample at `position` in its step's records, inside the step folder."""
    return f"sample{int(position)}.html"


def render_sample_page(rec: dict, run_name: str, step) -> str:
    body = "\n".join(['<nav><a href="index.html">this step</a><a href="../index.html">all steps</a></nav>',
                      f"<h1>{_e(run_name)}: evaluation at step {_e(step)}</h1>", render_sample(rec)])
    return _page(f"{run_name} step {step} sample {rec.get('index')}", body)


def build(run_dir: str | os.PathLike) -> tuple[Path, list[Path]]:
    """Write every step page (all its samples), one page per sample (`sample_page_name`) and the
    index; returns the index and the step pages, in step order. Raises FileNotFoundError with what
    to do when the run has no samples; a step whose records cannot be read is listed on the index
    with its problem and skipped."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a folder (pass a run folder, e.g. runs/para_grpo__s1)")
    root = run_dir / SAMPLES_DIR
    inside = os.path.realpath(run_dir) + os.sep
    if root.is_dir() and not os.path.realpath(root).startswith(inside):
        raise FileNotFoundError(f"{root} lies outside {run_dir} (a symlink); no page is written there")
    steps = sorted((p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)),
                   key=lambda p: int(_STEP_DIR.match(p.name).group(1))) if root.is_dir() else []
    if not steps:
        raise FileNotFoundError(f"no sample rollouts under {root}: train with --eval-every > 0 and "
                                "--eval-samples > 0 (the default is 4 per evaluation)")
    docs, items, pages = {}, [], []
    for p in steps:
        try:
            # read and written only inside the run folder: a step folder or records file that is a symlink to
            # elsewhere (in a run folder from someone else) is passed over
            if not all(os.path.realpath(f).startswith(inside) for f in (p, p / RECORDS)):
                raise ValueError(f"{p} lies outside {run_dir} (a symlink); not read")
            docs[p.name] = read_step(p)
        except ValueError as exc:
            print(f"skipping {p.name}: {exc}", file=sys.stderr)
            items.append(f"<li>{_e(p.name)}: {_e(exc)}</li>")
    names = [p.name for p in steps if p.name in docs]
    for k, name in enumerate(names):
        doc = docs[name]
        page = render_step(doc, run_dir.name, names[k - 1] if k else None,
                           names[k + 1] if k + 1 < len(names) else None)
        pages.append(root / name / "index.html")
        _write(pages[-1], page)
        recs = [r for r in doc["samples"] if isinstance(r, dict)]
        for j, rec in enumerate(recs):
            _write(root / name / sample_page_name(j), render_sample_page(rec, run_dir.name, doc.get("step")))
        right = sum(bool(r.get("correct")) for r in recs)
        items.append(f'<li><a href="{_e(name)}/index.html">step {_e(doc.get("step"))}</a>: '
                     f"{len(recs)} sample(s), {right} right</li>")
    index = root / "index.html"
    _write(index, _page(f"{run_dir.name} samples",
                        f"<h1>{_e(run_dir.name)}: sample rollouts</h1>\n<ul>\n" + "\n".join(items) + "\n</ul>"))
    return index, pages


def _write(path: Path, text: str) -> None:
    # renamed into place: a page name that is a symlink is replaced, never written through to what it points at
    atomic_write(path, text.encode("utf-8", errors="replace"))


# ============================================================================================
# a headless browser, for pictures of the pages (and the tests)
# ============================================================================================
def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _chromium(page: Path, *flags: str, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no Chromium found (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="paravt-view-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", *flags, Path(page).resolve().as_uri()]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)


def screenshot(page: str | os.PathLike, out: str | os.PathLike, width: int = 1200, height: int = 1600) -> Path:
    """A PNG of `page` rendered by headless Chromium at width x height."""
    out = Path(out).resolve()
    _chromium(Path(page), f"--screenshot={out}", f"--window-size={int(width)},{int(height)}")
    if not out.is_file():
        raise RuntimeError(f"Chromium wrote no screenshot to {out}")
    return out


def dump_dom(page: str | os.PathLike) -> str:
    """The DOM of `page` after headless Chromium has parsed and laid it out, as HTML."""
    return _chromium(Path(page), "--dump-dom").stdout


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m trainers.view", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a training run folder (holds samples/step_NNNNNN/records.json)")
    p.add_argument("--screenshot", default="", help="also save a PNG of the last step's page (needs Chromium)")
    p.add_argument("--window", default="1200x1600", help="screenshot size, WIDTHxHEIGHT")
    a = p.parse_args(argv)
    try:
        index, pages = build(a.run_dir)
    except FileNotFoundError as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")
    print(f"wrote {index}")
    if a.screenshot:
        m = re.fullmatch(r"(\d{2,5})x(\d{2,5})", a.window)
        if not m:
            p.exit(2, f"{p.prog}: error: --window must be WIDTHxHEIGHT, e.g. 1200x1600\n")
        if not pages:
            p.exit(1, f"{p.prog}: error: no readable step to take a picture of\n")
        try:
            shot = screenshot(pages[-1], a.screenshot, int(m.group(1)), int(m.group(2)))
        except (FileNotFoundError, RuntimeError, subprocess.SubprocessError) as exc:
            p.exit(1, f"{p.prog}: error: screenshot failed: {exc}\n")
        print(f"wrote {shot} ({pages[-1]})")


if __name__ == "__main__":
    main()
