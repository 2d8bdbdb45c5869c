"""Folders and files written whole or not at all: the checkpoint-folder helpers the tiny model's
``save_checkpoint`` / ``load_checkpoint`` (agents/lmm/tiny_qwen.py) and the trainers' run folders
(trainers/run_state.py, which re-exports them) share.

- Every file is written under a name unique to the writing process (``.NAME.tmp-<pid>-<random>``),
  fsynced and renamed into place, then the folder is fsynced: a kill leaves the old file or the new
  one, never a torn one, and concurrent writers never collide on a shared temp name.
- A model folder is staged in a hidden sibling folder, checked complete, given a manifest (sizes and
  sha256 of every file), fsynced and renamed into place: it is whole or absent.
- ``model_dir_problem`` says what stops a folder from loading as a model (cheap checks, no weights read).
- Problems surface as ``RunStateError``: one line naming the path and the problem.

Tests kill the process at chosen points through ``PARAVT_TEST_KILL_AT=<point>[:<step>]`` (``kill_point``;
the points are listed in trainers/run_state.py).

Only the standard library is imported, so this module is cheap to import and sits below both the agents
that save models and the trainers that save runs.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

MANIFEST_NAME = "checkpoint_manifest.json"
_TEMP_RE = re.compile(r"^\..+\.(tmp|old)-\d+-[0-9a-f]+$")  # names _temp_name makes
# A safetensors header larger than this is damage, not a model: never read it.
_MAX_SAFETENSORS_HEADER = 100 * 2**20
KILL_ENV = "PARAVT_TEST_KILL_AT"


class RunStateError(Exception):
    """A problem with a run folder or a checkpoint, as one line that names the path."""


# ============================================================================================
# test hook: die at a chosen point
# ============================================================================================
def _kill_requested(point: str, step: int | None = None) -> bool:
    want = os.environ.get(KILL_ENV, "")
    name, _, at = want.partition(":")
    return bool(want) and name == point and (not at or at == str(step))


def kill_point(point: str, step: int | None = None) -> None:
    """SIGKILL this process when ``PARAVT_TEST_KILL_AT`` is ``point`` or ``point:step`` (tests only):
    the same death as a job scheduler's hard time limit, with no cleanup of any kind."""
    if _kill_requested(point, step):
        os.kill(os.getpid(), signal.SIGKILL)


