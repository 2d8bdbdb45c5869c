"""Sampling with a kept static KV cache and one recorded CUDA graph per decode shape.

The rollout sampler behind TransformersPolicy(generation_cache="graph") and --rollout-backend hf-graph.
Hugging Face `generate` spends most of a decoding step in Python and kernel launches (at the
Qwen2.5-VL-3B shape on an H200, ~30 ms a step for a batch of 64, of which the GPU works a few ms);
its own compiled path with a static cache skipped CUDA graphs for us and gained ~2x. Here:

  prefill  the model's ordinary forward over the prompts, writing a kept StaticCache;
  decode   the model's ordinary forward for one new token per row against the whole cache, with an
           additive 4-D mask over the cache slots and explicit positions, recorded once as a CUDA
           graph per (batch size, cache length) and replayed for every later token;
  sample   outside the graph, with the operations and order of `generate` (temperature, top-p,
           softmax, multinomial; argmax when greedy), so one seed gives the same draws, and the
           behaviour log-prob of each token is log_softmax(logits / T) as the trainers record it.

Rows that continue the same prompt (`rows=`, a GRPO group) share one prefill and one copy of the
prompt's keys and values (SharedPrefix, cascade attention): one prefill per prompt, and each decode step
reads a prompt's keys once for all its rows.

On a CPU (or with graphs off) the same loop runs the decode forward eagerly: that is what the
tests compare with `generate`. Positions follow `generate`: a text model counts real (unpadded)
tokens; a Qwen-VL model adds the M-RoPE offset (`rope_deltas`) its prefill computed.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch

from agents.lmm import cascade_kernel

STATIC_CACHE_BLOCK = 256  # static KV caches are sized in blocks of tokens, so nearby lengths share one
MAX_STATIC_CACHES = 4  # kept caches (one per batch size and block); rollout turns shrink the batch, and at
                       # real-model sizes each cache holds GBs, so the least recently used one goes


@dataclass
class KeptDecoder:
    """One kept StaticCache and, once recorded, the CUDA graph of a decode step that writes into it.
    The graph reads and writes fixed addresses: the cache, the model weights, and the buffers here."""
    cache: object
    batch_size: int
    length: int
    autocast: torch.dtype | None            # the autocast dtype the cache (and graph) were made under
    ids: torch.Tensor | None = None        # (batch, 1) the token being fed
    positions: torch.Tensor | None = None  # (batch, 1) its position
    mask: torch.Tensor | None = None       # (batch, 1, 1, length) additive: 0 over visible slots
    logits: torch.Tensor | None = None     # (batch, vocab) the graph's output
    graph: object = None
    recorded_for: tuple = field(default=())  # weight addresses when recorded; moved weights -> record again
    prefix_shape: tuple[int, int, int] | None = None  # (prompts, group, length) for rows that share prompts
    prefix: SharedPrefix | None = None     # then: the prompts' keys/values, kept once
    cache_argument: str = "cache"          # the model forward's name for its KV cache (cache_argument())


@dataclass
class SharedPrefix:
    """The keys and values of each distinct prompt, kept once for all the rows that continue it. A decode
    step attends to them with cascade attention (_cascade_attention): the rows of one prompt read its
    keys together, and the cache of the entry holds only the new tokens."""
    keys: tuple[torch.Tensor, ...]    # per layer (prompts, key/value heads, length, head dim)
    values: tuple[torch.Tensor, ...]
    mask: torch.Tensor                # (prompts, 1, 1, length) additive: 0 over the prompt's real tokens
    members: torch.Tensor             # (prompts, group) the rows of each prompt, short groups padded with a repeat
    slot: torch.Tensor                # (rows,) each row's place in members.flatten()
    prompt_of_row: torch.Tensor       # (rows,) the prompt each row continues
    own_length: torch.Tensor          # (1,) int32: the new tokens written so far, this step's included

    def as_kwargs(self) -> dict:
        return {"shared_prefix": (self.keys, self.values, self.mask, self.members, self.slot, self.prompt_of_row,
                                  self.own_length)}


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


class KeptCaches:
    """Least-recently-used StaticCaches of one model, one per (batch size, length block, autocast dtype):
    a cache takes the dtype of its first keys, so fp32 and bf16-autocast calls need their own.

    compile_decode=True runs the decode forward through torch.compile (inductor's fused kernels, no
    CUDA graphs of its own) before it is recorded: fewer, larger kernels in the graph. Its attention is
    _decode_sdpa: traced, transformers' SDPA attention copies the grouped key/value heads of the whole
    cache for every query head, which at 3B cost more than the fusion saved. The first shape compiles
    for itself, the second once more for any shape (torch's automatic dynamic shapes). A string is a
    torch.compile mode, e.g. "max-autotune-no-cudagraphs" (inductor benchmarks matmul kernels: slower to
    compile). decode_attention: the compiled step's attention kernel (_decode_sdpa); compiled "flex" needs
    a CUDA device (torch's CPU build of FlexAttention returns no log-sum-exp); "triton" is
    agents.lmm.cascade_kernel for rows that share prompts (triton and a CUDA device; other steps use SDPA).
    fuse_projections: kinds of FUSABLE ("attention", "mlp") whose products decode steps compute as one
    per layer (FusedProjections; a copy of those weights)."""

    def __init__(self, model, max_kept: int = MAX_STATIC_CACHES, block: int = STATIC_CACHE_BLOCK,
                 compile_decode: bool | str = False, decode_attention: str = "sdpa",
                 fuse_projections: Sequence[str] = ()):
        self.model, self.max_kept, self.block = model, max_kept, block
        self.entries: OrderedDict[tuple, KeptDecoder] = OrderedDict()
        self.graph_pool = None
        self.graphs_failed: str | None = None  # why recording failed, once it has (then decoding is eager)
        if decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"decode_attention must be one of {DECODE_ATTENTION}, got {decode_attention!r}")
        if decode_attention == "triton":
            config = model.config.get_text_config(decoder=True)
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            why = cascade_kernel.unavailable_reason(model.device, head_dim)
            if why:
                raise ValueError(f"decode_attention='triton' cannot run here: {why}")
            cascade_kernel.prepare(model.device)
        self.compiled, self.decode_attention = bool(compile_decode), decode_attention
        self.fused = FusedProjections(model, fuse_projections) if fuse_projections else None
        mode = compile_decode if isinstance(compile_decode, str) else None
        self.decode_forward = torch.compile(_decode_forward, mode=mode) if compile_decode else _decode_forward

    def __len__(self):
        return len(self.entries)

    def clear(self) -> None:
        """Drop every kept cache and its recorded graphs: their memory goes back to the allocator."""
        self.entries.clear()
        self.graph_pool = None

    def round_up(self, length: int) -> int:
        return max(1, -(-length // self.block)) * self.block

    def get(self, batch_size: int, length: int, prefix: tuple[int, int, int] | None = None) -> KeptDecoder:
        """The kept entry for this batch size and length (rounded up to a block), its cache emptied.
        prefix=(prompts, group, prompt length): the entry keeps a SharedPrefix of that shape (the
        length rounded up to a block) and its cache holds the new tokens only."""
        if prefix is not None:
            prefix = (prefix[0], prefix[1], self.round_up(prefix[2]))
        key = (batch_size, self.round_up(length), _autocast_dtype(self.model.device.type), prefix)
        entry = self.entries.get(key)
        if entry is None:
            from transformers import StaticCache

            if key[2] is not None:
                check_autocast_cache_support()
            while len(self.entries) >= self.max_kept:  # before the new one is allocated: never both at once
                self.entries.popitem(last=False)
            cache = StaticCache(config=self.model.config.get_text_config(decoder=True), max_cache_len=key[1])
            entry = self.entries[key] = KeptDecoder(cache, *key[:3], prefix_shape=prefix,
                                                    cache_argument=cache_argument(self.model))
        else:
            entry.cache.reset()
            self.entries.move_to_end(key)
        return entry


DECODE_ATTENTION = ("sdpa", "sdpa-efficient", "matmul", "flex", "triton")  # a compiled decode step's attention


def _decode_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                 kernel: str = "sdpa", shared_prefix=None, **kwargs):
    """transformers' SDPA attention, except that one query token attends per group of heads straight on
    the cache's key/value heads (what transformers itself does for one token, but only outside
    torch.compile: traced, it repeats the whole cache's key/value heads for every query head).
    kernel: "sdpa" lets torch pick the SDPA backend, "sdpa-efficient" asks for the memory-efficient
    one, "matmul" writes the two products and the softmax out for inductor to compile, "flex" is
    torch's FlexAttention (compiled: a split-key/value decoding kernel in triton). With a
    `shared_prefix` (SharedPrefix.as_kwargs) it is _cascade_attention, whose two parts use "flex" when
    asked for and "matmul" otherwise (they need the log-sum-exp, which the SDPA kernels do not return),
    or, for "triton", agents.lmm.cascade_kernel's one kernel for both parts; without one, "triton" is SDPA."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or dropout:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    batch, heads, _, dim = query.shape
    grouped = query.reshape(batch, heads // groups, groups, dim)
    scale = scaling or dim ** -0.5
    if shared_prefix is not None and kernel == "triton":
        keys, values, prefix_mask, members, slot, prompt_of_row, own_length = shared_prefix
        layer = module.layer_idx
        out = cascade_kernel.cascade_decode(grouped, keys[layer], values[layer], prefix_mask.view(len(prefix_mask), -1),
                                            prompt_of_row, key, value, own_length, scale, members=members, slot=slot)
    elif shared_prefix is not None:
        part = _flex_part if kernel == "flex" else _matmul_part
        out = _cascade_attention(module.layer_idx, grouped, key, value, attention_mask, scale, shared_prefix, part)
    elif kernel in ("matmul", "flex"):
        out, _ = (_flex_part if kernel == "flex" else _matmul_part)(grouped, key, value, attention_mask, scale)
        out = out.to(value.dtype)
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = (sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]) if kernel == "sdpa-efficient"
                    else contextlib.nullcontext())
        with backends:
            out = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask,
                                                                   scale=scaling)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def _matmul_part(query, key, value, mask, scale: float):
    """Attention of query (batch, heads, n, dim) to key/value (batch, heads, slots, dim) under an additive
    mask (batch, 1, 1, slots), as two products and a softmax: (output in fp32, log-sum-exp (batch, heads, n, 1))."""
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scale
    if mask is not None:
        scores = scores + mask
    top = scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores - top)
    total = weights.sum(dim=-1, keepdim=True)
    return torch.matmul(weights.to(value.dtype), value).float() / total, top + torch.log(total)


