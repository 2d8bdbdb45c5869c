"""The Tool Prior Paradox ablations as one command: every row x seed a trainer run, then a report.

    python trainers/sweep.py --preset cpu                       # 2-core CPU: 5 rows, 1 seed, short (see --help)
    python trainers/sweep.py --preset paper --device cuda --jobs 24 --out benchmarks/results/reproduction
    python trainers/sweep.py --rows grpo,full --seeds 1,2 --total-steps 30     # any trainer flag goes to every run
    python trainers/sweep.py --report-only --out DIR            # rebuild the tables and plots from DIR/runs
    python trainers/sweep.py --preset paper --strong-model QWEN_SFT_STRONG --weak-model QWEN_SFT_WEAK \
        --learning-rate 2e-6 --source train.jsonl --eval-source val.jsonl --device cuda   # your own checkpoints

Rows (the paper's ablation table and its contrasts; each row is a trainer script plus a few flags):

================  ==========================================================================================
cold_start        the shipped strong cold start, no RL: the same rollouts with learning rate 0 (no update)
grpo              vanilla GRPO (trainers/grpo.py): no anchoring, no gating, K = 64
anchoring         Exploration Anchoring only: think prefix, answer suffix, anchor bonus and penalty; K = 64
gating            nFrames Gating only: vanilla format reward, K drawn per prompt
full              PARA-GRPO (trainers/para_grpo.py)
no_tool_reward    full minus R_tool
no_gamma          full minus the unclosed-think penalty gamma
anchor_logprob    full with the paper's token-level log-prob anchor instead of the released sequence bonus
sequential        full with sequential dispatch (one crop per turn), same checkpoint (trainers/sequential_tool.py)
weak_grpo         the weak-prior cold start under vanilla GRPO
weak_full         the weak-prior cold start under PARA-GRPO
full_oracle       full with the world's truthful caption as sub-agent (a control: perfect tool answers)
released_scoring  full, the reward reading only the agent's own tokens as the release does (not in the
                  paper preset; ``--rows released_scoring``)
================  ==========================================================================================

R_tool is on in every row but no_tool_reward, as in the released code. Every row is evaluated with and
without the sub-agent (``--eval-without-tools``).

Each run is a trainer process (``--jobs`` at a time; on GPUs they are spread over the visible devices and
share them) writing ``<out>/runs/<row>__s<seed>/`` (TensorBoard, checkpoints, history.json). Rerunning the
same command skips finished runs and resumes partial ones from their last checkpoint (``--resume``), so a
sweep can span several jobs that each end at a hard time limit (``--time-limit-s`` stops cleanly before).
Each run is safe against a kill at any instant and has one writer (trainers/run_state.py): a run another
process is writing (say a second sweep on the same ``--out``) fails with the holder's pid in its log
line, and the rest of the sweep goes on.

Report (``<out>/``): ``results.json`` (per row: seeds, and for f_tau, kappa, eval accuracy with and
without the sub-agent, per-family accuracy: mean, std and a 95% t-interval over seeds, plus steps and
wall time), ``results.md`` (the table), ``side_by_side.md`` (ours beside the paper's ablation),
``claims.md`` (each claim of the paper checked against these numbers: yes / partly / no with the evidence),
``curves.png`` (common format reward, executed calls and eval accuracy against step; one line per row, seeds
as a band). f_tau = mean ``train/format_reward_common``
(the released PARA-GRPO format applied to every row's rollouts at the training temperature) and kappa =
mean ``train/tool_calls_per_rollout`` (executed sub-agent calls), both over the last quarter of steps.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# vanilla format: no prefix, default format weights, no anchor (R_tool stays, as released)
VANILLA = ["--no-think-prefix", "--no-answer-suffix", "--anchor-lambda", "0", "--penalty-gamma", "0"]


@dataclass(frozen=True)
class Row:
    script: str                       # trainers/<script>.py
    flags: tuple[str, ...] = ()
    prior: str = "strong"
    about: str = ""
    in_paper: bool = True             # a row of the paper's ablation (the paper preset runs these)


ROWS: dict[str, Row] = {
    "cold_start": Row("para_grpo", ("--learning-rate", "0"), about="SFT cold start, no RL"),
    "grpo": Row("grpo", (), about="+ GRPO"),
    "anchoring": Row("para_grpo", ("--no-nframes-gating", "--frame-budget", "64"), about="+ Exploration Anchoring only"),
    "gating": Row("para_grpo", (*VANILLA, "--nframes-gating"), about="+ nFrames Gating only"),
    "full": Row("para_grpo", (), about="+ PARA-GRPO (full)"),
    "no_tool_reward": Row("para_grpo", ("--no-tool-reward",), about="full minus R_tool"),
    "no_gamma": Row("para_grpo", ("--penalty-gamma", "0"), about="full minus penalty gamma"),
    "anchor_logprob": Row("para_grpo", ("--anchor-mode", "logprob", "--anchor-lambda", "0.1"),
                          about="full, token-level log-prob anchoring"),
    "sequential": Row("sequential_tool", (), about="full, sequential dispatch"),
    "weak_grpo": Row("grpo", (), prior="weak", about="weak prior + GRPO"),
    "weak_full": Row("para_grpo", (), prior="weak", about="weak prior + PARA-GRPO"),
    "full_oracle": Row("para_grpo", ("--subagent", "oracle"), about="full, oracle sub-agent (control)"),
    # not in the paper's table: the released reward's reading (defects 1-2), to measure what it does to training
    "released_scoring": Row("para_grpo", ("--scoring", "generated"),
                            about="full, scored as released (the agent's own tokens only)", in_paper=False),
}
PAPER_ROWS = tuple(name for name, row in ROWS.items() if row.in_paper)

# The paper's ablation (Qwen3-VL-8B; f_tau, kappa, and its VideoMME accuracy columns in %, "w/o sub" and
# "w/ sub", which in VideoMME usually means subtitles; we set our accuracy without / with the sub-agent beside them).
# Its sequential row reports only the accuracies of the same checkpoint under sequential dispatch.
PAPER_ABLATION: dict[str, dict[str, float]] = {
    "cold_start": {"f_tau": 0.13, "kappa": 2.50, "acc_no_sub": 60.7, "acc_sub": 69.0},
    "grpo": {"f_tau": 0.13, "kappa": 0.02, "acc_no_sub": 62.0, "acc_sub": 68.6},
    "anchoring": {"f_tau": 0.35, "kappa": 0.19, "acc_no_sub": 61.7, "acc_sub": 68.7},
    "gating": {"f_tau": 0.10, "kappa": 1.36, "acc_no_sub": 61.3, "acc_sub": 68.7},
    "full": {"f_tau": 0.41, "kappa": 0.21, "acc_no_sub": 62.1, "acc_sub": 69.4},
    "no_tool_reward": {"f_tau": 0.33, "kappa": 0.04, "acc_no_sub": 61.9, "acc_sub": 68.5},
    "no_gamma": {"f_tau": 0.36, "kappa": 0.27, "acc_no_sub": 61.6, "acc_sub": 69.0},
    "sequential": {"acc_no_sub": 61.4, "acc_sub": 68.8},
}


# Flags every run of a preset gets (an explicit flag after them on the command line wins: argparse keeps the last).
PRESETS: dict[str, dict] = {
    "paper": dict(rows=list(PAPER_ROWS), seeds=[1, 2, 3], flags=[
        "--total-steps", "40", "--prompts-per-step", "4", "--gating-budgets", "4,8,16,32,64",
        "--eval-every", "20", "--eval-episodes", "64", "--checkpoint-every", "5"]),
    "cpu": dict(rows=["cold_start", "grpo", "anchoring", "gating", "full"], seeds=[1], flags=[
        "--total-steps", "12", "--prompts-per-step", "2", "--gating-budgets", "4,8,16,32,64",
        "--eval-every", "12", "--eval-episodes", "24", "--checkpoint-every", "4"]),
}

# 95% two-sided Student t quantiles by degrees of freedom (normal beyond the table)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    if df <= 0:
        return float("nan")
    known = [d for d in _T95 if d <= df]
    return _T95[max(known)] if df <= 30 else 1.96


def spread(values: list[float]) -> dict:
    """mean, std (ddof 1) and a 95% t-interval of the mean over seeds."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return {"mean": float("nan"), "std": float("nan"), "ci95": [float("nan")] * 2, "n": 0}
    n = len(vals)
    mean = sum(vals) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    half = t95(n - 1) * std / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "std": std, "ci95": [mean - half, mean + half], "n": n}


