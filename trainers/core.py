"""The run loop of the GRPO-family trainers (para_grpo.py, grpo.py, sequential_tool.py).

    setup                  devices, processes (torchrun: DDP), the policy and its frozen reference
    grpo_update            log-probs of the rollouts' tokens, PPO-clip + KL (+ the anchor mode's) loss,
                           backward, clip, step
    evaluate               validation episodes with and without the tool
    train(args, ...)       rollouts -> advantages -> update -> log / eval / checkpoint; returns
                           TrainResult(policy, history, run_dir); callbacks see every step and eval
    the run loop           _train: _build once, then _train_step per step (_collect, _update,
                           _step_metrics, _evaluate, _log_step, _checkpoint_if_due), then _finish

The rest has its own home: the knobs (GRPOArgs, parse_args, validate_args) in trainers/config.py, the
pure maths and the anchor-mode registry in trainers/algos.py, rollout collection and episode metrics
in trainers/rollouts.py, run folders, locks, checkpoints and resume in trainers/run_state.py; the
console scripts (paravt-train, ...) in trainers/cli.py.
The scripts differ only in their defaults (PARA-GRPO on, vanilla GRPO off, sequential dispatch).
Reward: the environment's ``paravt_env.rewards.score`` with a ``RewardConfig`` built from the knobs,
plus any extra terms from ``--reward-fn`` / ``train(reward_fns=...)`` (``paravt_env.reward_terms``).

As a library:

    from trainers.core import train
    from trainers.para_grpo import Args            # PARA-GRPO's defaults (or trainers.config.GRPOArgs: vanilla)

    def brevity(trajectory, info):                 # an extra reward term
        return -0.001 * len(trajectory)

    class StopWhenFormatted:                       # callbacks: on_step / on_eval, both optional
        def on_step(self, step, metrics):
            return metrics["train/format_reward"] > 0.95   # True stops (checkpoint + final_model saved)

    result = train(Args(total_steps=20, progress=False), callbacks=[StopWhenFormatted()], reward_fns=[brevity])
    result.policy, result.history, result.run_dir
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.utils.checkpoint

from trainers import distributed, run_state
from trainers.algos import (anchor_loss, compute_advantages, get_anchor_mode, grpo_token_loss,  # noqa: F401
                            structural_mask)
from trainers.config import fused_kinds, parse_args, resolve_reward_fns, validate_args
from trainers.rollouts import (BadVideos, Rollout, Timer, collect_rollouts, derive_seed, episode_record,  # noqa: F401
                               episode_stats, make_env, reward_config, subagent_passes)
from trainers.run_state import RunStateError

# Grammar tags whose positions the log-prob anchor touches (tool responses are never generated).
STRUCTURAL_TAGS = ("<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>",
                   "<tool_code>", "</tool_code>")
# Tokens the policy may never emit: a sampled <|image_pad|> has no image behind it.
FORBIDDEN_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def lr_at(step: int, args) -> float:
    """The learning rate of step `step` (1-based) of --total-steps T: linear warm-up over the first
    W = --lr-warmup-steps steps (step s <= W gets s/W of the peak), then --lr-schedule over the rest:
    constant; linear (1 - p) or cosine (1 + cos(pi p)) / 2 with p = (s - W - 1) / (T - W), so the first
    step after warm-up gets the peak and the last a small positive rate (never a wasted zero step)."""
    base, warm, total = args.learning_rate, args.lr_warmup_steps, args.total_steps
    if step <= warm:
        return base * step / warm
    if args.lr_schedule == "constant":
        return base
    p = (step - warm - 1) / max(total - warm, 1)
    if args.lr_schedule == "linear":
        return base * (1.0 - p)
    return base * 0.5 * (1.0 + math.cos(math.pi * p))


def autocast(args, device: torch.device):
    """bf16 autocast for --dtype bf16 (weights stay fp32); nothing for fp32."""
    if args.dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ============================================================================================
# setup: devices, processes, model
# ============================================================================================
@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device_arg: str) -> tuple[Dist, torch.device]:
    """init_process_group when launched by torchrun (WORLD_SIZE > 1): nccl on GPUs, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if device_arg == "auto":
        device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    elif device_arg == "cuda":
        device = torch.device(f"cuda:{local}")
    else:
        device = torch.device(device_arg)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, local), device


def suppress_tokens(model, token_ids: Sequence[int]):
    """The policy's action space excludes `token_ids` (their logits -> -1e9 in every forward, for
    sampling and training alike, so behaviour and training log-probs stay consistent)."""
    ids = sorted(set(int(t) for t in token_ids))
    on_device: dict[torch.device, torch.Tensor] = {}  # one copy per device: no host-to-device copy per
                                                       # forward (a CUDA graph cannot record one)

    def hook(module, inputs, output):
        if output.device not in on_device:
            on_device[output.device] = torch.tensor(ids, dtype=torch.long, device=output.device)
        return output.index_fill(-1, on_device[output.device], -1e9)

    return model.get_output_embeddings().register_forward_hook(hook)


def resolve_model(args) -> str:
    if args.model:
        return args.model
    try:
        from agents.lmm.default import default_checkpoint
    except ImportError as exc:
        raise SystemExit(f"no --model given and agents.lmm.default is unavailable ({exc}); pass --model PATH")
    return str(default_checkpoint(prior=args.prior))


def load_policy(path: str, device: torch.device, generation_cache: str = "dynamic", decode_attention: str = "sdpa",
                fuse_projections: Sequence[str] = ()):
    from agents.lmm.policy import TransformersPolicy

    policy = TransformersPolicy(path, device=device, generation_cache=generation_cache,
                                decode_attention=decode_attention, fuse_projections=fuse_projections)
    tok = policy.tokenizer
    suppress_tokens(policy.model, [tok.convert_tokens_to_ids(t) for t in FORBIDDEN_TOKENS])
    return policy


def vllm_policy(policy, model_path: str, args, dist: Dist):
    """--rollout-backend vllm: the same policy, sampling on a vLLM engine colocated in this process."""
    if dist.world > 1:
        raise ValueError("--rollout-backend vllm runs in a single process (one engine beside the trainer); "
                         "drop torchrun or use --rollout-backend hf")
    from agents.lmm.vllm_policy import VLLMPolicy

    tok = policy.tokenizer
    extra = {"gpu_memory_utilization": 0.3} if policy.device.type == "cuda" else {}  # the trainer shares the GPU
    return VLLMPolicy(model_path, policy.model, tok, policy.image_processor, device=policy.device,
                      banned_token_ids=[tok.convert_tokens_to_ids(t) for t in FORBIDDEN_TOKENS], seed=args.seed,
                      **extra)


