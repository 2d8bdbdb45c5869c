"""The default run's evaluation of one checkpoint on validation episodes FIRST..FIRST+N-1 (its envs, seeds and
rollout code: draw 0 is the trainer's own number), split into blocks of 24 episodes and by family, with how many
rollouts ended without an <answer> tag (the native dialect's "Answer: X") and how many looped a presence chain.

    python benchmarks/results/self_distill/revoice/blocks.py CHECKPOINT [FIRST N DRAW TEMPERATURE OUT.json]"""
import collections
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import torch  # noqa: E402

from trainers.core import EVAL_POOL, load_policy, parse_args, play_episodes, resolve_model  # noqa: E402
from trainers.para_grpo import Args  # noqa: E402
from trainers.rollouts import make_env  # noqa: E402

model = sys.argv[1]
first, n, draw = (int(x) for x in (sys.argv[2:5] + ["0", "120", "0"][len(sys.argv[2:5]):]))
temperature = float(sys.argv[5]) if len(sys.argv) > 5 else 0.6
torch.set_num_threads(1)
args = parse_args(Args, ["--model", model, "--device", "cpu", "--eval-first-episode", str(first),
                         "--eval-episodes", str(n)])
policy = load_policy(resolve_model(args), torch.device("cpu"))
policy.model.eval()
envs = [make_env(args, "validation", policy) for _ in range(min(n, EVAL_POOL))]
loop = re.compile(r"((?:\w+ ){1,3}\w+: no;) (?:\1 ?){2,}")  # the same check three times in a row
rows = []
with torch.no_grad():
    for idx, rs in play_episodes(policy, envs, args, list(range(first, first + n)), temperature=temperature,
                                 sub_temperature=args.eval_subagent_temperature, draw=draw):
        for i, r in zip(idx, rs):
            said = [str(m["content"]) for m in r.env.messages if m["role"] == "assistant"]
            rows.append({"episode": i, "family": r.env.episode.question.family, "correct": bool(r.info.get("correct")),
                         "looped": any(loop.search(t) for t in said), "tagged_answer": any("<answer>" in t for t in said),
                         "calls": len(r.env.executed_windows), "turns": said})
if len(sys.argv) > 6:
    Path(sys.argv[6]).write_text(json.dumps(rows, indent=0))
print(f"{model}: accuracy {sum(r['correct'] for r in rows) / len(rows):.3f} on episodes {first}-{first + n - 1} "
      f"(draw {draw}, T = {temperature:g}); blocks of 24:",
      [round(sum(r["correct"] for r in rows if lo <= r["episode"] < lo + 24) / 24, 3) for lo in range(first, first + n, 24)])
print("no <answer> tag:", sum(not r["tagged_answer"] for r in rows), "looped chains:", sum(r["looped"] for r in rows))
per = collections.defaultdict(list)
for r in rows:
    per[r["family"]].append(r["correct"])
print({f: round(sum(v) / len(v), 2) for f, v in sorted(per.items())})
