"""Can the tiny model learn to look things up by content at all? A CPU probe (not a corpus part).

The reading-drill builds copy the needle's colour out of a tool response but not its shape, and do
not map an object to its option letter (copy_diagnosis.txt). This probe trains a checkpoint on
short TEXT-ONLY conversations made up here in the shape of a reading drill (question with four
options, 1-3 tool responses in the env's wording, final turn "<think>\\nThe crops show a COLOUR
SHAPE.\\n</think>\\n<answer>X</answer>" as the only target), with random objects and scenes, so
no prior can stand in for the lookup; half of them put an option's colour with another shape into
another response, so the shape must be looked up. It reports teacher-forced shape and answer
accuracy on held-out probes as it trains, then saves the model for copy_diagnosis.py.

    python benchmarks/results/reading_experiments/lookup_probe.py CHECKPOINT OUT_DIR [MINUTES] [SEED] [single|multi]
    # on a GPU: probes made once by 14 processes, large batches
    python benchmarks/results/reading_experiments/lookup_probe.py CHECKPOINT OUT_DIR 8 0 multi --device cuda \
        --batch-size 256 --pool 200000 --workers 14 --eval-every 500

multi: probe_multi, the lookup with several objects per response and no grounded think line.
scene: agents.lmm.corpus.scene_presence_probe, the presence chain that also names each named candidate's scene, on
responses of 1-2 scenes with rivals (other options, other colours of the asked shape) in the scenes not asked about;
scene1: the same with one scene a response (an object's scene is its response's).
Several runs side by side on one GPU, saved at every evaluation (gpu_lookup.sh), e.g. a curriculum that
moves on once a stage is learned, through the written-out text forward (1.8x the stock one on a GPU):
    bash benchmarks/results/reading_experiments/gpu_lookup.sh $OUT/runs 8 \
        "cold||--text-forward eager --batch-size 512 --curriculum 2:100000,4:100000,12:100000 --advance-at 0.85"

(SEED draws the training probes; a continuation from OUT_DIR takes another seed. Held-out probes
are always the same 200.)
"""
import ast
import math
import time
from functools import partial

import numpy as np
import torch

from agents.lmm.corpus import Sample, encode_record, encoding_policy, pack_records, presence_line, scene_presence_probe
from agents.lmm.corpus import probe_conversation as conversation
from agents.lmm.corpus import probe_response as response
from agents.lmm.policy import TransformersPolicy
from agents.lmm.tiny_qwen import build_tiny_model, save_checkpoint
from paravt_env.questions import Question
from paravt_env.world import COLOURS, SCENE_NAMES, SHAPES
from trainers.sft import Records, Trainee, answer_token_mask

COLOUR_NAMES = tuple(COLOURS)


def probe(rng: np.random.Generator) -> Sample:
    objs = [(c, s) for c in COLOUR_NAMES for s in SHAPES]
    pick = rng.choice(len(objs), 8, replace=False)
    target, others, fillers = objs[pick[0]], [objs[i] for i in pick[1:4]], [objs[i] for i in pick[4:]]
    scenes = list(rng.choice(SCENE_NAMES, 3, replace=False))
    n_resp = int(rng.integers(1, 4))
    where = int(rng.integers(n_resp))
    mcq = rng.random() < 0.5
    if mcq:
        options = others + [target]
        order = rng.permutation(4)
        options = [options[i] for i in order]
        letter = "ABCD"[list(order).index(3)]
        q = (f"Question: Which of these objects appears during the {scenes[where]} scene?\nOptions:\n"
             + "\n".join(f"{'ABCD'[i]}. {c} {s}" for i, (c, s) in enumerate(options)))
        answer = letter
    else:
        q = (f"Question: What colour is the large {target[1]} that appears during the {scenes[where]} scene? "
             "Answer with one word.")
        answer = target[0]
    t0 = float(rng.uniform(0, 600))
    responses = []
    for j in range(n_resp):
        a, b = t0 + 60 * j, t0 + 60 * j + 50
        if j == where:
            items = [target]
        else:  # a decoy: an option's colour with another shape, or a filler object
            c = others[0][0] if rng.random() < 0.5 else fillers[j % len(fillers)][0]
            items = [(c, SHAPES[(SHAPES.index(target[1]) + 1 + j) % len(SHAPES)])]
        responses.append(response(rng, a, b, scenes[j], items, first=10, spacing=7))
    return conversation(q, t0, responses, f"The crops show a {target[0]} {target[1]}.", answer, mcq)


