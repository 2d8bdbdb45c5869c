"""The cascade decode attention alone, at a real shape: agents.lmm.cascade_kernel's triton kernel over a
grid of launch settings, against graph_decode's cascade of batched products (eager and compiled).

One decode step of rows that share prompts (a GRPO group): each row's query heads attend to its prompt's
keys (kept once per prompt) and to its own new tokens written so far. The default shape is
Qwen2.5-VL-7B's (4 key/value heads of 128, 7 query heads each) at the issue's batch: 64 rows = 8 prompts
x G = 8, 512 prompt slots, 256 new-token slots of which half are written (the mean over a rollout).
Each setting is timed with CUDA events over --reps calls of one layer recorded as one CUDA graph (GPU time,
as in a graphed decode step; launching from Python would time the host), and checked against the batched
products (max abs difference). The table lists the fastest settings and the bytes each call must read
(the prompts' keys/values once, each row's written new keys/values) over its time.

    python benchmarks/speed_cascade_kernel.py                       # on a GPU (triton installed)
    python benchmarks/speed_cascade_kernel.py --tiny                # smoke run: tiny shape, fp32 (on a CPU through
                                                                    # triton's interpreter)
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # python benchmarks/speed_cascade_kernel.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def inputs(a, device, dtype, generator):
    """(query, prompt keys, prompt values, prompt mask, prompt_of_row, own keys, own values, own_length) and
    the SharedPrefix tuple graph_decode._cascade_attention reads, for one layer."""
    rows, prompts = a.prompts * a.group, a.prompts
    groups = a.query_heads // a.kv_heads

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(device, dtype)

    query = randn(rows, a.kv_heads, groups, a.head_dim)
    pk, pv = (randn(prompts, a.kv_heads, a.prompt_slots, a.head_dim) for _ in range(2))
    ok, ov = (randn(rows, a.kv_heads, a.new_slots, a.head_dim) for _ in range(2))
    prompt_mask = torch.zeros(prompts, 1, 1, a.prompt_slots, device=device, dtype=dtype)
    own_mask = torch.zeros(rows, 1, 1, a.new_slots, device=device, dtype=dtype)
    own_mask[..., a.written:] = torch.finfo(dtype).min
    prompt_of_row = torch.arange(rows, device=device) // a.group
    own_length = torch.tensor([a.written], dtype=torch.int32, device=device)
    members = torch.arange(rows, device=device).view(prompts, a.group)
    shared = ((pk,), (pv,), prompt_mask, members, torch.arange(rows, device=device), prompt_of_row, own_length)
    return query, pk, pv, prompt_mask.view(prompts, -1), prompt_of_row, ok, ov, own_length, own_mask, shared


def time_call(call, device, reps: int) -> float:
    """Microseconds a call, after three warm-up calls. On a GPU the reps calls are recorded as one CUDA graph
    and replayed, as a decode step runs them: timing launches from Python would measure the host (a call
    takes ~20-40 us to launch, more than the kernel reads in), not the GPU."""
    for _ in range(3):
        call()
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        return 1e6 * (time.perf_counter() - t0) / reps
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(reps):
                call()
    except RuntimeError as err:  # a call that cannot be recorded: say so rather than time the host silently
        raise RuntimeError(f"could not record the call as a CUDA graph: {err}") from err
    graph.replay()  # the first replay uploads the graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(3):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return 1e3 * start.elapsed_time(end) / (3 * reps)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8, help="rows per prompt (G)")
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--query-heads", type=int, default=28)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--prompt-slots", type=int, default=512)
    p.add_argument("--new-slots", type=int, default=256)
    p.add_argument("--written", type=int, default=None, help="new slots written (default: half of --new-slots)")
    p.add_argument("--splits", default="0,1,2,4,8,16", help="0: the kernel's default (cascade_kernel.default_splits)")
    p.add_argument("--block-keys", default="32,64,128")
    p.add_argument("--num-warps", default="2,4,8")
    p.add_argument("--num-stages", default="1,2,3")
    p.add_argument("--layouts", default="row,prompt", help="cascade_kernel layouts: row, prompt")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--top", type=int, default=12, help="kernel settings listed in the table")
    p.add_argument("--tiny", action="store_true", help="smoke run: small shape, fp32 (on a CPU: triton's interpreter)")
    p.add_argument("--out", default="runs/benchmarks/speed_cascade_kernel")
    a = p.parse_args(argv)
    if a.tiny:
        a.prompts, a.group, a.kv_heads, a.query_heads, a.head_dim = 2, 2, 2, 4, 16
        a.prompt_slots, a.new_slots, a.reps = 40, 24, 1
        a.splits, a.block_keys, a.num_warps, a.num_stages, a.layouts = "0,2", "16", "4", "1", "row,prompt"
    a.written = a.new_slots // 2 if a.written is None else a.written
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernel is decorated, at import
    from agents.lmm import cascade_kernel
    from agents.lmm.graph_decode import _cascade_attention, _matmul_part

    why = cascade_kernel.unavailable_reason(device, a.head_dim)
    if why:
        p.error(f"the triton kernel cannot run here: {why}")
    cascade_kernel.prepare(device)
    dtype = torch.bfloat16 if device.type == "cuda" and not a.tiny else torch.float32
    query, pk, pv, pmask, prompt_of_row, ok, ov, own_length, own_mask, shared = inputs(
        a, device, dtype, torch.Generator().manual_seed(0))
    scale = a.head_dim ** -0.5
    products = partial(_cascade_attention, 0, query, ok, ov, own_mask, scale, shared, _matmul_part)
    reference = products().float()
    itemsize = torch.finfo(dtype).bits // 8
    read = 2 * itemsize * a.head_dim * a.kv_heads * (a.prompts * a.prompt_slots + a.prompts * a.group * a.written)

    def row(name, us, out, settings=None):
        return {"name": name, "settings": settings, "microseconds": us, "read_tb_per_s": read / us / 1e6,
                "max_abs_diff": float((out.float() - reference).abs().max())}

    results = [row("batched products (eager)", time_call(products, device, a.reps), reference)]
    if device.type == "cuda" and not a.tiny:
        compiled = torch.compile(products, dynamic=False)
        results.append(row("batched products (torch.compile)", time_call(compiled, device, a.reps), compiled()))
    grid = list(itertools.product(*(map(int, v.split(",")) for v in (a.splits, a.block_keys, a.num_warps,
                                                                       a.num_stages)), a.layouts.split(",")))
    kernel_rows = []
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    members, slot = shared[3], shared[4]
    for splits, block, warps, stages, layout in (tqdm(grid, desc="kernel settings") if tqdm else grid):
        settings = {"splits": splits or None, "block_keys": block, "num_warps": warps, "num_stages": stages,
                    "layout": layout}
        call = partial(cascade_kernel.cascade_decode, query, pk, pv, pmask, prompt_of_row, ok, ov, own_length, scale,
                       members=members, slot=slot, **settings)
        try:
            kernel_rows.append(row("triton kernel", time_call(call, device, a.reps), call(), settings))
        except Exception as err:  # e.g. a block too large for the multiprocessor's shared memory
            error = f"{type(err).__name__}: {err}"[:300]
            kernel_rows.append({"name": "triton kernel", "settings": settings, "error": error})
    ran = sorted((r for r in kernel_rows if "error" not in r), key=lambda r: r["microseconds"])
    tuned = {"splits": None, **{k: cascade_kernel.TUNING[k] for k in ("block_keys", "num_warps", "num_stages",
                                                                       "layout")}}
    default = next((r for r in ran if r["settings"] == tuned), None)
    fastest_tuning = None
    if ran:  # as TUNING values: a split count becomes the programs per multiprocessor it gives at this shape
        best = ran[0]["settings"]
        sms = cascade_kernel._multiprocessors["count"] or 1
        waves = (best["splits"] * a.prompts * a.group * a.kv_heads / sms if best["splits"]
                 else cascade_kernel.TUNING["waves"])
        fastest_tuning = {**{k: best[k] for k in ("block_keys", "num_warps", "num_stages", "layout")},
                          "waves": round(waves, 2)}
    res = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (triton interpreter)",
           "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "command": " ".join(sys.argv),
           "shape": {k: getattr(a, k) for k in ("prompts", "group", "kv_heads", "query_heads", "head_dim",
                                                 "prompt_slots", "new_slots", "written")},
           "default_splits": cascade_kernel.default_splits(a.prompts * a.group, a.kv_heads,
                                                           -(-a.prompt_slots // cascade_kernel.TUNING["block_keys"])
                                                           + -(-a.new_slots // cascade_kernel.TUNING["block_keys"])),
           "tuning": dict(cascade_kernel.TUNING), "bytes_read_per_call": read, "baselines": results,
           "kernel_default": default, "kernel_fastest": ran[: a.top], "fastest_tuning": fastest_tuning,
           "kernel_all": kernel_rows}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(table(res))
    print(table(res))
    return res


def table(res: dict) -> str:
    s = res["shape"]
    lines = [f"Cascade decode attention, one layer, on {res['device']} ({res['dtype']}): {s['prompts']} prompts x G = "
             f"{s['group']}, {s['kv_heads']} key/value heads x {s['query_heads'] // s['kv_heads']} query heads of "
             f"{s['head_dim']}, {s['prompt_slots']} prompt slots, {s['written']} of {s['new_slots']} new slots "
             f"written; {res['bytes_read_per_call'] / 1e6:.1f} MB to read a call. The kernel's default: "
             f"{res['tuning']} (splits {res['default_splits']} here).", "",
             "| attention | settings | us a call | TB/s read | max abs diff to the batched products |",
             "|---|---|---|---|---|"]
    shown = res["baselines"] + ([dict(res["kernel_default"], name="triton kernel (default)")]
                                if res["kernel_default"] else []) + res["kernel_fastest"]
    for r in shown:
        settings = ", ".join(f"{k} {v if v is not None else 'default'}" for k, v in (r["settings"] or {}).items())
        lines.append(f"| {r['name']} | {settings or '-'} | {r['microseconds']:.1f} | {r['read_tb_per_s']:.2f} | "
                     f"{r['max_abs_diff']:.1e} |")
    if res.get("fastest_tuning"):
        lines += ["", "The fastest as TUNING values (speed_generation_scale.py --kernel-tuning NAME=VALUE): "
                      f"{res['fastest_tuning']}."]
    failed = [r for r in res["kernel_all"] if "error" in r]
    if failed:
        lines += ["", f"{len(failed)} settings did not run, e.g. {failed[0]['settings']}: {failed[0]['error']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