def prepare_model(model, args) -> None:
    """The policy model as training wants it: vision tower frozen (--freeze-vision), gradient
    checkpointing (--gradient-checkpointing), train mode."""
    if args.freeze_vision:
        for name, p in model.named_parameters():
            if ".visual." in f".{name}":
                p.requires_grad_(False)
    if args.gradient_checkpointing:  # non-reentrant: right gradients even when the inputs need none
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable({"use_reentrant": False})  # the name transformers 5.x uses, or the older one
    model.train()


def structural_ids(tokenizer) -> list[int]:
    ids = []
    for t in STRUCTURAL_TAGS:
        enc = tokenizer.encode(t, add_special_tokens=False)
        if len(enc) == 1:
            ids.append(enc[0])
    return ids


def gather_records(records: list[dict], dist: Dist) -> list[dict]:
    """Every process's records, in rank order (the records themselves on a single process)."""
    if dist.world == 1:
        return records
    gathered = [None] * dist.world
    torch.distributed.all_gather_object(gathered, records)
    return [x for part in gathered for x in part]


# ============================================================================================
# the update
# ============================================================================================
# Scored positions whose vocabulary-wide log-softmax is held at once: about 2**28 values (1 GiB in fp32), so a
# 151k-token vocabulary over a 10k-token completion never needs its full (tokens x vocabulary) logits.
LOGPROB_CHUNK_VALUES = 2**28


