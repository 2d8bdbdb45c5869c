"""The multi-object lookup stripped to its core, small enough for this CPU: does the tiny text model learn it?

lookup_probe.py's multi form (drill-shaped conversations of ~300 tokens) plateaus at ~40 % colour
accuracy on a GPU, from the cold start and from random init alike. Here the same lookup sits in one short
line: N objects of distinct shapes, then a question naming one shape; the target is the colour token
before that shape ("red circle; blue star. What colour is the star? blue"). --queries Q asks Q questions
about one list (Q targets a row: denser supervision); held-out rows ask one. `bare` lists "colour shape";
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
from agents.lmm.tiny_qwen import build_tiny_model, save_checkpoint
from paravt_env.world import COLOURS, POSITIONS, SHAPES

COLOUR_NAMES = tuple(COLOURS)


def example(rng: np.random.Generator, n: int, form: str, queries: int) -> tuple[str, list[tuple[str, str]]]:
    """(the object list, [(question, colour)] for `queries` of its objects, drawn with replacement)."""
    shapes = rng.choice(len(SHAPES), n, replace=False)
    colours = rng.integers(len(COLOUR_NAMES), size=n)
    t = float(rng.uniform(0, 500))
    items = []
    for k, (c, s) in enumerate(zip(colours, shapes)):
        item = f"{COLOUR_NAMES[c]} {SHAPES[s]}"
        if form == "caption":
            item += f" at {POSITIONS[int(rng.integers(len(POSITIONS)))]} ({t + 7 * k:.1f} s)"
        items.append(item)
    asked = rng.integers(n, size=queries)
    return (f"Objects: {'; '.join(items)}.",
            [(f" What colour is the {SHAPES[shapes[k]]}?", COLOUR_NAMES[colours[k]]) for k in asked])


def _letter_options(rng: np.random.Generator, n: int, form: str) -> tuple[str, list[str], int]:
    """(prompt "Options: A. ...; B. .... Objects: <seen>.", the option objects, the seen one's index)."""
    objs = [(c, s) for c in COLOUR_NAMES for s in SHAPES]
    options = [f"{c} {s}" for c, s in (objs[i] for i in rng.choice(len(objs), n, replace=False))]
    seen = int(rng.integers(n))
    what = options[seen] + (f" at {POSITIONS[int(rng.integers(len(POSITIONS)))]} ({rng.uniform(0, 500):.1f} s)"
                            if form == "caption" else "")
    lines = "; ".join(f"{'ABCD'[i]}. {o}" for i, o in enumerate(options))
    return f"Options: {lines}. Objects: {what}.", options, seen


def example_letter(rng: np.random.Generator, n: int, form: str, queries: int) -> tuple[str, list[tuple[str, str]]]:
    """The option-letter lookup: n options (objects of distinct colour-shape pairs, some sharing a colour or
    a shape), one of them seen; the answer is the letter before the seen object's option line."""
    prompt, _, seen = _letter_options(rng, n, form)
    return prompt, [(" Which option appears?", "ABCD"[seen])] * queries


def example_restated(rng: np.random.Generator, n: int, form: str):
    """The letter lookup made forward: before answering, the row restates each option with its letter AFTER
    the object ("A. blue circle A; B. red star B."), so the answer is the token that follows the seen object's
    restated copy (what an induction head copies), not the one before its option line. Returns (prompt,
    restatement, answer letter); the restatement is trained (teacher-forced) too."""
    prompt, options, seen = _letter_options(rng, n, form)
    restated = "; ".join(f"{'ABCD'[i]}. {o} {'ABCD'[i]}" for i, o in enumerate(options))
    return prompt + " Which option appears?", f" {restated}. So {options[seen]}", "ABCD"[seen]


def example_rewritten(rng: np.random.Generator, n: int, form: str, echo: bool):
    """The colour lookup with a trained restatement of the objects before the answer (candidate think lines for
    reading a response that lists several objects). ``echo`` False: shape first ("star blue; circle red. So
    the circle"); True: the list copied in order with each colour repeated after its shape ("blue star blue;
    red circle red. So the circle"), so the answer is the token after the named shape's last copy, and each
    restated item is a forward copy of the list plus a local copy of its own colour (the shape of sft
    --option-think). Returns (prompt, restatement, answer colour); the restatement is trained (teacher-forced)."""
    objects, ((question, colour),) = example(rng, n, form, 1)
    shape = question.split("the ")[1].rstrip("?")
    pairs = [item.split(" at ")[0].split() for item in objects[len("Objects: "):-1].split("; ")]
    if echo:
        restated = "Restated: " + "; ".join(f"{c} {s} {c}" for c, s in pairs)
    else:
        restated = "Shape first: " + "; ".join(f"{s} {c}" for c, s in pairs)
    return objects + question, f" {restated}. So the {shape}", colour


def batch(tok, rng, size: int, n: tuple[int, int], form: str, queries: int = 1, task: str = "colour"):
    """(ids, mask, targets): right-padded rows of n[0]..n[1] objects; targets -100 except at each answer's
    colour token. Task restated: the restatement's tokens are trained too, stored as -2 - id so that
    accuracy counts the answer alone."""
    rows = []
    for _ in range(size):
        if task in ("restated", "swapped", "echoed"):
            k = int(rng.integers(n[0], n[1] + 1))
            prompt, restated, letter = (example_restated(rng, k, form) if task == "restated" else
                                        example_rewritten(rng, k, form, echo=task == "echoed"))
            ids = tok.encode(prompt, add_special_tokens=False)
            target = [-100] * len(ids)
            r = tok.encode(restated, add_special_tokens=False)
            ids += r
            target += [-2 - t for t in r]  # restatement tokens: trained, not scored (decoded in the loss)
            ids.append(tok.encode(" " + letter, add_special_tokens=False)[0])
            target.append(ids[-1])
            rows.append((ids, target))
            continue
        make = example_letter if task == "letter" else example
        objects, asked = make(rng, int(rng.integers(n[0], n[1] + 1)), form, queries)
        ids, target = tok.encode(objects, add_special_tokens=False), []
        for question, colour in asked:
            ids += tok.encode(question, add_special_tokens=False)
            target += [-100] * (len(ids) - len(target))
            ids.append(tok.encode(" " + colour, add_special_tokens=False)[0])  # " colour" / " B" is one token
            target.append(ids[-1])
            ids += tok.encode(".", add_special_tokens=False)
        rows.append((ids, target + [-100] * (len(ids) - len(target))))
    return pad_rows(tok, rows)


def pad_rows(tok, rows):
    """(ids, mask, targets), right-padded, of (ids, targets) rows (targets -100 where nothing is asked)."""
    width = max(len(ids) for ids, _ in rows)
    out = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    targets = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (ids, target) in enumerate(rows):
        out[i, :len(ids)], mask[i, :len(ids)], targets[i, :len(ids)] = torch.tensor(ids), 1, torch.tensor(target)
    return out, mask, targets


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="agents/lmm/checkpoints/tiny-strong/cold_start", help="its tokenizer")
    p.add_argument("--objects", default="4", help="objects in a training list: N, or LOW-HIGH (each list draws one)")
    p.add_argument("--eval-objects", type=int, default=None, help="objects in a held-out list (default: the most)")
    p.add_argument("--form", choices=("bare", "caption"), default="bare")
    p.add_argument("--task", choices=("colour", "letter", "restated", "swapped", "echoed"), default="colour",
                   help="colour: the colour before the named shape; letter: the option letter of the seen object "
                        "(--objects is then the number of options, at most 4); restated: letter, after a trained "
                        "restatement of the options with each letter after its object; swapped / echoed: colour, "
                        "after a trained restatement of the objects shape first / with each colour repeated")
    p.add_argument("--queries", type=int, default=1, help="questions about one object list (each answer a target)")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--text-config", default="", metavar="NAME=VALUE,...", help="text config overrides")
    p.add_argument("--init", default=None, help="start from this saved model (a curriculum's earlier stage)")
    p.add_argument("--save", default=None, help="save the trained model here")
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    tok = TransformersPolicy(a.checkpoint).tokenizer
    overrides = {k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in a.text_config.split(",") if kv)}
    if a.init:
        model = TransformersPolicy(a.init).model.train()
    else:
        model = build_tiny_model(tok, seed=a.seed, **overrides).train()
    rng, held_rng = np.random.default_rng(a.seed), np.random.default_rng(10_000)
    low, _, high = a.objects.partition("-")
    train_objects = (int(low), int(high or low))
    n_held = a.eval_objects or train_objects[1]
    held = batch(tok, held_rng, 500, (n_held, n_held), a.form, task=a.task)  # one question each, as the drills
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.95))

    def loss_and_accuracy(ids, mask, targets):
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        targets = targets[:, 1:]
        scored = targets >= 0
        trained = targets != -100
        labels = torch.where(targets <= -2, -2 - targets, targets)  # restatement tokens are stored as -2 - id
        loss = torch.nn.functional.cross_entropy(logits[trained], labels[trained])
        return loss, float((logits[scored].argmax(-1) == targets[scored]).float().mean())

    t0 = time.time()
    for step in range(1, a.steps + 1):
        loss, _ = loss_and_accuracy(*batch(tok, rng, a.batch_size, train_objects, a.form, a.queries, a.task))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                _, accuracy = loss_and_accuracy(*held)
            model.train()
            print(f"step {step} loss {loss.item():.3f} held-out accuracy {accuracy:.3f} ({time.time() - t0:.0f} s)",
                  flush=True)
    if a.save:
        save_checkpoint(a.save, model.eval(), tok, TransformersPolicy(a.checkpoint).image_processor)


if __name__ == "__main__":
    main()
