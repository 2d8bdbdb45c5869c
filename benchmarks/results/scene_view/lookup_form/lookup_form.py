"""Does the caption grammar make the zoom's lookup hard? A text-only probe (sixteenth session, CPU; twentieth, GPU).

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

    python benchmarks/results/scene_view/lookup_form/lookup_form.py --form today --init shipped --minutes 30 --out F.json

``--init fresh``: a new model of the shipped strong cold start's text shape; ``--init shipped``: that cold start
(v14 when ``v14_*.json`` were measured on this CPU, v15 since). ``--device cuda`` for a GPU's dose (twentieth
session, ``gpu/``): there the probes are built on the host, so a larger ``--batch-size`` mostly costs host time.
``--kl W`` adds W x KL(start model || model) over the prefix's tokens, to keep the model's other text while the lookup
forms. ``--form real`` trains on the real second turn instead (``real_pairs``): the drills of
``agents.lmm.corpus.sighting_probe``, cut at the turn's first sighting, held out on validation as in
``real_turn_check.py``.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))

from agents.lmm.tiny_qwen import build_tiny_model  # noqa: E402
from paravt_env.world import COLOURS, SCENE_NAMES, SHAPES, CaptionEntry  # noqa: E402

SHIPPED = "agents/lmm/checkpoints/tiny-strong/cold_start"
FORMS = ("today", "adjacent", "real")
SIGHTING = re.compile(r"([a-z]+) scene \(([\d.]+-[\d.]+ s)\)")


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


def real_turns(n: int, seed: int, held_out: bool) -> list[tuple]:
    """(trace, drill, turn so far, span): the real second tool turn, as ``agents.lmm.corpus.sighting_probe`` drills
    it (sweep traces of needle questions, truthful captions; the drill leaves the frames out), cut at its first
    sighting's "(", and that sighting's span. Held out: validation videos at K = 4 (``../sweep/drill_check.py``'s
    turns); else fresh train videos past the dataset at K in {4, 8, 16}, each drawn once or so (on a few hundred
    videos a model learns their times instead of the lookup)."""
    import dataclasses

    from agents.lmm.corpus import build_corpus, sighting_probe
    from agents.lmm.evaluate_lmm import world_config_of
    wc = world_config_of(SHIPPED)
    where = (dict(split="validation", budgets=(4,)) if held_out else
             dict(split="train", budgets=(4, 8, 16), wc=dataclasses.replace(wc, dataset_size=wc.dataset_size + 60_000),
                  index_range=(wc.dataset_size, wc.dataset_size + 60_000)))
    traces = build_corpus(0, 0, n, "paravt", **{"wc": wc, **where}, seed=seed, oracle_fraction=0.0,
                          search_agent="sweep", families=("needle", "needle_attribute"), zoom_think="sighting",
                          grounded_direct_think="scene_chain_decide")
    out = []
    for trace in traces:
        if (drill := sighting_probe(trace)) is None:
            continue
        turn = drill.assistant_texts[1]
        if (cut := SIGHTING.search(turn)) is not None:  # else no sighting was printed: nothing to copy
            out.append((trace, drill, turn[:cut.start(2)], cut.group(2)))
    return out


def real_pairs(tok, n: int, seed: int, held_out: bool) -> list[tuple[str, str]]:
    """``--form real``: (prefix, target) of :func:`real_turns`, the prefix being the drill's chat up to that turn
    plus the turn so far."""
    return [(tok.apply_chat_template(drill.messages[:4], add_generation_prompt=True, tokenize=False) + so_far, span)
            for _, drill, so_far, span in real_turns(n, seed, held_out)]


def real_pool(tok, n: int, seed: int, workers: int) -> list[tuple[str, str]]:
    """``n`` training drills of ``--form real``, drawn by ``workers`` processes (a drill takes about 20 ms)."""
    if workers <= 1:
        return real_pairs(tok, n, seed, held_out=False)
    import concurrent.futures
    chunk = -(-n // workers)
    with concurrent.futures.ProcessPoolExecutor(workers) as ex:
        parts = ex.map(real_pairs, [tok] * workers, [chunk] * workers, [seed * 1000 + i for i in range(workers)],
                       [False] * workers)
        return [p for part in parts for p in part]


def encode(tok, pairs):
    """Right-padded ids, labels (-100 outside the span), per row the positions of the span's start time's whole
    seconds (its digits before the first '.': they name the entry, since no two entries start in the same second),
    and the prefix's positions (where ``--kl`` holds the model to its start)."""
    rows = [(tok(p, add_special_tokens=False)["input_ids"], tok(t, add_special_tokens=False)["input_ids"])
            for p, t in pairs]
    n = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), n), tok.pad_token_id)
    labels = torch.full((len(rows), n), -100)
    whole_seconds = torch.zeros((len(rows), n), dtype=torch.bool)
    prefix = torch.zeros((len(rows), n), dtype=torch.bool)
    for i, (p, t) in enumerate(rows):
        prefix[i, :len(p) - 1] = True  # predictions of the prefix's own next tokens (the last one predicts the span)
        ids[i, :len(p) + len(t)] = torch.tensor(p + t)
        labels[i, len(p):len(p) + len(t)] = torch.tensor(t)
        pieces = tok.convert_ids_to_tokens(t)
        first = next(j for j, x in enumerate(pieces) if x[-1].isdigit())
        dot = pieces.index(".", first)
        whole_seconds[i, len(p) + first:len(p) + dot] = True
    return ids, labels, whole_seconds, prefix


