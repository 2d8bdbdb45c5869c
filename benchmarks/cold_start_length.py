"""The tool prior against the cold-start length: stage 2 of trainers/sft.py run for L steps from the
same stage-1 base, then the tool-prior measures of benchmarks/prior.py at the fixed K.

    python benchmarks/cold_start_length.py --base-strong B/strong/base --base-weak B/weak/base \\
        --lengths 0,25,50,100,200 --out benchmarks/results/cold_start_length

Stage 1 decides the prior (the strong base has practised tool calls in its own dialect, the weak
base never has); the cold start (stage 2: ParaVT-format tool traces, direct answers, caption
rehearsal) teaches both the same grammar. Its length is the knob: L = 0 is the base itself.
--native-shares adds a second knob for the strong prior: the share of the format markers of its cold-start
tool traces and direct answers written in its native dialect (trainers/sft.py --stage2-native-share), a cold start that leaves
the native habit beside the ParaVT one; each (L, share) is its own build. --native-by trace makes the share that of
whole rollouts played in the native dialect instead (--stage2-native-traces; their turns open per --native-think). --base-weak is optional. Each
(prior, L) is built once into --build-dir (a rerun reuses finished builds) with the stage-2 settings
given here (batch, lr; warm-up over the first half of the steps, as in the shipped 200-step cold
start) and the gpu preset's stage-2 data, then rolled out on --episodes validation
episodes greedy and at T = 0.7 with the oracle sub-agent (the same rollouts and summaries as
benchmarks/prior.py). Writes <--out>.json, .md (one row per prior and L, with the paper's targets)
and .png (format greedy vs T = 0.7 and kappa against L, one panel per prior).
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python benchmarks/cold_start_length.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.evaluate_lmm import rollouts, summarize, training_budgets, world_config_of  # noqa: E402
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from benchmarks.prior import contrast  # noqa: E402
from benchmarks.report import write_report  # noqa: E402
from trainers import sft  # noqa: E402


def build(prior: str, base: str, steps: int, a, share: float = 0.0) -> str:
    """The cold start of ``steps`` stage-2 steps from ``base`` (stage 1 skipped), with ``share`` of its
    format markers (or rollouts, ``--native-by trace``) in the native dialect; its directory. The folder
    name ends in a hash of every flag that shapes what is learned, so builds of different recipes never
    share one."""
    if steps == 0:
        return base
    flag = {"marker": "--stage2-native-share", "trace": "--stage2-native-traces"}[a.native_by]
    recipe = ["--preset", "gpu", "--tool-prior", prior, "--init-from", base,
              "--stage1-frame", "0", "--stage1-caption", "0", "--stage1-direct", "0",
              "--stage1-tool", "0", "--stage1-steps", "0", "--stage2-steps", str(steps),
              "--stage2-lr", str(a.stage2_lr), "--warmup", str(max(1, steps // 2)),
              flag, str(share), "--native-think", a.native_think,
              "--native-close-think-p", str(a.native_close_think_p),
              "--batch-size", str(a.batch_size), "--batch-tokens", str(a.batch_size * 256)] + shlex.split(a.sft_args)
    tag = hashlib.sha1(" ".join(recipe).encode()).hexdigest()[:8]
    out = Path(a.build_dir) / (f"{prior}_L{steps}" + (f"_native{share:g}" if share else "") + f"_{tag}")
    if (out / "cold_start" / "config.json").is_file() and (out / "sft_args.json").is_file():
        return str(out / "cold_start")
    args = sft.parse_args(recipe + ["--device", a.device, "--workers", str(a.workers), "--time-budget-s", "0",
                                    "--eval-every", "0", "--eval-frames", "16", "--eval-crops", "8",
                                    "--no-progress", "--out", str(out),
                                    "--runs-dir", str(Path(a.build_dir) / "tb")])
    return str(sft.main(args))


def measure(path: str, a) -> dict:
    policy, wc = TransformersPolicy(path, device=a.device), world_config_of(path)
    k = a.k or max(training_budgets(path))
    entry = {"checkpoint": path, "k": k, "settings": {}}
    for label, temp in (("greedy", 0.0), ("t0.7", 0.7)):
        t = time.time()
        s = summarize(rollouts(policy, wc, episodes=a.episodes, temperature=temp, gating=False, frame_budget=k,
                               max_new_tokens=a.max_new_tokens, batch_size=a.rollout_batch))
        s["seconds"] = time.time() - t
        entry["settings"][f"{label}/K{k}"] = s
    return entry


def markdown(results: dict) -> str:
    lines = [f"The tool prior against the cold-start length (stage-2 steps of batch {results['batch_size']}, lr "
             f"{results['stage2_lr']}, from the same stage-1 base; {results['episodes']} validation episodes per "
             "setting at the fixed K, oracle sub-agent; format = the common format metric; kappa = executed calls "
             "per rollout; native share = "
             + {"marker": "the share of the cold start's format markers written the native way",
                "trace": "the share of the cold start's rollouts played wholly in the native dialect"}[
                 results.get("native_by", "marker")]
             + (f", native turns opened {results['native_think']}" if results.get("native_think", "fixed") != "fixed"
                else "")
             + (f", closing </think> with probability {results['native_close_think_p']:g}"
                if results.get("native_close_think_p", 0.3) != 0.3 else "")
             + (f"; builds also given `{results['sft_args']}`" if results.get("sft_args") else "")
             + "). L = 0 is the base without a cold start"
             + (": " + ", ".join(f"{prior} {path}" for prior, path in results["bases"].items()) if "bases" in results
                else "") + ".", "",
             "| prior | L | native share | format greedy | format T=0.7 | kappa greedy | kappa T=0.7 | accuracy greedy "
             "| targets |", "|---|---|---|---|---|---|---|---|---|"]
    for prior, by_len in results["priors"].items():
        for key, entry in by_len.items():
            steps, share = split_key(key)
            row = contrast({"models": {prior: entry}})[0]
            acc = entry["settings"][f"greedy/K{entry['k']}"]["correct"]
            tg = "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in row["targets"].items())
            lines.append(f"| {prior} | {steps} | {share:g} | {row['format_greedy']:.3f} | {row['format_t07']:.3f} | "
                         f"{row['kappa_greedy']:.2f} | {row['kappa_t07']:.2f} | {acc:.3f} | {tg} |")
    return "\n".join(lines) + "\n"


def row_key(steps: int, share: float) -> str:
    """A result's key: the length, and the native share when there is one ("50", "50@0.4")."""
    return f"{steps}@{share:g}" if share else str(steps)


