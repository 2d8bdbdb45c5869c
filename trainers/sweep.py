"""The Tool Prior Paradox ablations as one command: every row x seed a trainer run, every checkpoint evaluated
under one protocol, then a report with a verdict per claim.

    python trainers/sweep.py --preset cpu                       # 2-core CPU: 5 rows, 1 seed, short (see --help)
    python trainers/sweep.py --preset paper --device cuda --jobs 12 --out runs/reproduction
    python trainers/sweep.py --preset paper-long --device cuda --jobs 12 --out runs/reproduction_long
    python trainers/sweep.py --rows grpo,full --seeds 1,2 --total-steps 30     # any trainer flag goes to every run
    python trainers/sweep.py --report-only --preset paper --out DIR            # rebuild the report from DIR
    python trainers/sweep.py --preset paper --strong-model QWEN_SFT_STRONG --weak-model QWEN_SFT_WEAK \
        --learning-rate 2e-6 --source train.jsonl --eval-source val.jsonl --device cuda   # your own checkpoints

Rows (the paper's ablation table and its contrasts; each row is a trainer script plus the flags that define it):

==================  ========================================================================================
cold_start          the strong cold start, no RL: PARA-GRPO's rollouts with learning rate 0 (the matched
                    baseline of anchoring and full)
cold_start_vanilla  the same under vanilla GRPO's conditions (the matched baseline of grpo, grpo_released, gating)
grpo                vanilla GRPO (trainers/grpo.py): no anchoring, no gating, K = 64
grpo_released       vanilla GRPO scored as the released code scores it (its own tokens only, so never the
                    executed-call tier of R_tool)
anchoring           Exploration Anchoring only: think prefix, answer suffix, anchor bonus and penalty; K = 64
gating              nFrames Gating only: vanilla format reward, K drawn per prompt
full                PARA-GRPO (trainers/para_grpo.py)
no_tool_reward      full minus R_tool
no_gamma            full minus the unclosed-think penalty gamma
anchor_logprob      full with the paper's token-level log-prob anchor instead of the released sequence bonus
sequential          a training row: PARA-GRPO trained with sequential dispatch (trainers/sequential_tool.py)
weak_grpo           the weak-prior cold start under vanilla GRPO
weak_full           the weak-prior cold start under PARA-GRPO
full_oracle         full with the world's truthful caption as sub-agent while training (a control)
released_scoring    full, scored as released (not in the presets; ``--rows released_scoring``)
==================  ========================================================================================

A row's defining flags cannot be overridden: a sweep flag that names one of them (``--learning-rate`` for
cold_start, ``--think-prefix`` for grpo, ...) stops the sweep with the conflict named. ``--learning-rate``
given to the sweep itself goes to every row that does not define its own.

Evaluation (trainers/evaluation.py): the trainers do not evaluate; every row's checkpoints at steps
``--eval-every``, 2 x ``--eval-every``, ... and the last step, and the starting model of each prior (once per
seed, since it is the same model on the same episodes for every row), play the same ``--eval-episodes``
validation episodes from ``--eval-first-episode`` under one protocol: K drawn per episode from
{4, 8, 16, 32, 64}, no think prefix, parallel dispatch, T = 0.6, with the sub-agent and with no tool
advertised; ``full`` also under sequential dispatch. A seed's evaluations sample with that seed's generation
seeds, so the spread over seeds holds evaluation noise. Rows with learning rate 0 are the starting model.

Runs: a trainer process per row x seed (``--jobs`` at a time, evaluation jobs beside them: one per checkpoint,
started as soon as the checkpoint is written, while its run trains on), writing
``<out>/runs/<row>__s<seed>/`` (TensorBoard, checkpoints, history.json) and ``<out>/evals/``. On GPUs a job
starts only while its GPU has ``--gpu-min-free-mb`` free, and a job that runs out of GPU memory is started
again from its last checkpoint with one neighbour fewer. Rerunning the same command skips what is finished
and resumes the rest (``--time-limit-s`` stops cleanly before a hard limit). Each run has one writer
(trainers/run_state.py): a run another process is writing fails with the holder's pid, and the sweep goes on.

Report (``<out>/``): ``results.json`` (``protocol``; one entry per row with f_tau, f_tau_generated, kappa,
eval accuracy with and without the sub-agent, its change from the row's own step 0, at K = 4 and 64, each as
mean, std, 95% t-interval and n over seeds; ``claims``: each claim of the paper with its verdict),
``results.md``, ``side_by_side.md`` (beside the paper's table), ``claims.md``, ``curves.png`` (f_tau both
ways, kappa and eval accuracy against step, seeds as bands), ``REPRODUCTION.md`` (all of it as one page,
rendered from results.json alone) and ``records.json`` (what the report was built from: each run's reported history
fields and hardware, each evaluation's results; read where a run's or an evaluation's own files are absent, so a
folder holding only it rebuilds the report, and a sweep into it adds seeds). f_tau = mean ``train/format_reward_common`` (the released PARA-GRPO format
on the whole trajectory, whatever the row trains on) and f_tau_generated the same format on the agent's own
tokens (the released reading); kappa = mean executed sub-agent calls per rollout; each over the last quarter
of training steps. Verdicts (trainers/verdicts.py): a two-sided t-test over seeds, paired where rows share
seeds (a seed draws the same prompts and evaluation samples in every row), at alpha 0.05: shown,
contradicted, or not detectable, with p and the minimum detectable effect.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__" and not __package__:  # python trainers/sweep.py: the repo root on the path
    sys.path.insert(0, str(ROOT))

from trainers import verdicts  # noqa: E402
from trainers.config import config_flags, flag_name, load_config, named_flags  # noqa: E402
from trainers.evaluation import Protocol, condition_problem, read_record  # noqa: E402

# vanilla format: no prefix, default format weights, no anchor (R_tool stays, as released)
VANILLA = ("--no-think-prefix", "--no-answer-suffix", "--anchor-lambda", "0", "--penalty-gamma", "0")


@dataclass(frozen=True)
class Row:
    script: str                       # trainers/<script>.py
    flags: tuple[str, ...] = ()       # the flags that define the row: no sweep flag may override them
    prior: str = "strong"
    about: str = ""
    baseline: str = ""                # the learning-rate-0 row trained under this row's conditions


ROWS: dict[str, Row] = {
    "cold_start": Row("para_grpo", ("--learning-rate", "0"), about="SFT cold start, no RL (PARA-GRPO's conditions)"),
    "cold_start_vanilla": Row("grpo", ("--learning-rate", "0"),
                              about="SFT cold start, no RL (vanilla GRPO's conditions)"),
    "grpo": Row("grpo", (), about="+ GRPO", baseline="cold_start_vanilla"),
    "grpo_released": Row("grpo", ("--scoring", "generated"), about="+ GRPO, scored as released",
                         baseline="cold_start_vanilla"),
    "anchoring": Row("para_grpo", ("--no-nframes-gating", "--frame-budget", "64"),
                     about="+ Exploration Anchoring only", baseline="cold_start"),
    "gating": Row("para_grpo", (*VANILLA, "--nframes-gating"), about="+ nFrames Gating only",
                  baseline="cold_start_vanilla"),
    "full": Row("para_grpo", (), about="+ PARA-GRPO (full)", baseline="cold_start"),
    "no_tool_reward": Row("para_grpo", ("--no-tool-reward",), about="full minus R_tool", baseline="cold_start"),
    "no_gamma": Row("para_grpo", ("--penalty-gamma", "0"), about="full minus penalty gamma", baseline="cold_start"),
    "anchor_logprob": Row("para_grpo", ("--anchor-mode", "logprob", "--anchor-lambda", "0.1"),
                          about="full, token-level log-prob anchoring", baseline="cold_start"),
    "sequential": Row("sequential_tool", (), about="full, trained with sequential dispatch", baseline="cold_start"),
    "weak_grpo": Row("grpo", (), prior="weak", about="weak prior + GRPO"),
    "weak_full": Row("para_grpo", (), prior="weak", about="weak prior + PARA-GRPO"),
    "full_oracle": Row("para_grpo", ("--subagent", "oracle"), about="full, oracle sub-agent in training (control)",
                       baseline="cold_start"),
    "released_scoring": Row("para_grpo", ("--scoring", "generated"),
                            about="full, scored as released (the agent's own tokens only)", baseline="cold_start"),
}

# The paper's ablation (Qwen3-VL-8B; f_tau, kappa, and its VideoMME accuracy columns in %, "w/o sub" and
# "w/ sub", which in VideoMME usually means subtitles; we set our accuracy without / with the sub-agent beside them).
# Its sequential numbers are the full checkpoint under sequential dispatch.
PAPER_ABLATION: dict[str, dict[str, float]] = {
    "cold_start": {"f_tau": 0.13, "kappa": 2.50, "acc_no_sub": 60.7, "acc_sub": 69.0},
    "grpo": {"f_tau": 0.13, "kappa": 0.02, "acc_no_sub": 62.0, "acc_sub": 68.6},
    "anchoring": {"f_tau": 0.35, "kappa": 0.19, "acc_no_sub": 61.7, "acc_sub": 68.7},
    "gating": {"f_tau": 0.10, "kappa": 1.36, "acc_no_sub": 61.3, "acc_sub": 68.7},
    "full": {"f_tau": 0.41, "kappa": 0.21, "acc_no_sub": 62.1, "acc_sub": 69.4, "acc_sub_sequential": 68.8},
    "no_tool_reward": {"f_tau": 0.33, "kappa": 0.04, "acc_no_sub": 61.9, "acc_sub": 68.5},
    "no_gamma": {"f_tau": 0.36, "kappa": 0.27, "acc_no_sub": 61.6, "acc_sub": 69.0},
}

# A named experiment is a config file in trainers/presets/: rows, seeds, evaluation schedule and a `trainer`
# mapping of flags for every trainer run (after the row's own flags; the command line replaces them, but never a
# row's defining flag). `--config FILE` takes a file of the same shape.
PRESET_DIR = ROOT / "trainers" / "presets"


def load_sweep_config(path: str | Path) -> dict:
    """A sweep config file as the sweep's own options plus ``flags``, the trainer flags of its ``trainer`` mapping."""
    data = dict(load_config(path))
    trainer = data.pop("trainer", None) or {}
    if not isinstance(trainer, dict):
        raise ValueError(f"{path}: trainer must be a mapping of trainer flags to values")
    return {**data, "flags": config_flags(trainer, source=f"{path}: trainer")}