def probe_multi(rng: np.random.Generator, max_objects: int = 12, think: str = "fixed") -> Sample:
    """The lookup alone, in real captions' shape: 1-3 responses of 2-4 objects each; the question names
    the target's shape (colour question) or lists it among four options none of whose other objects
    appear; the final think line is the fixed one, so the answer token itself must do the lookup:
    the colour just before the named shape, or the letter of the option that appears. max_objects
    (a curriculum's early stage) keeps only the first responses within that many objects (always four
    options: in short_lookup.txt the letter lookup forms with four options and not with two); 12 draws
    exactly what it always did. think="restate": a colour question's think line first names the shape
    asked about ("The question asks about the star."), putting the query next to the answer as the
    short line's question is (short_lookup.txt); letter questions keep the fixed line.
    think="presence": :func:`agents.lmm.corpus.presence_line`, a chain of yes/no checks ending at the answer."""
    objs = [(c, s) for c in COLOUR_NAMES for s in SHAPES]
    mcq = rng.random() < 0.5
    n_resp = int(rng.integers(1, 4))
    sizes = rng.integers(2, 5, n_resp)
    within = np.cumsum(sizes) <= max_objects
    sizes = sizes[within] if within.any() else np.array([max_objects])
    n_resp, n_options = len(sizes), 4
    pick = rng.choice(len(objs), int(sizes.sum()) + 3, replace=False)
    seen = [objs[i] for i in pick[:int(sizes.sum())]]
    target = seen[int(rng.integers(len(seen)))]
    if not mcq:  # the named shape must single out the target
        seen = [o for o in seen if o == target or o[1] != target[1]]
        sizes = np.maximum(1, sizes - (int(sizes.sum()) - len(seen)) // n_resp)
        sizes[-1] = len(seen) - int(sizes[:-1].sum())
    scenes = list(rng.choice(SCENE_NAMES, 3, replace=False))
    if mcq:
        absent = [objs[i] for i in pick[int(sum(sizes)):]][:n_options - 1]
        options = absent + [target]
        order = rng.permutation(n_options)
        options = [options[i] for i in order]
        q = ("Question: Which of these objects appears during the video?\nOptions:\n"
             + "\n".join(f"{'ABCD'[i]}. {c} {s}" for i, (c, s) in enumerate(options)))
        answer = "ABCD"[list(order).index(n_options - 1)]
    else:
        q = f"Question: What colour is the large {target[1]} that appears in the video? Answer with one word."
        answer = target[0]
    t0, responses, at = float(rng.uniform(0, 600)), [], 0
    for j in range(n_resp):
        a, b = t0 + 60 * j, t0 + 60 * j + 50
        items, at = seen[at:at + int(sizes[j])], at + int(sizes[j])
        responses.append(response(rng, a, b, scenes[j], items, first=3, spacing=11))
    if think == "presence":
        family = "needle" if mcq else "needle_attribute"
        question = Question("probe", family, q.split("\n")[0], answer, "mcq" if mcq else "open",
                            tuple(f"{c} {s}" for c, s in options) if mcq else None)
        line = presence_line(question, "".join(responses))
    else:
        line = f"The question asks about the {target[1]}." if think == "restate" and not mcq else "The crops answer it."
    return conversation(q, t0, responses, line, answer, mcq)


def maker(form: str, think: str = "fixed", max_objects: int = 12):
    """The probe generator of a form: single (probe), multi (probe_multi with ``think``), or scene
    (agents.lmm.corpus.scene_presence_probe: the presence chain that checks each named candidate's scene)."""
    if form in ("scene", "scene1"):
        return partial(scene_presence_probe, max_objects=max_objects, scenes_per_response=2 if form == "scene" else 1)
    return partial(probe_multi, max_objects=max_objects, think=think) if form == "multi" else probe


def records(samples, enc) -> Records:
    p = pack_records([encode_record(enc, s) for s in samples])
    return Records(p["ids"], p["mask"], p["tok_off"], p["frames"], p["img_off"], p["kind"])


def measure(tr: Trainee, recs: Records, mcq: np.ndarray, show: list[int]) -> dict:
    out = dict(shape=0, answer_mcq=0, answer_open=0, n_mcq=int(mcq.sum()), n_open=int((~mcq).sum()))
    tr.model.eval()
    with torch.no_grad():
        for i in range(len(recs)):
            b = tr.collate(recs, np.array([i]))
            pred = tr.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[0, :-1].argmax(-1).cpu().numpy()
            ids = b["input_ids"].cpu()
            tgt = ids[0, 1:].numpy()
            s = ids[0].numpy()
            for j in range(len(s) - len(show)):
                if list(s[j:j + len(show)]) == show:
                    out["shape"] += int(pred[j + len(show)] == tgt[j + len(show)])
            ans = np.flatnonzero(answer_token_mask(ids.numpy(), b["loss_mask"].cpu().numpy(), tr.answer_marks)[0, 1:])
            out["answer_mcq" if mcq[i] else "answer_open"] += int(pred[ans[0]] == tgt[ans[0]])
    tr.model.train()
    return out


class CompiledTextLoss:
    """Trainee.loss for text-only probes through a forward written out and compiled: the stock forward
    is launch-bound for a model this small (a GPU step of 512 probes took ~0.17 s). Same weights, same
    math: M-RoPE with equal t/h/w positions (text) is plain RoPE, and right padding under causal attention
    needs no mask (real tokens never see the pads after them). `check` compares it with Trainee.loss."""

    def __init__(self, tr: Trainee, compile: bool = True):
        self.tr, self.lm = tr, tr.model.model.language_model
        cfg = self.lm.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        # Only the transformer is compiled: torch 2.11's Inductor failed on the GPU to generate code for the
        # cross-entropy over every position (dynamic shapes, a split reduction); a forward that fails to compile
        # falls back to eager (a failure compiling the backward still stops the run).
        self.compiled = torch.compile(self.logits, dynamic=True) if compile else None

    def batch(self, recs: Records, idx) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded ids (width a multiple of 64, to bound recompiles) and each next-token target's weight."""
        lens = recs.lens[idx]
        width = int(-(-int(lens.max()) // 64) * 64)
        ids = np.full((len(idx), width), self.tr.pad_id, np.int64)
        mask = np.zeros((len(idx), width), np.bool_)
        for r, i in enumerate(idx):
            a, b = recs.tok_off[i], recs.tok_off[i + 1]
            ids[r, :b - a], mask[r, :b - a] = recs.ids[a:b], recs.mask[a:b]
        weight = np.where(answer_token_mask(ids, mask, self.tr.answer_marks), self.tr.answer_weight, 1.0) * mask
        dev = self.tr.device
        return torch.from_numpy(ids).to(dev), torch.from_numpy(weight[:, 1:].astype(np.float32)).to(dev)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        lm, (n, width) = self.lm, ids.shape
        freqs = torch.arange(width, device=ids.device, dtype=torch.float32)[:, None] * lm.rotary_emb.inv_freq[None]
        cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()

        def rope(x):
            half = x.shape[-1] // 2
            return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin
        h = lm.embed_tokens(ids)
        for layer in lm.layers:
            at, x = layer.self_attn, layer.input_layernorm(h)
            q = rope(at.q_proj(x).view(n, width, self.heads, self.head_dim).transpose(1, 2))
            k = rope(at.k_proj(x).view(n, width, self.kv_heads, self.head_dim).transpose(1, 2))
            v = at.v_proj(x).view(n, width, self.kv_heads, self.head_dim).transpose(1, 2)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            h = h + at.o_proj(o.transpose(1, 2).reshape(n, width, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.tr.model.lm_head(lm.norm(h))

    def _loss(self, ids: torch.Tensor, weight: torch.Tensor, logits_of=None) -> torch.Tensor:
        logits = (logits_of or self.logits)(ids)[:, :-1].float()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        return (ce * weight).sum() / (weight > 0).sum().clamp(min=1)

    def loss(self, recs: Records, idx) -> torch.Tensor:
        ids, weight = self.batch(recs, idx)
        if self.compiled is not None:
            try:
                return self._loss(ids, weight, self.compiled)
            except Exception as e:  # noqa: BLE001 - any compiler failure: train uncompiled instead
                print(f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                      "going on uncompiled", flush=True)
                self.compiled = None
        return self._loss(ids, weight)

    def answers(self, recs: Records, mcq: np.ndarray) -> dict:
        """measure()'s answer counts, teacher-forced, all probes in one batch."""
        ids, weight = self.batch(recs, np.arange(len(recs)))
        with torch.no_grad():
            pred = self.logits(ids)[:, :-1].argmax(-1)
        first = (weight == self.tr.answer_weight).float().argmax(1)  # each probe's first answer token
        rows = torch.arange(len(recs), device=ids.device)
        right = (pred[rows, first] == ids[rows, first + 1]).cpu().numpy()
        # every target token of the final turn right, teacher-forced: exactly what greedy decoding would write
        exact = ((pred == ids[:, 1:]) | (weight == 0)).all(1).cpu().numpy()
        return dict(shape=0, answer_mcq=int(right[mcq].sum()), answer_open=int(right[~mcq].sum()),
                    exact_mcq=int(exact[mcq].sum()), exact_open=int(exact[~mcq].sum()),
                    n_mcq=int(mcq.sum()), n_open=int((~mcq).sum()))

    def check(self, recs: Records, idx) -> tuple[float, float]:
        """(this loss, Trainee.loss) on one batch, without compiling."""
        with torch.no_grad():
            return float(self._loss(*self.batch(recs, idx))), float(self.tr.loss(self.tr.collate(recs, idx))[0])


_pool_encoder = None


def _pool_chunk(job) -> list:
    """Worker: `n` encoded training probes of form `form` from `seed` (spawned processes load the tokenizer once)."""
    global _pool_encoder
    checkpoint, form, seed, n, max_objects, think = job
    if _pool_encoder is None:
        _pool_encoder = encoding_policy(TransformersPolicy(checkpoint).tokenizer)
    make = maker(form, think, max_objects)
    rng = np.random.default_rng(seed)
    return [encode_record(_pool_encoder, make(rng)) for _ in range(n)]


def training_pool(checkpoint: str, form: str, seed: int, size: int, workers: int, max_objects: int = 12,
                  think: str = "fixed") -> Records:
    """`size` training probes made once (in `workers` processes), so a GPU step does not wait on Python."""
    import multiprocessing as mp

    chunk = 500
    stage = [max_objects] if max_objects != 12 else []  # (12: the pools of the runs recorded before curricula)
    jobs = [(checkpoint, form, int(np.random.SeedSequence([seed, j, *stage]).generate_state(1)[0]),
             min(chunk, size - lo), max_objects, think) for j, lo in enumerate(range(0, size, chunk))]
    with mp.get_context("spawn").Pool(max(1, workers)) as pool:
        encoded = [r for part in pool.map(_pool_chunk, jobs) for r in part]
    packed = pack_records(encoded)
    return Records(packed["ids"], packed["mask"], packed["tok_off"], packed["frames"], packed["img_off"], packed["kind"])


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("out", help="where the trained model is saved")
    p.add_argument("minutes", nargs="?", type=float, default=15.0, help="training time")
    p.add_argument("seed", nargs="?", type=int, default=0, help="draws the training probes")
    p.add_argument("form", nargs="?", default="single", choices=("single", "multi", "scene", "scene1"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--pool", type=int, default=0, help="train on this many probes made once up front (GPU runs: "
                                                        "making probes step by step would idle the GPU); 0: fresh "
                                                        "probes every step")
    p.add_argument("--workers", type=int, default=1, help="processes making the --pool")
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--curriculum", default=None, metavar="OBJECTS:STEPS,...",
                   help="multi form: train in stages of probes with at most OBJECTS objects, "
                        "STEPS steps each, e.g. 2:3000,4:2000,12:3000 (short_lookup.txt: the lookup forms on "
                        "two objects and then carries to more); MINUTES still bounds the whole run")
    p.add_argument("--think", default="fixed", choices=("fixed", "restate", "presence"),
                   help="multi form: the final think line (probe_multi): fixed, restate the colour question's shape, "
                        "or presence (a yes/no check per candidate up to the answer)")
    p.add_argument("--advance-at", type=float, default=None, metavar="FRACTION",
                   help="curriculum: end a stage early once its own held-out size (in --eval-objects) answers "
                        "both the letter and the colour at least this often, e.g. 0.85")
    p.add_argument("--text-forward", default="stock", choices=("stock", "eager", "compiled"),
                   help="train and measure through CompiledTextLoss, compiled or not (checked against the stock "
                        "loss at the start); stock: Trainee.loss")
    p.add_argument("--fresh", default=None, metavar="NAME=VALUE,...",
                   help="train a randomly initialised tiny model instead (the checkpoint's tokenizer), its text "
                        "config overridden, e.g. hidden_size=256,num_hidden_layers=8,num_attention_heads=8: does "
                        "the lookup form without the cold start, or with more capacity?")
    p.add_argument("--eval-objects", default="12", metavar="N,...",
                   help="multi form: held-out probes of at most N objects each (200 a size; 12: the full draws), "
                        "e.g. 2,4,12 to see a curriculum stage form before the full lookup does")
    a = p.parse_args(argv)
    make = maker(a.form, a.think)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    pol = TransformersPolicy(a.checkpoint)
    if a.fresh is not None:
        overrides = {k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in a.fresh.split(",") if kv)}
        pol.model = build_tiny_model(pol.tokenizer, seed=a.seed, **overrides)
        print("fresh model:", overrides, sum(t.numel() for t in pol.model.parameters()), "parameters", flush=True)
    enc = encoding_policy(pol.tokenizer)
    pol.model.to(a.device)
    tr = Trainee(pol.model, pol.tokenizer, pol.image_processor, a.device, answer_weight=10.0)
    sizes = [int(n) for n in a.eval_objects.split(",")] if a.form != "single" else [12]
    held_sets = {}
    for n in sizes:
        draw = maker(a.form, a.think, n)
        held = [draw(np.random.default_rng(10_000 + i)) for i in range(200)]
        held_sets[n] = (records(held, enc), np.array([s.meta["mcq"] for s in held]))
    show = pol.tokenizer.encode("The crops show a", add_special_tokens=False)

    def evaluate():
        scores = {n: fast.answers(recs, mcq) if fast is not None else measure(tr, recs, mcq, show)
                  for n, (recs, mcq) in held_sets.items()}
        return scores[sizes[0]] if len(sizes) == 1 else scores
    stages = ([tuple(map(int, part.split(":"))) for part in a.curriculum.split(",")] if a.curriculum
              else [(12, None)])
    if a.curriculum and a.form == "single":
        p.error("--curriculum goes with the multi and scene forms")
    opt = torch.optim.AdamW(pol.model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.95))

    def save():
        save_checkpoint(a.out, pol.model, pol.tokenizer, pol.image_processor, info=dict(probe_steps=step))
    fast = CompiledTextLoss(tr, compile=a.text_forward == "compiled") if a.text_forward != "stock" else None
    if fast is not None:
        torch.backends.cuda.matmul.allow_tf32 = True
        ours, stock = fast.check(*held_sets[sizes[-1]][:1], np.arange(8))
        print(f"{a.text_forward} text forward: loss {ours:.6f} vs stock {stock:.6f}", flush=True)
        if not math.isclose(ours, stock, rel_tol=1e-3):
            raise SystemExit("the written-out text forward differs from the stock one")
    print("step 0", evaluate(), flush=True)
    t_start, step = time.time(), 0
    t_end = t_start + 60 * a.minutes
    pol.model.train()
    for max_objects, stage_steps in stages:
        if time.time() >= t_end:
            break
        if a.curriculum:
            make = maker(a.form, a.think, max_objects)
            print(f"stage: at most {max_objects} objects, {stage_steps} steps", flush=True)
        size = a.pool if stage_steps is None else min(a.pool, stage_steps * a.batch_size)
        pool = training_pool(a.checkpoint, a.form, a.seed, size, a.workers, max_objects, a.think) if a.pool else None
        stage_end = math.inf if stage_steps is None else step + stage_steps
        while time.time() < t_end and step < stage_end:
            if pool is not None:
                batch, rows = pool, rng.choice(len(pool), a.batch_size, replace=False)
            else:
                batch = records([make(rng) for _ in range(a.batch_size)], enc)
                rows = np.arange(len(batch))
            loss = fast.loss(batch, rows) if fast is not None else tr.loss(tr.collate(batch, rows))[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(pol.model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % a.eval_every == 0:
                scores = evaluate()
                print(f"step {step} loss {loss.item():.3f} ({time.time() - t_start:.0f} s)", scores, flush=True)
                save()  # a run cut off by a time limit keeps what it learned
                own = scores.get(max_objects) if len(sizes) > 1 else None
                right = ("exact_mcq", "exact_open") if own and "exact_mcq" in own else ("answer_mcq", "answer_open")
                if a.advance_at is not None and own and min(own[right[0]] / own["n_mcq"],
                                                 own[right[1]] / own["n_open"]) >= a.advance_at:
                    print(f"stage formed at step {step}", flush=True)
                    break
    print(f"step {step} (end)", evaluate(), flush=True)
    save()


if __name__ == "__main__":
    main()
