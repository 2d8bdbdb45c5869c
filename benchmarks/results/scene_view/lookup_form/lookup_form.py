"""Does the caption grammar make the zoom's lookup hard? A text-only CPU probe (sixteenth session).

v14's zoom turn writes "I need a closer look during the meadow scene (" and must then copy the span that the sweep's
responses gave the meadow scene. It copies another entry's span in about four turns of five (window_diag/). In the
world's grammar every entry reads "NAME scene (a-b s)", so the token before each span is the same " (" in every
entry: a head that matches on the previous token finds all of them, and the scene name that tells them apart is three
tokens before the span. This probe trains the same tiny architecture on the lookup alone, in two grammars:

- ``today``: entries "meadow scene (356.6-435.7 s)", the turn ends "during the meadow scene (";
- ``adjacent``: entries "meadow 356.6-435.7 s", the turn ends "during meadow": the name is right before the span.

Each probe: 2-4 tool responses in the env's wording, 1-3 scene entries each (all names distinct) and 0-1 objects with
times (more spans to confuse; short, so that a CPU step takes seconds; a response without objects has no "Objects:"
part, where the world writes "Objects: none."), a question naming one of the scenes, and the zoom's think line up to
the span. Only the span's tokens are trained. Teacher-forced accuracy on 400 held-out probes: ``span`` = every token
of the span right (what greedy decoding would write), ``entry`` = the whole seconds of its start time right (it chose
the right entry; a pick at random among the entries is right 0.20 of the time on these probes).

    python benchmarks/results/scene_view/lookup_form/lookup_form.py --form today --init v14 --minutes 30 --out F.json

``--init fresh``: a new model of v14's text shape (8 layers of 128); ``--init v14``: the shipped strong cold start.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))

from agents.lmm.tiny_qwen import build_tiny_model  # noqa: E402
from paravt_env.world import COLOURS, SCENE_NAMES, SHAPES, CaptionEntry  # noqa: E402

SHIPPED = "agents/lmm/checkpoints/tiny-strong/cold_start"
FORMS = ("today", "adjacent")


def probe(rng: np.random.Generator, form: str) -> tuple[str, str]:
    """(prefix, target): the conversation up to the span, and the span the question's scene was given."""
    n_resp = int(rng.integers(2, 5))
    per = [int(rng.integers(1, 4)) for _ in range(n_resp)]
    names = list(rng.choice(SCENE_NAMES, sum(per), replace=False))  # at most 4 x 3 = 12, every scene name once
    t, spans, responses, unused = 0.0, {}, [], iter(names)
    for r in range(n_resp):
        lo = t
        entries = []
        for _ in range(per[r]):
            a = t + float(rng.uniform(3, 30))
            b = a + float(rng.uniform(0, 150)) * (rng.random() < 0.85)
            t = b + float(rng.uniform(1, 20))
            name = next(unused)
            scene = CaptionEntry(f"{name} scene", round(a, 1), round(b, 1))  # the world's caption grammar
            spans[name] = scene.span()
            entries.append(scene.text() if form == "today" else f"{name} {spans[name]}")
        objects = []
        for _ in range(int(rng.integers(0, 2))):
            colour, shape = rng.choice(list(COLOURS)), rng.choice(list(SHAPES))
            seen = float(rng.uniform(lo, t))
            objects.append(CaptionEntry(f"{colour} {shape}", seen, seen).text())
        hi = t + float(rng.uniform(1, 10))
        t = hi
        text = f"crop_video {lo:.1f}-{hi:.1f} s (8 frames): Scenes: {'; '.join(entries)}."
        if objects:
            text += f" Objects: {'; '.join(objects)}."
        responses.append(f"<tool_response>\n{text}\n</tool_response>")
    asked = names[int(rng.integers(len(names)))]
    ask = f"during the {asked} scene (" if form == "today" else f"during {asked}"
    prefix = (f"<|im_start|>user\nWhich of these objects appears during the {asked} scene?<|im_end|>\n"
              f"<|im_start|>user\n{' '.join(responses)}<|im_end|>\n"
              f"<|im_start|>assistant\n<think>\nI need a closer look {ask}")
    target = spans[asked] if form == "today" else " " + spans[asked]
    return prefix, target