PRESETS: dict[str, dict] = {f.stem: load_sweep_config(f) for f in sorted(PRESET_DIR.glob("*.yaml"))}
DEFAULT_ROWS = ["cold_start_vanilla", "grpo", "anchoring", "gating", "full", "no_tool_reward", "no_gamma"]


def spread(values: list[float]) -> dict:
    """mean, std (ddof 1) and a 95% t-interval of the mean over seeds (NaN values left out)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return {"mean": float("nan"), "std": float("nan"), "ci95": [float("nan")] * 2, "n": 0}
    n = len(vals)
    mean = sum(vals) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    half = verdicts.t_ppf(0.975, n - 1) * std / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "std": std, "ci95": [mean - half, mean + half], "n": n}


# The switches that tell the rows apart. Every row sets each of them, through its flags or its script's defaults
# (trainers/grpo.py has no think prefix, trainers/para_grpo.py has one), so a sweep-wide value would redefine rows.
ROW_SWITCHES = frozenset({"think_prefix", "answer_suffix", "anchor_lambda", "anchor_mode", "penalty_gamma",
                          "tool_reward", "nframes_gating", "frame_budget", "scoring", "subagent", "dispatch",
                          "max_calls_per_turn"})


def conflicts(rows: list[str], flags: list[str]) -> list[str]:
    """One line per row whose definition (its flags, its script's switches) the sweep-wide flags would change."""
    given = named_flags(flags)
    out = []
    for row in rows:
        spec = ROWS[row]
        hit = sorted((named_flags(spec.flags) | ROW_SWITCHES) & given)
        if hit:
            out.append(f"row {row} is defined by trainers/{spec.script}.py {' '.join(spec.flags)}".rstrip()
                       + f"; the sweep's {', '.join('--' + h.replace('_', '-') for h in hit)} would change it")
    return out


def flag_value(flags: list[str], name: str, default):
    """The last value given for --name in flags (argparse semantics), converted like default."""
    value = default
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            value = type(default)(flags[i + 1])
        elif f.startswith(name + "="):
            value = type(default)(f.split("=", 1)[1])
    return value


def merge_flags(preset: list[str], given: list[str]) -> list[str]:
    """The preset's flags with any flag the command line also names left out, then the command line's."""
    names = named_flags(given)
    out, i = [], 0
    while i < len(preset):
        f = preset[i]
        takes_value = i + 1 < len(preset) and not preset[i + 1].startswith("--") and "=" not in f
        if flag_name(f) not in names:
            out += preset[i:i + 1 + takes_value]
        i += 1 + takes_value
    return out + given


# ------------------------------------------------------------------ one run, one evaluation
def run_name(row: str, seed: int) -> str:
    return f"{row}__s{seed}"


def start_name(prior: str, seed: int) -> str:
    return f"start_{prior}__s{seed}"


def run_argv(row: str, seed: int, runs_dir: Path, flags: list[str], models: dict[str, str] | None = None,
             learning_rate: str = "") -> list[str]:
    """The trainer command of one row x seed. ``models`` maps a prior ("strong"/"weak") to a checkpoint folder
    that replaces the shipped cold start of that prior (say, your own Qwen-VL SFT checkpoints)."""
    spec = ROWS[row]
    model = (models or {}).get(spec.prior)
    source = ["--model", model] if model else ["--prior", spec.prior]
    lr = ["--learning-rate", learning_rate] if learning_rate and "learning_rate" not in named_flags(spec.flags) else []
    return [sys.executable, str(ROOT / "trainers" / f"{spec.script}.py"), *spec.flags, *source, *lr,
            "--seed", str(seed), "--exp-name", row, "--run-name", run_name(row, seed), "--runs-dir", str(runs_dir),
            "--no-progress", *flags, "--eval-every", "0"]


def eval_argv(out_dir: Path, steps: list[int], seed: int, conditions: list[str], protocol: Protocol,
              run_dir: Path | None = None, args_file: Path | None = None) -> list[str]:
    where = ["--run", str(run_dir)] if run_dir is not None else ["--args", str(args_file)]
    return [sys.executable, str(ROOT / "trainers" / "evaluation.py"), *where,
            "--steps", ",".join(map(str, steps)), "--draw", str(seed), "--conditions", ",".join(conditions),
            "--out-dir", str(out_dir), "--first-episode", str(protocol.eval_first_episode),
            "--episodes", str(protocol.eval_episodes), "--budgets", protocol.budgets,
            "--temperature", str(protocol.temperature),
            "--think-prefix" if protocol.think_prefix else "--no-think-prefix", "--batch", str(protocol.batch)]


def eval_steps(total: int, every: int) -> list[int]:
    steps = list(range(every, total + 1, every)) if every > 0 else []
    return steps + ([total] if total not in steps else [])


def is_untrained(row: str, learning_rate: str = "") -> bool:
    lr = flag_value(list(ROWS[row].flags), "--learning-rate", float(learning_rate) if learning_rate else 1.0)
    return lr == 0


def load_history(run_dir: Path) -> list[dict]:
    """A run's history.json: records with a whole-number step and numbers. One of another shape (damaged, or from
    elsewhere) is said on stderr and read as absent: the sweep resumes the run, which writes it anew from its
    checkpoint, and a report leaves the run out."""
    f = run_dir / "history.json"
    if not f.is_file():
        return kept_records(run_dir.parent.parent)["runs"].get(run_dir.name, {}).get("history", [])
    try:
        history = json.loads(f.read_text(encoding="utf-8"))
        if not is_history(history):
            raise ValueError("not a list of records of a whole-number step and numbers")
    except (OSError, ValueError) as exc:
        print(f"{f}: not a run's history ({str(exc)[:160]}); read as absent", file=sys.stderr)
        return []
    return history


def is_history(history) -> bool:
    return isinstance(history, list) and all(
        isinstance(h, dict) and type(h.get("step")) is int
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in h.values()) for h in history)


