"""The reproduction's protocol and verdicts (trainers/evaluation.py, trainers/verdicts.py, trainers/sweep.py):
one evaluation for every row, matched baselines, flags that cannot redefine a row, verdicts with three outcomes,
and a REPRODUCTION.md that is what the report renders from the committed results."""

import json
import math
import random
import sys
from pathlib import Path

import pytest

from trainers import sweep, verdicts
from trainers.config import config_flags

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ verdicts
def test_t_distribution_matches_the_tables():
    for q, df, t in ((0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 10, 2.228), (0.95, 5, 2.015), (0.8, 2, 1.061)):
        assert verdicts.t_ppf(q, df) == pytest.approx(t, abs=1e-3)
    assert verdicts.two_sided_p(2.0, 5) == pytest.approx(0.1019, abs=1e-4)
    assert verdicts.two_sided_p(0.0, 3) == pytest.approx(1.0)
    assert verdicts.t_cdf(-1.5, 3) == pytest.approx(0.1153, abs=1e-4)


def _seeds(values):
    return dict(enumerate(values, start=1))


def test_a_planted_effect_is_shown_a_null_not_detectable_and_a_reverse_contradicted():
    rng = random.Random(0)
    base = [rng.gauss(0.5, 0.1) for _ in range(5)]  # what a seed's prompts make of any row
    noise = [rng.gauss(0, 0.01) for _ in range(5)]
    x = _seeds([b + 0.1 + e for b, e in zip(base, noise)])
    y = _seeds(base)
    shown = verdicts.compare(x, y, direction=1)
    assert shown["verdict"] == "shown" and shown["test"] == "paired t" and shown["p"] < 0.01
    assert shown["effect"] == pytest.approx(0.1, abs=0.02) and 0 < shown["mde"] < 0.1
    assert verdicts.compare(x, y, direction=-1)["verdict"] == "contradicted"
    null = verdicts.compare(_seeds([b + e for b, e in zip(base, noise)]), y, direction=1)
    assert null["verdict"] == "not detectable" and null["p"] > 0.05 and null["mde"] > abs(null["effect"])
    # without pairing the seed-to-seed spread (0.1) hides the same 0.1 effect at 5 seeds
    unpaired = verdicts.compare(x, {k + 10: v for k, v in y.items()}, direction=1)
    assert unpaired["test"] == "welch t" and unpaired["verdict"] == "not detectable"
    assert unpaired["mde"] > shown["mde"]


def test_verdicts_say_not_run_or_not_detectable_when_they_cannot_decide():
    assert verdicts.compare({}, {1: 0.5})["verdict"] == "not run"
    one = verdicts.compare({1: 0.9}, {1: 0.1}, direction=1)
    assert one["verdict"] == "not detectable" and math.isnan(one["p"])
    gap = verdicts.one_sample({1: 0.3, 2: 0.35, 3: 0.32}, direction=1)
    assert gap["verdict"] == "shown" and gap["test"] == "one-sample t"


def test_seeds_that_agree_exactly_are_judged_by_an_exact_permutation_test():
    """Accuracies on a few episodes often move by the same count in every seed: no spread, so no t statistic.
    Two such seeds prove nothing (p = 0.5); six do (p = 2 / 64)."""
    for n, verdict in ((2, "not detectable"), (5, "not detectable"), (6, "shown")):
        x = {s: 0.5 + 0.083 + 0.01 * s for s in range(n)}
        y = {s: 0.5 + 0.01 * s for s in range(n)}
        c = verdicts.compare(x, y, direction=1)
        assert c["verdict"] == verdict and c["p"] == pytest.approx(2 / 2 ** n) and "permutation" in c["test"]
    same = verdicts.compare({1: 0.4, 2: 0.4}, {3: 0.4, 4: 0.4}, direction=1)
    assert same["verdict"] == "not detectable" and same["p"] == 1.0


