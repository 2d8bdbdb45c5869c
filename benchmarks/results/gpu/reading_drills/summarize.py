"""The table of README.md in this folder: every strong-prior SFT variant of the reading-drill
calls (benchmarks/gpu_variants.sh on 2x H200), its flags beyond the call's shared ones, and its
perception (benchmarks/perception.py) and tool prior (benchmarks/prior.py, where measured).

    python benchmarks/results/gpu/reading_drills/summarize.py   # rewrites table.md here
"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHOWN = ("stage1_frame", "stage1_caption", "stage1_direct", "stage1_tool", "stage1_reading", "stage1_direct_needle",
         "oracle_fraction", "grounded_think", "drill_weight", "reading_weight", "tool_weight", "stage1_lr")
# (call 2 ran before --reading-weight became --drill-weight; its sft_args.json says reading_weight)


def row(folder: Path) -> str:
    args = json.loads((folder / "sft_args.json").read_text())
    a, p = args["args"], json.loads((folder / "perception.json").read_text())
    d = p["details"]
    flags = ", ".join(f"{k.replace('stage1_', 's1 ')}={a.get(k)}" for k in SHOWN
                      if a.get(k) not in (None, 0, False) or k == "oracle_fraction")
    g, r = d["tool_gain_k4"], d["reading"]["by_family"]
    prior = "-"
    if (folder / "prior.json").is_file():
        s = json.loads((folder / "prior.json").read_text())["models"]["strong"]["settings"]
        prior = (f"{s['greedy/K64']['tool_calls']:.2f} / {s['t0.7/K64']['tool_calls']:.2f}, "
                 f"{s['greedy/K64']['format_common']:.2f} / {s['t0.7/K64']['format_common']:.2f}")
    return (f"| {folder.name} | {flags} | {args['stage1_steps_done']} | {p['frame_object_f1']:.3f} | "
            f"{p['crop_object_f1']:.3f} | {p['visible_evidence_accuracy']:.3f} | {p['tool_gain_k4']:+.3f} | "
            f"{g['with_tools']['accuracy']:.3f} ({g['with_tools']['tool_calls']:.1f}) | {p['reading_accuracy']:.3f} | "
            f"{r['needle']['accuracy']:.2f} / {r['needle_attribute']['accuracy']:.2f} | {prior} |")


def main():
    lines = ["| variant | flags | stage-1 steps | frame F1 | crop F1 | direct (overview shows it) | tool gain K=4 | "
             "acc with tools (calls/ep) | reading | reading needle / attr | prior K=64: kappa greedy / T0.7, "
             "format greedy / T0.7 |", "|---" * 11 + "|"]
    lines += [row(f) for f in sorted(HERE.iterdir()) if (f / "perception.json").is_file()]
    (HERE / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