def sequence_logprobs(model, policy, convs: Sequence, want_entropy: bool = False):
    """Log-probs of every token of each conversation under `model` (a raw HF module or its DDP
    wrapper), aligned with conv.token_ids (0 before the first generated token), at each
    conversation's sampling temperature; optionally the per-position entropy.

    The model's forward returns its last hidden states (its output layer set aside for the call); the output
    layer then runs on the scored positions in chunks of LOGPROB_CHUNK_VALUES logits, each recomputed in the
    backward pass when there are several, so memory does not grow with tokens x vocabulary."""
    firsts = [next((i for i, g in enumerate(c.generated_mask) if g), len(c) - 1) for c in convs]
    firsts = [max(f, 1) for f in firsts]
    tails = [len(c) - f for c, f in zip(convs, firsts)]
    batch = policy._batch([c.token_ids for c in convs], convs)
    keep = max(tails) + 1
    module = getattr(model, "module", model)  # DDP wraps the model: its output layer is the module's
    head = module.get_output_embeddings()
    module.set_output_embeddings(torch.nn.Identity())
    try:
        hidden = model(**batch, use_cache=False, logits_to_keep=keep).logits
    finally:
        module.set_output_embeddings(head)
    # with left padding every row ends at the last column: position j predicts token j + 1
    scored = torch.cat([hidden[i, keep - 1 - n: keep - 1] for i, n in enumerate(tails)])
    device = scored.device
    targets = torch.tensor([t for c, n in zip(convs, tails) for t in c.token_ids[len(c) - n:]], dtype=torch.long,
                           device=device)
    temps = torch.tensor([c.temperature for c, n in zip(convs, tails) for _ in range(n)], dtype=torch.float32,
                         device=device)
    step = max(1, LOGPROB_CHUNK_VALUES // head.weight.shape[0])
    recompute = torch.is_grad_enabled() and len(targets) > step

    def chunk_logprobs(h, target, temp):
        logsm = torch.log_softmax(head(h).float() / temp[:, None], -1)
        ent = None
        if want_entropy:
            with torch.no_grad():
                ent = -(logsm.exp() * logsm).sum(-1)
        return logsm.gather(1, target[:, None]).squeeze(1), ent

    parts = []
    for lo in range(0, len(targets), step):
        args = (scored[lo:lo + step], targets[lo:lo + step], temps[lo:lo + step])
        parts.append(torch.utils.checkpoint.checkpoint(chunk_logprobs, *args, use_reentrant=False)
                     if recompute else chunk_logprobs(*args))
    lp_all = torch.cat([p[0] for p in parts])
    ent_all = torch.cat([p[1] for p in parts]) if want_entropy else None
    lps, ents, at = [], [], 0
    for c, n in zip(convs, tails):
        lps.append(torch.cat([lp_all.new_zeros(len(c) - n), lp_all[at:at + n]]))
        if want_entropy:
            ents.append(torch.cat([ent_all.new_zeros(len(c) - n), ent_all[at:at + n]]))
        at += n
    return lps, ents


@dataclass
class TrainSeq:
    conv: Any
    advantage: float
    kind: str  # "main" | "sub"


def micro_batch_tokens(args, device) -> int | None:
    """--micro-batch-tokens, with 0 resolved for the device the update runs on (None: no cap)."""
    if args.micro_batch_tokens:
        return args.micro_batch_tokens
    return None if torch.device(device).type == "cuda" else 2048


def _chunks(seqs: list[TrainSeq], size: int, max_padded_tokens: int | None = None) -> list[list[TrainSeq]]:
    """Forward/backward chunks of at most `size` sequences and, when set, at most `max_padded_tokens`
    rows x longest row (a longer sequence goes alone). Sequences are sorted by length first, so each
    chunk pads little."""
    main = [s for s in seqs if s.kind == "main"]
    sub = [s for s in seqs if s.kind == "sub"]
    out = []
    for group in (main, sub):  # main and sub-agent sequences differ in length: batch them apart
        chunk: list[TrainSeq] = []
        for s in sorted(group, key=lambda s: len(s.conv)):
            full = len(chunk) == size or (max_padded_tokens is not None and chunk
                                          and (len(chunk) + 1) * len(s.conv) > max_padded_tokens)
            if full:
                out.append(chunk)
                chunk = []
            chunk.append(s)
        if chunk:
            out.append(chunk)
    return out


def grpo_update(model, ddp_model, ref_model, policy, optimizer, seqs: list[TrainSeq], args, dist: Dist,
                struct_ids: Sequence[int] = (), timer: Timer | None = None) -> dict[str, float]:
    """One GRPO update on `seqs`: token-mean of the PPO-clip + KL loss over every generated token of
    every sequence (all processes together), plus the anchor mode's loss term when it has one (--anchor-mode
    logprob: minus lambda * mean structural log-prob). Gradients are all-reduced by DDP when it wraps the model.
    `timer` adds the seconds of its parts: logprob_forward, reference_forward, loss_backward, optimizer."""
    device = policy.device
    timer = timer or Timer()
    fwd = ddp_model if ddp_model is not None else model
    n_tokens = sum(sum(s.conv.generated_mask) for s in seqs)
    n_struct = sum(sum(structural_mask(s.conv.token_ids, s.conv.generated_mask, struct_ids)) for s in seqs)
    anchor = get_anchor_mode(args.anchor_mode).loss if args.anchor_lambda != 0 else None  # trainers/algos.py
    counts = torch.tensor([n_tokens, n_struct], dtype=torch.float64, device=device)
    if dist.world > 1:
        torch.distributed.all_reduce(counts)
    g_tokens, g_struct = max(float(counts[0]), 1.0), max(float(counts[1]), 1.0)
    chunks = _chunks(seqs, args.micro_batch_size, micro_batch_tokens(args, device))
    n_chunks = len(chunks)
    if dist.world > 1:  # every process must run the same number of forward/backward passes under DDP
        t = torch.tensor([n_chunks], dtype=torch.long, device=device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        n_chunks = int(t)
    sums = defaultdict(float)
    ref_cache: dict[int, list] = {}
    for epoch in range(args.update_epochs):
        optimizer.zero_grad(set_to_none=True)
        for ci in range(n_chunks):
            dummy = ci >= len(chunks)
            chunk = chunks[0][:1] if dummy else chunks[ci]
            convs = [s.conv for s in chunk]
            sync = ci == n_chunks - 1
            ctx = ddp_model.no_sync() if (ddp_model is not None and not sync) else _null()
            with ctx:
                with autocast(args, device):
                    with timer("logprob_forward"):
                        lps, ents = sequence_logprobs(fwd, policy, convs, want_entropy=(epoch == 0))
                    if args.kl_coef != 0 and ref_model is not None:
                        if ci not in ref_cache:
                            with torch.no_grad(), timer("reference_forward"):
                                ref_cache[ci] = [x.detach() for x in sequence_logprobs(ref_model, policy, convs)[0]]
                        refs = ref_cache[ci]
                    else:
                        refs = [None] * len(convs)
                total = torch.zeros((), device=device)
                for s, lp, ref, ent in zip(chunk, lps, refs, ents or [None] * len(chunk)):
                    mask = torch.tensor(s.conv.generated_mask, dtype=torch.float32, device=device)
                    old = torch.tensor(s.conv.logprobs, dtype=torch.float32, device=device)
                    adv = torch.tensor(s.advantage, dtype=torch.float32, device=device)
                    tok_loss, st = grpo_token_loss(lp, old, ref, adv, mask, clip_eps=args.clip_eps,
                                                   kl_coef=args.kl_coef)
                    total = total + tok_loss.sum() / g_tokens
                    if anchor is not None:
                        smask = torch.tensor(structural_mask(s.conv.token_ids, s.conv.generated_mask, struct_ids),
                                             dtype=torch.float32, device=device)
                        total = total + anchor(lp, smask, args.anchor_lambda, g_struct)
                    if not dummy and epoch == 0:
                        sums["kl"] += float((st["kl"] * mask).sum())
                        sums["clipped"] += float((st["clipped"] * mask).sum())
                        sums["entropy"] += float((ent * mask).sum()) if ent is not None else 0.0
                        sums["pg_loss"] += float(tok_loss.detach().sum())
                        sums["tokens"] += float(mask.sum())
                    if not dummy and epoch >= 1:  # the ratio can move from the 2nd pass on
                        sums["clipped_later"] += float((st["clipped"] * mask).sum())
                        sums["tokens_later"] += float(mask.sum())
                if dummy:
                    total = total * 0.0
                with timer("loss_backward"):
                    (total * dist.world).backward()  # DDP averages over processes -> global token mean
                if not dummy:
                    sums["loss"] += float(total.detach()) * dist.world  # the mean over processes is then the global loss
                    if epoch == 0:
                        sums["forward_tokens"] += float(sum(len(c) for c in convs))
        with timer("optimizer"):
            grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                                       args.max_grad_norm)
            if hasattr(grad_norm, "full_tensor"):  # --fsdp: a DTensor over the shards
                grad_norm = grad_norm.full_tensor()
            optimizer.step()
        sums["grad_norm"] = float(grad_norm)
    tok = max(sums["tokens"], 1.0)
    clip_fraction = (sums["clipped_later"] / max(sums["tokens_later"], 1.0) if args.update_epochs > 1
                     else sums["clipped"] / tok)
    return {"loss": sums["loss"] / args.update_epochs, "kl": sums["kl"] / tok, "clip_fraction": clip_fraction,
            "entropy": sums["entropy"] / tok, "grad_norm": sums["grad_norm"], "trained_tokens": sums["tokens"],
            "forward_tokens": sums["forward_tokens"]}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ============================================================================================
# evaluation
# ============================================================================================
def evaluate(policy, env_pool: list, args, dist: Dist, seed: int = 10_000,
             samples: list | None = None) -> dict[str, float]:
    """Validation episodes F..F+eval_episodes-1, F = --eval-first-episode (episode i reset with seed + i, so
    gating draws the same K every evaluation), split across processes, one rollout each at --eval-temperature.
    Given a list as `samples`, this process's first --eval-samples episodes are appended to it as
    trainers.samples.Sample (captured before the env pool is reused). An episode whose video does not decode is
    left out and counted (videos_skipped), as in the protocol evaluation: it never ends the run."""
    skipped = BadVideos(args.max_bad_video_fraction, redraw=False)
    rows = evaluation_records(policy, env_pool, args, dist, seed, samples, bad_videos=skipped)
    return {**episode_stats(gather_records(rows, dist), per_family=True),
            "videos_skipped": reduce_sum(skipped.skipped, dist)}


# Evaluation plays its episodes this many at a time. Each batch's generation seed derives from its start index,
# so anything meant to repeat the trainer's evaluation draw for draw must batch the same way.
EVAL_POOL = 32


def play_episodes(policy, env_pool: list, args, episodes: Sequence[int], *, temperature: float,
                  sub_temperature: float | None, seed: int = 10_000, rank: int = 0, draw: int = 0,
                  bad_videos: BadVideos | None = None):
    """Play episodes (indices; episode i reset with seed + i) one env pool at a time with the trainer's rollout
    settings; yields (indices, finished rollouts) per batch. ``draw`` > 0 samples other generations of the same
    episodes (same K, same videos); draw 0 is what the trainer plays. ``bad_videos`` (``redraw=False``): an
    episode whose video does not decode is left out of its batch and recorded there."""
    for start in range(0, len(episodes), len(env_pool)):
        idx = list(episodes[start:start + len(env_pool)])
        rs = collect_rollouts(policy, env_pool[:len(idx)], [seed + i for i in idx], list(range(len(idx))),
                              temperature=temperature, top_p=1.0, max_new_tokens=args.max_new_tokens,
                              sub_max_new_tokens=args.subagent_max_new_tokens,
                              sub_frames_per_pass=subagent_passes(args), sub_temperature=sub_temperature,
                              think_prefix=args.think_prefix,
                              gen_seed=derive_seed(seed, start, rank, *([draw] if draw else [])),
                              reset_options=[{"episode_index": i} for i in idx], bad_videos=bad_videos)
        yield [idx[r.group] for r in rs], rs


KEPT_TRANSCRIPTS = 8  # an evaluation keeps what the agent wrote in its first episodes, to read beside the numbers


def evaluation_records(policy, env_pool: list, args, dist: Dist, seed: int = 10_000,
                       samples: list | None = None, draw: int = 0, bad_videos: BadVideos | None = None) -> list[dict]:
    """`evaluate`'s episodes of this process, one `episode_record` each (with its "episode" index), in order;
    ``draw`` and ``bad_videos`` as in `play_episodes`."""
    mine = [args.eval_first_episode + i for i in range(args.eval_episodes) if i % dist.world == dist.rank]
    rows: list[dict] = []
    for idx, rs in play_episodes(policy, env_pool, args, mine, temperature=args.eval_temperature,
                                 sub_temperature=args.eval_subagent_temperature, seed=seed, rank=dist.rank,
                                 draw=draw, bad_videos=bad_videos):
        for i, r in zip(idx, rs):
            rows.append({**episode_record(r), "episode": i})
            if i < args.eval_first_episode + KEPT_TRANSCRIPTS:
                rows[-1]["turns"] = [str(m["content"]) for m in r.env.messages if m["role"] == "assistant"]
        if samples is not None:
            from trainers.samples import capture

            samples += [capture(r.env, r.info, r.reward, index=len(samples) + j)
                        for j, r in enumerate(rs[:max(0, args.eval_samples - len(samples))])]
    return rows


# ============================================================================================
# checkpoints
# ============================================================================================
def rng_state() -> dict:
    """Every generator's state as plain data (lists, numbers, tensors): checkpoints load with
    ``weights_only``, which refuses numpy arrays."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {"python": random.getstate(), "numpy": [name, keys.tolist(), pos, has_gauss, gauss],
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(s: dict) -> None:
    version, internal, gauss = s["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = s["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def save_training_checkpoint(run_dir: Path, step: int, model, optimizer, args, history, bad_videos=None) -> Path:
    """Model + optimizer + RNG + history (+ the run's [video draws, skipped]) at `step`, written atomically
    (trainers/run_state.py)."""
    state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "rng": rng_state(), "args": dataclasses.asdict(args), "history": history,
             **({"bad_videos": list(bad_videos)} if bad_videos is not None else {})}
    return run_state.save_training_checkpoint(run_dir, step, state, history)


# ============================================================================================
# the training loop
# ============================================================================================
def starting_build_record(model_path: str) -> dict | None:
    """The starting model's build record (sft_args.json), for final_model to carry: without it a trained
    tiny model would lose the frame size and the sub-agent's passes its build was trained with."""
    from agents.lmm.default import checkpoint_info

    record = checkpoint_info(model_path)
    return {**record, "trained_from": str(model_path)} if record else None


def hparams_table(args) -> str:
    rows = "\n".join(f"|{k}|{v}|" for k, v in dataclasses.asdict(args).items())
    return f"|param|value|\n|-|-|\n{rows}"


@dataclass
class TrainResult:
    """What `train` returns.

    policy   the trained TransformersPolicy (policy.model in eval mode): generate with it, or save it
    history  the records this call added to the run's history, in order: the step-0 evaluation when it
             ran ({"step": 0, "eval/...": ...}), then one per step (train/*, perf/*, and eval/* on
             evaluation steps); [] on processes other than rank 0. The whole run's history, resumed
             parts included, is in run_dir / "history.json".
    run_dir  the run folder: TensorBoard events, checkpoints/, final_model/, history.json
    """
    policy: Any
    history: list[dict]
    run_dir: Path


def _callbacks(callbacks, on_step, on_eval) -> list:
    """One list of callback objects from `callbacks` (an object or a list of them) and plain functions."""
    from types import SimpleNamespace

    cbs = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    if on_step is not None or on_eval is not None:
        cbs.append(SimpleNamespace(on_step=on_step, on_eval=on_eval))
    for cb in cbs:
        hooks = [getattr(cb, h, None) for h in ("on_step", "on_eval")]
        if not any(callable(h) for h in hooks) or any(h is not None and not callable(h) for h in hooks):
            raise TypeError(f"a callback needs an on_step(step, metrics) and/or on_eval(step, metrics) method, "
                            f"got {cb!r}")
    return cbs


def _fire(cbs: list, hook: str, step: int, metrics: dict) -> bool:
    """Call `hook` of every callback (each gets its own copy of the metrics); True if any asks to stop."""
    stop = False
    for cb in cbs:
        fn = getattr(cb, hook, None)
        if fn is not None and fn(step, dict(metrics)):
            stop = True
    return stop


def load_question_files(args):
    """(train dataset, eval dataset) from --source / --eval-source, each read and validated once and
    shared by every env; None where the synthetic world serves."""
    if not (args.source or args.eval_source):
        return None, None
    from paravt_env.sources import DatasetError, load_dataset

    kw = dict(video_root=args.video_root or None, strict=args.strict,
              allow_outside_root=args.allow_videos_outside_root)
    train_ds = load_dataset(args.source, **kw) if args.source else None
    eval_path = args.eval_source or args.source
    eval_ds = train_ds if eval_path == args.source else load_dataset(eval_path, **kw)
    if args.eval_every and len(eval_ds) < args.eval_first_episode + args.eval_episodes:
        raise DatasetError(f"--eval-first-episode {args.eval_first_episode} + --eval-episodes {args.eval_episodes} is "
                           f"more than the {len(eval_ds)} questions of {eval_path}; pass a total of "
                           f"{len(eval_ds)} or fewer")
    return train_ds, eval_ds


def summary(args, run_dir: Path, history: list[dict], seconds: float) -> str:
    """The lines a run ends with: where it is, how it ended, how to look at it."""
    steps = [h for h in history if "train/reward" in h]
    evals = [h for h in history if "eval/accuracy" in h]
    last = steps[-1]["step"] if steps else 0
    took = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    lines = [f"{args.exp_name}: step {last} of {args.total_steps} in {took}; run folder {run_dir}"]
    if steps:
        tail = steps[-10:]

        def mean(key):
            return float(np.mean([h.get(key, float("nan")) for h in tail]))
        lines.append(f"  train (mean of the last {len(tail)} steps): reward {mean('train/reward'):.3f}, accuracy "
                     f"{mean('train/accuracy'):.3f}, format {mean('train/format_reward'):.3f}, tool calls/rollout "
                     f"{mean('train/tool_calls_per_rollout'):.2f}")
    for h in ([evals[0], evals[-1]] if len(evals) > 1 else evals):
        lines.append(f"  eval at step {h['step']}: accuracy {h['eval/accuracy']:.3f}, format "
                     f"{h.get('eval/format_reward', float('nan')):.3f}, tool calls/rollout "
                     f"{h.get('eval/tool_calls_per_rollout', float('nan')):.2f}")
    lines.append(f"  trained model: {Path(run_dir) / run_state.FINAL_MODEL} (pass it to --model)")
    if args.checkpoint_every:
        lines.append(f"  checkpoints: {Path(run_dir) / run_state.CHECKPOINT_DIR} (continue with --resume "
                     f"--run-name {Path(run_dir).name} --total-steps N)")
    lines.append(f"  curves: tensorboard --logdir {args.runs_dir}")
    return "\n".join(lines)


def train(args, callbacks=None, *, on_step: Callable | None = None, on_eval: Callable | None = None,
          reward_fns: Sequence[Callable] | None = None) -> TrainResult:
    """Run GRPO with `args` (a GRPOArgs, or a script's Args); returns TrainResult(policy, history, run_dir).

    callbacks: an object, or a list of them, with on_step(step, metrics) and/or on_eval(step, metrics)
        methods; on_step / on_eval: the same as plain functions. on_eval runs after each evaluation
        (step 0 included) with its eval/* metrics, on_step after each step with the step's record
        (train/*, perf/*, eval/*). A truthy return value stops training after that step: a checkpoint
        (when --checkpoint-every is not 0) and final_model are written, and train returns normally.
        Callbacks run on rank 0 only; under torchrun the stop reaches every process.
    reward_fns: extra reward terms, added to those of --reward-fn (see paravt_env/reward_terms.py).
    Bad settings raise ValueError (or RunStateError for run-folder problems) before anything is written."""
    from paravt_env.reward_terms import check_reward_fns

    validate_args(args)
    fns = resolve_reward_fns(args.reward_fn) + list(check_reward_fns(reward_fns))
    cbs = _callbacks(callbacks, on_step, on_eval)
    data = load_question_files(args)  # a bad question file stops here, before the run folder exists
    torch.set_num_threads(args.torch_threads)
    dist, device = setup_distributed(args.device)
    if args.fsdp:
        distributed.init_process_group(device)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    run = open_distributed_run(args, dist)
    try:
        return _train(args, dist, device, run, cbs, fns, data)
    finally:
        run.close()  # drops the run's lock (process death drops it too)


def open_distributed_run(args, dist: Dist) -> run_state.Run:
    """Rank 0 opens the run (folder, lock, resume checkpoint: trainers/run_state.py); the others
    learn the folder and checkpoint from it, or its error."""
    run, error = None, ""
    if dist.main:
        try:
            run = run_state.open_run(args)
        except RunStateError as exc:
            error = str(exc)
            if dist.world == 1:
                raise
    if dist.world > 1:
        obj = [error, str(run.dir) if run else "", str(run.checkpoint) if run and run.checkpoint else ""]
        torch.distributed.broadcast_object_list(obj, src=0)
        error = obj[0]
        if error:
            if not dist.main:
                raise SystemExit(1)  # rank 0 prints the one line
            raise RunStateError(error)
        if not dist.main:
            run = run_state.Run(Path(obj[1]), checkpoint=Path(obj[2]) if obj[2] else None)
    return run


# --------------------------------------------------------------------------------------------
# the run loop in parts: _build (models, resume, writer, environments); per step _collect (rollouts),
# _update (advantages, the GRPO update), _step_metrics, _evaluate, _log_step, _checkpoint_if_due; _finish
# --------------------------------------------------------------------------------------------
@dataclass
class _Loop:
    """What the parts of the run loop share, built once by `_build`."""

    args: Any
    dist: Dist
    device: torch.device
    run_dir: Path
    model_path: str
    policy: Any                 # samples rollouts: the TransformersPolicy, or the VLLMPolicy around its model
    model: Any                  # the trained module (the TransformersPolicy's model)
    ref_model: Any              # the frozen reference; None with --kl-coef 0
    optimizer: Any
    callbacks: list
    start_step: int = 0
    history: list = field(default_factory=list)      # the whole run's records, a resumed run's earlier ones included
    new_history: list = field(default_factory=list)  # the records this call adds (TrainResult.history)
    ddp_model: Any = None
    struct_ids: list = field(default_factory=list)
    writer: Any = None          # TensorBoard, rank 0 only
    train_envs: list = field(default_factory=list)
    eval_envs: list = field(default_factory=list)
    no_tool_envs: list = field(default_factory=list)
    bar: Any = None
    video_counts: list | None = None  # the run's [video draws, skipped] so far: checkpointed, so --resume counts on

    def whole_model(self):
        """Rollouts and evaluation sample on the whole model: under --fsdp its shards are gathered."""
        return distributed.full_weights(self.model) if self.args.fsdp else contextlib.nullcontext()


def _train(args, dist: Dist, device: torch.device, run: run_state.Run, cbs: list, reward_fns: list,
           data: tuple) -> TrainResult:
    """Evaluate the starting policy, then step until --total-steps or a callback's stop; then final_model."""
    t_start = time.perf_counter()
    loop = _build(args, dist, device, run, cbs, reward_fns, data)
    stop = _evaluate_start(loop)
    step = loop.start_step
    # rank 0 carries the run's counts across --resume; every process adds its own draws from there
    bad_videos = BadVideos(args.max_bad_video_fraction, counts=loop.video_counts if dist.main else None)
    for step0 in range(loop.start_step, loop.start_step if stop else args.total_steps):
        step = step0 + 1
        stop = _train_step(loop, step, bad_videos)
        loop.bar.update(1)
        if stop:
            loop.bar.set_postfix_str(f"stopped by a callback after step {step}")
            break
    loop.bar.close()
    _finish(loop, step, t_start)
    return TrainResult(loop.policy, loop.new_history, loop.run_dir)


def _build(args, dist: Dist, device: torch.device, run: run_state.Run, cbs: list, reward_fns: list,
           data: tuple) -> _Loop:
    """Models and optimizer (from the run's checkpoint when it has one), TensorBoard, environments, progress bar."""
    from tqdm import tqdm

    model_path, policy, ref_model, optimizer = _load_models(args, dist, device)
    loop = _Loop(args, dist, device, run.dir, model_path, policy, policy.model, ref_model, optimizer, cbs)
    if run.checkpoint is not None:
        loop.start_step, loop.history = _resume(loop, run)
    if args.rollout_backend == "vllm":  # built after a resume loaded the weights: it starts from them
        loop.policy = vllm_policy(policy, model_path, args, dist)
    if dist.world > 1 and not args.fsdp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        loop.ddp_model = DDP(loop.model, device_ids=[device.index] if device.type == "cuda" else None)
    loop.struct_ids = structural_ids(loop.policy.tokenizer)
    if dist.main:
        loop.writer = _open_writer(loop)
        _record_hardware(loop)
    _make_envs(loop, reward_fns, data)
    loop.bar = tqdm(initial=loop.start_step, total=args.total_steps, disable=not (args.progress and dist.main),
                    desc=args.exp_name, dynamic_ncols=True)
    return loop


def _load_models(args, dist: Dist, device: torch.device):
    """(model path, policy, frozen reference or None, optimizer): the policy prepared for training, sharded
    under --fsdp before the optimizer exists (so its state is sharded too)."""
    import copy

    if dist.world > 1 and not dist.main:
        torch.distributed.barrier()  # rank 0 builds the default checkpoint first (if needed)
    model_path = resolve_model(args)
    if dist.world > 1 and dist.main:
        torch.distributed.barrier()
    policy = load_policy(model_path, device, args.rollout_backend.removeprefix("hf-")
                         if args.rollout_backend.startswith("hf-") else "dynamic",
                         args.decode_attention, fused_kinds(args))
    model = policy.model
    if not args.keep_decode_caches:
        policy.kept_caches.max_kept = 1
    ref_model = None
    if args.kl_coef != 0:
        ref_model = copy.deepcopy(model).eval()
        for p in ref_model.parameters():
            p.requires_grad_(False)
        if args.reference_dtype == "bf16":  # its parameters: buffers such as the rotary tables stay fp32
            for p in ref_model.parameters():
                p.data = p.data.to(torch.bfloat16)
    prepare_model(model, args)
    if args.fsdp:  # sharded before the optimizer exists, so its state is sharded too
        distributed.shard(model, args)
        if ref_model is not None:
            distributed.shard(ref_model, args)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate, weight_decay=args.weight_decay)
    return model_path, policy, ref_model, optimizer


def _resume(loop: _Loop, run: run_state.Run) -> tuple[int, list]:
    """Model, optimizer and RNG from the run's checkpoint; returns (its step, the history up to it)."""
    args, dist, model, optimizer = loop.args, loop.dist, loop.model, loop.optimizer
    ck = run.load_state()
    if bool(ck.get("sharded")) != bool(args.fsdp):
        raise RunStateError(f"{run.checkpoint} was saved {'with' if ck.get('sharded') else 'without'} --fsdp; "
                            f"resume it {'with' if ck.get('sharded') else 'without'} --fsdp")
    try:
        if args.fsdp:
            rng = distributed.load_checkpoint(ck, run.checkpoint, model, optimizer, dist.rank)
        else:
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            rng = ck["rng"]
    except (RuntimeError, ValueError, KeyError) as exc:
        raise RunStateError(f"{run.checkpoint} does not fit this model ({loop.model_path}): "
                            f"{str(exc).splitlines()[0][:200]}") from exc
    try:
        set_rng_state(rng)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise RunStateError(f"{run.checkpoint} holds random-generator states this program cannot restore "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})") from exc
    loop.video_counts = ck.get("bad_videos")  # none in older checkpoints
    return int(ck["step"]), list(ck.get("history", []))


