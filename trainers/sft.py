"""Two-stage supervised build of the tiny LMM (CleanRL style: one readable file).

Stage 1, "base pretraining": captions of crops (the sub-agent skill), direct answers from the
overview and, depending on ``--tool-prior``, tool-use traces played in the environment by
scripted agents, written in the model's OWN NATIVE dialect (``<tool_code>crop_video(...)``
Python calls, ``</think>`` often skipped, ``Answer: X`` without ``<answer>`` tags):
    strong: many native traces (``--stage1-tool``)        weak: ``--weak-tool-fraction`` of them
Stage 2, "cold start": a short SFT on the ParaVT grammar (``<think>``, ``<tool_call>`` JSON,
``<answer>``): tool traces + direct answers, on episodes disjoint from stage 1's draw.

Loss: mean negative log-likelihood over assistant tokens only (``Conversation.generated_mask``).
Everything comes from the TRAIN split of the synthetic world.

    python trainers/sft.py --tool-prior strong --out checkpoints/strong
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

from agents.lmm.corpus import WorldConfig, build_corpus, encode_sample, tokenizer_texts  # noqa: E402
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
    device: str = field(default="cpu", metadata={"help": "torch device"})
    # world
    world_seed: int = field(default=0, metadata={"help": "synthetic world seed (train split only is used)"})
    frame_size: int = field(default=28, metadata={"help": "frame height = width in pixels (28 -> 1 visual token per frame)"})
    crop_max_frames: int = field(default=8, metadata={"help": "frames per crop"})
    budgets: str = field(default="4,8,16", metadata={"help": "overview sizes K drawn for training episodes (comma list)"})
    vocab_size: int = field(default=2048, metadata={"help": "BPE vocabulary size"})
    # stage 1
    stage1_caption: int = field(default=700, metadata={"help": "stage 1: caption (sub-agent) samples"})
    stage1_direct: int = field(default=500, metadata={"help": "stage 1: direct-answer samples (ParaVT <answer> format)"})
    stage1_tool: int = field(default=700, metadata={"help": "stage 1: native-format tool traces under the strong prior"})
    weak_tool_fraction: float = field(default=0.0, metadata={"help": "weak prior: fraction of --stage1-tool traces kept"})
    native_close_think_p: float = field(default=0.3, metadata={"help": "native dialect: probability a turn closes </think>"})
    stage1_steps: int = field(default=150, metadata={"help": "stage 1 optimiser steps"})
    stage1_lr: float = field(default=2e-3, metadata={"help": "stage 1 peak learning rate (cosine, linear warm-up)"})
    # stage 2
    stage2_tool: int = field(default=160, metadata={"help": "stage 2: ParaVT-format tool traces"})
    stage2_direct: int = field(default=80, metadata={"help": "stage 2: ParaVT-format direct answers"})
    stage2_caption: int = field(default=40, metadata={"help": "stage 2: caption samples (keeps the sub-agent skill)"})
    stage2_steps: int = field(default=40, metadata={"help": "stage 2 (cold start) optimiser steps"})
    stage2_lr: float = field(default=5e-4, metadata={"help": "stage 2 peak learning rate"})
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


def parse_args(argv=None, cls=Args):
    """Every dataclass field becomes ``--kebab-name`` with its help text and default."""
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
    return cls(**vars(p.parse_args(argv)))


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
    model = policy.model
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
        convs = [encode_sample(policy, samples[i]["messages"]) for i in idx]
        loss, n = nll_loss(policy, convs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        sched.step()
        tokens += sum(len(c) for c in convs)
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if writer is not None and (step % args.log_every == 0 or step == steps - 1):
            writer.add_scalar(f"{stage}/loss", loss.item(), step)
            writer.add_scalar(f"{stage}/grad_norm", float(gnorm), step)
            writer.add_scalar(f"{stage}/lr", sched.get_last_lr()[0], step)
            writer.add_scalar(f"{stage}/tokens_per_s", tokens / (time.time() - t0), step)
    model.eval()
    return losses


def _as_records(policy, samples):
    """Keep messages; measure lengths once for length-bucketing."""
    return [dict(messages=s.messages, kind=s.kind, len=len(encode_sample(policy, s.messages))) for s in samples]


def corpora(args: Args, progress: bool = True):
    """(stage 1 samples, stage 2 samples) for ``args`` (deterministic in the seed)."""
    wc, budgets = args.world(), args.budget_tuple()
    n_tool = args.stage1_tool if args.tool_prior == "strong" else int(round(args.stage1_tool * args.weak_tool_fraction))
    n1 = args.stage1_caption + args.stage1_direct + n_tool
    n2 = args.stage2_caption + args.stage2_direct + args.stage2_tool
    with tqdm(total=n1 + n2, desc="corpora", disable=not progress, dynamic_ncols=True) as bar:
        s1 = build_corpus(args.stage1_caption, args.stage1_direct, n_tool, "native", seed=args.seed, wc=wc,
                          budgets=budgets, close_think_p=args.native_close_think_p, progress=bar.update)
        s2 = build_corpus(args.stage2_caption, args.stage2_direct, args.stage2_tool, "paravt", seed=args.seed + 1000,
                          wc=wc, budgets=budgets, index_offset=3000, progress=bar.update)
    return s1, s2


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
    s1, s2 = corpora(args, progress=args.progress)
    r1, r2 = _as_records(policy, s1), _as_records(policy, s2)
    for name, recs in (("stage1", r1), ("stage2", r2)):
        kinds = {k: sum(r["kind"] == k for r in recs) for k in ("caption", "direct", "tool")}
        writer.add_text(f"{name}/corpus", json.dumps(kinds))
        writer.add_scalar(f"{name}/mean_tokens", float(np.mean([r["len"] for r in recs])), 0)
    rng = random.Random(args.seed)

    info = {"args": dataclasses.asdict(args), "run_name": run_name}
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
