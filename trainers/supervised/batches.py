"""Batches and the loss of a supervised build: ``Trainee`` (the model being trained, with what its batches need)
collates left-padded batches of a corpus part and takes the cross-entropy of assistant tokens only, answer tokens
weighted by ``--answer-weight``; ``nll_loss`` is the reference it is tested against."""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F

from trainers.supervised.data import Records

try:  # the batch-friendly forward and GPU pixel values (same numbers as the stock path)
    from agents.lmm.fast_qwen import enable_fast_path, pixel_values_from_frames
except ImportError:  # not there yet: the stock forward and the image processor
    enable_fast_path = pixel_values_from_frames = None


class Trainee:
    """The model being trained with what batches need: token ids of pads and images, the image
    processor (or the fast pixel-value builder) and the device."""

    def __init__(self, model, tokenizer, image_processor, device, fast: bool = True, answer_weight: float = 1.0):
        self.model, self.tokenizer, self.image_processor = model, tokenizer, image_processor
        self.answer_weight = float(answer_weight)
        self.answer_marks = answer_marks(tokenizer)
        self.device = torch.device(device)
        self.fast = bool(fast and enable_fast_path is not None)
        if self.fast:
            try:
                enable_fast_path(model)
            except Exception as exc:  # e.g. transformers internals it does not know: the stock path is still right
                print(f"[sft] fast path unavailable ({type(exc).__name__}: {exc}); using the stock forward",
                      file=sys.stderr)
                self.fast = False
        cfg = model.config
        self.image_token_id = cfg.image_token_id
        self.video_token_id = getattr(cfg, "video_token_id", None)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def pixel_values(self, frames: torch.Tensor):
        """(pixel_values, image_grid_thw) of uint8 frames (N, H, W, 3), on the frames' device."""
        if self.fast:
            return pixel_values_from_frames(frames, self.image_processor)
        out = self.image_processor(images=list(frames.cpu().numpy()), return_tensors="pt")
        return out["pixel_values"].to(frames.device), out["image_grid_thw"].to(frames.device)

    def collate(self, recs: Records, idx) -> dict:
        """Left-padded batch (as the policy pads) of sequences ``idx`` of ``recs``."""
        n, lens = len(idx), recs.lens[idx]
        width = int(lens.max())
        ids = np.full((n, width), self.pad_id, np.int64)
        attn = np.zeros((n, width), np.int64)
        lmask = np.zeros((n, width), np.bool_)
        for r, i in enumerate(idx):
            a, b = recs.tok_off[i], recs.tok_off[i + 1]
            ids[r, width - (b - a):] = recs.ids[a:b]
            attn[r, width - (b - a):] = 1
            lmask[r, width - (b - a):] = recs.mask[a:b]
        batch = {"input_ids": torch.from_numpy(ids).to(self.device), "attention_mask": torch.from_numpy(attn).to(self.device),
                 "loss_mask": torch.from_numpy(lmask).to(self.device)}
        if self.answer_weight != 1.0:
            weight = np.where(answer_token_mask(ids, lmask, self.answer_marks), self.answer_weight, 1.0)
            batch["loss_weight"] = torch.from_numpy(weight.astype(np.float32)).to(self.device)
        img = np.concatenate([np.arange(recs.img_off[i], recs.img_off[i + 1]) for i in idx])
        if len(img):
            sel = torch.from_numpy(img).to(recs.frames.device)
            batch["frames"] = recs.frames.index_select(0, sel).to(self.device)
        return batch

    def loss(self, batch: dict) -> tuple[torch.Tensor, int]:
        """Mean next-token cross-entropy over loss-mask tokens (assistant tokens), computing the
        vocabulary projection only where a target is; answer tokens count ``answer_weight`` times
        (the mean still divides by the number of tokens)."""
        ids = batch["input_ids"]
        mm = (ids == self.image_token_id).long()
        if self.video_token_id is not None:
            mm = mm + 2 * (ids == self.video_token_id).long()
        kw = dict(input_ids=ids, attention_mask=batch["attention_mask"], mm_token_type_ids=mm, use_cache=False)
        if "frames" in batch:
            pv, grid = self.pixel_values(batch["frames"])
            kw.update(pixel_values=pv.to(self.model.dtype), image_grid_thw=grid)
        hidden = self.model.model(**kw).last_hidden_state
        sel = batch["loss_mask"][:, 1:]
        logits = self.model.lm_head(hidden[:, :-1][sel]).float()
        if "loss_weight" not in batch:
            return F.cross_entropy(logits, ids[:, 1:][sel]), int(sel.sum())
        ce = F.cross_entropy(logits, ids[:, 1:][sel], reduction="none")
        return (ce * batch["loss_weight"][:, 1:][sel]).sum() / max(int(sel.sum()), 1), int(sel.sum())


def answer_marks(tokenizer) -> dict:
    """Token ids that open and close an answer: ``<answer>``/``</answer>`` and the native
    ``Answer:`` (as a token sequence), ``<|im_end|>`` ending a native answer."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    return dict(open=enc("<answer>"), close=enc("</answer>"), native=enc("Answer:"), end=enc("<|im_end|>"))


def answer_token_mask(ids: np.ndarray, loss_mask: np.ndarray, marks: dict) -> np.ndarray:
    """(batch, len) bool: assistant tokens that spell an answer, i.e. those after ``<answer>`` up
    to and including ``</answer>`` and those after a native ``Answer:`` up to the turn's end."""
    def ends_of(seq):  # positions where ``seq`` ends
        hit = np.zeros(ids.shape, np.bool_)
        if seq and ids.shape[1] >= len(seq):
            n = ids.shape[1] - len(seq) + 1
            run = np.ones((ids.shape[0], n), np.bool_)
            for j, t in enumerate(seq):
                run &= ids[:, j:j + n] == t
            hit[:, len(seq) - 1:] = run
        return hit
    pos = np.arange(ids.shape[1])
    opened = np.maximum.accumulate(np.where(ends_of(marks["open"]) | ends_of(marks["native"]), pos, -1), axis=1)
    closed = np.maximum.accumulate(np.where(ends_of(marks["close"]) | ends_of(marks["end"]), pos, -1), axis=1)
    inside = np.zeros(ids.shape, np.bool_)
    inside[:, 1:] = opened[:, :-1] > closed[:, :-1]  # opened before this token, not closed before it
    return inside & loss_mask


def nll_loss(policy, convs) -> tuple[torch.Tensor, int]:
    """Mean NLL over assistant tokens through the policy (``generated_mask``): the reference the
    batched loss is tested against."""
    lps = policy.conversation_logprobs(convs, temperature=1.0)
    total, n = 0.0, 0
    for lp, c in zip(lps, convs):
        m = torch.tensor(c.generated_mask, dtype=lp.dtype, device=lp.device)
        total = total + -(lp * m).sum()
        n += int(m.sum())
    return total / max(n, 1), n

