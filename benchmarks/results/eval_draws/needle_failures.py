"""Where a checkpoint's needle-type episodes fail, step by step: one draw (generation seed 1, not the trainer's draw 0)
under the default run's evaluation settings (sub-agent = the policy, gated K, T = 0.6 unless given) on the needle and
needle_attribute episodes of validation 0..N-1, each episode put in the first of these that holds:

  no call             it answered from the overview
  frames miss         no crop it ran sampled a frame inside the evidence window
  response lacks it   a frame did, but no tool response names the right object
  response has it     some tool response names it; then right or wrong is the reading

    python benchmarks/results/eval_draws/needle_failures.py CHECKPOINT [N TEMPERATURE] [-- TRAINER FLAGS...]"""
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch  # noqa: E402

from trainers.core import load_policy, parse_args  # noqa: E402
from trainers.para_grpo import Args  # noqa: E402
from trainers.rollouts import collect_rollouts, make_env, subagent_passes  # noqa: E402

CATEGORIES = ("no call", "frames miss", "response lacks it", "response has it")


def right_object(question) -> str:
    """What a tool response must name for the question to be answerable from it."""
    if question.family == "needle_attribute":
        return f"{question.answer} {question.text.split('large ')[1].split(' that')[0]}"
    return question.options[ord(str(question.answer)) - ord("A")]


def category(env) -> str:
    question, windows = env.episode.question, env.executed_windows
    if not windows:
        return "no call"
    if not any(a <= t <= b for w in windows for t in env._crop(w).timestamps for a, b in question.evidence):
        return "frames miss"
    said = " ".join(str(m["content"]) for m in env.messages[2:] if m["role"] == "user")
    return "response has it" if right_object(question) in said else "response lacks it"


def main():
    argv, flags = (sys.argv[1:], []) if "--" not in sys.argv else (sys.argv[1:sys.argv.index("--")],
                                                                    sys.argv[sys.argv.index("--") + 1:])
    model, n, temperature = argv[0], int(argv[1]) if len(argv) > 1 else 120, float(argv[2]) if len(argv) > 2 else 0.6
    torch.set_num_threads(1)
    args = parse_args(Args, flags + ["--model", model, "--device", "cpu"])
    policy = load_policy(model, torch.device("cpu"))
    families = make_env(args, "validation", policy).dataset.families
    episodes = [i for i in range(n) if families[i % len(families)] in ("needle", "needle_attribute")]
    envs = [make_env(args, "validation", policy) for _ in episodes]
    rollouts = collect_rollouts(policy, envs, [10_000 + i for i in episodes], list(range(len(episodes))),
                                temperature=temperature, top_p=1.0, max_new_tokens=args.max_new_tokens,
                                sub_max_new_tokens=args.subagent_max_new_tokens,
                                sub_frames_per_pass=subagent_passes(args), think_prefix=args.think_prefix, gen_seed=1,
                                reset_options=[{"episode_index": i} for i in episodes])
    counts = Counter((r.env.episode.question.family, category(r.env), bool(r.info.get("correct"))) for r in rollouts)
    print(f"{model}: {len(episodes)} needle-type episodes of validation 0-{n - 1}, T = {temperature:g}, "
          f"accuracy {sum(bool(r.info.get('correct')) for r in rollouts) / len(rollouts):.3f}")
    print("| family | " + " | ".join(CATEGORIES) + " |\n|---|" + "---|" * len(CATEGORIES))
    for family in ("needle", "needle_attribute"):
        cells = [f"{counts[(family, c, True)] + counts[(family, c, False)]} ({counts[(family, c, True)]} right)"
                 for c in CATEGORIES]
        print(f"| {family} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
