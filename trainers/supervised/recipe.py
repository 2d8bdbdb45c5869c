"""The cold starts from one recipe: ``python trainers/sft.py --recipe strong|weak|fragile`` builds a cold start from
a random init, every step's settings written here.

A recipe is an ordered list of named steps, each a ``trainers/sft.py`` build (``Args`` values) that continues the
one before, or the self-distillation rows (``trainers.supervised.self_distill``) that the next build trains on.
Every recipe shares the perception base (``BASE_STEPS``: captions and direct answers from a random init at 4
layers, the in-context lookup that reading tool responses needs, then growth to 8 layers); the priors differ only
in the cold-start data (``PRIORS``): the share of tool-use traces against direct answers (the dial,
``--tool-trace-share``), the traces' length (two tool turns or one) and the native answer habit (a share of the
cold start's rollouts played wholly in the model's own dialect), and in the last step, the direct-answer mend,
which leaves the call-or-answer tokens untrained (strong, fragile) or trains them (weak: it stops the calls).

The values condense what built the shipped cold starts (``benchmarks/cold_start_lineage/`` and each checkpoint's
``cold_start/sft_args.json``): every step here cites the lineage step it stands for. Their numbers are not yet
measured on a GPU.

Layout of ``--out DIR``:

    DIR/base/recipe.json, DIR/base/NN_<step>/     the shared base, built once and reused (one seed and size a DIR)
    DIR/<name>/recipe.json, DIR/<name>/NN_<step>/ one recipe's own steps (<name>: the recipe, or
                                                  <recipe>-share<X> with --tool-trace-share X)
    DIR/<name>/cold_start                         the final cold start; its build record (sft_args.json,
                                                  "recipe") and manifest ("built_by") name the command,
                                                  the commit and the seed
    DIR/runs                                      TensorBoard

``recipe.json`` lists each step's name, status, settings, seed, commit and seconds. The same command again skips
the finished steps and continues an interrupted one (sft's own resume: ``train_state.pt``); another recipe, seed,
size or share into a folder built by another command stops with an error instead of mixing them.
``--time-budget-s S`` stops a run after S seconds, each step saving where it stands, so the recipe goes on over
several runs of limited length (on one GPU: ``--time-budget-s 540`` per 10-minute run). ``--size tiny`` runs
every step at a few samples and steps (a CPU check of the whole chain, about half a minute a recipe). The corpora
go to the cache (``$PARAVT_CACHE``), as every build's do."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trainers.run_state import RunLock, RunLockedError, atomic_write_json
from trainers.supervised.args import DATA_FIELDS, Args, check_args
from trainers.supervised.checkpoints import RECORD_FILE, is_built
from trainers.supervised.self_distill import play_rows, rows_report

ROOT = Path(__file__).resolve().parents[2]
LEDGER = "recipe.json"
SIZES = ("full", "tiny")


@dataclass(frozen=True)
class Step:
    name: str
    kind: str      # "sft": a trainers/sft.py build from the step before; "play": self-distillation rows of that model
    values: dict   # "sft": Args fields; "play": trainers.supervised.self_distill.play_rows settings


# Every step writes the think lines and traces of the shipped builds (native_step.sh, sighting_frames.sh,
# mend.sh): grounded answers after tool turns, options restated, the presence chain, the overview's scene
# chain on direct answers, the sweep agent's two turns with the second turn's sighting line, no oracle traces.
# fp32 throughout: in earlier builds bf16 autocast at lr >= 1e-3 learned no objects or went NaN.
STYLE = dict(grounded_think=True, option_think=True, presence_think=True, direct_think="scene_chain_decide",
             search_agent="sweep", zoom_think="sighting", oracle_fraction=0.0, native_think="spread", amp=False,
             budgets="4,8,16,32,64")
NO_STAGE1 = dict(stage1_frame=0, stage1_caption=0, stage1_direct=0, stage1_tool=0, stage1_steps=0)
NO_STAGE2 = dict(stage2_tool=0, stage2_direct=0, stage2_frame=0, stage2_caption=0, stage2_steps=0)

BASE_STEPS = (
    # Random init, 4 layers: stage 1 of the first GPU build of the chain (v4, --preset gpu: 40k frames, 40k crops,
    # 12k direct answers, 4,912 steps of batch 256 at 6e-4 in its 540 s, the first 60 % on captions only). No
    # native traces: the prior lives in the cold start now.
    Step("perception", "sft", {**STYLE, **NO_STAGE2, "stage1_frame": 40000, "stage1_caption": 40000,
                               "stage1_direct": 12000, "stage1_tool": 0, "perception_warmup": 0.6,
                               "stage1_steps": 4900, "stage1_lr": 6e-4, "batch_size": 256, "batch_tokens": 65536,
                               "warmup": 100}),
    # Recall rows and reading drills (v6's GPU call 3, variant F: 800 warm-up steps half on recall rows at 1e-3,
    # 2,686 steps of batch 256 at 4e-4, the answer's tokens weighed 10x): the lookup formed in a few hundred
    # dense steps where, mixed in at the stage-1 rate, it had not formed in 1,400.
    Step("reading", "sft", {**STYLE, **NO_STAGE2, "stage1_frame": 10000, "stage1_caption": 20000,
                            "stage1_direct": 10000, "stage1_tool": 0, "stage1_reading": 30000,
                            "stage1_recall": 100000, "recall_warmup_steps": 800, "answer_weight": 10.0,
                            "perception_warmup": 0.0, "stage1_steps": 2700, "stage1_lr": 4e-4, "batch_size": 256,
                            "batch_tokens": 65536, "warmup": 100}),
    # 4 -> 8 decoder layers (weak v10: --grow-layers 4, then 1,466 steps of batch 256 at 3e-4 of reading drills,
    # direct drills with the decision tokens untrained, presence probes and 16-frame crops, 70 % fitted from 64 px).
    Step("grow", "sft", {**STYLE, **NO_STAGE2, "grow_layers": 4, "caption_max_frames": "16", "caption_aug_p": 0.7,
                         "stage1_frame": 3000, "stage1_caption": 8000, "stage1_direct": 6000, "stage1_tool": 0,
                         "stage1_reading": 8000, "stage1_direct_needle": 20000, "stage1_presence": 30000,
                         "drill_decisions": False, "reading_oracle_fraction": 0.2, "perception_warmup": 0.0,
                         "stage1_steps": 1466, "stage1_lr": 3e-4, "batch_size": 256, "batch_tokens": 49152,
                         "warmup": 50}),
)

# The priors: points of the dial (the share of tool-use traces among the cold start's traces and direct answers)
# with the traces' turns, the share of rollouts in the native dialect (also the self-distillation's re-voiced
# share), the cold start's length and whether the mend trains the call-or-answer tokens.
PRIORS = {
    # The shipped strong's cold-start data: 6,000 traces to 1,500 direct answers in its native steps (0.8), two
    # turns (sweep), 65 % native rollouts.
    "strong": dict(tool_prior="strong", tool_trace_share=0.8, trace_turns=2, native_share=0.65,
                   cold_start_steps=3000, drill_decisions=False),
    # The mirror of it: direct answers dominate, one-turn traces, no native habit, and the mend teaches answering
    # (the shipped weak is the strong with that mend).
    "weak": dict(tool_prior="weak", tool_trace_share=0.2, trace_turns=1, native_share=0.0,
                 cold_start_steps=3000, drill_decisions=True),
    # The strong end: nearly all traces, 75 % native (at that share earlier builds broke greedy format too), a
    # cold start twice as long. Meant to break its format under sampling; not yet measured.
    "fragile": dict(tool_prior="strong", tool_trace_share=0.95, trace_turns=2, native_share=0.75,
                    cold_start_steps=6000, drill_decisions=False),
}


def cold_start_mix(share: float, total: int) -> dict:
    """``total`` cold-start samples: ``share`` of them tool-use traces, the rest direct answers."""
    tools = int(round(share * total))
    return {"stage2_tool": tools, "stage2_direct": total - tools}


def prior_steps(prior: dict, share: float) -> tuple[Step, ...]:
    """A prior's steps from the base, its tool traces ``share`` of the cold-start data."""
    two_turns = prior["trace_turns"] == 2
    own = {**STYLE, "tool_prior": prior["tool_prior"]}
    # the cold-start data: needle questions' traces, 70 % of them where the overview already shows the evidence
    # (needless calls, the habit of a prior that calls readily), on videos no other part uses
    data = {**own, "search_agent": "sweep" if two_turns else "scene", "tool_families": "needle,needle_attribute",
            "tool_on_visible": 0.7, "stage2_native_traces": prior["native_share"], "stage2_fresh": True}
    return (
        # The native steps (fga -> fhb -> fib, each about 1,055 steps of batch 64 at 4e-4 on a fresh draw of
        # 6,000 traces, 1,500 direct answers, 1,000 frames, 2,000 crops) as one step on one draw three times that.
        Step("cold_start", "sft", {**data, **NO_STAGE1, **cold_start_mix(share, 22500), "stage2_frame": 3000,
                                   "stage2_caption": 6000, "stage2_steps": prior["cold_start_steps"],
                                   "stage2_lr": 4e-4, "batch_size": 64, "batch_tokens": 65536, "warmup": 100}),
        # The caption tail that followed each native step: 150 caption-only steps at 5e-5 (lib.sh v11_tail).
        Step("captions", "sft", {**own, **NO_STAGE2, "caption_max_frames": "16", "caption_aug_p": 0.5,
                                 "stage1_frame": 2000, "stage1_caption": 4000, "stage1_direct": 0, "stage1_tool": 0,
                                 "stage1_steps": 150, "stage1_lr": 5e-5, "batch_size": 32, "warmup": 10}),
        # Drills of the second tool turn that keep the overview's frames, beside the cold-start data (fB: 1,247
        # steps of batch 64 at 3e-4, 40,000 drills, 6,000 traces, 2,000 direct answers); one-turn traces have no
        # second turn to drill.
        Step("second_turn", "sft", {**data, **NO_STAGE1, **cold_start_mix(share, 8000), "budgets": "4,8,16",
                                    "stage2_frame": 1000, "stage2_caption": 3000,
                                    "stage2_sighting": 40000 if two_turns else 0, "sighting_frames": two_turns,
                                    "stage2_steps": 1247, "stage2_lr": 3e-4, "batch_size": 64,
                                    "batch_tokens": 98304, "warmup": 100}),
        # Self-distillation (strong v16): 1,024 train episodes played greedily, the right ones kept, the native
        # share of them said again in the native dialect ...
        Step("self_distill_rows", "play", {"episodes": 1024, "pool": 32, "keep": "correct",
                                           "native_revoice": prior["native_share"], "env": {}}),
        # ... and 100 steps of 16 of them at 1e-4, the tags out of the loss.
        Step("self_distill", "sft", {**own, **NO_STAGE1, **NO_STAGE2, "stage2_steps": 100, "stage2_lr": 1e-4,
                                     "batch_size": 16, "warmup": 1}),
        # The direct-answer mend (strong v17, weak v12; mend.sh): 300 steps of batch 32 at 5e-5 of direct drills
        # with overviews up to 64 frames and caption rehearsal.
        Step("mend", "sft", {**own, **NO_STAGE2, "caption_max_frames": "8,16", "caption_aug_p": 0.25,
                             "stage1_frame": 500, "stage1_caption": 1000, "stage1_direct": 0, "stage1_tool": 0,
                             "stage1_direct_needle": 4000, "drill_decisions": prior["drill_decisions"],
                             "stage1_steps": 300, "stage1_lr": 5e-5, "batch_size": 32, "warmup": 10}),
    )