def test_correlation_and_holm():
    xs = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    up = verdicts.correlation(xs, [0.3, 0.32, 0.35, 0.41, 0.4, 0.47, 0.5, 0.52], direction=1)
    assert up["verdict"] == "shown" and up["effect"] > 0.9 and up["p"] < 0.001
    down = verdicts.correlation(xs, [0.5, 0.47, 0.48, 0.41, 0.4, 0.35, 0.3, 0.29], direction=1)
    assert down["verdict"] == "contradicted"
    flat = verdicts.correlation(xs, [0.4, 0.1, 0.5, 0.2, 0.45, 0.15, 0.3, 0.35], direction=1)
    assert flat["verdict"] == "not detectable" and 0 < flat["mde"] < 1
    assert verdicts.holm([0.01, 0.04, 0.03, float("nan")])[:3] == pytest.approx([0.03, 0.06, 0.06])


# ------------------------------------------------------------------ flags that would redefine a row
def test_flags_that_would_change_a_row_stop_the_sweep(capsys, tmp_path):
    for row, flag in (("grpo", "--think-prefix"), ("no_gamma", "--penalty-gamma=0.2"), ("grpo_released", "--scoring"),
                      ("anchoring", "--no-nframes-gating"), ("sequential", "--dispatch")):
        argv = ["--rows", row, "--report-only", flag] + (["parallel"] if flag in ("--scoring", "--dispatch") else [])
        with pytest.raises(SystemExit):
            sweep.main(argv)
        assert f"row {row} is defined by trainers/" in capsys.readouterr().err
    # a flag no row is defined by goes to every run; the sweep's --learning-rate to the rows without their own
    sweep.main(["--rows", "cold_start,full", "--report-only", "--learning-rate", "2e-6", "--max-turns", "2",
                "--out", str(tmp_path)])
    runs = Path("runs")
    full = sweep.run_argv("full", 1, runs, [], learning_rate="2e-6")
    assert full[full.index("--learning-rate") + 1] == "2e-6"
    cold = sweep.run_argv("cold_start", 1, runs, [], learning_rate="2e-6")
    assert [cold[i + 1] for i, f in enumerate(cold) if f == "--learning-rate"] == ["0"]


def test_every_trained_row_has_a_matched_untrained_baseline():
    for name, row in sweep.ROWS.items():
        if row.baseline:
            base = sweep.ROWS[row.baseline]
            assert sweep.is_untrained(row.baseline) and base.script in ("grpo", "para_grpo")
            # the baseline's trainer and K match the row's: vanilla rows against vanilla, PARA rows against PARA
            vanilla = row.script == "grpo" or "--no-think-prefix" in row.flags
            assert (base.script == "grpo") == vanilla, name
    assert set(sweep.PRESETS["paper"]["rows"]) >= {"cold_start", "cold_start_vanilla", "grpo", "grpo_released",
                                                    "anchoring", "gating", "full", "no_tool_reward", "no_gamma",
                                                    "anchor_logprob", "sequential", "weak_grpo", "weak_full",
                                                    "full_oracle"}
    long = sweep.PRESETS["paper-long"]
    assert long["eval_every"] == 50 and long["seeds"] == [1, 2, 3] and "--total-steps" in long["flags"]
    assert int(long["flags"][long["flags"].index("--total-steps") + 1]) >= 200
    for preset in ("paper", "paper-long"):
        assert sweep.PRESETS[preset]["eval_first_episode"] >= 1000 and sweep.PRESETS[preset]["eval_episodes"] >= 256


def test_a_config_file_sets_the_sweep_and_the_command_line_wins(tmp_path):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text("rows: [grpo, full]\nseeds: [4, 5]\neval_every: 2\ntrainer:\n  total_steps: 4\n"
                   "  checkpoint_every: 2\n")
    report = sweep.main(["--config", str(cfg), "--seeds", "7", "--out", str(tmp_path / "out"), "--report-only"])
    p = report["protocol"]
    assert p["rows"] == ["grpo", "full"] and p["seeds"] == [7] and p["steps"] == 4 and p["preset"] == "mine"
    # a trainer flag in the file that would redefine a row stops the sweep like one on the command line
    cfg.write_text("rows: [grpo]\ntrainer:\n  think_prefix: true\n")
    with pytest.raises(SystemExit):
        sweep.main(["--config", str(cfg), "--out", str(tmp_path / "out"), "--report-only"])
    cfg.write_text("rows: [grpo]\nbogus: 1\n")
    with pytest.raises(SystemExit):
        sweep.main(["--config", str(cfg), "--out", str(tmp_path / "out"), "--report-only"])
    assert config_flags({"total_steps": 4, "think_prefix": False, "seeds": [1, 2]}) == \
        ["--total-steps", "4", "--no-think-prefix", "--seeds", "1,2"]


