"""FSDP2 (--fsdp, trainers/distributed.py) on CPU with gloo and a tiny random Qwen2.5-VL.

One pair of spawned processes does all the distributed work (importing transformers twice per
test would dominate the time) and writes what it measured; each test then checks one claim:
(a) one update sharded over 2 processes gives the single-process loss and gradients,
(b) a run stopped after 1 step and resumed from its sharded checkpoint equals an uninterrupted run,
(c) final_model is a plain Hugging Face folder that load_checkpoint / from_pretrained read, holding
    the trained weights.
"""

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainers import config, core, run_state
from trainers.config import GRPOArgs
from trainers.core import TrainSeq, structural_ids

WORLD = 2


def _argv(tiny_dir, runs, *extra):
    return ["--model", tiny_dir, "--runs-dir", str(runs), "--total-steps", "2", "--group-size", "2",
            "--max-new-tokens", "8", "--subagent-max-new-tokens", "6", "--max-turns", "2", "--eval-every", "0",
            "--checkpoint-every", "1", "--dataset-size", "60", "--no-progress",
            "--device", "cpu", "--fsdp", *extra]


def _seqs(policy, n=6):
    """A fixed batch of finished two-turn conversations of different lengths (one image each), with
    advantages of both signs and behaviour log-probs off the current ones (so the clip is active)."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        msgs = [{"role": "system", "content": "You answer."}, {"role": "user", "content": [
            {"type": "text", "text": f"<{i}.0 seconds>"},
            {"type": "image", "image": rng.integers(0, 255, (28, 28, 3), dtype=np.uint8)},
            {"type": "text", "text": "Question: which colour?" + " really" * i}]}]
        conv = policy.start(msgs)
        conv.append_completion(policy.completion_from_text(
            f'look{"!" * i}</think><tool_call>{{"name": "crop_video", "arguments": {{"start_time": {i}, '
            f'"end_time": {i + 2}}}}}</tool_call>'))
        conv = policy.extend(conv, [{"role": "user", "content": "<tool_response>\nred</tool_response>\n"}])
        conv.append_completion(policy.completion_from_text("red</think><answer>red</answer>"))
        conv.temperature = 0.7
        conv.logprobs = [float(-abs(x)) if g else 0.0 for x, g in
                         zip(rng.normal(2.0, 1.0, len(conv)), conv.generated_mask)]
        out.append(TrainSeq(conv, float(rng.normal()), "main" if i % 3 else "sub"))
    return out


def _update_args(**kw):
    return GRPOArgs(**{**dict(kl_coef=0.05, anchor_mode="logprob", anchor_lambda=0.3, max_grad_norm=1e9,
                              micro_batch_size=2), **kw})


class _KeepGrads:
    """An optimizer whose step leaves the gradients readable after the update."""

    def __init__(self, params):
        self.opt = torch.optim.SGD(params, lr=0.0)

    def zero_grad(self, set_to_none=True):
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self):
        pass


def _models(tiny_dir, args):
    """The policy (vision frozen) and a reference that differs from it (so the KL term has a gradient)."""
    policy = core.load_policy(tiny_dir, torch.device("cpu"))
    ref = __import__("copy").deepcopy(policy.model).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
            p.requires_grad_(False)
    core.prepare_model(policy.model, args)
    return policy, ref


def one_update(policy, ref, seqs, args, dist):
    model = policy.model
    params = [p for p in model.parameters() if p.requires_grad]
    upd = core.grpo_update(model, None, ref, policy, _KeepGrads(params), seqs, args, dist,
                           structural_ids(policy.tokenizer))
    return upd, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


# ------------------------------------------------------------------ the spawned processes
def _as_if_killed_after_step_1(src: Path, dst: Path) -> None:
    """What a run folder holds when its trainer died right after step 1's checkpoint."""
    import shutil

    keep = ("events.out.tfevents.", "args.json", "checkpoints", "step_000001.", "latest")
    shutil.copytree(src, dst, ignore=lambda d, names: [] if d.endswith(".dcp") else
                    [n for n in names if not n.startswith(keep)])
    (dst / "checkpoints" / "latest").write_text("step_000001.pt")
    first = json.loads((src / "history.json").read_text())[:1]
    (dst / "history.json").write_text(json.dumps(first))


