"""Question files in the ParaVT release's shape (``prompt`` / ``videos`` / ``extra_info``),
written here with pyarrow and JSON next to a real mp4 made here, read through FileDataset and
the environment; and every rejection naming the file and line."""

from __future__ import annotations

import json
import re
import warnings

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import paravt_env  # noqa: F401  (registers the env)
from paravt_env import DatasetError, FileDataset, VideoError, load_dataset
from paravt_env.export import write_video
from paravt_env.world import SyntheticVideo

MCQ_PROMPT = ("<video>\nQuestion: Which of these scenes occurs in the video?\nOptions:\nA. ocean\nB. forest\n"
              "C. cave\nD. sky\nAnswer with the option's letter from the given choices directly.")


@pytest.fixture(scope="module")
def video_dir(tmp_path_factory):
    """A real 40 s h264 mp4 (2 fps) under videos/clips/, as a video root would hold it."""
    root = tmp_path_factory.mktemp("root")
    (root / "videos" / "clips").mkdir(parents=True)
    write_video(SyntheticVideo(0, 1, duration=40.0), root / "videos" / "clips" / "a.mp4", fps=2.0, size=(64, 80))
    return root


def release_row(prompt=MCQ_PROMPT, video="file://clips/a.mp4", answer="B", qtype="mcq", extra_as_json=True,
                **extra):
    info = {"answer": answer, "question_type": qtype, **extra}
    if qtype is None:
        del info["question_type"]
    return {"prompt": [{"role": "system", "content": "You are a helpful assistant."},
                       {"role": "user", "content": prompt}],
            "videos": [{"video": video}],
            "extra_info": json.dumps(info) if extra_as_json else info}


GROUNDING = "<video>\nWhen does the red star appear? Answer as 'start, end' in seconds."
OPEN = "<video>\nWhat colour is the star?"


def release_rows():
    return [
        release_row(),                                                             # JSON-text extra_info
        release_row(prompt=GROUNDING, answer="[12.5, 15]", qtype="tvg", extra_as_json=False),
        release_row(prompt=OPEN, answer="red", qtype=None),                         # question_type defaults to oe
    ]


def check_release_questions(data):
    assert len(data) == 3 and data.skipped == 0
    mcq, tvg, oe = (data[i].question for i in range(3))
    assert mcq.answer_type == "mcq" and mcq.answer == "B"
    assert mcq.options == ("ocean", "forest", "cave", "sky")
    assert mcq.text == "Which of these scenes occurs in the video?\n" \
                       "Answer with the option's letter from the given choices directly."
    assert "<video>" not in mcq.prompt() and mcq.prompt().count("A. ocean") == 1
    assert (tvg.answer_type, tvg.answer, tvg.options) == ("grounding", "12.5, 15.0", None)
    assert (oe.answer_type, oe.answer, oe.text) == ("open", "red", "What colour is the star?")
    assert mcq.family == "mcq" and tvg.family == "tvg" and oe.family == "oe"
    src = data[0].source
    assert src.name.endswith("clips/a.mp4") and src.duration == pytest.approx(40.0)
    assert data[1].source is src


def test_release_parquet_loads_against_a_video_root(tmp_path, video_dir):
    path = tmp_path / "paravt_rl.parquet"
    pq.write_table(pa.Table.from_pylist(release_rows()[:1] + [dict(release_rows()[1],
                   extra_info=json.dumps({"answer": "[12.5, 15]", "question_type": "tvg"}))] + release_rows()[2:]),
                   path)
    schema = pq.read_schema(path)
    assert schema.field("prompt").type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    data = FileDataset(path, video_root=video_dir / "videos")
    check_release_questions(data)
    assert load_dataset(path, video_root=video_dir / "videos").rows == data.rows


def test_release_jsonl_with_dict_extra_info_and_content_parts(tmp_path, video_dir):
    rows = release_rows()
    rows[0]["prompt"][1]["content"] = [{"type": "video"}, {"type": "text", "text": MCQ_PROMPT}]
    rows[0]["extra_info"] = json.loads(rows[0]["extra_info"])
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    check_release_questions(FileDataset(path, video_root=video_dir / "videos"))


def test_video_root_defaults_to_the_question_files_folder_and_absolute_paths_work(video_dir):
    rows = release_rows()
    rows[1]["videos"] = [{"video": "file://" + str(video_dir / "videos" / "clips" / "a.mp4")}]  # absolute
    path = video_dir / "videos" / "q.jsonl"  # next to clips/
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    check_release_questions(FileDataset(path))


