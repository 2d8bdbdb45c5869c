"""GRPO steps of real-size language models under FSDP2: seconds per step, tokens/s, peak memory, MFU.

    # 2x H200, the Qwen2.5-VL-7B and -3B language-model shapes, random weights, bf16:
    torchrun --nproc_per_node=2 benchmarks/scale_fsdp.py --shape 7b --out benchmarks/results/gpu/scale_fsdp_7b
    torchrun --nproc_per_node=2 benchmarks/scale_fsdp.py --shape 3b --out benchmarks/results/gpu/scale_fsdp_3b
    # CPU smoke run (gloo, a tiny shape; what the tests run):
    python benchmarks/scale_fsdp.py --tiny --out runs/scale_fsdp_tiny

What one step is, per process (as in trainers/core.py under --fsdp): P prompts x G = 8 rollouts
of --prompt-tokens random token ids each, sampled for exactly --new-tokens tokens (T = 0.7, end of
sequence ignored) by Hugging Face `generate` on the whole model (trainers/distributed.full_weights:
the shards gathered once, no collectives while sampling); then the update on those sequences in
micro-batches of --micro-batch-size: the frozen reference's forward (sharded, no grad; skipped with
--kl-coef 0), the policy's forward and backward with the trainers' PPO-clip + k3-KL token loss
(trainers/algos.grpo_token_loss) over the generated tokens, gradient clipping and AdamW, all
through trainers/distributed.shard (FSDP2, bf16 MixedPrecisionPolicy: bf16 compute, fp32 gradient
reduction, fp32 sharded master weights and optimizer state) with activation checkpointing on
(--no-gradient-checkpointing turns it off).

Shapes: the language models of Qwen2.5-VL-3B and -7B written out below (Qwen2 decoder, the same
dimensions; the vision tower and M-RoPE are left out: they change neither the FLOPs nor the memory
of the language model much). Weights are random (created on the meta device, then materialised
shard by shard on each GPU), so no checkpoint is needed.

Prompt batches: --prompts lists the P values to try, smallest first; each is measured with
--steps steps (the first is warm-up, left out of the means). Results are written after every P,
so when a larger P runs out of memory the process exits and the file holds every P that fit (under
torchrun one rank's exit stops the others).

Numbers reported per P: seconds per step (generation, update, total); generated tokens/s over all
GPUs; update tokens/s (every token of every sequence, all GPUs); peak memory per GPU (the largest
torch.cuda.max_memory_allocated over ranks; on CPU the largest process RSS); MFU of the update =
model FLOPs / (update seconds x GPUs x --peak-tflops), with 6N FLOPs per token for the policy's
forward + backward and 2N more for the reference forward when --kl-coef is not 0 (N = parameter
count, embeddings included, attention's sequence-length term left out, the usual convention).
Writes scale_fsdp.json and scale_fsdp.md to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python benchmarks/scale_fsdp.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as td  # noqa: E402

from trainers import distributed  # noqa: E402
from trainers.algos import grpo_token_loss  # noqa: E402

# The text (language-model) part of each Qwen2.5-VL config.json.
SHAPES = {
    "3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=128000,
               rms_norm_eps=1e-6, rope_theta=1000000.0),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False, max_position_embeddings=128000,
               rms_norm_eps=1e-6, rope_theta=1000000.0),
    # the repository's tiny model's language part: a CPU smoke test of the code path
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=2048, tie_word_embeddings=True, max_position_embeddings=8192,
                 rms_norm_eps=1e-6, rope_theta=10000.0),
}
H200_BF16_TFLOPS = 790.0


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    p.add_argument("--tiny", action="store_true", help="the tiny shape with small sizes, fp32, on CPU (smoke test)")
    p.add_argument("--group-size", type=int, default=8, help="G, rollouts per prompt (paper: 8)")
    p.add_argument("--prompts", default=None, help="prompt batches P per process to try, smallest first "
                                                 "(default 1,2,4,8,16; --tiny: 1,2)")
    p.add_argument("--prompt-tokens", type=int, default=None, help="default 1536 (--tiny: 24)")
    p.add_argument("--new-tokens", type=int, default=None, help="default 512 (--tiny: 8)")
    p.add_argument("--micro-batch-size", type=int, default=None, help="sequences per forward/backward (default 8; "
                                                                      "--tiny: 4)")
    p.add_argument("--steps", type=int, default=3, help="steps per P (the first is warm-up)")
    p.add_argument("--kl-coef", type=float, default=0.01, help="0 drops the reference model")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--peak-tflops", type=float, default=None,
                   help=f"per-device peak for MFU (default {H200_BF16_TFLOPS:.0f} on CUDA, bf16 H200; none on CPU)")
    p.add_argument("--out", default="runs/scale_fsdp")
    args = p.parse_args(argv)
    defaults = dict(prompts="1,2,4,8,16", prompt_tokens=1536, new_tokens=512, micro_batch_size=8)
    if args.tiny:
        torch.set_num_threads(1)
        args.shape, args.dtype = "tiny", "fp32"
        defaults = dict(prompts="1,2", prompt_tokens=24, new_tokens=8, micro_batch_size=4)
        args.group_size = min(args.group_size, 4)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.prompt_list = [int(x) for x in args.prompts.split(",") if x.strip()]
    if not args.prompt_list or min(args.prompt_list) < 1 or args.steps < 2 or args.group_size < 2 or min(
            args.prompt_tokens, args.new_tokens, args.micro_batch_size) < 1:
        p.error("--prompts needs positive integers; --steps >= 2, --group-size >= 2, token counts and micro-batch >= 1")
    return args


def lm_config(shape: str):
    """The Qwen2 language-model config of a SHAPES entry."""
    from transformers import Qwen2Config

    cfg = dict(SHAPES[shape])
    theta = cfg.pop("rope_theta")
    return Qwen2Config(**cfg, rope_parameters={"rope_type": "default", "rope_theta": theta})


def build(shape: str, device: torch.device, args, seed: int):
    """A random Qwen2 language model of `shape`, sharded: built on the meta device, sharded, then
    materialised (each process allocates only its shards)."""
    from transformers import Qwen2ForCausalLM

    config = lm_config(shape)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    if args.gradient_checkpointing:  # as trainers.core.prepare_model: transformers' own, non-reentrant
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable({"use_reentrant": False})
    distributed.shard(model, args)
    model.to_empty(device=device)
    g = torch.Generator(device=device).manual_seed(seed * 1000 + td.get_rank())
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if name.endswith("norm.weight"):
                local.fill_(1.0)
            elif name.endswith(".bias"):
                local.zero_()
            else:
                local.normal_(0.0, 0.02, generator=g)
    # the rotary table is a non-persistent buffer: rebuild it on the device (to_empty left it garbage)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config).to(device)
    model.generation_config.pad_token_id = 0
    n_params = sum(p.numel() for p in model.parameters())  # DTensor numel is the global size
    return model, n_params


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_gb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)


def reduce(x: float, op, device) -> float:
    t = torch.tensor([float(x)], dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    td.all_reduce(t, op=op)
    return float(t)


def one_step(policy, ref, optimizer, args, device, n_prompts: int, gen) -> dict:
    """Rollouts on the gathered model, then the GRPO update; seconds of each part."""
    n_seq = n_prompts * args.group_size
    vocab = policy.config.vocab_size
    prompts = torch.randint(1, vocab, (n_seq, args.prompt_tokens), generator=gen, device="cpu").to(device)
    sync(device)
    t0 = time.perf_counter()
    policy.eval()
    with distributed.full_weights(policy), torch.no_grad():
        out = policy.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                              temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=args.new_tokens,
                              min_new_tokens=args.new_tokens, eos_token_id=None, pad_token_id=0, use_cache=True)
    sync(device)
    t_gen = time.perf_counter() - t0
    if out.shape[1] != args.prompt_tokens + args.new_tokens:
        raise RuntimeError(f"generate returned {out.shape[1] - args.prompt_tokens} new tokens, not {args.new_tokens}")
    policy.train()
    seqs = out[:, :args.prompt_tokens + args.new_tokens]
    n_new = args.new_tokens
    adv = torch.randn(n_seq, generator=gen).to(device)
    t1 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = n_seq * n_new
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.dtype == "bf16"
                else torch.autocast(device.type, enabled=False))
    for i in range(0, n_seq, args.micro_batch_size):
        ids = seqs[i:i + args.micro_batch_size]
        target = ids[:, -n_new:]
        with autocast:
            ref_lp = None
            if ref is not None:
                with torch.no_grad():
                    ref_logits = ref(input_ids=ids, use_cache=False, logits_to_keep=n_new + 1).logits[:, :-1].float()
                    ref_lp = torch.log_softmax(ref_logits / 0.7, -1).gather(-1, target[..., None]).squeeze(-1)
                    del ref_logits
            logits = policy(input_ids=ids, use_cache=False, logits_to_keep=n_new + 1).logits[:, :-1].float()
            lp = torch.log_softmax(logits / 0.7, -1).gather(-1, target[..., None]).squeeze(-1)
            del logits
        old = lp.detach()
        loss, _ = grpo_token_loss(lp, old, ref_lp, adv[i:i + len(ids), None], torch.ones_like(lp),
                                  clip_eps=0.2, kl_coef=args.kl_coef)
        (loss.sum() / total_tokens).backward()
    norm = torch.nn.utils.clip_grad_norm_([p for p in policy.parameters() if p.requires_grad], 1.0)
    distributed.full_tensor(norm)
    optimizer.step()
    sync(device)
    t_upd = time.perf_counter() - t1
    return {"gen": t_gen, "update": t_upd, "gen_tokens": n_seq * n_new,
            "update_tokens": int(seqs.numel())}


def table(rows: list[dict], meta: dict) -> str:
    n = meta["params"]
    size = f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.1f}M"
    lines = [f"FSDP2 over {meta['world_size']} x {meta['device_name']}, shape {meta['shape']} "
             f"({size} parameters), {meta['dtype']}, G = {meta['group_size']}, "
             f"{meta['prompt_tokens']} prompt + {meta['new_tokens']} new tokens, micro-batch "
             f"{meta['micro_batch_size']}, activation checkpointing {'on' if meta['gradient_checkpointing'] else 'off'}, "
             f"reference model {'on' if meta['kl_coef'] else 'off'}; means over steps 2..{meta['steps']}.", "",
             "| prompts per GPU (P) | sequences per step | s/step | generation s | update s | generated tok/s | "
             "update tok/s | peak memory per GPU | MFU of the update |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        lines.append(f"| {r['prompts_per_gpu']} | {r['sequences_per_step']} | {r['step_seconds']:.2f} | "
                     f"{r['generation_seconds']:.2f} | {r['update_seconds']:.2f} | {r['generated_tokens_per_second']:,.0f} | "
                     f"{r['update_tokens_per_second']:,.0f} | {r['peak_memory_gb']:.1f} GB | {mfu} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if torch.cuda.is_available() and not args.tiny else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        td.init_process_group("nccl" if device.type == "cuda" else "gloo")
    else:
        distributed.init_process_group(device)
    rank, world = td.get_rank(), td.get_world_size()
    peak = args.peak_tflops if args.peak_tflops is not None else (H200_BF16_TFLOPS if device.type == "cuda" else None)
    torch.manual_seed(0)
    policy, n_params = build(args.shape, device, args, seed=1)
    ref = None
    if args.kl_coef:
        ref, _ = build(args.shape, device, args, seed=2)
        ref.eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.01)
    meta = {"shape": args.shape, "params": n_params, "world_size": world, "dtype": args.dtype,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
            "group_size": args.group_size, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
            "micro_batch_size": args.micro_batch_size, "steps": args.steps, "kl_coef": args.kl_coef,
            "gradient_checkpointing": args.gradient_checkpointing, "peak_tflops_per_device": peak,
            "torch": torch.__version__, "command": " ".join(sys.argv)}
    out = Path(args.out)
    rows = []
    gen = torch.Generator().manual_seed(rank)
    flops_per_token = (6 + (2 if ref is not None else 0)) * n_params
    for n_prompts in args.prompt_list:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        steps = [one_step(policy, ref, optimizer, args, device, n_prompts, gen) for _ in range(args.steps)]
        timed = steps[1:]
        gen_s = reduce(sum(s["gen"] for s in timed) / len(timed), td.ReduceOp.MAX, device)
        upd_s = reduce(sum(s["update"] for s in timed) / len(timed), td.ReduceOp.MAX, device)
        gen_tokens = reduce(timed[0]["gen_tokens"], td.ReduceOp.SUM, device)
        upd_tokens = reduce(timed[0]["update_tokens"], td.ReduceOp.SUM, device)
        mem = reduce(peak_memory_gb(device), td.ReduceOp.MAX, device)
        row = {"prompts_per_gpu": n_prompts, "sequences_per_step": int(n_prompts * args.group_size * world),
               "step_seconds": gen_s + upd_s, "generation_seconds": gen_s, "update_seconds": upd_s,
               "generated_tokens_per_second": gen_tokens / gen_s, "update_tokens_per_second": upd_tokens / upd_s,
               "peak_memory_gb": mem,
               "mfu": (flops_per_token * upd_tokens / (upd_s * world * peak * 1e12)) if peak else None}
        rows.append(row)
        if rank == 0:  # after every P: a later out-of-memory exit keeps what fit
            out.mkdir(parents=True, exist_ok=True)
            (out / "scale_fsdp.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
            (out / "scale_fsdp.md").write_text(table(rows, meta))
            print(table(rows, meta), flush=True)
    td.destroy_process_group()
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    main()