# ------------------------------------------------------------------ one run
def run_name(row: str, seed: int) -> str:
    return f"{row}__s{seed}"


def run_argv(row: str, seed: int, runs_dir: Path, flags: list[str], models: dict[str, str] | None = None) -> list[str]:
    """The trainer command of one row x seed. ``models`` maps a prior ("strong"/"weak") to a checkpoint folder
    that replaces the shipped cold start of that prior (say, your own Qwen-VL SFT checkpoints)."""
    spec = ROWS[row]
    model = (models or {}).get(spec.prior)
    source = ["--model", model] if model else ["--prior", spec.prior]
    return [sys.executable, str(ROOT / "trainers" / f"{spec.script}.py"), *spec.flags, *source,
            "--eval-without-tools", "--seed", str(seed), "--exp-name", row, "--run-name", run_name(row, seed),
            "--runs-dir", str(runs_dir), "--no-progress", *flags]


def load_history(run_dir: Path) -> list[dict]:
    f = run_dir / "history.json"
    try:
        return json.loads(f.read_text()) if f.is_file() else []
    except (OSError, ValueError):
        return []


def finished(run_dir: Path, total_steps: int) -> bool:
    """A complete final_model of step total_steps (trainers/run_state.py checks it against its manifest):
    a run killed while writing it, or one whose final_model is damaged, is resumed and repairs it."""
    from trainers.run_state import final_model_problem

    return final_model_problem(run_dir, total_steps) is None


