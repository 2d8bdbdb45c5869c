"""Run folders that survive being killed at any instant, and checkpoint folders that are whole or absent.

A run folder ``<runs_dir>/<run name>/`` holds:

    run.lock               the one-writer lock (fcntl.flock; the holder's pid/host/start written in it)
    args.json              the arguments of the latest start
    hardware.json          each start's step and accelerator (a resumed run may have moved)
    events.out.tfevents.*  TensorBoard
    checkpoints/step_NNNNNN.pt, checkpoints/latest
    history.json           per-step metrics up to the newest checkpoint (and, at the end, of the run)
    final_model/           a Hub-layout model folder with checkpoint_manifest.json

The rules, and why:
- Every file is written under a name unique to the writing process (``.NAME.tmp-<pid>-<random>``),
  fsynced and renamed into place, then the folder is fsynced: a kill leaves the old file or the new
  one, never a torn one, and concurrent writers never collide on a shared temp name.
- A model folder (``final_model``) is staged in a hidden sibling folder, checked complete, given a
  manifest (sizes and sha256 of every file), fsynced and renamed into place: it is whole or absent.
- One writer per run folder: ``run.lock`` is flocked for the run's whole life. The kernel drops the
  lock when the process dies, so a SIGKILLed run never leaves a stale lock behind.
- ``--resume`` scans ``checkpoints/`` (it does not trust ``latest``) and takes the newest checkpoint
  that loads, saying which and why it skipped the others. Checkpoints present but none loadable, a
  finished run's files without any checkpoint, or a checkpoint or final_model beyond
  ``--total-steps`` stop with a clear error before anything is written. A finished run whose ``final_model`` is missing,
  incomplete or of another step gets it rewritten from its last checkpoint, with no training.
- Without ``--resume``, an explicit ``--run-name`` whose folder holds a run is refused (never mixed
  into); the default name moves aside to ``<name>__<unix time>``.
- Problems surface as ``RunStateError``: one line naming the path and the problem. The command-line
  entry points print it without a traceback and exit non-zero.

Tests kill the process at chosen points through ``PARAVT_TEST_KILL_AT=<point>[:<step>]`` (see
``kill_point``; points: ``step`` after a step's logging, ``ckpt_write`` / ``history_write`` /
``latest_write`` with the temp file half written, ``ckpt_saved`` after the checkpoint's rename,
``model_dir_write`` inside a model folder's staging, ``model_dir_swap`` with the old folder moved
aside); nothing else reads it.

Only the standard library is imported at module level (torch only inside the checkpoint
functions), so this module is cheap to import.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Callable

# Atomic files, staged model folders, manifests and the kill hook live below the agents, which save models
# with them too (agents/checkpoint_io.py); re-exported here, where the run folders use them.
from agents.checkpoint_io import (KILL_ENV, MANIFEST_NAME, _TEMP_RE, RunStateError,  # noqa: F401
                                  _reason, atomic_write, atomic_write_json, fsync_dir, kill_point, manifest_problem,
                                  model_dir_problem, read_manifest, resolve_model_dir, staged_dir, write_manifest)

LOCK_NAME = "run.lock"
CHECKPOINT_DIR = "checkpoints"
FINAL_MODEL = "final_model"
_CKPT_RE = re.compile(r"^step_(\d+)\.pt$")
_CKPT_KEYS = ("step", "model", "optimizer", "rng")
# what each field holds (a sharded checkpoint's model and optimizer are the word "sharded"): a checkpoint from
# elsewhere with anything else is refused by name here, not met as a traceback halfway through a resume
_CKPT_KINDS = {"step": (int, "a whole number"), "model": (dict, "a mapping"), "optimizer": (dict, "a mapping"),
               "rng": (dict, "a mapping"), "args": (dict, "a mapping"), "history": (list, "a list"),
               "bad_videos": (list, "a list")}


class RunLockedError(RunStateError):
    """Another live process holds the run folder's lock."""


# ============================================================================================
# leftovers of killed writers
# ============================================================================================
def clean_leftovers(run_dir: Path) -> list[str]:
    """Remove temp files and staged folders that killed writers left in ``run_dir`` (call it only
    while holding the run's lock: then no live writer owns them)."""
    removed = []
    for folder in (run_dir, run_dir / CHECKPOINT_DIR):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if _TEMP_RE.match(p.name):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        p.unlink()
                removed.append(str(p.relative_to(run_dir)))
    return removed


