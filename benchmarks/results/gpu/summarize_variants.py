"""The table of a folder of SFT variants (benchmarks/gpu_variants.sh: one sub-folder each, with
its sft_args.json, perception.json and, where measured, prior.json): its flags, its perception
(benchmarks/perception.py) and tool prior (benchmarks/prior.py).

    python benchmarks/results/gpu/summarize_variants.py benchmarks/results/gpu/reading_drills   # rewrites table.md there
    python benchmarks/results/gpu/summarize_variants.py benchmarks/results/gpu/recall
"""
import json
import sys
from pathlib import Path

SHOWN = ("tool_prior", "stage1_frame", "stage1_caption", "stage1_direct", "stage1_tool", "stage1_reading", "stage1_direct_needle",
         "stage1_recall", "recall_weight", "recall_warmup_steps", "recall_warmup_share", "recall_warmup_lr",
         "native_think", "oracle_fraction", "reading_oracle_fraction", "grounded_think", "option_think", "direct_think",
         "drill_weight", "reading_weight", "tool_weight", "stage1_lr", "search_agent", "caption_aug_p",
         "caption_max_frames", "init_from")
# (call 2 ran before --reading-weight became --drill-weight; its sft_args.json says reading_weight)


def row(folder: Path) -> str:
    args = json.loads((folder / "sft_args.json").read_text())
    a, p = args["args"], json.loads((folder / "perception.json").read_text())
    d = p["details"]
    idle = {"native_think": "fixed", "recall_warmup_share": 1.0, "recall_warmup_lr": 1e-3, "recall_weight": 1.0,
            "direct_think": "none", "search_agent": "scene", "caption_aug_p": 0.25, "caption_max_frames": "8,16"}
    flags = ", ".join(f"{k.replace('stage1_', 's1 ')}={a.get(k)}" for k in SHOWN
                      if (a.get(k) not in (None, 0, False) and a.get(k) != idle.get(k)) or k == "oracle_fraction")
    g, r = d["tool_gain_k4"], d["reading"]["by_family"]
    prior = "-"
    if (folder / "prior.json").is_file():
        s = json.loads((folder / "prior.json").read_text())["models"]["strong"]["settings"]
        prior = (f"{s['greedy/K64']['tool_calls']:.2f} / {s['t0.7/K64']['tool_calls']:.2f}, "
                 f"{s['greedy/K64']['format_common']:.2f} / {s['t0.7/K64']['format_common']:.2f}")
    env_crops = f"{d['crops_env_default']['object_f1']:.3f}" if "crops_env_default" in d else "-"
    return (f"| {folder.name} | {flags} | {args['stage1_steps_done']} | {p['frame_object_f1']:.3f} | "
            f"{p['crop_object_f1']:.3f} | {env_crops} | {p['visible_evidence_accuracy']:.3f} | {p['tool_gain_k4']:+.3f} | "
            f"{g['with_tools']['accuracy']:.3f} ({g['with_tools']['tool_calls']:.1f}) | {p['reading_accuracy']:.3f} | "
            f"{r['needle']['accuracy']:.2f} / {r['needle_attribute']['accuracy']:.2f} | {prior} |")


def main(folder: str):
    here = Path(folder)
    lines = ["| variant | flags | stage-1 steps | frame F1 | crop F1 | crop F1 default env | direct (overview shows it) | tool gain K=4 | "
             "acc with tools (calls/ep) | reading | reading needle / attr | prior K=64: kappa greedy / T0.7, "
             "format greedy / T0.7 |", "|---" * 12 + "|"]
    lines += [row(f) for f in sorted(here.iterdir()) if (f / "perception.json").is_file()]
    (here / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent / "reading_drills"))
