"""One triton kernel for the cascade decode step (graph_decode's decode_attention="triton").

A decode step of rows that share prompts (graph_decode.SharedPrefix) attends, per row, to its prompt's
keys (kept once per prompt) and to its own new tokens. graph_decode._cascade_attention does that with
batched matrix products and softmax kernels: at the Qwen2.5-VL-7B shape, batch 64 = 8 prompts x 8,
they took ~0.9 ms of a 6.4 ms step on an H200.
Here one kernel does both parts, FlashDecoding style: program (row, key/value head, split) loads the
row's query heads of that key/value head once, walks its share of the key blocks (the prompt's first,
then the row's own new tokens, only as far as they are written), keeps an online softmax, and writes
its partial output and log-sum-exp; a few fused torch operations merge the splits. Measured at that
shape it takes the step from 6.63 to 6.27 ms. That "row" layout reads a prompt's keys once per row (G
times; the GPU's L2 cache may catch the repeats); the "prompt" layout reads them once per prompt: a
program per (prompt, key/value head, split) takes the query heads of all the prompt's rows as one tile,
and the row kernel then walks only the rows' own tokens (TUNING picks; benchmarks/speed_cascade_kernel.py
times both).

Needs triton and a CUDA device; with TRITON_INTERPRET=1 set before this module is imported it runs on
a CPU through triton's interpreter (the tests' way). The key/value head dimension must be a power of
two of at least 16 (tl.dot's smallest tile).
"""

from __future__ import annotations

import math
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU install: the kernel is then unavailable and graph_decode says so
    triton = None

BLOCK_QUERIES = 16  # query heads per key/value head, padded up to tl.dot's smallest tile
# Launch settings when a call names none: keys per block, the programs' warps and software-pipelining
# stages, and how many programs per multiprocessor the split count aims for (default_splits).
# benchmarks/speed_cascade_kernel.py times the alternatives at a real shape.
TUNING = {"block_keys": 64, "num_warps": 4, "num_stages": 2, "waves": 2, "layout": "row"}
MASKED = -1e30     # the log-sum-exp of a split that saw no key


def unavailable_reason(device: torch.device, head_dim: int) -> str | None:
    """Why the kernel cannot run for this device and head size, or None if it can."""
    if triton is None:
        return "triton is not installed"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"it needs a CUDA device (or TRITON_INTERPRET=1 for triton's interpreter), not {device.type}"
    if head_dim < 16 or head_dim & (head_dim - 1):
        return f"the head dimension must be a power of two >= 16, got {head_dim}"
    return None


