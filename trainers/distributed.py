"""FSDP2 for the GRPO trainers (``--fsdp``): the policy and its frozen reference sharded over the
processes with ``torch.distributed.fsdp.fully_shard``, checkpoints saved and resumed sharded with
``torch.distributed.checkpoint`` (DCP), a plain ``save_pretrained`` folder at the end.

    torchrun --nproc_per_node=2 trainers/para_grpo.py --model DIR --fsdp --dtype bf16 --gradient-checkpointing

    init_process_group(device)   a one-process group when not launched by torchrun (FSDP needs one)
    shard(model, args)           fully_shard every transformer block (the model's _no_split_modules),
                                 then the root; bf16 MixedPrecisionPolicy under --dtype bf16
    full_weights(*models)        context: every shard gathered, nothing resharded until it ends
                                 (generation, see below)
    save_checkpoint / load_checkpoint   sharded model + optimizer state (DCP) behind a small .pt file
    save_final_model             the full weights gathered to rank 0, written with save_pretrained

Design choices, and why:
- What is sharded: each decoder layer and vision block is its own FSDP unit (all-gathered just
  before it runs, freed after); the embeddings, final norm, lm_head (tied to the embeddings in the
  tiny model) and the vision tower's stem stay in the root unit, which is never resharded after
  forward (its weights are needed again at once by the backward pass).
- Mixed precision (``--dtype bf16``): parameters are all-gathered and computed in bf16, gradients
  reduce-scattered in fp32, the sharded master weights and AdamW state stay fp32. The optimizer is
  built on the sharded parameters, so its state is sharded too.
- Activation checkpointing is the trainers' ``--gradient-checkpointing`` (transformers' own,
  non-reentrant): the recomputation of a block runs its FSDP hooks again, which re-gather its
  shard. Same gradients, less memory.
- Generation: the simplest correct approach. Under FSDP every forward pass of a block is a
  collective, and ranks sample different numbers of tokens (sequences stop at different
  lengths), so sampling through the sharded model would deadlock. ``full_weights`` all-gathers
  every unit once and turns resharding off; rollouts and evaluation then run on the whole model
  with no collective at all, as many forward passes as each rank needs; the shards come back when
  the block ends. Memory: the whole policy in the compute dtype on every GPU during rollouts (a
  7B model in bf16 is ~15 GB; the reference stays sharded); the update keeps the sharded footprint.
- Checkpoints: ``checkpoints/step_N.dcp/`` holds the DCP files (one per rank plus ``.metadata``)
  and a manifest; it is staged in a hidden folder and renamed into place whole (run_state's
  ``staged_dir``). Only then does rank 0 write ``checkpoints/step_N.pt``, a small file with the
  step, every rank's RNG state, the history and a pointer to the folder: the same file ``--resume``
  already scans for, so a checkpoint is complete or ignored (a .pt whose folder is missing or
  incomplete against its manifest is skipped by ``run_state.load_training_checkpoint``). DCP can
  reshard on load, so another process count should resume too (untested here; such a run then
  differs from an uninterrupted one anyway, since each process draws its own prompts).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
from pathlib import Path

import torch
import torch.distributed as td

from trainers import run_state

SHARDED_SUFFIX = ".dcp"


# ============================================================================================
# process group and sharding
# ============================================================================================
def init_process_group(device: torch.device) -> None:
    """FSDP needs a process group even on one process: make a one-rank group (an in-memory store)
    when torchrun did not start one."""
    if td.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    td.init_process_group(backend, store=td.HashStore(), rank=0, world_size=1)


def _fsdp_api():
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    return FSDPModule, MixedPrecisionPolicy, fully_shard


def shard(model: torch.nn.Module, args) -> torch.nn.Module:
    """Shard `model` in place over every process of the default group: each block named in the
    model's ``_no_split_modules`` (decoder layers, vision blocks) is one FSDP unit, the rest the
    root unit. ``args.dtype == "bf16"`` gathers and computes in bf16 (gradients reduced in fp32).
    Call after freezing parameters and enabling gradient checkpointing, before building the optimizer."""
    _, MixedPrecisionPolicy, fully_shard = _fsdp_api()
    if args.dtype == "bf16":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        mp = MixedPrecisionPolicy()
    block_names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in block_names]
    if not blocks:
        raise ValueError(f"--fsdp: {type(model).__name__} names no transformer blocks (_no_split_modules), "
                         "so there is nothing to shard block by block")
    for block in blocks:
        fully_shard(block, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mp_policy=mp, reshard_after_forward=False)
    return model


def is_sharded(model) -> bool:
    FSDPModule, _, _ = _fsdp_api()
    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def full_weights(*models):
    """Every FSDP unit of `models` gathered (in the compute dtype) for the whole block, with no
    resharding after forward: any number of forward passes per process, no collectives inside
    (generation). Entering and leaving are collectives: every process must do both. Models that
    are not sharded (or None) pass through untouched."""
    FSDPModule, _, _ = _fsdp_api()
    roots = [m for m in models if m is not None and isinstance(m, FSDPModule)]
    units = [u for m in roots for u in m.modules() if isinstance(u, FSDPModule)]
    for m in roots:
        # FSDP decides which unit is the root at the first forward pass through it; generate may run
        # the vision tower's blocks before the whole model's forward, so decide it now (no-op later).
        m._get_fsdp_state()._lazy_init()
    for u in units:
        u.set_reshard_after_forward(False, recurse=False)
        u.unshard()
    try:
        yield
    finally:
        for m in roots:  # back to shard()'s setting: blocks reshard after forward, the root does not
            m.set_reshard_after_forward(True)
            m.set_reshard_after_forward(False, recurse=False)
        for u in units:
            u.reshard()


def full_tensor(t):
    """A DTensor's whole value (a collective); anything else as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