def _flex_part(query, key, value, mask, scale: float):
    """_matmul_part by torch's FlexAttention, the mask added to the scores."""
    from torch.nn.attention.flex_attention import flex_attention

    def add_mask(score, b, h, q, kv):
        return score + mask[b, 0, 0, kv]

    out, lse = flex_attention(query, key, value, score_mod=add_mask if mask is not None else None, scale=scale,
                              return_lse=True)
    return out.float(), lse.unsqueeze(-1).float()


def _cascade_attention(layer: int, query, key, value, mask, scale: float, shared_prefix, part=_matmul_part):
    """One new token per row attending to its prompt's keys (kept once per prompt) and to its own new
    tokens (the entry's cache): the same result as attending to a copy of the prompt in every row,
    while each prompt's keys and values are read once for all its rows. The two parts are attended apart
    (`part`: output and log-sum-exp) and merged by their log-sum-exps, so only small per-query results
    change layout.
    query (rows, kv heads, groups, dim); key/value (rows, kv heads, new slots, dim); mask (rows, 1, 1, new slots)."""
    keys, values, prefix_mask, members, slot = shared_prefix[:5]
    prefix_keys, prefix_values = keys[layer], values[layer]
    prompts, kv_heads, _, dim = prefix_keys.shape
    group, groups = members.shape[1], query.shape[2]

    by_prompt = query[members.flatten()].view(prompts, group, kv_heads, groups, dim)
    by_prompt = by_prompt.transpose(1, 2).reshape(prompts, kv_heads, group * groups, dim)
    prefix_out, prefix_lse = (  # back to rows (padding members dropped)
        x.view(prompts, kv_heads, group, groups, -1).transpose(1, 2).reshape(prompts * group, kv_heads, groups, -1)[slot]
        for x in part(by_prompt, prefix_keys, prefix_values, prefix_mask, scale))
    own_out, own_lse = part(query, key, value, mask, scale)
    top = torch.maximum(prefix_lse, own_lse)
    prefix_weight, own_weight = torch.exp(prefix_lse - top), torch.exp(own_lse - top)
    out = (prefix_out * prefix_weight + own_out * own_weight) / (prefix_weight + own_weight)
    return out.to(value.dtype)