def test_release_rows_play_through_the_env(tmp_path, video_dir):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in release_rows()) + "\n")
    env = gym.make("ParaVT-LongVideo-v0", source=str(path), video_root=str(video_dir / "videos"), frame_budget=4,
                   frame_size=(32, 32)).unwrapped
    obs, info = env.reset(seed=0, options={"episode_index": 0})
    assert "Question: Which of these scenes occurs in the video?" in obs["text"] and "D. sky" in obs["text"]
    env.step('look\n</think><tool_call>{"name": "crop_video", "arguments": {"start_time": 5, "end_time": 9}}'
             '</tool_call>')
    *_, reward, term, _, info = env.step("ok\n</think><answer>B</answer>")
    assert term and info["correct"] and reward > 1.0
    env.reset(seed=0, options={"episode_index": 1})
    *_, info = env.step("ok\n</think><answer>12, 15</answer>")
    assert info["correct"]  # IoU 2.5 / 3 with "12.5, 15.0"


@pytest.mark.parametrize("how", ["relative", "file_url", "absolute", "symlink", "symlinked_folder"])
def test_videos_outside_the_video_root_are_refused_saying_nothing_of_them(tmp_path, video_dir, how):
    """Every way a row can point outside its video root is refused naming the file and line, with the
    same words whether or not the file outside exists; allow_outside_root=True reads it."""
    root = tmp_path / "root"
    root.mkdir()
    outside = video_dir / "videos" / "clips" / "a.mp4"   # a real video, outside root
    absent = video_dir / "videos" / "clips" / "none.mp4"
    errors = []
    for target in (absent, outside):
        video = {"relative": lambda: "../" * len(root.parts) + str(target).lstrip("/"),
                 "file_url": lambda: "file://" + str(target),
                 "absolute": lambda: str(target)}.get(how, lambda: None)()
        if how == "symlink":
            (root / "link.mp4").unlink(missing_ok=True)
            (root / "link.mp4").symlink_to(target)
            video = "link.mp4"
        elif how == "symlinked_folder":
            (root / "elsewhere").unlink(missing_ok=True)
            (root / "elsewhere").symlink_to(target.parent)
            video = "elsewhere/" + target.name
        path = tmp_path / "q.jsonl"
        path.write_text(json.dumps(release_row()) + "\n" + json.dumps(release_row(video=video)) + "\n")
        with pytest.raises(DatasetError) as exc:
            FileDataset(path, video_root=root)
        errors.append(str(exc.value).replace(target.name, "NAME"))
        assert str(exc.value) == (f"{path}:2: video {video!r} lies outside the video root {root}; "
                                  "allow_outside_root=True (--allow-videos-outside-root) reads videos anywhere")
    assert errors[0] == errors[1]          # nothing tells whether the outside file exists
    path.write_text(json.dumps(release_row(video=video)) + "\n")   # the real video outside
    assert FileDataset(path, video_root=root, allow_outside_root=True)[0].source.duration == pytest.approx(40.0)


def test_without_a_video_root_the_question_files_folder_confines_the_videos(tmp_path, video_dir):
    from trainers import config, core, para_grpo

    path = tmp_path / "q.jsonl"   # its folder holds no videos: the release row's clips/a.mp4 is elsewhere
    path.write_text(json.dumps(release_row(video=str(video_dir / "videos" / "clips" / "a.mp4"))) + "\n")
    with pytest.raises(DatasetError, match=re.escape(f"{path}:1: video ") + ".*lies outside the video root "
                       + re.escape(str(tmp_path))):
        FileDataset(path)
    with pytest.raises(DatasetError, match="lies outside the video root"):
        gym.make("ParaVT-LongVideo-v0", source=str(path))
    assert len(gym.make("ParaVT-LongVideo-v0", source=str(path), allow_videos_outside_root=True).unwrapped.dataset) == 1
    args = config.parse_args(para_grpo.Args, ["--source", str(path), "--eval-every", "0"])
    with pytest.raises(DatasetError, match="lies outside the video root"):
        core.load_question_files(args)
    args = config.parse_args(para_grpo.Args, ["--source", str(path), "--eval-every", "0", "--allow-videos-outside-root"])
    assert len(core.load_question_files(args)[0]) == 1