def test_a_report_leaves_out_histories_and_evaluations_of_other_shapes_naming_them(tmp_path, capsys):
    """--report-only on an out folder from elsewhere: a history.json or evaluation file that is not what the
    trainers and the evaluation write is named on stderr and left out; the report is built from the rest."""
    out = tmp_path / "out"
    good = [{"step": s, "train/format_reward_common": 0.5, "train/tool_calls_per_rollout": 1.0} for s in (1, 2)]
    record = {"conditions": {"tools": {"accuracy": 0.5, "calls": [0, 1], "transcripts": []}}}
    files = {"runs/grpo__s1/history.json": ["a", "b"],
             "runs/grpo__s2/history.json": good,
             "runs/grpo__s3/history.json": [{"step": "two", "train/format_reward_common": "high"}],
             "runs/grpo__s4/history.json": good,
             "evals/grpo__s2/step_000002.json": [1, 2],
             "evals/grpo__s4/step_000002.json": record,
             "evals/start_strong__s2/step_000000.json": {"conditions": {"tools": {"accuracy": "high"}}},
             "evals/start_strong__s4/step_000000.json": {"conditions": {"tools": {"transcripts": [{"turns": 3}]}}}}
    for name, content in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(content))
    report = sweep.main(["--rows", "grpo", "--seeds", "1,2,3,4", "--total-steps", "2", "--eval-every", "2",
                         "--checkpoint-every", "2", "--report-only", "--out", str(out)])
    assert report["grpo"]["seeds"] == [2, 4]
    assert report["grpo"]["per_seed"]["4"]["eval_accuracy"] == 0.5
    assert math.isnan(report["grpo"]["per_seed"]["2"]["eval_accuracy"])
    err = capsys.readouterr().err
    for name in ("runs/grpo__s1/history.json", "runs/grpo__s3/history.json"):
        assert f"{out / name}: not a run's history (" in err
    assert f"{out / 'evals/grpo__s2/step_000002.json'}: not an evaluation record (not an object with a " in err
    assert f"{out / 'evals/start_strong__s2/step_000000.json'}: not an evaluation record (accuracy is not a " in err
    assert f"{out / 'evals/start_strong__s4/step_000000.json'}: not an evaluation record (transcripts are " in err


@pytest.mark.parametrize("content, expect", [
    ("{not json", "cannot read (JSONDecodeError"),
    ('["--model", "m"]', "not a trainer's args.json (a list, not an object of settings)"),
    ('{"model": 5}', "model is '5' (int); a trainer writes str values there"),
    ('{"torch_threads": "x"}', "torch_threads is 'x' (str); a trainer writes int values there"),
    ('{"think_prefix": 1}', "think_prefix is '1' (int); a trainer writes bool values there"),
])
def test_an_evaluation_of_an_args_file_of_other_shapes_stops_in_one_line(tmp_path, capsys, content, expect):
    from trainers import evaluation

    (tmp_path / "args.json").write_text(content)
    with pytest.raises(SystemExit) as exc:
        evaluation.main(["--args", str(tmp_path / "args.json"), "--out-dir", str(tmp_path / "evals"), "--episodes", "1",
                         "--batch", "1", "--first-episode", "0"])
    assert exc.value.code == 2
    assert f"error: {tmp_path / 'args.json'}: {expect}" in capsys.readouterr().err
    assert not (tmp_path / "evals").exists()