@contextlib.contextmanager
def _decoding(kept: KeptCaches, entry: KeptDecoder):
    """What a decode forward runs under: _attention_for_compile, and the fused projections if kept."""
    with _attention_for_compile(kept.model, kept.compiled, kept.decode_attention, entry.prefix is not None):
        with kept.fused.installed() if kept.fused is not None else contextlib.nullcontext():
            yield


@contextlib.contextmanager
def _attention_for_compile(model, compiled: bool, kernel: str = "sdpa", shared: bool = False):
    """While a compiled decode forward is traced, or any decode forward with a shared prefix runs, the
    model's SDPA attention is _decode_sdpa."""
    config = model.config.get_text_config(decoder=True)
    if not (compiled or shared) or config._attn_implementation != "sdpa":
        yield
        return
    from transformers import AttentionInterface

    name = f"paravt_decode_{kernel}"
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, partial(_decode_sdpa, kernel=kernel))
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


def _fill_prefix(prefix: SharedPrefix, prefilled, prompt_mask: torch.Tensor, rows: torch.Tensor):
    """Keep the prompts' keys and values of a prefill (`prefilled`, one row per prompt) in `prefix`,
    mask its slots past the prompts, and lay out which rows continue which prompt."""
    length = prompt_mask.shape[1]
    for keys, values, layer in zip(prefix.keys, prefix.values, prefilled.layers, strict=True):
        keys[:, :, :length].copy_(layer.keys)
        values[:, :, :length].copy_(layer.values)
    prefix.mask.fill_(torch.finfo(prefix.mask.dtype).min)
    prefix.mask[:, 0, 0, :length].masked_fill_(prompt_mask.bool(), 0.0)
    members = [[] for _ in range(len(prefix.members))]
    for row, prompt in enumerate(rows.tolist()):
        members[prompt].append(row)
    group = prefix.members.shape[1]
    slot = [0] * len(rows)
    for prompt, own in enumerate(members):
        for j, row in enumerate(own):
            slot[row] = prompt * group + j
    padded = [own + [own[-1] if own else 0] * (group - len(own)) for own in members]
    prefix.members.copy_(torch.tensor(padded))
    prefix.slot.copy_(torch.tensor(slot))
    prefix.prompt_of_row.copy_(rows)


