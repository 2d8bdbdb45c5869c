"""The data side of a supervised build: which corpus parts a build needs (``corpus_plan``), the pre-rendered
corpus (``prepare_corpus``: rendered once into a folder named by the data settings, in chunks, by worker
processes; a killed build resumes, a second build with the same data settings reuses it), a part in memory
(``Records``) and its length-bucketed batches (``Batcher``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from agents.lmm.corpus import KINDS, READING_FAMILIES, merge_stats, tokenizer_texts, write_chunk
from agents.lmm.default import cache_root
from agents.lmm.tokenizer import build_tokenizer
from trainers.run_state import RunLock, atomic_write_json, clean_leftovers, staged_dir
from trainers.supervised.args import DATA_FIELDS, Args

# Relative cost of one sample per kind (measured on one CPU core): chunks hold ~equal work.
_COST = {"n_frame": 1.0, "n_caption": 1.5, "n_direct": 5.0, "n_tool": 9.0, "n_reading": 9.0, "n_recall": 0.02,
         "n_presence": 0.1, "n_sighting": 1.5}
# Every corpus part; its position seeds its chunks, so a part's data never depends on which other
# parts a build asked for (the strong and the weak build share one corpus).
PARTS = ("s1_frame", "s1_caption", "s1_direct", "s1_native", "s2_tool", "s2_direct", "s2_frame", "s2_caption",
         "s1_reading", "s1_direct_needle", "s1_recall", "s1_presence", "s2_sighting")
# Drills come from train-split episodes past the world's dataset_size (fresh videos, never
# validation's: a split owns every third video), so no drill repeats an episode the other parts use.
DRILL_EPISODES = 60_000


def grounded_think_mode(args: Args) -> bool | str:
    """``build_corpus``'s ``grounded_think`` from the flags that shape it."""
    if args.grounded_think and args.presence_think:
        return "scene_presence" if args.scene_presence else "presence"
    return "options" if args.grounded_think and args.option_think else args.grounded_think


def corpus_plan(args: Args, priors=None) -> dict[str, tuple[dict, dict]]:
    """Corpus parts: name -> (counts for ``build_corpus``, its keyword arguments). ``s1_native``
    only when a prior in ``priors`` (default: ``args.tool_prior``) needs native traces."""
    priors = priors or (("strong", "weak") if args.tool_prior == "both" else (args.tool_prior,))
    common = dict(wc=args.world(), budgets=args.budget_tuple(), oracle_fraction=args.oracle_fraction,
                  keep_wrong=args.keep_wrong, caption=args.caption_config(),
                  grounded_think=grounded_think_mode(args),
                  grounded_direct_think=False if args.direct_think == "none" else args.direct_think,
                  search_agent=args.search_agent,
                  **({"zoom_think": args.zoom_think} if args.zoom_think != "scene" else {}),
                  **({"count_order_think": True} if args.count_order_think else {}),
                  **({"tool_visible_share": args.tool_on_visible} if args.tool_on_visible else {}))
    s1 = dict(common, index_range=(0, args.stage1_episodes), close_think_p=args.native_close_think_p,
              **({"native_think": args.native_think} if args.native_think != "fixed" else {}))
    size = args.world().dataset_size
    # --stage2-fresh: the block after the drills' (each a disjoint set of train videos, none of validation's)
    s2_world = (dict(wc=dataclasses.replace(args.world(), dataset_size=size + 2 * DRILL_EPISODES),
                     index_range=(size + DRILL_EPISODES, size + 2 * DRILL_EPISODES)) if args.stage2_fresh
                else dict(index_range=(args.stage1_episodes, size)))
    s2 = dict(common, **s2_world,
              close_think_p=args.native_close_think_p,  # both only shape native rollouts (--stage2-native-traces)
              **({"native_think": args.native_think} if args.native_think != "fixed" else {}))
    mixed = {key: share for key, share in (("native_share", args.stage2_native_share),  # the cold start's markers
                                           ("native_trace_share", args.stage2_native_traces)) if share}  # rollouts
    tool_only = {"families": families} if (families := args.tool_family_tuple()) else {}
    plan = {"s1_frame": (dict(n_frame=args.stage1_frame), s1), "s1_caption": (dict(n_caption=args.stage1_caption), s1),
            "s1_direct": (dict(n_direct=args.stage1_direct), s1),
            "s2_tool": (dict(n_tool=args.stage2_tool, tool_dialect="paravt", **mixed), dict(s2, **tool_only)),
            "s2_direct": (dict(n_direct=args.stage2_direct, **mixed), s2),
            "s2_frame": (dict(n_frame=args.stage2_frame), s2), "s2_caption": (dict(n_caption=args.stage2_caption), s2)}
    if any(native_count(args, p) for p in priors):
        plan["s1_native"] = (dict(n_tool=args.stage1_tool, tool_dialect="native"), dict(s1, **tool_only))
    drills = dict(s1, wc=dataclasses.replace(args.world(), dataset_size=size + DRILL_EPISODES),
                  index_range=(size, size + DRILL_EPISODES), families=READING_FAMILIES,
                  **({} if args.drill_decisions else {"decisions_trained": False}))
    if any(native_count(args, p, args.stage1_reading) for p in priors):
        plan["s1_reading"] = (dict(n_reading=args.stage1_reading),
                              dict(drills, oracle_fraction=args.reading_oracle_fraction))
    if args.stage2_sighting:  # fresh videos too: drawn from stage 2's few hundred, the drills' times were memorised
        plan["s2_sighting"] = (dict(n_sighting=args.stage2_sighting),
                               dict(drills, sighting_frames=True) if args.sighting_frames else drills)
    if args.stage1_direct_needle:
        plan["s1_direct_needle"] = (dict(n_direct=args.stage1_direct_needle),
                                    dict(drills, **({"direct_no_tool_share": args.drill_no_tool_share}
                                                    if args.drill_no_tool_share else {})))
    if args.stage1_recall:
        plan["s1_recall"] = (dict(n_recall=args.stage1_recall), {})
    if args.stage1_presence:
        plan["s1_presence"] = (dict(n_presence=args.stage1_presence),
                               {"scene_presence": True} if args.scene_presence else {})
    return {k: v for k, v in plan.items() if sum(n for n in v[0].values() if isinstance(n, int))}


