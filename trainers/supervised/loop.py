"""The training loop and schedule of a supervised build: a ``Stage`` (its parts and their sampling weights, its
steps, peak learning rate and time horizon), the learning-rate schedule (linear warm-up, cosine to 10 %), and
``train_stage``, which trains one stage with AdamW, resumable from a saved state."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from trainers.supervised.args import Args
from trainers.supervised.batches import Trainee
from trainers.supervised.data import Batcher


def learning_rate(peak: float, step: int, progress: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from ``peak`` to ``floor * peak`` over
    the stage's progress in [0, 1]."""
    warm = min(1.0, (step + 1) / max(1, warmup))
    return peak * warm * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@dataclass
class Stage:
    name: str                      # "stage1" | "stage2"
    parts: dict                    # part name -> Records
    weights: dict                  # part name -> sampling weight (relative to batches per epoch)
    steps: int                     # at most this many optimiser steps
    lr: float
    alloc_s: float = math.inf      # the schedule's time horizon (progress = max(step/steps, time/alloc))
    caption_only_until: float = 0.0  # progress below which only caption parts are sampled
    end_by: float = math.inf       # unix time by which this stage AND the next one's steps must be done
    next_steps: int = 0            # the next stage's step count (its time is kept free)
    next_share: float = 0.0        # share of the time before end_by kept for the next stage until
                                   # this stage's own step time is measured
    lead_part: str = ""            # the stage opens with ``lead_steps`` steps at ``lead_lr``, a share
    lead_steps: int = 0            # ``lead_share`` of them on this part (the rest sampled as usual)
    lead_lr: float = 0.0
    lead_share: float = 1.0

    def horizon(self, train_s: float, now: float, sec_per_step: float | None) -> float:
        """The training seconds this stage may take in all: up to ``end_by`` minus the time the
        next stage's steps will need (1.3x this stage's measured step time, +15 s). A last stage (no next
        steps: ``--stage2-fit``) keeps its 15 s from the first step, not only once its step time is measured:
        that shrank its horizon at once after 20 steps, cutting it with the learning rate still high."""
        if not math.isfinite(self.end_by):
            return self.alloc_s
        left = self.end_by - now
        known = sec_per_step or not self.next_steps  # measured, or no next steps to measure for
        keep = self.next_steps * (sec_per_step or 0.0) * 1.3 + 15.0 if known else left * self.next_share
        return max(train_s, train_s + left - keep)