def test_missing_videos_are_skipped_with_a_count_unless_strict(tmp_path, video_dir):
    rows = release_rows() + [release_row(video="clips/gone.mp4"), release_row(video="file://clips/gone2.mp4"),
                             dict(release_row(), videos=[{"video": "clips/gone.mp4"}, {"video": "clips/a.mp4"}])]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.warns(UserWarning, match=re.escape(f"skipped 2 of 6 rows whose video file is missing or unreadable "
                                                   f"(first: {path}:4: {video_dir / 'videos' / 'clips' / 'gone.mp4'}: "
                                                   "video file not found)")):
        data = FileDataset(path, video_root=video_dir / "videos")
    assert len(data) == 4 and data.skipped == 2
    assert data.rows[3][0].name == "a.mp4"  # the first video present
    with pytest.raises(VideoError, match=re.escape(f"{path}:4: ") + ".*gone.mp4: video file not found"):
        FileDataset(path, video_root=video_dir / "videos", strict=True)
    with pytest.raises(VideoError, match=re.escape(f"{path}:4:")):
        gym.make("ParaVT-LongVideo-v0", source=str(path), video_root=str(video_dir / "videos"), strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FileDataset(path.parent / _write(tmp_path / "ok.jsonl", release_rows()), video_root=video_dir / "videos")


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path.name


def test_our_own_schema_still_loads_with_a_video_root(tmp_path, video_dir):
    row = {"id": "q1", "video": "file://clips/a.mp4", "question": "Which scene?", "options": ["beach", "cave"],
           "answer": "(b)", "type": "mcq", "evidence": [[1, 2]]}
    path = tmp_path / "ours.jsonl"
    _write(path, [row, dict(row, id=2, answer="cave"), dict(row, id=3, answer="B. cave"),
                  dict(row, id=4, type="grounding", options=None, answer="1, 2.5")])
    data = FileDataset(path, video_root=video_dir / "videos")
    assert [q.answer for _, q in data.rows] == ["B", "B", "B", "1.0, 2.5"]
    assert data[0].source.duration == pytest.approx(40.0)


# ---- rejections, each naming the file and line ----------------------------------------------

BAD = [
    (dict(answer="E"), "MCQ answer 'E' is not among the options A-D"),
    (dict(answer="(F)"), "not among the options A-D"),
    (dict(answer="volcano"), "neither an option letter A-D nor an option's text"),
    (dict(prompt="<video>\nWhich scene?"), "no 'A. ...' lines in its prompt"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="12.5"), "grounding answer must be 'start, end'"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="15, 12.5"), "0 <= start < end"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="5, 5"), "0 <= start < end"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="-1, 5"), "0 <= start < end"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="nan, 5"), "0 <= start < end"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="1e999, 1e9999"), "0 <= start < end"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="1, 2, 3"), "grounding answer must be 'start, end'"),
    (dict(prompt=GROUNDING, qtype="tvg", answer="soon, later"), "grounding answer must be 'start, end'"),
    (dict(qtype="yesno"), "unknown question_type 'yesno'"),
    (dict(qtype=["mcq"]), "unknown question_type \"['mcq']\""),
    (dict(answer=""), "field 'answer' is empty"),
    (dict(answer=None), "missing field 'answer'"),
    (dict(answer=True), "field 'answer' has type bool"),
    (dict(answer=float("nan")), "field 'answer' is nan, not an answer"),
    (dict(prompt=OPEN, qtype="oe", answer=float("-inf")), "field 'answer' is -inf, not an answer"),
    (dict(prompt="<video>"), "no user message with text in 'prompt'"),
    (dict(evidence="soon"), "'evidence' must be a list of"),
    (dict(evidence={"12": 1}), "'evidence' must be a list of"),
    (dict(evidence=[[1, 10 ** 400]]), "evidence windows must be finite"),
]


@pytest.mark.parametrize("kw, match", BAD, ids=[m for _, m in BAD])
def test_bad_release_rows_name_file_and_line(tmp_path, video_dir, kw, match):
    kw = dict(kw)
    evidence = kw.pop("evidence", None)
    row = release_row(**kw)
    if evidence is not None:
        row["extra_info"] = json.dumps({**json.loads(row["extra_info"]), "evidence": evidence})
    path = tmp_path / "q.jsonl"
    _write(path, [release_row(), row])
    with pytest.raises(DatasetError, match=re.escape(f"{path}:2: ") + ".*" + re.escape(match)):
        FileDataset(path, video_root=video_dir / "videos")


