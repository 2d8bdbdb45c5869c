"""A fast path for the stock Hugging Face Qwen2.5-VL that computes the same numbers.

At the frame sizes the tiny model needs (56x56: 4 visual tokens per frame) the stock code is
bound by Python and kernel launches, not by arithmetic: `get_rope_index` walks every sample,
the vision tower rebuilds its index tensors image by image (with host syncs) on every call and
runs one attention call per image or window, and the PIL image processor handles one image at a
time. This module removes that overhead without touching the model's weights or module tree:

    enable_fast_path(model)            patch ONE model instance (not its class, not other instances)
    disable_fast_path(model)           back to the stock code, e.g. to compare in tests
    pixel_values_from_frames(frames, image_processor) -> (pixel_values, image_grid_thw)

What `enable_fast_path` changes, each at the narrowest point:
- `model.model.get_rope_index` (M-RoPE position ids) is computed for the whole batch with tensor
  ops: left/right padding, several images of any grids per row, text-only rows. Videos are
  handed to the stock method. In `generate` it runs once, on the prompt; the stock generation
  code extends those positions over the cached steps.
- The vision tower's grid-only helpers (rotary position ids, window index, cu_seqlens) are
  computed by the stock helpers once per distinct image grid, assembled per batch with offsets and
  memoised by the batch's grid tuple; they reach the stock vision forward through the precomputed
  keyword arguments that transformers' `vision_utils` helpers accept.
- Each vision attention runs one attention call per distinct window (or frame) length, batched
  over all windows of that length, through the same attention function the stock code calls once
  per window (sdpa or eager; flash attention is already variable-length and left alone).

Same weights, same `state_dict`, same `save_pretrained` output; idempotent. Only models built on
`Qwen2_5_VLModel` are supported; anything else raises a `TypeError`. If an internal of
transformers this relies on is missing, `enable_fast_path` raises `FastPathUnavailable` naming the
installed transformers version rather than computing something else.

`pixel_values_from_frames` builds `pixel_values` from uint8 frames in torch, on the frames'
device, with the stock PIL processor's exact arithmetic: its `smart_resize` target size, Pillow's
resampling filter reproduced in fixed point (bicubic or bilinear; exact, see `_pil_resize`), the
float64 rescale, the float32 normalisation, temporal duplication and the 2x2-merge patch order.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass
from types import MethodType
from typing import Sequence

import numpy as np
import torch

__all__ = ["FastPathUnavailable", "enable_fast_path", "disable_fast_path", "is_fast_path_enabled",
           "supports_fast_path", "pixel_values_from_frames"]

_MAX_BATCH_PLANS = 64     # memoised vision plans per model (keyed by the batch's grid tuple)
_MAX_GRID_PIECES = 512    # memoised per-grid helper outputs per model
_PLAN_KWARG = "paravt_vision_plan"
_PRECOMPUTED = ("position_ids", "cu_seqlens", "window_index", "cu_window_seqlens", "max_seqlen", "max_window_seqlen")


class FastPathUnavailable(RuntimeError):
    """The installed transformers lacks an internal the fast path patches."""


# --------------------------------------------------------------------------- internals check
try:
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as _qwen25
except ImportError:  # pragma: no cover - depends on the installed transformers
    _qwen25 = None


def _check_internals():
    """Raise FastPathUnavailable unless the transformers internals this module patches or calls exist."""
    import inspect

    import transformers
    if _qwen25 is None:
        raise FastPathUnavailable(f"transformers {transformers.__version__} has no qwen2_5_vl model; use fast=False")
    mod = _qwen25
    missing = [n for n in ("Qwen2_5_VLModel", "Qwen2_5_VisionTransformerPretrainedModel", "Qwen2_5_VLVisionAttention",
                           "apply_rotary_pos_emb_vision", "eager_attention_forward", "ALL_ATTENTION_FUNCTIONS",
                           "get_vision_position_ids", "get_vision_window_index", "get_vision_attention_seqlens",
                           "is_flash_attention_requested")
               if not hasattr(mod, n)]
    if not missing:
        for name in ("get_vision_position_ids", "get_vision_window_index", "get_vision_attention_seqlens"):
            if "kwargs" not in inspect.signature(getattr(mod, name)).parameters:
                missing.append(f"{name}(kwargs=...) (precomputed helper outputs)")
        rope = inspect.signature(mod.Qwen2_5_VLModel.get_rope_index).parameters
        missing += [f"get_rope_index({p}=...)" for p in ("input_ids", "mm_token_type_ids", "image_grid_thw",
                                                          "video_grid_thw", "attention_mask") if p not in rope]
        if "kwargs" not in inspect.signature(mod.Qwen2_5_VisionTransformerPretrainedModel.forward).parameters:
            missing.append("Qwen2_5_VisionTransformerPretrainedModel.forward(**kwargs)")
    if missing:
        raise FastPathUnavailable(
            f"the Qwen2.5-VL fast path was written against transformers 5.24; the installed transformers "
            f"{transformers.__version__} lacks: {', '.join(missing)}. Use fast=False (the stock path) or "
            "transformers 5.24.")


def _core(model):
    """The `Qwen2_5_VLModel` inside `model` (a ForConditionalGeneration or the bare model)."""
    if not supports_fast_path(model):
        raise TypeError(f"the fast path supports Qwen2.5-VL models only, got {type(model).__name__}")
    return model if isinstance(model, _qwen25.Qwen2_5_VLModel) else model.model


def supports_fast_path(model) -> bool:
    """True for Qwen2.5-VL models (whatever the installed transformers; enabling may still raise)."""
    if _qwen25 is None or not hasattr(_qwen25, "Qwen2_5_VLModel"):
        return False
    core = _qwen25.Qwen2_5_VLModel
    return isinstance(model, core) or isinstance(getattr(model, "model", None), core)


# --------------------------------------------------------------------------- enable / disable
def enable_fast_path(model):
    """Patch this model instance (see the module docstring); returns it. Idempotent."""
    core = _core(model)
    _check_internals()
    if getattr(core, "_paravt_fast", False):
        return model
    visual = core.visual
    attns = [blk.attn for blk in visual.blocks]
    for a in attns:
        for name in ("qkv", "proj", "num_heads", "scaling", "config"):
            if not hasattr(a, name):
                import transformers
                raise FastPathUnavailable(f"Qwen2_5_VLVisionAttention in transformers {transformers.__version__} "
                                          f"has no attribute {name!r}; use fast=False")
    # Instance attributes shadow the class methods; bound methods keep `copy.deepcopy` (a reference
    # model) fast too, rebound to the copy.
    core.get_rope_index = MethodType(_fast_get_rope_index, core)
    visual._paravt_plans = OrderedDict()
    visual._paravt_pieces = OrderedDict()
    visual.forward = MethodType(_fast_visual_forward, visual)
    for a in attns:
        a.forward = MethodType(_fast_vision_attention, a)
    core._paravt_fast = True
    return model


def disable_fast_path(model):
    """Undo `enable_fast_path` on this instance; returns it."""
    core = _core(model)
    for obj, names in ((core, ("get_rope_index", "_paravt_fast")),
                       (core.visual, ("forward", "_paravt_plans", "_paravt_pieces")),
                       *((blk.attn, ("forward",)) for blk in core.visual.blocks)):
        for n in names:
            obj.__dict__.pop(n, None)
    return model


def is_fast_path_enabled(model) -> bool:
    return supports_fast_path(model) and bool(getattr(_core(model), "_paravt_fast", False))


# --------------------------------------------------------------------------- M-RoPE position ids
def _fast_get_rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,
                         second_per_grid_ts=None, attention_mask=None, **kwargs):
    """`Qwen2_5_VLModel.get_rope_index` for the whole batch at once (images and text; videos go to
    the stock method). A text token takes the running position in all three axes; the tokens of an
    image take (start + t, start + row, start + column) over its merged grid, and the running
    position then advances by max(rows, columns). Padding (attention_mask 0) gets 0 and is skipped."""
    stock = type(self).get_rope_index
    if video_grid_thw is not None or image_grid_thw is None or image_grid_thw.shape[0] == 0:
        return stock(self, input_ids, mm_token_type_ids, image_grid_thw=image_grid_thw,
                     video_grid_thw=video_grid_thw, second_per_grid_ts=second_per_grid_ts,
                     attention_mask=attention_mask, **kwargs)
    dev = input_ids.device
    b, n_len = input_ids.shape
    m = self.config.vision_config.spatial_merge_size
    valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    typ = mm_token_type_ids.to(dev)
    img = (typ == 1) & valid
    # An image's tokens are a run of image tokens among the valid ones (padding skipped, as the
    # stock method compacts each row first): a run starts where the previous valid token is not one.
    cols = torch.arange(n_len, device=dev).expand(b, n_len)
    last_valid = torch.where(valid, cols, -1).cummax(dim=1).values
    prev = torch.nn.functional.pad(last_valid[:, :-1], (1, 0), value=-1)
    start = img & ~(img.gather(1, prev.clamp(min=0)) & (prev >= 0))
    n_img = image_grid_thw.shape[0]
    run = (start.flatten().long().cumsum(0) - 1).clamp(0, n_img - 1).view(b, n_len)  # images in batch order
    grid = image_grid_thw.to(dev).long()
    gt, gh, gw = grid[:, 0], grid[:, 1] // m, grid[:, 2] // m
    counts = torch.zeros(n_img, dtype=torch.long, device=dev).scatter_add(0, run.flatten(), img.flatten().long())
    bad = ((start.sum() != n_img) | (counts != gt * gh * gw).any()
           | (((typ != 0) & (typ != 1)) & valid).any())
    if bool(bad):  # the one host sync: the stock method fails (or misreads) such input too
        raise ValueError(
            f"image tokens do not match image_grid_thw: {int(start.sum())} runs of image tokens for {n_img} "
            f"images (run lengths {counts.tolist()}, grids {grid.tolist()}), or video/unknown token types "
            "without video_grid_thw")
    advance = (valid & ~img).long() + torch.where(start, torch.maximum(gh, gw)[run], 0)
    before = advance.cumsum(1) - advance            # the running position before each token
    per_image = torch.zeros(n_img, dtype=torch.long, device=dev)  # a value per image, read at its first token
    start_pos = per_image.scatter_add(0, run.flatten(), (before * start).flatten())
    k_all = img.flatten().long().cumsum(0).view(b, n_len) - 1   # index among all image tokens
    k = k_all - per_image.scatter_add(0, run.flatten(), (k_all * start).flatten())[run]  # index within its image
    s, w, hw = start_pos[run], gw[run], (gh * gw)[run]
    pos = torch.stack([torch.where(img, s + k // hw, before),
                       torch.where(img, s + (k // w) % gh[run], before),
                       torch.where(img, s + k % w, before)]) * valid
    pos = pos.to(input_ids.dtype)
    deltas = pos.amax(dim=(0, 2)) + 1 - valid.sum(1)
    return pos, deltas.unsqueeze(1)


# --------------------------------------------------------------------------- vision tower
@dataclass
class _Segments:
    """How to batch attention over contiguous segments of the packed patch sequence: `groups` are
    (length, count) in the order they appear after gathering rows with `order`; `inverse` undoes
    the gather (both None when the segments already come grouped)."""
    groups: list[tuple[int, int]]
    order: torch.Tensor | None
    inverse: torch.Tensor | None


@dataclass
class _VisionPlan:
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    window_index: torch.Tensor
    cu_window_seqlens: torch.Tensor
    max_seqlen: int
    max_window_seqlen: int
    full: _Segments
    window: _Segments


def _segments(cu: np.ndarray, device) -> _Segments:
    lengths = np.diff(cu)
    starts = cu[:-1]
    keep = lengths > 0
    lengths, starts = lengths[keep], starts[keep]
    distinct = np.unique(lengths)
    if len(distinct) == 1:  # contiguous and already grouped: a plain reshape
        return _Segments([(int(distinct[0]), len(lengths))], None, None)
    groups, order = [], []
    for length in distinct:
        s = starts[lengths == length]
        groups.append((int(length), len(s)))
        order.append((s[:, None] + np.arange(length)).ravel())
    order = np.concatenate(order)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return _Segments(groups, torch.as_tensor(order, device=device), torch.as_tensor(inverse, device=device))


def _grid_pieces(visual, grid: tuple[int, int, int]):
    """The stock helpers' outputs for ONE image grid (CPU), memoised."""
    pieces = visual._paravt_pieces
    if grid in pieces:
        pieces.move_to_end(grid)
        return pieces[grid]
    mod = _qwen25
    g = torch.tensor([grid], dtype=torch.long)
    pos = mod.get_vision_position_ids(g, visual.spatial_merge_size)
    widx, cu_w = mod.get_vision_window_index(g, spatial_merge_size=visual.spatial_merge_size,
                                             window_size=visual.window_size, patch_size=visual.patch_size)
    out = (pos.numpy(), widx.numpy().astype(np.int64), cu_w.numpy().astype(np.int64))
    pieces[grid] = out
    if len(pieces) > _MAX_GRID_PIECES:
        pieces.popitem(last=False)
    return out


