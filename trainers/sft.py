"""Two-stage supervised build of the tiny LMM that sees: the entry point (``python trainers/sft.py --help``).

Stage 1, "base pretraining", teaches the model to SEE and the strong prior its tool habits:
    single-frame captions   a frame + the sub-agent prompt -> the world's caption (scene, needle)
    crop captions           a crop exactly as the env's sub-agent gets it (a tool call's window at
                            1 fps, 8 or 16 frames with timestamps, ``agents.lmm.subagent``'s prompt)
                            -> the world's caption with first/last times
    direct answers          only where the K-frame overview shows the evidence (``<answer>`` format)
    native tool traces      strong prior only (``--stage1-tool``; weak: ``--weak-tool-fraction`` of
                            them): scripted agents' episodes re-voiced in the model's OWN dialect
                            (``<tool_code>crop_video(...)``, ``</think>`` often skipped, ``Answer: X``)
    reading drills          ``--stage1-reading``: tool traces on needle questions whose only target
                            is the answer after the responses (calls and responses are context)
    direct drills           ``--stage1-direct-needle``: direct answers on needle questions whose
                            overview shows the needle (both drills on fresh train episodes,
                            sampled ``--drill-weight`` times their size)
    recall rows             ``--stage1-recall``: text-only associative recall (``agents.lmm.corpus``), dense
                            practice of the in-context lookup reading needs; ``--recall-warmup-steps`` opens
                            stage 1 with that many steps at ``--recall-warmup-lr``, ``--recall-warmup-share``
                            of them on recall rows (all of them at 1e-3 erased perception)
    presence probes         ``--stage1-presence``: text-only reading drills about random objects whose answer
                            turn is the presence chain (``agents.lmm.corpus.presence_probe``), sampled
                            ``--presence-weight`` times their size
    The first ``--perception-warmup`` of stage 1 trains on captions only (seeing first).
Stage 2, "cold start": a short SFT on the ParaVT grammar with PARALLEL calls (``<think>``, several
``<tool_call>`` JSON blocks in one turn, ``<answer>``): tool traces + direct answers on episodes
disjoint from stage 1's, plus a little caption rehearsal (keeps the sub-agent skill), and with
``--stage2-sighting`` text-only drills of the second tool turn on fresh videos (``sighting_probe``).
(``agents.lmm.corpus`` says how each kind is made and why.)

Data is pre-rendered ONCE: ``--workers`` processes build every part in chunks and write token ids,
loss masks and the uint8 frames to ``--corpus-dir`` (``.npz`` per chunk; a killed build resumes, a
second build with the same data settings reuses them). Training batches pack many sequences
(length-bucketed within a part, at most ``--batch-size`` sequences and ``--batch-tokens`` padded
tokens), turn the frames into pixel values on the device (``agents.lmm.fast_qwen`` when present,
else the image processor), run the model's own forward (the fast path when present; bf16
autocast on CUDA with ``--amp``, fp32 with TF32 matmuls otherwise), and take the
cross-entropy of assistant tokens only. AdamW, linear warm-up, cosine to 10 %. Stage 1 ends at
``--stage1-steps`` or at its share of ``--time-budget-s``, whichever comes first (the schedule
follows the same progress); stage 2 runs its ``--stage2-steps`` (the cold-start length is a knob of
the tool prior, so it does not shrink with time; ``--stage2-fit`` lets it end by the deadline instead). A hard stop at the
budget still saves. The run state is saved every ``--checkpoint-every-s`` seconds and re-running
the same command resumes it.

Presets (``--preset``; an explicit flag always wins over its preset):
    cpu  (default; what ``agents.lmm.default.default_checkpoint`` builds when nothing is shipped):
         small corpora, fixed step counts: a demo, too short to learn to see
    gpu  one H200: 80k captions (40k single frames, 40k crops), 12k direct answers, 6k native
         traces; fp32 with TF32 matmuls (``--no-amp``: in earlier builds bf16 autocast at lr >= 1e-3
         learned no objects or went NaN; non-finite steps are skipped and counted), stage-1 lr 6e-4,
         batches of up to 256 sequences / 65,536 padded tokens, the first 60 % of stage 1 on captions
         only, and a 540 s budget for the whole run (corpus included), so ``--tool-prior both`` fits one
         10-minute GPU call. Give it a longer ``--time-budget-s`` when you can.

``--tool-prior both`` renders one corpus, then trains the two priors in two processes: one GPU each when there
are several (strong on cuda:0, weak on cuda:1), else sharing it.

A build continues another with ``--init-from DIR/{prior}/cold_start`` (or ``shipped``): the parent's frame size,
crop frames and overview sizes K carry over unless given, and the build record nests the parent's. The shipped
cold starts (``agents/lmm/checkpoints/tiny-{strong,weak}/``) are long continuations of such builds: each one's
``cold_start/sft_args.json`` records the steps, ``benchmarks/cold_start_lineage/README.md`` lists the last ones
with their commands, and ``docs/models.md`` says what the shipped models measure.

``--recipe strong|weak|fragile`` runs a whole chain of such builds, from a random init to a cold start, as one
command (the steps and every value: ``trainers/supervised/recipe.py``; ``--recipe strong --help`` for its flags):

    python trainers/sft.py --recipe strong --device cuda --out runs/recipe --time-budget-s 540   # again until done
    python trainers/sft.py --recipe weak --device cuda --out runs/recipe     # on the same base, runs/recipe/base
    python trainers/sft.py --recipe strong --size tiny --out runs/recipe_tiny   # every step tiny, on a CPU

    python trainers/sft.py --tool-prior strong --out checkpoints/strong                    # CPU demo
    python trainers/sft.py --preset gpu --tool-prior strong --out checkpoints/gpu-strong   # one H200
    python trainers/sft.py --preset gpu --tool-prior both --out checkpoints/gpu            # both priors,
        one corpus, two training processes (one GPU each when there are two, else sharing it):
        checkpoints/gpu/{strong,weak}/cold_start
    tensorboard --logdir runs      # stage{1,2}/loss, .../loss/<part>, .../eval/frame_object_f1, .../eval/crop_object_f1

A Qwen2.5-VL / Qwen3-VL checkpoint folder gets its cold start alone with ``--model DIR`` (it sees already; the tool
traces, direct answers and caption rehearsal are rendered with its own tokenizer, chat template and image processor,
bf16 autocast on CUDA, activation checkpointing, the vision tower frozen: ``trainers/supervised/real_model.py``):

    python trainers/sft.py --model /path/to/Qwen2.5-VL-3B-Instruct --device cuda --tool-prior strong --out ckpt/3b

Writes ``<out>/base`` (after stage 1) and ``<out>/cold_start`` (after stage 2), each a
``save_checkpoint`` directory loadable by ``TransformersPolicy(path)``, plus ``sft_args.json``; until the build
finishes, ``<out>/train_state.pt`` holds the state it resumes from.

The stages live in ``trainers/supervised/``: ``args.py`` (flags, presets, checks), ``data.py`` (the corpus plan,
the pre-rendered corpus, ``Records``, ``Batcher``), ``batches.py`` (``Trainee``: batches and the loss),
``loop.py`` (``Stage``, the schedule, ``train_stage``), ``quick_eval.py`` (held-out caption F1 during training),
``checkpoints.py`` (the starting weights, ``train_state.pt``, ``sft_args.json``); this file runs them.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

if __name__ == "__main__" and not __package__:  # python trainers/sft.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.default import checkpoint_info  # noqa: E402
from agents.lmm.tiny_qwen import build_image_processor, save_checkpoint  # noqa: E402
from trainers.supervised.args import (DATA_FIELDS, INHERITED_FIELDS, PRESETS, RUNTIME_FIELDS, Args,  # noqa: E402
                                      check_args, inherit_world, init_path, with_preset)
from trainers.supervised.args import parse_args as _parse_args  # noqa: E402
from trainers.supervised.batches import Trainee, answer_marks, answer_token_mask, nll_loss  # noqa: E402
from trainers.supervised.checkpoints import (STATE_FILE, build_base, finish_cold_start, is_built,  # noqa: E402
                                             load_state, save_state, state_key)
from trainers.supervised.data import (DRILL_EPISODES, LATE_DATA_FIELDS, PARTS, Batcher, Records,  # noqa: E402
                                      chunk_jobs, corpus_plan, data_key, grounded_think_mode, load_parts,
                                      native_count, prepare_corpus, resolve_corpus_dir, stage2_rows)
from trainers.supervised.loop import Stage, build_stages, learning_rate, train_stage  # noqa: E402
from trainers.supervised.quick_eval import CaptionCheck  # noqa: E402

# What other code imports from here (``from trainers.sft import ...``): the entry points and the stages' public names.
__all__ = ["Args", "PRESETS", "RUNTIME_FIELDS", "DATA_FIELDS", "INHERITED_FIELDS", "with_preset", "parse_args",
           "inherit_world", "init_path", "PARTS", "DRILL_EPISODES", "LATE_DATA_FIELDS", "grounded_think_mode",
           "corpus_plan", "native_count", "chunk_jobs", "data_key", "resolve_corpus_dir", "prepare_corpus", "Records",
           "stage2_rows", "Batcher", "Trainee", "answer_marks", "answer_token_mask", "nll_loss", "STATE_FILE",
           "learning_rate", "Stage", "train_stage", "build_base", "state_key", "main", "main_both"]


def parse_args(argv=None, cls=Args):
    """``trainers.supervised.args.parse_args`` with this module's docstring as ``--help``'s description."""
    return _parse_args(argv, cls, description=__doc__)


def main(args: Args) -> Path:
    """Build (or resume building) one prior's checkpoints; ``--tool-prior both`` builds two."""
    t_start = time.time()
    deadline = (args.deadline_unix if args.deadline_unix > 0 else
                t_start + args.time_budget_s if args.time_budget_s > 0 else math.inf)
    stop = min(deadline, args.stop_at_unix or math.inf)  # a hard stop only: the schedule does not see it
    check_args(args)
    if args.model:
        from trainers.supervised.real_model import check_model_args

        check_model_args(args)
    if args.tool_prior == "both":
        return main_both(args, t_start, deadline)
    from torch.utils.tensorboard import SummaryWriter

    out = Path(args.out)
    if is_built(out):
        print(f"[sft] {out} is already built (cold_start + sft_args.json); nothing to do", file=sys.stderr)
        return out / "cold_start"
    out.mkdir(parents=True, exist_ok=True)
    key = state_key(args)
    state = load_state(out, key)
    if args.threads:
        torch.set_num_threads(args.threads)
    if str(args.device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    run_name = f"{args.exp_name}__{args.tool_prior}__{args.seed}__{int(time.time())}"
    writer = SummaryWriter(os.path.join(args.runs_dir, run_name))
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
        f"|{k}|{v}|" for k, v in dataclasses.asdict(args).items()))
    if args.model:  # a Qwen-VL folder: its cold start alone
        from trainers.supervised.real_model import cold_start

        return cold_start(args, out, key, state, writer, t_start, deadline)

    plan = corpus_plan(args)
    tok, cdir, stats = prepare_corpus(args, plan, progress=args.progress)
    t_corpus = time.time() - t_start
    proc = build_image_processor()
    model = build_base(args, tok)
    from trainers.core import prepare_model

    prepare_model(model, args)  # --freeze-vision, --gradient-checkpointing
    tr = Trainee(model, tok, proc, args.device, fast=args.fast, answer_weight=args.answer_weight)
    if not tr.fast and tr.device.type == "cuda":
        print("[sft] agents.lmm.fast_qwen is not available (or --no-fast): the stock forward and the PIL image "
              "processor are several times slower on the GPU", file=sys.stderr)
    parts = load_parts(args, plan, cdir, tr.device, len(tok))
    print(f"[sft] {args.tool_prior}: corpus ready in {t_corpus:.0f} s ({cdir}): " + ", ".join(
        f"{n} {len(r)}" for n, r in sorted(parts.items())), file=sys.stderr)
    for name, recs in parts.items():
        writer.add_text(f"corpus/{name}", json.dumps(stats.get(name, {})))
        writer.add_scalar(f"corpus/{name}/mean_tokens", float(recs.lens.mean()) if len(recs) else 0.0, 0)
    evaluate = CaptionCheck(args, tr, writer)

    info = {"args": dataclasses.asdict(args), "run_name": run_name, "corpus_dir": str(cdir), "corpus_stats": stats,
            "corpus_seconds": t_corpus, "fast_path": tr.fast,
            "corpus": {n: r.kinds() for n, r in parts.items()}}
    if args.init_from and (parent := checkpoint_info(init_path(args))):
        info["parent"] = parent  # the lineage: what the starting weights were trained on (training_budgets reads it)
    if state is not None:
        model.load_state_dict(state["model"])
        info.update(state.get("info_done", {}))

    def save(stage_name, step, train_s, alloc_s, opt, history, info_done=None):
        save_state(out, key, model, stage_name, step, train_s, alloc_s, opt, history,
                   info_done if info_done is not None else {k: info[k] for k in info if k.startswith("stage1")})

    s1, s2 = build_stages(args, parts, deadline)

    def stopped_early(r, alloc_s):
        """Stage 1 out of time: keep what is learned (``base``) and the state to resume from; say so."""
        save("stage1", r["steps"], r["seconds"], alloc_s, r["opt"], r["history"],
             info_done={k: info[k] for k in info if k.startswith("stage1")})
        print(f"[sft] {args.tool_prior}: stage1 stopped by the {r['stopped']} after {r['steps']} steps; "
              f"re-run the same command to resume", file=sys.stderr)
        writer.close()
        save_checkpoint(str(out / "base"), model, tok, proc)
        return out / "base"

    if state is None or state["stage"] == "stage1":
        r = train_stage(tr, s1, args, writer, deadline=min(deadline - 10.0 * math.isfinite(deadline), stop),
                        state=state, save_state=save, evaluate=evaluate)
        info.update(stage1_steps_done=r["steps"], stage1_seconds=r["seconds"], stage1_loss=r["history"]["loss"],
                    stage1_eval=r["history"]["eval"])
        if r["stopped"]:
            return stopped_early(r, s1.alloc_s)
        if not args.eval_every or r["steps"] % args.eval_every:
            info["stage1_eval"].append(dict(step=r["steps"], **evaluate("stage1", r["steps"])))
        save_checkpoint(str(out / "base"), model, tok, proc)
        state = None
        save("stage2", 0, 0.0, math.inf, torch.optim.AdamW(model.parameters()), {"loss": [], "eval": []})
    r = train_stage(tr, s2, args, writer, deadline=stop, state=state, save_state=save, evaluate=evaluate)
    info.update(stage2_steps_done=r["steps"], stage2_seconds=r["seconds"], stage2_loss=r["history"]["loss"],
                stage2_eval=r["history"]["eval"])
    if not r["stopped"] and (not args.eval_every or r["steps"] % args.eval_every):
        info["stage2_eval"].append(dict(step=r["steps"], **evaluate("stage2", r["steps"])))
    return finish_cold_start(out, r, info, save, model, tok, proc, writer, t_start, args.tool_prior)