def finished(run_dir: Path, total_steps: int) -> bool:
    """A complete final_model of step total_steps (trainers/run_state.py checks it against its manifest):
    a run killed while writing it, or one whose final_model is damaged, is resumed and repairs it."""
    from trainers.run_state import final_model_problem

    return final_model_problem(run_dir, total_steps) is None


def load_eval(out: Path, name: str, step: int) -> dict:
    f = out / "evals" / name / f"step_{step:06d}.json"
    if not f.is_file():
        return kept_records(out)["evals"].get(name, {}).get(str(step), {})
    return (read_record(f) or {}).get("conditions", {})


RECORDS = "records.json"
# the history fields a report reads (train_metrics, the curves); records.json keeps only these
REPORTED = ("step", "train/format_reward_common", "train/format_reward_common_generated", "train/format_reward",
            "train/tool_calls_per_rollout", "train/tool_calls_emitted_per_rollout", "train/parallel_turn_fraction",
            "train/accuracy", "train/groups_without_signal", "train/reward_std_in_group", "train/kl",
            "perf/step_seconds")


def kept_records(out: Path) -> dict:
    """OUT/records.json: what an earlier report was built from (each run's reported history fields and hardware,
    each evaluation's conditions), read where a run's or an evaluation's own files are absent. A report folder
    keeps it instead of the run folders, so a sweep into a folder holding it adds seeds to those runs."""
    path = out / RECORDS
    return _records_at(str(path), path.stat().st_mtime_ns) if path.is_file() else {"runs": {}, "evals": {}}


@functools.lru_cache(maxsize=4)
def _records_at(path: str, mtime_ns: int) -> dict:  # read once per version of the file: a report reads it often
    """The records, or none when the file is of another shape (damaged, or from elsewhere), said on stderr."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        runs, evals = data["runs"], data["evals"]
        if not all(isinstance(r, dict) and is_history(r.get("history")) and isinstance(r.get("hardware"), list)
                   and all(isinstance(d, str) for d in r["hardware"]) for r in runs.values()):
            raise ValueError("a run's history or hardware is of another shape")
        if not all(isinstance(e, dict) and all(isinstance(c, dict) and not any(map(condition_problem, c.values()))
                                               for c in e.values()) for e in evals.values()):
            raise ValueError("an evaluation is of another shape")
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        print(f"{path}: not a report's records ({type(exc).__name__}: {str(exc)[:160]}); read as absent",
              file=sys.stderr)
        return {"runs": {}, "evals": {}}
    return data


def write_records(out: Path, names: list[str], evals: dict[str, list[int]]) -> None:
    """OUT/records.json for the runs `names` and the evaluations `evals` (name -> steps) a report reads."""
    runs = {}
    for name in names:
        history = [{k: h[k] for k in REPORTED if k in h} for h in load_history(out / "runs" / name)]
        runs[name] = {"history": history, "hardware": sorted(run_devices(out, name))}
    from trainers.run_state import atomic_write_json

    kept = {name: {str(step): c for step in steps if (c := load_eval(out, name, step))} for name, steps in evals.items()}
    atomic_write_json(out / RECORDS, {"runs": runs, "evals": kept})


# ------------------------------------------------------------------ many jobs
@dataclass
class Job:
    name: str
    argv: list[str]
    log: Path
    after: str = ""                   # a job that must have succeeded first
    ready_when: Path | None = None    # ... unless this file appears before it ends (a checkpoint mid-run)
    resume_argv: list[str] = field(default_factory=list)  # the command after a first attempt ran out of memory
    gpu: str = ""
    proc: subprocess.Popen | None = None
    started: float = 0.0
    returncode: int | None = None
    tries: int = 0


def mps_running() -> bool:
    """Whether NVIDIA's multi-process service is up (its control pipe exists). Without it the GPU runs one process's
    kernels at a time, and a sweep of tiny-model runs gets a fraction of the steps per minute."""
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")) / "control"
    return pipe.exists()


OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|out of memory", re.I)


def gpu_free_mb(gpu: str) -> float | None:
    """Free memory of GPU `gpu` in MiB as nvidia-smi reports it (None without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", gpu],
                             capture_output=True, text=True, timeout=20)
        return float(out.stdout.strip().splitlines()[0]) if out.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def early(job: Job) -> bool:
    """Whether `job` may start before the job it waits for ends: the file it needs is there."""
    return job.ready_when is not None and job.ready_when.is_file()


def run_all(jobs: list[Job], parallel: int, deadline: float | None, progress: bool = True,
            min_free_mb: float = 0.0, stagger_s: float = 0.0) -> dict[str, int]:
    """Run jobs `parallel` at a time, each after the job it waits for (dropped if that one failed), or as soon as
    its `ready_when` file appears (an evaluation starts on a checkpoint while training goes on). On a GPU a
    job starts only while its GPU has `min_free_mb` free; a job that ran out of GPU memory goes back to the
    queue (its resume command) and one job fewer runs at a time from then on. Past the deadline nothing more
    starts and what runs gets SIGTERM. Returns each job's exit code."""
    from tqdm import tqdm

    todo, running, codes = list(jobs), [], {}
    bar = tqdm(total=len(jobs), desc="sweep jobs", disable=not progress, dynamic_ncols=True)
    last_start = 0.0
    try:
        while todo or running:
            now = time.time()
            if deadline is not None and now >= deadline:
                for j in running:
                    j.proc.send_signal(signal.SIGTERM)
                for j in running:
                    try:
                        j.proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        j.proc.kill()
                print(f"time limit reached: {len(running)} job(s) stopped, {len(todo)} not started; "
                      "rerun the same command to resume them", file=sys.stderr)
                return codes
            for j in list(todo):
                if j.after and j.after in codes and codes[j.after] != 0 and not early(j):
                    todo.remove(j)
                    codes[j.name] = -1
                    bar.update(1)
                    bar.write(f"{j.name} not started: {j.after} failed")
            ready = [j for j in todo if not j.after or codes.get(j.after) == 0 or early(j)]
            if ready and len(running) < parallel and now - last_start >= stagger_s:
                j = ready[0]
                free = gpu_free_mb(j.gpu) if (j.gpu and min_free_mb) else None
                if free is None or free >= min_free_mb or not running:
                    todo.remove(j)
                    j.log.parent.mkdir(parents=True, exist_ok=True)
                    j.started, last_start = now, now
                    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": j.gpu} if j.gpu else {}),
                           "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF",
                                                                     "expandable_segments:True")}
                    argv = j.resume_argv if (j.tries and j.resume_argv) else j.argv
                    with open(j.log, "ab") as log:
                        j.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
                    j.tries += 1
                    running.append(j)
                    continue
            for j in list(running):
                if j.proc.poll() is None:
                    continue
                running.remove(j)
                tail = j.log.read_text(errors="replace").strip().splitlines()[-30:]
                if j.proc.returncode != 0 and any(OOM.search(line) for line in tail) and j.tries < 4:
                    parallel = max(1, parallel - 1)
                    todo.insert(0, j)
                    bar.write(f"{j.name} ran out of GPU memory; again from its checkpoint, {parallel} job(s) at a time")
                    continue
                codes[j.name] = j.proc.returncode
                bar.update(1)
                if j.proc.returncode != 0:
                    bar.write(f"{j.name} failed (exit {j.proc.returncode}); log {j.log}: " + " | ".join(tail[-3:]))
            time.sleep(0.5)
    finally:
        bar.close()
    return codes