# --size tiny: the same steps at a few samples and steps each, on the CPU.
TINY_SAMPLES = 4      # every corpus part at most this many
TINY_COLD_START = 8   # the cold start's traces and direct answers together, in the recipe's proportion
TINY_STEPS = 2
TINY = dict(budgets="4,8", vocab_size=600, batch_size=4, warmup=1)
TINY_PLAY = dict(episodes=2, pool=2, keep="all",  # a build of a few steps answers next to nothing right
                 env=dict(max_new_tokens=24, subagent_max_new_tokens=8, max_turns=2, gating_budgets="4,8"))
_DEFAULTS = Args()
_COUNTS = tuple(f for f in DATA_FIELDS if f.startswith(("stage1_", "stage2_")) and f != "stage1_episodes"
                and type(getattr(_DEFAULTS, f)) is int)


def sized(step: Step, size: str) -> Step:
    """``step`` at ``size``: as written ("full"), or "tiny"."""
    if size == "full":
        return step
    if step.kind == "play":
        return dataclasses.replace(step, values={**step.values, **TINY_PLAY})
    v = {**step.values, **TINY}
    for f in _COUNTS:
        if v.get(f):
            v[f] = min(v[f], TINY_SAMPLES)
    mix = step.values.get("stage2_tool", 0) + step.values.get("stage2_direct", 0)
    if mix:
        v.update(cold_start_mix(step.values.get("stage2_tool", 0) / mix, TINY_COLD_START))
    for f in ("stage1_steps", "stage2_steps"):
        v[f] = min(v.get(f, getattr(_DEFAULTS, f)), TINY_STEPS)
    if v.get("recall_warmup_steps"):
        v["recall_warmup_steps"] = 1
    return dataclasses.replace(step, values=v)


