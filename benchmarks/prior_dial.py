"""The prior dial: cold starts the recipe builds at several shares of tool-use traces in the cold-start data
(``trainers/sft.py --recipe R --tool-trace-share X``, every point on one shared perception base), each measured as
benchmarks/prior.py measures a prior: kappa (executed tool calls per rollout) and the common format metric, greedy
and at T = 0.7, and accuracy, at the largest training K on validation episodes with the oracle sub-agent.

    python benchmarks/prior_dial.py --shares 0,0.25,0.5,0.75,1 --device cuda --time-budget-s 540
    python benchmarks/prior_dial.py --size tiny --shares 0.25,0.75 --out runs/prior_dial_tiny   # a CPU check

The builds go to --build-dir (<build-dir>/base, <build-dir>/<recipe>-share<X>); a run the time budget stops measures
nothing and the same command continues the builds. Writes prior_dial.json (a dict whose "points" list holds one
entry per share), prior_dial.md and prior_dial.png (kappa and format against the share) into --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python benchmarks/prior_dial.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.prior import measure  # noqa: E402
from benchmarks.report import write_report  # noqa: E402
from trainers.supervised.recipe import PRIORS, SIZES, Plan, Runtime, build, cold_start_share  # noqa: E402

DECODINGS = (("greedy", "greedy"), ("t07", "t0.7"))  # key suffix, prior.py's setting label


def point(plan: Plan, checkpoint: Path, entry: dict) -> dict:
    """One share's row: what was asked, what the corpus held, and the prior's measures."""
    row = {"share": plan.share, "corpus_tool_share": cold_start_share(checkpoint.parent), "checkpoint": str(checkpoint),
           "k": entry["k"]}
    for suffix, label in DECODINGS:
        s = entry["settings"][f"{label}/K{entry['k']}"]
        row.update({f"kappa_{suffix}": s["tool_calls"], f"format_{suffix}": s["format_common"],
                    f"accuracy_{suffix}": s["accuracy"]})
    return row


def markdown(results: dict) -> str:
    lines = [f"The prior dial: the {results['recipe']} recipe (seed {results['seed']}, size {results['size']}) at each "
             "share of tool-use traces in its cold-start data, on one perception base; "
             f"{results['episodes']} validation episodes per setting at the largest training K, oracle sub-agent, "
             f"{results['max_new_tokens']} new tokens per turn. kappa = executed tool calls per rollout; format = the "
             "common format metric; corpus share = the share of tool traces the cold-start corpus held.", "",
             "| share | corpus share | K | kappa greedy | kappa T=0.7 | format greedy | format T=0.7 | accuracy greedy "
             "| accuracy T=0.7 |", "|---|---|---|---|---|---|---|---|---|"]
    for p in results["points"]:
        corpus = "" if p["corpus_tool_share"] is None else f"{p['corpus_tool_share']:.3f}"
        lines.append(f"| {p['share']:g} | {corpus} | {p['k']} | {p['kappa_greedy']:.2f} | {p['kappa_t07']:.2f} | "
                     f"{p['format_greedy']:.3f} | {p['format_t07']:.3f} | {p['accuracy_greedy']:.3f} | "
                     f"{p['accuracy_t07']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares = [p["share"] for p in results["points"]]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, (key, title) in zip(axes, (("kappa", "kappa (executed calls / rollout)"), ("format", "common format"))):
        for suffix, label in (("greedy", "greedy"), ("t07", "T = 0.7")):
            ax.plot(shares, [p[f"{key}_{suffix}"] for p in results["points"]], marker="o", label=label)
        ax.set_xlabel("tool-trace share of the cold start")
        ax.set_title(title)
    axes[1].set_ylim(0, 1.05)
    axes[0].legend()
    fig.suptitle(f"The prior dial ({results['recipe']} recipe, {results['episodes']} episodes per point)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict | None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shares", default="0,0.25,0.5,0.75,1", help="comma list of tool-trace shares in [0, 1]")
    p.add_argument("--recipe", default="strong", choices=sorted(PRIORS),
                   help="the recipe whose cold-start data the dial changes (the rest of it is kept)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--size", choices=SIZES, default="full", help="tiny: every build at a few samples and steps")
    p.add_argument("--build-dir", default="runs/prior_dial", help="where the builds go (their shared base too)")
    p.add_argument("--out", default="runs/prior_dial", help="folder of prior_dial.json, .md and .png (the committed ones: benchmarks/results)")
    p.add_argument("--episodes", type=int, default=None, help="validation episodes per setting, a multiple of 6 "
                   "(default 96; 6 at --size tiny)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per turn (default 96; 16 at tiny)")
    p.add_argument("--batch-size", type=int, default=64, help="episodes rolled out together")
    p.add_argument("--base", default="", help="a finished base folder to build every point on (trainers/sft.py "
                   "--base); default: the one in --build-dir, built first")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    p.add_argument("--workers", type=int, default=None, help="corpus-rendering processes of the builds")
    p.add_argument("--time-budget-s", type=float, default=0.0, help="end the building after this many seconds "
                   "(0 = none); the same command continues")
    a = p.parse_args(argv)
    try:
        shares = [float(x) for x in a.shares.split(",") if x.strip()]
    except ValueError:
        p.error(f"--shares: a comma list of numbers, got {a.shares!r}")
    if not shares or any(not 0.0 <= x <= 1.0 for x in shares):
        p.error(f"--shares: numbers in [0, 1], got {a.shares!r}")
    tiny = a.size == "tiny"
    episodes = a.episodes or (6 if tiny else 96)
    max_new_tokens = a.max_new_tokens or (16 if tiny else 96)
    rt = Runtime.for_size(a.size, a.build_dir, a.device, a.workers, a.time_budget_s)
    plans = [Plan.of(a.recipe, a.seed, a.size, share) for share in shares]
    built = []
    for plan in plans:
        built.append(build(plan, a.build_dir, rt, base=a.base or None))
        if built[-1] is None:
            print("[prior_dial] the time budget stopped the builds; re-run the same command to continue",
                  file=sys.stderr)
            return None
    results = {"recipe": a.recipe, "seed": a.seed, "size": a.size, "episodes": episodes,
               "max_new_tokens": max_new_tokens, "device": a.device, "points": []}
    for plan, checkpoint in zip(plans, built):
        entry = measure(str(checkpoint), ("greedy/K", "t0.7/K"), episodes=episodes, max_new_tokens=max_new_tokens,
                        batch_size=a.batch_size, device=a.device, name=plan.name)
        results["points"].append(point(plan, checkpoint, entry))
    out = Path(a.out)
    write_report(out / "prior_dial", results, markdown(results))
    plot(results, out / "prior_dial.png")
    return results


if __name__ == "__main__":
    main()