# ------------------------------------------------------------------ a whole sweep on the tiny model
def test_sweep_evaluates_every_row_on_the_same_episodes_and_reports_verdicts(tiny_dir, tmp_path):
    out = tmp_path / "out"
    argv = ["--rows", "cold_start_vanilla,grpo,full", "--seeds", "1,2", "--jobs", "2", "--out", str(out),
            "--strong-model", tiny_dir, "--eval-every", "1", "--eval-episodes", "4", "--eval-first-episode", "40",
            "--eval-batch", "4", "--no-progress", "--device", "cpu", "--total-steps", "2", "--group-size", "2",
            "--prompts-per-step", "1", "--max-new-tokens", "8", "--subagent-max-new-tokens", "6",
            "--checkpoint-every", "1", "--dataset-size", "60", "--render-to", str(tmp_path / "REPRODUCTION.md")]
    report = sweep.main(argv)
    assert set(report) == {"protocol", "claims", "cold_start_vanilla", "grpo", "full"}
    p = report["protocol"]
    assert p["eval_first_episode"] == 40 and p["eval_episodes"] == 4 and p["seeds"] == [1, 2] and p["steps"] == 2
    assert len(p["models"]["strong"]["sha256"]) == 64 and p["date"]
    assert p["hardware"] == {"CPU": ["cold_start_vanilla", "grpo", "full"]}  # each run's hardware.json, gathered
    assert "Trained on CPU: cold_start_vanilla, grpo, full." in (tmp_path / "REPRODUCTION.md").read_text()
    # one protocol: every evaluation of every row and of the starting model plays the same episodes, same K
    files = sorted((out / "evals").glob("*/step_*.json"))
    names = {f.parent.name for f in files}
    assert names == {"start_strong__s1", "start_strong__s2", "grpo__s1", "grpo__s2", "full__s1", "full__s2"}
    budgets = {json.dumps(c["frame_budget"]) for f in files for c in json.loads(f.read_text())["conditions"].values()}
    assert len(budgets) == 1 and len(json.loads(budgets.pop())) == 4
    for f in files:
        record = json.loads(f.read_text())
        assert record["protocol"] == json.loads(files[0].read_text())["protocol"]
        assert record["draw"] == int(f.parent.name[-1])  # a seed's own evaluation samples
    full = json.loads((out / "evals" / "full__s1" / "step_000002.json").read_text())["conditions"]
    assert set(full) == {"tools", "no_tools", "sequential"}
    assert set(json.loads((out / "evals" / "start_strong__s1" / "step_000000.json").read_text())["conditions"]) == \
        {"tools", "no_tools", "t0.7", "greedy"}
    for row in ("cold_start_vanilla", "grpo", "full"):
        entry = report[row]
        assert entry["seeds"] == [1, 2]
        for key in ("f_tau", "f_tau_generated", "kappa", "eval_accuracy", "eval_accuracy_no_subagent",
                    "eval_accuracy_delta"):
            assert set(entry[key]) == {"mean", "std", "ci95", "n"} and entry[key]["n"] == 2, (row, key)
    assert report["full"]["eval_accuracy_sequential_dispatch"]["n"] == 2
    # the untrained baseline is the starting model: no change from step 0
    assert report["cold_start_vanilla"]["eval_accuracy_delta"]["mean"] == 0.0
    assert report["grpo"]["kappa_vs_baseline"]["test"].startswith("paired t")  # paired by seed
    verdict_names = {"shown", "contradicted", "not detectable", "not run"}
    assert all(c["verdict"] in verdict_names and "p" in c and "mde" in c for c in report["claims"])
    assert {c["claim"] for c in report["claims"] if c["verdict"] == "not run"} >= {
        "Exploration Anchoring alone lifts the format above vanilla GRPO's"}  # a row this sweep did not run
    # what the agents wrote is kept beside the numbers: each episode's calls, the first episodes' turns
    tools = json.loads((out / "evals" / "grpo__s1" / "step_000002.json").read_text())["conditions"]["tools"]
    assert len(tools["calls"]) == 4 and [t["episode"] for t in tools["transcripts"]] == [40, 41, 42, 43]
    assert all(t["turns"] and isinstance(t["turns"][0], str) for t in tools["transcripts"])
    t = report["grpo"]["transcript"]
    assert t["calls"] == 0 or all(x["calls"] > 0 for x in tools["transcripts"])  # the first without a call if any
    assert 0.0 <= report["grpo"]["eval_no_call_share"]["mean"] <= 1.0
    # the page is the JSON rendered; rendering the written JSON again gives the same page
    page = (out / "REPRODUCTION.md").read_text()
    assert "## What the agents write" in page and "[turn 1] " in page
    assert page == sweep.render_reproduction(json.loads((out / "results.json").read_text()))
    assert "](out/curves.png)" in (tmp_path / "REPRODUCTION.md").read_text()
    # a rerun finds everything done and rebuilds the same report
    stamp = (out / "evals" / "grpo__s1" / "step_000002.json").stat().st_mtime_ns
    again = sweep.main(argv)
    assert (out / "evals" / "grpo__s1" / "step_000002.json").stat().st_mtime_ns == stamp
    assert again["grpo"]["f_tau"] == report["grpo"]["f_tau"]