# ------------------------------------------------------------------ report
def train_metrics(history: list[dict], upto: int | None = None) -> dict:
    """f_tau (both readings), kappa and the diagnostics, each the mean over the last quarter of the training
    steps up to step `upto` (all of them by default)."""
    steps = [h for h in history if h.get("step", 0) > 0 and "train/format_reward_common" in h
             and (upto is None or h["step"] <= upto)]
    tail = steps[-max(1, len(steps) // 4):] if steps else []

    def mean(key):
        vals = [r[key] for r in tail if key in r]
        return sum(vals) / len(vals) if vals else float("nan")

    return {"steps": max((h["step"] for h in steps), default=0),
            "f_tau": mean("train/format_reward_common"),
            "f_tau_generated": mean("train/format_reward_common_generated"),
            "f_own": mean("train/format_reward"),
            "kappa": mean("train/tool_calls_per_rollout"),
            "kappa_emitted": mean("train/tool_calls_emitted_per_rollout"),
            "parallel_turn_fraction": mean("train/parallel_turn_fraction"),
            "train_accuracy": mean("train/accuracy"),
            "groups_without_signal": mean("train/groups_without_signal"),
            "reward_std_in_group": mean("train/reward_std_in_group"),
            "kl": mean("train/kl"),
            "seconds": sum(h.get("perf/step_seconds", 0.0) for h in steps)}


def eval_metrics(final: dict, start: dict) -> dict:
    """A checkpoint's protocol numbers, and their change from the same seed's evaluation of the starting model."""
    nan = float("nan")

    def get(d, cond, key):
        return d.get(cond, {}).get(key, nan)

    out = {"eval_accuracy": get(final, "tools", "accuracy"),
           "eval_accuracy_no_subagent": get(final, "no_tools", "accuracy"),
           "eval_accuracy_k4": get(final, "tools", "accuracy_k4"),
           "eval_accuracy_k64": get(final, "tools", "accuracy_k64"),
           "eval_format": get(final, "tools", "format_common"),
           "eval_kappa": get(final, "tools", "kappa"),
           "eval_accuracy_sequential_dispatch": get(final, "sequential", "accuracy"),
           "eval_kappa_sequential_dispatch": get(final, "sequential", "kappa")}
    out["eval_accuracy_delta"] = out["eval_accuracy"] - get(start, "tools", "accuracy")
    out["eval_accuracy_no_subagent_delta"] = out["eval_accuracy_no_subagent"] - get(start, "no_tools", "accuracy")
    out["eval_accuracy_start"] = get(start, "tools", "accuracy")
    calls = final.get("tools", {}).get("calls")
    out["eval_no_call_share"] = sum(c == 0 for c in calls) / len(calls) if calls else nan
    return out


def transcript(final: dict, limit: int = 400) -> dict | None:
    """One episode the agent played under the protocol (with the sub-agent): the first it answered without a
    call, else the first kept; each turn cut to `limit` characters."""
    kept = final.get("tools", {}).get("transcripts") or []
    if not kept:
        return None
    t = next((t for t in kept if t["calls"] == 0), kept[0])
    return {**t, "turns": [x if len(x) <= limit else x[:limit] + " [...]" for x in t["turns"]]}


METRICS = ("f_tau", "f_tau_generated", "f_own", "kappa", "kappa_emitted", "parallel_turn_fraction", "train_accuracy",
           "groups_without_signal", "reward_std_in_group", "kl", "eval_accuracy", "eval_accuracy_no_subagent",
           "eval_accuracy_delta", "eval_accuracy_no_subagent_delta", "eval_accuracy_start", "eval_accuracy_k4",
           "eval_accuracy_k64", "eval_format", "eval_kappa", "eval_accuracy_sequential_dispatch",
           "eval_kappa_sequential_dispatch", "eval_no_call_share", "steps", "seconds")


def checksum(folder: str | os.PathLike) -> str:
    """sha256 of a model folder's weights (model.safetensors, else every *.safetensors in name order)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest() if files else ""


def build_report(out: Path, rows: list[str], seeds: list[int], protocol: Protocol, total_steps: int,
                 every: int, models: dict[str, str] | None = None, learning_rate: str = "", preset: str = "") -> dict:
    """results.json, the markdown tables, curves.png and REPRODUCTION.md from OUT/runs and OUT/evals."""
    steps_evaluated = eval_steps(total_steps, every)
    results: dict = {}
    checkpoints = []  # (f_tau up to the checkpoint, eval accuracy there) over every trained run's checkpoints
    for row in rows:
        spec = ROWS[row]
        untrained = is_untrained(row, learning_rate)
        per_seed, curves = {}, {}
        for seed in seeds:
            hist = load_history(out / "runs" / run_name(row, seed))
            start = load_eval(out, start_name(spec.prior, seed), 0)
            if not hist:
                continue
            final = start if untrained else load_eval(out, run_name(row, seed), total_steps)
            per_seed[seed] = {**train_metrics(hist), **eval_metrics(final, start)}
            evals = {0: start.get("tools", {}).get("accuracy", float("nan"))}
            for step in steps_evaluated:
                acc = (start if untrained else load_eval(out, run_name(row, seed), step)).get("tools", {})
                evals[step] = acc.get("accuracy", float("nan"))
                if not untrained and not math.isnan(evals[step]):
                    checkpoints.append((train_metrics(hist, upto=step)["f_tau"], evals[step]))
            curves[str(seed)] = {"train": [{k: h[k] for k in ("step", "train/format_reward_common",
                                                                 "train/format_reward_common_generated",
                                                                 "train/tool_calls_per_rollout") if k in h}
                                           for h in hist if h.get("step", 0) > 0],
                                 "eval_accuracy": {str(k): v for k, v in evals.items()}}
        if not per_seed:
            continue
        entry = {"about": spec.about, "script": spec.script, "flags": list(spec.flags), "prior": spec.prior,
                 "baseline": spec.baseline, "seeds": sorted(per_seed)}
        for m in METRICS:
            entry[m] = spread([s[m] for s in per_seed.values()])
        entry["per_seed"] = {str(k): v for k, v in per_seed.items()}
        entry["curves"] = curves
        first = min(per_seed)
        entry["transcript"] = transcript(load_eval(out, start_name(spec.prior, first), 0) if untrained
                                         else load_eval(out, run_name(row, first), total_steps))
        results[row] = entry
    for row, entry in results.items():  # the change from the matched learning-rate-0 baseline, seed by seed
        base = results.get(entry["baseline"])
        for m in ("f_tau", "kappa"):
            entry[f"{m}_vs_baseline"] = (verdicts.compare(_by_seed(entry, m), _by_seed(base, m)) if base else
                                         {"verdict": verdicts.NOT_RUN})
    report = {"protocol": {"preset": preset or "custom", "rows": rows,
                           **protocol_record(protocol, seeds, total_steps, steps_evaluated, models, learning_rate),
                           "hardware": hardware(out, list(results), seeds)},
              **results}
    report["claims"] = claims(results, out, seeds, checkpoints)
    out.mkdir(parents=True, exist_ok=True)
    write_records(out, [run_name(row, seed) for row in results for seed in results[row]["seeds"]],
                  {**{start_name(prior, seed): [0] for prior in {ROWS[r].prior for r in results} for seed in seeds},
                   **{run_name(row, seed): steps_evaluated for row in results for seed in results[row]["seeds"]}})
    (out / "results.json").write_text(json.dumps(report, indent=1))
    (out / "results.md").write_text(markdown_table(results))
    (out / "claims.md").write_text(claims_markdown(report["claims"]))
    (out / "side_by_side.md").write_text(side_by_side_markdown(results))
    if results:
        plot_curves(results, out / "curves.png")
    (out / "REPRODUCTION.md").write_text(render_reproduction(report))
    return report


def protocol_record(protocol: Protocol, seeds, total_steps, steps_evaluated, models, learning_rate) -> dict:
    from agents.lmm.default import shipped_checkpoint

    builds = {}
    for prior in ("strong", "weak"):
        path = (models or {}).get(prior) or str(shipped_checkpoint(prior) or "")
        inside = path and Path(path).resolve().is_relative_to(ROOT)
        builds[prior] = {"path": os.path.relpath(Path(path).resolve(), ROOT) if inside else path,
                         "sha256": checksum(path) if path else ""}
    return {**dataclasses.asdict(protocol), "sequential_turns": protocol.sequential_turns(),
            "models": builds, "seeds": list(seeds), "steps": total_steps, "eval_steps": [0, *steps_evaluated],
            "learning_rate": learning_rate or "the trainers' default",
            "decision_rule": f"two-sided t-test over seeds at alpha {verdicts.ALPHA} (paired over shared seeds, "
                             f"else Welch); mde at power {verdicts.POWER}",
            "date": datetime.date.today().isoformat()}


def hardware(out: Path, rows: list[str], seeds: list[int]) -> dict[str, list[str]]:
    """Each accelerator the trained runs ran on (their hardware.json) -> the rows that ran on it; runs that
    recorded none fall under "not recorded"."""
    where: dict[str, list[str]] = {}
    for row in rows:
        for seed in seeds:
            for name in sorted(run_devices(out, run_name(row, seed)) or {"not recorded"}):
                if row not in where.setdefault(name, []):
                    where[name].append(row)
    return where


def run_devices(out: Path, name: str) -> set[str]:
    """The accelerators a run's hardware.json (else OUT/records.json) names; empty when it recorded none."""
    path = out / "runs" / name / "hardware.json"
    if not path.is_file():
        return set(kept_records(out)["runs"].get(name, {}).get("hardware", []))
    try:
        return {s["device"] for s in json.loads(path.read_text())}
    except (OSError, ValueError, TypeError, KeyError):
        return set()


def _by_seed(entry: dict | None, metric: str) -> dict:
    if not entry:
        return {}
    return {int(k): v[metric] for k, v in entry["per_seed"].items()}


# ------------------------------------------------------------------ the paper's claims, checked
# (claim, metric, row a, row b, direction): is a's metric above (1) / below (-1) b's, paired over seeds
CLAIMS = [
    ("Vanilla GRPO lowers tool calls below the cold start's", "kappa", "grpo", "cold_start_vanilla", -1),
    ("Vanilla GRPO scored as released lowers tool calls below the cold start's", "kappa", "grpo_released",
     "cold_start_vanilla", -1),
    ("Vanilla GRPO's format falls below the cold start's", "f_tau", "grpo", "cold_start_vanilla", -1),
    ("Vanilla GRPO scored as released: its own-token format falls below the cold start's", "f_tau_generated",
     "grpo_released", "cold_start_vanilla", -1),
    ("PARA-GRPO's format is above vanilla GRPO's", "f_tau", "full", "grpo", 1),
    ("Exploration Anchoring alone lifts the format above vanilla GRPO's", "f_tau", "anchoring", "grpo", 1),
    ("nFrames Gating alone keeps more tool calls than vanilla GRPO", "kappa", "gating", "grpo", 1),
    ("PARA-GRPO beats vanilla GRPO (accuracy with the sub-agent)", "eval_accuracy", "full", "grpo", 1),
    ("PARA-GRPO beats Exploration Anchoring alone (accuracy with the sub-agent)", "eval_accuracy", "full",
     "anchoring", 1),
    ("PARA-GRPO beats nFrames Gating alone (accuracy with the sub-agent)", "eval_accuracy", "full", "gating", 1),
    ("Removing R_tool lowers tool calls", "kappa", "no_tool_reward", "full", -1),
    ("Removing the penalty gamma lowers accuracy with the sub-agent", "eval_accuracy", "no_gamma", "full", -1),
    ("The weak prior calls tools less than the strong prior under GRPO", "kappa", "weak_grpo", "grpo", -1),
    ("The weak prior's format under sampling is above the strong prior's under GRPO", "f_tau", "weak_grpo", "grpo", 1),
]


def claims(results: dict, out: Path, seeds: list[int], checkpoints: list[tuple[float, float]]) -> list[dict]:
    out_claims = []
    for claim, metric, a, b, direction in CLAIMS:
        if a in results and b in results:
            c = verdicts.compare(_by_seed(results[a], metric), _by_seed(results[b], metric), direction)
        else:
            c = {"verdict": verdicts.NOT_RUN, "effect": float("nan"), "p": float("nan"), "mde": float("nan"),
                 "n": 0, "test": "none", "note": f"row {a if a not in results else b} not in this sweep"}
        out_claims.append({"claim": claim, "metric": metric, "rows": [a, b], "direction": direction, **c})
    # the same checkpoint under both dispatches
    if "full" in results:
        full = results["full"]
        c = verdicts.compare(_by_seed(full, "eval_accuracy"), _by_seed(full, "eval_accuracy_sequential_dispatch"), 1)
    else:
        c = {"verdict": verdicts.NOT_RUN, "effect": float("nan"), "p": float("nan"), "mde": float("nan"), "n": 0,
             "test": "none", "note": "row full not in this sweep"}
    out_claims.append({"claim": "Parallel dispatch beats sequential dispatch on the same PARA-GRPO checkpoint",
                       "metric": "eval_accuracy (parallel - sequential dispatch)", "rows": ["full", "full"],
                       "direction": 1, **c})
    # the strong prior's format under sampling, as the paper means it: the cold start greedy vs T = 0.7
    gaps = {}
    greedy = load_eval(out, start_name("strong", seeds[0]), 0).get("greedy", {}).get("format_common") if seeds else None
    for seed in seeds:
        sampled = load_eval(out, start_name("strong", seed), 0).get("t0.7", {}).get("format_common")
        if greedy is not None and sampled is not None:
            gaps[seed] = greedy - sampled
    c = verdicts.one_sample(gaps, 1) if gaps else {"verdict": verdicts.NOT_RUN, "effect": float("nan"),
                                                    "p": float("nan"), "mde": float("nan"), "n": 0, "test": "none"}
    out_claims.append({"claim": "The strong cold start's format breaks under sampling (greedy minus T = 0.7)",
                       "metric": "format_common at T = 0 minus at T = 0.7", "rows": ["cold_start"],
                       "direction": 1, **c})
    c = verdicts.correlation([x for x, _ in checkpoints], [y for _, y in checkpoints], 1)
    out_claims.append({"claim": "Training format correlates with with-tool accuracy across checkpoints",
                       "metric": "Pearson r of f_tau (last quarter of steps up to the checkpoint) and eval_accuracy",
                       "rows": ["every trained row"], "direction": 1, **c})
    adjusted = verdicts.holm([c["p"] for c in out_claims])
    for c, p in zip(out_claims, adjusted):
        c["p_holm"] = p
        c["reason"] = reason(c, results)
    return out_claims


def reason(c: dict, results: dict) -> str:
    """What the numbers say about a claim that is not shown: the effect against the smallest one this many seeds
    could detect, and for training metrics how many groups had any reward signal to learn from."""
    if c["verdict"] in (verdicts.SHOWN, verdicts.NOT_RUN):
        return c.get("note", "")
    parts = []
    if c["verdict"] == verdicts.CONTRADICTED:
        parts.append(f"the difference goes the other way ({c['effect']:+.3f})")
    elif "no spread" in c.get("test", ""):
        parts.append(f"every seed moved by exactly {c['effect']:+.3f}: with n = {c['n']} an exact permutation test "
                     f"cannot go below p = {2 / 2 ** c['n']:.2f} (the first rule of this report, fixed before the runs, "
                     f"read no spread as p = 0: {'shown' if c['effect'] * c['direction'] > 0 else 'contradicted'})")
    elif not math.isnan(c.get("mde", float("nan"))):
        parts.append(f"an effect of {abs(c['effect']):.3f} against a minimum detectable {c['mde']:.3f} at n = {c['n']}")
    elif c.get("note"):
        parts.append(c["note"])
    rows = [r for r in dict.fromkeys(c["rows"]) if r in results]
    if c["metric"] in ("f_tau", "f_tau_generated", "kappa") and rows:
        parts.append("groups without reward signal " + ", ".join(
            f"{r} {results[r]['groups_without_signal']['mean']:.2f}" for r in rows))
    return "; ".join(parts)


def _num(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x != 0 and abs(x) < 10 ** -digits:
        return f"{x:.1e}"
    return f"{x:.{digits}f}"


def claims_markdown(claims_list: list[dict]) -> str:
    lines = ["| claim of the paper | verdict | effect (a - b) | p | p (Holm) | mde | n | test | what the numbers say |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in claims_list:
        lines.append(f"| {c['claim']} | **{c['verdict']}** | {_num(c.get('effect'))} | {_num(c.get('p'))} | "
                     f"{_num(c.get('p_holm'))} | {_num(c.get('mde'))} | {c.get('n', 0)} | {c.get('test', '')} | "
                     f"{c.get('reason', '')} |")
    return "\n".join(lines) + "\n"


def _fmt(s: dict, digits: int = 3, scale: float = 1.0, signed: bool = False) -> str:
    if not s or s.get("n", 0) == 0 or math.isnan(s["mean"]):
        return "-"
    mean, std = scale * s["mean"], scale * s["std"]
    sign = "+" if signed else ""
    return f"{mean:{sign}.{digits}f} ± {std:.{digits}f}" if s["n"] > 1 else f"{mean:{sign}.{digits}f}"


def markdown_table(results: dict) -> str:
    lines = ["| row | setting | seeds | f_tau | f_tau (own tokens) | kappa | eval acc w/ sub | change from step 0 | "
             "K = 4 | K = 64 | eval acc w/o sub | eval calls | steps | min/run |", "|---" * 14 + "|"]
    for row, r in results.items():
        minutes = r["seconds"]["mean"] / 60 if r["seconds"]["n"] else float("nan")
        lines.append(f"| {row} | {r['about']} | {len(r['seeds'])} | {_fmt(r['f_tau'])} | "
                     f"{_fmt(r['f_tau_generated'])} | {_fmt(r['kappa'], 2)} | {_fmt(r['eval_accuracy'])} | "
                     f"{_fmt(r['eval_accuracy_delta'], signed=True)} | "
                     f"{_fmt(r['eval_accuracy_k4'])} | {_fmt(r['eval_accuracy_k64'])} | "
                     f"{_fmt(r['eval_accuracy_no_subagent'])} | {_fmt(r['eval_kappa'], 2)} | "
                     f"{r['steps']['mean']:.0f} | {minutes:.1f} |")
    if "full" in results and results["full"]["eval_accuracy_sequential_dispatch"]["n"]:
        r = results["full"]
        lines += ["", "The full checkpoints under both dispatches (executed calls per episode in brackets):", "",
                  "| dispatch | eval acc w/ sub | calls |", "|---|---|---|",
                  f"| parallel | {_fmt(r['eval_accuracy'])} | {_fmt(r['eval_kappa'], 2)} |",
                  f"| sequential | {_fmt(r['eval_accuracy_sequential_dispatch'])} | "
                  f"{_fmt(r['eval_kappa_sequential_dispatch'], 2)} |"]
    lines += ["", "Why a row may not learn (means over the last quarter of steps):", "",
              "| row | groups without reward signal | reward std in a group | KL to the reference | "
              "f_tau change vs its baseline (p) | kappa change vs its baseline (p) |", "|---|---|---|---|---|---|"]
    for row, r in results.items():
        def change(key):
            c = r.get(key, {})
            return f"{_num(c.get('effect'))} ({_num(c.get('p'))})" if c.get("verdict", "not run") != "not run" else "-"
        lines.append(f"| {row} | {_fmt(r['groups_without_signal'], 2)} | {_fmt(r['reward_std_in_group'], 3)} | "
                     f"{_fmt(r['kl'], 4)} | {change('f_tau_vs_baseline')} | {change('kappa_vs_baseline')} |")
    return "\n".join(lines) + "\n"


def side_by_side_markdown(results: dict) -> str:
    """Our rows beside the paper's ablation: f_tau, kappa and accuracy without / with the sub-agent. The paper's
    accuracy is VideoMME (%, an 8B model on real videos); ours is held-out synthetic episodes (%, a tiny model),
    so compare directions between rows, not levels."""
    def paper(row, key, digits):
        v = PAPER_ABLATION.get(row, {}).get(key)
        return "-" if v is None else f"{v:.{digits}f}"

    lines = ["| row | setting | seeds | f_tau paper | f_tau ours | kappa paper | kappa ours | acc w/o sub paper | "
             "acc w/o sub ours | acc w/ sub paper | acc w/ sub ours |", "|---" * 11 + "|"]
    for row, r in results.items():
        lines.append(f"| {row} | {r['about']} | {len(r['seeds'])} | {paper(row, 'f_tau', 2)} | {_fmt(r['f_tau'], 2)} | "
                     f"{paper(row, 'kappa', 2)} | {_fmt(r['kappa'], 2)} | {paper(row, 'acc_no_sub', 1)} | "
                     f"{_fmt(r['eval_accuracy_no_subagent'], 1, 100)} | {paper(row, 'acc_sub', 1)} | "
                     f"{_fmt(r['eval_accuracy'], 1, 100)} |")
    if "full" in results:
        r = results["full"]
        lines.append(f"| full, sequential dispatch | the same checkpoints | {len(r['seeds'])} | - | - | - | - | 61.4 | "
                     "- | "
                     f"{paper('full', 'acc_sub_sequential', 1)} | "
                     f"{_fmt(r['eval_accuracy_sequential_dispatch'], 1, 100)} |")
    return "\n".join(lines) + "\n"


def rolling_mean(y, window: int):
    """Trailing mean over up to `window` values (fewer at the start); NaNs are skipped."""
    import numpy as np

    out = np.full(len(y), np.nan)
    for i in range(len(y)):
        part = y[max(0, i - window + 1):i + 1]
        if not np.isnan(part).all():
            out[i] = np.nanmean(part)
    return out


def plot_curves(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = [("train/format_reward_common", "f_tau: common format at T = 0.7 (whole trajectory)"),
            ("train/format_reward_common_generated", "f_tau on the agent's own tokens (released reading)"),
            ("train/tool_calls_per_rollout", "kappa: executed tool calls per rollout"),
            ("eval", "eval accuracy with the sub-agent (one protocol)")]
    longest = max((len(c["train"]) for r in results.values() for c in r["curves"].values()), default=0)
    window = max(1, longest // 20)
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.6))
    for row, r in results.items():
        color = None
        for ax, (key, title) in zip(axes, keys):
            if key == "eval":
                series = [{int(k): v for k, v in c["eval_accuracy"].items()} for c in r["curves"].values()]
            else:
                series = [{h["step"]: h[key] for h in c["train"] if key in h} for c in r["curves"].values()]
            steps = sorted(set().union(*series)) if series else []
            if not steps:
                continue
            ys = np.array([[s.get(x, np.nan) for x in steps] for s in series], dtype=float)
            if np.isnan(ys).all():
                continue
            if key != "eval" and window > 1:  # per-step values follow the step's prompts: show the trend
                ys = np.stack([rolling_mean(y, window) for y in ys])
            with warnings.catch_warnings():  # a step no seed reached is a gap in the line, not a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, low, high = np.nanmean(ys, 0), np.nanmin(ys, 0), np.nanmax(ys, 0)
            line, = ax.plot(steps, mean, label=row, color=color, marker="o" if key == "eval" else None, ms=3)
            color = line.get_color()
            if len(series) > 1:
                ax.fill_between(steps, low, high, color=color, alpha=0.15)
            ax.set(title=title + (f"\nmean of the last {window} steps" if key != "eval" and window > 1 else ""),
                   xlabel="step")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render_reproduction(report: dict, figures: str = "") -> str:
    """The whole report as one page, from results.json's content alone; `figures` is the folder of curves.png
    as seen from where the page lives ("" beside it)."""
    p = report["protocol"]
    rows = {k: v for k, v in report.items() if k not in ("protocol", "claims")}
    builds = ", ".join(f"{prior} `{b['path']}` (sha256 {b['sha256'][:12]})" for prior, b in p["models"].items()
                       if b.get("path"))
    shown = [c for c in report["claims"] if c["verdict"] == verdicts.SHOWN]
    against = [c for c in report["claims"] if c["verdict"] == verdicts.CONTRADICTED]
    nd = [c for c in report["claims"] if c["verdict"] == verdicts.NOT_DETECTABLE]
    missing = [c for c in report["claims"] if c["verdict"] == verdicts.NOT_RUN]
    lines = [
        "# Reproducing the Tool Prior Paradox", "",
        f"Preset: `{p.get('preset', 'custom')}`. Models: {builds}. Report date: {p['date']}. "
        f"Seeds: {', '.join(map(str, p['seeds']))}; "
        f"{p['steps']} training steps per run; evaluation at steps {', '.join(map(str, p['eval_steps']))}."
        + ("".join(f" Trained on {name}: {', '.join(rs)}." for name, rs in p["hardware"].items())
           if p.get("hardware") else ""), "",
        "This page is rendered from `results.json` beside it by `python trainers/sweep.py --report-only` "
        "(`--render-only` rewrites it from the JSON alone).", "",
        "## Protocol", "",
        f"- Every checkpoint of every row, step 0 included, plays the same {p['eval_episodes']} validation "
        f"episodes from episode {p['eval_first_episode']} (the shipped models were selected on episodes 0-119): "
        f"K drawn per episode from {{{p['budgets'].replace(',', ', ')}}} (the same draw for every row), "
        f"{'a' if p['think_prefix'] else 'no'} think prefix, parallel dispatch of up to {p['max_calls_per_turn']} "
        f"calls in up to {p['max_turns']} turns, T = {p['temperature']}, with the sub-agent and with no tool "
        f"advertised. The full checkpoints also play under sequential dispatch with {p['sequential_turns']} turns.",
        "- A seed's evaluations sample with that seed's generation seeds: the spread over seeds holds evaluation "
        "noise. A seed draws the same training prompts in every row, so rows are compared seed by seed.",
        "- f_tau: the released PARA-GRPO format on the whole trajectory at T = 0.7, whatever the row trains on; "
        "f_tau (own tokens): the same format on the agent's own tokens, as the released code reads a response; "
        "kappa: executed sub-agent calls per rollout. Each is the mean over the last quarter of training steps.",
        "- Rows with learning rate 0 (cold_start, cold_start_vanilla) are the matched baselines: the same "
        "rollouts as their trained rows, no update. Their evaluation is the starting model's.",
        f"- Decision rule, fixed before the runs: {p['decision_rule']}. **shown**: p < alpha the claimed way; "
        "**contradicted**: p < alpha the other way; **not detectable**: inside the noise. p (Holm) is the "
        "family-wise adjusted p beside it. One change after the first results: where the seeds agree exactly "
        "(no spread, no t statistic) an exact permutation test gives p; the first rule read that as p = 0, and "
        "each claim it touches says what that rule gave.", "",
        f"## Verdicts: {len(shown)} shown, {len(against)} contradicted, {len(nd)} not detectable, "
        f"{len(missing)} not run", "",
        claims_markdown(report["claims"]),
        "## The rows", "",
        "Means ± std over seeds; accuracies are shares of episodes answered right.", "",
        markdown_table(rows),
        "## Beside the paper", "",
        "The paper's accuracy is VideoMME in % for an 8B model on real videos; ours is the protocol's held-out "
        "synthetic episodes in % for a tiny model: compare directions between rows, not levels.", "",
        side_by_side_markdown(rows),
        f"![f_tau both ways, kappa and eval accuracy against step]({figures}curves.png)", "",
        *transcripts_markdown(rows)]
    return "\n".join(lines)


def transcripts_markdown(rows: dict) -> list[str]:
    """What each row's last checkpoint writes under the protocol: the share of episodes it answers without a
    call, and one episode (the first without a call, if any) in the agent's own words."""
    kept = {name: r for name, r in rows.items() if r.get("transcript")}
    if not kept:
        return []
    fence = "`" * 3
    lines = ["## What the agents write", "",
             "Each row's last checkpoint (the starting model for rows with learning rate 0), seed "
             "with the lowest number, with the sub-agent: the share of protocol episodes answered without a call "
             "(mean over seeds), and the first kept episode it answered without one (else the first kept).", ""]
    for name, r in kept.items():
        t = r["transcript"]
        share = r.get("eval_no_call_share", {}).get("mean", float("nan"))
        lines += [f"**{name}**: {_num(share, 2)} of episodes without a call. Episode {t['episode']}, K = "
                  f"{t['frame_budget']}, {t['calls']} call(s), {'right' if t['correct'] else 'wrong'}:", "", fence]
        lines += [f"[turn {i}] " + turn.replace(fence, "'" * 3) for i, turn in enumerate(t["turns"], 1)]
        lines += [fence, ""]
    return lines


# ------------------------------------------------------------------ CLI
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Unknown flags are passed to every trainer run (they replace the preset's "
                                       "flags of the same name; a row's defining flags cannot be overridden).")
    p.add_argument("--preset", choices=list(PRESETS), default=None,
                   help="a named experiment, trainers/presets/NAME.yaml; paper: every row, 3 seeds, 40 steps of 4 "
                        "prompts x G = 8, 256 evaluation episodes (GPU); paper-long: the core rows for 200 steps, "
                        "evaluated every 50; cpu: 5 rows, 1 seed, 12 steps of 2 prompts (2-core CPU)")
    p.add_argument("--config", default="", help="a YAML or JSON file shaped like a preset (any option of this "
                                                "command, and a `trainer` mapping of trainer flags); it replaces "
                                                "the preset's values, and the command line replaces its")
    p.add_argument("--rows", default=None, help=f"comma list from {', '.join(ROWS)} (default: the preset's, "
                                                f"else {','.join(DEFAULT_ROWS)})")
    p.add_argument("--seeds", default=None, help="comma list of seeds (default: the preset's, else 1)")
    p.add_argument("--out", default="runs/sweep", help="report folder; runs go to OUT/runs/<row>__s<seed>, "
                                                       "evaluations to OUT/evals")
    p.add_argument("--jobs", type=int, default=1, help="processes at a time, trainers and evaluations together "
                                                       "(on GPUs, spread over them)")
    p.add_argument("--time-limit-s", type=float, default=None,
                   help="stop launching jobs and SIGTERM running ones after this many seconds; rerun to resume")
    p.add_argument("--learning-rate", default="", help="learning rate of every row that does not define its own "
                                                       "(the trainers' default when empty)")
    p.add_argument("--eval-every", type=int, default=None, help="evaluate checkpoints every N steps and at the end "
                                                                "(default: the preset's, else 20)")
    p.add_argument("--eval-episodes", type=int, default=None, help="protocol episodes (default: the preset's, else 64)")
    p.add_argument("--eval-first-episode", type=int, default=None,
                   help="first protocol episode (default: the preset's, else 1000)")
    p.add_argument("--eval-batch", type=int, default=Protocol.batch, help="protocol episodes played together")
    p.add_argument("--gpu-min-free-mb", type=float, default=6000.0,
                   help="on GPUs, start a job only while its GPU has this much memory free")
    p.add_argument("--strong-model", default="", help="checkpoint folder for the strong-prior rows (default: the "
                                                      "shipped tiny strong cold start); e.g. a Qwen2.5-VL SFT folder")
    p.add_argument("--weak-model", default="", help="checkpoint folder for the weak-prior rows (weak_grpo, weak_full)")
    p.add_argument("--report-only", action=argparse.BooleanOptionalAction, default=False,
                   help="only rebuild the report from OUT/runs and OUT/evals")
    p.add_argument("--render-only", action=argparse.BooleanOptionalAction, default=False,
                   help="only rewrite OUT/REPRODUCTION.md from OUT/results.json")
    p.add_argument("--render-to", default="", help="also write the page here, its links relative to it (the "
                                                   "repository's REPRODUCTION.md is the paper preset's)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="a progress bar")
    a, _ = p.parse_known_args(argv)
    try:
        preset = {**PRESETS.get(a.preset, {}), **(load_sweep_config(a.config) if a.config else {})}
    except ValueError as exc:
        p.error(str(exc))
    if a.config and a.preset:
        preset["flags"] = merge_flags(PRESETS[a.preset]["flags"], preset["flags"])
    options = {act.dest for act in p._actions} - {"help", "preset", "config"}
    unknown = sorted(set(preset) - options - {"flags"})
    if unknown:
        p.error(f"--config {a.config}: unknown keys {', '.join(unknown)} (the options of this command, and `trainer`)")
    p.set_defaults(**{k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in preset.items() if k != "flags"})
    a, extra = p.parse_known_args(argv)
    out = Path(a.out)
    if a.render_only:
        report = json.loads((out / "results.json").read_text())
        (out / "REPRODUCTION.md").write_text(render_reproduction(report))
        render_to(report, out, a.render_to)
        return report
    rows = [r for r in (a.rows or ",".join(DEFAULT_ROWS)).split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; known: {list(ROWS)}")
    try:
        seeds = [int(s) for s in str(a.seeds or "1").split(",") if s]
    except ValueError:
        p.error(f"--seeds must be a comma list of integers, got {a.seeds!r}")
    if a.jobs < 1:
        p.error("--jobs must be >= 1")
    owned = sorted({f.split("=")[0] for f in extra} & {"--runs-dir", "--run-name", "--seed", "--exp-name", "--resume",
                                                       "--model", "--prior"})
    if owned:
        p.error(f"the sweep sets {', '.join(owned)} for every run itself (use --out, --seeds, --strong-model and "
                f"--weak-model)")
    flags = merge_flags(list(preset.get("flags", [])), extra)
    problems = conflicts(rows, flags)
    if problems:
        p.error("conflicting flags:\n  " + "\n  ".join(problems) + "\ndrop the flag or the row (--learning-rate given "
                "to the sweep goes to every row that does not define its own)")
    for flag, path in (("--strong-model", a.strong_model), ("--weak-model", a.weak_model)):
        if path and not Path(path).is_dir():
            p.error(f"{flag} {path}: not a folder")
    if a.learning_rate:
        try:
            float(a.learning_rate)
        except ValueError:
            p.error(f"--learning-rate must be a number, got {a.learning_rate!r}")
    models = {"strong": a.strong_model, "weak": a.weak_model}
    every = a.eval_every if a.eval_every is not None else 20
    protocol = Protocol(eval_first_episode=a.eval_first_episode if a.eval_first_episode is not None else 1000,
                        eval_episodes=a.eval_episodes if a.eval_episodes is not None else 64, batch=a.eval_batch)
    available = flag_value(flags, "--dataset-size", 6000)
    if not any(flag_name(f) in ("source", "eval_source") for f in flags) and \
            protocol.eval_first_episode + protocol.eval_episodes > available:
        p.error(f"--eval-first-episode {protocol.eval_first_episode} + --eval-episodes {protocol.eval_episodes} is "
                f"more than the {available} validation episodes (--dataset-size)")
    total = flag_value(flags, "--total-steps", 40)
    ckpt_every = flag_value(flags, "--checkpoint-every", 10)
    steps = eval_steps(total, every)
    if any(s % ckpt_every and s != total for s in steps) if ckpt_every else True:
        p.error(f"--checkpoint-every {ckpt_every} must divide --eval-every {every}: the evaluation reads the "
                "checkpoints of those steps")
    if not a.report_only:
        jobs = plan_jobs(out, rows, seeds, flags, models, a.learning_rate, protocol, total, steps)
        print(f"sweep: {len(rows)} rows x {len(seeds)} seeds; {len(jobs)} jobs to run ({a.jobs} at a time); "
              f"logs in {out / 'logs'}", flush=True)
        if a.jobs > 1 and any(j.gpu for j in jobs) and not mps_running():
            print("sweep: NVIDIA MPS is not running, so the GPU runs one job's kernels at a time; "
                  "`nvidia-cuda-mps-control -d` before the sweep lets them run together (docs/scaling.md)", flush=True)
        deadline = time.time() + a.time_limit_s if a.time_limit_s else None
        run_all(jobs, a.jobs, deadline, progress=a.progress, min_free_mb=a.gpu_min_free_mb,
                stagger_s=2.0 if any(j.gpu for j in jobs) else 0.0)
    report = build_report(out, rows, seeds, protocol, total, every, models, a.learning_rate,
                          a.preset or (Path(a.config).stem if a.config else ""))
    render_to(report, out, a.render_to)
    print((out / "claims.md").read_text() if len(report) > 2 else "no finished steps to report yet")
    return report


README_BEGIN, README_END = "<!-- reproduction verdicts: rendered by trainers/sweep.py -->", "<!-- end of verdicts -->"


def readme_block(report: dict, page: str = "REPRODUCTION.md") -> str:
    """The verdicts as the README shows them: one line per claim, from the report alone."""
    p = report["protocol"]
    lines = [README_BEGIN,
             f"Preset `{p.get('preset', 'custom')}`, seeds {', '.join(map(str, p['seeds']))}, {p['steps']} steps a run, "
             f"{p['eval_episodes']} protocol episodes, {p['date']} ([{page}]({page}) has every number):", ""]
    for c in report["claims"]:
        p_text = "" if math.isnan(c.get("p", float("nan"))) else f" (p = {_num(c['p'])})"
        lines.append(f"- {c['claim']}: **{c['verdict']}**{p_text}")
    return "\n".join(lines + ["", README_END])


def replace_readme_block(text: str, block: str) -> str:
    """`text` with the part between the verdict markers replaced by `block` (ValueError without the markers)."""
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"no '{README_BEGIN}' ... '{README_END}' block to replace")
    return text[:start] + block + text[end + len(README_END):]


def render_to(report: dict, out: Path, path: str) -> None:
    """Write the page to `path` with its links relative to it, and refresh the verdicts block of the README beside
    it when that README has one."""
    if path:
        figures = os.path.relpath(out.resolve(), Path(path).resolve().parent).replace(os.sep, "/") + "/"
        Path(path).write_text(render_reproduction(report, "" if figures == "./" else figures))
        readme = Path(path).resolve().parent / "README.md"
        if readme.is_file() and README_BEGIN in readme.read_text():
            readme.write_text(replace_readme_block(readme.read_text(), readme_block(report, Path(path).name)))


def plan_jobs(out: Path, rows, seeds, flags, models, learning_rate, protocol: Protocol, total: int,
              steps: list[int]) -> list[Job]:
    """The jobs still to do: each prior's starting-model evaluation per seed, each row x seed's training, then
    its checkpoints' evaluation."""
    from trainers.config import GRPOArgs, parse_args
    from trainers import run_state
    from trainers.run_state import atomic_write_json

    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    if not gpus and flag_value(flags, "--device", "auto") in ("auto", "cuda"):
        import torch

        gpus = [str(i) for i in range(torch.cuda.device_count())]
    def eval_todo(name, want, conditions):
        return [s for s in want if not set(conditions) <= set(load_eval(out, name, s))]

    trainings, evals = [], []
    for prior in dict.fromkeys(ROWS[r].prior for r in rows):  # the starting model, once per prior and seed
        folder = out / "evals" / f"start_{prior}"
        source = ["--model", models[prior]] if models.get(prior) else ["--prior", prior]
        if not (folder / "args.json").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(folder / "args.json", dataclasses.asdict(parse_args(GRPOArgs, [*source, *flags])))
        for i, seed in enumerate(seeds):
            name = start_name(prior, seed)
            conditions = ["tools", "no_tools", "t0.7"] + (["greedy"] if i == 0 else [])
            if eval_todo(name, [0], conditions):
                evals.append(Job(name, eval_argv(out / "evals" / name, [0], seed, conditions, protocol,
                                                 args_file=folder / "args.json"), out / "logs" / f"{name}.log"))
    for seed in seeds:  # seed by seed: a sweep stopped early has whole seeds to compare rows on
        for row in rows:
            name, run_dir = run_name(row, seed), out / "runs" / run_name(row, seed)
            argv = run_argv(row, seed, out / "runs", flags, models, learning_rate)
            conditions = ["tools", "no_tools"] + (["sequential"] if row == "full" else [])
            untrained = is_untrained(row, learning_rate)
            todo = [] if untrained else eval_todo(name, steps, conditions)
            # its history and evaluations are all the report needs; a run killed before its final model still
            # resumes to write it, unless its checkpoints are gone (a run folder copied without its weights)
            if (train_metrics(load_history(run_dir))["steps"] == total and not todo
                    and (finished(run_dir, total) or not run_state.checkpoint_files(run_dir))):
                continue
            train_job = ""
            if not finished(run_dir, total):
                trainings.append(Job(name, argv + (["--resume"] if run_dir.exists() else []),
                                     out / "logs" / f"{name}.log", resume_argv=argv + ["--resume"]))
                train_job = name
            for step in todo:  # one job a checkpoint: each starts once its checkpoint is written
                evals.append(Job(f"eval_{name}_step{step}", eval_argv(out / "evals" / name, [step], seed, conditions,
                                                                      protocol, run_dir=run_dir),
                                 out / "logs" / f"eval_{name}_step{step}.log", after=train_job,
                                 ready_when=run_state.checkpoint_path(run_dir, step) if train_job else None))
    jobs = trainings + evals  # the long jobs first; evaluations fill the places they leave
    for i, j in enumerate(jobs):
        j.gpu = gpus[i % len(gpus)] if gpus else ""
    return jobs


if __name__ == "__main__":
    main()