def flag_value(flags: list[str], name: str, default):
    """The last value given for --name in flags (argparse semantics), converted like default."""
    value = default
    for i, f in enumerate(flags[:-1]):
        if f == name:
            value = type(default)(flags[i + 1])
    return value


# ------------------------------------------------------------------ many runs
@dataclass
class Job:
    row: str
    seed: int
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    started: float = 0.0
    seconds: float = 0.0
    returncode: int | None = None
    env: dict = field(default_factory=dict)


def run_all(jobs: list[Job], parallel: int, deadline: float | None, progress: bool = True) -> None:
    """Run jobs `parallel` at a time; past the deadline stop launching and SIGTERM what runs."""
    from tqdm import tqdm

    todo, running = list(jobs), []
    bar = tqdm(total=len(jobs), desc="sweep runs", disable=not progress, dynamic_ncols=True)
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
                    j.returncode = j.proc.returncode
                print(f"time limit reached: {len(running)} run(s) stopped, {len(todo)} not started; "
                      "rerun the same command to resume them", file=sys.stderr)
                return
            while todo and len(running) < parallel:
                j = todo.pop(0)
                j.log.parent.mkdir(parents=True, exist_ok=True)
                j.started = time.time()
                j.proc = subprocess.Popen(j.argv, stdout=open(j.log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT,
                                          env={**os.environ, **j.env})
                running.append(j)
            for j in list(running):
                if j.proc.poll() is not None:
                    j.returncode, j.seconds = j.proc.returncode, time.time() - j.started
                    running.remove(j)
                    bar.update(1)
                    if j.returncode != 0:
                        tail = j.log.read_text(errors="replace").strip().splitlines()[-3:]
                        bar.write(f"{run_name(j.row, j.seed)} failed (exit {j.returncode}); log {j.log}: "
                                  + " | ".join(tail))
            time.sleep(0.5)
    finally:
        bar.close()


# ------------------------------------------------------------------ report
def summarize_run(history: list[dict]) -> dict:
    steps = [h for h in history if h.get("step", 0) > 0 and "train/format_reward_common" in h]
    tail = steps[-max(1, len(steps) // 4):] if steps else []

    def mean(key, rows):
        vals = [r[key] for r in rows if key in r]
        return sum(vals) / len(vals) if vals else float("nan")

    evals = [h for h in history if "eval/accuracy" in h]
    last = evals[-1] if evals else {}
    out = {"steps": max((h["step"] for h in steps), default=0),
           "f_tau": mean("train/format_reward_common", tail), "f_own": mean("train/format_reward", tail),
           "kappa": mean("train/tool_calls_per_rollout", tail),
           "kappa_emitted": mean("train/tool_calls_emitted_per_rollout", tail),
           "parallel_turn_fraction": mean("train/parallel_turn_fraction", tail),
           "train_accuracy": mean("train/accuracy", tail),
           "eval_accuracy": last.get("eval/accuracy", float("nan")),
           "eval_accuracy_no_subagent": last.get("eval/no_tools/accuracy", float("nan")),
           "eval_format": last.get("eval/format_reward_common", float("nan")),
           "eval_kappa": last.get("eval/tool_calls_per_rollout", float("nan")),
           "seconds": sum(h.get("perf/step_seconds", 0.0) for h in steps)}
    out["eval_accuracy_by_family"] = {k.split("/", 2)[2]: v for k, v in last.items()
                                      if k.startswith("eval/accuracy/")}
    return out


METRICS = ("f_tau", "f_own", "kappa", "kappa_emitted", "parallel_turn_fraction", "train_accuracy", "eval_accuracy",
           "eval_accuracy_no_subagent", "eval_format", "eval_kappa", "steps", "seconds")


def build_report(out: Path, rows: list[str], seeds: list[int]) -> dict:
    results = {}
    for row in rows:
        per_seed = {}
        for seed in seeds:
            hist = load_history(out / "runs" / run_name(row, seed))
            if hist:
                per_seed[seed] = {"history": hist, **summarize_run(hist)}
        if not per_seed:
            continue
        entry = {"about": ROWS[row].about, "seeds": sorted(per_seed),
                 "flags": list(ROWS[row].flags), "prior": ROWS[row].prior}
        for m in METRICS:
            entry[m] = spread([s[m] for s in per_seed.values()])
        families = sorted({f for s in per_seed.values() for f in s["eval_accuracy_by_family"]})
        entry["eval_accuracy_by_family"] = {f: spread([s["eval_accuracy_by_family"].get(f, float("nan"))
                                                       for s in per_seed.values()]) for f in families}
        entry["per_seed"] = {str(k): {m: v[m] for m in METRICS} for k, v in per_seed.items()}
        entry["curves"] = {str(k): [{key: h[key] for key in ("step", "train/format_reward_common",
                                                             "train/tool_calls_per_rollout", "eval/accuracy")
                                     if key in h} for h in v["history"]] for k, v in per_seed.items()}
        results[row] = entry
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown_table(results))
    (out / "claims.md").write_text(claims_markdown(results))
    (out / "side_by_side.md").write_text(side_by_side_markdown(results))
    if results:
        plot_curves(results, out / "curves.png")
    return results


# ------------------------------------------------------------------ the paper's claims, checked
def compare(results: dict, a: str, b: str, metric: str, direction: int = 1) -> dict:
    """Is row a's metric above (direction 1) or below (-1) row b's? "yes": in that direction by more than
    twice the standard error of the difference of the seed means; "partly": by more than one standard
    error; "no": less than that, or the other way (with one seed per row, any difference in that
    direction counts as "partly": there is no error to compare it with)."""
    if a not in results or b not in results:
        return {"verdict": "not run", "evidence": f"row {a if a not in results else b} not in this sweep"}
    x, y = results[a][metric], results[b][metric]
    if not x["n"] or not y["n"] or math.isnan(x["mean"]) or math.isnan(y["mean"]):
        return {"verdict": "not run", "evidence": f"no {metric} for {a} or {b}"}
    diff = (x["mean"] - y["mean"]) * direction
    se = math.sqrt((x["std"] ** 2 / x["n"] if x["n"] > 1 else 0) + (y["std"] ** 2 / y["n"] if y["n"] > 1 else 0))
    if diff <= 0:
        verdict = "no"
    elif se == 0:
        verdict = "partly"
    else:
        verdict = "yes" if diff > 2 * se else ("partly" if diff > se else "no")
    return {"verdict": verdict, "evidence": f"{metric}: {a} {x['mean']:.3f} ± {x['std']:.3f} vs {b} "
                                            f"{y['mean']:.3f} ± {y['std']:.3f} (n = {x['n']}, {y['n']})"}


def _all(*checks: dict) -> dict:
    order = {"yes": 0, "partly": 1, "no": 2, "not run": 3}
    worst = max((c["verdict"] for c in checks), key=order.get)
    if worst == "no" and any(c["verdict"] in ("yes", "partly") for c in checks):
        worst = "partly"
    return {"verdict": worst, "evidence": "; ".join(c["evidence"] for c in checks)}


def format_decay(results: dict, row: str) -> dict:
    """Common format reward in the first vs the last quarter of training, over seeds."""
    if row not in results:
        return {"verdict": "not run", "evidence": f"row {row} not in this sweep"}
    firsts, lasts = [], []
    for curve in results[row]["curves"].values():
        vals = [h["train/format_reward_common"] for h in curve if "train/format_reward_common" in h]
        if len(vals) >= 4:
            q = len(vals) // 4
            firsts.append(sum(vals[:q]) / q)
            lasts.append(sum(vals[-q:]) / q)
    if not firsts:
        return {"verdict": "not run", "evidence": "too few steps"}
    f, l = spread(firsts), spread(lasts)
    drop = f["mean"] - l["mean"]
    return {"verdict": "yes" if drop > 0.05 else "no",
            "evidence": f"{row} common format first quarter {f['mean']:.3f} -> last quarter {l['mean']:.3f}"}


def format_accuracy_correlation(results: dict) -> dict:
    pairs = [(s["f_tau"], s["eval_accuracy"]) for r in results.values() for s in r["per_seed"].values()
             if not math.isnan(s["f_tau"]) and not math.isnan(s["eval_accuracy"])]
    if len(pairs) < 3:
        return {"verdict": "not run", "evidence": "fewer than 3 runs"}
    xs, ys = zip(*pairs)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return {"verdict": "not run", "evidence": "f_tau or eval accuracy does not vary across runs"}
    r = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
    n = len(pairs)
    # "yes" needs r > 0 to be significant (two-sided 5%: t = r sqrt((n-2)/(1-r^2)) beyond the t quantile)
    t = r * math.sqrt((n - 2) / max(1e-12, 1 - r * r))
    significant = t > t95(n - 2)
    # "partly": strong but not significant (few runs), or significant but weak
    verdict = "yes" if r >= 0.5 and significant else ("partly" if r >= 0.5 or (r > 0 and significant) else "no")
    return {"verdict": verdict, "evidence": f"Pearson r = {r:.2f} between f_tau and eval accuracy with the sub-agent "
                                            f"over {n} runs, t = {t:.2f} vs {t95(n - 2):.2f} needed at 5% "
                                            f"(paper: 0.86)"}


def claims(results: dict) -> list[tuple[str, dict]]:
    weak_rows = [r for r in ("weak_grpo", "weak_full") if r in results]
    weak = {"verdict": "not run", "evidence": "no weak-prior row"}
    if weak_rows:
        kap = max(results[r]["kappa"]["mean"] for r in weak_rows)
        fmt = min(results[r]["f_tau"]["mean"] for r in weak_rows)
        weak = {"verdict": "yes" if kap <= 0.05 and fmt >= 0.7 else ("partly" if kap <= 0.05 or fmt >= 0.7 else "no"),
                "evidence": f"weak rows: max kappa {kap:.3f}, min f_tau {fmt:.3f} (paper: 0 calls, f = 0.85)"}
    return [
        ("GRPO collapses kappa and keeps f low", _all(compare(results, "cold_start", "grpo", "kappa"),
                                                      compare(results, "full", "grpo", "f_tau"))),
        ("Anchoring alone lifts f", compare(results, "anchoring", "grpo", "f_tau")),
        ("Gating alone lifts kappa", compare(results, "gating", "grpo", "kappa")),
        ("Both together win (accuracy with the sub-agent)", _all(compare(results, "full", "grpo", "eval_accuracy"),
                                                                 compare(results, "full", "anchoring", "eval_accuracy"),
                                                                 compare(results, "full", "gating", "eval_accuracy"))),
        ("Minus R_tool kills kappa", compare(results, "full", "no_tool_reward", "kappa")),
        ("Minus gamma costs a little", compare(results, "full", "no_gamma", "eval_accuracy")),
        ("Parallel beats sequential", compare(results, "full", "sequential", "eval_accuracy")),
        ("Weak prior: format holds, 0 calls", weak),
        ("Strong prior: calls, format decays under GRPO", _all(
            {"verdict": "yes" if results.get("cold_start", {}).get("kappa", {}).get("mean", 0) > 0.1 else "no",
             "evidence": f"cold_start kappa {results.get('cold_start', {}).get('kappa', {}).get('mean', float('nan')):.3f}"},
            format_decay(results, "grpo"))),
        ("Training format correlates with with-tool accuracy", format_accuracy_correlation(results)),
    ]


def claims_markdown(results: dict) -> str:
    lines = ["| claim of the paper | shown here? | evidence |", "|---|---|---|"]
    lines += [f"| {name} | {c['verdict']} | {c['evidence']} |" for name, c in claims(results)]
    return "\n".join(lines) + "\n"


def _fmt(s: dict, digits: int = 3, scale: float = 1.0) -> str:
    if not s or s.get("n", 0) == 0 or math.isnan(s["mean"]):
        return "-"
    mean, std = scale * s["mean"], scale * s["std"]
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if s["n"] > 1 else f"{mean:.{digits}f}"


def markdown_table(results: dict) -> str:
    lines = ["| row | setting | seeds | f_tau | kappa | parallel turns | eval acc (w/ sub) | eval acc (w/o sub) | "
             "own format | steps | min/run |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row, r in results.items():
        minutes = r["seconds"]["mean"] / 60 if r["seconds"]["n"] else float("nan")
        lines.append(f"| {row} | {r['about']} | {len(r['seeds'])} | {_fmt(r['f_tau'])} | {_fmt(r['kappa'], 2)} | "
                     f"{_fmt(r['parallel_turn_fraction'], 2)} | {_fmt(r['eval_accuracy'])} | "
                     f"{_fmt(r['eval_accuracy_no_subagent'])} | {_fmt(r['f_own'])} | {r['steps']['mean']:.0f} | "
                     f"{minutes:.1f} |")
    families = sorted({f for r in results.values() for f in r["eval_accuracy_by_family"]})
    if families:
        lines += ["", "Eval accuracy with the sub-agent by family (mean ± std over seeds):", "",
                  "| row | " + " | ".join(families) + " |", "|---" * (len(families) + 1) + "|"]
        for row, r in results.items():
            lines.append(f"| {row} | " + " | ".join(_fmt(r["eval_accuracy_by_family"].get(f, {}), 2)
                                                   for f in families) + " |")
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
    return "\n".join(lines) + "\n"


def plot_curves(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = [("train/format_reward_common", "common format reward at T = 0.7 (f_tau)"),
            ("train/tool_calls_per_rollout", "executed tool calls per rollout (kappa)"),
            ("eval/accuracy", "eval accuracy with the sub-agent")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for row, r in results.items():
        for ax, (key, title) in zip(axes, keys):
            series = [{h["step"]: h[key] for h in curve if key in h} for curve in r["curves"].values()]
            steps = sorted(set().union(*series))
            if not steps:
                continue
            ys = np.array([[s.get(x, np.nan) for x in steps] for s in series], dtype=float)
            mean = np.nanmean(ys, 0)
            line, = ax.plot(steps, mean, label=row, marker="o" if key.startswith("eval") else None, ms=3)
            if len(series) > 1:
                ax.fill_between(steps, np.nanmin(ys, 0), np.nanmax(ys, 0), color=line.get_color(), alpha=0.15)
            ax.set(title=title, xlabel="step")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ CLI
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Unknown flags are passed to every trainer run (after the preset's, so they win).")
    p.add_argument("--preset", choices=list(PRESETS), default=None,
                   help="rows, seeds and schedule of a named experiment; paper: all rows, 3 seeds, 40 steps of "
                        "4 prompts x G = 8 (GPU); cpu: 5 rows, 1 seed, 12 steps of 2 prompts (about 1 h on a 2-core CPU)")
    p.add_argument("--rows", default=None, help=f"comma list from {', '.join(ROWS)} (default: the preset's, "
                                                "else grpo,anchoring,gating,full,no_tool_reward,no_gamma)")
    p.add_argument("--seeds", default=None, help="comma list of seeds (default: the preset's, else 1)")
    p.add_argument("--out", default="runs/sweep", help="report folder; runs go to OUT/runs/<row>__s<seed>")
    p.add_argument("--jobs", type=int, default=1, help="trainer processes at a time (on GPUs, spread over them)")
    p.add_argument("--time-limit-s", type=float, default=None,
                   help="stop launching runs and SIGTERM running ones after this many seconds; rerun to resume")
    p.add_argument("--strong-model", default="", help="checkpoint folder for the strong-prior rows (default: the "
                                                      "shipped tiny strong cold start); e.g. a Qwen2.5-VL SFT folder")
    p.add_argument("--weak-model", default="", help="checkpoint folder for the weak-prior rows (weak_grpo, weak_full)")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from OUT/runs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    a, extra = p.parse_known_args(argv)
    preset = PRESETS.get(a.preset, {})
    rows = (a.rows.split(",") if a.rows else preset.get("rows")
            or ["grpo", "anchoring", "gating", "full", "no_tool_reward", "no_gamma"])
    rows = [r for r in rows if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; known: {list(ROWS)}")
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s] if a.seeds else preset.get("seeds", [1])
    except ValueError:
        p.error(f"--seeds must be a comma list of integers, got {a.seeds!r}")
    if a.jobs < 1:
        p.error("--jobs must be >= 1")
    owned = sorted({f.split("=")[0] for f in extra} & {"--runs-dir", "--run-name", "--seed", "--exp-name", "--resume",
                                                       "--model", "--prior"})
    if owned:
        p.error(f"the sweep sets {', '.join(owned)} for every run itself (use --out, --seeds, --strong-model and "
                f"--weak-model)")
    for flag, path in (("--strong-model", a.strong_model), ("--weak-model", a.weak_model)):
        if path and not Path(path).is_dir():
            p.error(f"{flag} {path}: not a folder")
    models = {"strong": a.strong_model, "weak": a.weak_model}
    out = Path(a.out)
    flags = list(preset.get("flags", [])) + extra
    if not a.report_only:
        total = flag_value(flags, "--total-steps", 40)
        gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        if not gpus and flag_value(flags, "--device", "auto") in ("auto", "cuda"):
            import torch

            gpus = [str(i) for i in range(torch.cuda.device_count())]
        jobs, skipped = [], 0
        for row in rows:
            for seed in seeds:
                run_dir = out / "runs" / run_name(row, seed)
                if finished(run_dir, total):
                    skipped += 1
                    continue
                argv_run = run_argv(row, seed, out / "runs", flags, models) + (["--resume"] if run_dir.exists() else [])
                env = {"CUDA_VISIBLE_DEVICES": gpus[len(jobs) % len(gpus)]} if gpus else {}
                jobs.append(Job(row, seed, argv_run, out / "logs" / f"{run_name(row, seed)}.log", env=env))
        print(f"sweep: {len(rows)} rows x {len(seeds)} seeds; {skipped} finished, {len(jobs)} to run "
              f"({a.jobs} at a time); logs in {out / 'logs'}", flush=True)
        deadline = time.time() + a.time_limit_s if a.time_limit_s else None
        run_all(jobs, a.jobs, deadline, progress=not a.no_progress)
    results = build_report(out, rows, seeds)
    print((out / "results.md").read_text() if results else "no finished steps to report yet")
    return results


if __name__ == "__main__":
    main()