def _vision_plan(visual, grid_thw: torch.Tensor) -> _VisionPlan:
    grids = tuple(tuple(int(x) for x in row) for row in grid_thw.tolist())  # the one host sync
    key = (grids, grid_thw.device)
    plans = visual._paravt_plans
    if key in plans:
        plans.move_to_end(key)
        return plans[key]
    # Built as normal tensors even under torch.inference_mode, so a plan first made while generating
    # can serve a later training step (inference tensors cannot be saved for backward).
    with torch.inference_mode(False):
        plan = _build_plan(visual, grids, grid_thw.device)
    plans[key] = plan
    if len(plans) > _MAX_BATCH_PLANS:
        plans.popitem(last=False)
    return plan


def _build_plan(visual, grids, dev) -> _VisionPlan:
    pos, widx, cu_w, frame_lens = [], [], [np.zeros(1, np.int64)], []
    merged_off = patch_off = 0
    unit = visual.spatial_merge_size ** 2
    for t, h, w in grids:
        p, wi, cw = _grid_pieces(visual, (t, h, w))
        pos.append(p)
        widx.append(wi + merged_off)
        cu_w.append(cw[1:] + patch_off)
        frame_lens += [h * w] * t
        merged_off += t * h * w // unit
        patch_off += t * h * w
    cu_full = np.concatenate([[0], np.cumsum(frame_lens)]).astype(np.int64)
    cu_win = np.concatenate(cu_w)
    cu_win = cu_win[np.concatenate([[True], cu_win[1:] != cu_win[:-1]])]  # stock: unique_consecutive
    return _VisionPlan(
        position_ids=torch.as_tensor(np.concatenate(pos), device=dev),
        cu_seqlens=torch.as_tensor(cu_full, dtype=torch.int32, device=dev),
        window_index=torch.as_tensor(np.concatenate(widx), device=dev),
        cu_window_seqlens=torch.as_tensor(cu_win, dtype=torch.int32, device=dev),
        max_seqlen=int(np.diff(cu_full).max()), max_window_seqlen=int(np.diff(cu_win).max()),
        full=_segments(cu_full, dev), window=_segments(cu_win, dev))