def _new_prefix(prefilled, prompts: int, group: int, length: int, rows: int, mask_dtype) -> SharedPrefix:
    def like(t):
        return t.new_zeros(prompts, t.shape[1], length, t.shape[3])  # masked slots are read: finite

    device = prefilled.layers[0].keys.device
    return SharedPrefix(keys=tuple(like(layer.keys) for layer in prefilled.layers),
                        values=tuple(like(layer.values) for layer in prefilled.layers),
                        mask=torch.empty(prompts, 1, 1, length, dtype=mask_dtype, device=device),
                        members=torch.zeros(prompts, group, dtype=torch.long, device=device),
                        slot=torch.zeros(rows, dtype=torch.long, device=device),
                        prompt_of_row=torch.zeros(rows, dtype=torch.long, device=device),
                        own_length=torch.zeros(1, dtype=torch.int32, device=device))


FUSABLE = {  # what fuse_projections may name: the layers' Linear modules that read one input, made one product
    "attention": ("q_proj", "k_proj", "v_proj"),
    "mlp": ("gate_proj", "up_proj"),
}


class FusedProjections:
    """Decode steps with the products that read one input as one matrix product per layer.

    At a real shape a decode step is bound by reading weights, and small products read theirs slowly
    (Qwen2.5-VL-7B, 64 rows, on an H200: ~25 us a layer for the query, key and value products, of which
    ~10 for the query's alone, 7x larger than the other two). For each kind named (FUSABLE: "attention"
    the query/key/value products, "mlp" the gate/up pair) each layer's weight matrices (and biases) are
    concatenated into one kept copy, refreshed from the parameters before every sample call (refresh), so
    the trainer's updates are followed; during a decode step those layers run _fused_attention_forward /
    _fused_mlp_forward, copies of transformers' Qwen2-family forwards with the one product. A layer is
    fused only if its own forward, run both ways on random input, gives the same output: a model or
    transformers version whose layer differs is refused with the reason, not silently mis-computed.
    Costs a copy of those weights (at 7B in bf16: attention 0.9 GB, mlp 7.6 GB)."""

    def __init__(self, model, kinds: Sequence[str]):
        unknown = set(kinds) - set(FUSABLE)
        if unknown or not kinds:
            raise ValueError(f"fuse_projections: name one or more of {tuple(FUSABLE)}, got {tuple(kinds)}")
        self.parts = []  # (module, its fused Linear modules, its fused forward, weight copy, bias copy)
        for kind in kinds:
            names, fused_forward = FUSABLE[kind], _FUSED_FORWARDS[kind]
            decoder = model.get_decoder() if hasattr(model, "get_decoder") else model  # not a vision tower's
            layers = [m for m in decoder.modules() if _fusable(m, kind)]
            if not layers:
                raise ValueError(f"fuse_projections: the model has no {kind} layer with {', '.join(names)}")
            for m in layers:
                linears = [getattr(m, n) for n in names]
                with torch.no_grad():
                    weight = torch.cat([lin.weight for lin in linears])
                    bias = torch.cat([lin.bias for lin in linears]) if linears[0].bias is not None else None
                # one forward object a layer for as long as these are kept: torch.compile's guards hold
                # on its identity, and a new one at every decode step would recompile every step
                forward = partial(fused_forward, m, weight, bias)
                _check_fused_forward(m, kind, forward)
                self.parts.append((m, linears, forward, weight, bias))
        self.copied_from = self._sources()

    def _sources(self) -> tuple:
        """What the kept copies were made from: each parameter's identity and in-place version counter
        (which an optimizer step, load_state_dict or any in-place write advances)."""
        return tuple((id(t), t._version) for _, linears, *_ in self.parts for lin in linears
                     for t in (lin.weight, lin.bias) if t is not None)

    @torch.no_grad()
    def refresh(self):
        """Copy the parameters again if any changed since the last copy (a rollout of several turns calls
        sample once a turn between two updates: ~8 GB at 7B need not be copied each time)."""
        sources = self._sources()
        if sources == self.copied_from:
            return
        for _, linears, _, weight, bias in self.parts:
            torch.cat([lin.weight for lin in linears], out=weight)
            if bias is not None:
                torch.cat([lin.bias for lin in linears], out=bias)
        self.copied_from = sources  # writing the copies leaves the parameters' versions as they were

    @contextlib.contextmanager
    def installed(self):
        """The layers run the fused forwards (an instance attribute, as accelerate's hooks do) until exit."""
        before = [m.__dict__.get("forward") for m, *_ in self.parts]
        for m, _, forward, _, _ in self.parts:
            m.forward = forward
        try:
            yield
        finally:
            for (m, *_), forward in zip(self.parts, before):
                if forward is None:
                    del m.forward
                else:
                    m.forward = forward


