"""Two-stage supervised build of the tiny LMM (CleanRL style: one readable file).

Stage 1, "base pretraining": captions of crops (the sub-agent skill), direct answers from the
overview and, depending on ``--tool-prior``, tool-use traces played in the environment by
scripted agents, written in the model's OWN NATIVE dialect (``<tool_code>crop_video(...)``
Python calls, ``</think>`` often skipped, ``Answer: X`` without ``<answer>`` tags):
    strong: many native traces (``--stage1-tool``)        weak: ``--weak-tool-fraction`` of them
Stage 2, "cold start": a short SFT on the ParaVT grammar (``<think>``, ``<tool_call>`` JSON,
``<answer>``): tool traces + direct answers, on episodes disjoint from stage 1's draw.

Corpora (``agents.lmm.corpus.build_corpus``): direct answers only where the overview shows the
evidence, tool traces (``scene`` + a fraction of ``oracle``) only where it does not, wrong final
answers dropped: the corpus teaches WHEN a tool is needed. Stage 1 draws from the first
``--stage1-episodes`` train episodes, stage 2 from the rest (disjoint).

Loss: mean negative log-likelihood over assistant tokens only (``Conversation.generated_mask``).
Every sample is encoded ONCE (token ids + fp16 pixel values) before training; batches are
length-bucketed (sorted within shuffled chunks) so padding is small; on CUDA the forward runs
under bf16 autocast. ``--workers N`` builds and encodes the corpora in N spawned processes.

Presets (``--preset``; an explicit flag always wins over its preset):
    cpu  (default, what ``agents.lmm.default.default_checkpoint`` builds): K in {4, 8}, few caption
         samples, fixed short think lines (see ``agents.lmm.corpus``): ~6 min (strong) and ~3.5 min (weak) on ONE CPU
         thread (both priors build side by side on 2 cores with ``--threads 1``)
    gpu  ~10x the samples, 3000 + 300 steps at batch 32, K up to 64, workers: a few minutes on one H200

    python trainers/sft.py --tool-prior strong --out checkpoints/strong
    python trainers/sft.py --preset gpu --device cuda --tool-prior strong --out checkpoints/gpu-strong
    tensorboard --logdir runs

Writes ``<out>/base`` (after stage 1) and ``<out>/cold_start`` (after stage 2), each a
``save_checkpoint`` directory loadable by ``TransformersPolicy(path)``, plus ``sft_args.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.corpus import WorldConfig, build_corpus, encode_sample, tokenizer_texts  # noqa: E402,F401
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from agents.lmm.tiny_qwen import build_image_processor, build_tiny_model, save_checkpoint  # noqa: E402
from agents.lmm.tokenizer import build_tokenizer  # noqa: E402


@dataclass
class Args:
    exp_name: str = field(default="sft", metadata={"help": "experiment name (part of the run name)"})
    seed: int = field(default=1, metadata={"help": "seed of corpora, init and batching"})
    tool_prior: str = field(default="strong", metadata={"help": "strong: many native tool traces in stage 1; weak: few/none",
                                                        "choices": ("strong", "weak")})
    out: str = field(default="checkpoints/sft", metadata={"help": "output directory (base/ and cold_start/ go here)"})
    runs_dir: str = field(default="runs", metadata={"help": "TensorBoard root; the run goes to <runs_dir>/<run name>"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads (0 = torch default)"})
    device: str = field(default="cpu", metadata={"help": "torch device (cpu, cuda, cuda:1, ...)"})
    preset: str = field(default="cpu", metadata={"help": "cpu: the small default build; gpu: many more samples and "
                                                 "steps (explicit flags override the preset)", "choices": ("cpu", "gpu")})
    workers: int = field(default=0, metadata={"help": "processes that build + encode the corpora (0 = in-process)"})
    amp: bool = field(default=True, metadata={"help": "bf16 autocast for forward/backward on CUDA (ignored on CPU)"})
    # world
    world_seed: int = field(default=0, metadata={"help": "synthetic world seed (train split only is used)"})
    frame_size: int = field(default=28, metadata={"help": "frame height = width in pixels (28 -> 1 visual token per frame)"})
    crop_max_frames: int = field(default=8, metadata={"help": "frames per crop"})
    budgets: str = field(default="4,8", metadata={"help": "overview sizes K drawn for training episodes (comma list)"})
    vocab_size: int = field(default=2048, metadata={"help": "BPE vocabulary size"})
    # stage 1
    stage1_caption: int = field(default=150, metadata={"help": "stage 1: caption (sub-agent) samples"})
    stage1_direct: int = field(default=400, metadata={"help": "stage 1: direct-answer samples (ParaVT <answer> format)"})
    stage1_tool: int = field(default=500, metadata={"help": "stage 1: native-format tool traces under the strong prior"})
    stage1_episodes: int = field(default=4000, metadata={"help": "stage 1 draws train episodes [0, N), stage 2 [N, end)"})
    oracle_fraction: float = field(default=0.25, metadata={"help": "tool traces played by the oracle (the rest: scene)"})
    keep_wrong: float = field(default=0.0, metadata={"help": "fraction of wrong-answer traces kept (0: all dropped)"})
    weak_tool_fraction: float = field(default=0.0, metadata={"help": "weak prior: fraction of --stage1-tool traces kept"})
    native_close_think_p: float = field(default=0.3, metadata={"help": "native dialect: probability a turn closes </think>"})
    stage1_steps: int = field(default=400, metadata={"help": "stage 1 optimiser steps"})
    stage1_lr: float = field(default=2e-3, metadata={"help": "stage 1 peak learning rate (cosine, linear warm-up)"})
    # stage 2
    stage2_tool: int = field(default=300, metadata={"help": "stage 2: ParaVT-format tool traces"})
    stage2_direct: int = field(default=150, metadata={"help": "stage 2: ParaVT-format direct answers"})
    stage2_caption: int = field(default=30, metadata={"help": "stage 2: caption samples (keeps the sub-agent skill)"})
    stage2_steps: int = field(default=100, metadata={"help": "stage 2 (cold start) optimiser steps"})
    stage2_lr: float = field(default=1e-3, metadata={"help": "stage 2 peak learning rate"})
    # optimisation
    batch_size: int = field(default=8, metadata={"help": "conversations per step"})
    warmup: int = field(default=10, metadata={"help": "warm-up steps of each stage"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient-norm clip"})
    log_every: int = field(default=10, metadata={"help": "TensorBoard scalar period (steps)"})
    progress: bool = field(default=True, metadata={"help": "show tqdm progress bars"})

    def world(self) -> WorldConfig:
        return WorldConfig(world_seed=self.world_seed, frame_size=(self.frame_size, self.frame_size),
                           crop_max_frames=self.crop_max_frames)

    def budget_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in str(self.budgets).split(",") if x.strip())


# Settings of each preset; an explicit command-line flag (or keyword to ``Args``/``with_preset``) wins.
PRESETS = {
    "cpu": {},
    "gpu": dict(budgets="4,8,16,32,64", stage1_caption=6000, stage1_direct=3000, stage1_tool=6000,
                stage1_steps=3000, stage1_lr=2e-3, stage2_tool=1500, stage2_direct=900, stage2_caption=300,
                stage2_steps=300, stage2_lr=1e-3, batch_size=32, warmup=50, log_every=50, workers=12),
}


def with_preset(args: Args, given=()) -> Args:
    """``args`` with its preset's values for every field not in ``given`` (explicitly set)."""
    preset = PRESETS[args.preset]
    return dataclasses.replace(args, **{k: v for k, v in preset.items() if k not in given})