def native_count(args: Args, prior: str, n: int | None = None) -> int:
    """Of ``n`` stage-1 tool samples (default ``--stage1-tool`` native traces), those the ``prior`` sees."""
    n = args.stage1_tool if n is None else n
    return n if prior == "strong" else int(round(n * args.weak_tool_fraction))


def _chunks_of(counts: dict, chunk_cost: float = 1000.0) -> list[dict]:
    """Split one part's counts into chunks of about ``chunk_cost`` cost units each."""
    (key, n), = [(k, v) for k, v in counts.items() if k.startswith("n_")]
    size = max(1, int(chunk_cost / _COST[key]))
    return [dict(counts, **{key: min(size, n - lo)}) for lo in range(0, n, size)]


def chunk_jobs(args: Args, plan: dict) -> list[tuple[str, int, dict, dict]]:
    """(part, chunk index, counts, build_corpus kwargs with the chunk's seed) of every chunk. A
    chunk's seed depends only on the run seed, its part and its index."""
    jobs = []
    for name, (counts, kwargs) in sorted(plan.items()):
        for j, c in enumerate(_chunks_of(counts)):
            seed = int(np.random.SeedSequence([args.seed, PARTS.index(name), j]).generate_state(1)[0])
            jobs.append((name, j, c, dict(kwargs, seed=seed)))
    return jobs


# Data fields added after corpora had been built, with the value they had before: at that value a field
# stays out of the key, so those corpora keep their folder.
LATE_DATA_FIELDS = {"model": "", "grounded_think": False, "option_think": False, "presence_think": False, "scene_presence": False, "stage1_reading": 0, "stage1_direct_needle": 0,
                    "stage1_recall": 0, "stage1_presence": 0, "stage2_native_share": 0.0, "stage2_native_traces": 0.0, "native_think": "fixed", "direct_think": "none",
                    "search_agent": "scene", "drill_no_tool_share": 0.0, "drill_decisions": True,
                    "tool_on_visible": 0.0, "tool_families": "", "zoom_think": "scene",
                    "stage2_sighting": 0, "sighting_frames": False, "stage2_fresh": False, "count_order_think": False}


def data_key(args: Args) -> str:
    d = {k: getattr(args, k) for k in DATA_FIELDS}
    for field_name, before in LATE_DATA_FIELDS.items():
        if d[field_name] == before:
            del d[field_name]
    if d["reading_oracle_fraction"] == 0.5 or not args.stage1_reading:  # the fixed share before the flag
        del d["reading_oracle_fraction"]
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def resolve_corpus_dir(args: Args) -> Path:
    """``--corpus-dir``, else a cache folder named by the data settings (kept out of ``--out`` and
    ``--runs-dir``: it holds gigabytes of frames for the gpu preset)."""
    return Path(args.corpus_dir) if args.corpus_dir else cache_root() / "corpus" / data_key(args)



