"""How much accuracy signal a PARA-GRPO group carries: the default run's first STEPS steps of prompts (2 a step,
G = 8, T = 0.7, the trainer's own envs, seeds and rollout code), played by CHECKPOINT without training. Per group:
do its 8 rollouts differ in accuracy (the only groups where answering right changes the advantage), and how much of
its reward spread comes from accuracy, format and R_tool. Also: how many rollouts earn R_tool's parseable-call credit
while the environment ran none of their calls (the first one printed in full).

    python benchmarks/results/rl_dose/group_signal.py CHECKPOINT [STEPS]"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "trainers"))

from para_grpo import Args  # noqa: E402
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from trainers.rollouts import collect_rollouts, derive_seed, make_env, subagent_passes  # noqa: E402

ckpt, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
args = Args()
policy = TransformersPolicy(ckpt)
n_env = args.prompts_per_step * args.group_size
envs = [make_env(args, "train", policy) for _ in range(n_env)]
groups_out, unexecuted = [], []
for step in range(1, steps + 1):
    prompt_seeds = [derive_seed(args.seed, step, 0, p) for p in range(args.prompts_per_step)]
    seeds = [prompt_seeds[i // args.group_size] for i in range(n_env)]
    groups = [i // args.group_size for i in range(n_env)]
    rs = collect_rollouts(policy, envs, seeds, groups, temperature=args.temperature, top_p=args.top_p,
                          max_new_tokens=args.max_new_tokens, sub_max_new_tokens=args.subagent_max_new_tokens,
                          sub_frames_per_pass=subagent_passes(args), think_prefix=args.think_prefix,
                          gen_seed=derive_seed(args.seed, step, 0, 999))
    unexecuted += [r.env.trajectory for r in rs  # the envs are reused: keep the text, not the env
                   if r.info["reward_components"].get("tool/parseable", 0) > 0 and r.info["num_tool_calls"] == 0]
    for g in range(args.prompts_per_step):
        mine = [r for r in rs if r.group == g]
        comp = lambda k: np.array([r.info["reward_components"].get(k, 0.0) for r in mine])  # noqa: E731
        groups_out.append({"family": mine[0].info["family"], "acc": comp("accuracy"), "fmt": comp("format"),
                           "tool": comp("tool"), "reward": np.array([r.reward for r in mine])})
mixed = [g for g in groups_out if 0 < g["acc"].mean() < 1]
print(f"{ckpt}: {len(groups_out)} groups of {args.group_size}; accuracy {np.mean([g['acc'].mean() for g in groups_out]):.3f}")
print(f"groups whose rollouts differ in accuracy: {len(mixed)} of {len(groups_out)}; all right: "
      f"{sum(g['acc'].mean() == 1 for g in groups_out)}; all wrong: {sum(g['acc'].mean() == 0 for g in groups_out)}")
for k in ("acc", "fmt", "tool", "reward"):
    print(f"mean within-group std of {k}: {np.mean([g[k].std() for g in groups_out]):.3f}")
print(f"rollouts with parseable-call credit and no executed call: {len(unexecuted)} of {len(groups_out) * args.group_size}")
if unexecuted:
    print("the first:", unexecuted[0][:1500])