def test_the_committed_reproduction_page_is_the_committed_results_rendered():
    """REPRODUCTION.md and the results folder's own page are the committed results.json rendered: no number is
    copied by hand."""
    folder = ROOT / "benchmarks" / "results" / "reproduction"
    newest = json.loads((folder / "results.json").read_text())
    assert (folder / "REPRODUCTION.md").read_text() == sweep.render_reproduction(newest)
    for key in ("protocol", "claims", "grpo", "full"):
        assert key in newest
    link = folder.relative_to(ROOT).as_posix() + "/"
    assert (ROOT / "REPRODUCTION.md").read_text() == sweep.render_reproduction(newest, link)
    readme = (ROOT / "README.md").read_text()  # the README's verdicts are the same report's, not a hand copy
    assert sweep.readme_block(newest) in readme


def test_the_long_report_is_its_committed_records_rebuilt(tmp_path):
    """benchmarks/results/reproduction_long keeps records.json (what its report was built from) instead of run
    folders: the report rebuilt from it alone gives the committed numbers and verdicts, and a sweep into a folder
    holding it has nothing left to run for the recorded seeds, so later seeds add to them."""
    import shutil

    from trainers.evaluation import Protocol

    folder = ROOT / "benchmarks" / "results" / "reproduction_long"
    committed = json.loads((folder / "results.json").read_text())
    copy = tmp_path / "long"
    copy.mkdir()
    shutil.copy(folder / "records.json", copy / "records.json")
    seeds = committed["protocol"]["seeds"]
    again = sweep.main(["--preset", "paper-long", "--seeds", ",".join(map(str, seeds)), "--report-only",
                        "--out", str(copy)])
    assert again["protocol"]["seeds"] == seeds and again["protocol"]["hardware"] == committed["protocol"]["hardware"]
    for row in committed["protocol"]["rows"]:
        for metric in ("f_tau", "kappa", "eval_accuracy"):
            assert again[row][metric]["mean"] == pytest.approx(committed[row][metric]["mean"], abs=1e-9), (row, metric)
        assert again[row]["curves"] == committed[row]["curves"]
    assert [c["verdict"] for c in again["claims"]] == [c["verdict"] for c in committed["claims"]]
    assert (folder / "REPRODUCTION.md").read_text() == sweep.render_reproduction(committed)
    preset = sweep.PRESETS["paper-long"]
    protocol = Protocol(eval_first_episode=preset["eval_first_episode"], eval_episodes=preset["eval_episodes"])
    total = committed["protocol"]["steps"]
    jobs = sweep.plan_jobs(copy, committed["protocol"]["rows"], seeds, preset["flags"], {}, "", protocol, total,
                           sweep.eval_steps(total, preset["eval_every"]))
    assert jobs == []
    (copy / "records.json").write_text('{"runs": {"x": {"history": ["not a record"]}}, "evals": {}}')
    assert sweep.load_history(copy / "runs" / "x") == []  # records of another shape are read as absent


def test_the_plotted_trend_is_a_trailing_mean():
    import numpy as np

    y = np.array([1.0, 3.0, np.nan, 5.0, 7.0])
    assert sweep.rolling_mean(y, 2).tolist() == [1.0, 2.0, 3.0, 5.0, 6.0]
    assert sweep.rolling_mean(y, 1)[2] != sweep.rolling_mean(y, 1)[2]  # a lone NaN stays a gap