# ============================================================================================
# checkpoints
# ============================================================================================
def _state_dict_api():
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                         set_state_dict)

    return StateDictOptions, get_model_state_dict, get_state_dict, set_state_dict


def save_checkpoint(run_dir: Path, step: int, model, optimizer, args, history, rng: dict, main: bool,
                    bad_videos=None) -> Path:
    """Every process: its shards of model + optimizer into ``checkpoints/step_N.dcp/`` (staged, then
    renamed whole); rank 0 then writes ``checkpoints/step_N.pt`` (step, every rank's RNG state,
    history, args, the folder's name, the run's [video draws, skipped]), the file that makes the checkpoint
    count. Returns the .pt path."""
    import dataclasses

    import torch.distributed.checkpoint as dcp

    _, _, get_state_dict, _ = _state_dict_api()
    folder = Path(run_dir) / run_state.CHECKPOINT_DIR
    final = folder / f"step_{step:06d}{SHARDED_SUFFIX}"
    rngs = [None] * td.get_world_size()
    td.all_gather_object(rngs, rng)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    if main:
        folder.mkdir(parents=True, exist_ok=True)
    with run_state.staged_dir(final) if main else contextlib.nullcontext("") as staged:
        where = [str(staged)]
        td.broadcast_object_list(where, src=0)  # rank 0's hidden staging folder, for every rank
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=where[0])
        td.barrier()  # every rank's files are in the staged folder before it is sealed
        if main:
            run_state.write_manifest(where[0], {"step": step, "world_size": td.get_world_size()})
        # leaving the block on rank 0 fsyncs the folder and renames it into place
    path = folder / f"step_{step:06d}.pt"
    if main:
        state = {"step": step, "model": "sharded", "optimizer": "sharded", "sharded": final.name,
                 "rng": rngs[0], "rng_per_rank": rngs, "args": dataclasses.asdict(args), "history": history,
                 **({"bad_videos": list(bad_videos)} if bad_videos is not None else {})}
        run_state.save_training_checkpoint(run_dir, step, state, history)
    td.barrier()  # nobody runs ahead (and possibly dies) before the checkpoint counts
    return path


_METADATA_GLOBALS = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
                     ("torch.distributed.checkpoint.filesystem", "_StorageInfo")}


