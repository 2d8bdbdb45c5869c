"""The GRPO maths as pure functions (numpy / torch tensors in, tensors out), unit-tested against
hand computation in tests/test_trainers.py. No model, no environment, no process group: the run
loop (trainers/core.py) feeds them.

    compute_advantages   r' = scale * r + bias, normalised per prompt group, then over the batch
                         (the global batch under data parallelism, through `sum_over_processes`)
    grpo_token_loss      PPO-clip token loss against behaviour log-probs + k3 KL to a reference
    k3_kl                the k3 estimator of KL(pi || ref) per token
    structural_mask      generated positions that hold a grammar tag (the log-prob anchor's support)
    anchor_loss          the paper's selective anchor: -lambda * mean log pi over those positions
    ANCHOR_MODES         the exploration-anchor modes by name (--anchor-mode): register_anchor_mode adds
                         one, get_anchor_mode looks one up; the CLI's choices are this registry's names
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

NORM_MODES = ("std", "mean", "none")


def _normalize(x: np.ndarray, mode: str, eps: float = 1e-6, sum_over_processes=None) -> np.ndarray:
    """(x - mean) / (std + eps) ("std"), x - mean ("mean") or x ("none"). With `sum_over_processes`
    (a function summing a small array over every process) mean and std are those of the union of
    every process's x, so data-parallel training normalises over the global batch."""
    if mode == "none":
        return x
    moments = np.array([x.size, x.sum(), np.square(x).sum()], dtype=np.float64)
    if sum_over_processes is not None:
        moments = sum_over_processes(moments)
    n, total, total_sq = moments
    if n == 0:
        return x
    mean = total / n
    centred = x - mean
    if mode == "mean":
        return centred
    std = np.sqrt(max(total_sq / n - mean * mean, 0.0))  # population std (ddof 0)
    return centred / (std + eps)


def compute_advantages(rewards: Sequence[float], groups: Sequence[int], *, scale: float = 1.0, bias: float = 0.0,
                       group_norm: str = "std", batch_norm: str = "std", eps: float = 1e-6,
                       sum_over_processes=None) -> np.ndarray:
    """r' = scale * r + bias; A = group-normalised r' (per prompt: a group lives on one process),
    then normalised over the batch: the global batch when `sum_over_processes` is given (see
    `_normalize`). std uses the population standard deviation (ddof 0) plus eps."""
    r = np.asarray(rewards, dtype=np.float64) * scale + bias
    g = np.asarray(groups)
    adv = np.empty_like(r)
    for k in np.unique(g):
        sel = g == k
        adv[sel] = _normalize(r[sel], group_norm, eps)
    return _normalize(adv, batch_norm, eps, sum_over_processes)


def grpo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
                    adv: torch.Tensor, mask: torch.Tensor, *, clip_eps: float, kl_coef: float):
    """Per-token PPO-clip loss + kl_coef * k3(KL to reference). All tensors shape (T,) or (B, T);
    `adv` broadcasts. Returns (loss_per_token, stats per token: ratio, clipped, kl). Masking and
    aggregation are the caller's (token-mean over all trained tokens)."""
    ratio = torch.exp(logp - old_logp)
    pg1 = ratio * adv
    pg2 = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    loss = -torch.minimum(pg1, pg2)
    clipped = (pg2 < pg1).float()  # the clip is the active branch
    if ref_logp is not None and kl_coef != 0:
        kl = k3_kl(logp, ref_logp)
        loss = loss + kl_coef * kl
    else:
        kl = torch.zeros_like(logp)
    return loss * mask, {"ratio": ratio.detach(), "clipped": clipped.detach(), "kl": kl.detach()}


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref) from log-probs of the sampled tokens: e^d - d - 1,
    d = log ref - log pi (unbiased, always >= 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def structural_mask(token_ids: Sequence[int], generated_mask: Sequence[bool], struct_ids: Sequence[int]) -> list[bool]:
    """True at GENERATED positions holding a structural tag token (the prefilled <think> is not generated)."""
    ids = set(int(t) for t in struct_ids)
    return [bool(g) and int(t) in ids for t, g in zip(token_ids, generated_mask)]


def anchor_loss(logp: torch.Tensor, smask: torch.Tensor, lam: float, n_struct: float) -> torch.Tensor:
    """The paper's selective anchor as a loss: -lambda * (sum of log pi over structural positions) / n_struct,
    i.e. +lambda * mean structural log-prob added to the objective."""
    return -lam * (logp * smask).sum() / max(float(n_struct), 1.0)


# ------------------------------------------------------------------ exploration-anchor modes, by name
@dataclass(frozen=True)
class AnchorMode:
    """What --anchor-lambda (lambda) weights under one --anchor-mode.

    reward_bonus  True: lambda and --penalty-gamma weight the reward's sequence-level format bonus
                  (paravt_env.rewards.RewardConfig); False: the reward carries no anchor terms
    loss          loss(logp, structural_mask, lam, n_struct) -> one sequence's anchor term, added to the
                  GRPO loss when lambda is not 0 (the signature of `anchor_loss`); None: nothing in the loss
    help          what the mode is, for --help
    """

    name: str
    reward_bonus: bool = False
    loss: Callable[..., torch.Tensor] | None = None
    help: str = ""


ANCHOR_MODES: dict[str, AnchorMode] = {}


def register_anchor_mode(name: str, *, reward_bonus: bool = False, loss: Callable | None = None,
                         help: str = "") -> AnchorMode:
    """Add an anchor mode under `name` (then a valid --anchor-mode); a name is registered once."""
    if name in ANCHOR_MODES:
        raise ValueError(f"anchor mode {name!r} is already registered")
    ANCHOR_MODES[name] = mode = AnchorMode(name, reward_bonus, loss, help)
    return mode


def get_anchor_mode(name: str) -> AnchorMode:
    """The anchor mode registered as `name`; a ValueError lists the registered ones."""
    try:
        return ANCHOR_MODES[name]
    except KeyError:
        raise ValueError(f"unknown anchor mode {name!r}; registered: {', '.join(ANCHOR_MODES)}") from None


def anchor_modes_help() -> str:
    """Every registered mode with its help, for --anchor-mode's help text."""
    return "; ".join(f"{m.name}: {m.help}" for m in ANCHOR_MODES.values())


register_anchor_mode("bonus", reward_bonus=True, help="the released sequence-level format bonus (reward)")
register_anchor_mode("logprob", loss=anchor_loss, help="the paper's formula, +lambda * mean log pi over structural "
                                                       "tokens as a loss term")