def parse_args(argv=None, cls=Args):
    """Every dataclass field becomes ``--kebab-name`` with its help text and default; then the
    ``--preset``'s values fill every field not given explicitly."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(cls):
        name = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "") + f" (default: {f.default})"
        if f.type in (bool, "bool"):
            p.add_argument(name, default=f.default, help=helptext, type=lambda s: s.lower() in ("1", "true", "yes", "y"),
                           metavar="BOOL")
        else:
            typ = {"int": int, "float": float, "str": str}.get(f.type if isinstance(f.type, str) else f.type.__name__, str)
            p.add_argument(name, default=f.default, type=typ, help=helptext, choices=f.metadata.get("choices"))
    ns = vars(p.parse_args(argv))
    explicit = argparse.ArgumentParser(add_help=False)
    for a in p._actions:
        if a.option_strings and a.dest != "help":
            explicit.add_argument(*a.option_strings, dest=a.dest, default=argparse.SUPPRESS, type=str)
    given = set(vars(explicit.parse_known_args(argv)[0]))
    return with_preset(cls(**ns), given)


def nll_loss(policy, convs) -> tuple[torch.Tensor, int]:
    """Mean NLL over assistant tokens (the loss mask is ``generated_mask``)."""
    lps = policy.conversation_logprobs(convs, temperature=1.0)
    total, n = 0.0, 0
    for lp, c in zip(lps, convs):
        m = torch.tensor(c.generated_mask, dtype=lp.dtype, device=lp.device)
        total = total + -(lp * m).sum()
        n += int(m.sum())
    return total / max(n, 1), n


def train_stage(policy, samples, steps: int, lr: float, args: Args, writer, stage: str, rng: random.Random):
    """``steps`` AdamW steps on ``samples`` (records with a pre-encoded ``conv``)."""
    model = policy.model
    amp = args.amp and policy.device.type == "cuda"
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=args.weight_decay, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, args.warmup))
                                              * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps))))))
    order: list[int] = []
    t0, tokens, losses = time.time(), 0, []
    bar = tqdm(range(steps), desc=f"{stage}", disable=not args.progress, dynamic_ncols=True)
    for step in bar:
        if len(order) < args.batch_size:  # a new epoch; length-bucketed batches cut padding
            perm = list(range(len(samples)))
            rng.shuffle(perm)
            chunks = [perm[i:i + args.batch_size * 8] for i in range(0, len(perm), args.batch_size * 8)]
            order = [i for ch in chunks for i in sorted(ch, key=lambda j: samples[j]["len"])]
            batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
            rng.shuffle(batches)
            order = [i for b in batches for i in b]
        idx, order = order[:args.batch_size], order[args.batch_size:]
        convs = [samples[i]["conv"] for i in idx]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss, n = nll_loss(policy, convs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        sched.step()
        tokens += sum(len(c) for c in convs)
        losses.append(loss.detach())
        if step % args.log_every == 0 or step == steps - 1:
            bar.set_postfix(loss=f"{loss.item():.3f}")
        if writer is not None and (step % args.log_every == 0 or step == steps - 1):
            writer.add_scalar(f"{stage}/loss", loss.item(), step)
            writer.add_scalar(f"{stage}/grad_norm", float(gnorm), step)
            writer.add_scalar(f"{stage}/lr", sched.get_last_lr()[0], step)
            writer.add_scalar(f"{stage}/tokens_per_s", tokens / (time.time() - t0), step)
    model.eval()
    return [float(x) for x in torch.stack(losses).cpu()] if losses else []


def _chunks(n: int, parts: int) -> list[int]:
    return [n // parts + (j < n % parts) for j in range(parts)]


def _share_by_file() -> None:
    """Workers return many tensors; passing each as a file descriptor can exhaust a low fd limit."""
    torch.multiprocessing.set_sharing_strategy("file_system")


def encoded_corpus(tokenizer, n_caption, n_direct, n_tool, dialect, kwargs, workers: int, progress=None):
    """(records, stats): the corpus built and encoded in-process or in ``workers`` spawned processes
    (chunk j gets seed ``kwargs['seed'] * 1009 + j``)."""
    from agents.lmm.corpus import corpus_stats, encode_record, encoded_chunk
    if workers <= 1:
        samples = build_corpus(n_caption, n_direct, n_tool, dialect, progress=progress, **kwargs)
        policy = TransformersPolicy(build_tiny_model(tokenizer, num_hidden_layers=1), tokenizer, build_image_processor())
        return [encode_record(policy, s) for s in samples], corpus_stats(samples)
    import concurrent.futures as cf
    import multiprocessing as mp
    parts = [(c, d, t) for c, d, t in zip(_chunks(n_caption, workers), _chunks(n_direct, workers),
                                           _chunks(n_tool, workers))]
    records, stats = [], []
    torch.multiprocessing.set_sharing_strategy("file_system")
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_share_by_file) as ex:
        futs = [ex.submit(encoded_chunk, tokenizer, c, d, t, dialect, dict(kwargs, seed=kwargs["seed"] * 1009 + j))
                for j, (c, d, t) in enumerate(parts)]
        for (c, d, t), f in zip(parts, futs):
            r, st = f.result()
            records += r
            stats.append(st)
            progress and progress(c + d + t)
    merged: dict = {"kinds": {}, "agents": {}, "families": {}}
    for st in stats:
        for key in ("kinds", "agents", "families"):
            for k, v in st.get(key, {}).items():
                merged[key][k] = merged[key].get(k, 0) + v
    return records, merged


def corpora(args: Args, tokenizer, progress: bool = True):
    """(stage 1 records, stage 2 records, stats), deterministic in the seed (and ``--workers``)."""
    wc, budgets = args.world(), args.budget_tuple()
    n_tool = args.stage1_tool if args.tool_prior == "strong" else int(round(args.stage1_tool * args.weak_tool_fraction))
    n1 = args.stage1_caption + args.stage1_direct + n_tool
    n2 = args.stage2_caption + args.stage2_direct + args.stage2_tool
    common = dict(wc=wc, budgets=budgets, oracle_fraction=args.oracle_fraction, keep_wrong=args.keep_wrong)
    with tqdm(total=n1 + n2, desc="corpora", disable=not progress, dynamic_ncols=True) as bar:
        r1, st1 = encoded_corpus(tokenizer, args.stage1_caption, args.stage1_direct, n_tool, "native",
                                 dict(common, seed=args.seed, close_think_p=args.native_close_think_p,
                                      index_range=(0, args.stage1_episodes)), args.workers, bar.update)
        r2, st2 = encoded_corpus(tokenizer, args.stage2_caption, args.stage2_direct, args.stage2_tool, "paravt",
                                 dict(common, seed=args.seed + 1000, index_range=(args.stage1_episodes, wc.dataset_size)),
                                 args.workers, bar.update)
    return r1, r2, {"stage1": st1, "stage2": st2}


def build_base(args: Args):
    """Tokenizer (same for both priors: trained on both dialects) + random-init tiny model + policy."""
    tok = build_tokenizer(tokenizer_texts(args.world()), vocab_size=args.vocab_size)
    model = build_tiny_model(tok, seed=args.seed)
    proc = build_image_processor()
    return TransformersPolicy(model, tok, proc, device=args.device)


def main(args: Args) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    if args.threads:
        torch.set_num_threads(args.threads)
    if str(args.device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    run_name = f"{args.exp_name}__{args.tool_prior}__{args.seed}__{int(time.time())}"
    writer = SummaryWriter(os.path.join(args.runs_dir, run_name))
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
        f"|{k}|{v}|" for k, v in dataclasses.asdict(args).items()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    policy = build_base(args)
    r1, r2, stats = corpora(args, policy.tokenizer, progress=args.progress)
    for name, recs in (("stage1", r1), ("stage2", r2)):
        writer.add_text(f"{name}/corpus", json.dumps(stats[name]))
        writer.add_scalar(f"{name}/mean_tokens", float(np.mean([r["len"] for r in recs])), 0)
    rng = random.Random(args.seed)

    info = {"args": dataclasses.asdict(args), "run_name": run_name, "corpus_stats": stats,
            "corpus_seconds": time.time() - t_start}
    t1 = time.time()
    info["stage1_loss"] = train_stage(policy, r1, args.stage1_steps, args.stage1_lr, args, writer, "stage1", rng)
    info["stage1_seconds"] = time.time() - t1
    save_checkpoint(str(out / "base"), policy.model, policy.tokenizer, policy.image_processor)
    t2 = time.time()
    info["stage2_loss"] = train_stage(policy, r2, args.stage2_steps, args.stage2_lr, args, writer, "stage2", rng)
    info["stage2_seconds"] = time.time() - t2
    save_checkpoint(str(out / "cold_start"), policy.model, policy.tokenizer, policy.image_processor)
    info["total_seconds"] = time.time() - t_start
    info["corpus"] = {"stage1": {k: sum(r["kind"] == k for r in r1) for k in ("caption", "direct", "tool")},
                      "stage2": {k: sum(r["kind"] == k for r in r2) for k in ("caption", "direct", "tool")}}
    (out / "sft_args.json").write_text(json.dumps(info, indent=1))
    writer.close()
    return out / "cold_start"


if __name__ == "__main__":
    main(parse_args())
