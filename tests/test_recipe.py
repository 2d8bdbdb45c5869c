"""The cold starts from one recipe (``trainers/sft.py --recipe``) at ``--size tiny`` on the CPU: the whole chain from a
random init to a cold start that loads and generates, its records, a rerun that does nothing, a rerun of another
command that is refused, a step stopped by the time budget that continues, one base for every recipe, and the
dial (``--tool-trace-share``, ``benchmarks/prior_dial.py``)."""

import json
import time
from pathlib import Path

import pytest

from agents.checkpoint_io import manifest_problem, read_manifest
from agents.lmm.default import checkpoint_info
from trainers.supervised import recipe
from trainers.supervised.recipe import LEDGER, Plan, Runtime

ROOT = Path(__file__).resolve().parents[1]


def tiny(name: str, out: Path, *more: str) -> list[str]:
    return ["--recipe", name, "--size", "tiny", "--out", str(out), *more]


def ledger(folder: Path) -> dict:
    return json.loads((folder / LEDGER).read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The strong recipe, then the weak one into the same folder; the base's ledger between the two."""
    out = tmp_path_factory.mktemp("recipe")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARAVT_CACHE", str(out / "cache"))  # the corpora stay out of the home folder
        strong = recipe.main(tiny("strong", out))
        base_after_strong = ledger(out / "base")
        weak = recipe.main(tiny("weak", out))
    return out, strong, weak, base_after_strong


def test_a_tiny_recipe_builds_a_cold_start_that_loads_generates_and_names_its_command(built):
    from agents.lmm.policy import TransformersPolicy

    out, strong, _, _ = built
    assert strong == out / "strong" / "cold_start" and manifest_problem(strong, deep=True) is None
    policy = TransformersPolicy(str(strong))
    conv = policy.start([{"role": "user", "content": "What is in the video?"}])
    [completion] = policy.generate([conv], temperature=0.0, max_new_tokens=8)
    assert len(completion.token_ids) > 0
    assert policy.model.config.text_config.num_hidden_layers == 8          # grown from 4 in the base
    command = f"python trainers/sft.py --recipe strong --size tiny --out {out}"
    record = checkpoint_info(strong)
    assert record["recipe"]["command"] == command and record["recipe"]["seed"] == 1
    assert record["recipe"]["commit"] and record["recipe"]["commit"] == recipe.commit()
    assert read_manifest(strong)["info"] == {"built_by": command, "commit": recipe.commit(), "seed": 1}
    # every step is recorded done, with its settings, seed, commit and time
    steps = ledger(out / "strong")["steps"] + ledger(out / "base")["steps"]
    assert [s["name"] for s in steps] == ["cold_start", "captions", "second_turn", "self_distill_rows",
                                          "self_distill", "mend", "perception", "reading", "grow"]
    assert all(s["status"] == "done" and s["args"] and s["commit"] and s["seconds"] > 0 for s in steps)
    assert len({s["seed"] for s in steps}) == len(steps)
    assert [s["name"] for s in record["recipe"]["steps"]] == [f"base/{s['name']}" for s in steps[6:]] + [
        s["name"] for s in steps[:6]]
    # the build record nests every build back to the random init
    chain = []
    while record:
        chain.append(record["args"])
        record = record.get("parent")
    assert [Path(a["out"]).name for a in chain] == ["06_mend", "05_self_distill", "03_second_turn", "02_captions",
                                                    "01_cold_start", "03_grow", "02_reading", "01_perception"]
    assert chain[-1]["init_from"] == "" and chain[-3]["grow_layers"] == 4
    assert chain[1]["stage2_rows"].endswith("04_self_distill_rows")       # self-distillation trained on its rows
    assert ledger(out / "strong")["steps"][3]["kept"] > 0


def test_the_same_command_again_does_nothing_and_another_command_is_refused(built, monkeypatch):
    out, strong, _, _ = built
    before = {p: p.read_bytes() for p in (out / "strong" / LEDGER, out / "base" / LEDGER)}

    def no_step(*_, **__):
        raise AssertionError("a finished recipe ran a step again")

    monkeypatch.setattr(recipe, "_run_step", no_step)
    assert recipe.main(tiny("strong", out)) == strong
    assert before == {p: p.read_bytes() for p in before}
    with pytest.raises(SystemExit, match="seed 1 there, 2 asked"):
        recipe.main(tiny("strong", out, "--seed", "2"))
    with pytest.raises(SystemExit, match="size 'tiny' there, 'full' asked"):
        recipe.main(["--recipe", "strong", "--out", str(out)])
    # a recipe not built here yet, at another seed, is refused by the base before anything is written for it
    with pytest.raises(SystemExit, match=r"base of another command \(seed 1 there, 2 asked\)"):
        recipe.main(tiny("fragile", out, "--seed", "2"))
    assert not (out / "fragile" / LEDGER).exists()
    assert before == {p: p.read_bytes() for p in before}


def test_strong_and_weak_share_one_base_and_differ_in_their_cold_start_data(built):
    out, strong, weak, base_after_strong = built
    assert weak == out / "weak" / "cold_start" and (weak / "config.json").is_file()
    assert ledger(out / "base") == base_after_strong                    # built once, by the strong recipe
    for name in ("strong", "weak"):
        parent = json.loads((out / name / "01_cold_start" / "sft_args.json").read_text())["parent"]
        assert Path(parent["args"]["out"]) == out / "base" / "03_grow"
    strong_steps, weak_steps = ledger(out / "strong")["steps"], ledger(out / "weak")["steps"]
    assert strong_steps[0]["corpus_tool_share"] > weak_steps[0]["corpus_tool_share"]
    s, w = strong_steps[0]["args"], weak_steps[0]["args"]
    assert (s["search_agent"], w["search_agent"]) == ("sweep", "scene")       # two tool turns against one
    assert s["stage2_native_traces"] > 0 == w["stage2_native_traces"]          # the native habit
    assert (strong_steps[-1]["args"]["drill_decisions"], weak_steps[-1]["args"]["drill_decisions"]) == (False, True)
    # the rest of the steps are the same
    same = {k for k in s if k not in ("stage2_tool", "stage2_direct", "search_agent", "stage2_native_traces",
                                      "tool_prior")}
    assert {k: s[k] for k in same} == {k: w[k] for k in same}


def test_a_step_the_time_budget_stops_continues_with_sfts_resume(built, monkeypatch):
    """The budget runs out as the first step of a recipe starts: the build saves its state and the run ends; the
    same command continues that step from its saved state and finishes."""
    from trainers import sft

    out = built[0]
    monkeypatch.setenv("PARAVT_CACHE", str(out / "cache"))
    plan = Plan.of("fragile", size="tiny")
    with monkeypatch.context() as m:
        m.setattr(Runtime, "out_of_time", lambda self: False)           # the recipe starts the step nonetheless
        stopped = recipe.build(plan, out, Runtime(progress=False, runs_dir=str(out / "runs"), eval_frames=0,
                                                  stop_at=time.time() - 1))
    assert stopped is None
    steps = ledger(out / "fragile")["steps"]
    assert steps[0]["status"] == "interrupted" and all(s["status"] == "pending" for s in steps[1:])
    assert (out / "fragile" / "01_cold_start" / sft.STATE_FILE).is_file()
    resumed = []
    load_state = sft.load_state
    monkeypatch.setattr(sft, "load_state", lambda *a: resumed.append(load_state(*a)) or resumed[-1])
    final = recipe.main(tiny("fragile", out))
    assert final == out / "fragile" / "cold_start" and resumed[0] is not None   # the first build resumed its state
    assert all(s["status"] == "done" for s in ledger(out / "fragile")["steps"])
    assert json.loads((out / "fragile" / "01_cold_start" / "sft_args.json").read_text())["stage2_steps_done"] == 2


@pytest.fixture(scope="module")
def dial(built, tmp_path_factory):
    """benchmarks/prior_dial.py at two shares, tiny, on the recipe tests' base."""
    from benchmarks import prior_dial

    out = tmp_path_factory.mktemp("dial")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARAVT_CACHE", str(built[0] / "cache"))
        results = prior_dial.main(["--size", "tiny", "--shares", "0.25,0.75", "--build-dir", str(built[0]),
                                   "--out", str(out)])
    return built[0], out, results, built[3]


def test_the_dial_sets_the_cold_start_corpus_tool_trace_share(dial):
    build_dir, _, _, base_before = dial
    measured = {}
    for share in ("0.25", "0.75"):
        record = json.loads((build_dir / f"strong-share{share}" / "01_cold_start" / "sft_args.json").read_text())
        measured[share] = recipe.corpus_tool_share(record)
        kinds = record["corpus_stats"]
        assert measured[share] == kinds["s2_tool"]["kinds"]["tool"] / (
            kinds["s2_tool"]["kinds"]["tool"] + kinds["s2_direct"]["kinds"]["direct"])
    assert measured == {"0.25": 0.25, "0.75": 0.75}
    assert ledger(build_dir / "base") == base_before                    # the points are built on the same base


def test_prior_dial_writes_one_point_per_share_and_a_plot(dial):
    _, out, results, _ = dial
    data = json.loads((out / "prior_dial.json").read_text())
    assert data == results and [p["share"] for p in data["points"]] == [0.25, 0.75]
    for p in data["points"]:
        assert {"share", "corpus_tool_share", "checkpoint", "k", "kappa_greedy", "kappa_t07", "format_greedy",
                "format_t07", "accuracy_greedy", "accuracy_t07"} <= set(p)
        assert p["corpus_tool_share"] == p["share"] and Path(p["checkpoint"]).name == "cold_start"
    assert (out / "prior_dial.md").read_text().count("\n| 0.") == 2
    assert (out / "prior_dial.png").stat().st_size > 1000


def test_a_recipe_builds_on_a_finished_base_from_elsewhere_and_refuses_another(built, tmp_path, monkeypatch):
    """--base: the base of an earlier run (kept where its machine's disk was not) is built on, not built again; a base
    of another seed, an unfinished one or one whose model is damaged is refused before anything is written."""
    import shutil

    out, _, _, _ = built
    monkeypatch.setenv("PARAVT_CACHE", str(tmp_path / "cache"))
    kept = tmp_path / "kept_base"
    kept.mkdir()
    shutil.copy(out / "base" / LEDGER, kept / LEDGER)  # what a run needs of a base: its ledger and last model
    shutil.copytree(out / "base" / "03_grow" / "cold_start", kept / "03_grow" / "cold_start")
    shutil.copy(out / "base" / "03_grow" / "sft_args.json", kept / "03_grow" / "sft_args.json")
    fresh = tmp_path / "fresh"
    final = recipe.main(tiny("weak", fresh, "--base", str(kept)))
    assert final == fresh / "weak" / "cold_start" and manifest_problem(final, deep=True) is None
    assert not (fresh / "base").exists()
    record = checkpoint_info(final)
    assert record["recipe"]["command"].endswith(f"--base {kept}")
    assert [s["name"] for s in record["recipe"]["steps"][:3]] == ["base/perception", "base/reading", "base/grow"]
    chain = []
    while record:
        chain.append(Path(record["args"]["out"]).name)
        record = record.get("parent")
    assert chain[-3:] == ["03_grow", "02_reading", "01_perception"]  # the base's own records nest under the prior's

    with pytest.raises(SystemExit, match="seed 1 there, 2 asked"):
        recipe.main(tiny("weak", tmp_path / "other_seed", "--base", str(kept), "--seed", "2"))
    assert not (tmp_path / "other_seed" / "weak").exists()
    unfinished = json.loads((kept / LEDGER).read_text())
    unfinished["steps"][-1]["status"] = "interrupted"
    (kept / LEDGER).write_text(json.dumps(unfinished))
    with pytest.raises(SystemExit, match="not finished .grow"):
        recipe.main(tiny("strong", tmp_path / "unfinished", "--base", str(kept)))
    unfinished["steps"][-1]["status"] = "done"
    (kept / LEDGER).write_text(json.dumps(unfinished))
    (kept / "03_grow" / "sft_args.json").unlink()
    with pytest.raises(SystemExit, match="no build record"):
        recipe.main(tiny("strong", tmp_path / "no_record", "--base", str(kept)))
    (kept / "03_grow" / "cold_start" / "model.safetensors").write_bytes(b"damaged")
    with pytest.raises(SystemExit, match="is not whole"):
        recipe.main(tiny("strong", tmp_path / "damaged", "--base", str(kept)))
    (kept / LEDGER).write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a recipe ledger"):
        recipe.main(tiny("strong", tmp_path / "not_a_ledger", "--base", str(kept)))