# ============================================================================================
# the lock
# ============================================================================================
class RunLock:
    """An exclusive flock on ``<run_dir>/run.lock``, held until ``release()`` (or the end of a ``with``
    block) or process death. The lock file is never replaced or deleted (a lock lives on the file's inode).
    Taken while another process holds it: RunLockedError, or with ``wait`` a wait until it is let go."""

    def __init__(self, run_dir: str | os.PathLike, wait: bool = False):
        import fcntl

        self.path = Path(run_dir) / LOCK_NAME
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunStateError(f"cannot write in {self.path.parent}: {_reason(exc)}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = _describe_holder(os.pread(fd, 4096, 0))
            os.close(fd)
            raise RunLockedError(f"{self.path.parent} is in use by another trainer ({holder}); wait for it to "
                                 "finish or stop it, or choose another --run-name") from None
        except OSError as exc:
            os.close(fd)
            raise RunStateError(f"cannot lock {self.path}: {_reason(exc)}") from exc
        self.fd: int | None = fd
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": " ".join(sys.argv)[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _describe_holder(raw: bytes) -> str:
    try:
        h = json.loads(raw)
        return f"pid {h['pid']} on {h['host']}, started {h['started']}: {h['argv']}"
    except (ValueError, KeyError, TypeError):
        return "holder details not yet written"


# ============================================================================================
# training checkpoints
# ============================================================================================
def checkpoint_files(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every ``checkpoints/step_N.pt``, newest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CKPT_RE.match(p.name)) and p.is_file()]
    return sorted(found, reverse=True)