class _MetadataUnpickler(pickle.Unpickler):
    """Stock DCP unpickles ``.metadata`` with the full pickle, which runs whatever code a planted
    file holds: here it may name DCP's own record classes, dtypes, sizes and paths only."""

    def find_class(self, module, name):
        obj = getattr(sys.modules.get(module), name, None) if "." not in name else None
        if ((module, name) in _METADATA_GLOBALS or (module == "torch" and isinstance(obj, torch.dtype))
                or (module == "torch.distributed.checkpoint.metadata" and isinstance(obj, type)
                    and obj.__module__ == module)):
            return obj
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")


def _read_metadata(path):
    import torch.distributed.checkpoint as dcp

    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise run_state.RunStateError(f"{path} is not a data-only checkpoint's metadata "
                                      f"({type(exc).__name__}: {str(exc)[:160]})") from exc
    if not isinstance(metadata, dcp.Metadata):
        raise run_state.RunStateError(f"{path} holds no checkpoint metadata")
    # DCP opens each data file at the folder joined with the name recorded here: a name with a separator or
    # '..' would read a file outside the folder into the model
    storage = metadata.storage_data
    for info in storage.values() if isinstance(storage, dict) else [None]:
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name or "\\" in name:
            raise run_state.RunStateError(f"{path} names a data file {str(name)[:80]!r} that is not in its folder")
    return metadata


def _data_only_reader_and_planner(folder: Path):
    """A DCP reader and planner that read plain data only: the metadata as above, non-tensor values
    with ``weights_only`` (stock DCP loads them with the full pickle too)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class Reader(dcp.FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            metadata = _read_metadata(self._get_metadata_path(kwargs.get("rank")))
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = dcp.metadata.StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item, value: io.BytesIO) -> None:
            raw = value.read()
            torch.load(io.BytesIO(raw), weights_only=True)  # raises on anything but plain data
            super().load_bytes(read_item, io.BytesIO(raw))

    return Reader(str(folder)), Planner()


def load_checkpoint(ck: dict, ck_path: Path, model, optimizer, rank: int) -> dict:
    """Load the sharded model + optimizer state that the .pt `ck` (read from `ck_path`) points to,
    whatever world size saved it; returns this rank's RNG state to restore. The folder was checked
    against its manifest when the .pt was loaded; here its files are read as data only."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    _, _, get_state_dict, set_state_dict = _state_dict_api()
    folder = run_state.sharded_folder(Path(ck_path), ck)
    _read_metadata(folder / ".metadata")  # a refused file stops here, before DCP logs its own tracebacks
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optimizer": optim_sd}
    reader, planner = _data_only_reader_and_planner(folder)
    try:
        dcp.load(state, storage_reader=reader, planner=planner)
    except CheckpointException as exc:
        errors = [e[0] if isinstance(e, tuple) else e for e in exc.failures.values()]
        why = "; ".join(f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[-1][:200]}" for e in errors)
        raise run_state.RunStateError(f"{folder} does not load as plain data ({why})") from exc
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    rngs = ck.get("rng_per_rank") or []
    return rngs[rank] if rank < len(rngs) and len(rngs) == td.get_world_size() else ck["rng"]


def full_state_dict(model) -> dict:
    """The whole model's state dict on CPU, on rank 0 (empty elsewhere). A collective."""
    StateDictOptions, get_model_state_dict, _, _ = _state_dict_api()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


class _WithStateDict:
    """A model whose save_pretrained writes a given state dict: the sharded module itself holds
    only this rank's shards."""

    def __init__(self, model, state_dict):
        self._model, self._sd = model, state_dict

    def save_pretrained(self, path, **kw):
        return self._model.save_pretrained(path, state_dict=self._sd, **kw)


def save_final_model(path: Path, model, policy, info: dict, main: bool, build_record: dict | None = None) -> None:
    """Gather the full weights (every process) and write a plain Hugging Face folder on rank 0
    through agents.lmm.tiny_qwen.save_checkpoint (staged, manifest, whole or absent)."""
    sd = full_state_dict(model)
    if main:
        from agents.lmm.tiny_qwen import save_checkpoint

        save_checkpoint(str(path), _WithStateDict(model, sd), policy.tokenizer, policy.image_processor, info=info,
                        build_record=build_record)
    td.barrier()