@dataclass
class Plan:
    """What one command builds: its recipe's steps after the shared base, into ``<out>/<name>``."""
    recipe: str
    share: float
    seed: int
    size: str
    name: str

    @classmethod
    def of(cls, recipe: str, seed: int = 1, size: str = "full", share: float | None = None) -> "Plan":
        if recipe not in PRIORS:
            raise SystemExit(f"--recipe {recipe!r}: choose one of {sorted(PRIORS)}")
        if size not in SIZES:
            raise SystemExit(f"--size {size!r}: choose one of {SIZES}")
        if share is not None and not 0.0 <= share <= 1.0:
            raise SystemExit(f"--tool-trace-share must be in [0, 1], got {share}")
        name = recipe if share is None else f"{recipe}-share{share:g}"
        return cls(recipe, PRIORS[recipe]["tool_trace_share"] if share is None else share, seed, size, name)

    def base_steps(self) -> tuple[Step, ...]:
        return tuple(sized(s, self.size) for s in BASE_STEPS)

    def own_steps(self) -> tuple[Step, ...]:
        return tuple(sized(s, self.size) for s in prior_steps(PRIORS[self.recipe], self.share))

    def base_identity(self) -> dict:
        return _plain({"seed": self.seed, "size": self.size, "steps": _specs(self.base_steps())})

    def identity(self) -> dict:
        return _plain({"recipe": self.recipe, "seed": self.seed, "size": self.size, "tool_trace_share": self.share,
                       "steps": _specs(self.own_steps())})

    def command(self, out: str | Path) -> str:
        """The command that builds this plan (what it learns; the device, workers and time budget may differ)."""
        words = ["--recipe", self.recipe, "--out", str(out), "--seed", str(self.seed), "--size", self.size]
        if self.name != self.recipe:
            words += ["--tool-trace-share", f"{self.share:g}"]
        return "python trainers/sft.py " + shlex.join(words)


