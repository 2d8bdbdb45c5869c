"""The multi-object lookup stripped to its core, small enough for this CPU: does the tiny text model learn it?

lookup_probe.py's multi form (drill-shaped conversations of ~300 tokens) plateaus at ~40 % colour
accuracy on a GPU, from the cold start and from random init alike. Here the same lookup sits in one short
line: N objects of distinct shapes, then a question naming one shape; the only target is the colour token
before that shape ("red circle; blue star. What colour is the star? blue"). `bare` lists "colour shape";
`caption` writes each as the env's captions do ("blue star at top-left (12.0 s)"), so the lookup must skip
more tokens. A randomly initialised model of the shipped tiny shape (or --text-config overrides) trains on
fresh examples; held-out accuracy is printed as it trains (chance 1/8).

    PYTHONPATH=. python benchmarks/results/reading_experiments/short_lookup.py --objects 4 --form bare --steps 1500
"""
import argparse
import ast
import time

import numpy as np
import torch

from agents.lmm.policy import TransformersPolicy
from agents.lmm.tiny_qwen import build_tiny_model
from paravt_env.world import COLOURS, POSITIONS, SHAPES

COLOUR_NAMES = tuple(COLOURS)


def example(rng: np.random.Generator, n: int, form: str) -> tuple[str, str]:
    shapes = rng.choice(len(SHAPES), n, replace=False)
    colours = rng.integers(len(COLOUR_NAMES), size=n)
    t = float(rng.uniform(0, 500))
    items = []
    for k, (c, s) in enumerate(zip(colours, shapes)):
        item = f"{COLOUR_NAMES[c]} {SHAPES[s]}"
        if form == "caption":
            item += f" at {POSITIONS[int(rng.integers(len(POSITIONS)))]} ({t + 7 * k:.1f} s)"
        items.append(item)
    target = int(rng.integers(n))
    return f"Objects: {'; '.join(items)}. What colour is the {SHAPES[shapes[target]]}?", COLOUR_NAMES[colours[target]]


def batch(tok, rng, size: int, n: int, form: str):
    rows = [example(rng, n, form) for _ in range(size)]
    prompts = [tok.encode(q, add_special_tokens=False) for q, _ in rows]
    answers = [tok.encode(" " + a, add_special_tokens=False)[0] for _, a in rows]  # " colour" is one token
    width = max(map(len, prompts))
    ids = torch.full((size, width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros(size, width, dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: the answer is predicted at the last position
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask, torch.tensor(answers)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="agents/lmm/checkpoints/tiny-strong/cold_start", help="its tokenizer")
    p.add_argument("--objects", type=int, default=4)
    p.add_argument("--form", choices=("bare", "caption"), default="bare")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--text-config", default="", metavar="NAME=VALUE,...", help="text config overrides")
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    tok = TransformersPolicy(a.checkpoint).tokenizer
    overrides = {k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in a.text_config.split(",") if kv)}
    model = build_tiny_model(tok, seed=a.seed, **overrides).train()
    rng, held_rng = np.random.default_rng(a.seed), np.random.default_rng(10_000)
    held = batch(tok, held_rng, 500, a.objects, a.form)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.95))

    def answer_logits(ids, mask):
        return model(input_ids=ids, attention_mask=mask).logits[:, -1]

    t0 = time.time()
    for step in range(1, a.steps + 1):
        ids, mask, answers = batch(tok, rng, a.batch_size, a.objects, a.form)
        loss = torch.nn.functional.cross_entropy(answer_logits(ids, mask), answers)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                accuracy = float((answer_logits(*held[:2]).argmax(-1) == held[2]).float().mean())
            model.train()
            print(f"step {step} loss {loss.item():.3f} held-out accuracy {accuracy:.3f} ({time.time() - t0:.0f} s)",
                  flush=True)


if __name__ == "__main__":
    main()
