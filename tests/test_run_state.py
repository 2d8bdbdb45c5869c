"""Runs that survive being killed (trainers/run_state.py and its use in trainers/core.py, sweep.py,
agents/lmm/tiny_qwen.py).

The kills are real: a subprocess SIGKILLs itself at a chosen point (PARAVT_TEST_KILL_AT=<point>[:<step>],
a hook in run_state), or a lock-holding process is SIGKILLed by the test. Each resumed run is then
compared with an uninterrupted one: same weights bit for bit, same metrics, every step once in
history.json and in TensorBoard.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainers import run_state
from trainers.run_state import RunLock, RunLockedError, RunStateError

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "agents" / "lmm" / "checkpoints" / "tiny-strong" / "cold_start"
# Smallest settings: 4 steps of 1 prompt x 2 rollouts, a checkpoint every 2 steps, no evaluation.
TINY = ["--model", str(MODEL), "--total-steps", "4", "--checkpoint-every", "2", "--prompts-per-step", "1",
        "--group-size", "2", "--max-new-tokens", "8", "--subagent-max-new-tokens", "6", "--max-turns", "2",
        "--eval-every", "0", "--subagent", "oracle", "--dataset-size", "60", "--no-progress"]


def argv(runs, *extra, name="run"):
    return [*TINY, "--runs-dir", str(runs), "--run-name", name, *extra]


def train_here(runs, *extra, name="run"):
    """The trainer in this process (the CLI path: parse_args, train, errors as SystemExit)."""
    from trainers import para_grpo

    return para_grpo.main(argv(runs, *extra, name=name))


def train_subprocess(runs, *extra, name="run", kill=None, script="trainers/para_grpo.py", args=None):
    env = {k: v for k, v in os.environ.items() if k != run_state.KILL_ENV}
    if kill:
        env[run_state.KILL_ENV] = kill
    return subprocess.run([sys.executable, script, *(args if args is not None else argv(runs, *extra, name=name))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def weights(folder):
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


def assert_same_weights(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert (wa[k] == wb[k]).all(), k


def metrics(history):
    return [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in history]


def tb_steps(run_dir, tag="train/reward"):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def snapshot(folder):
    """Every file under `folder` (but the lock file) with its bytes: to prove nothing was changed."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*"))
            if p.is_file() and p.name != run_state.LOCK_NAME}