def _fusable(module, kind: str) -> bool:
    names = FUSABLE[kind]
    linear = torch.nn.Linear
    last = {"attention": "o_proj", "mlp": "down_proj"}[kind]
    if not all(isinstance(getattr(module, n, None), linear) for n in (*names, last)):
        return False
    if len({getattr(module, n).bias is None for n in names}) > 1:
        return False
    return hasattr(module, "layer_idx") and hasattr(module, "head_dim") if kind == "attention" else hasattr(module, "act_fn")


def _fused_attention_forward(module, weight, bias, hidden_states, position_embeddings=None, attention_mask=None,
                             cache=None, **kwargs):
    """transformers' Qwen2 / Qwen2.5-VL attention forward with the query, key and value products as one."""
    modeling = sys.modules[type(module).__module__]
    cache = kwargs.pop("past_key_values", cache)
    shape = (*hidden_states.shape[:-1], -1, module.head_dim)
    query, key, value = torch.nn.functional.linear(hidden_states, weight, bias).split(
        [module.q_proj.out_features, module.k_proj.out_features, module.v_proj.out_features], dim=-1)
    query, key, value = (x.reshape(shape).transpose(1, 2) for x in (query, key, value))
    cos, sin = position_embeddings
    query, key = modeling.apply_rotary_pos_emb(query, key, cos, sin)
    if cache is not None:
        key, value = cache.update(key, value, module.layer_idx, kwargs=kwargs)
    attention = modeling.ALL_ATTENTION_FUNCTIONS.get_interface(module.config._attn_implementation,
                                                               modeling.eager_attention_forward)
    out, weights = attention(module, query, key, value, attention_mask,
                             dropout=0.0 if not module.training else module.attention_dropout,
                             scaling=module.scaling, sliding_window=getattr(module, "sliding_window", None), **kwargs)
    return module.o_proj(out.reshape(*hidden_states.shape[:-1], -1).contiguous()), weights


def _fused_mlp_forward(module, weight, bias, x):
    """transformers' Qwen2 MLP forward with the gate and up products as one."""
    gate, up = torch.nn.functional.linear(x, weight, bias).split(
        [module.gate_proj.out_features, module.up_proj.out_features], dim=-1)
    return module.down_proj(module.act_fn(gate) * up)


