"""How long does the reward scorer take per trajectory, typical and hostile?

Median wall time of ``paravt_env.rewards.score`` over repeats, for a typical two-turn tool
trajectory, the longest trajectory the environment can produce (3 turns of 16,384 characters)
and 1 MB texts built to make backtracking regex parsers quadratic (thousands of unclosed tags,
long digit runs: the released regexes take ~17 s on a 30,000-digit run and grow with its square).

    python benchmarks/speed_reward.py --out benchmarks/results
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from paravt_env.rewards import RewardConfig, score

P = "<think>\n"
CALL = '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}</tool_call>'
RESP = "<tool_response>\ncrop_video 10.0-20.0 s (10 frames): Scenes: beach. Objects: red star at top-left.\n</tool_response>\n"
MB = 1_000_000
TEXTS = {
    "typical 2-turn trajectory": P + "The star shows up late, crop the end." * 3 + "</think>" + CALL + RESP
    + P + "The crop shows a red star, option B.</think><answer>B</answer>",
    "longest env trajectory (3 x 16 KB)": (P + "look " * 3270 + "</think>" + CALL + RESP) * 2
    + P + "ok " * 5450 + "</think><answer>B</answer>",
    "1 MB unclosed `<think>`": "<think>" * (MB // 7),
    "1 MB unclosed `<tool_call>`": "<tool_call>" * (MB // 11),
    "1 MB digit run": "<answer>" + "1" * MB + "</answer>",
    "1 MB digits and dots": "1." * (MB // 2),
    "1 MB closed empty calls": "<tool_call>{}</tool_call>" * (MB // 25),
    "1 MB words": "<think>\n" + "a red star " * (MB // 11),
}
CONFIGS = {"PARA-GRPO (released)": RewardConfig(),
           "vanilla (released)": RewardConfig(answer_suffix=False, anchor_lambda=0.0),
           "both switches on": RewardConfig(multi_turn_rules=True, option_text_match=True)}
TYPES = (("mcq", "B"), ("grounding", "12, 18"), ("open", "red star"))


def measure(repeats: int) -> dict:
    out = {}
    for name, text in TEXTS.items():
        out[name] = {"chars": len(text)}
        for cname, config in CONFIGS.items():
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for qtype, gt in TYPES:
                    score(text, ground_truth=gt, answer_type=qtype, options=["A. blue", "B. red star"], config=config)
                times.append((time.perf_counter() - t0) / len(TYPES))
            out[name][cname] = statistics.median(times)
    return out


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-3 else f"{seconds * 1e3:.1f} ms"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args()
    table = measure(a.repeats)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed_reward.json").write_text(json.dumps({"repeats": a.repeats, "seconds_per_score": table}, indent=2))
    lines = ["| text | chars | " + " | ".join(CONFIGS) + " |", "|---|---|" + "---|" * len(CONFIGS)]
    lines += [f"| {name} | {row['chars']:,} | " + " | ".join(fmt(row[c]) for c in CONFIGS) + " |"
              for name, row in table.items()]
    md = "\n".join(lines)
    (out / "speed_reward.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