def checkpoint_path(run_dir: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` lives (it exists only whole: written under a temp name, then renamed)."""
    return Path(run_dir) / CHECKPOINT_DIR / f"step_{step:06d}.pt"


def save_training_checkpoint(run_dir: Path, step: int, state: dict, history: list) -> Path:
    """``checkpoints/step_N.pt``, then ``history.json``, then ``latest``, each written atomically
    (a kill between them leaves a complete checkpoint that ``--resume`` finds by scanning)."""
    import torch

    folder = Path(run_dir) / CHECKPOINT_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunStateError(f"cannot write {folder}: {_reason(exc)}") from exc
    path = checkpoint_path(run_dir, step)
    atomic_write(path, lambda f: torch.save(state, f), kill="ckpt_write", step=step)
    kill_point("ckpt_saved", step)
    atomic_write_json(Path(run_dir) / "history.json", history, kill="history_write", step=step)
    atomic_write(folder / "latest", path.name, kill="latest_write", step=step)
    return path


def load_data_only(path: Path):
    """``torch.load`` of a file that may hold tensors, numbers, strings and containers of them only.
    Checkpoints come from other people's run folders: a pickled object of any other kind would run
    code on load, so it is refused (RunStateError naming the file), never run."""
    import pickle

    import torch

    try:
        if path.stat().st_size == 0:
            raise RunStateError(f"{path} is empty (0 bytes)")
        return torch.load(path, map_location="cpu", weights_only=True)
    except RunStateError:
        raise
    except pickle.UnpicklingError as exc:
        if not str(exc).startswith("Weights only load failed"):
            raise RunStateError(f"{path} is truncated or corrupt (UnpicklingError: {str(exc)[:160]})") from exc
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = f"it refers to {found.group(1)}" if found else "it holds more than tensors and plain data"
        raise RunStateError(f"{path} is not a data-only checkpoint ({what}); it was not loaded and nothing "
                            "in it ran") from exc
    except Exception as exc:  # torch reports damage as RuntimeError, EOFError, ...
        first = (str(exc).splitlines() or [""])[0][:160]
        raise RunStateError(f"{path} is truncated or corrupt ({type(exc).__name__}: {first})") from exc


def sharded_folder(path: Path, ck: dict) -> Path | None:
    """The DCP folder a ``--fsdp`` checkpoint's model and optimizer live in (None when it has none):
    always its own ``step_N.dcp`` sibling, whatever name the file records."""
    if ck.get("sharded") is None:
        return None
    folder = path.with_suffix(".dcp")
    if ck["sharded"] != folder.name:
        raise RunStateError(f"{path} names its sharded state {str(ck['sharded'])[:80]!r}, not {folder.name}")
    return folder


def load_training_checkpoint(path: Path) -> dict:
    """The checkpoint dict, or RunStateError saying why it does not load. A sharded checkpoint's
    folder is checked whole against its manifest (sizes and sha256) before anything reads it."""
    ck = load_data_only(path)
    missing = [k for k in _CKPT_KEYS if not isinstance(ck, dict) or k not in ck]
    if missing:
        raise RunStateError(f"{path} is not a training checkpoint (no {', '.join(missing)})")
    for key, (kind, what) in _CKPT_KINDS.items():
        value = ck.get(key)
        optional = value is None and key not in _CKPT_KEYS
        sharded = ck.get("sharded") is not None and key in ("model", "optimizer")
        if optional or sharded:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise RunStateError(f"{path} is not a training checkpoint (its {key} is a {type(value).__name__}, not "
                                f"{what})")
    if ck["step"] < 0:
        raise RunStateError(f"{path} is not a training checkpoint (its step is {ck['step']})")
    if not all(isinstance(h, dict) for h in ck.get("history") or []):
        raise RunStateError(f"{path} is not a training checkpoint (its history holds other than records)")
    if [type(n) for n in ck.get("bad_videos") or [0, 0]] != [int, int]:
        raise RunStateError(f"{path} is not a training checkpoint (its bad_videos is not two whole numbers)")
    m = _CKPT_RE.match(path.name)
    if m and int(ck["step"]) != int(m.group(1)):
        raise RunStateError(f"{path} holds step {ck['step']}, not the step its name says")
    folder = sharded_folder(path, ck)
    if folder is not None:
        problem = (manifest_problem(folder, deep=True) if (folder / MANIFEST_NAME).is_file()
                   else "the folder is missing or was never completed")
        if problem:
            raise RunStateError(f"{path}: its sharded state {folder.name}: {problem}")
    return ck


def find_resume_checkpoint(run_dir: Path) -> tuple[Path | None, dict | None, list[str]]:
    """The newest checkpoint that loads (path, loaded dict) and one line per newer one skipped."""
    skipped = []
    for _, path in checkpoint_files(run_dir):
        try:
            return path, load_training_checkpoint(path), skipped
        except RunStateError as exc:
            skipped.append(str(exc))
    return None, None, skipped


# ============================================================================================
# opening a run: folder, lock, resume decision
# ============================================================================================
def has_run_state(run_dir: Path) -> bool:
    """Anything in the folder besides the lock file and dead writers' temp files."""
    return run_dir.is_dir() and any(p.name != LOCK_NAME and not _TEMP_RE.match(p.name) for p in run_dir.iterdir())


def _describe(run_dir: Path) -> str:
    ckpts = checkpoint_files(run_dir)
    if ckpts:
        return f"checkpoints up to step {ckpts[0][0]}"
    names = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME and not _TEMP_RE.match(p.name))
    return "files " + ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


def check_name(flag: str, name: str) -> None:
    """A run or experiment name is one folder name inside the runs folder: a separator, ``..`` or an
    absolute path would put the run (and its lock file) elsewhere on the disk. RunStateError otherwise."""
    seps = {os.sep, os.altsep or os.sep, "/"}
    problem = ("contains a path separator" if any(c in name for c in seps) else
               "is '.' or '..'" if name in (".", "..") else
               "contains a NUL byte" if "\0" in name else None)
    if problem:
        raise RunStateError(f"{flag} {name[:80]!r} {problem}: give one folder name, such as my_run")


def _mkdir(path: Path, exist_ok: bool = True) -> None:
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except FileExistsError:
        raise
    except OSError as exc:
        raise RunStateError(f"cannot create run folder {path}: {_reason(exc)}") from exc


def _claim_fresh_dir(runs_dir: Path, name: str) -> Path:
    """``name``, or ``name__<unix time>[_k]`` when that holds a run: created here with an exclusive
    mkdir, so concurrent default-named runs never share a folder."""
    first = runs_dir / name
    if not has_run_state(first):
        _mkdir(first)
        return first
    stamp = int(time.time())
    for k in range(1, 1000):
        cand = runs_dir / (f"{name}__{stamp}" + (f"_{k}" if k > 1 else ""))
        try:
            _mkdir(cand, exist_ok=False)
            return cand
        except FileExistsError:
            continue
    raise RunStateError(f"cannot find a free run folder name for {runs_dir / name}")


def _newest_resumable(runs_dir: Path, name: str) -> Path | None:
    """Among ``name`` and ``name__*``, the folder whose newest checkpoint file is the most recent."""
    if not runs_dir.is_dir():
        return None
    best, best_t = None, -1.0
    for d in runs_dir.iterdir():
        if d.is_dir() and (d.name == name or (d.name.startswith(name) and d.name[len(name):].startswith("__"))):
            ck = checkpoint_files(d)
            if ck:
                t = ck[0][1].stat().st_mtime
                if t > best_t:
                    best, best_t = d, t
    return best


def _as_dict(args) -> dict:
    return dataclasses.asdict(args) if dataclasses.is_dataclass(args) else dict(vars(args))


@dataclasses.dataclass
class Run:
    """An open run: its folder, the held lock (rank 0), and where training starts."""
    dir: Path
    lock: RunLock | None = None
    checkpoint: Path | None = None   # the checkpoint to resume from, if any
    state: dict | None = None        # that checkpoint, already loaded (rank 0)

    def load_state(self) -> dict:
        """The resume checkpoint's dict (loaded once; released from this object after the call)."""
        state = self.state if self.state is not None else load_training_checkpoint(self.checkpoint)
        self.state = None
        return state

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def open_run(args, log: Callable[[str], None] | None = None) -> Run:
    """Resolve the run folder from ``args`` (runs_dir, run_name, exp_name, seed, resume, total_steps),
    take its lock, and decide where training starts; write args.json. Raises RunStateError, having
    changed nothing in the run's state, when the run cannot go ahead.

    - no --resume, no --run-name: ``<exp>__s<seed>``, or a time-suffixed sibling when that holds a run;
    - no --resume, --run-name of a folder holding a run: refused (continue with --resume, or rename);
    - --resume: the newest loadable checkpoint of ``--run-name`` (or of the newest ``<exp>__s<seed>*``
      run); none yet in an empty or unstarted folder: step 0; checkpoints but none loadable, or a
      finished run's files without checkpoints, or a checkpoint or final_model beyond --total-steps: refused."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    runs_dir = Path(args.runs_dir)
    name = args.run_name or f"{args.exp_name}__s{args.seed}"
    if args.resume:
        run_dir = (None if args.run_name else _newest_resumable(runs_dir, name)) or runs_dir / name
        _mkdir(run_dir)
    elif args.run_name:
        run_dir = runs_dir / name
        _mkdir(run_dir)
    else:
        run_dir = _claim_fresh_dir(runs_dir, name)
    lock = RunLock(run_dir)
    try:
        run = _decide_start(args, run_dir, lock, log)
        clean_leftovers(run_dir)
        atomic_write_json(run_dir / "args.json", _as_dict(args))
        return run
    except BaseException:
        lock.release()
        raise


def _decide_start(args, run_dir: Path, lock: RunLock, log) -> Run:
    if not args.resume:
        if has_run_state(run_dir):
            raise RunStateError(f"{run_dir} already holds a run ({_describe(run_dir)}); continue it with --resume, "
                                "or choose a new --run-name")
        return Run(run_dir, lock)
    path, state, skipped = find_resume_checkpoint(run_dir)
    for line in skipped:
        log(f"--resume: skipping {line}")
    if path is None:
        if skipped:
            raise RunStateError(f"--resume: none of the {len(skipped)} checkpoints in {run_dir / CHECKPOINT_DIR} "
                                "loads (see above); nothing was changed. Restore a good checkpoint there, or start "
                                "a new --run-name")
        finished = [n for n in ("history.json", FINAL_MODEL) if (run_dir / n).exists()]
        if finished:
            raise RunStateError(f"--resume: {run_dir} holds {' and '.join(finished)} but no checkpoint to resume "
                                "from; nothing was changed. Restore its checkpoints, or start a new --run-name")
        log(f"--resume: no checkpoint in {run_dir} yet; starting from step 0")
        return Run(run_dir, lock)
    step = int(state["step"])
    if step > args.total_steps:
        raise RunStateError(f"--resume: {path} is at step {step}, beyond --total-steps {args.total_steps}; pass "
                            f"--total-steps {step} or more to continue this run, or start a new --run-name")
    done = _final_model_step(run_dir)
    if done is not None and done > args.total_steps:
        raise RunStateError(f"--resume: {run_dir / FINAL_MODEL} holds step {done}, beyond --total-steps "
                            f"{args.total_steps}; pass --total-steps {done} or more, or start a new --run-name")
    log(f"--resume: continuing {run_dir} from {path.name} (step {step} of {args.total_steps})")
    saved, now = state.get("args") or {}, _as_dict(args)
    changed = [f"{k} {saved[k]!r} -> {v!r}" for k, v in now.items()
               if k in saved and saved[k] != v and k not in ("resume", "total_steps", "progress", "runs_dir")]
    if changed:
        log("--resume: settings differ from the checkpoint's, so the run will not match an uninterrupted one: "
            + ", ".join(changed))
    return Run(run_dir, lock, path, state)


def _final_model_step(run_dir: Path) -> int | None:
    """The step a complete final_model records (None: absent, incomplete or without a step)."""
    folder = Path(run_dir) / FINAL_MODEL
    try:
        m = read_manifest(folder)
    except RunStateError:
        return None
    step = (m or {}).get("info", {}).get("step")
    return step if isinstance(step, int) and manifest_problem(folder) is None else None


def final_model_problem(run_dir: Path, step: int) -> str | None:
    """Why ``final_model`` is not the complete model of ``step`` (None when it is)."""
    folder = Path(run_dir) / FINAL_MODEL
    if not folder.is_dir():
        return "it is missing"
    try:
        m = read_manifest(folder)
    except RunStateError as exc:
        return str(exc)
    if m is None:
        return f"it has no {MANIFEST_NAME} (an interrupted or old-style write)"
    problem = manifest_problem(folder, deep=True)
    if problem:
        return problem
    if m.get("info", {}).get("step") != step:
        return f"it holds step {m.get('info', {}).get('step')}, not {step}"
    return None
