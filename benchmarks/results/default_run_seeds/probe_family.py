"""Play one LMM checkpoint (the trainer's eval settings, sub-agent = the policy) on validation episodes of one
family and print each transcript's turns, the answer and whether it was right.

    python benchmarks/results/default_run_seeds/probe_family.py CHECKPOINT FAMILY N FIRST [TEMPERATURE]

plays the first N episodes of FAMILY from validation episode FIRST (episode i reset with seed 10000 + i, as the
trainer's evaluation does), at TEMPERATURE (default 0.6, the evaluation's)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch  # noqa: E402
from trainers.core import parse_args, load_policy
from trainers.para_grpo import Args
from trainers.rollouts import make_env, collect_rollouts, subagent_passes

model, family, n, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
temp = float(sys.argv[5]) if len(sys.argv) > 5 else 0.6
torch.set_num_threads(1)
args = parse_args(Args, ["--model", model, "--device", "cpu"])
policy = load_policy(model, torch.device("cpu"))
env0 = make_env(args, "validation", policy)
ds = env0.dataset
idx = [i for i in range(first, first + 6 * n * 3) if ds.families[i % len(ds.families)] == family][:n]
envs = [make_env(args, "validation", policy) for _ in idx]
rs = collect_rollouts(policy, envs, [10000 + i for i in idx], list(range(len(idx))), temperature=temp, top_p=1.0,
                      max_new_tokens=args.max_new_tokens, sub_max_new_tokens=args.subagent_max_new_tokens,
                      sub_frames_per_pass=subagent_passes(args), think_prefix=args.think_prefix, gen_seed=1,
                      reset_options=[{"episode_index": i} for i in idx])
right = 0
for i, r in zip(idx, rs):
    e = r.env
    q = e.episode.question
    ok = bool(r.info.get("correct"))
    right += ok
    print(f"=== ep {i} K={len(e.overview.timestamps)} correct={ok} calls={len(e.executed_windows)}")
    print("Q:", q.text.replace("\n", " | ")[:300], "| answer", q.answer)
    for m in e.messages[2:]:
        t = str(m["content"])
        print(f"  [{m['role']}] {t[:700]}")
print("accuracy", right / len(idx))
