"""Self-distillation rows (STaR-style rejection sampling): a cold start plays train episodes as the RL trainer
plays them (``trainers.para_grpo``'s settings: its own sub-agent, the trainer's rollout code), the conversations it
answers right are kept, a share of them said again wholly in the native dialect, and written as a corpus part that
a supervised build trains on (``trainers/sft.py --stage2-rows``). Trained on its own tokens, the model sharpens
what it writes; the re-voiced share keeps the native openers beside the ParaVT ones, so the format stays as fragile
under sampling as it was.

``play_rows`` is the whole step; the pieces are what ``benchmarks/cold_start_lineage/self_distill.py`` (its
experiments with pinned tag log-probs) shares with it."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from agents.lmm.corpus import pack_records, revoice_native, rollout_record
from agents.lmm.policy import DEFAULT_PREFIX
from agents.lmm.tokenizer import SPECIAL_TOKENS, STRUCTURAL_TAGS
from trainers.run_state import atomic_write_json

REPORT = "report.json"


def generated_spans(generated_mask) -> list[tuple[int, int]]:
    """(start, end) of each run of generated tokens: one per assistant turn."""
    spans, start = [], None
    for i, g in enumerate(list(generated_mask) + [False]):
        if g and start is None:
            start = i
        elif not g and start is not None:
            spans.append((start, i))
            start = None
    return spans


def revoice_conversation(conv, tokenizer, rng: np.random.Generator):
    """`conv` with every assistant turn said again in the native dialect (``corpus.revoice_native``), the prompt,
    frames and tool responses unchanged; None where a turn is not a whole ParaVT turn. The think prefix is forced,
    so each generated span is the turn after it; a closing ``<|im_end|>`` the model wrote is kept."""
    end = "<|im_end|>"
    ids, mask, logprobs, cut, calls_before = [], [], [], 0, 0
    for a, b in generated_spans(conv.generated_mask):
        text = tokenizer.decode(conv.token_ids[a:b], skip_special_tokens=False)
        closed = text.endswith(end)
        body = text[: -len(end)] if closed else text
        has_calls = "<tool_call>" in body
        decision = "tool" if has_calls else "answer_after_tool" if calls_before else "direct"
        native = revoice_native(DEFAULT_PREFIX + body, decision, rng)
        if native is None or not native.startswith(DEFAULT_PREFIX):
            return None
        new = tokenizer.encode(native[len(DEFAULT_PREFIX):] + (end if closed else ""), add_special_tokens=False)
        ids += conv.token_ids[cut:a] + new
        mask += conv.generated_mask[cut:a] + [True] * len(new)
        logprobs += conv.logprobs[cut:a] + [0.0] * len(new)
        cut, calls_before = b, calls_before + has_calls
    out = conv.copy()
    out.token_ids = ids + conv.token_ids[cut:]
    out.generated_mask = mask + conv.generated_mask[cut:]
    out.logprobs = logprobs + conv.logprobs[cut:]
    return out


def play(policy, args, split: str, first: int, n: int, pool: int, temperature: float, seed: int):
    """Rollouts of episodes first..first+n-1 of `split` (episode i: reset seed seed + i), `pool` at a time, the
    sub-agent greedy."""
    from trainers.core import play_episodes
    from trainers.rollouts import make_env

    envs = [make_env(args, split, policy) for _ in range(min(pool, n))]
    out = []
    with torch.no_grad():
        for _, rs in play_episodes(policy, envs, args, range(first, first + n), temperature=temperature,
                                   sub_temperature=0.0, seed=seed):
            out += rs
            print(f"played {len(out)}/{n}", flush=True)
    return out


def untrained_ids(tokenizer) -> set[int]:
    """The grammar's tags and the chat's special tokens: the format, which self-distillation leaves where it was
    (trained on, a model's own greedy tags would firm up the format under sampling too)."""
    return {tokenizer.convert_tokens_to_ids(t) for t in STRUCTURAL_TAGS + tuple(SPECIAL_TOKENS)}


def write_rows(convs, folder: Path, untrained=frozenset(), name: str = "chunk_00000.npz") -> None:
    """The conversations as one corpus chunk ``folder/name`` (``agents.lmm.corpus.rollout_record``), written
    atomically; every generated token is a target except those in `untrained`."""
    folder.mkdir(parents=True, exist_ok=True)
    packed = pack_records([rollout_record(c.token_ids, [g and t not in untrained for t, g in
                                                         zip(c.token_ids, c.generated_mask)], c.images)
                           for c in convs])
    tmp = folder / f"partial_{name}"  # not chunk_*.npz: a killed write is never read as a chunk
    np.savez_compressed(tmp, **packed)  # the frames are flat colours: about 20x smaller
    tmp.replace(folder / name)


def play_rows(model: str | Path, folder: str | Path, *, episodes: int, pool: int, seed: int,
              native_revoice: float = 0.0, keep: str = "correct", temperature: float = 0.0, device: str = "cpu",
              env: dict | None = None, stop_at: float = 0.0) -> dict | None:
    """The self-distillation rows of `model` in `folder`: `episodes` train episodes played `pool` at a time
    (greedy unless `temperature`), those answered right kept (``keep="all"``: every one), `native_revoice` of
    them said again in the native dialect, the tags out of the loss. Each block of `pool` episodes is written as
    soon as it is played (``chunk_<block>.npz`` when it kept any, ``block_<block>.json``), so a run stopped at
    `stop_at` (unix time, 0 = never) or killed continues with the next block. `env`: settings of
    ``trainers.para_grpo.Args`` to play with (its defaults otherwise). Returns the report (also ``report.json``),
    or None when stopped first."""
    from trainers.rollouts import episode_record, episode_stats

    if keep not in ("correct", "all"):
        raise ValueError(f"keep must be 'correct' or 'all', not {keep!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    t0, blocks, player = time.time(), [], None
    for b, first in enumerate(range(0, episodes, pool)):
        path = folder / f"block_{b:05d}.json"
        if not path.is_file():
            if stop_at and time.time() >= stop_at:
                return None
            player = player or _player(model, device, env, seed)
            policy, args = player
            rs = play(policy, args, "train", first, min(pool, episodes - first), pool, temperature, seed=seed)
            kept = [r.conv for r in rs if keep == "all" or r.info.get("correct")]
            revoiced = 0
            if native_revoice:
                rng = np.random.default_rng([seed, b])
                voiced = [revoice_conversation(c, policy.tokenizer, rng) if rng.random() < native_revoice else None
                          for c in kept]
                revoiced = sum(v is not None for v in voiced)
                kept = [v or c for v, c in zip(voiced, kept)]
            if kept:
                write_rows(kept, folder, untrained_ids(policy.tokenizer), name=f"chunk_{b:05d}.npz")
            atomic_write_json(path, {"kept": len(kept), "revoiced": revoiced,
                                     "episodes": [episode_record(r) for r in rs]})
        blocks.append(json.loads(path.read_text()))
    records = [e for blk in blocks for e in blk["episodes"]]
    report = {"model": str(model), "episodes": len(records), "kept": sum(blk["kept"] for blk in blocks),
              "revoiced": sum(blk["revoiced"] for blk in blocks), "keep": keep, "native_revoice": native_revoice,
              "seed": seed, "seconds": time.time() - t0, "play": episode_stats(records, per_family=True)}
    atomic_write_json(folder / REPORT, report)
    return report


def _player(model, device: str, env: dict | None, seed: int):
    """(policy, trainers.para_grpo.Args) that play the episodes."""
    from trainers.core import load_policy
    from trainers.para_grpo import Args

    torch.manual_seed(seed)
    torch_device = torch.device(device)
    policy = load_policy(str(model), torch_device,
                         generation_cache="graph" if torch_device.type == "cuda" else "dynamic")
    policy.model.eval()
    return policy, dataclasses.replace(Args(), model=str(model), **(env or {}))


def rows_report(folder: str | Path) -> dict | None:
    """The report of rows `play_rows` finished in `folder` (None: not played, or not to the end)."""
    path = Path(folder) / REPORT
    return json.loads(path.read_text()) if path.is_file() else None
