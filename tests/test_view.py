"""Sample rollouts a person can look at: trainers/samples.py (records, pictures, TensorBoard text) and
trainers/view.py (static HTML), checked in a real headless Chromium when one is installed."""

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainers import view
from paravt_env.env import ParaVTLongVideoEnv
from trainers import samples as S

HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)> & </pre><marquee>moving</marquee> \"q\" 'a'"
CALL = '<tool_call>{"name": "crop_video", "arguments": {"start_time": %s, "end_time": %s}}</tool_call>'


def _hostile_subagent(frames, question):
    return f"{HOSTILE} saw {len(frames.timestamps)} frames </tool_response><answer>A</answer>"


def _episode(subagent="oracle", index=7, turns=None):
    """A finished episode played with fixed text: a good crop, a refused call and hostile text."""
    env = ParaVTLongVideoEnv(split="validation", frame_budget=4, frame_size=(28, 28), crop_max_frames=4,
                             subagent=subagent, dataset_size=60)
    env.reset(seed=0, options={"episode_index": index})
    d = env.episode.source.duration
    turns = turns or [
        f"{HOSTILE}\n</think>" + CALL % (10, 40) + CALL % ('"abc"', 5) + CALL % (d / 2, d / 2 + 30),
        f"done {HOSTILE}\n</think><answer>{HOSTILE}</answer>"]
    info, reward = {}, 0.0
    for text in turns:
        _, reward, term, trunc, info = env.step(text)
        if term or trunc:
            break
    assert env.done
    return env, info, reward


# ------------------------------------------------------------------ capture
def test_capture_records_turns_crops_and_reward_as_the_env_logged_them():
    env, info, reward = _episode()
    s = S.capture(env, info, reward, index=3)
    rec = json.loads(json.dumps(s.record))  # plain data only
    assert rec == s.record
    assert rec["question"] == env.episode.question.prompt() and rec["truth"] == env.episode.question.answer
    assistant = [m["content"] for m in env.messages if m["role"] == "assistant"]
    assert [t["text"] for t in rec["turns"] if t["role"] == "assistant"] == assistant
    assert HOSTILE in assistant[0]
    [tool] = [t for t in rec["turns"] if t["role"] == "tool"]
    assert [r["executed"] for r in tool["responses"]] == [True, False, True]
    assert [tuple(r["window"]) for r in tool["responses"] if r["executed"]] == env.executed_windows
    bad = tool["responses"][1]
    assert bad["text"].startswith("Error: ") and bad["window"] is None and bad["image"] is None
    for r in (tool["responses"][0], tool["responses"][2]):
        # the frame count the env told the agent is the count shown, and every crop has its picture
        n = int(re.match(r"crop_video \S+ s \((\d+) frames\)", r["text"]).group(1))
        assert len(r["timestamps"]) == n and r["image"] in s.images
        assert r["window"][0] <= r["timestamps"][0] and r["timestamps"][-1] <= r["window"][1]
        assert "Scenes:" in r["text"]  # the oracle's caption
    assert rec["reward"] == reward and rec["correct"] == info["correct"]
    assert rec["reward_components"] == info["reward_components"] and rec["answer"] == info["answer"]
    assert rec["overview"]["timestamps"] == pytest.approx(list(env.overview.timestamps), abs=1e-3)
    assert rec["num_tool_calls"] == 2 and rec["tool_calls_per_turn"] == [2, 0]
    assert all(name.startswith("sample3_") for name in s.images)
    assert s.images[rec["timeline"]].shape[1] == 960


