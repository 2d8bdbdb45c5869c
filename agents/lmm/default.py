"""The default tiny-LMM checkpoints: shipped in the repo if present, else built on first use
(no download is possible here).

    from agents.lmm.default import default_checkpoint
    path = default_checkpoint("strong")      # cold-start checkpoint directory (TransformersPolicy(path))

Lookup order for ``default_checkpoint(prior)`` (no build overrides given):
1. a checkpoint SHIPPED in the repo: ``agents/lmm/checkpoints/tiny-<prior>/cold_start``, the end of a
   chain of ``trainers/sft.py`` builds, mostly on one GPU (``benchmarks/cold_start_lineage/README.md``
   lists the last steps); 7.8 MB of weights each (8 layers), with the build record ``sft_args.json`` inside
   ``cold_start/`` (its ``parent`` chain holds every build it continued), so evaluation recovers the
   world settings: 56x56 frames, crop size, K).
   ``PARAVT_NO_SHIPPED=1`` skips it.
2. the cache ``$PARAVT_CACHE`` or ``~/.cache/paravt-gym/tiny-lmm-v<BUILD_VERSION>-<prior>``;
3. otherwise the CPU build (``trainers/sft.py``, preset ``cpu``) runs into the cache; later calls
   return the cached directory at once. It is a small demo build: too short to learn to see (the
   seeing model needs the GPU preset).
With build ``overrides`` (keyword arguments of ``trainers/sft.py``'s ``Args``) the shipped
checkpoint is ignored and the build is cached under a name that spells the overrides.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

PRIORS = ("strong", "weak")
BUILD_VERSION = 4  # bump when the build recipe changes, so stale caches are not reused
SHIPPED_ROOT = Path(__file__).resolve().parent / "checkpoints"


def shipped_checkpoint(prior: str) -> Path | None:
    """``agents/lmm/checkpoints/tiny-<prior>/cold_start`` if it holds a checkpoint, else None."""
    ckpt = SHIPPED_ROOT / f"tiny-{prior}" / "cold_start"
    return ckpt if (ckpt / "config.json").is_file() else None


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir or os.environ.get("PARAVT_CACHE") or Path.home() / ".cache" / "paravt-gym")


def _sft_module():
    spec = importlib.util.spec_from_file_location(
        "paravt_trainers_sft", Path(__file__).resolve().parents[2] / "trainers" / "sft.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def default_checkpoint(prior: str = "strong", cache_dir: str | None = None, progress: bool = True,
                       **overrides) -> Path:
    """Cold-start checkpoint directory of the tiny LMM with a ``prior`` ("strong"/"weak") tool prior:
    the one shipped in ``agents/lmm/checkpoints/tiny-<prior>/cold_start`` if present (and no
    ``overrides``), else the cached build, else built with ``trainers/sft.py`` (defaults +
    ``overrides``) into the cache on first use."""
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
    if not overrides and not os.environ.get("PARAVT_NO_SHIPPED"):
        shipped = shipped_checkpoint(prior)
        if shipped is not None:
            return shipped
    root = cache_root(cache_dir) / f"tiny-lmm-v{BUILD_VERSION}-{prior}"
    if overrides:
        root = root.with_name(root.name + "-" + "-".join(f"{k}={v}" for k, v in sorted(overrides.items())))
    ckpt = root / "cold_start"
    if (ckpt / "config.json").is_file() and (root / "sft_args.json").is_file():
        return ckpt
    sft = _sft_module()
    tmp = root.with_name(root.name + f".building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    args = sft.Args(tool_prior=prior, out=str(tmp), runs_dir=str(cache_root(cache_dir) / "runs"),
                    progress=progress, exp_name="default", **overrides)
    if not args.corpus_dir:  # the pre-rendered corpus is cached next to the checkpoints
        args.corpus_dir = str(cache_root(cache_dir) / "corpus" / sft.data_key(args))
    if progress:
        print(f"[paravt-gym] building the default {prior}-prior tiny LMM in {root} (first use only)",
              file=sys.stderr)
    sft.main(args)
    if root.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, root)
    return ckpt


def checkpoint_info(path: str | os.PathLike) -> dict:
    """The build record (sft_args.json) next to a checkpoint built by trainers/sft.py ({} without one). One that is
    not a JSON object whose ``args`` (if any) is an object is a ValueError naming the file."""
    p = Path(path)
    for cand in (p / "sft_args.json", p.parent / "sft_args.json"):
        if cand.is_file():
            try:
                record = json.loads(cand.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ValueError(f"{cand}: not a build record ({type(exc).__name__}: {str(exc)[:120]})") from None
            if not isinstance(record, dict) or not isinstance(record.get("args", {}), dict):
                raise ValueError(f"{cand}: not a build record (expected an object with an 'args' object)")
            return record
    return {}
