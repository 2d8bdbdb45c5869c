"""One line per checkpoint (direct answers: the mean over the held-out draws, then each draw) of a results folder: perception (p_NAME_sSEED.json) and tool prior (prior_NAME.md).

    python benchmarks/cold_start_lineage/summarise.py DIR"""
import json
import sys
from collections import defaultdict
from pathlib import Path

root = Path(sys.argv[1])
perception = defaultdict(dict)
for f in sorted(root.glob("p_*_s*.json")):
    name, seed = f.stem[2:].rsplit("_s", 1)
    perception[name][int(seed)] = json.loads(f.read_text())
for name, draws in sorted(perception.items()):
    pooled = [d["visible_evidence_accuracy"] for d in draws.values()]
    line = f"{name}: direct {sum(pooled) / len(pooled):.3f} (draws " + " ".join(f"{x:.3f}" for x in pooled) + ")"
    for family in ("needle", "needle_attribute", "global"):
        acc = [d["details"]["visible_evidence"]["by_family"][family]["accuracy"] for d in draws.values()]
        line += f", {family} {sum(acc) / len(acc):.3f} (" + " ".join(f"{x:.3f}" for x in acc) + ")"
    if 0 in draws and "frame_object_f1" in draws[0]:
        d = draws[0]
        line += f"; frame F1 {d['frame_object_f1']:.3f} scene {d['scene_accuracy']:.3f} crop F1 {d['crop_object_f1']:.3f}"
        if "tool_gain_k4" in d:
            line += f" gain {d['tool_gain_k4']:+.3f} reading {d.get('reading_accuracy', float('nan')):.3f}"
    prior = root / f"prior_{name}.md"  # its K = 64 row: format greedy | T = 0.7 | kappa greedy | T = 0.7
    rows = [r for r in prior.read_text().splitlines() if r.startswith(("| strong | 64 |", "| weak | 64 |"))] if prior.exists() else []
    if rows:
        line += "; prior " + " / ".join(c.strip() for c in rows[0].split("|")[3:7])
    print(line)