def device_name(device: torch.device) -> str:
    """The accelerator's name as the driver gives it, or "CPU"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def _record_hardware(loop: _Loop) -> None:
    """Append this start's hardware to the run's hardware.json: a run resumed elsewhere lists each machine, so
    a report can say what every row ran on."""
    path = loop.run_dir / "hardware.json"
    try:
        starts = json.loads(path.read_text()) if path.is_file() else []
    except (OSError, ValueError):
        starts = []
    starts = [s for s in starts if isinstance(s, dict) and s.get("step", 0) < loop.start_step]
    starts.append({"step": loop.start_step, "device": device_name(loop.device), "processes": loop.dist.world,
                   "torch": torch.__version__})
    run_state.atomic_write_json(path, starts)


def _open_writer(loop: _Loop):
    """Rank 0's TensorBoard writer in the run folder, the hyperparameters as its first text."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir, start_step = loop.run_dir, loop.start_step
    if start_step == 0:  # a run that starts over (or a first one): an earlier attempt's events go, so
        for old in run_dir.glob("events.out.tfevents.*"):  # a same-second file name cannot sort after ours
            old.unlink()
    # purge_step: TensorBoard drops what an earlier attempt logged after the resumed step
    writer = SummaryWriter(str(run_dir), purge_step=start_step + 1 if start_step else 0)
    writer.add_text("hyperparameters", hparams_table(loop.args) + f"\n\nmodel: {loop.model_path}, world size "
                                                                  f"{loop.dist.world}")
    return writer