def test_the_format_is_read_two_ways_the_released_reading_without_the_prefill():
    """f_tau over the whole trajectory sees the prefilled '<think>'; the released reading (the agent's own tokens)
    does not, so the same closed turn scores lower there and an unprefixed one the same both ways."""
    import gymnasium as gym

    import paravt_env  # noqa: F401

    text = "I can see the answer in the overview.\n</think><answer>A</answer>"
    scores = {}
    for prefix in (True, False):
        env = gym.make("ParaVT-LongVideo-v0", think_prefix="<think>\n" if prefix else None, dataset_size=12).unwrapped
        env.reset(seed=3)
        _, _, done, _, info = env.step(text if prefix else "<think>" + text)
        assert done
        scores[prefix] = (info["format_reward_common"], info["format_reward_common_generated"])
    whole, generated = scores[True]
    assert whole > generated  # the prefill's <think> counts only in the trajectory
    assert scores[False][0] == scores[False][1] == whole


def test_jobs_wait_for_their_run_and_an_out_of_memory_job_is_retried_with_fewer_neighbours(tmp_path):
    """run_all on real processes: a job that dies of GPU memory runs again (its resume command) with one job
    fewer at a time; a job waiting on a failed one never starts; one waiting on a finished one does."""
    flag = tmp_path / "tried"
    oom_once = (f"import pathlib, sys; p = pathlib.Path({str(flag)!r})\n"
                "if not p.exists():\n    p.touch(); print('torch.OutOfMemoryError: CUDA out of memory.'); sys.exit(1)")
    py = sys.executable
    jobs = [sweep.Job("train_a", [py, "-c", oom_once], tmp_path / "a.log",
                      resume_argv=[py, "-c", f"open({str(tmp_path / 'resumed')!r}, 'w')"]),
            sweep.Job("train_b", [py, "-c", "import sys; sys.exit(3)"], tmp_path / "b.log"),
            sweep.Job("eval_a", [py, "-c", f"open({str(tmp_path / 'eval_a')!r}, 'w')"], tmp_path / "c.log",
                      after="train_a"),
            sweep.Job("eval_b", [py, "-c", f"open({str(tmp_path / 'eval_b')!r}, 'w')"], tmp_path / "d.log",
                      after="train_b")]
    codes = sweep.run_all(jobs, parallel=2, deadline=None, progress=False)
    assert codes == {"train_a": 0, "train_b": 3, "eval_a": 0, "eval_b": -1}
    assert jobs[0].tries == 2 and (tmp_path / "resumed").exists()  # the second try ran the resume command
    assert (tmp_path / "eval_a").exists() and not (tmp_path / "eval_b").exists()


def test_an_evaluation_starts_on_its_checkpoint_while_its_training_goes_on(tmp_path):
    """run_all on real processes: a job with `ready_when` starts once that file exists, before the job it waits
    for ends, and still runs when that job then fails; one whose file never appeared is dropped with it."""
    py = sys.executable
    ckpt, ended, started = tmp_path / "step_000001.pt", tmp_path / "train_ended", tmp_path / "eval_started"
    train = (f"import pathlib, sys, time; pathlib.Path({str(ckpt)!r}).touch(); time.sleep(4); "
             f"pathlib.Path({str(ended)!r}).write_text(str(time.time())); sys.exit(2)")
    jobs = [sweep.Job("train", [py, "-c", train], tmp_path / "t.log"),
            sweep.Job("eval_step1", [py, "-c", f"import pathlib, time; pathlib.Path({str(started)!r}).write_text("
                                               f"str(time.time()))"], tmp_path / "e1.log", after="train",
                      ready_when=ckpt),
            sweep.Job("eval_step2", [py, "-c", "pass"], tmp_path / "e2.log", after="train",
                      ready_when=tmp_path / "step_000002.pt")]
    codes = sweep.run_all(jobs, parallel=3, deadline=None, progress=False)
    assert codes == {"train": 2, "eval_step1": 0, "eval_step2": -1}
    assert float(started.read_text()) < float(ended.read_text())