def _worker(rank, world, init_file, tiny_dir, out):
    import torch.distributed as td

    from trainers import distributed, para_grpo

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    td.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    out = Path(out)
    try:
        dist = core.Dist(rank, world, rank)
        # (a) one update, each process half the batch; activation checkpointing on here only
        for dtype in ("fp32", "bf16"):
            args = _update_args(dtype=dtype, gradient_checkpointing=True)
            policy, ref = _models(tiny_dir, args)
            distributed.shard(policy.model, args)
            distributed.shard(ref, args)
            seqs = _seqs(policy)
            upd, grads = one_update(policy, ref, seqs[rank::world], args, dist)
            full = {n: distributed.full_tensor(g).detach().clone() for n, g in grads.items()}
            loss = torch.tensor([upd["loss"]], dtype=torch.float64)
            td.all_reduce(loss)
            with distributed.full_weights(policy.model):  # generation's view: whole weights, compute dtype
                dtypes = sorted({str(p.dtype) for p in policy.model.parameters()})
            local_shard = sum(p.to_local().numel() for p in policy.model.parameters())
            if rank == 0:
                torch.save({"loss": float(loss) / world, "grads": full, "grad_norm": upd["grad_norm"],
                            "dtypes_in_full_weights": dtypes, "local_numel": local_shard}, out / f"update_{dtype}.pt")
        # (b), (c): an uninterrupted 2-step run through the trainer; then a copy of its folder as a run
        # killed after step 1 (what it had written by then: the step-1 checkpoint), resumed to step 2
        for name in ("straight", "resumed"):
            if name == "resumed" and rank == 0:
                _as_if_killed_after_step_1(out / "runs" / "straight", out / "runs" / "resumed")
            td.barrier()
            extra = ["--run-name", name] + (["--resume"] if name == "resumed" else [])
            result = core.train(config.parse_args(para_grpo.Args, _argv(tiny_dir, out / "runs", *extra)))
            sd = distributed.full_state_dict(result.policy.model)
            if rank == 0:
                (out / f"history_{name}.json").write_text(json.dumps(result.history))
                torch.save(sd, out / f"weights_{name}.pt")
        td.barrier()  # neither process tears down while the other still writes or communicates
    finally:
        td.destroy_process_group()
    # Leave without interpreter finalization: there, objects that still hold the destroyed gloo group (the
    # sharded modules' device meshes) were freed in whatever order, and in CI one process died of SIGABRT
    # ("terminate called without an active exception") after all of its work was done and written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.fixture(scope="module")