_TOKENIZERS: dict = {}


def _tokenizer(args: Args):
    """The BPE of ``args``' world and vocabulary size, trained once per process: every corpus of one world has the
    same tokenizer (a build continues its parent only with it), and a chain of builds renders many corpora."""
    key = (json.dumps(dataclasses.asdict(args.world()), sort_keys=True, default=str), args.vocab_size)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = build_tokenizer(tokenizer_texts(args.world()), vocab_size=args.vocab_size)
    return _TOKENIZERS[key]


def prepare_corpus(args: Args, plan: dict, progress: bool = True, tokenizer=None, image_processor=None):
    """(tokenizer, corpus folder, stats per part): the tokenizer (the same for both priors: it is
    trained on both dialects) and every chunk of ``plan``, rendered once into the corpus folder by
    ``args.workers`` processes; chunks already there are reused. Concurrent builds of one corpus take
    turns on its lock (``trainers.run_state.RunLock``), so it is rendered once. A given ``tokenizer`` (a model's
    own, with its chat template) and ``image_processor`` (whose grid sets the visual tokens) render it instead."""
    from transformers import AutoTokenizer

    cdir = resolve_corpus_dir(args)
    cdir.mkdir(parents=True, exist_ok=True)
    with RunLock(cdir, wait=True):
        clean_leftovers(cdir)  # what killed builds left half written (every writer here holds the lock)
        atomic_write_json(cdir / "data_args.json", {k: getattr(args, k) for k in DATA_FIELDS})
        tdir = cdir / "tokenizer"
        if tokenizer is None and not (tdir / "tokenizer.json").is_file():
            with staged_dir(tdir) as staged:
                _tokenizer(args).save_pretrained(str(staged))
        tok = tokenizer or AutoTokenizer.from_pretrained(str(tdir), local_files_only=True)
        from agents.lmm.tokenizer import CHAT_TEMPLATE
        tok.chat_template = tok.chat_template or CHAT_TEMPLATE
        jobs = [(name, j, c, kw, str(cdir / name / f"chunk_{j:05d}.npz")) for name, j, c, kw in chunk_jobs(args, plan)]
        for name in plan:
            (cdir / name).mkdir(exist_ok=True)
            clean_leftovers(cdir / name)
        jobs = [job for job in jobs if not Path(job[4]).is_file()]
        stats: dict[str, list] = {}
        work = sum(sum(_COST[k] * v for k, v in c.items() if k in _COST) for _, _, c, _, _ in jobs)
        with tqdm(total=work, desc="corpus", disable=not progress or not jobs, dynamic_ncols=True, mininterval=5) as bar:
            def done(name, c, st):
                stats.setdefault(name, []).append(st)
                bar.update(sum(_COST[k] * v for k, v in c.items() if k in _COST))
            if args.workers <= 1:
                for name, _, c, kw, path in jobs:
                    done(name, c, write_chunk(tok, c, kw, path, image_processor))
            else:
                import concurrent.futures as cf
                import multiprocessing as mp
                with cf.ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as ex:
                    futs = {ex.submit(write_chunk, tok, c, kw, path, image_processor): (name, c)
                            for name, _, c, kw, path in jobs}
                    for f in cf.as_completed(futs):
                        done(*futs[f], f.result())
        stats_path = cdir / "stats.json"
        old = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
        merged = {name: merge_stats(([old[name]] if name in old else []) + stats.get(name, [])) for name in plan}
        atomic_write_json(stats_path, merged)
    return tok, cdir, merged


