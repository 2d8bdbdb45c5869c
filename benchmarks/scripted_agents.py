"""Every scripted agent at K=4, K=64 and with nFrames gating, on the same validation episodes.

    python benchmarks/scripted_agents.py --episodes 240 --out benchmarks/results
"""

import argparse
import json
from pathlib import Path

from paravt_env.questions import FAMILIES
from agents.evaluate import evaluate
from agents.scripted import AGENTS

SETTINGS = {"K=4": {"frame_budget": 4}, "K=64": {"frame_budget": 64}, "gated": {"nframes_gating": True}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=240)
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args()
    rows = []
    for name in AGENTS:
        for setting, kw in SETTINGS.items():
            dispatch = "sequential" if name == "sequential" else "parallel"
            r = evaluate(name, a.episodes, split="validation", dispatch=dispatch, **kw)
            rows.append({"setting": setting, **r})
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scripted_agents.json").write_text(json.dumps(rows, indent=2))
    short = {"needle": "needle", "needle_attribute": "attr", "counting": "count", "temporal_order": "order",
             "grounding": "ground", "global": "global"}
    lines = ["| agent | K | accuracy | " + " | ".join(short[f] for f in FAMILIES)
             + " | format | tool calls/ep | ms/episode |",
             "|---|---|---|" + "---|" * len(FAMILIES) + "---|---|---|"]
    for r in rows:
        fam = " | ".join(f"{r['accuracy_per_family'].get(f, float('nan')):.2f}" for f in FAMILIES)
        lines.append(f"| {r['agent']} | {r['setting']} | {r['accuracy']:.3f} | {fam} | {r['format_reward']:.2f} | "
                     f"{r['tool_calls_per_episode']:.2f} | {1e3 * r['wall_seconds'] / r['episodes']:.1f} |")
    md = "\n".join(lines)
    (out / "scripted_agents.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