@pytest.mark.parametrize("mutate, match", [
    (lambda r: dict(r, extra_info="{not json"), "field 'extra_info' is a string but not valid JSON"),
    (lambda r: dict(r, extra_info="[1, 2]"), "'extra_info' must be an object"),
    (lambda r: dict(r, videos=[]), "'videos' must be a non-empty list"),
    (lambda r: dict(r, videos=[{"video": None}]), "video paths must be non-empty strings"),
    (lambda r: dict(r, videos=[{"path": "a.mp4"}]), "video paths must be non-empty strings"),
    (lambda r: dict(r, prompt="hello"), "'prompt' is a string but not valid JSON"),
    (lambda r: dict(r, prompt=[{"role": "assistant", "content": "B"}]), "no user message"),
])
def test_malformed_release_fields(tmp_path, video_dir, mutate, match):
    path = tmp_path / "q.jsonl"
    _write(path, [mutate(release_row())])
    with pytest.raises(DatasetError, match=re.escape(f"{path}:1: ") + ".*" + re.escape(match)):
        FileDataset(path, video_root=video_dir / "videos")


def test_duplicate_ids_name_both_lines(tmp_path, video_dir):
    path = tmp_path / "q.jsonl"
    _write(path, [dict(release_row(), id="x1"), dict(release_row(), id="x2"), release_row(),
                  dict(release_row(), id="x1")])
    with pytest.raises(DatasetError, match=re.escape(f"{path}:4: duplicate id 'x1' (first at {path}:1)")):
        FileDataset(path, video_root=video_dir / "videos")
    ppath = tmp_path / "q.parquet"
    rows = [dict(release_row(), id=7), dict(release_row(), id=7)]
    pq.write_table(pa.Table.from_pylist(rows), ppath)
    with pytest.raises(DatasetError, match=re.escape(f"{ppath} row 1: duplicate id '7' (first at {ppath} row 0)")):
        FileDataset(ppath, video_root=video_dir / "videos")


def test_parquet_rejections_name_the_row(tmp_path, video_dir):
    path = tmp_path / "q.parquet"
    pq.write_table(pa.Table.from_pylist([release_row(), release_row(answer="Z")]), path)
    with pytest.raises(DatasetError, match=re.escape(f"{path} row 1: MCQ answer 'Z'")):
        FileDataset(path, video_root=video_dir / "videos")


def test_hostile_json_lines_and_video_roots(tmp_path, video_dir):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(release_row()) + "\n" + '{"id": ' + "9" * 5000 + "}\n")
    with pytest.raises(DatasetError, match=re.escape(f"{path}:2: not valid JSON")):
        FileDataset(path, video_root=video_dir / "videos")
    path.write_text(json.dumps(release_row()) + "\n" + "[" * 100000 + "\n")
    with pytest.raises(DatasetError, match=re.escape(f"{path}:2: not valid JSON")):
        FileDataset(path, video_root=video_dir / "videos")
    with pytest.raises(DatasetError, match="video_root .* is not a folder"):
        FileDataset(path, video_root=tmp_path / "nope")
    _write(path, [release_row(video="clips/\x00a.mp4"), release_row()])  # a NUL byte: no such file
    with pytest.warns(UserWarning, match="skipped 1 of 2"):
        assert len(FileDataset(path, video_root=video_dir / "videos")) == 1


def test_more_options_than_letters_are_rejected(tmp_path, video_dir):
    row = {"id": "q", "video": "clips/a.mp4", "question": "Which?", "options": [str(i) for i in range(11)],
           "answer": "A", "type": "mcq"}
    path = tmp_path / "q.jsonl"
    _write(path, [row])
    with pytest.raises(DatasetError, match=re.escape(f"{path}:1: at most 10 options")):
        FileDataset(path, video_root=video_dir / "videos")


def test_option_lines_need_consecutive_letters_from_a(tmp_path, video_dir):
    prompt = "<video>\nPlan B. is a film. Which scene?\nA. ocean\nB. cave\nD. sky"
    path = tmp_path / "q.jsonl"
    _write(path, [release_row(prompt=prompt, answer="B")])
    q = FileDataset(path, video_root=video_dir / "videos")[0].question
    assert q.options == ("ocean", "cave") and q.text == "Plan B. is a film. Which scene?\nD. sky"
    assert np.array_equal([q.answer], ["B"])


@pytest.mark.parametrize("style", ["{L}. {o}", "({L}) {o}", "{L}) {o}", "{L}: {o}", "  {L}. {o}  "])
def test_option_line_styles(tmp_path, video_dir, style):
    lines = "\n".join(style.format(L=L, o=o) for L, o in zip("ABCD", ["ocean", "forest", "cave", "sky"]))
    path = tmp_path / "q.jsonl"
    _write(path, [release_row(prompt=f"<video>\nWhich of these scenes occurs?\n{lines}", answer="(C)")])
    q = FileDataset(path, video_root=video_dir / "videos")[0].question
    assert (q.options, q.answer, q.text) == (("ocean", "forest", "cave", "sky"), "C", "Which of these scenes occurs?")