def _child(args_dict: dict) -> None:
    main(Args(**args_dict))


def main_both(args: Args, t_start: float, deadline: float) -> Path:
    """One corpus for both priors (rendered here with ``--workers``), then the strong and the weak
    build in two processes side by side (on one GPU they share it), into ``<out>/strong`` and
    ``<out>/weak``."""
    import multiprocessing as mp

    prepare_corpus(args, corpus_plan(args, ("strong", "weak")), progress=args.progress)
    procs = []
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    for i, prior in enumerate(("strong", "weak")):
        device = f"cuda:{i % gpus}" if gpus > 1 else args.device  # one GPU each when there are several
        child = dataclasses.replace(args, tool_prior=prior, out=str(Path(args.out) / prior), workers=0, device=device,
                                    corpus_dir=str(resolve_corpus_dir(args)),
                                    deadline_unix=deadline if math.isfinite(deadline) else 0.0)
        # the target is imported by name in the child, so take it from the importable ``trainers.sft``
        # (this file may run as ``__main__`` or be loaded from its path)
        target = importlib.import_module("trainers.sft")._child
        p = mp.get_context("spawn").Process(target=target, args=(dataclasses.asdict(child),), name=f"sft-{prior}")
        p.start()
        procs.append((prior, p))
    failed = []
    for prior, p in procs:
        p.join()
        if p.exitcode != 0:
            failed.append(f"{prior} (exit code {p.exitcode})")
    if failed:
        raise SystemExit(f"[sft] build failed: {', '.join(failed)}")
    print(f"[sft] both priors built in {time.time() - t_start:.0f} s -> {args.out}/{{strong,weak}}", file=sys.stderr)
    return Path(args.out)


def wants_recipe(argv) -> bool:
    """The command builds a whole recipe (``--recipe``: trainers.supervised.recipe), not one build."""
    return any(a == "--recipe" or a.startswith("--recipe=") for a in argv)


if __name__ == "__main__":
    if wants_recipe(sys.argv[1:]):
        from trainers.supervised.recipe import main as recipe_main

        recipe_main(sys.argv[1:])
    else:
        main(parse_args())