def _make_envs(loop: _Loop, reward_fns: list, data: tuple) -> None:
    """One training env per rollout of a step; evaluation envs (and no-tool ones) for a batch of episodes."""
    args, policy = loop.args, loop.policy
    n_env = args.prompts_per_step * args.group_size
    train_ds, eval_ds = data
    train_kw = dict(reward_fns=reward_fns, **({"dataset": train_ds} if train_ds is not None else {}))
    eval_kw = dict(reward_fns=reward_fns, **({"dataset": eval_ds} if eval_ds is not None else {}))
    loop.train_envs = [make_env(args, "train", policy, **train_kw) for _ in range(n_env)]
    n_eval = min(max(args.eval_episodes, 1), EVAL_POOL) if args.eval_every else 0
    loop.eval_envs = [make_env(args, "validation", policy, **eval_kw) for _ in range(n_eval)]
    loop.no_tool_envs = ([make_env(args, "validation", policy, tools=False, **eval_kw) for _ in range(n_eval)]
                         if args.eval_without_tools else [])


def _evaluate(loop: _Loop, step: int) -> dict[str, float]:
    """The validation episodes (again without the tool with --eval-without-tools), logged as eval/* at `step`;
    rank 0 writes the evaluation's samples."""
    args, model, writer = loop.args, loop.model, loop.writer
    with autocast(args, loop.device), loop.whole_model():
        model.eval()
        samples = [] if writer is not None and args.eval_samples else None  # rank 0 keeps samples
        m = evaluate(loop.policy, loop.eval_envs, args, loop.dist, samples=samples)
        if loop.no_tool_envs:
            m.update({f"no_tools/{k}": v for k, v in evaluate(loop.policy, loop.no_tool_envs, args, loop.dist).items()})
        model.train()
        if writer is not None:
            for k, v in m.items():
                writer.add_scalar(f"eval/{k}", v, step)
        if samples:
            from trainers.samples import write_samples

            write_samples(loop.run_dir, step, samples, writer)
    return m