def _fast_visual_forward(self, hidden_states, grid_thw, **kwargs):
    """The stock vision forward, fed the memoised helper outputs (and the attention plan)."""
    if any(k in kwargs for k in _PRECOMPUTED) or grid_thw.shape[0] == 0:
        return type(self).forward(self, hidden_states, grid_thw, **kwargs)
    plan = _vision_plan(self, grid_thw)
    pre = dict(position_ids=plan.position_ids, cu_seqlens=plan.cu_seqlens, window_index=plan.window_index,
               cu_window_seqlens=plan.cu_window_seqlens)
    if _qwen25.is_flash_attention_requested(self.config):  # saves the stock code a host sync per call
        pre.update(max_seqlen=plan.max_seqlen, max_window_seqlen=plan.max_window_seqlen)
    return type(self).forward(self, hidden_states, grid_thw, **pre, **{_PLAN_KWARG: plan}, **kwargs)


def _fast_vision_attention(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None,
                           paravt_vision_plan: _VisionPlan | None = None, **kwargs):
    """Qwen2_5_VLVisionAttention.forward with the per-segment attention calls batched: one call per
    distinct segment length over all segments of that length (same attention function, same math)."""
    plan = paravt_vision_plan
    seg = None
    if plan is not None:
        seg = plan.full if cu_seqlens is plan.cu_seqlens else plan.window if cu_seqlens is plan.cu_window_seqlens else None
    impl = self.config._attn_implementation
    if seg is None or impl not in ("sdpa", "eager") or kwargs.get("output_attentions"):
        return type(self).forward(self, hidden_states, cu_seqlens, position_embeddings=position_embeddings,
                                  max_seqlen=max_seqlen, **kwargs)
    mod = _qwen25
    n = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(n, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = mod.apply_rotary_pos_emb_vision(q, k, cos, sin)
    if seg.order is not None:
        q, k, v = q[seg.order], k[seg.order], v[seg.order]
    attention = mod.ALL_ATTENTION_FUNCTIONS.get_interface(impl, mod.eager_attention_forward)
    outs, at = [], 0
    for length, count in seg.groups:
        qkv = [x[at: at + length * count].reshape(count, length, self.num_heads, -1).transpose(1, 2) for x in (q, k, v)]
        at += length * count
        out = attention(self, *qkv, attention_mask=None, scaling=self.scaling,
                        dropout=0.0 if not self.training else self.attention_dropout, is_causal=False, **kwargs)[0]
        outs.append(out.reshape(length * count, -1))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    if seg.inverse is not None:
        out = out[seg.inverse]
    return self.proj(out.contiguous())


# --------------------------------------------------------------------------- image processing
def _pil_processor_class():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    return Qwen2VLImageProcessorPil


def _smart_resize():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
    return smart_resize


_PIL_FILTERS = {2: (1.0, "bilinear"), 3: (2.0, "bicubic")}  # PIL Resampling value -> (support, kernel)
_PRECISION_BITS = 22  # Pillow's fixed-point precision for 8-bit images (32 - 8 - 2)


def _kernel(name: str, x: float) -> float:
    x = abs(x)
    if name == "bilinear":
        return 1.0 - x if x < 1.0 else 0.0
    a = -0.5  # Pillow's bicubic (Keys, a = -0.5), evaluated in the same order as Pillow
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


@functools.lru_cache(maxsize=128)
@torch.inference_mode(False)  # a normal tensor, whatever mode the first caller ran in
def _resample_matrix(in_size: int, out_size: int, resample: int) -> torch.Tensor:
    """(in_size, out_size) float64 matrix of Pillow's fixed-point filter weights for one axis.

    Pillow resizes 8-bit images separably (horizontal pass, then vertical), each output pixel
    being clip(floor((sum_i pixel_i * w_i + 2^21) / 2^22), 0, 255) with integer weights w_i from
    its double-precision filter (antialiased when shrinking). The weights are computed here with
    the same double arithmetic in the same order; in float64 the integer sums are exact
    (|sum| < 2^33 << 2^53), so a matmul reproduces Pillow bit for bit."""
    support, name = _PIL_FILTERS[resample]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support *= filterscale
    ss = 1.0 / filterscale
    mat = np.zeros((in_size, out_size), dtype=np.float64)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        ws = [_kernel(name, (x + xmin - center + 0.5) * ss) for x in range(xmax)]
        total = 0.0
        for w in ws:
            total += w
        for x, w in enumerate(ws):
            w = w / total if total != 0.0 else w
            mat[x + xmin, xx] = int(w * (1 << _PRECISION_BITS) + (0.5 if w >= 0 else -0.5))
    return torch.from_numpy(mat)


def _pil_resize(x: torch.Tensor, height: int, width: int, resample: int, vertical_first: bool) -> torch.Tensor:
    """Pillow's `Image.resize` of uint8 images (N, C, H, W) -> float64 (N, C, height, width) holding
    the uint8 values Pillow returns: one pass per axis that changes, each rounded and clipped to
    8 bits, in Pillow's order (see `_pillow_vertical_first`)."""
    y = x.to(torch.float64)
    half, scale = float(1 << (_PRECISION_BITS - 1)), 2.0 ** -_PRECISION_BITS  # scaling by 2^-22 is exact

    def round_clip(acc):
        return acc.add_(half).mul_(scale).floor_().clamp_(0, 255)

    def horizontal(y):
        if x.shape[-1] == width:
            return y
        return round_clip(y @ _resample_matrix(x.shape[-1], width, resample).to(y.device))

    def vertical(y):
        if x.shape[-2] == height:
            return y
        return round_clip(_resample_matrix(x.shape[-2], height, resample).to(y.device).T @ y)

    return horizontal(vertical(y)) if vertical_first else vertical(horizontal(y))


@functools.lru_cache(maxsize=1)
def _pillow_order_rule() -> bool | None:
    """Which pass order the installed Pillow uses, found once by resizing a probe image both ways.
    True: Pillow >= 12 (vertical first when the height shrinks by more than twice the width does);
    False: always horizontal first (older Pillow); None: neither (resizing is then left to Pillow)."""
    from PIL import Image
    probe = np.random.default_rng(0).integers(0, 256, (16, 8, 3), dtype=np.uint8)  # 16x8 -> 8x12: the rules differ
    ref = torch.from_numpy(np.array(Image.fromarray(probe).resize((12, 8), resample=Image.Resampling.BICUBIC)))
    x = torch.from_numpy(probe).permute(2, 0, 1)[None]
    for rule in (True, False):
        if torch.equal(_pil_resize(x, 8, 12, 3, vertical_first=rule)[0].permute(1, 2, 0).to(torch.uint8), ref):
            return rule
    return None


def _pillow_vertical_first(h: int, w: int, th: int, tw: int) -> bool:
    return bool(_pillow_order_rule()) and (h - th) > 0 and (h - th) > 2 * (w - tw)


def _as_frames(frames) -> list[torch.Tensor] | torch.Tensor:
    if isinstance(frames, (list, tuple)):
        out = [torch.as_tensor(np.asarray(f)) if not isinstance(f, torch.Tensor) else f for f in frames]
    else:
        out = frames if isinstance(frames, torch.Tensor) else torch.as_tensor(np.asarray(frames))
        if out.ndim != 4:
            raise ValueError(f"frames must be (N, H, W, 3) uint8 or a list of HxWx3 uint8 arrays, got shape "
                             f"{tuple(out.shape)}")
        out = list(out) if out.shape[0] == 0 else out
    for f in (out if isinstance(out, list) else [out[0]]):
        if f.dtype != torch.uint8 or f.shape[-1] != 3 or f.ndim != 3:
            raise ValueError(f"frames must be HxWx3 uint8, got shape {tuple(f.shape)} dtype {f.dtype}")
    return out


def pixel_values_from_frames(frames, image_processor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pixel_values, image_grid_thw) for uint8 frames, equal to what the stock Qwen2-VL PIL image
    processor returns for them (`image_processor(images=list_of_frames, return_tensors="pt")`).

    frames: a uint8 tensor or array (N, H, W, 3), or a list of HxWx3 uint8 arrays/tensors of possibly
    different sizes. Computed in torch on the frames' device (grouped by size, in input order).
    Processors other than `Qwen2VLImageProcessorPil`, and resampling filters other than bicubic and
    bilinear when a frame needs resizing, are handed to the processor itself (same numbers, slower)."""
    frames = _as_frames(frames)
    items = frames if isinstance(frames, list) else None
    if items is not None and not items:
        raise ValueError("pixel_values_from_frames needs at least one frame")
    proc = image_processor
    device = (items[0] if items is not None else frames).device
    if type(proc) is not _pil_processor_class():
        return _with_processor(items if items is not None else list(frames), proc, device)
    patch, merge, tps = int(proc.patch_size), int(proc.merge_size), int(proc.temporal_patch_size)
    size = proc.size
    min_px, max_px = size["shortest_edge"], size["longest_edge"]
    smart_resize = _smart_resize()

    def target(h, w):
        return smart_resize(h, w, factor=patch * merge, min_pixels=min_px, max_pixels=max_px) if proc.do_resize else (h, w)

    if items is None:
        sizes = [tuple(frames.shape[1:3])]
        groups = {sizes[0]: list(range(frames.shape[0]))}
    else:
        groups = {}
        for i, f in enumerate(items):
            groups.setdefault(tuple(f.shape[:2]), []).append(i)
    resample = int(proc.resample) if proc.resample is not None else 2
    if any(target(*hw) != hw for hw in groups) and (resample not in _PIL_FILTERS or _pillow_order_rule() is None):
        return _with_processor(items if items is not None else list(frames), proc, device)
    table = _value_table(proc).to(device).flatten()  # (3 * 256,): channel c, value v -> table[256 c + v]
    channel = (256 * torch.arange(3, device=device)).view(1, 3, 1, 1, 1)
    per_image: list[torch.Tensor | None] = [None] * (frames.shape[0] if items is None else len(items))
    grids = torch.empty((len(per_image), 3), dtype=torch.long)
    for (h, w), idx in groups.items():
        x = frames if items is None else torch.stack([items[i] for i in idx])
        x = x.to(device).permute(0, 3, 1, 2)                                # (n, 3, h, w) uint8
        th, tw = target(h, w)
        if th % patch or tw % patch:
            raise ValueError(f"a {h}x{w} frame becomes {th}x{tw}, not a multiple of the patch size {patch}")
        if (th, tw) != (h, w):
            x = _pil_resize(x, th, tw, resample, _pillow_vertical_first(h, w, th, tw)).to(torch.uint8)
        gh, gw = th // patch, tw // patch
        n = x.shape[0]
        x = x.reshape(n, 3, gh // merge, merge, patch, gw // merge, merge, patch)
        x = x.permute(0, 2, 5, 3, 6, 1, 4, 7)          # (n, gh/m, gw/m, m, m, C, p, p): 2x2-merge order
        # Rescale + normalise by table look-up (exact: the table holds the processor's own result for
        # each 8-bit value), then duplicate each still image over the temporal patch.
        x = table[x.reshape(n * gh * gw, 3, 1, patch, patch).long() + channel]
        x = x.expand(-1, -1, tps, -1, -1).reshape(n, gh * gw, -1)
        for j, i in enumerate(idx):
            per_image[i] = x[j]
        grids[idx] = torch.tensor([1, gh, gw])
    pixel_values = x.reshape(-1, x.shape[-1]) if items is None else torch.cat(per_image)
    return pixel_values, grids.to(device)


def _value_table(proc) -> torch.Tensor:
    """(3, 256) float32: what the processor makes of each 8-bit value in each channel, with its own
    arithmetic (rescale in float64 then cast to float32; normalise in float32)."""
    x = np.broadcast_to(np.arange(256, dtype=np.float64), (3, 256))
    if proc.do_rescale:
        x = x * proc.rescale_factor
    x = x.astype(np.float32)
    if proc.do_normalize:
        mean = np.array(_per_channel(proc.image_mean), dtype=np.float32)[:, None]
        std = np.array(_per_channel(proc.image_std), dtype=np.float32)[:, None]
        x = (x - mean) / std
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _per_channel(v) -> list[float]:
    return list(v) if isinstance(v, (list, tuple)) else [float(v)] * 3


def _with_processor(items: Sequence[torch.Tensor], proc, device) -> tuple[torch.Tensor, torch.Tensor]:
    out = proc(images=[f.cpu().numpy() for f in items], return_tensors="pt")
    return out["pixel_values"].to(device), out["image_grid_thw"].to(device)
