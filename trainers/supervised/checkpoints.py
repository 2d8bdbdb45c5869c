"""Checkpoints in and out of a supervised build: the starting weights (``build_base``: a random init or
``--init-from``'s checkpoint), the resumable state ``<out>/train_state.pt`` (model, optimiser, stage, step and
history) and the build record ``<out>/sft_args.json``. Both files are written atomically and the state loads as
data only (trainers/run_state.py), so a build killed at any instant leaves the last whole state to resume from."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch

from agents.lmm.tiny_qwen import build_tiny_model, save_checkpoint
from trainers.run_state import RunStateError, atomic_write, atomic_write_json, load_data_only
from trainers.supervised.args import RUNTIME_FIELDS, Args, init_path

STATE_FILE = "train_state.pt"
RECORD_FILE = "sft_args.json"


def build_base(args: Args, tokenizer):
    """The model around ``tokenizer`` on ``args.device``: the tiny model at a random init, or ``--init-from``'s
    checkpoint in its own shape (a grown parent stays grown), then ``--grow-layers`` more layers."""
    if not args.init_from:
        return build_tiny_model(tokenizer, seed=args.seed).to(args.device)
    from agents.lmm.tiny_qwen import grow_depth, load_checkpoint

    path = init_path(args)
    if not (path / "config.json").is_file():
        raise SystemExit(f"--init-from {args.init_from}: {path} is not a checkpoint folder (no config.json)")
    model, init_tok, _ = load_checkpoint(str(path))
    if init_tok.get_vocab() != tokenizer.get_vocab():
        raise SystemExit(f"--init-from {path}: its tokenizer differs from this corpus's (another --vocab-size "
                         f"or corpus); continue from a checkpoint built with the same data settings")
    return grow_depth(model, args.grow_layers).to(args.device)


def state_key(args: Args) -> str:
    """A hash of the settings a resumed build must share with the one that saved the state."""
    d = {k: v for k, v in dataclasses.asdict(args).items() if k not in RUNTIME_FIELDS}
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def is_built(out: Path) -> bool:
    """``out`` holds a finished build: its cold start and record, and no state of an unfinished one."""
    return ((out / "cold_start" / "config.json").is_file() and (out / RECORD_FILE).is_file()
            and not (out / STATE_FILE).exists())


def load_state(out: Path, key: str) -> dict | None:
    """The state an interrupted build left in ``out`` (None: there is none). One that does not load as data (a
    truncated file, or one holding code) is skipped, saying why, and overwritten by this build's first save; one
    of other settings (another ``key``) stops the build."""
    path = out / STATE_FILE
    state = None
    if path.is_file():
        try:
            state = load_data_only(path)
        except RunStateError as exc:
            print(f"[sft] skipping {exc}; starting afresh", file=sys.stderr)
    if state is not None and (problem := _state_problem(state)):
        print(f"[sft] skipping {path}: {problem}; starting afresh", file=sys.stderr)
        state = None
    if state is not None and state["key"] != key:
        raise SystemExit(f"{path} belongs to a run with other settings; resume with the same flags, or delete "
                         f"it (or pick another --out) to start afresh")
    return state


_STATE_FIELDS = {"key": str, "stage": str, "step": int, "train_seconds": (int, float), "alloc_seconds": (int, float),
                 "model": dict, "opt": dict, "history": dict, "info_done": dict}


def _state_problem(state) -> str:
    """Why a loaded ``train_state.pt`` is not one ``save_state`` wrote ("" when it is)."""
    if not isinstance(state, dict):
        return f"it holds {type(state).__name__}, not a saved state"
    for name, kind in _STATE_FIELDS.items():
        if not isinstance(state.get(name), kind) or isinstance(state.get(name), bool):
            return f"field {name!r} is {type(state.get(name)).__name__}"
    if state["stage"] not in ("stage1", "stage2") or state["step"] < 0:
        return f"stage {state['stage']!r} step {state['step']} is not a place a build stands"
    return ""


def save_state(out: Path, key: str, model, stage: str, step: int, train_s: float, alloc_s: float, opt, history: dict,
               info_done: dict) -> None:
    """``<out>/train_state.pt``: where a stage stands (step, training seconds, its time horizon), the model and
    optimiser, the losses and evaluations so far, and the record of the stages already done."""
    state = dict(key=key, stage=stage, step=step, train_seconds=train_s, alloc_seconds=alloc_s,
                 model=model.state_dict(), opt=opt.state_dict(), history=history, info_done=info_done)
    atomic_write(out / STATE_FILE, lambda f: torch.save(state, f))


def write_record(out: Path, info: dict) -> Path:
    """The build record ``<out>/sft_args.json`` (settings, corpus, steps, losses and evaluations of each stage)."""
    return atomic_write_json(out / RECORD_FILE, info)


def finish_cold_start(out: Path, r: dict, info: dict, save, model, tokenizer, processor, writer, t_start: float,
                      label: str) -> Path:
    """After stage 2 (``r``: train_stage's result): ``<out>/cold_start`` and the build record. A stage the time
    budget cut is still written (``stage2_stopped`` says why) and keeps its state to resume from; a whole one drops
    the state."""
    if r["stopped"]:
        save("stage2", r["steps"], r["seconds"], math.inf, r["opt"], r["history"])
        print(f"[sft] {label}: stage2 stopped by the {r['stopped']} after {r['steps']} steps; re-run the same "
              "command to resume", file=sys.stderr)
    save_checkpoint(str(out / "cold_start"), model, tokenizer, processor)
    info.update(stage2_stopped=r["stopped"], total_seconds=time.time() - t_start)
    write_record(out, info)
    writer.close()
    if not r["stopped"]:
        (out / STATE_FILE).unlink(missing_ok=True)
        print(f"[sft] {label}: done in {info['total_seconds']:.0f} s -> {out / 'cold_start'}", file=sys.stderr)
    return out / "cold_start"