_FUSED_FORWARDS = {"attention": _fused_attention_forward, "mlp": _fused_mlp_forward}


@torch.no_grad()
def _check_fused_forward(module, kind: str, fused: Callable):
    """Refuse to fuse a layer whose own forward the fused one does not reproduce on random input."""
    weight = getattr(module, FUSABLE[kind][0]).weight
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, weight.shape[1], generator=g).to(weight)
    if kind == "attention":
        rotary = tuple(torch.randn(1, 3, module.head_dim, generator=g).to(weight) for _ in range(2))
        args, kwargs = (), {"hidden_states": x, "position_embeddings": rotary, "attention_mask": None}
    else:  # the input's name differs between families (x, hidden_state): positional
        args, kwargs = (x,), {}
    why = None
    try:
        own, ours = module(*args, **kwargs), fused(*args, **kwargs)
        own, ours = (out[0] if isinstance(out, tuple) else out for out in (own, ours))
        tolerance = 1e-4 if weight.dtype == torch.float32 else 3e-2  # relative; half precision rounds each product
        if own.shape != ours.shape:
            why = f"outputs of shapes {tuple(own.shape)} and {tuple(ours.shape)}"
        elif (error := float((own.float() - ours.float()).norm() / own.float().norm().clamp_min(1e-12))) > tolerance:
            why = f"outputs differ by {error:.1e} relative"
    except Exception as err:  # any forward shaped otherwise
        why = f"{type(err).__name__}: {err}"
    if why:
        where = f" (layer {module.layer_idx})" if hasattr(module, "layer_idx") else ""
        raise ValueError(f"fuse_projections: {type(module).__name__}{where} runs a {kind} forward the fused one does "
                         f"not reproduce ({why}); decode without fusing {kind!r}")


def _set_cache_length(cache, n: int):
    for layer in cache.layers:
        layer.cumulative_length.fill_(n)


def transformers_release() -> tuple[int, ...]:
    """The installed transformers' (major, minor), e.g. (5, 24)."""
    import transformers

    return tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())


def check_autocast_cache_support() -> None:
    """Under autocast the keys a layer caches are float32 (RoPE's float32 tables promote them) while its values are
    the autocast dtype. transformers < 5.24 allocates a StaticCache layer's values in its keys' dtype, and the first
    write of values fails deep in index_copy_; say why instead."""
    import transformers

    if transformers_release() < (5, 24):
        raise RuntimeError(f"the kept-cache samplers under autocast (--dtype bf16 with hf-static or hf-graph*) need "
                           f"transformers >= 5.24: {transformers.__version__}'s StaticCache keeps values in the keys' "
                           "dtype, and under autocast RoPE leaves the keys float32 while the values are the autocast "
                           "dtype. Upgrade transformers, or use --dtype fp32 or the hf backend")


def cache_argument(model) -> str:
    """The name under which the forward of `model` (a model or its class) takes its KV cache: transformers 5.24
    renamed past_key_values to cache. A cache passed under the other name would vanish into **kwargs, and each
    decode step would attend to its own token alone."""
    cls = model if isinstance(model, type) else type(model)
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def returned_cache(output):
    """The KV cache a forward with use_cache=True returned, under either transformers' name for it."""
    return output.cache if "cache" in output else output.past_key_values


def _decode_forward(model, entry: KeptDecoder) -> torch.Tensor:
    shared = entry.prefix.as_kwargs() if entry.prefix is not None else {}
    out = model(input_ids=entry.ids, attention_mask=entry.mask, position_ids=entry.positions,
                **{entry.cache_argument: entry.cache}, use_cache=True, logits_to_keep=1, **shared)
    return out.logits[:, -1]


