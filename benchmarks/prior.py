"""Tool-prior benchmark: weak vs strong cold-start checkpoints of the tiny LMM in the env.

For each prior: format reward, tool calls per rollout (kappa) and accuracy per family, greedy and
at temperature 0.7, with a fixed overview of K frames and with nFrames gating; plus
sub-agent agreement (the same model summarising a crop from its frames alone vs the world's
truthful caption). The paper expects the strong prior to call tools more and to hold format
worse under sampling. Format is the common format metric (the released PARA-GRPO format scorer on
the whole trajectory, ``info["format_reward_common"]``, the same for every reward configuration);
the env's own R_fmt is kept beside it. kappa = tool calls that executed, per rollout. The paper's
contrast, checked in the markdown (fixed K, greedy vs T = 0.7): strong kappa >= 0.3 and
format(T=0.7) <= format(greedy) - 0.3; weak kappa <= 0.05 and format(T=0.7) >= 0.8.
Writes <--out>.json, <--out>.md and <--out>.png (format and kappa, greedy vs T = 0.7).

K and the gating set default to what the checkpoint was TRAINED on (its ``sft_args.json``
``budgets``): the fixed K is the largest training K (64 for the gpu preset, as in the paper;
8 for the cpu preset, whose model never saw longer overviews), gating draws from the training
set. ``--k`` and ``--gating-budgets`` override both.

    python benchmarks/prior.py                       # builds the default checkpoints if missing
    python benchmarks/prior.py --strong DIR --weak DIR --episodes 48
    python benchmarks/prior.py --strong S/cold_start --weak W/cold_start --device cuda --episodes 240
    python benchmarks/prior.py --strong DIR --only strong --settings t0.7/K,t0.7/gating   # quick look

A checkpoint may be the cold_start directory or the build directory above it.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

if __name__ == "__main__" and not __package__:  # python benchmarks/prior.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.default import checkpoint_info, default_checkpoint  # noqa: E402
from benchmarks.report import write_report  # noqa: E402
from agents.lmm.evaluate_lmm import (rollouts, subagent_agreement, summarize, training_budgets,  # noqa: E402
                                     world_config_of)
from agents.lmm.policy import TransformersPolicy  # noqa: E402

SETTINGS = (("greedy", 0.0, False), ("t0.7", 0.7, False), ("greedy", 0.0, True), ("t0.7", 0.7, True))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strong", help="strong-prior cold-start checkpoint (default: default_checkpoint('strong'))")
    p.add_argument("--weak", help="weak-prior cold-start checkpoint (default: default_checkpoint('weak'))")
    p.add_argument("--episodes", type=int, default=48, help="validation episodes per setting (multiple of 6)")
    p.add_argument("--agreement-crops", type=int, default=64, help="crops for sub-agent agreement")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tokens per assistant turn")
    p.add_argument("--also-base", action="store_true", help="also evaluate the stage-1 base checkpoints")
    p.add_argument("--out", default="runs/benchmarks/prior", help="output path without extension (default: runs/benchmarks/prior, untracked; --only strong --out benchmarks/results/prior_strong, and likewise weak, refresh the committed results)")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    p.add_argument("--batch-size", type=int, default=64, help="episodes rolled out together")
    p.add_argument("--only", choices=("strong", "weak"), help="evaluate one prior only")
    p.add_argument("--settings", default=",".join(f"{l}/{'gating' if g else 'K'}" for l, _, g in SETTINGS),
                   help="comma list of settings to run (default: all four; K64 etc. read as K)")
    p.add_argument("--k", type=int, help="fixed overview size (default: the checkpoint's largest training K)")
    p.add_argument("--gating-budgets", help="comma list of gating K (default: the checkpoint's training budgets)")
    a = p.parse_args(argv)
    ckpts = {}
    for prior in ("strong", "weak"):
        if a.only and prior != a.only:
            continue
        path = getattr(a, prior) or str(default_checkpoint(prior))
        if (Path(path) / "cold_start" / "config.json").is_file():
            path = str(Path(path) / "cold_start")
        ckpts[prior] = path
    wanted = {re.sub(r"/K\d*$", "/K", x.strip()) for x in a.settings.split(",")}
    if a.also_base:
        ckpts.update({f"{k}-base": str(Path(v).parent / "base") for k, v in list(ckpts.items())})
    results = {"episodes": a.episodes, "max_new_tokens": a.max_new_tokens, "device": a.device, "models": {}}
    gating_budgets = tuple(int(x) for x in a.gating_budgets.split(",")) if a.gating_budgets else None
    for name, path in ckpts.items():
        results["models"][name] = measure(path, wanted, episodes=a.episodes, max_new_tokens=a.max_new_tokens,
                                          batch_size=a.batch_size, device=a.device, k=a.k,
                                          gating_budgets=gating_budgets, agreement_crops=a.agreement_crops,
                                          name=name)
    out = write_report(a.out, results, markdown(results))
    plot(results, Path(f"{out}.png"))


def measure(path: str, wanted=("greedy/K", "t0.7/K"), *, episodes: int = 48, max_new_tokens: int = 96,
            batch_size: int = 64, device: str = "cpu", k: int | None = None, gating_budgets=None,
            agreement_crops: int = 0, name: str = "") -> dict:
    """One checkpoint's entry of the results: the summary of its rollouts in each of the ``wanted`` settings
    ("greedy/K", "t0.7/K", "greedy/gating", "t0.7/gating"; K is ``k``, default the largest training K; gating
    draws from ``gating_budgets``, default the training set), with the sub-agent's agreement on
    ``agreement_crops`` crops."""
    policy, wc = TransformersPolicy(path, device=device), world_config_of(path)
    info = checkpoint_info(path)
    trained = training_budgets(path)
    k = k or max(trained)
    gating_budgets = tuple(gating_budgets or trained)
    entry = {"checkpoint": path, "build": {k: info.get(k) for k in ("corpus", "corpus_stats", "stage1_seconds",
                                                                   "stage2_seconds", "total_seconds")},
             "build_args": {k: info.get("args", {}).get(k) for k in ("preset", "stage1_steps", "stage2_steps",
                                                                     "batch_size", "budgets", "device")},
             "k": k, "gating_budgets": list(gating_budgets), "settings": {}}
    for label, temp, gating in SETTINGS:
        if f"{label}/{'gating' if gating else 'K'}" not in wanted:
            continue
        key = f"{label}/{'gating' if gating else f'K{k}'}"
        t = time.time()
        s = summarize(rollouts(policy, wc, episodes=episodes, temperature=temp, gating=gating,
                               frame_budget=k, gating_budgets=gating_budgets,
                               max_new_tokens=max_new_tokens, batch_size=batch_size))
        s["seconds"] = time.time() - t
        entry["settings"][key] = s
        print(name, key, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()
                          if k != "correct_by_family"}, flush=True)
    if agreement_crops:
        entry["subagent"] = subagent_agreement(policy, wc, crops=agreement_crops)
        print(name, "subagent", {k: v for k, v in entry["subagent"].items() if k != "examples"}, flush=True)
    return entry


def contrast(results) -> list[dict]:
    """The paper's tool-prior contrast per model at its fixed K (greedy vs T = 0.7): the numbers
    and whether each target holds (None where a setting was not run)."""
    rows = []
    for name, e in results["models"].items():
        g, t = e["settings"].get(f"greedy/K{e.get('k')}"), e["settings"].get(f"t0.7/K{e.get('k')}")
        if not g or not t:
            continue
        kappa = g["tool_calls"]
        fg, ft = g.get("format_common", float("nan")), t.get("format_common", float("nan"))
        if name.startswith("strong"):
            targets = {"kappa >= 0.3": kappa >= 0.3, "format(T=0.7) <= format(greedy) - 0.3": ft <= fg - 0.3}
        else:
            targets = {"kappa <= 0.05": kappa <= 0.05, "format(T=0.7) >= 0.8": ft >= 0.8}
        rows.append(dict(model=name, k=e.get("k"), kappa_greedy=kappa, kappa_t07=t["tool_calls"], format_greedy=fg,
                         format_t07=ft, targets=targets))
    return rows


def markdown(results) -> str:
    fams = ("needle", "needle_attribute", "counting", "temporal_order", "grounding", "global")
    lines = [f"Tool-prior benchmark ({results['episodes']} validation episodes per row, oracle sub-agent, "
             f"{results['max_new_tokens']} new tokens per turn). format = the common format metric (released "
             "PARA-GRPO format on the trajectory); env R_fmt = the env's own format reward; kappa = executed tool "
             "calls per rollout; think closed = share of rollouts whose every turn closes </think>.", ""]
    lines += [f"- {name}: fixed K = {e.get('k')}, gating K ~ U{tuple(e.get('gating_budgets') or ())}"
              for name, e in results["models"].items()]
    rows = contrast(results)
    if rows:
        lines += ["", "The paper's contrast (fixed K, greedy -> T = 0.7):", "",
                  "| model | K | format greedy | format T=0.7 | kappa greedy | kappa T=0.7 | targets |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            tg = "; ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in r["targets"].items())
            lines.append(f"| {r['model']} | {r['k']} | {r['format_greedy']:.3f} | {r['format_t07']:.3f} | "
                         f"{r['kappa_greedy']:.2f} | {r['kappa_t07']:.2f} | {tg} |")
    lines += ["", "| model | decoding | K | format | env R_fmt | kappa | rollouts with a call | acc | <answer> used | "
              "`Answer:` | <tool_code> | <tool_call> | think closed | " + " | ".join(fams) + " |",
              "|" + "---|" * (13 + len(fams))]
    for name, e in results["models"].items():
        for key, s in e["settings"].items():
            dec, k = key.split("/")
            fam = " | ".join(f"{s['correct_by_family'].get(f, float('nan')):.2f}" for f in fams)
            lines.append(f"| {name} | {dec} | {k} | {s.get('format_common', float('nan')):.3f} | {s['format']:.3f} | "
                         f"{s['tool_calls']:.2f} | {s['tool_rate']:.2f} | "
                         f"{s['correct']:.3f} | {s['answer_tag']:.2f} | {s['answer_colon']:.2f} | {s['tool_code']:.2f} | "
                         f"{s['tool_call_json']:.2f} | {s['think_closed']:.2f} | {fam} |")
    if any(e.get("subagent") for e in results["models"].values()):
        lines += ["", "Sub-agent agreement (the model summarises a crop from its frames alone; greedy) vs the world's "
                  "caption:", "", "| model | crops | token F1 | object precision | object recall | object F1 | scene match |",
                  "|---|---|---|---|---|---|---|"]
    for name, e in results["models"].items():
        s = e.get("subagent")
        if s:
            lines.append(f"| {name} | {s['crops']} | {s['token_f1']:.3f} | {s['object_precision']:.3f} | "
                         f"{s['object_recall']:.3f} | {s['object_f1']:.3f} | {s['scene_match']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(results, path: Path) -> bool:
    """Format and kappa per model, greedy vs T = 0.7 at the fixed K (False when nothing to plot)."""
    rows = contrast(results)
    if not rows:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    x = np.arange(len(rows))
    for ax, (key, title) in zip(axes, (("format", "common format"), ("kappa", "kappa (executed calls / rollout)"))):
        ax.bar(x - 0.2, [r[f"{key}_greedy"] for r in rows], 0.4, label="greedy")
        ax.bar(x + 0.2, [r[f"{key}_t07"] for r in rows], 0.4, label="T = 0.7")
        ax.set_xticks(x, [f"{r['model']} (K={r['k']})" for r in rows])
        ax.set_title(title)
        ax.set_ylim(0, max(1.0, *[r[f"{key}_greedy"] for r in rows], *[r[f"{key}_t07"] for r in rows]) * 1.05)
    axes[0].legend(loc="lower left")
    fig.suptitle(f"Tool prior of the cold starts ({results['episodes']} validation episodes per bar)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


if __name__ == "__main__":
    main()
