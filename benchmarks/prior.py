"""Tool-prior benchmark: weak vs strong cold-start checkpoints of the tiny LMM in the env.

For each prior: format reward, tool calls per rollout (kappa) and accuracy per family, greedy and
at temperature 0.7, with a fixed overview of K frames and with nFrames gating; plus
sub-agent agreement (the same model summarising a crop from its frames alone vs the world's
truthful caption). The paper expects the strong prior to call tools more and to hold format
worse under sampling. Writes <--out>.json and <--out>.md.

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
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.default import checkpoint_info, default_checkpoint  # noqa: E402
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
    p.add_argument("--out", default="runs/benchmarks/prior", help="output path without extension (default: runs/benchmarks/prior, untracked; --out benchmarks/results/prior refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
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
    for name, path in ckpts.items():
        policy, wc = TransformersPolicy(path, device=a.device), world_config_of(path)
        info = checkpoint_info(path)
        trained = training_budgets(path)
        k = a.k or max(trained)
        gating_budgets = tuple(int(x) for x in a.gating_budgets.split(",")) if a.gating_budgets else trained
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
            s = summarize(rollouts(policy, wc, episodes=a.episodes, temperature=temp, gating=gating,
                                   frame_budget=k, gating_budgets=gating_budgets,
                                   max_new_tokens=a.max_new_tokens, batch_size=a.batch_size))
            s["seconds"] = time.time() - t
            entry["settings"][key] = s
            print(name, key, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()
                              if k != "correct_by_family"}, flush=True)
        if a.agreement_crops:
            entry["subagent"] = subagent_agreement(policy, wc, crops=a.agreement_crops)
            print(name, "subagent", {k: v for k, v in entry["subagent"].items() if k != "examples"}, flush=True)
        results["models"][name] = entry
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))


def markdown(results) -> str:
    fams = ("needle", "needle_attribute", "counting", "temporal_order", "grounding", "global")
    lines = [f"Tool-prior benchmark ({results['episodes']} validation episodes per row, oracle sub-agent, "
             f"{results['max_new_tokens']} new tokens per turn). format = env R_fmt; kappa = tool calls per rollout; "
             "think closed = share of rollouts whose every turn closes </think>.", ""]
    lines += [f"- {name}: fixed K = {e.get('k')}, gating K ~ U{tuple(e.get('gating_budgets') or ())}"
              for name, e in results["models"].items()]
    lines += ["", "| model | decoding | K | format | kappa | rollouts with a call | acc | <answer> used | `Answer:` | <tool_code> | "
              "<tool_call> | think closed | " + " | ".join(fams) + " |",
              "|" + "---|" * (13 + len(fams))]
    for name, e in results["models"].items():
        for key, s in e["settings"].items():
            dec, k = key.split("/")
            fam = " | ".join(f"{s['correct_by_family'].get(f, float('nan')):.2f}" for f in fams)
            lines.append(f"| {name} | {dec} | {k} | {s['format']:.3f} | {s['tool_calls']:.2f} | {s['tool_rate']:.2f} | "
                         f"{s['correct']:.3f} | {s['answer_tag']:.2f} | {s['answer_colon']:.2f} | {s['tool_code']:.2f} | "
                         f"{s['tool_call_json']:.2f} | {s['think_closed']:.2f} | {fam} |")
    lines += ["", "Sub-agent agreement (the model summarises a crop from its frames alone; greedy) vs the world's caption:", "",
              "| model | crops | token F1 | object precision | object recall | object F1 | scene match |", "|---|---|---|---|---|---|---|"]
    for name, e in results["models"].items():
        s = e.get("subagent")
        if s:
            lines.append(f"| {name} | {s['crops']} | {s['token_f1']:.3f} | {s['object_precision']:.3f} | "
                         f"{s['object_recall']:.3f} | {s['object_f1']:.3f} | {s['scene_match']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
