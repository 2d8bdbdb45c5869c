"""Rollout generation of real-size language models on one GPU: stock `generate` vs static KV caches, compiled or graphed.

    # one H200, the Qwen2.5-VL-3B and -7B language-model shapes, random bf16 weights:
    python benchmarks/speed_generation_scale.py --shapes 3b,7b --out runs/benchmarks/speed_generation_scale
    # the committed tables, one shape a call (benchmarks/results/gpu/generation_graph/gen3b.md, gen7b.md):
    python benchmarks/speed_generation_scale.py --shapes 3b --caches dynamic,static,graph,graph-compiled \
        --out benchmarks/results/gpu/generation_graph/gen3b
    # CPU smoke run (the tiny shape, no compilation):
    python benchmarks/speed_generation_scale.py --tiny --out runs/benchmarks/speed_generation_scale_tiny

Both samplers are Hugging Face `generate` as the trainers call it (TransformersPolicy.generate): sampling
at T = 0.7, no top-k/top-p cut, with the trainers' behaviour log-prob recorder as a logits processor
(agents.lmm.policy._RecordLogprobs: log_softmax(logits / T) of each sampled token). They differ in
the KV cache only:
  dynamic          the default growing cache, eager forward: the baseline (~2k tok/s at 3B);
  static-per-call  `cache_implementation="static"`: a preallocated cache, so `generate` compiles the
                   decode forward with torch.compile mode "reduce-overhead" (CUDA graphs); transformers
                   builds a new cache in every call, so its tensors move between calls;
  static           the same with one StaticCache kept and reset across calls (what
                   TransformersPolicy(generation_cache="static") and --rollout-backend hf-static do),
                   so a recorded graph finds its cache at the same addresses.
Three more are not `generate` but agents.lmm.graph_decode's loop (same sampling operations, same log-prob
record), as TransformersPolicy(generation_cache="graph" / "graph-compiled") and --rollout-backend
hf-graph / hf-graph-compiled run it:
  graph            a kept StaticCache, the decode forward recorded once as a CUDA graph and replayed;
  graph-eager      the same loop with the decode forward run eagerly (what the graph alone buys);
  graph-compiled   the graph recorded around the torch.compile'd decode forward (inductor's fused kernels);
  graph-autotuned  the same compiled with mode "max-autotune-no-cudagraphs" (inductor times matmul kernels).
A graph sampler named NAME:KERNEL uses that decode attention kernel instead of --decode-attention
(e.g. --caches dynamic,graph-compiled,graph-compiled:flex compares two kernels against one stock run),
and NAME[:KERNEL]+qkv / +mlp / +qkv+mlp computes each layer's query, key and value / gate and up products
as one (graph_decode.FusedProjections).
The first call of each pays the compilation or graph recording and is left out of the timing.
Every row generates exactly --new-tokens tokens (end of sequence ignored), prompts are random ids.
--group-size G makes the batch batch/G distinct prompts, each repeated G times (a GRPO group): stock
`generate` prefills and attends to every row's copy; the graph samplers prefill each distinct prompt
once and keep its keys and values once (cascade attention: agents.lmm.graph_decode.SharedPrefix), as
TransformersPolicy does for conversations with the same tokens and images.

Log-probs: for the timed batch, the recorded behaviour log-probs are compared with a training
forward pass over the finished sequences (the trainers' _tail_logprobs computation: one forward,
log_softmax(logits / T) at each generated position): mean and max absolute difference over all
generated tokens, for both samplers, so the static path's numbers sit beside the stock path's.

Writes <--out>.json and <--out>.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # python benchmarks/speed_generation_scale.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.graph_decode import DECODE_ATTENTION, cache_argument  # noqa: E402
from agents.lmm.policy import _RecordLogprobs  # noqa: E402
from benchmarks.report import write_report  # noqa: E402
from benchmarks.scale_fsdp import lm_config  # noqa: E402


def build(shape: str, device: torch.device, dtype: torch.dtype, seed: int = 0):
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(lm_config(shape)).to(dtype)
    model.eval().requires_grad_(False)
    model.generation_config.pad_token_id = 0
    return model


FUSION_SUFFIXES = {"qkv": "attention", "mlp": "mlp"}  # sampler suffix -> graph_decode.FUSABLE kind


def parse_sampler(spec: str) -> tuple[str, str, tuple[str, ...]]:
    """NAME[:KERNEL][+qkv][+mlp] -> (name, kernel or "", the graph_decode.FUSABLE kinds to fuse)."""
    base, *suffixes = spec.split("+")
    name, _, kernel = base.partition(":")
    unknown = [s for s in suffixes if s not in FUSION_SUFFIXES]
    if unknown:
        raise ValueError(f"{spec!r}: a +suffix is one of {tuple(FUSION_SUFFIXES)}, got {unknown}")
    return name, kernel, tuple(FUSION_SUFFIXES[s] for s in suffixes)


def sample(model, prompts, args, cache: str, seed: int, kept: dict, new_tokens: int | None = None):
    from transformers import CompileConfig, GenerationConfig, StaticCache

    new_tokens = args.new_tokens if new_tokens is None else new_tokens
    cache, kernel, fused = parse_sampler(cache)
    if cache.startswith("graph"):
        from agents.lmm.graph_decode import KeptCaches, sample as graph_sample

        compile_decode = {"graph-compiled": True, "graph-autotuned": "max-autotune-no-cudagraphs"}.get(cache, False)
        kept.setdefault("graph", KeptCaches(model, compile_decode=compile_decode and not args.tiny,
                                            decode_attention=kernel or args.decode_attention,
                                            fuse_projections=fused))
        rows = None
        if args.group_size > 1:  # each distinct prompt prefilled once (as TransformersPolicy does for a group)
            prompts, rows = prompts[::args.group_size], torch.arange(len(prompts)) // args.group_size
        torch.manual_seed(seed)
        return graph_sample(model, kept["graph"], {"input_ids": prompts, "attention_mask": torch.ones_like(prompts)},
                            max_new_tokens=new_tokens, temperature=args.temperature, pad_id=0,
                            use_graph=cache != "graph-eager" and prompts.device.type == "cuda", rows=rows)
    recorder = _RecordLogprobs(args.temperature) if args.recorder else None
    extra, call = {}, {}
    if cache != "dynamic":
        extra = {"compile_config": CompileConfig(fullgraph=True)}
        if args.tiny:  # CPU smoke run: the cache only (no inductor build)
            extra = {"disable_compile": True}
    if cache == "static-per-call":  # transformers builds a new StaticCache in every generate call
        extra["cache_implementation"] = "static"
    elif cache == "static":  # one StaticCache kept across calls (TransformersPolicy's way): same addresses
        if "cache" not in kept:
            kept["cache"] = StaticCache(config=model.config.get_text_config(decoder=True),
                                        max_cache_len=prompts.shape[1] + args.new_tokens)  # one length for all calls
        else:
            kept["cache"].reset()
        call[cache_argument(model)] = kept["cache"]
    cfg = GenerationConfig(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None,
                           pad_token_id=0, use_cache=True, return_dict_in_generate=True, **extra)
    torch.manual_seed(seed)
    out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=cfg,
                         logits_processor=[recorder] if recorder else [], **call)
    seqs = out.sequences
    return seqs, recorder.finish(seqs[:, -1]) if recorder else None


@torch.no_grad()
def training_logprobs(model, seqs, n_new: int, temperature: float, micro: int = 8):
    """log pi(token | prefix) of the last n_new tokens, by full forward passes (as in training)."""
    out = []
    for i in range(0, len(seqs), micro):
        logits = model(input_ids=seqs[i:i + micro], use_cache=False, logits_to_keep=n_new + 1).logits[:, :-1].float()
        out.append(torch.log_softmax(logits / temperature, -1).gather(-1, seqs[i:i + micro, -n_new:, None]).squeeze(-1))
    return torch.cat(out)


def timed(call, seeds, device) -> tuple[list[float], object]:
    """Seconds of call(seed=s) for each seed (the device synchronised around each) and the last result."""
    times, out = [], None
    for seed in seeds:
        sync(device)
        t0 = time.perf_counter()
        out = call(seed=seed)
        sync(device)
        times.append(time.perf_counter() - t0)
    return times, out


def profile_call(call, device, top: int = 60) -> dict:
    """GPU kernel time of one call and its largest kernels (self device time, summed over launches)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        call()
        sync(device)
    wall = time.perf_counter() - t0
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or device.type != "cuda"]
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events.sort(key=lambda e: -getattr(e, attr))
    return {"wall_seconds_profiled": wall, "kernel_seconds": sum(getattr(e, attr) for e in events) / 1e6,
            "kernel_launches": sum(e.count for e in events),
            "seconds_by_kind": kernel_kinds(events, attr),
            "top": [{"name": e.key[:120], "seconds": getattr(e, attr) / 1e6, "calls": e.count} for e in events[:top]]}