def spawned(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    torch.multiprocessing.spawn(_worker, args=(WORLD, str(out / "init"), tiny_dir, str(out)), nprocs=WORLD,
                                join=True)
    return out


# ------------------------------------------------------------------ (a) same loss and gradients
def test_sharded_update_equals_single_process(tiny_dir, spawned):
    args = _update_args()
    policy, ref = _models(tiny_dir, args)
    upd, grads = one_update(policy, ref, _seqs(policy), args, core.Dist())
    got = torch.load(spawned / "update_fp32.pt")
    assert got["loss"] == pytest.approx(upd["loss"], rel=1e-5, abs=1e-7)
    assert got["grad_norm"] == pytest.approx(upd["grad_norm"], rel=1e-4)
    assert got["grads"].keys() == grads.keys() and len(grads) > 10
    assert not any(".visual." in f".{n}" for n in grads)  # the frozen vision tower gets none, sharded or not
    for n, g in grads.items():
        torch.testing.assert_close(got["grads"][n], g, rtol=1e-4, atol=1e-6, msg=n)
    # each process holds about half the parameters; gathered for generation they are whole
    total = sum(p.numel() for p in policy.model.parameters())
    assert got["local_numel"] < 0.6 * total
    assert got["dtypes_in_full_weights"] == ["torch.float32"]
    # bf16 mixed precision: computed in bf16 (what generation sees), close to the fp32 loss
    bf = torch.load(spawned / "update_bf16.pt")
    assert bf["dtypes_in_full_weights"] == ["torch.bfloat16"]
    assert bf["loss"] == pytest.approx(upd["loss"], rel=0.05, abs=0.02) and bf["loss"] != got["loss"]


# ------------------------------------------------------------------ (b) resume equals uninterrupted
def test_resume_from_sharded_checkpoint_equals_uninterrupted_run(spawned):
    straight = json.loads((spawned / "history_straight.json").read_text())
    resumed = json.loads((spawned / "history_resumed.json").read_text())
    assert [h["step"] for h in straight] == [1, 2] and [h["step"] for h in resumed] == [2]
    for k, v in straight[1].items():
        if not k.startswith("perf/"):
            assert resumed[0][k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    a, b = torch.load(spawned / "weights_straight.pt"), torch.load(spawned / "weights_resumed.pt")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6, msg=k)
    # the checkpoints are sharded: one DCP file per process beside a small .pt that points to them
    ck = spawned / "runs" / "resumed" / "checkpoints"
    assert sorted(p.name for p in ck.glob("step_*")) == ["step_000001.dcp", "step_000001.pt", "step_000002.dcp",
                                                          "step_000002.pt"]
    assert len(list((ck / "step_000002.dcp").glob("*.distcp"))) == WORLD
    assert (ck / "step_000002.pt").stat().st_size < 100_000  # no weights in it


def test_a_sharded_checkpoint_without_its_folder_is_skipped(spawned, tmp_path):
    """A .pt whose DCP folder is gone or incomplete does not count: --resume takes the one before."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(spawned / "runs" / "resumed", run, ignore=shutil.ignore_patterns("run.lock"))
    ck = run / "checkpoints"
    victim = next((ck / "step_000002.dcp").glob("*.distcp"))
    victim.write_bytes(victim.read_bytes()[:10])
    path, state, skipped = run_state.find_resume_checkpoint(run)
    assert path.name == "step_000001.pt" and len(skipped) == 1 and "step_000002.dcp" in skipped[0]
    shutil.rmtree(ck / "step_000001.dcp")
    path, state, skipped = run_state.find_resume_checkpoint(run)
    assert path is None and "missing or was never completed" in skipped[1]


def test_a_sharded_checkpoint_is_read_as_data_only(spawned, tmp_path):
    """A DCP folder is checked against its manifest's sha256 before it is read, it is found beside its .pt
    whatever name the .pt records, and its metadata (a pickle in stock DCP) loads as data only: a planted
    one whose manifest was rewritten to match is refused, and nothing in it runs."""
    import pickle
    import shutil

    from trainers import distributed

    class Planted:
        def __reduce__(self):
            return open, (str(tmp_path / "ran"), "w")

    run = tmp_path / "run"
    shutil.copytree(spawned / "runs" / "resumed", run, ignore=shutil.ignore_patterns("run.lock"))
    ck = run / "checkpoints"
    metadata = ck / "step_000002.dcp" / ".metadata"
    planted = pickle.dumps(Planted())
    metadata.write_bytes(planted + b"\0" * (metadata.stat().st_size - len(planted)))  # same size: only sha256 tells
    path, state, skipped = run_state.find_resume_checkpoint(run)
    assert path.name == "step_000001.pt" and ".metadata does not match its sha256" in skipped[0]

    run_state.write_manifest(ck / "step_000002.dcp", {"step": 2})
    state = run_state.load_training_checkpoint(ck / "step_000002.pt")
    with pytest.raises(run_state.RunStateError, match=r"\.metadata is not a data-only checkpoint's metadata "
                                                       r"\(UnpicklingError: io.open is not part of"):
        distributed.load_checkpoint(state, ck / "step_000002.pt", None, None, 0)
    assert not (tmp_path / "ran").exists()

    state = torch.load(ck / "step_000001.pt", weights_only=True)
    torch.save({**state, "sharded": "../../elsewhere.dcp"}, ck / "step_000001.pt")
    with pytest.raises(run_state.RunStateError, match="names its sharded state '../../elsewhere.dcp', not "
                                                      "step_000001.dcp"):
        run_state.load_training_checkpoint(ck / "step_000001.pt")


def test_a_sharded_checkpoint_never_reads_a_data_file_outside_its_folder(spawned, tmp_path):
    """DCP opens each data file at the folder joined with the name its metadata records: a metadata (with a
    manifest rewritten to match) naming a file outside the folder is refused before anything is read."""
    import dataclasses
    import pickle
    import shutil

    from trainers import distributed

    run = tmp_path / "run"
    shutil.copytree(spawned / "runs" / "resumed", run, ignore=shutil.ignore_patterns("run.lock"))
    folder = run / "checkpoints" / "step_000002.dcp"
    metadata = distributed._read_metadata(folder / ".metadata")
    key = next(iter(metadata.storage_data))
    outside = "../../" + metadata.storage_data[key].relative_path
    metadata.storage_data[key] = dataclasses.replace(metadata.storage_data[key], relative_path=outside)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    run_state.write_manifest(folder, {"step": 2})
    state = run_state.load_training_checkpoint(run / "checkpoints" / "step_000002.pt")
    with pytest.raises(run_state.RunStateError, match=re.escape(f"names a data file {outside!r} that is not in its "
                                                                "folder")):
        distributed.load_checkpoint(state, run / "checkpoints" / "step_000002.pt", None, None, 0)


# ------------------------------------------------------------------ (c) final_model is a plain folder
def test_final_model_is_a_plain_folder_of_the_trained_weights(spawned):
    from transformers import AutoModelForImageTextToText

    from agents.lmm.tiny_qwen import load_checkpoint

    folder = spawned / "runs" / "resumed" / "final_model"
    assert run_state.final_model_problem(folder.parent, 2) is None  # complete, manifest, step 2
    model, tok, _ = load_checkpoint(str(folder))
    trained = torch.load(spawned / "weights_resumed.pt")
    sd = model.state_dict()
    for k, v in trained.items():
        torch.testing.assert_close(sd[k], v, rtol=0, atol=0, msg=k)
    stock = AutoModelForImageTextToText.from_pretrained(str(folder), local_files_only=True)
    assert all(torch.equal(stock.state_dict()[k], v) for k, v in sd.items())
    straight, _, _ = load_checkpoint(str(spawned / "runs" / "straight" / "final_model"))
    for k, v in torch.load(spawned / "weights_straight.pt").items():
        torch.testing.assert_close(straight.state_dict()[k], v, rtol=0, atol=0, msg=k)

def test_resuming_a_sharded_run_without_fsdp_says_so(spawned, tiny_dir, tmp_path):
    import shutil

    from trainers import para_grpo

    shutil.copytree(spawned / "runs" / "resumed", tmp_path / "run", ignore=shutil.ignore_patterns("run.lock"))
    argv = [a for a in _argv(tiny_dir, tmp_path, "--run-name", "run", "--resume", "--total-steps", "3") if a != "--fsdp"]
    with pytest.raises(SystemExit, match="saved with --fsdp; resume it with --fsdp"):
        para_grpo.main(argv)


# ------------------------------------------------------------------ the GPU benchmark's code path, on CPU
def test_scale_benchmark_runs_with_the_tiny_shape(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("scale_fsdp", Path(__file__).resolve().parents[1] / "benchmarks"
                                                  / "scale_fsdp.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.main(["--tiny", "--prompts", "1", "--steps", "2", "--out", str(tmp_path)])
    [row] = res["rows"]
    saved = json.loads((tmp_path / "scale_fsdp.json").read_text())
    assert saved["rows"] == [row] and saved["meta"]["params"] == res["meta"]["params"] > 1e6
    assert row["sequences_per_step"] == 4 and row["step_seconds"] > 0 and row["generated_tokens_per_second"] > 0
    assert row["mfu"] is None  # no peak FLOP/s is defined for a CPU
    assert "| 1 | 4 |" in (tmp_path / "scale_fsdp.md").read_text()
    assert not torch.distributed.is_initialized()  # its one-process group is gone again