def drift(logits, anchor_logits, mask):
    """Mean KL(anchor || model) over the masked positions: how far the model's next-token guesses moved."""
    kl = torch.nn.functional.kl_div(logits.log_softmax(-1), anchor_logits.log_softmax(-1), log_target=True,
                                    reduction="none").sum(-1)
    return (kl * mask).sum() / mask.sum()


def logits_of(model, ids):
    lm = model.model.language_model
    pos = torch.arange(ids.shape[1], device=ids.device).expand(3, *ids.shape)  # text only: M-RoPE's three axes agree
    # right padding under a causal mask never reaches a real token, so no mask (the unmasked path is faster)
    h = lm(input_ids=ids, position_ids=pos).last_hidden_state
    return model.lm_head(h)


def evaluate(model, anchor, batch, rows_at_once: int = 100) -> dict:
    """Held-out span and entry accuracy and drift, ``rows_at_once`` rows at a time: 400 real drills of about 900
    tokens would otherwise hold several GB of logits at once."""
    span, entry, kl_sum, kl_positions = [], [], 0.0, 0
    for chunk in zip(*(x.split(rows_at_once) for x in batch)):
        ids, labels, whole_seconds, prefix = chunk
        with torch.no_grad():
            logits = logits_of(model, ids)[:, :-1]
            mask = prefix[:, :-1]
            kl_sum += drift(logits, logits_of(anchor, ids)[:, :-1], mask).item() * mask.sum().item()
            kl_positions += mask.sum().item()
        right = logits.argmax(-1) == labels[:, 1:]
        span.append((right | (labels[:, 1:] == -100)).all(1))
        entry.append((right | ~whole_seconds[:, 1:]).all(1))
    return {"span": torch.cat(span).float().mean().item(), "entry": torch.cat(entry).float().mean().item(),
            "prefix_kl": round(kl_sum / kl_positions, 4)}