def one_line_error(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert "Traceback" not in text, text[-2000:]
    return lines[-1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every resumed run must reproduce."""
    runs = tmp_path_factory.mktemp("reference")
    train_here(runs)
    run = runs / "run"
    return run, json.loads((run / "history.json").read_text())


def assert_reproduces(run, reference):
    ref_dir, ref_history = reference
    history = json.loads((run / "history.json").read_text())
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    assert metrics(history) == metrics(ref_history)
    assert tb_steps(run) == [1, 2, 3, 4]
    assert run_state.final_model_problem(run, 4) is None
    assert_same_weights(run / "final_model", ref_dir / "final_model")


# ============================================================================================
# atomic writes, concurrency, the lock (no training: fast)
# ============================================================================================
def test_kill_during_a_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "latest"
    target.write_text("step_000002.pt")
    code = ("import sys; from trainers import run_state; "
            "run_state.atomic_write(sys.argv[1], 'step_000004.pt' * 1000, kill='latest_write', step=4)")
    env = dict(os.environ, **{run_state.KILL_ENV: "latest_write:4"})
    p = subprocess.run([sys.executable, "-c", code, str(target)], cwd=ROOT, env=env, timeout=120)
    assert p.returncode == -signal.SIGKILL
    assert target.read_text() == "step_000002.pt"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "latest"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".latest.tmp-")  # the half-written temp file
    assert run_state.clean_leftovers(tmp_path) == leftovers and [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_forty_processes_saving_into_one_folder_all_succeed(tmp_path):
    """The old shared temp name made 17-22 of 40 concurrent saves fail with FileNotFoundError."""
    go = tmp_path / "go"
    code = ("import os, sys, time\nfrom trainers import run_state\n"
            "go, folder, me = sys.argv[1], sys.argv[2], sys.argv[3]\n"
            "while not os.path.exists(go): time.sleep(0.005)\n"
            "for i in range(20):\n"
            "    run_state.atomic_write(os.path.join(folder, 'step_000004.pt'), (me * 5000).encode())\n"
            "    run_state.atomic_write(os.path.join(folder, 'latest'), me)\n")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", code, str(go), str(folder), f"writer{i:02d}"], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for i in range(40)]
    time.sleep(1.0)
    go.touch()
    errors = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in errors] == [0] * 40, [e for rc, e in errors if rc][:2]
    latest = (folder / "latest").read_text()
    assert latest.startswith("writer") and (folder / "step_000004.pt").read_bytes() in {
        (f"writer{i:02d}" * 5000).encode() for i in range(40)}
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "step_000004.pt"]  # no temp file left


def test_concurrent_model_folder_saves_leave_one_whole_folder(tmp_path):
    code = ("import sys\nfrom trainers import run_state\n"
            "for i in range(10):\n"
            "    with run_state.staged_dir(sys.argv[1]) as d:\n"
            "        (d / 'config.json').write_text('{\"who\": \"%s\"}' % sys.argv[2])\n"
            "        (d / 'weights').write_text(sys.argv[2] * 1000)\n"
            "        run_state.write_manifest(d)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "final_model"), f"w{i}"], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 8, [p.stderr.read() for p in procs]
    final = tmp_path / "final_model"
    who = json.loads((final / "config.json").read_text())["who"]
    assert (final / "weights").read_text() == who * 1000 and run_state.manifest_problem(final, deep=True) is None
    assert [p.name for p in tmp_path.iterdir()] == ["final_model"]


def test_kill_while_swapping_a_model_folder_leaves_it_absent_never_partial(tmp_path):
    final = tmp_path / "final_model"
    with run_state.staged_dir(final) as d:
        (d / "config.json").write_text("{}")
        run_state.write_manifest(d, {"step": 2})
    code = ("import sys\nfrom trainers import run_state\n"
            "with run_state.staged_dir(sys.argv[1]) as d:\n"
            "    (d / 'config.json').write_text('{\"new\": 1}')\n"
            "    run_state.write_manifest(d, {'step': 4})\n")
    env = dict(os.environ, **{run_state.KILL_ENV: "model_dir_swap"})
    p = subprocess.run([sys.executable, "-c", code, str(final)], cwd=ROOT, env=env, timeout=120)
    assert p.returncode == -signal.SIGKILL
    assert not final.exists()  # old one moved aside, new one not yet in: absent, not half-written
    assert run_state.final_model_problem(tmp_path, 4) == "it is missing"
    assert len(run_state.clean_leftovers(tmp_path)) == 2 and list(tmp_path.iterdir()) == []


def test_disk_full_during_a_checkpoint_is_one_clear_error_and_loses_nothing(tmp_path, monkeypatch):
    """(A mocked write error: a real full disk cannot be made here.) torch.save reports it as an opaque
    RuntimeError; the error names the file and the cause, and the earlier checkpoint stays whole."""
    import builtins
    import errno

    import torch

    run_state.save_training_checkpoint(tmp_path, 2, {"step": 2, "w": torch.ones(10)}, [{"step": 2}])
    before = snapshot(tmp_path)

    class FullDisk:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, data):
            self.n += len(data)
            if self.n > 1000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

    from agents import checkpoint_io  # where atomic_write lives (trainers.run_state re-exports it)

    monkeypatch.setattr(checkpoint_io, "open", lambda *a, **k: FullDisk(builtins.open(*a, **k)), raising=False)
    with pytest.raises(RunStateError) as exc:
        run_state.save_training_checkpoint(tmp_path, 4, {"step": 4, "w": torch.randn(10000)}, [{"step": 4}])
    assert str(exc.value) == f"cannot write {tmp_path / 'checkpoints' / 'step_000004.pt'}: No space left on device"
    assert snapshot(tmp_path) == before and not list(tmp_path.rglob(".*"))


def test_staged_dir_never_replaces_a_folder_that_is_not_a_model(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(RunStateError, match="not a model folder"):
        with run_state.staged_dir(tmp_path / "mine"):
            pass
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


def test_lock_names_its_holder_and_dies_with_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from trainers import run_state; "
                               "run_state.RunLock(sys.argv[1]); print('held', flush=True); time.sleep(600)",
                               str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"in use by another trainer \\(pid {holder.pid} on "):
            RunLock(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    lock = RunLock(tmp_path)  # a SIGKILLed holder leaves no stale lock
    with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
        RunLock(tmp_path)  # one writer, even within one process
    lock.release()
    RunLock(tmp_path).release()


def test_a_waiting_lock_is_taken_when_its_holder_lets_go(tmp_path):
    """``RunLock(dir, wait=True)`` (how builds of one corpus take turns) blocks while another process holds the
    lock and takes it once the holder exits; as a ``with`` block it lets go at the end."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from trainers import run_state; "
                               "lock = run_state.RunLock(sys.argv[1]); print('held', flush=True); sys.stdin.readline()",
                               str(tmp_path)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen([sys.executable, "-c", "import sys; from trainers import run_state; "
                                   "run_state.RunLock(sys.argv[1], wait=True); print('taken', flush=True)",
                                   str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=2)  # still waiting while the holder holds it
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert waiter.stdout.readline().strip() == "taken" and waiter.wait(timeout=60) == 0
    finally:
        for p in (holder, locals().get("waiter")):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=60)
    with RunLock(tmp_path, wait=True):
        with pytest.raises(RunLockedError):
            RunLock(tmp_path)
    RunLock(tmp_path).release()  # let go at the end of the block


@contextlib.contextmanager
def read_only(folder):
    """No new entries in `folder`: chmod for a user, the immutable attribute for root (who ignores modes)."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        try:
            yield "Permission denied"
        finally:
            os.chmod(folder, 0o755)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr: cannot make a folder read-only")
    try:
        yield "Operation not permitted"
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_unwritable_runs_folder_is_one_clear_error(reference, tmp_path):
    (tmp_path / "ro").mkdir()
    with read_only(tmp_path / "ro") as why:
        with pytest.raises(SystemExit) as exc:
            train_here(tmp_path / "ro")
    assert str(exc.value.code) == f"error: cannot create run folder {tmp_path / 'ro' / 'run'}: {why}"
    assert list((tmp_path / "ro").iterdir()) == []

    shutil.copytree(reference[0], tmp_path / "run")  # an existing run in a folder gone read-only
    before = snapshot(tmp_path / "run")
    with read_only(tmp_path / "run") as why:
        with pytest.raises(SystemExit) as exc:
            train_here(tmp_path, "--resume", "--total-steps", "6")
    assert str(exc.value.code) == f"error: cannot write {tmp_path / 'run' / 'args.json'}: {why}"
    assert snapshot(tmp_path / "run") == before

    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit) as exc:
        train_here(tmp_path / "afile" / "runs")
    assert str(exc.value.code) == f"error: cannot create run folder {tmp_path / 'afile' / 'runs' / 'run'}: Not a directory"


# ============================================================================================
# model folders: complete or refused
# ============================================================================================
@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    from agents.lmm.tiny_qwen import load_checkpoint, save_checkpoint

    model, tok, proc = load_checkpoint(str(MODEL))
    path = tmp_path_factory.mktemp("saved") / "model"
    save_checkpoint(str(path), model, tok, proc, info={"step": 7})
    return path


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_saved_model_folder_has_a_manifest_and_loads(saved_model):
    from agents.lmm.tiny_qwen import load_checkpoint

    manifest = run_state.read_manifest(saved_model)
    assert manifest["info"] == {"step": 7}
    assert {"config.json", "model.safetensors", "tokenizer.json", "preprocessor_config.json"} <= set(manifest["files"])
    assert run_state.manifest_problem(saved_model, deep=True) is None
    _, tok, _ = load_checkpoint(str(saved_model))
    assert len(tok) == len(load_checkpoint(str(MODEL))[1]) > 700


@pytest.mark.parametrize("damage, expect", [
    ("no_tokenizer", "tokenizer.json is missing (listed in checkpoint_manifest.json"),
    ("truncated_weights", "model.safetensors has 1000 bytes, checkpoint_manifest.json says"),
    ("no_tokenizer_no_manifest", "no tokenizer file"),
    ("truncated_weights_no_manifest", "model.safetensors is truncated (1000 bytes, less than its "),
    ("cut_after_header_no_manifest", "model.safetensors is truncated (40000 of "),
    ("empty_weights_no_manifest", "model.safetensors is empty (0 bytes)"),
    ("bad_config_no_manifest", "config.json is unreadable"),
    ("list_config_no_manifest", "config.json is not a JSON object"),
    ("list_header_no_manifest", "model.safetensors has an unreadable header (AttributeError)"),
    ("manifest_outside", "'../outside/model.safetensors' lies outside the folder"),
    ("index_outside_no_manifest", "names a weight shard that is not in the folder: "
                                  "'../outside/model.safetensors' lies outside the folder"),
])
def test_incomplete_model_folders_are_refused_by_load_and_by_the_trainer(saved_model, tmp_path, damage, expect):
    """load_checkpoint used to return a 1-token tokenizer for a folder without tokenizer files."""
    from agents.lmm.tiny_qwen import load_checkpoint
    from trainers import config, para_grpo

    folder = _copy(saved_model, tmp_path / "model")
    if damage.endswith("_no_manifest"):
        (folder / run_state.MANIFEST_NAME).unlink()
    if damage.startswith("no_tokenizer"):
        (folder / "tokenizer.json").unlink()
    elif damage.startswith("truncated_weights"):
        with open(folder / "model.safetensors", "r+b") as f:
            f.truncate(1000)
    elif damage.startswith("cut_after_header"):
        with open(folder / "model.safetensors", "r+b") as f:
            f.truncate(40000)
    elif damage.startswith("empty_weights"):
        (folder / "model.safetensors").write_bytes(b"")
    elif damage.startswith("bad_config"):
        (folder / "config.json").write_text('{"model_type": ')
    elif damage.startswith("list_config"):
        (folder / "config.json").write_text("[1]")
    elif damage.startswith("list_header"):
        (folder / "model.safetensors").write_bytes((8).to_bytes(8, "little") + b"[1, 2]  " + b"\0" * 64)
    elif damage.endswith("outside") or damage.startswith("index_outside"):
        # a whole model beside the folder, which the folder's own record names: what it names is never read
        _copy(saved_model, tmp_path / "outside")
        if damage == "manifest_outside":
            manifest = run_state.read_manifest(folder)
            manifest["files"]["../outside/model.safetensors"] = manifest["files"]["model.safetensors"]
            (folder / run_state.MANIFEST_NAME).write_text(json.dumps(manifest))
        else:
            (folder / "model.safetensors").unlink()
            (folder / "model.safetensors.index.json").write_text(json.dumps(
                {"weight_map": {"lm_head.weight": "../outside/model.safetensors"}}))
    with pytest.raises(ValueError, match=re.escape(expect)):
        load_checkpoint(str(folder))
    with pytest.raises(SystemExit) as exc:
        config.parse_args(para_grpo.Args, ["--model", str(folder)])
    assert exc.value.code == 2


@pytest.mark.parametrize("name, content, expect", [
    ("sft_args.json", "{not json", "sft_args.json: not a build record (JSONDecodeError"),
    ("sft_args.json", '{"args": [1]}', "sft_args.json: not a build record (expected an object with an 'args' object)"),
    ("preprocessor_config.json", '{"size": 5}', "preprocessor_config.json: not an image processor's settings"),
    ("preprocessor_config.json", '{"max_pixels": "many"}', "preprocessor_config.json: patch_size, merge_size and "
                                                           "max_pixels (or size.longest_edge) must be positive numbers"),
    ("preprocessor_config.json", '{"max_pixels": 100000, "patch_size": 0}', "must be positive numbers, got 0, 2"),
])
def test_a_model_folders_unreadable_settings_files_are_one_line_naming_them(saved_model, tmp_path, capsys, name,
                                                                           content, expect):
    """The build record and the processor settings the trainers read from a --model folder before loading it."""
    from trainers import config, para_grpo

    folder = _copy(saved_model, tmp_path / "model")
    (folder / run_state.MANIFEST_NAME).unlink()
    cfg = json.loads((folder / "config.json").read_text())  # not marked a tiny build: both files are read
    cfg.pop("paravt_tiny_build", None)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / name).write_text(content)
    with pytest.raises(SystemExit) as exc:
        config.parse_args(para_grpo.Args, ["--model", str(folder)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f": error: --model {folder}: {folder / name}: " in one_line_error(err) and expect in err
    assert len(err.strip().splitlines()) == 1


def test_a_model_folders_own_code_never_runs(saved_model, tmp_path, monkeypatch):
    """config.json's auto_map names Python in the folder: transformers would ask on the terminal whether to run
    it; the folder is refused without asking, even by someone who would answer yes, and nothing in it runs."""
    import builtins

    from agents.lmm.tiny_qwen import load_checkpoint

    folder = _copy(saved_model, tmp_path / "model")
    (folder / run_state.MANIFEST_NAME).unlink()
    marker = tmp_path / "ran"
    (folder / "custom.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                      "from transformers import PretrainedConfig\n"
                                      "class CustomConfig(PretrainedConfig):\n    model_type = 'custom_vl'\n")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type="custom_vl", auto_map={"AutoConfig": "custom.CustomConfig",
                                                 "AutoModelForImageTextToText": "custom.CustomModel"})
    (folder / "config.json").write_text(json.dumps(cfg))
    asked = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": asked.append(prompt) or "y")
    with pytest.raises(ValueError, match=re.escape(f"model directory {str(folder)!r} cannot be loaded: ValueError: ")
                       + ".*contains custom code"):
        load_checkpoint(str(folder))
    assert not asked and not marker.exists()


def test_bad_model_flag_is_one_line_without_traceback(saved_model, tmp_path):
    folder = _copy(saved_model, tmp_path / "model")
    with open(folder / "model.safetensors", "r+b") as f:
        f.truncate(5000)
    p = train_subprocess(tmp_path / "runs", args=argv(tmp_path / "runs") + ["--model", str(folder)])
    assert p.returncode == 2
    assert p.stderr.strip() == (f"para_grpo.py: error: --model {folder}: model.safetensors has 5000 bytes, "
                                f"checkpoint_manifest.json says {run_state.read_manifest(folder)['files']['model.safetensors']['bytes']} "
                                "(truncated or replaced)")
    assert not (tmp_path / "runs").exists()


# ============================================================================================
# training runs: killed, damaged, resumed
# ============================================================================================
def test_killed_while_latest_is_rewritten_resumes_bit_identically(reference, tmp_path, capsys):
    """The issue's first case: a kill while `latest` is rewritten used to leave it empty, and
    --resume restarted from step 0 over the good checkpoints."""
    p = train_subprocess(tmp_path, kill="latest_write:4")
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    assert (ckpts / "latest").read_text() == "step_000002.pt"  # still the old, whole pointer
    assert (ckpts / "step_000004.pt").is_file() and not (run / "final_model").exists()
    step2 = (ckpts / "step_000002.pt").read_bytes()
    hist = train_here(tmp_path, "--resume")
    assert hist == []  # step 4 was complete: nothing retrained
    assert "continuing" in capsys.readouterr().err
    assert_reproduces(run, reference)
    assert (ckpts / "step_000002.pt").read_bytes() == step2
    assert not [p for p in run.rglob(".*") if p.name != run_state.LOCK_NAME]  # leftovers cleaned


@pytest.mark.parametrize("kill, resumed_from", [
    ("step:3", 2),            # mid-run, between checkpoints
    ("ckpt_write:4", 2),      # the checkpoint's temp file half written
    ("ckpt_saved:2", 2),      # checkpoint in place, history.json and latest not yet
    ("history_write:4", 4),   # history.json's temp file half written
    ("latest_write:2", 2),
    ("model_dir_write", 4),   # final_model half written in its staging folder
])
def test_killed_at_any_point_resumes_bit_identically(reference, tmp_path, capsys, kill, resumed_from):
    p = train_subprocess(tmp_path, kill=kill)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    hist = train_here(tmp_path, "--resume")
    assert [h["step"] for h in hist] == list(range(resumed_from + 1, 5))
    assert f"from step_{resumed_from:06d}.pt" in capsys.readouterr().err
    assert_reproduces(tmp_path / "run", reference)


def test_damaged_checkpoints_fall_back_or_stop(reference, tmp_path, capsys):
    """A truncated latest checkpoint: skipped by name and reason, the one before it resumed; all
    checkpoints damaged: a clear error and nothing changed."""
    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    (run / "final_model").rename(tmp_path / "final_model.bak")
    ck4 = run / "checkpoints" / "step_000004.pt"
    with open(ck4, "r+b") as f:
        f.truncate(ck4.stat().st_size // 2)
    hist = train_here(tmp_path, "--resume")
    err = capsys.readouterr().err
    assert f"--resume: skipping {ck4} is truncated or corrupt (RuntimeError: PytorchStreamReader" in err
    assert "from step_000002.pt (step 2 of 4)" in err and [h["step"] for h in hist] == [3, 4]
    assert_reproduces(run, reference)

    for ck in (run / "checkpoints").glob("step_*.pt"):
        ck.write_bytes(ck.read_bytes()[:100])
    (run / "checkpoints" / "latest").write_text("")
    before = snapshot(run)
    with pytest.raises(SystemExit) as exc:
        train_here(tmp_path, "--resume")
    assert str(exc.value.code) == (f"error: --resume: none of the 2 checkpoints in {run / 'checkpoints'} loads (see "
                                   "above); nothing was changed. Restore a good checkpoint there, or start a new "
                                   "--run-name")
    assert snapshot(run) == before


class Planted:
    """A pickle that creates a file when it is unpickled: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_planted_pickle_checkpoint_is_skipped_and_never_run(reference, tmp_path, capsys):
    """Checkpoints load as data only: a step file holding code is skipped by name, nothing in it runs,
    and --resume takes the checkpoint before it."""
    import torch

    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    (run / "final_model").rename(tmp_path / "final_model.bak")
    marker = tmp_path / "ran"
    ck4 = run / "checkpoints" / "step_000004.pt"
    torch.save({"step": 4, "model": {}, "optimizer": {}, "rng": Planted(marker)}, ck4)
    hist = train_here(tmp_path, "--resume")
    err = capsys.readouterr().err
    assert not marker.exists()
    assert f"--resume: skipping {ck4} is not a data-only checkpoint (it refers to io.open)" in err
    assert "from step_000002.pt (step 2 of 4)" in err and [h["step"] for h in hist] == [3, 4]
    assert_reproduces(run, reference)
    assert not marker.exists()


@pytest.mark.parametrize("field, value, expect", [
    ("step", "four", "its step is a str, not a whole number"),
    ("rng", "seeded", "its rng is a str, not a mapping"),
    ("history", ["a", "b"], "its history holds other than records"),
    ("args", [1], "its args is a list, not a mapping"),
    ("bad_videos", [1.5, "x"], "its bad_videos is not two whole numbers"),
])
def test_a_checkpoint_with_fields_of_other_kinds_is_skipped_by_name(reference, tmp_path, capsys, field, value,
                                                                    expect):
    """Plain data of the wrong shape (a checkpoint from elsewhere) is skipped like a damaged one, naming the field,
    and --resume takes the checkpoint before it; it never stops the resume halfway with a traceback."""
    import torch

    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    (run / "final_model").rename(tmp_path / "final_model.bak")
    ck4 = run / "checkpoints" / "step_000004.pt"
    torch.save({**torch.load(ck4, weights_only=True), field: value}, ck4)
    hist = train_here(tmp_path, "--resume")
    err = capsys.readouterr().err
    assert f"--resume: skipping {ck4} is not a training checkpoint ({expect})" in err
    assert "from step_000002.pt (step 2 of 4)" in err and [h["step"] for h in hist] == [3, 4]
    assert_reproduces(run, reference)
    if field == "rng":  # a mapping of generator states this program cannot restore: one line, no traceback
        torch.save({**torch.load(ck4, weights_only=True), "rng": {"python": "seeded"}}, ck4)
        with pytest.raises(SystemExit) as exc:
            train_here(tmp_path, "--resume", "--total-steps", "6")
        assert str(exc.value.code).startswith(f"error: {ck4} holds random-generator states this program cannot "
                                              "restore (")


def test_deleted_latest_checkpoint_resumes_from_the_one_before(reference, tmp_path, capsys):
    """A deleted latest checkpoint used to restart the run from step 0, and with a smaller
    --total-steps overwrite the finished final_model."""
    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    (run / "checkpoints" / "step_000004.pt").unlink()
    before = snapshot(run)
    with pytest.raises(SystemExit) as exc:
        train_here(tmp_path, "--resume", "--total-steps", "2")
    assert str(exc.value.code) == (f"error: --resume: {run / 'final_model'} holds step 4, beyond --total-steps 2; "
                                   "pass --total-steps 4 or more, or start a new --run-name")
    assert snapshot(run) == before
    final = {p.name: p.read_bytes() for p in (run / "final_model").iterdir()}
    assert [h["step"] for h in train_here(tmp_path, "--resume")] == [3, 4]
    assert "from step_000002.pt (step 2 of 4)" in capsys.readouterr().err
    assert_reproduces(run, reference)
    assert {p.name: p.read_bytes() for p in (run / "final_model").iterdir()} == final  # complete: kept


def test_finished_run_resumes_to_repair_final_model_and_never_retrains(reference, tmp_path, capsys):
    from agents.lmm.tiny_qwen import load_checkpoint

    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    (run / "final_model" / "tokenizer.json").unlink()  # as a kill during the old in-place write left it
    with pytest.raises(ValueError, match="tokenizer.json is missing"):
        load_checkpoint(str(run / "final_model"))
    ckpts = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    assert train_here(tmp_path, "--resume") == []
    assert "final_model needs writing (tokenizer.json is missing" in capsys.readouterr().err
    assert_reproduces(run, reference)
    assert {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()} == ckpts

    assert train_here(tmp_path, "--resume", "--seed", "3") == []  # finished: a changed setting is only noted
    assert "settings differ from the checkpoint's, so the run will not match an uninterrupted one: seed 1 -> 3" in \
        capsys.readouterr().err
    # a smaller --total-steps never overwrites the finished run
    before = snapshot(run)
    with pytest.raises(SystemExit, match="is at step 4, beyond --total-steps 2; pass --total-steps 4 or more"):
        train_here(tmp_path, "--resume", "--total-steps", "2")
    # checkpoints deleted, the finished run's files still there: refused, not restarted from step 0
    for p in (run / "checkpoints").glob("step_*.pt"):
        p.unlink()
    with pytest.raises(SystemExit, match="holds history.json and final_model but no checkpoint to resume from"):
        train_here(tmp_path, "--resume")
    assert {k: v for k, v in snapshot(run).items() if not k.startswith("checkpoints/step")} == {
        k: v for k, v in before.items() if not k.startswith("checkpoints/step")}


@pytest.mark.parametrize("flag, name", [("--run-name", "../escaped"), ("--run-name", "/tmp/absolute"),
                                        ("--run-name", "a/b"), ("--run-name", ".."), ("--exp-name", "../escaped")])
def test_a_run_or_experiment_name_that_is_not_one_folder_name_is_refused_before_anything_is_written(
        tmp_path, flag, name):
    from trainers import para_grpo

    runs = tmp_path / "sub" / "runs"
    args = [*TINY, "--runs-dir", str(runs), flag, name]
    with pytest.raises(SystemExit):
        para_grpo.main(args)
    assert sorted(p.name for p in tmp_path.rglob("*")) == []  # no runs folder, no lock file, nothing
    p = train_subprocess(runs, args=args)
    assert p.returncode != 0 and one_line_error(p.stderr).endswith(
        f"error: {flag} {name!r} " + ("is '.' or '..'" if name == ".." else "contains a path separator")
        + ": give one folder name, such as my_run")
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


def test_existing_run_name_without_resume_is_refused(reference, tmp_path):
    shutil.copytree(reference[0], tmp_path / "run")
    before = snapshot(tmp_path / "run")
    with pytest.raises(SystemExit) as exc:
        train_here(tmp_path, "--seed", "2")
    assert str(exc.value.code) == (f"error: {tmp_path / 'run'} already holds a run (checkpoints up to step 4); "
                                   "continue it with --resume, or choose a new --run-name")
    assert snapshot(tmp_path / "run") == before


def test_second_trainer_on_a_held_run_stops_naming_the_holder(reference, tmp_path):
    """A trainer running in another process holds the run: a second one (another seed) stops at
    once with the holder's pid; once the holder is SIGKILLed, --resume continues its run."""
    p = subprocess.Popen([sys.executable, "trainers/para_grpo.py", *argv(tmp_path)], cwd=ROOT,
                         env={k: v for k, v in os.environ.items() if k != run_state.KILL_ENV},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = tmp_path / "run" / run_state.LOCK_NAME
    try:
        deadline = time.time() + 300
        while not (lock.is_file() and f'"pid": {p.pid}' in lock.read_text()):
            assert p.poll() is None and time.time() < deadline
            time.sleep(0.05)
        with pytest.raises(SystemExit) as exc:
            train_here(tmp_path, "--resume", "--seed", "2")
        assert str(exc.value.code).startswith(f"error: {tmp_path / 'run'} is in use by another trainer (pid {p.pid} on ")
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    train_here(tmp_path, "--resume")
    assert_reproduces(tmp_path / "run", reference)


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_over_cleanly(reference, tmp_path, capsys):
    p = train_subprocess(tmp_path, kill="step:1")
    assert p.returncode == -signal.SIGKILL
    assert not (tmp_path / "run" / "checkpoints").exists()
    dead = list((tmp_path / "run").glob("events.out.tfevents.*"))
    assert dead
    for f in dead:  # as if both attempts started in the same second: the dead one's file sorts last
        f.rename(f.with_name("events.out.tfevents.9999999999.zz.99999.0"))
    assert [h["step"] for h in train_here(tmp_path, "--resume")] == [1, 2, 3, 4]
    assert "no checkpoint in" in capsys.readouterr().err
    assert_reproduces(tmp_path / "run", reference)  # TensorBoard: step 1 of the dead attempt purged


# ============================================================================================
# the sweep inherits it
# ============================================================================================
def test_sweep_counts_a_run_finished_only_with_a_complete_final_model(reference, tmp_path):
    from trainers.sweep import finished

    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    assert finished(run, 4) and not finished(run, 6)
    (run / "final_model" / "tokenizer.json").unlink()  # a kill during the old in-place write
    assert not finished(run, 4)  # so the sweep resumes it, and the resume rewrites final_model


def sweep_cmd(out, *extra):
    """A sweep of the rows cold_start and grpo with TINY's settings, its evaluations on 2 episodes."""
    flags = [("--strong-model" if a == "--model" else a) for a in TINY]  # the sweep's model flag
    i = flags.index("--subagent")
    del flags[i:i + 2]  # a row's own setting: the sweep refuses to change it
    return ["--rows", "cold_start,grpo", "--out", str(out), "--no-progress", "--eval-first-episode", "40",
            "--eval-episodes", "2", *flags, *extra]


def test_a_killed_sweep_run_resumes_and_a_held_one_names_its_holder_at_ci_size(tmp_path):
    """The sweep test below at CI size, two sweeps instead of four, two steps a run: in the first, grpo's trainer
    is SIGKILLed while it rewrites `latest` and cold_start's run is held by another process, so that one fails
    with the holder named while the sweep goes on; once the holder is gone, rerunning the sweep resumes the
    killed run from its checkpoint (its evaluation reads its final model), trains the held one, and reports both
    from their whole histories."""
    from trainers import sweep

    out = tmp_path / "out"
    cmd = sweep_cmd(out, "--jobs", "2", "--total-steps", "2", "--checkpoint-every", "1")
    runs = {row: out / "runs" / f"{row}__s1" for row in ("cold_start", "grpo")}
    runs["cold_start"].mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from trainers import run_state; "
                               "run_state.RunLock(sys.argv[1]); print('held', flush=True); time.sleep(600)",
                               str(runs["cold_start"])], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        p = train_subprocess(None, kill="latest_write:2", script="trainers/sweep.py", args=cmd)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    said = p.stdout + p.stderr
    assert p.returncode == 0 and "grpo__s1 failed (exit -9)" in said and "cold_start__s1 failed (exit 1)" in said
    assert f"in use by another trainer (pid {holder.pid} on " in said
    killed = runs["grpo"] / "checkpoints"
    assert (killed / "step_000002.pt").is_file() and (killed / "latest").read_text() == "step_000001.pt"
    assert not (runs["grpo"] / "final_model").exists() and not (runs["cold_start"] / "checkpoints").exists()
    results = sweep.main(cmd)
    for row, r in runs.items():
        assert results[row]["steps"]["mean"] == 2 and tb_steps(r) == [1, 2] and sweep.finished(r, 2)
        assert [h["step"] for h in json.loads((r / "history.json").read_text())] == [1, 2]
    assert "from step_000002.pt" in (out / "logs" / "grpo__s1.log").read_text()  # resumed, not retrained


@pytest.mark.slow
def test_killed_sweep_runs_resume_and_a_held_run_names_its_holder(tmp_path, capsys):
    """Every trainer of a sweep SIGKILLed while it rewrites `latest` (the hook is inherited by the
    sweep's trainer processes); rerunning the sweep resumes the trained row (its evaluations read its final
    model) and reports both from their whole histories; a run another process holds fails with the holder
    named, and the rest of the sweep goes on (CI runs
    test_a_killed_sweep_run_resumes_and_a_held_one_names_its_holder_at_ci_size)."""
    from trainers import sweep

    out = tmp_path / "out"
    cmd = sweep_cmd(out)
    p = train_subprocess(None, kill="latest_write:4", script="trainers/sweep.py", args=cmd)
    assert p.returncode == 0 and p.stderr.count("failed (exit -9)") + p.stdout.count("failed (exit -9)") == 2
    runs = {row: out / "runs" / f"{row}__s1" for row in ("cold_start", "grpo")}
    assert all((r / "checkpoints" / "step_000004.pt").is_file() and not (r / "final_model").exists()
               for r in runs.values())
    results = sweep.main(cmd)
    for row, r in runs.items():
        assert results[row]["steps"]["mean"] == 4 and tb_steps(r) == [1, 2, 3, 4]
        assert [h["step"] for h in json.loads((r / "history.json").read_text())] == [1, 2, 3, 4]
    assert sweep.finished(runs["grpo"], 4), run_state.final_model_problem(runs["grpo"], 4)
    capsys.readouterr()
    shutil.rmtree(runs["grpo"] / "final_model")
    shutil.rmtree(out / "evals" / "grpo__s1")  # so the sweep must train (resume) that run again
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from trainers import run_state; "
                               "run_state.RunLock(sys.argv[1]); print('held', flush=True); time.sleep(600)",
                               str(runs["grpo"])], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        results = sweep.main(cmd)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    said = capsys.readouterr()
    assert "grpo__s1 failed (exit 1)" in said.out + said.err and f"in use by another trainer (pid {holder.pid} on " \
        in said.out + said.err
    assert results["cold_start"]["steps"]["mean"] == 4 and not sweep.finished(runs["grpo"], 4)
    sweep.main(cmd)  # the holder is gone: the held run is repaired too
    assert sweep.finished(runs["grpo"], 4)
