"""The default tiny-LMM checkpoints, built on first use (no download is possible here).

    from agents.lmm.default import default_checkpoint
    path = default_checkpoint("strong")      # cold-start checkpoint directory (TransformersPolicy(path))

The first call for a prior runs the two-stage SFT build (``trainers/sft.py`` with its defaults,
about 5-10 minutes on a 2-core CPU) and caches the result under ``$PARAVT_CACHE`` or
``~/.cache/paravt-gym/``; later calls return the cached directory at once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

PRIORS = ("strong", "weak")
BUILD_VERSION = 1  # bump when the build recipe changes, so stale caches are not reused


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
    """Cold-start checkpoint directory of the tiny LMM with a ``prior`` ("strong"/"weak") tool prior,
    building it with ``trainers/sft.py`` (defaults + ``overrides``) on first use."""
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
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
    """The build record (sft_args.json) next to a checkpoint built by trainers/sft.py."""
    p = Path(path)
    for cand in (p / "sft_args.json", p.parent / "sft_args.json"):
        if cand.is_file():
            return json.loads(cand.read_text())
    return {}