def _evaluate_start(loop: _Loop) -> bool:
    """Step 0's evaluation of the starting policy (a fresh run with --eval-every); True if a callback stops."""
    args, dist = loop.args, loop.dist
    stop = False
    if args.eval_every and loop.start_step == 0:
        loop.bar.set_postfix_str(f"evaluating the starting policy on {args.eval_episodes} validation episodes")
        m = _evaluate(loop, 0)
        if dist.main:
            rec = {"step": 0, **{f"eval/{k}": v for k, v in m.items()}}
            loop.history.append(rec)
            loop.new_history.append(rec)
            stop = _fire(loop.callbacks, "on_eval", 0, {k: v for k, v in rec.items() if k != "step"})
        stop = _agree(stop, dist)
    return stop


def _train_step(loop: _Loop, step: int, bad_videos: BadVideos) -> bool:
    """Step `step`: rollouts, the update, its metrics (an evaluation too when due) logged, a checkpoint when
    due. True, on every process, when a callback asks to stop."""
    args, dist = loop.args, loop.dist
    cuda = loop.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(loop.device)
    t0 = time.perf_counter()
    timer = Timer(sync=(lambda: torch.cuda.synchronize(loop.device)) if cuda else None)
    rollouts, groups = _collect(loop, step, timer, bad_videos)
    adv, upd, lr = _update(loop, step, rollouts, groups, timer)
    metrics = _step_metrics(loop, rollouts, groups, adv, upd, lr, timer, bad_videos, t0)
    stop = False
    if args.eval_every and (step % args.eval_every == 0 or step == args.total_steps):
        loop.bar.set_postfix_str(f"evaluating step {step} on {args.eval_episodes} validation episodes")
        m = _evaluate(loop, step)
        metrics.update({f"eval/{k}": v for k, v in m.items()})
        if dist.main:
            stop = _fire(loop.callbacks, "on_eval", step, {f"eval/{k}": v for k, v in m.items()})
    if dist.main:
        _log_step(loop, step, metrics)
        stop = _fire(loop.callbacks, "on_step", step, metrics) or stop
    stop = _agree(stop, dist)
    run_state.kill_point("step", step)
    _checkpoint_if_due(loop, step, last=step == args.total_steps or stop)
    return stop


