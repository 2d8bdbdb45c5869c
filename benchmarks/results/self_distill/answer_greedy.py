"""How much of the gap between greedy and sampled (T = 0.6) accuracy sits in the answer's own tokens: the default
run's evaluation (trainers.core.evaluation_records, the trainer's envs and seeds, as call_spread.py) with every token
sampled ("sampled"), every token greedy ("greedy"), or sampled except inside <answer> ... </answer>, where the argmax
is taken ("answer_greedy"). BUDGETS=4 in the environment sets the gating set.

    python benchmarks/results/self_distill/answer_greedy.py CKPT|- MODE FIRST N OUT.json"""
import json
import os
import sys
from pathlib import Path

import torch
from transformers import LogitsProcessor

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "trainers"))

from para_grpo import Args  # noqa: E402
from trainers.core import Dist, evaluation_records, load_policy, resolve_model  # noqa: E402
from trainers.rollouts import make_env  # noqa: E402


class GreedyInAnswer(LogitsProcessor):
    """Rows whose newest <answer> is still open get a one-hot distribution on their argmax."""

    def __init__(self, open_id: int, close_id: int, prompt_len: int):
        self.open_id, self.close_id, self.prompt_len = open_id, close_id, prompt_len

    def __call__(self, input_ids, scores):
        gen = input_ids[:, self.prompt_len:]
        if gen.shape[1] == 0:
            return scores
        idx = torch.arange(gen.shape[1], device=gen.device)
        last_open = torch.where(gen == self.open_id, idx, -1).max(1).values
        last_close = torch.where(gen == self.close_id, idx, -1).max(1).values
        inside = (last_open >= 0) & (last_open > last_close)
        if not inside.any():
            return scores
        forced = torch.full_like(scores, float("-inf")).scatter_(1, scores.argmax(-1, keepdim=True), 0.0)
        return torch.where(inside[:, None], forced, scores)


def main():
    ckpt, mode, first, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.set_num_threads(1)
    args = Args()
    args.model = "" if ckpt == "-" else ckpt
    args.eval_temperature = 0.0 if mode == "greedy" else 0.6
    args.eval_first_episode, args.eval_episodes = first, n
    args.gating_budgets = os.environ.get("BUDGETS", args.gating_budgets)
    policy = load_policy(resolve_model(args), torch.device("cpu"))
    assert policy.generation_cache == "dynamic", policy.generation_cache  # the processor rides on model.generate
    policy.model.eval()
    if mode == "answer_greedy":
        tok = policy.tokenizer
        ids = tok.convert_tokens_to_ids("<answer>"), tok.convert_tokens_to_ids("</answer>")
        generate = policy.model.generate

        def patched(**kw):
            kw["logits_processor"] = [GreedyInAnswer(*ids, kw["input_ids"].shape[1])] + list(kw["logits_processor"])
            return generate(**kw)
        policy.model.generate = patched
    envs = [make_env(args, "validation", policy) for _ in range(min(n, 32))]  # the trainer's pool size
    with torch.no_grad():
        rows = evaluation_records(policy, envs, args, Dist())
    acc = sum(r["correct"] for r in rows) / len(rows)
    Path(out).write_text(json.dumps({"mode": mode, "acc": acc, "rows": [
        {"episode": r["episode"], "family": r["family"], "correct": r["correct"], "fmt": r["format_reward_common"],
         "calls": r["executed"]} for r in rows]}))
    print(mode, acc)


if __name__ == "__main__":
    main()