def _decode_step(kept: KeptCaches, entry: KeptDecoder, slot: int, weights_at: tuple | None) -> torch.Tensor:
    """Logits for the tokens in entry.ids written at cache slot `slot`. weights_at=None runs eagerly;
    else the entry's graph replays (recorded first when missing or the weights moved), and the result
    is a view of a kept buffer: read it before the next step."""
    if weights_at is None:
        with _decoding(kept, entry):
            return kept.decode_forward(kept.model, entry)
    if entry.graph is None or entry.recorded_for != weights_at:
        # Autocast's cache of cast weights is freed when its context closes: a graph must not keep
        # pointers into it, so a graph recorded under autocast casts inside itself.
        autocast = (torch.autocast("cuda", dtype=entry.autocast, cache_enabled=False) if entry.autocast is not None
                    else contextlib.nullcontext())
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with _decoding(kept, entry):
            with torch.cuda.stream(stream), autocast:  # warm-up off the capture: compilation, lazy inits, workspaces
                for _ in range(2):
                    kept.decode_forward(kept.model, entry)
                    _set_cache_length(entry.cache, slot)  # each run advanced the cache; the slot is rewritten
            torch.cuda.current_stream().wait_stream(stream)
            entry.graph = None
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, pool=kept.graph_pool), autocast:
                    entry.logits = kept.decode_forward(kept.model, entry)
            except RuntimeError as err:  # something in the forward cannot be recorded: decode eagerly
                kept.graphs_failed = str(err).splitlines()[0]
                warnings.warn(f"recording the decode step as a CUDA graph failed ({kept.graphs_failed}); "
                              "decoding without graphs from now on", RuntimeWarning, stacklevel=3)
                _set_cache_length(entry.cache, slot)
                return kept.decode_forward(kept.model, entry)
        entry.graph, entry.recorded_for = graph, weights_at
        _set_cache_length(entry.cache, slot)
    entry.graph.replay()
    return entry.logits


class _RunningFlags:
    """Whether any row was still running after each step, copied to the host without waiting for it."""

    def __init__(self, steps: int, device: torch.device):
        self.flags = torch.ones(steps, dtype=torch.bool, pin_memory=device.type == "cuda")
        self.events = [None] * steps
        self.cuda = device.type == "cuda"

    def record(self, step: int, any_running: torch.Tensor):
        self.flags[step].copy_(any_running, non_blocking=True)
        if self.cuda:
            self.events[step] = torch.cuda.Event()
            self.events[step].record()

    def read(self, step: int) -> bool:
        if self.events[step] is not None:
            self.events[step].synchronize()
        return bool(self.flags[step])