def _collect(loop: _Loop, step: int, timer: Timer, bad_videos: BadVideos) -> tuple[list[Rollout], list[int]]:
    """This process's rollouts of `step`: --prompts-per-step prompts (reset seeds from seed, step, rank and
    prompt), --group-size rollouts each; returns (rollouts, each one's prompt group)."""
    args, dist = loop.args, loop.dist
    n_env = args.prompts_per_step * args.group_size
    prompt_seeds = [derive_seed(args.seed, step, dist.rank, p) for p in range(args.prompts_per_step)]
    seeds = [prompt_seeds[i // args.group_size] for i in range(n_env)]
    groups = [i // args.group_size for i in range(n_env)]
    loop.model.eval()
    with autocast(args, loop.device), loop.whole_model():
        rollouts = collect_rollouts(loop.policy, loop.train_envs, seeds, groups, temperature=args.temperature,
                                    top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                                    sub_max_new_tokens=args.subagent_max_new_tokens,
                                    sub_frames_per_pass=subagent_passes(args),
                                    think_prefix=args.think_prefix,
                                    gen_seed=derive_seed(args.seed, step, dist.rank, 999), timer=timer,
                                    bad_videos=bad_videos)
    loop.model.train()
    return rollouts, groups


def _update(loop: _Loop, step: int, rollouts: list[Rollout], groups: list[int], timer: Timer):
    """Advantages (per group, then over every process's batch) and the GRPO update at this step's learning
    rate; returns (advantages, the update's metrics, the learning rate)."""
    args, dist = loop.args, loop.dist
    adv = compute_advantages([r.reward for r in rollouts], groups, scale=args.reward_scale, bias=args.reward_bias,
                             group_norm=args.group_norm, batch_norm=args.batch_norm,
                             sum_over_processes=(lambda a: sum_array(a, dist)) if dist.world > 1 else None)
    seqs = []
    for r, a in zip(rollouts, adv):
        seqs.append(TrainSeq(r.conv, float(a), "main"))
        if args.train_subagents:
            seqs += [TrainSeq(c, float(a), "sub") for c in r.sub_convs]
    lr = lr_at(step, args)
    for group in loop.optimizer.param_groups:
        group["lr"] = lr
    kept = getattr(loop.policy, "kept_caches", None)
    if not args.keep_decode_caches and kept is not None:
        kept.clear()
    with timer("backward"):  # the whole update; learning rate 0 measures the starting policy (the sweep's cold_start row)
        upd = (grpo_update(loop.model, loop.ddp_model, loop.ref_model, loop.policy, loop.optimizer, seqs, args, dist,
                           loop.struct_ids, timer)
               if args.learning_rate > 0 else {})
        loop.optimizer.zero_grad(set_to_none=True)  # the gradients' memory goes back to the next rollouts
        if args.learning_rate > 0 and hasattr(loop.policy, "sync_weights"):
            loop.policy.sync_weights()  # the vLLM engine samples the next step from the updated weights
    return adv, upd, lr


def _step_metrics(loop: _Loop, rollouts: list[Rollout], groups: list[int], adv, upd: dict, lr: float, timer: Timer,
                  bad_videos: BadVideos, t0: float) -> dict[str, float]:
    """The step's train/*, data/* and perf/* metrics, over every process."""
    dist = loop.dist
    stats = episode_stats(gather_records([episode_record(r) for r in rollouts], dist))
    gen_tokens = sum(r.gen_tokens for r in rollouts)
    elapsed = time.perf_counter() - t0
    metrics = {f"train/{k}": v for k, v in upd.items()}
    metrics["train/advantage_abs"] = float(np.mean(np.abs(adv)))
    # why a step may not learn: a group whose G rewards are all equal has no advantage to follow
    spread_in_group = [float(np.std([r.reward for r, g in zip(rollouts, groups) if g == k]))
                       for k in sorted(set(groups))]
    metrics["train/groups_without_signal"] = float(np.mean([s < 1e-9 for s in spread_in_group]))
    metrics["train/reward_std_in_group"] = float(np.mean(spread_in_group))
    metrics["train/main_tokens_per_rollout"] = float(np.mean([r.main_tokens for r in rollouts]))
    metrics["train/sub_tokens_per_rollout"] = float(np.mean([r.sub_tokens for r in rollouts]))
    # what the rollouts cost the model: every token of the main agent's conversation and of its sub-agents' ones
    image_id = loop.policy.image_token_id
    visual = [sum(t == image_id for c in [r.conv, *r.sub_convs] for t in c.token_ids) for r in rollouts]
    total = [sum(len(c) for c in [r.conv, *r.sub_convs]) for r in rollouts]
    metrics["train/visual_tokens_per_rollout"] = float(np.mean(visual))
    metrics["train/text_tokens_per_rollout"] = float(np.mean(total) - np.mean(visual))
    metrics["train/main_context_tokens"] = float(np.mean([len(r.conv) for r in rollouts]))
    metrics = reduce_metrics(metrics, dist)
    metrics.update({f"train/{k}": v for k, v in stats.items()})  # already over every process
    metrics["train/learning_rate"] = lr
    tot_tokens = reduce_sum(gen_tokens, dist)
    loop.video_counts = [int(round(x)) for x in sum_array(np.array(bad_videos.state(), float), dist)]  # the run's
    metrics["data/videos_skipped"] = float(loop.video_counts[1])
    metrics["perf/step_seconds"] = elapsed
    metrics["perf/tokens_per_second"] = tot_tokens / max(elapsed, 1e-9)
    for k, v in timer.totals.items():
        metrics[f"perf/{k}_seconds"] = v
    metrics["perf/peak_memory_gb"] = peak_memory_gb(loop.device)
    return metrics


def peak_memory_gb(device: torch.device) -> float:
    """The most memory this process held: on CUDA, tensors allocated since the step began (its peak was reset
    then); elsewhere the process's largest resident size so far."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _log_step(loop: _Loop, step: int, metrics: dict[str, float]) -> None:
    """Rank 0: the step's scalars to TensorBoard (eval/* went with the evaluation), its record to the history,
    the progress bar's figures."""
    writer = loop.writer
    for k, v in metrics.items():
        if not k.startswith("eval/"):
            writer.add_scalar(k, v, step)
    writer.flush()
    rec = {"step": step, **metrics}
    loop.history.append(rec)
    loop.new_history.append(rec)
    loop.bar.set_postfix(R=f"{metrics['train/reward']:.2f}", fmt=f"{metrics['train/format_reward_common']:.2f}",
                         acc=f"{metrics['train/accuracy']:.2f}", calls=f"{metrics['train/tool_calls_per_rollout']:.2f}",
                         par=f"{metrics['train/parallel_turn_fraction']:.2f}", s=f"{metrics['perf/step_seconds']:.1f}")


def _checkpoint_if_due(loop: _Loop, step: int, last: bool) -> None:
    """Model + optimizer + RNG + history every --checkpoint-every steps and at the `last` step."""
    args, dist = loop.args, loop.dist
    if args.checkpoint_every and (step % args.checkpoint_every == 0 or last):
        if args.fsdp:  # every process writes its shards
            distributed.save_checkpoint(loop.run_dir, step, loop.model, loop.optimizer, args, loop.history, rng_state(),
                                        dist.main, bad_videos=loop.video_counts)
        elif dist.main:
            save_training_checkpoint(loop.run_dir, step, loop.model, loop.optimizer, args, loop.history,
                                     loop.video_counts)


def _write_final_model(loop: _Loop, step: int) -> None:
    """final_model/ from the weights of `step`, with the starting model's build record; on --resume also
    repairs a finished run's missing or incomplete final_model."""
    args, dist, run_dir, model, policy = loop.args, loop.dist, loop.run_dir, loop.model, loop.policy
    problem = run_state.final_model_problem(run_dir, step) if dist.main else None
    build_record = starting_build_record(loop.model_path)
    if args.fsdp:  # the full weights are gathered by every process, written by rank 0
        flag = [problem]
        torch.distributed.broadcast_object_list(flag, src=0)
        if flag[0]:
            distributed.save_final_model(run_dir / "final_model", model, policy, {"step": step, "run": run_dir.name},
                                         dist.main, build_record)
    elif dist.main:  # also repairs a finished run's missing or incomplete final_model on --resume
        if problem:
            from agents.lmm.tiny_qwen import save_checkpoint

            if loop.start_step == args.total_steps:
                print(f"--resume: {run_dir / 'final_model'} needs writing ({problem}); writing it from step "
                      f"{loop.start_step}", file=sys.stderr)
            save_checkpoint(str(run_dir / "final_model"), model, policy.tokenizer, policy.image_processor,
                            info={"step": step, "run": run_dir.name}, build_record=build_record)


def _finish(loop: _Loop, step: int, t_start: float) -> None:
    """final_model, environments closed, history.json and the closing summary (rank 0), every process done."""
    args, dist = loop.args, loop.dist
    _write_final_model(loop, step)
    for e in loop.train_envs + loop.eval_envs + loop.no_tool_envs:
        e.close()
    if loop.writer is not None:
        loop.writer.close()
        run_state.atomic_write_json(loop.run_dir / "history.json", loop.history)
        if args.progress:
            print(summary(args, loop.run_dir, loop.history, time.perf_counter() - t_start), flush=True)
    if dist.world > 1:
        torch.distributed.barrier()
    loop.model.eval()


def _agree(stop: bool, dist: Dist) -> bool:
    """Rank 0's stop decision (its callbacks ran), on every process."""
    if dist.world == 1:
        return stop
    flag = torch.tensor([int(stop)], device=_comm_device())
    torch.distributed.broadcast(flag, src=0)
    return bool(flag.item())


def _comm_device() -> torch.device:
    backend = torch.distributed.get_backend()
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def reduce_metrics(metrics: dict[str, float], dist: Dist) -> dict[str, float]:
    """Mean of each scalar over processes (every process computes the same keys)."""
    if dist.world == 1:
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=_comm_device())
    torch.distributed.all_reduce(t)
    return {k: float(v) / dist.world for k, v in zip(keys, t)}


def sum_array(x: np.ndarray, dist: Dist) -> np.ndarray:
    """Element-wise sum of a small float array over every process."""
    if dist.world == 1:
        return np.asarray(x, dtype=np.float64)
    t = torch.tensor(np.asarray(x, dtype=np.float64), device=_comm_device())
    torch.distributed.all_reduce(t)
    return t.cpu().numpy()


def reduce_sum(x: float, dist: Dist) -> float:
    return float(sum_array(np.array([float(x)]), dist)[0])


def main_for(args_cls, argv=None, description: str = "") -> list[dict]:
    """The scripts' command line: parse `argv` into `args_cls`, train; returns TrainResult.history (what
    the tests and benchmarks read; a library caller wants `train` and its TrainResult)."""
    from paravt_env.sources import DatasetError, VideoError

    args = parse_args(args_cls, argv, description)
    try:
        history = train(args).history
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()  # no process tears the group down while another still writes or talks
        return history
    except (RunStateError, DatasetError, VideoError) as exc:  # one line naming the file and problem, no traceback
        raise SystemExit(f"error: {exc}") from None
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