# ============================================================================================
# atomic files and folders
# ============================================================================================
def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _temp_name(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def fsync_dir(path: Path) -> None:
    """Make renames in ``path`` durable (a no-op where the filesystem cannot fsync a folder)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _WriteErrorRecorder:
    """A file object that remembers the OSError (disk full, ...) its writes raised."""

    def __init__(self, f):
        self._f, self.error = f, None

    def write(self, data):
        try:
            return self._f.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def __getattr__(self, name):
        return getattr(self._f, name)


def atomic_write(path: str | os.PathLike, content: bytes | str | Callable[[BinaryIO], Any], *,
                 kill: str | None = None, step: int | None = None) -> Path:
    """Write ``content`` (bytes, text, or a function writing to a binary file) to ``path`` through a
    temporary name unique to this process: fsync, rename into place, fsync the folder.
    ``kill``/``step`` name the test kill point, which leaves a half-written temp file behind."""
    path = Path(path)
    tmp = _temp_name(path, "tmp")
    try:
        with open(tmp, "xb") as f:
            if callable(content):
                sink = _WriteErrorRecorder(f)
                try:
                    content(sink)
                except Exception as exc:  # torch.save reports a failed write as an opaque RuntimeError
                    if sink.error is not None:
                        raise sink.error from exc
                    raise
            else:
                f.write(content.encode() if isinstance(content, str) else content)
            f.flush()
            if kill and _kill_requested(kill, step):
                f.truncate(f.tell() // 2)
                os.fsync(f.fileno())
                kill_point(kill, step)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise RunStateError(f"cannot write {path}: {_reason(exc)}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_json(path: str | os.PathLike, obj, **kw) -> Path:
    return atomic_write(path, json.dumps(obj, indent=1), **kw)


def _fsync_tree(folder: Path) -> None:
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        fsync_dir(d)
    fsync_dir(folder)


def _replaceable(final: Path) -> bool:
    """Absent, or a folder we may replace: empty, or a model folder (never someone's other files).
    A concurrent writer may move it aside while we look: gone counts as replaceable."""
    try:
        names = os.listdir(final)  # one listing: one folder, even if it is swapped meanwhile
    except FileNotFoundError:
        return True
    except NotADirectoryError:
        return False
    return not names or "config.json" in names or MANIFEST_NAME in names


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh hidden folder next to ``final``; when the block ends without error, fsync it
    and rename it to ``final`` (an existing model folder there is moved aside first and deleted
    after). A kill at any instant leaves ``final`` whole (old or new) or absent, never partial; on
    an error the staged folder is removed and ``final`` is untouched."""
    final = Path(final)
    if not _replaceable(final):
        raise RunStateError(f"{final} exists and is not a model folder (no config.json); not replacing it")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp_name(final, "tmp")
        tmp.mkdir()
    except OSError as exc:
        raise RunStateError(f"cannot write {final}: {_reason(exc)}") from exc
    moved: list[Path] = []
    try:
        yield tmp
        _fsync_tree(tmp)
        # rename(2) cannot replace a non-empty folder: move the old one aside, then rename. A
        # concurrent writer may put its own folder back in between, hence the loop.
        for _ in range(100):
            try:
                os.rename(tmp, final)
                break
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            old = _temp_name(final, "old")
            with contextlib.suppress(FileNotFoundError):
                os.rename(final, old)
                moved.append(old)
            kill_point("model_dir_swap")
        else:
            raise RunStateError(f"cannot write {final}: other processes keep replacing it")
        fsync_dir(final.parent)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RunStateError(f"cannot write {final}: {_reason(exc)}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if moved and not final.exists():  # put the old folder back rather than leave nothing
            with contextlib.suppress(OSError):
                os.rename(moved.pop(), final)
        raise
    for old in moved:
        shutil.rmtree(old, ignore_errors=True)


# ============================================================================================
# model folders: manifest, completeness checks
# ============================================================================================
def _name_problem(name) -> str | None:
    """Why a name that a folder's own record gives (its manifest, its weights index) is not a file inside that
    folder: a folder from elsewhere could otherwise have files outside it checked, hashed or loaded."""
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        return f"{str(name)[:80]!r} is not a file name"
    if os.path.isabs(name) or ".." in Path(name).parts:
        return f"{name[:80]!r} lies outside the folder"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: str | os.PathLike, info: dict | None = None) -> Path:
    """Record every file of a model folder (size, sha256) plus ``info``; written last, so a folder
    with a valid manifest was written completely."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST_NAME}
    return atomic_write_json(folder / MANIFEST_NAME, {"format": 1, "files": files, "info": info or {}})


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The folder's manifest, None when it has none; RunStateError when it is unreadable."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        m = json.loads(path.read_text())
        if not isinstance(m, dict) or not isinstance(m.get("files"), dict):
            raise ValueError("no 'files' table")
        for name, rec in m["files"].items():
            if not isinstance(rec, dict):
                raise ValueError(f"the entry of {name[:80]!r} is not an object")
            problem = _name_problem(name)
            if problem:
                raise ValueError(problem)
        return m
    except (OSError, ValueError) as exc:
        raise RunStateError(f"{path} is unreadable ({exc})") from exc


def manifest_problem(folder: str | os.PathLike, deep: bool = False) -> str | None:
    """What is wrong with a model folder against its manifest (missing or resized files; with
    ``deep``, changed contents), or None. A folder without a manifest passes."""
    folder = Path(folder)
    try:
        m = read_manifest(folder)
    except RunStateError as exc:
        return str(exc)
    if m is None:
        return None
    for name, rec in m["files"].items():
        p = folder / name
        if not p.is_file():
            return f"{name} is missing (listed in {MANIFEST_NAME}: the folder is incomplete)"
        size = p.stat().st_size
        if size != rec.get("bytes"):
            return f"{name} has {size} bytes, {MANIFEST_NAME} says {rec.get('bytes')} (truncated or replaced)"
        if deep and _sha256(p) != rec.get("sha256"):
            return f"{name} does not match its sha256 in {MANIFEST_NAME} (corrupted)"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """Truncation check from the header alone (the data is never read)."""
    size = path.stat().st_size
    if size == 0:
        return f"{path.name} is empty (0 bytes)"
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if size < 8 or n < 2 or n > _MAX_SAFETENSORS_HEADER:
                return f"{path.name} is not a safetensors file (or truncated: {size} bytes)"
            if n > size - 8:
                return f"{path.name} is truncated ({size} bytes, less than its {8 + n}-byte header)"
            header = json.loads(f.read(n))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError) as exc:
        return f"{path.name} has an unreadable header ({type(exc).__name__})"
    if size < 8 + n + end:
        return f"{path.name} is truncated ({size} of {8 + n + end} bytes)"
    return None


def _weights_problem(folder: Path) -> str | None:
    st, st_index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if st.is_file():
        return _safetensors_problem(st)
    if st_index.is_file():
        try:
            shards = sorted(set(json.loads(st_index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
            return f"{st_index.name} is unreadable ({type(exc).__name__})"
        for shard in shards:
            problem = _name_problem(shard)
            if problem:
                return f"{st_index.name} names a weight shard that is not in the folder: {problem}"
            if not (folder / shard).is_file():
                return f"weight shard {shard} is missing"
            problem = _safetensors_problem(folder / shard)
            if problem:
                return problem
        return None
    for name in ("pytorch_model.bin", "pytorch_model.bin.index.json"):
        if (folder / name).is_file():
            return f"{name} is empty (0 bytes)" if (folder / name).stat().st_size == 0 else None
    return "no weights file (model.safetensors, its index, or pytorch_model.bin)"


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """A trainers/sft.py output folder stands for its ``cold_start`` checkpoint."""
    p = Path(path)
    if (p / "cold_start" / "config.json").is_file() and not (p / "config.json").is_file():
        return p / "cold_start"
    return p


def model_dir_problem(path: str | os.PathLike) -> str | None:
    """What stops ``path`` from loading as a model folder (cheap checks, no weights read), or None.
    Checks: the folder, its manifest if any, config.json, weights (safetensors truncation from the
    header), a tokenizer file."""
    folder = resolve_model_dir(path)
    if not folder.is_dir():
        return "no such folder"
    problem = manifest_problem(folder)
    if problem:
        return problem
    config = folder / "config.json"
    if not config.is_file():
        return "no config.json there (nor in its cold_start/): not a checkpoint folder"
    try:
        if not isinstance(json.loads(config.read_text()), dict):
            return "config.json is not a JSON object"
    except (OSError, ValueError) as exc:
        return f"config.json is unreadable ({type(exc).__name__}: {exc})"
    problem = _weights_problem(folder)
    if problem:
        return problem
    if not any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        return "no tokenizer file (tokenizer.json, tokenizer.model or vocab.json)"
    tok = folder / "tokenizer.json"
    if tok.is_file() and tok.stat().st_size == 0:
        return "tokenizer.json is empty (0 bytes)"
    return None