def encode(tok, pairs):
    """Right-padded ids, labels (-100 outside the span) and, per row, the positions of the span's start time's whole
    seconds (its digits before the first '.'): they name the entry, since no two entries start in the same second."""
    rows = [(tok(p, add_special_tokens=False)["input_ids"], tok(t, add_special_tokens=False)["input_ids"])
            for p, t in pairs]
    n = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), n), tok.pad_token_id)
    labels = torch.full((len(rows), n), -100)
    whole_seconds = torch.zeros((len(rows), n), dtype=torch.bool)
    for i, (p, t) in enumerate(rows):
        ids[i, :len(p) + len(t)] = torch.tensor(p + t)
        labels[i, len(p):len(p) + len(t)] = torch.tensor(t)
        pieces = tok.convert_ids_to_tokens(t)
        first = next(j for j, x in enumerate(pieces) if x[-1].isdigit())
        dot = pieces.index(".", first)
        whole_seconds[i, len(p) + first:len(p) + dot] = True
    return ids, labels, whole_seconds


def logits_of(model, ids):
    lm = model.model.language_model
    pos = torch.arange(ids.shape[1]).expand(3, *ids.shape)  # text only: M-RoPE's three axes agree
    # right padding under a causal mask never reaches a real token, so no mask (the unmasked path is faster)
    h = lm(input_ids=ids, position_ids=pos).last_hidden_state
    return model.lm_head(h)


def evaluate(model, batch) -> dict:
    ids, labels, whole_seconds = batch
    with torch.no_grad():
        pred = logits_of(model, ids)[:, :-1].argmax(-1)
    right = pred == labels[:, 1:]
    span_right = (right | (labels[:, 1:] == -100)).all(1)
    entry_right = (right | ~whole_seconds[:, 1:]).all(1)
    return {"span": span_right.float().mean().item(), "entry": entry_right.float().mean().item()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--form", choices=FORMS, required=True)
    ap.add_argument("--init", choices=("fresh", "v14"), default="fresh")
    ap.add_argument("--minutes", type=float, default=40)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration
    tok = AutoTokenizer.from_pretrained(SHIPPED)
    if a.init == "v14":
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(SHIPPED)
    else:
        text = json.load(open(os.path.join(SHIPPED, "config.json")))["text_config"]
        model = build_tiny_model(tok, seed=a.seed, num_hidden_layers=text["num_hidden_layers"],
                                 layer_types=text["layer_types"])
    held = encode(tok, [probe(np.random.default_rng(10_000 + i), a.form) for i in range(400)])
    rng = np.random.default_rng(a.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    history, step, t0 = [], 0, time.time()
    model.eval()
    history.append({"step": 0, "seconds": 0.0, **evaluate(model, held)})
    print(json.dumps(history[-1]), flush=True)
    while time.time() - t0 < a.minutes * 60:
        ids, labels, _ = encode(tok, [probe(rng, a.form) for _ in range(a.batch_size)])
        for g in opt.param_groups:
            g["lr"] = a.lr * min(1.0, (step + 1) / 100)
        model.train()
        logits = logits_of(model, ids)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % a.eval_every == 0:
            model.eval()
            history.append({"step": step, "seconds": round(time.time() - t0, 1), "loss": round(loss.item(), 4),
                            **evaluate(model, held)})
            print(json.dumps(history[-1]), flush=True)
            with open(a.out, "w") as f:
                json.dump({"args": vars(a), "history": history}, f, indent=1)
    with open(a.out, "w") as f:
        json.dump({"args": vars(a), "history": history}, f, indent=1)


if __name__ == "__main__":
    main()