@torch.no_grad()
def sample(model, kept: KeptCaches, batch: dict, *, max_new_tokens: int, temperature: float = 1.0,
           do_sample: bool = True, top_p: float = 1.0, eos_ids: Sequence[int] = (), pad_id: int = 0,
           stopping: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
           use_graph: bool | None = None, rows: torch.Tensor | None = None,
           check_ahead: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generate up to `max_new_tokens` per row for left-padded `batch` (input_ids, attention_mask and
    any model inputs such as pixel_values). Returns (sequences (batch, prompt + n), behaviour
    log-probs (batch, n)): n stops at max_new_tokens or when every row has ended (an `eos_ids` token,
    or `stopping(sequences, scores)` true for the row, as a Hugging Face StoppingCriteria); rows that
    ended earlier continue with `pad_id`. use_graph=None records CUDA graphs on a CUDA device.

    rows: sample several rows from one prompt (a GRPO group: G rollouts of the same prompt) at the cost
    of one prefill. Row i of the result continues prompt rows[i] of `batch`; each prompt of `batch` is
    prefilled once and its keys and values kept once (SharedPrefix), not copied to its rows. None: one
    row per prompt.

    check_ahead (None: on a CUDA device): learn whether every row has ended one step late, so that the
    host queues the next step while the GPU runs this one instead of waiting for it at every step (at 7B
    the wait left the GPU idle ~0.24 of a 5.7 ms step). When every row ends before max_new_tokens, the one
    step already queued is dropped: the result is the same, the step's time (and its draws from the random
    generator) spent; from ~25 steps a call it pays at 7B."""
    device = batch["input_ids"].device
    check_ahead = device.type == "cuda" if check_ahead is None else check_ahead
    use_graph = device.type == "cuda" if use_graph is None else use_graph
    use_graph = use_graph and kept.graphs_failed is None
    if use_graph and kept.graph_pool is None:
        kept.graph_pool = torch.cuda.graph_pool_handle()
    weights_at = tuple(p.data_ptr() for p in model.parameters()) if use_graph else None
    if kept.fused is not None:
        kept.fused.refresh()
    shared = rows is not None
    rows = rows.to(device) if shared else torch.arange(len(batch["input_ids"]), device=device)
    input_ids, attention_mask = batch["input_ids"][rows], batch["attention_mask"][rows]
    n_rows, prompt_len = input_ids.shape
    if shared:  # the entry's cache holds the new tokens; the prompts live in its SharedPrefix
        group = int(torch.bincount(rows, minlength=len(batch["input_ids"])).max())
        entry = kept.get(n_rows, max_new_tokens, prefix=(len(batch["input_ids"]), group, prompt_len))
    else:
        entry = kept.get(n_rows, prompt_len + max_new_tokens)
    first_slot = 0 if shared else prompt_len  # where the first new token's keys go in the entry's cache
    if entry.ids is None:
        dtype = model.get_input_embeddings().weight.dtype
        entry.ids = torch.zeros(n_rows, 1, dtype=torch.long, device=device)
        entry.positions = torch.zeros(n_rows, 1, dtype=torch.long, device=device)
        entry.mask = torch.empty(n_rows, 1, 1, entry.length, dtype=dtype, device=device)
    entry.mask.fill_(torch.finfo(entry.mask.dtype).min)
    if not shared:
        entry.mask[:, 0, 0, :prompt_len].masked_fill_(attention_mask.bool(), 0.0)

    # Prefill. Text positions count real tokens (left padding skipped), as `generate` does; with
    # images the Qwen-VL model builds its M-RoPE positions and keeps their offset in rope_deltas.
    inputs = dict(batch)
    core = getattr(model, "model", None)
    has_images = "pixel_values" in batch or "pixel_values_videos" in batch
    if core is not None and hasattr(core, "rope_deltas"):
        core.rope_deltas = None
    if not has_images:
        prompt_mask = batch["attention_mask"]
        inputs["position_ids"] = (prompt_mask.long().cumsum(-1) - 1).masked_fill(prompt_mask == 0, 1)
    if shared:  # prefill each prompt once into a growing cache, then keep its keys/values for its rows
        out = model(**inputs, use_cache=True, logits_to_keep=1)
        if entry.prefix is None:
            entry.prefix = _new_prefix(returned_cache(out), *entry.prefix_shape, n_rows, entry.mask.dtype)
        _fill_prefix(entry.prefix, returned_cache(out), batch["attention_mask"], rows)
        logits = out.logits[:, -1][rows]
        del out
    else:
        logits = model(**inputs, **{entry.cache_argument: entry.cache}, use_cache=True, logits_to_keep=1).logits[:, -1]
    next_position = attention_mask.long().sum(-1, keepdim=True)  # text position of the first new token
    if has_images and getattr(core, "rope_deltas", None) is not None:
        next_position = next_position + core.rope_deltas.to(device).view(-1, 1)[rows]

    from transformers.generation.logits_process import TopPLogitsWarper

    top_p_warper = TopPLogitsWarper(top_p=top_p) if do_sample and top_p is not None and top_p < 1.0 else None
    eos = torch.tensor(list(eos_ids), device=device, dtype=torch.long)
    unfinished = torch.ones(n_rows, dtype=torch.long, device=device)
    sequences, logprobs = input_ids, []
    running = _RunningFlags(max_new_tokens, device) if check_ahead else None
    for step in range(max_new_tokens):
        if step:
            entry.ids.copy_(sequences[:, -1:])
            entry.positions.copy_(next_position + (step - 1))
            entry.mask[:, 0, 0, first_slot + step - 1] = 0.0
            if shared:
                entry.prefix.own_length.fill_(step)
            logits = _decode_step(kept, entry, first_slot + step - 1, weights_at)
        scores = logits.to(dtype=torch.float32, copy=True)
        scaled = scores / temperature if temperature != 1.0 else scores  # generate's temperature warper
        logprob_table = torch.log_softmax(scaled, dim=-1)
        if do_sample:
            warped = scaled
            if top_p_warper is not None:
                warped = top_p_warper(sequences, warped)
            tokens = torch.multinomial(torch.softmax(warped, dim=-1), num_samples=1).squeeze(1)
        else:
            tokens = torch.argmax(scores, dim=-1)
        tokens = tokens * unfinished + pad_id * (1 - unfinished)
        logprobs.append(logprob_table.gather(1, tokens[:, None]).squeeze(1))
        sequences = torch.cat([sequences, tokens[:, None]], dim=-1)
        done = torch.isin(tokens, eos) if len(eos) else torch.zeros_like(unfinished, dtype=torch.bool)
        if stopping is not None:
            done = done | stopping(sequences, scores)
        unfinished = unfinished & ~done.to(unfinished.device)
        if running is None:
            if not bool(unfinished.any()):
                break
        else:
            running.record(step, unfinished.any())
            if step and not running.read(step - 1):  # every row had ended: this step was one too many
                sequences, logprobs = sequences[:, :-1], logprobs[:-1]
                break
    return sequences, (torch.stack(logprobs, 1) if logprobs else logits.new_zeros(n_rows, 0, dtype=torch.float32))