def save_build(folder: str, model, tok, image_processor) -> None:
    import shutil

    from agents.lmm.tiny_qwen import save_checkpoint
    save_checkpoint(os.path.join(folder, "cold_start"), model, tok, image_processor)
    shutil.copy(os.path.join(os.path.dirname(SHIPPED), "sft_args.json"), os.path.join(folder, "sft_args.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--form", choices=FORMS, required=True)
    ap.add_argument("--init", choices=("fresh", "shipped"), default="fresh")
    ap.add_argument("--minutes", type=float, default=40)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--real-pool", type=int, default=20000, help="--form real: training drills drawn up front "
                    "(then sampled with replacement)")
    ap.add_argument("--workers", type=int, default=1, help="--form real: processes that draw them")
    ap.add_argument("--kl", type=float, default=0.0, help="weight of KL(start model || model) on the prefix's "
                    "tokens: keeps the shipped model's other text while the lookup forms (without it, v15 formed the "
                    "lookup and then wrote only digits)")
    ap.add_argument("--stop-entry", type=float, default=1.1, help="stop once held-out entry accuracy reaches this")
    ap.add_argument("--out", required=True)
    ap.add_argument("--save", default="", help="write the trained model here as a build: SAVE/cold_start (a whole "
                    "checkpoint) and SAVE/sft_args.json (the shipped build's record), as ../sweep/gpu_sighting.sh's "
                    "START wants it")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    from agents.lmm.tiny_qwen import load_checkpoint
    model, tok, image_processor = load_checkpoint(SHIPPED)  # the project's offline loader (no Hub kernels on a GPU)
    if a.init == "fresh":
        text = json.load(open(os.path.join(SHIPPED, "config.json")))["text_config"]
        model = build_tiny_model(tok, seed=a.seed, num_hidden_layers=text["num_hidden_layers"],
                                 layer_types=text["layer_types"])
    model.to(a.device)
    anchor = copy.deepcopy(model).eval().requires_grad_(False)
    if a.form == "real":
        held_pairs = real_pairs(tok, 400, 0, held_out=True)
        pool = real_pool(tok, a.real_pool, a.seed, a.workers)
        print(f"real drills: {len(held_pairs)} held out, {len(pool)} to train on", flush=True)
    else:
        held_pairs = [probe(np.random.default_rng(10_000 + i), a.form) for i in range(400)]
    held = tuple(x.to(a.device) for x in encode(tok, held_pairs))
    rng = np.random.default_rng(a.seed)

    def draw() -> list[tuple[str, str]]:
        if a.form == "real":
            return [pool[i] for i in rng.integers(len(pool), size=a.batch_size)]
        return [probe(rng, a.form) for _ in range(a.batch_size)]
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    history, step, t0 = [], 0, time.time()
    model.eval()
    history.append({"step": 0, "seconds": 0.0, **evaluate(model, anchor, held)})
    print(json.dumps(history[-1]), flush=True)
    while time.time() - t0 < a.minutes * 60:
        ids, labels, _, prefix = (x.to(a.device) for x in encode(tok, draw()))
        for g in opt.param_groups:
            g["lr"] = a.lr * min(1.0, (step + 1) / 100)
        model.train()
        logits = logits_of(model, ids)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        if a.kl:
            with torch.no_grad():
                anchor_logits = logits_of(anchor, ids)[:, :-1]
            loss = loss + a.kl * drift(logits, anchor_logits, prefix[:, :-1])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % a.eval_every == 0:
            model.eval()
            history.append({"step": step, "seconds": round(time.time() - t0, 1), "loss": round(loss.item(), 4),
                            **evaluate(model, anchor, held)})
            print(json.dumps(history[-1]), flush=True)
            with open(a.out, "w") as f:
                json.dump({"args": vars(a), "history": history}, f, indent=1)
            if a.save and history[-1]["entry"] >= 0.9 and history[-1]["entry"] >= max(h["entry"] for h in history):
                save_build(a.save, model, tok, image_processor)  # a formed lookup survives a run stopped from outside
            if history[-1]["entry"] >= a.stop_entry:
                break
    with open(a.out, "w") as f:
        json.dump({"args": vars(a), "history": history}, f, indent=1)
    if a.save:
        save_build(a.save, model, tok, image_processor)


if __name__ == "__main__":
    main()