def train_stage(tr: Trainee, stage: Stage, args: Args, writer, *, deadline: float, state: dict | None,
                save_state, evaluate) -> dict:
    """Train one stage (resuming from ``state`` if given); returns its record. Stops at its step
    count, at the end of its time horizon, or at the hard ``deadline`` (then ``stopped`` is set)."""
    model = tr.model
    amp = args.amp and tr.device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=stage.lr, weight_decay=args.weight_decay, betas=(0.9, 0.95))
    step, train_s, history = 0, 0.0, {"loss": [], "eval": []}
    if state:
        opt.load_state_dict(state["opt"])
        step, train_s, history = state["step"], state["train_seconds"], state["history"]
    rng = np.random.default_rng([args.seed, int(stage.name[-1]), step])  # the resume point fixes the data order
    batchers = {n: Batcher(r.lens, args.batch_size, args.batch_tokens, rng) for n, r in stage.parts.items() if len(r)}
    names = sorted(batchers)
    caption_parts = [n for n in names if n.endswith(("_frame", "_caption"))]
    share = np.array([batchers[n].per_epoch * stage.weights.get(n, 1.0) for n in names], np.float64)
    model.train()
    t_last_save = time.time()
    stopped = None
    # a time-bound stage has no known step count: the bar counts steps and shows the schedule's progress
    bar = tqdm(total=None if math.isfinite(stage.alloc_s) else stage.steps, initial=step,
               desc=f"{args.tool_prior} {stage.name}", disable=not args.progress, dynamic_ncols=True, mininterval=5)
    pending_loss = []
    skipped = tokens = 0  # tokens: every token of the batches this call trained on
    step0, wall0 = step, time.time()
    while True:
        measured = (time.time() - wall0) / (step - step0) if step - step0 >= 20 else None
        stage.alloc_s = stage.horizon(train_s, time.time(), measured)
        progress = max(step / max(1, stage.steps), train_s / stage.alloc_s if stage.alloc_s > 0 else 1.0)
        if time.time() >= deadline:
            stopped = "time budget"
            break
        if progress >= 1.0 or stage.steps <= 0 or not names:  # e.g. --stage1-steps 0: a cold start from a base
            break
        t0 = time.time()
        lead = step < stage.lead_steps and stage.lead_part in batchers
        if lead and (stage.lead_share >= 1.0 or rng.random() < stage.lead_share):
            part = stage.lead_part
        else:
            allowed = caption_parts if progress < stage.caption_only_until and caption_parts else names
            allowed = [n for n in allowed if not lead or n != stage.lead_part] or allowed
            p = np.array([share[names.index(n)] for n in allowed])
            part = allowed[int(rng.choice(len(allowed), p=p / p.sum()))]
        lr = learning_rate(stage.lead_lr, step, 0.0, args.warmup) if lead else learning_rate(stage.lr, step, progress,
                                                                                             args.warmup)
        idx = batchers[part].next()
        for g in opt.param_groups:
            g["lr"] = lr
        batch = tr.collate(stage.parts[part], idx)
        tokens += int(stage.parts[part].lens[idx].sum())
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss, ntok = tr.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        if torch.isfinite(gnorm) and torch.isfinite(loss):
            opt.step()
        else:  # one non-finite batch (a bf16 overflow, an empty target) must not poison the weights
            skipped += 1
            if writer is not None:
                writer.add_scalar(f"{stage.name}/skipped_steps", skipped, step)
        step += 1
        pending_loss.append((part, loss.detach(), len(idx), ntok))
        if step % args.log_every == 0 or step == stage.steps:
            vals = torch.stack([x[1] for x in pending_loss]).float().cpu().tolist()
            mean = float(np.nanmean([v if math.isfinite(v) else np.nan for v in vals])) if any(
                math.isfinite(v) for v in vals) else float("nan")
            history["loss"].append((step, mean))
            if writer is not None:
                writer.add_scalar(f"{stage.name}/loss", mean, step)
                for n in {x[0] for x in pending_loss}:
                    writer.add_scalar(f"{stage.name}/loss/{n}", float(np.mean([v for x, v in zip(pending_loss, vals)
                                                                               if x[0] == n])), step)
                writer.add_scalar(f"{stage.name}/lr", lr, step)
                writer.add_scalar(f"{stage.name}/grad_norm", float(gnorm), step)
                writer.add_scalar(f"{stage.name}/progress", progress, step)
                writer.add_scalar(f"{stage.name}/sequences_per_step", float(np.mean([x[2] for x in pending_loss])), step)
            bar.set_postfix(loss=f"{mean:.3f}", progress=f"{progress:.0%}", refresh=False)
            pending_loss = []
        train_s += time.time() - t0
        if args.eval_every and step % args.eval_every == 0:
            t0 = time.time()
            history["eval"].append(dict(step=step, **evaluate(stage.name, step)))
            model.train()
            train_s += time.time() - t0
        bar.update(1)
        if time.time() - t_last_save >= args.checkpoint_every_s:
            save_state(stage.name, step, train_s, stage.alloc_s, opt, history)
            t_last_save = time.time()
    bar.close()
    model.eval()
    if skipped:
        print(f"[sft] {args.tool_prior} {stage.name}: {skipped} step(s) with a non-finite loss or gradient skipped",
              file=sys.stderr)
    return dict(steps=step, seconds=train_s, stopped=stopped, history=history, opt=opt, skipped=skipped, tokens=tokens)


def build_stages(args: Args, parts: dict, deadline: float) -> tuple[Stage, Stage]:
    """Stage 1 (base pretraining: the ``s1_*`` parts) and stage 2 (the cold start: the ``s2_*`` parts). Stage 1 runs
    until the time left is what stage 2's steps need (+ a final eval and save); without a budget it runs its steps."""
    s1 = Stage("stage1", {n: r for n, r in parts.items() if n.startswith("s1_")},
               {"s1_native": args.tool_weight, "s1_reading": args.drill_weight, "s1_direct_needle": args.drill_weight,
                "s1_recall": args.recall_weight, "s1_presence": args.presence_weight}, args.stage1_steps, args.stage1_lr,
               caption_only_until=args.perception_warmup, end_by=deadline - 10.0,
               next_steps=args.stage2_steps, next_share=args.stage2_share,
               lead_part="s1_recall", lead_steps=args.recall_warmup_steps, lead_lr=args.recall_warmup_lr,
               lead_share=args.recall_warmup_share)
    s2 = Stage("stage2", {n: r for n, r in parts.items() if n.startswith("s2_")}, {"s2_rows": args.stage2_rows_weight},
               args.stage2_steps, args.stage2_lr,
               end_by=deadline - 10.0 if args.stage2_fit else math.inf)
    return s1, s2