if triton is not None:
    _MASKED = tl.constexpr(MASKED)  # compiled kernels read only constexpr globals (the interpreter reads any)

    @triton.jit
    def _online_block(q, k_ptrs, v_ptrs, valid, bias, m_i, l_i, acc, scale, IEEE: tl.constexpr):
        """One block of keys folded into the running (max, sum, output) of the softmax."""
        k = tl.load(k_ptrs, mask=valid[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=valid[:, None], other=0.0)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        # fp32 throughout: torch.compile may hand the kernel its float arguments as fp64
        s = (s * scale).to(tl.float32) + bias.to(tl.float32)[None, :]
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return m_new, l_i, acc

    @triton.jit
    def _prompt_blocks(q, PK, PV, PMASK, prompt, head, lo, hi, prefix_len, sp_p, sp_h, sp_s, spm_p,
                       m_i, l_i, acc, scale, BN: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr):
        """Key blocks lo..hi of a prompt (under its additive mask) folded into the running softmax."""
        d, n = tl.arange(0, D), tl.arange(0, BN)
        for b in range(lo, hi):
            slot = b * BN + n
            valid = slot < prefix_len
            at = prompt * sp_p + head * sp_h + slot[:, None] * sp_s + d[None, :]
            bias = tl.load(PMASK + prompt * spm_p + slot, mask=valid, other=_MASKED).to(tl.float32)
            m_i, l_i, acc = _online_block(q, PK + at, PV + at, valid, bias, m_i, l_i, acc, scale, IEEE)
        return m_i, l_i, acc

    @triton.jit
    def _partial_result(m_i, l_i, acc):
        """(output, log-sum-exp) of a running softmax; a split that saw no key gets 0 and _MASKED."""
        seen = l_i > 0
        total = tl.where(seen, l_i, 1.0)
        return acc / total[:, None], tl.where(seen, m_i + tl.log(total), _MASKED)

    @triton.jit
    def _cascade_partials(Q, PK, PV, PMASK, OK, OV, PROMPT, OWN_LEN, OUT, LSE,
                          sq_r, sq_h, sq_g, sp_p, sp_h, sp_s, spm_p, so_r, so_h, so_s,
                          groups, prefix_len, blocks_per_split, scale,
                          BG: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr):
        row, head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        heads, splits = tl.num_programs(1), tl.num_programs(2)
        g, d, n = tl.arange(0, BG), tl.arange(0, D), tl.arange(0, BN)
        q = tl.load(Q + row * sq_r + head * sq_h + g[:, None] * sq_g + d[None, :], mask=g[:, None] < groups, other=0.0)
        prompt = tl.load(PROMPT + row)
        own_len = tl.load(OWN_LEN)
        prefix_blocks = tl.cdiv(prefix_len, BN)
        lo = split * blocks_per_split
        hi = lo + blocks_per_split
        m_i = tl.full([BG], _MASKED, tl.float32)
        l_i = tl.zeros([BG], tl.float32)
        acc = tl.zeros([BG, D], tl.float32)
        m_i, l_i, acc = _prompt_blocks(q, PK, PV, PMASK, prompt, head, tl.minimum(lo, prefix_blocks),
                                       tl.minimum(hi, prefix_blocks), prefix_len, sp_p, sp_h, sp_s, spm_p,
                                       m_i, l_i, acc, scale, BN, D, IEEE)
        own_hi = tl.minimum(hi, prefix_blocks + tl.cdiv(own_len, BN)) - prefix_blocks
        for b in range(tl.maximum(lo, prefix_blocks) - prefix_blocks, own_hi):  # the row's written new tokens
            slot = b * BN + n
            valid = slot < own_len
            at = row * so_r + head * so_h + slot[:, None] * so_s + d[None, :]
            bias = tl.where(valid, 0.0, _MASKED)
            m_i, l_i, acc = _online_block(q, OK + at, OV + at, valid, bias, m_i, l_i, acc, scale, IEEE)
        out, lse = _partial_result(m_i, l_i, acc)
        base = (row * heads + head) * splits + split
        keep = g < groups
        tl.store(OUT + base * groups * D + g[:, None] * D + d[None, :], out, mask=keep[:, None])
        tl.store(LSE + base * groups + g, lse, mask=keep)

    @triton.jit
    def _prompt_partials(Q, PK, PV, PMASK, MEMBERS, OUT, LSE,
                         sq_r, sq_h, sq_g, sp_p, sp_h, sp_s, spm_p, sm_p,
                         groups, queries, chunks, prefix_len, blocks_per_split, scale,
                         BQ: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, IEEE: tl.constexpr):
        """layout="prompt", the prompt part: program (prompt x chunk of its queries, key/value head, split)
        takes the query heads of all the prompt's rows (MEMBERS) at once, so each key block of the prompt is
        read once for the whole group."""
        pc, head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        heads, splits = tl.num_programs(1), tl.num_programs(2)
        prompt, chunk = pc // chunks, pc % chunks
        i = chunk * BQ + tl.arange(0, BQ)  # the prompt's query slots: member i // groups, query head i % groups
        live = i < queries
        member = tl.load(MEMBERS + prompt * sm_p + i // groups, mask=live, other=0)
        d = tl.arange(0, D)
        q = tl.load(Q + member[:, None] * sq_r + head * sq_h + (i % groups)[:, None] * sq_g + d[None, :],
                    mask=live[:, None], other=0.0)
        lo = split * blocks_per_split
        m_i, l_i, acc = _prompt_blocks(q, PK, PV, PMASK, prompt, head, lo,
                                       tl.minimum(lo + blocks_per_split, tl.cdiv(prefix_len, BN)), prefix_len,
                                       sp_p, sp_h, sp_s, spm_p, tl.full([BQ], _MASKED, tl.float32),
                                       tl.zeros([BQ], tl.float32), tl.zeros([BQ, D], tl.float32), scale, BN, D, IEEE)
        out, lse = _partial_result(m_i, l_i, acc)
        base = ((prompt * heads + head) * splits + split) * queries
        tl.store(OUT + (base + i[:, None]) * D + d[None, :], out, mask=live[:, None])
        tl.store(LSE + base + i, lse, mask=live)


_multiprocessors = {"count": 0}  # of the GPU the kernel runs on (prepare); read as a constant when traced


def prepare(device: torch.device) -> None:
    """Note the device's multiprocessor count (outside torch.compile's tracing, which cannot query it)."""
    if device.type == "cuda":
        _multiprocessors["count"] = torch.cuda.get_device_properties(device).multi_processor_count


def default_splits(rows: int, heads: int, blocks: int, waves: float | None = None) -> int:
    """Enough splits of the key blocks that there are `waves` (TUNING) programs per multiprocessor of the
    GPU (prepare); 1 unprepared."""
    sms, waves = _multiprocessors["count"], waves or TUNING["waves"]
    return max(1, min(blocks, math.ceil(waves * sms / (rows * heads)))) if sms else 1


def cascade_decode(query, prefix_keys, prefix_values, prefix_mask, prompt_of_row, own_keys, own_values, own_length,
                   scale: float, splits: int | None = None, block_keys: int | None = None,
                   num_warps: int | None = None, num_stages: int | None = None, members=None, slot=None,
                   layout: str | None = None) -> torch.Tensor:
    """Attention of one new token per row to its prompt's keys and its own written new tokens.

    query (rows, kv heads, groups, dim): the query heads of each key/value head; prefix_keys/values
    (prompts, kv heads, prompt slots, dim) with the additive prefix_mask (prompts, prompt slots);
    prompt_of_row (rows,); own_keys/values (rows, kv heads, own slots, dim) of which the first
    own_length[0] are written and visible. Returns (rows, kv heads, groups, dim) in the query's dtype.
    layout "row": one kernel, a program per row walks its prompt's keys and then its own; "prompt": the
    prompt part in programs that take all of a prompt's rows at once (members (prompts, group): each
    prompt's rows, short groups padded with a repeat; slot (rows,): each row's place in
    members.flatten()), the own part per row, merged. splits (per part), block_keys (a power of two >= 16),
    num_warps, num_stages, layout: TUNING's choices when None."""
    rows, heads, groups, dim = query.shape
    query = query.contiguous()
    block_keys = block_keys or TUNING["block_keys"]
    layout = layout or TUNING["layout"]
    if layout not in ("row", "prompt"):
        raise ValueError(f"layout must be 'row' or 'prompt', got {layout!r}")
    if layout == "prompt" and (members is None or slot is None):
        raise ValueError("layout='prompt' needs members and slot (graph_decode.SharedPrefix)")
    launch = dict(BN=block_keys, D=dim, IEEE=query.dtype == torch.float32,
                  num_warps=num_warps or TUNING["num_warps"], num_stages=num_stages or TUNING["num_stages"])
    prefix_len, own_cap = prefix_keys.shape[2], own_keys.shape[2]
    row_prefix = prefix_len if layout == "row" else 0  # "prompt": the row kernel walks only the own tokens
    blocks = -(-row_prefix // block_keys) + -(-own_cap // block_keys)
    row_splits = splits or default_splits(rows, heads, blocks)
    out = torch.empty(rows, heads, row_splits, groups, dim, dtype=torch.float32, device=query.device)
    lse = torch.empty(rows, heads, row_splits, groups, dtype=torch.float32, device=query.device)
    _cascade_partials[(rows, heads, row_splits)](
        query, prefix_keys, prefix_values, prefix_mask, own_keys, own_values, prompt_of_row, own_length, out, lse,
        query.stride(0), query.stride(1), query.stride(2),
        prefix_keys.stride(0), prefix_keys.stride(1), prefix_keys.stride(2), prefix_mask.stride(0),
        own_keys.stride(0), own_keys.stride(1), own_keys.stride(2),
        groups, row_prefix, -(-blocks // row_splits), scale,
        BG=max(BLOCK_QUERIES, triton.next_power_of_2(groups)), **launch)
    if layout == "prompt":
        prompt_out, prompt_lse = _prompt_part(query, prefix_keys, prefix_values, prefix_mask, members, slot,
                                              prompt_of_row, scale, splits, launch)
        out, lse = torch.cat([out, prompt_out], dim=2), torch.cat([lse, prompt_lse], dim=2)
    weight = torch.exp(lse - lse.amax(dim=2, keepdim=True))
    return ((out * weight[..., None]).sum(dim=2) / weight.sum(dim=2)[..., None]).to(query.dtype)


def _prompt_part(query, prefix_keys, prefix_values, prefix_mask, members, slot, prompt_of_row, scale: float,
                 splits: int | None, launch: dict):
    """layout="prompt": the prompt part's partial outputs and log-sum-exps, laid out per row like the row
    kernel's: (rows, kv heads, splits, groups, dim) and (rows, kv heads, splits, groups)."""
    rows, heads, groups, dim = query.shape
    prompts, group = members.shape
    queries = group * groups
    block_queries = max(BLOCK_QUERIES, min(64, triton.next_power_of_2(queries)))
    chunks = -(-queries // block_queries)
    blocks = -(-prefix_keys.shape[2] // launch["BN"])
    splits = splits or default_splits(prompts * chunks, heads, blocks)
    out = torch.empty(prompts, heads, splits, queries, dim, dtype=torch.float32, device=query.device)
    lse = torch.empty(prompts, heads, splits, queries, dtype=torch.float32, device=query.device)
    _prompt_partials[(prompts * chunks, heads, splits)](
        query, prefix_keys, prefix_values, prefix_mask, members, out, lse,
        query.stride(0), query.stride(1), query.stride(2),
        prefix_keys.stride(0), prefix_keys.stride(1), prefix_keys.stride(2), prefix_mask.stride(0),
        members.stride(0), groups, queries, chunks, prefix_keys.shape[2], -(-blocks // splits), scale,
        BQ=block_queries, **launch)
    # back to rows: row r is member slot[r] - prompt * group of its prompt, its query heads that member's groups
    at = ((slot - prompt_of_row * group)[:, None] * groups + torch.arange(groups, device=query.device))
    return (out.permute(0, 3, 1, 2, 4)[prompt_of_row[:, None], at].permute(0, 2, 3, 1, 4),
            lse.permute(0, 3, 1, 2)[prompt_of_row[:, None], at].permute(0, 2, 3, 1))