KERNEL_KINDS = (("matrix products", ("nvjet", "gemm", "cutlass", "splitkreduce", "cublas")),
                ("attention", ("flash", "fmha", "sdpa", "attention", "flex")),
                ("compiled (triton)", ("triton",)),
                ("sampling", ("softmax", "multinomial", "exponential", "argmax", "sort", "scatter_gather")))


def kernel_kinds(events, attr: str) -> dict:
    """Kernel seconds by kind (KERNEL_KINDS, matched on the lower-cased name in that order; the rest "other")."""
    total: dict[str, float] = {}
    for e in events:
        name = e.key.lower()
        kind = next((k for k, words in KERNEL_KINDS if any(w in name for w in words)), "other")
        total[kind] = total.get(kind, 0.0) + getattr(e, attr) / 1e6
    return total


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def setting(parser, flag: str, option: str, where: str, known) -> tuple[str, object]:
    """NAME=VALUE of a repeatable option (NAME must be `known` in `where`): VALUE a Python literal, or a
    bare word (layout=prompt)."""
    import ast

    name, _, value = option.partition("=")
    if not known(name):
        parser.error(f"{flag} {option}: {where} has no {name!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="3b,7b", help="comma list of benchmarks/scale_fsdp.py SHAPES")
    p.add_argument("--caches", default="dynamic,static,graph-eager,graph,graph-compiled",
                   help="dynamic (stock), static-per-call (cache_implementation='static': a new cache per call), "
                        "static (one cache kept across calls, as TransformersPolicy(generation_cache='static')), "
                        "graph-eager / graph / graph-compiled (agents.lmm.graph_decode without / with CUDA graphs, "
                        "with graphs around the compiled decode forward), graph-autotuned (compiled in max-autotune "
                        "mode)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--group-size", type=int, default=1,
                   help="G: the batch is batch/G distinct prompts, each G times (a GRPO group); the graph "
                        "samplers prefill each distinct prompt once, stock generate prefills every row")
    p.add_argument("--decode-attention", default="sdpa", choices=DECODE_ATTENTION,
                   help="attention kernel of the compiled decode step (agents.lmm.graph_decode._decode_sdpa)")
    p.add_argument("--profile", action="store_true",
                   help="profile one timed call of each sampler (torch.profiler): GPU kernel time per call "
                        "and the kernels that take most of it")
    p.add_argument("--inductor", action="append", default=[], metavar="NAME=VALUE",
                   help="set torch._inductor.config.NAME (a Python literal) for the compiled samplers, e.g. "
                        "combo_kernels=True; repeatable")
    p.add_argument("--kernel-tuning", action="append", default=[], metavar="NAME=VALUE",
                   help="set agents.lmm.cascade_kernel.TUNING[NAME] (a Python literal) for the :triton samplers, "
                        "e.g. waves=32 num_warps=2 (benchmarks/speed_cascade_kernel.py times the choices); repeatable")
    p.add_argument("--repeats", type=int, default=2, help="timed calls per sampler after one warm-up call")
    p.add_argument("--recorder", action=argparse.BooleanOptionalAction, default=True,
                   help="record behaviour log-probs as the trainers do (--no-recorder: plain sampling, no log-prob check)")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny shape, small sizes, fp32")
    p.add_argument("--out", default="runs/benchmarks/speed_generation_scale")
    a = p.parse_args(argv)
    if a.inductor:
        import torch._inductor.config as inductor_config

        for option in a.inductor:
            name, value = setting(p, "--inductor", option, "torch._inductor.config",
                                  partial(hasattr, inductor_config))
            setattr(inductor_config, name, value)
    if a.kernel_tuning:
        from agents.lmm import cascade_kernel

        for option in a.kernel_tuning:
            name, value = setting(p, "--kernel-tuning", option,
                                  f"cascade_kernel.TUNING ({', '.join(cascade_kernel.TUNING)})",
                                  cascade_kernel.TUNING.__contains__)
            cascade_kernel.TUNING[name] = value
    device = torch.device("cuda" if torch.cuda.is_available() and not a.tiny else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if a.tiny:
        a.shapes, a.batch, a.prompt_tokens, a.new_tokens, a.repeats = "tiny", 4, 16, 8, 1
    if a.batch % a.group_size:
        p.error(f"--batch {a.batch} is not a multiple of --group-size {a.group_size}")
    for cache in a.caches.split(","):
        try:
            name, kernel, fused = parse_sampler(cache)
        except ValueError as err:
            p.error(str(err))
        if (kernel or fused) and not name.startswith("graph"):
            p.error(f"{cache!r}: a :KERNEL or +qkv/+mlp suffix goes on a graph sampler")
        if kernel and kernel not in DECODE_ATTENTION:
            p.error(f"{cache!r}: the kernel is one of {DECODE_ATTENTION}")
    res = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU", "batch": a.batch,
           "group_size": a.group_size, "decode_attention": a.decode_attention, "inductor": a.inductor,
           "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens, "temperature": a.temperature,
           "dtype": str(dtype).replace("torch.", ""), "recorder": a.recorder, "torch": torch.__version__, "command": " ".join(sys.argv),
           "shapes": {}}
    out = Path(a.out)
    for shape in a.shapes.split(","):
        model = build(shape, device, dtype)
        gen = torch.Generator().manual_seed(0)
        distinct = torch.randint(1, model.config.vocab_size, (a.batch // a.group_size, a.prompt_tokens), generator=gen)
        prompts = distinct.repeat_interleave(a.group_size, dim=0).to(device)
        rows = {}
        for cache in a.caches.split(","):
            kept: dict = {}
            run = partial(sample, model, prompts, a, cache, kept=kept)
            (first,), _ = timed(run, [0], device)  # warm-up (compilation, graph recording)
            times, (seqs, lps) = timed(run, range(1, 1 + a.repeats), device)
            prefill, _ = timed(partial(run, new_tokens=1), range(1, 1 + a.repeats), device)  # the prompt pass alone
            profile = profile_call(partial(run, seed=1), device) if a.profile else None
            ref = training_logprobs(model, seqs, a.new_tokens, a.temperature) if lps is not None else None
            diff = (lps.to(ref.device) - ref).abs() if lps is not None else torch.full((1,), float("nan"))
            best = min(times)
            rows[cache] = {"seconds": best, "all_seconds": times, "first_call_seconds": first,
                           "tokens_per_second": a.batch * a.new_tokens / best, "prefill_seconds": min(prefill),
                           "decode_ms_per_token_step": 1e3 * (best - min(prefill)) / max(1, a.new_tokens - 1),
                           "logprob_abs_diff_mean": float(diff.mean()), "logprob_abs_diff_max": float(diff.max()),
                           "peak_memory_gb": (torch.cuda.max_memory_allocated(device) / 2**30
                                              if device.type == "cuda" else None)}
            if profile is not None:
                rows[cache]["profile"] = profile
            if "graph" in kept and kept["graph"].graphs_failed:  # the row timed eager decoding, say so
                rows[cache]["graph_recording_failed"] = kept["graph"].graphs_failed
            print(shape, cache, {k: v for k, v in rows[cache].items() if k != "profile"}, flush=True)
            res["shapes"][shape] = rows
            write_report(out, res, table(res), echo=False)  # after every sampler: a later failure keeps what ran
        if "dynamic" in rows:
            for r in rows.values():
                r["speedup_vs_dynamic"] = rows["dynamic"]["seconds"] / r["seconds"]
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
        write_report(out, res, table(res), echo=False)
    print(table(res))
    return res


def table(res: dict) -> str:
    group = res.get("group_size", 1)
    lines = [f"Rollout generation on one {res['device']}: batch {res['batch']} x ({res['prompt_tokens']} prompt + "
             f"{res['new_tokens']} new tokens)"
             + (f", {res['batch'] // group} distinct prompts x G = {group} (graph samplers prefill each once)"
                if group > 1 else ", distinct prompts")
             + f", compiled decode attention {res.get('decode_attention', 'sdpa')} (or the sampler's :KERNEL)"
             + f", T = {res['temperature']}, {res['dtype']}, random weights, "
             + ("with the trainers' log-prob recorder" if res.get("recorder", True) else "plain sampling (no recorder)")
             + "; best of the timed calls after a warm-up call (compilation).", "",
             "| shape | KV cache | seconds | generated tok/s | speed-up | prefill s | decode ms/step | first call s | "
             "log-prob diff vs training forward (mean / max) |", "|---|---|---|---|---|---|---|---|---|"]
    for shape, rows in res["shapes"].items():
        for cache, r in rows.items():
            lines.append(f"| {shape} | {cache} | {r['seconds']:.2f} | {r['tokens_per_second']:,.0f} | "
                         f"{r.get('speedup_vs_dynamic', 1.0):.2f}x | {r.get('prefill_seconds', float('nan')):.2f} | "
                         f"{r.get('decode_ms_per_token_step', float('nan')):.2f} | {r['first_call_seconds']:.1f} | "
                         f"{r['logprob_abs_diff_mean']:.2e} / {r['logprob_abs_diff_max']:.2e} |")
    for shape, rows in res["shapes"].items():
        for cache, r in rows.items():
            if "profile" in r:
                pr = r["profile"]
                lines += ["", f"Profile, {shape} {cache}: {pr['kernel_seconds']:.3f} s of kernels "
                          f"({pr.get('kernel_launches', '?')} launches) in a {pr['wall_seconds_profiled']:.3f} s call; "
                          "largest:"]
                lines += [f"- {k['seconds']:.3f} s, {k['calls']} launches: `{k['name']}`" for k in pr["top"][:6]]
                if "seconds_by_kind" in pr:
                    lines.append("- by kind: " + ", ".join(f"{kind} {sec:.3f} s"
                                                          for kind, sec in pr["seconds_by_kind"].items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