class Records:
    """A corpus part in memory: token ids, loss masks and frames (a uint8 tensor, moved to the
    training device once) of every sequence, with offsets."""

    def __init__(self, ids, mask, tok_off, frames, img_off, kind):
        self.ids, self.mask, self.tok_off, self.img_off, self.kind = ids, mask, tok_off, img_off, kind
        self.frames = frames if isinstance(frames, torch.Tensor) else torch.from_numpy(frames)
        self.lens = np.diff(tok_off)

    @classmethod
    def load(cls, folder: Path, limit: int | None = None) -> "Records":
        """The part's chunks in order; ``limit`` keeps the first N sequences."""
        packs = []
        for path in sorted(folder.glob("chunk_*.npz")):
            with np.load(path) as z:
                packs.append({k: z[k] for k in z.files})
        ids, mask, tok_off, frames, img_off, kind = [], [], [0], [], [0], []
        for p in packs:
            ids.append(p["ids"]), mask.append(p["mask"]), kind.append(p["kind"])
            tok_off += (p["tok_off"][1:] + tok_off[-1]).tolist()
            if p["img_off"][-1]:
                frames.append(p["frames"])
            img_off += (p["img_off"][1:] + img_off[-1]).tolist()
        recs = cls(np.concatenate(ids) if ids else np.zeros(0, np.int32),
                   np.concatenate(mask) if mask else np.zeros(0, np.bool_), np.asarray(tok_off, np.int64),
                   np.concatenate(frames) if frames else np.zeros((0, 1, 1, 3), np.uint8),
                   np.asarray(img_off, np.int64), np.concatenate(kind) if kind else np.zeros(0, np.int8))
        return recs if limit is None or limit >= len(recs) else recs.head(limit)

    def head(self, n: int) -> "Records":
        t, m = int(self.tok_off[n]), int(self.img_off[n])
        return Records(self.ids[:t], self.mask[:t], self.tok_off[:n + 1], self.frames[:m], self.img_off[:n + 1],
                       self.kind[:n])

    def to(self, device) -> "Records":
        self.frames = self.frames.to(device)
        return self

    def __len__(self) -> int:
        return len(self.lens)

    def kinds(self) -> dict[str, int]:
        return {KINDS[k]: int(c) for k, c in zip(*np.unique(self.kind, return_counts=True))}


def stage2_rows(folder: str) -> Records:
    """--stage2-rows: every chunk in ``folder``; a folder without chunks is an error, not an empty part."""
    path = Path(folder)
    if not path.is_dir() or not any(path.glob("chunk_*.npz")):
        raise SystemExit(f"--stage2-rows {folder}: no chunk_*.npz there (write them with "
                         "trainers.supervised.self_distill.play_rows or self_distill.py --rows-out)")
    return Records.load(path)


class Batcher:
    """Endless length-bucketed batches of one part: each epoch shuffles, sorts chunks of
    ``8 * max_seqs`` sequences by length and cuts them into batches of at most ``max_seqs``
    sequences and ``max_tokens`` padded tokens, in shuffled order."""

    def __init__(self, lens: np.ndarray, max_seqs: int, max_tokens: int, rng: np.random.Generator):
        self.lens, self.max_seqs, self.max_tokens, self.rng = lens, max_seqs, max_tokens, rng
        self.queue: list[np.ndarray] = []
        self.per_epoch = len(self._epoch(np.random.default_rng(0)))

    def _epoch(self, rng) -> list[np.ndarray]:
        perm = rng.permutation(len(self.lens))
        batches = []
        for lo in range(0, len(perm), 8 * self.max_seqs):
            group = perm[lo:lo + 8 * self.max_seqs]
            group = group[np.argsort(self.lens[group], kind="stable")]
            cur: list[int] = []
            for i in group:  # ascending lengths: the newcomer is the longest of its batch
                if cur and (len(cur) >= self.max_seqs or (len(cur) + 1) * self.lens[i] > self.max_tokens):
                    batches.append(np.asarray(cur))
                    cur = []
                cur.append(int(i))
            if cur:
                batches.append(np.asarray(cur))
        return [batches[i] for i in rng.permutation(len(batches))]

    def next(self) -> np.ndarray:
        if not self.queue:
            self.queue = self._epoch(self.rng)
        return self.queue.pop()


def load_parts(args: Args, plan: dict, cdir: Path, device, vocab_size: int) -> dict[str, Records]:
    """The parts this build trains on, on ``device``: every part of ``plan`` (the native traces and reading drills
    cut to what ``args.tool_prior`` sees; a part it sees none of is left out) and ``--stage2-rows`` as ``s2_rows``."""
    parts = {}
    for name in plan:
        limit = (native_count(args, args.tool_prior) if name == "s1_native" else
                 native_count(args, args.tool_prior, args.stage1_reading) if name == "s1_reading" else None)
        if limit == 0:
            continue
        parts[name] = Records.load(cdir / name, limit).to(device)
    if args.stage2_rows:
        parts["s2_rows"] = stage2_rows(args.stage2_rows).to(device)
        if len(parts["s2_rows"]) and int(parts["s2_rows"].ids.max()) >= vocab_size:
            raise SystemExit(f"--stage2-rows {args.stage2_rows}: token ids up to {int(parts['s2_rows'].ids.max())}, "
                             f"beyond this build's {vocab_size}-token vocabulary: rows written with another tokenizer")
    return parts