def _specs(steps) -> list:
    return [{"name": s.name, "kind": s.kind, "values": s.values} for s in steps]


def _plain(obj):
    """``obj`` as it reads back from JSON, so a stored identity compares equal to a fresh one."""
    return json.loads(json.dumps(obj))


def step_seed(seed: int, position: int) -> int:
    """Each step's own seed (corpus draws, batching, initial weights, play), from the recipe's: steps never share
    a corpus draw, and the same step of two recipes at one seed does."""
    return seed * 100 + position


def commit() -> str:
    """The repository's commit (``git rev-parse HEAD``), or "unknown" outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def cold_start_share(folder: str | Path) -> float | None:
    """The measured tool-trace share of the cold-start data of the recipe built in ``folder`` (``<out>/<name>``), as
    its ``recipe.json`` records it (None before that step is done)."""
    steps = json.loads((Path(folder) / LEDGER).read_text())["steps"]
    return next((s.get("corpus_tool_share") for s in steps if s["name"] == "cold_start"), None)


def corpus_tool_share(record: dict) -> float | None:
    """The share of tool-use traces among the cold start's traces and direct answers as a build rendered them (its
    record's ``corpus_stats``); None for a build without either."""
    stats = record.get("corpus_stats", {})
    tools = sum(stats.get("s2_tool", {}).get("kinds", {}).values())
    direct = sum(stats.get("s2_direct", {}).get("kinds", {}).values())
    return tools / (tools + direct) if tools + direct else None