def split_key(key: str) -> tuple[int, float]:
    steps, _, share = key.partition("@")
    return int(steps), float(share or 0)


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(prior, split_key(key)[1]) for prior, by_len in results["priors"].items() for key in by_len})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.4), squeeze=False)
    for ax, (prior, share) in zip(axes[0], panels):
        entries = sorted((split_key(k), e) for k, e in results["priors"][prior].items())
        entries = [(steps, e) for (steps, s), e in entries if s == share or steps == 0]  # the base starts every line
        xs = [steps for steps, _ in entries]
        rows = [contrast({"models": {prior: e}})[0] for _, e in entries]
        ax.plot(xs, [r["format_greedy"] for r in rows], "o-", label="format, greedy")
        ax.plot(xs, [r["format_t07"] for r in rows], "o--", label="format, T = 0.7")
        ax.set_xlabel("cold-start length (stage-2 steps)")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{prior} prior" + (f", native share {share:g}" if share else ""))
        twin = ax.twinx()
        twin.plot(xs, [r["kappa_greedy"] for r in rows], "s-", color="tab:red", label="kappa, greedy")
        twin.plot(xs, [r["kappa_t07"] for r in rows], "s--", color="tab:pink", label="kappa, T = 0.7")
        twin.set_ylabel("kappa (executed calls / rollout)")
        twin.set_ylim(0, max(1.0, *[max(r["kappa_greedy"], r["kappa_t07"]) for r in rows]) * 1.1)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = twin.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-strong", required=True, help="the strong prior's stage-1 base checkpoint")
    p.add_argument("--base-weak", help="the weak prior's stage-1 base checkpoint (none: the strong prior only)")
    p.add_argument("--native-shares", default="0",
                   help="strong prior: shares of native-dialect format markers in its cold start, comma-separated "
                        "(trainers/sft.py --stage2-native-share), or of whole rollouts with --native-by trace")
    p.add_argument("--native-by", choices=("marker", "trace"), default="marker",
                   help="what --native-shares counts: format markers, each drawn on its own, or whole rollouts")
    p.add_argument("--native-think", choices=("fixed", "varied", "spread"), default="fixed",
                   help="how native turns of the cold start open (trainers/sft.py --native-think)")
    p.add_argument("--sft-args", default="",
                   help="more trainers/sft.py flags for every build, e.g. the base's think style: "
                        "'--grounded-think --option-think --direct-think needle' (the shipped strong's)")
    p.add_argument("--native-close-think-p", type=float, default=0.3,
                   help="probability a native turn of the cold start closes </think> (trainers/sft.py)")
    p.add_argument("--lengths", default="0,25,50,100,200", help="stage-2 step counts, comma-separated")
    p.add_argument("--batch-size", type=int, default=64, help="stage-2 sequences per step")
    p.add_argument("--stage2-lr", type=float, default=4e-4)
    p.add_argument("--episodes", type=int, default=24, help="validation episodes per setting (multiple of 6)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--k", type=int, help="fixed overview size (default: the largest training K)")
    p.add_argument("--rollout-batch", type=int, default=24)
    p.add_argument("--workers", type=int, default=2, help="corpus workers")
    p.add_argument("--device", default="cpu")
    p.add_argument("--build-dir", default="runs/cold_start_length")
    p.add_argument("--out", default="runs/benchmarks/cold_start_length")
    a = p.parse_args(argv)
    lengths = [int(x) for x in a.lengths.split(",")]
    if any(n < 0 for n in lengths):
        p.error("--lengths must be >= 0")
    shares = [float(x) for x in a.native_shares.split(",")]
    if any(not 0 <= s <= 1 for s in shares):
        p.error("--native-shares must be in [0, 1]")
    bases = [("strong", a.base_strong)] + ([("weak", a.base_weak)] if a.base_weak else [])
    results = {"batch_size": a.batch_size, "stage2_lr": a.stage2_lr, "episodes": a.episodes, "bases": dict(bases),
               "native_by": a.native_by, "native_think": a.native_think,
               "native_close_think_p": a.native_close_think_p, "sft_args": a.sft_args, "priors": {}}
    for prior, base in bases:
        results["priors"][prior] = {}
        runs = ([(0, 0.0)] if 0 in lengths else []) + [  # the base (L = 0) once, whatever the share
            (steps, share) for share in (shares if prior == "strong" else [0.0]) for steps in lengths if steps]
        for steps, share in runs:
            t = time.time()
            entry = measure(build(prior, base, steps, a, share), a)
            entry["seconds"] = time.time() - t
            results["priors"][prior][row_key(steps, share)] = entry
            row = contrast({"models": {prior: entry}})[0]
            print(f"{prior} L={steps} native share {share:g}: format {row['format_greedy']:.3f} / {row['format_t07']:.3f}, kappa "
                  f"{row['kappa_greedy']:.2f} / {row['kappa_t07']:.2f} ({entry['seconds']:.0f} s)", flush=True)
            out = write_report(a.out, results, markdown(results))  # after every point: a cut run keeps what it has
    plot(results, Path(f"{out}.png"))
    print(markdown(results))
    return results


if __name__ == "__main__":
    main()