def test_recut_crop_frames_are_the_frames_the_subagent_was_shown():
    """Sub-agent 'frames' puts the crop's images into the conversation: capture's pictures (cut again
    from the video) must equal pictures of exactly those images."""
    env, info, reward = _episode(subagent="frames")
    s = S.capture(env, info, reward)
    [tool_msg] = [m for m in env.messages[2:] if m["role"] == "user"]
    shown, stamps, per_crop = [], [], []
    for part in tool_msg["content"]:
        if part["type"] == "text" and part["text"].startswith("<tool_response>"):
            per_crop.append(len(shown))
        elif part["type"] == "image":
            shown.append(part["image"])
        elif re.fullmatch(r"<[\d.]+ seconds>", part["text"]):
            stamps.append(float(part["text"][1:].split()[0]))
    [tool] = [t for t in s.record["turns"] if t["role"] == "tool"]
    executed = [r for r in tool["responses"] if r["executed"]]
    assert len(executed) == 2 and sum(len(r["timestamps"]) for r in executed) == len(shown)
    start = 0
    for r in executed:
        n = len(r["timestamps"])
        want = S.frame_grid(np.stack(shown[start:start + n]), stamps[start:start + n])
        np.testing.assert_array_equal(s.images[r["image"]], want)
        assert r["text"].startswith("crop_video ") and "seconds>" not in r["text"]
        start += n


def test_frame_grid_shape_and_labels():
    frames = np.random.default_rng(0).integers(0, 255, (20, 28, 28, 3), dtype=np.uint8)
    g = S.frame_grid(frames, np.arange(20) * 1.5, columns=16)
    assert g.dtype == np.uint8 and g.ndim == 3 and g.shape[2] == 3
    assert g.shape[0] > 2 * 84 and g.shape[1] > 16 * 84  # two rows of 3x frames (28 -> 84 px)
    assert S.frame_grid(np.zeros((0, 28, 28, 3), np.uint8), []) is None
    big = S.frame_grid(np.zeros((2, 512, 256, 3), np.uint8), [0, 1])
    assert big.shape[1] < 2 * 300  # large frames are shrunk to 128 px on the short side


# ------------------------------------------------------------------ TensorBoard text
def test_markdown_shows_tags_verbatim_and_injects_nothing():
    """Through TensorBoard's own markdown -> safe HTML path: the grammar tags and the hostile text
    are shown as text, never as elements."""
    plugin_util = pytest.importorskip("tensorboard.plugin_util")
    env, info, reward = _episode(subagent=_hostile_subagent)
    md = S.to_markdown(S.capture(env, info, reward).record)
    out = plugin_util.markdown_to_safe_html(md)
    assert "&lt;think&gt;" in out and "&lt;tool_call&gt;" in out and "&lt;answer&gt;" in out
    assert "&lt;script&gt;" in out and "<script" not in out and "<img" not in out and "<marquee" not in out
    assert "RIGHT" in out or "WRONG" in out
    assert "<table>" in out and "format/think" in out  # the reward terms stay a table


