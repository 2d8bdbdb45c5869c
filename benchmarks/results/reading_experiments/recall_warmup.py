"""Does a dense, generic recall task form the lookup circuit that reading needs, and does it carry over?

The colour lookup of short_lookup.py ("red circle; blue star. What colour is the star? blue") is one target
per row and forms late, in a sudden jump (short_lookup.txt). Small transformers form in-context lookup
heads fast on tasks where EVERY position needs them: multi-query associative recall (key-value pairs, then
many queried keys, each a target) and repeated random spans (the second copy predictable only by looking
back). This script trains a model on those (`--recall-steps`), both directions (the value after a key, the
key before a value: the colour lookup reads backwards from the named shape), then on the colour lookup in
the captions' wording (`--lookup-steps`, short_lookup's task), printing held-out accuracy of both, so the
lookup's onset can be compared with short_lookup.txt's runs without the warm-up.

    PYTHONPATH=. python benchmarks/results/reading_experiments/recall_warmup.py --recall-steps 1500 --lookup-steps 1500
"""
import argparse
import time

import numpy as np
import short_lookup  # the script's own folder is on sys.path when run as a script
import torch

from agents.lmm.corpus import RECALL_MARKS, recall_row, recall_words
from agents.lmm.policy import TransformersPolicy
from agents.lmm.tiny_qwen import build_tiny_model, save_checkpoint


def pad(tok, rows):
    """Right-padded (ids, mask, targets) of (ids, target mask) rows; targets -100 off the mask."""
    return short_lookup.pad_rows(tok, [(list(i), [int(x) if m else -100 for x, m in zip(i, t)]) for i, t in rows])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", default="agents/lmm/checkpoints/tiny-strong/cold_start", help="'' for a random init")
    p.add_argument("--tokenizer", default="agents/lmm/checkpoints/tiny-strong/cold_start")
    p.add_argument("--recall-steps", type=int, default=1500)
    p.add_argument("--lookup-steps", type=int, default=1500)
    p.add_argument("--lookup-objects", default="2-6")
    p.add_argument("--recall-share", type=float, default=0.0, help="share of recall rows kept in the lookup stage")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--save", default=None)
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    tok = TransformersPolicy(a.tokenizer).tokenizer
    model = (TransformersPolicy(a.init).model if a.init else build_tiny_model(tok, seed=a.seed)).train()
    words = recall_words(tok)
    sep = [tok.encode(m, add_special_tokens=False)[0] for m in RECALL_MARKS]
    rng, held_rng = np.random.default_rng(a.seed), np.random.default_rng(10_000)
    held_recall = pad(tok, [recall_row(held_rng, words, sep) for _ in range(300)])
    held_lookup = {n: short_lookup.batch(tok, held_rng, 300, (n, n), "caption") for n in (2, 4, 6)}
    low, _, high = a.lookup_objects.partition("-")
    objects = (int(low), int(high or low))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.95))

    def loss_acc(ids, mask, targets):
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        t = targets[:, 1:]
        seen = t != -100
        return (torch.nn.functional.cross_entropy(logits[seen], t[seen]),
                float((logits[seen].argmax(-1) == t[seen]).float().mean()))

    def evaluate(step, loss, t0):
        model.eval()
        with torch.no_grad():
            acc = {"recall": loss_acc(*held_recall)[1]} | {f"lookup{n}": loss_acc(*b)[1] for n, b in held_lookup.items()}
        model.train()
        print(f"step {step} loss {loss:.3f} " + " ".join(f"{k} {v:.3f}" for k, v in acc.items())
              + f" ({time.time() - t0:.0f} s)", flush=True)

    t0 = time.time()
    evaluate(0, float("nan"), t0)
    for step in range(1, a.recall_steps + a.lookup_steps + 1):
        if step <= a.recall_steps:
            batch = pad(tok, [recall_row(rng, words, sep) for _ in range(a.batch_size)])
        else:
            n_recall = round(a.recall_share * a.batch_size)
            ids, mask, targets = short_lookup.batch(tok, rng, a.batch_size - n_recall, objects, "caption")
            if n_recall:
                r = pad(tok, [recall_row(rng, words, sep) for _ in range(n_recall)])
                width = max(ids.shape[1], r[0].shape[1])

                def widen(x, v, width=width):
                    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=v)
                ids = torch.cat([widen(ids, tok.pad_token_id), widen(r[0], tok.pad_token_id)])
                mask = torch.cat([widen(mask, 0), widen(r[1], 0)])
                targets = torch.cat([widen(targets, -100), widen(r[2], -100)])
            batch = ids, mask, targets
        loss, _ = loss_acc(*batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.eval_every == 0 or step == a.recall_steps:
            evaluate(step, loss.item(), t0)
    if a.save:
        save_checkpoint(a.save, model.eval(), tok, TransformersPolicy(a.tokenizer).image_processor)


if __name__ == "__main__":
    main()