@dataclass
class Runtime:
    """How this run builds: settings that do not change what is learned."""
    device: str = "cpu"
    workers: int = 0
    progress: bool = True
    stop_at: float = 0.0   # unix time at which every step saves where it stands and the run ends (0: never)
    runs_dir: str = "runs"
    eval_frames: int = 16  # held-out caption F1 at the end of each stage

    @classmethod
    def for_size(cls, size: str, out: str | Path, device: str = "cpu", workers: int | None = None,
                 time_budget_s: float = 0.0) -> "Runtime":
        """A run at ``size`` into ``out``: ``workers`` default up to 15 corpus processes at full size (none at
        tiny), progress bars and the end-of-stage caption check at full size only; ``time_budget_s`` from now."""
        tiny = size == "tiny"
        if workers is None:
            workers = 0 if tiny else max(0, min(15, (os.cpu_count() or 1) - 1))
        return cls(device=device, workers=workers, progress=not tiny, runs_dir=str(Path(out) / "runs"),
                   stop_at=time.time() + time_budget_s if time_budget_s > 0 else 0.0, eval_frames=0 if tiny else 16)

    def out_of_time(self) -> bool:
        return bool(self.stop_at) and time.time() >= self.stop_at

    def sft_fields(self) -> dict:
        return dict(device=self.device, workers=self.workers, progress=self.progress, stop_at_unix=self.stop_at,
                    runs_dir=self.runs_dir, eval_every=0, eval_frames=self.eval_frames,
                    eval_crops=self.eval_frames // 2)


class Ledger:
    """``recipe.json`` of one folder: what the folder is a build of (``identity``) and each step's record."""

    def __init__(self, folder: Path, identity: dict, steps: tuple[Step, ...], what: str):
        self.path = folder / LEDGER
        self.data = self.check(folder, identity, what)
        if self.data is None:
            self.data = {"identity": identity, "steps": [{"name": s.name, "kind": s.kind, "status": "pending",
                                                          "seconds": 0.0} for s in steps]}
            self.save()

    @staticmethod
    def check(folder: Path, identity: dict, what: str) -> dict | None:
        """The ledger in ``folder`` (None: none yet); SystemExit when it is a build of another command."""
        path = folder / LEDGER
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        if data["identity"] != identity:
            difference = _difference(data["identity"], identity)
            raise SystemExit(f"{folder} holds {what} of another command ({difference}); re-run that command to "
                             "continue it, or give another --out")
        return data

    def step(self, i: int) -> dict:
        return self.data["steps"][i]

    def save(self) -> None:
        atomic_write_json(self.path, self.data)


def _difference(old: dict, new: dict) -> str:
    said = [f"{k} {old.get(k)!r} there, {new[k]!r} asked" for k in ("recipe", "seed", "size", "tool_trace_share")
            if k in new and old.get(k) != new[k]]
    return "; ".join(said) or "its steps' settings differ: the recipe changed since it was started"


def _sft_args(step: Step, seed: int, folder: Path, start: Path | None, rows: Path | None, rt: Runtime) -> Args:
    """The build of an sft step; ``rows``: the folder of the play step before it, trained on as stage-2 rows (with
    nothing kept there the step trains nothing and the model passes through)."""
    has_rows = rows is not None and any(rows.glob("chunk_*.npz"))
    args = Args(**{**step.values, **rt.sft_fields(), "seed": seed, "out": str(folder), "init_from": str(start or ""),
                   "stage2_rows": str(rows) if has_rows else ""})
    check_args(args)
    return args


def _run_step(step: Step, seed: int, folder: Path, start: Path | None, rows: Path | None,
              rt: Runtime) -> tuple[Path | None, dict]:
    """Build one step into ``folder``; (the model it leaves, or None when the time budget stopped it; notes)."""
    if step.kind == "play":
        report = rows_report(folder) or play_rows(start, folder, seed=seed, device=rt.device, stop_at=rt.stop_at,
                                                  **step.values)
        if report is None:
            return None, {}
        return start, {"kept": report["kept"], "revoiced": report["revoiced"], "episodes": report["episodes"]}
    from trainers import sft

    sft.main(_sft_args(step, seed, folder, start, rows, rt))
    if not is_built(folder):
        return None, {}
    record = json.loads((folder / RECORD_FILE).read_text())
    notes = {k: record.get(k) for k in ("stage1_steps_done", "stage2_steps_done")}
    if (share := corpus_tool_share(record)) is not None:
        notes["corpus_tool_share"] = share
    return folder / "cold_start", notes


def _run_steps(steps: tuple[Step, ...], positions, folder: Path, ledger: Ledger, start: Path | None, seed: int,
               rt: Runtime, label: str) -> Path | None:
    """Every step not done yet, in order, each from the last one's model; the last model, or None when out of time."""
    model = start
    for i, (step, position) in enumerate(zip(steps, positions)):
        rec, sub = ledger.step(i), folder / f"{i + 1:02d}_{step.name}"
        rows = folder / f"{i:02d}_{steps[i - 1].name}" if i and steps[i - 1].kind == "play" else None
        if rec["status"] == "done":
            model = sub / "cold_start" if step.kind == "sft" else model
            print(f"[recipe] {label}: {step.name} done before, skipped", file=sys.stderr)
            continue
        if rt.out_of_time():
            return None
        rec.update(status="running", args=step.values, seed=step_seed(seed, position), commit=commit())
        ledger.save()
        print(f"[recipe] {label}: {step.name} ({sub})", file=sys.stderr)
        t0 = time.time()
        result, notes = _run_step(step, rec["seed"], sub, model, rows, rt)
        rec["seconds"] += time.time() - t0
        rec.update(notes, status="done" if result is not None else "interrupted")
        ledger.save()
        if result is None:
            return None
        model = result
    return model


def _lock(folder: Path, wait: bool) -> RunLock:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return RunLock(folder, wait=wait)
    except RunLockedError:
        raise SystemExit(f"{folder} is being built by another process; wait for it to finish") from None


def build_base(plan: Plan, out: Path, rt: Runtime) -> Path | None:
    """The shared base in ``<out>/base`` (built here, or the one there); its model, or None when out of time. Two
    recipes building it at once take turns: the second finds it built."""
    folder = out / "base"
    steps = plan.base_steps()
    lock = _lock(folder, wait=True)
    try:
        ledger = Ledger(folder, plan.base_identity(), steps, "a base")
        return _run_steps(steps, range(1, len(steps) + 1), folder, ledger, None, plan.seed, rt, "base")
    finally:
        lock.release()


def finished_base(plan: Plan, folder: str | Path) -> Path:
    """The model of a base built elsewhere (``--base``: a ``<out>/base`` folder of an earlier run, kept where runs are
    not; of it a build needs ``recipe.json`` and the last step's ``cold_start/`` and build record): its ledger must
    record this plan's base (seed, size, steps) with every step done, and its last step's model must be whole.
    SystemExit naming what is wrong otherwise."""
    from agents.checkpoint_io import manifest_problem

    folder = Path(folder)
    if not (folder / LEDGER).is_file():
        raise SystemExit(f"--base {folder}: no {LEDGER} (give the base folder of a recipe run, <out>/base)")
    try:
        data = Ledger.check(folder, plan.base_identity(), "a base")
        steps = data["steps"]
        pending = [s["name"] for s in steps if s.get("status") != "done"]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SystemExit(f"--base {folder}: {LEDGER} is not a recipe ledger ({type(exc).__name__}: {exc})") from None
    if pending or len(steps) != len(plan.base_steps()):
        raise SystemExit(f"--base {folder}: not finished ({', '.join(pending) or 'steps missing'}); finish it with "
                         f"the command that started it")
    model = folder / f"{len(steps):02d}_{plan.base_steps()[-1].name}" / "cold_start"
    problem = manifest_problem(model, deep=True)
    if problem:
        raise SystemExit(f"--base {folder}: its model {model} is not whole ({problem})")
    if not (model.parent / RECORD_FILE).is_file():  # the lineage the prior's own records nest
        raise SystemExit(f"--base {folder}: no build record {model.parent / RECORD_FILE} beside its model")
    return model


def build(plan: Plan, out: str | Path, rt: Runtime | None = None, command: str | None = None,
          base: str | Path | None = None) -> Path | None:
    """Run ``plan`` into ``out``: the shared base (or the finished one at ``base``), the recipe's own steps, the final
    cold start. Returns ``<out>/<name>/cold_start``, or None when the time budget ended the run first (the same
    command continues)."""
    out = Path(out)
    rt = rt or Runtime(runs_dir=str(out / "runs"))
    base_folder = Path(base) if base else out / "base"
    folder = out / plan.name
    steps = plan.own_steps()
    given_base = finished_base(plan, base) if base else None  # before anything is written
    lock = _lock(folder, wait=False)
    try:
        final = folder / "cold_start"
        done = Ledger.check(folder, plan.identity(), f"the {plan.name} recipe")
        if done and done.get("final") and (final / "config.json").is_file():
            print(f"[recipe] {plan.name}: already built ({final}); nothing to do", file=sys.stderr)
            return final
        if not base:
            Ledger.check(base_folder, plan.base_identity(), "a base")  # before anything is written here
        for step in plan.base_steps() + steps:  # a setting no build takes stops the run now, not hours into it
            if step.kind == "sft":
                _sft_args(step, plan.seed, folder, folder, None, rt)
        ledger = Ledger(folder, plan.identity(), steps, f"the {plan.name} recipe")
        start = given_base or build_base(plan, out, rt)
        model = None
        if start is not None:
            model = _run_steps(steps, range(11, 11 + len(steps)), folder, ledger, start, plan.seed, rt, plan.name)
        if model is None:
            print(f"[recipe] {plan.name}: stopped by the time budget; re-run the same command to continue",
                  file=sys.stderr)
            return None
        steps_done = [dict(r, name=f"base/{r['name']}") for r in json.loads((base_folder / LEDGER).read_text())[
            "steps"]] + ledger.data["steps"]
        summary = {"command": command or plan.command(out), "commit": commit(), "seed": plan.seed,
                   "recipe": plan.recipe, "size": plan.size, "tool_trace_share": plan.share,
                   "steps": [{k: r.get(k) for k in ("name", "seed", "commit", "seconds")} for r in steps_done]}
        _write_final(model, final, summary)
        ledger.data["final"] = summary
        ledger.save()
        print(f"[recipe] {plan.name}: done -> {final}", file=sys.stderr)
        return final
    finally:
        lock.release()


def _write_final(model: Path, final: Path, summary: dict) -> None:
    """The last step's checkpoint as the recipe's cold start, its build record and manifest naming how it was made."""
    from agents.lmm.default import checkpoint_info
    from agents.lmm.tiny_qwen import load_checkpoint, save_checkpoint

    weights, tok, proc = load_checkpoint(str(model))
    save_checkpoint(str(final), weights, tok, proc,
                    info={"built_by": summary["command"], "commit": summary["commit"], "seed": summary["seed"]},
                    build_record={**checkpoint_info(model), "recipe": summary})


def main(argv=None) -> Path | None:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="trainers/sft.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", required=True, choices=sorted(PRIORS), help="the prior to build")
    p.add_argument("--out", default="runs/recipe", help="output folder: the shared base in OUT/base, the recipe's "
                   "steps and final cold start in OUT/<name>")
    p.add_argument("--seed", type=int, default=1, help="seed every step's own seed is made from")
    p.add_argument("--size", choices=SIZES, default="full", help="full: the recipe's values; tiny: every step at a "
                   "few samples and steps (a check of the chain on a CPU)")
    p.add_argument("--tool-trace-share", type=float, default=None, help="the dial: share of tool-use traces among "
                   "the cold start's traces and direct answers (0..1; default the recipe's own: strong "
                   f"{PRIORS['strong']['tool_trace_share']}, weak {PRIORS['weak']['tool_trace_share']}, fragile "
                   f"{PRIORS['fragile']['tool_trace_share']}); builds into OUT/<recipe>-share<X>")
    p.add_argument("--base", default="", help="a finished base folder (OUT/base of an earlier run of the same "
                   "--seed and --size, e.g. kept from a machine that does not keep its disk) to build on instead "
                   "of OUT/base")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    p.add_argument("--workers", type=int, default=None, help="corpus-rendering processes (default: up to 15 at "
                   "--size full, none at tiny)")
    p.add_argument("--time-budget-s", type=float, default=0.0, help="end this run after this many seconds, each "
                   "step saving where it stands (0 = none); the same command continues")
    a = p.parse_args(argv)
    plan = Plan.of(a.recipe, a.seed, a.size, a.tool_trace_share)
    rt = Runtime.for_size(a.size, a.out, a.device, a.workers, a.time_budget_s)
    return build(plan, a.out, rt, command="python trainers/sft.py " + shlex.join(argv), base=a.base or None)