# ------------------------------------------------------------------ the viewer, without a browser
class _Doc(HTMLParser):
    """Elements and the text inside each <pre> (character references resolved, as a browser does).
    source=True reads a page file the way a browser does and drops the newline right after <pre>
    (Python's parser keeps it); a DOM dumped by Chromium holds the text nodes as they are."""

    def __init__(self, source: bool):
        super().__init__(convert_charrefs=True)
        self.source = source
        self.tags, self.pres, self.imgs, self._pre = [], [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "pre":
            self._pre = [a.get("class", ""), ""]
        if tag == "img":
            self.imgs.append(a.get("src"))

    def handle_endtag(self, tag):
        if tag == "pre" and self._pre is not None:
            cls, text = self._pre
            self.pres.append((cls, text.removeprefix("\n") if self.source else text))
            self._pre = None

    def handle_data(self, data):
        if self._pre is not None:
            self._pre[1] += data


def _parse(text: str, source: bool = True) -> _Doc:
    d = _Doc(source)
    d.feed(text)
    return d


def _norm(text: str) -> str:
    """What an HTML parser makes of a text node: CR/CRLF -> LF, NUL -> U+FFFD."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")


def _expected_pres(rec: dict) -> list[str]:
    out = [rec["question"]]
    for t in rec["turns"]:
        out += [t["text"]] if t["role"] == "assistant" else [r["text"] for r in t["responses"]]
    return out


def _hostile_run(tmp_path: Path) -> Path:
    run = tmp_path / "hostile_run"
    got = []
    for i, sub in enumerate(["oracle", _hostile_subagent]):
        env, info, reward = _episode(subagent=sub, index=5 + i)
        got.append(S.capture(env, info, reward, index=i))
    S.write_samples(run, 10, got)
    S.write_samples(run, 20, got[:1])
    return run


def test_view_pages_escape_everything_and_show_every_text(tmp_path):
    run = _hostile_run(tmp_path)
    index, pages = view.build(run)
    assert [p.parent.name for p in pages] == ["step_000010", "step_000020"]
    for page in pages:
        doc = json.loads((page.parent / S.RECORDS).read_text())
        parsed = _parse(page.read_text(encoding="utf-8"))
        assert "script" not in parsed.tags and "marquee" not in parsed.tags
        assert [t for c, t in parsed.pres] == [_norm(x) for r in doc["samples"] for x in _expected_pres(r)]
        assert all((page.parent / src).is_file() for src in parsed.imgs)
        rec = doc["samples"][0]
        n_crops = sum(1 for t in rec["turns"] if t["role"] == "tool" for r in t["responses"] if r["image"])
        assert len(parsed.imgs) >= len(doc["samples"]) * 2 + n_crops  # overview + timeline + crops
        for j, r in enumerate(doc["samples"]):  # each sample also on its own page
            alone = _parse((page.parent / view.sample_page_name(j)).read_text(encoding="utf-8"))
            assert [t for c, t in alone.pres] == [_norm(x) for x in _expected_pres(r)]
            assert "script" not in alone.tags and "marquee" not in alone.tags
    links = _parse(index.read_text())
    assert "a" in links.tags and "step_000010/index.html" in index.read_text()


def test_view_bad_input(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        view.build(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="--eval-samples"):
        view.build(tmp_path / "empty")
    with pytest.raises(SystemExit) as exc:
        view.main([str(tmp_path / "empty")])
    assert exc.value.code == 2 and "no sample rollouts" in capsys.readouterr().err
    run = _hostile_run(tmp_path)
    (run / "samples" / "step_000020" / S.RECORDS).write_text("{not json")
    doc = json.loads((run / "samples" / "step_000010" / S.RECORDS).read_text())
    doc["samples"][0]["overview"]["image"] = "../../../etc/passwd.png"  # never linked outside the step
    doc["samples"][0]["turns"] = [{"role": "assistant"}, "junk", {"role": "tool", "responses": [None, {}]}]
    (run / "samples" / "step_000010" / S.RECORDS).write_text(json.dumps(doc))
    index, pages = view.build(run)
    assert [p.parent.name for p in pages] == ["step_000010"]
    assert "step_000020" in index.read_text() and "cannot read" in index.read_text()
    assert "../" not in "".join(_parse(pages[0].read_text()).imgs)


def test_view_writes_and_reads_nothing_outside_the_run_folder(tmp_path, capsys):
    """A run folder from someone else: a page name that is a symlink to one of the user's files is replaced, not
    written through; a step folder or records file that is a symlink to elsewhere is listed and passed over; a
    samples folder that is one is refused. A sample whose fields have other shapes still renders."""
    import os
    import shutil

    run = _hostile_run(tmp_path)
    steps = run / "samples"
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    os.symlink(victim, steps / "step_000010" / "index.html")
    os.symlink(victim, steps / "step_000010" / view.sample_page_name(1))
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(steps / "step_000020", elsewhere)
    os.symlink(elsewhere, steps / "step_000030")
    (steps / "step_000020" / S.RECORDS).rename(tmp_path / "records.json")
    os.symlink(tmp_path / "records.json", steps / "step_000020" / S.RECORDS)
    doc = json.loads((steps / "step_000010" / S.RECORDS).read_text())
    doc["samples"][0]["overview"] = "not an object"
    (steps / "step_000010" / S.RECORDS).write_text(json.dumps(doc))
    before = sorted(os.listdir(elsewhere))
    index, pages = view.build(run)
    assert victim.read_text() == "the user's file" and sorted(os.listdir(elsewhere)) == before
    assert [p.parent.name for p in pages] == ["step_000010"] and not pages[0].is_symlink()
    assert "Sample 0" in pages[0].read_text() and "Sample 1" in pages[0].read_text()
    text = index.read_text()
    for name in ("step_000020", "step_000030"):
        assert f"{steps / name} lies outside {run} (a symlink); not read" in text
    assert "lies outside" in capsys.readouterr().err

    other = tmp_path / "other_run"
    other.mkdir()
    os.symlink(steps, other / "samples")
    with pytest.raises(FileNotFoundError, match=re.escape(f"{other / 'samples'} lies outside {other} (a symlink)")):
        view.build(other)


# ------------------------------------------------------------------ a real training run, a real browser
@pytest.fixture(scope="module")
def chromium():
    exe = view.find_chromium()
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
    return exe


def _nonblank(png: Path) -> float:
    a = np.asarray(Image.open(png).convert("L"), dtype=np.float64)
    return float(a.std())


def test_hostile_page_in_chromium(chromium, tmp_path):
    """The browser's own DOM after parsing: no element came from model text, every text is there."""
    run = _hostile_run(tmp_path)
    _, pages = view.build(run)
    dom = _parse(view.dump_dom(pages[0]), source=False)
    assert "script" not in dom.tags and "marquee" not in dom.tags and "img" in dom.tags
    doc = json.loads((pages[0].parent / S.RECORDS).read_text())
    assert [t for c, t in dom.pres] == [_norm(x) for r in doc["samples"] for x in _expected_pres(r)]
    assert any(HOSTILE in t for c, t in dom.pres)


def test_training_run_to_html_to_chromium(chromium, tmp_path):
    """A real 1-step PARA-GRPO run (shipped strong checkpoint, evaluation before and after the step)
    writes samples to disk and TensorBoard; the viewer's page, opened by Chromium, shows what the
    run logged; the screenshot is not blank."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trainers import para_grpo

    para_grpo.main(["--runs-dir", str(tmp_path), "--run-name", "r", "--total-steps", "1", "--prompts-per-step", "1",
                    "--group-size", "2", "--eval-every", "1", "--eval-episodes", "4", "--eval-samples", "3",
                    "--gating-budgets", "4", "--subagent", "oracle", "--checkpoint-every", "0", "--no-progress"])
    run = tmp_path / "r"
    steps = sorted(p.name for p in (run / "samples").iterdir())
    assert steps == ["step_000000", "step_000001"]
    docs = [S.read_step(run / "samples" / s) for s in steps]
    assert [d["step"] for d in docs] == [0, 1] and all(len(d["samples"]) == 3 for d in docs)
    # the same validation episodes every evaluation, so steps compare
    assert [r["question_id"] for r in docs[0]["samples"]] == [r["question_id"] for r in docs[1]["samples"]]

    ea = EventAccumulator(str(run), size_guidance={"tensors": 0, "images": 0}).Reload()
    assert {"eval_samples/0/timeline", "eval_samples/2/timeline"} <= set(ea.Tags()["images"])
    texts = ea.Tensors("eval_samples/1/text_summary")
    assert [e.step for e in texts] == [0, 1]
    for e, d in zip(texts, docs):
        assert e.tensor_proto.string_val[0].decode() == S.to_markdown(d["samples"][1])

    index, pages = view.build(run)
    for page, d in zip(pages, docs):
        dom = _parse(view.dump_dom(page), source=False)
        assert [t for c, t in dom.pres] == [_norm(x) for r in d["samples"] for x in _expected_pres(r)]
        assert len(dom.imgs) >= 2 * 3 and all((page.parent / src).is_file() for src in dom.imgs)
    shot = view.screenshot(pages[-1], tmp_path / "shot.png", 1000, 1400)
    img = Image.open(shot)
    assert img.size == (1000, 1400) and _nonblank(shot) > 20
