"""The cold start of a Qwen-VL checkpoint folder: ``trainers/sft.py --model DIR``.

The tiny builds first learn to see (stage 1) and then the ParaVT grammar (stage 2), on a tokenizer of their own. A
Qwen2.5-VL or Qwen3-VL sees already and speaks through its own tokenizer, so ``--model`` runs the cold start alone:
stage 2's parts (ParaVT tool traces with parallel calls, direct answers, crop and frame captions for the sub-agent
skill) plus the tool prior's native traces (``--tool-prior strong``: ``--stage1-tool`` traces in the model-native
dialect, ``weak``: a ``--weak-tool-fraction`` of them), trained together. Every conversation is rendered as
rollouts are (``agents.lmm.corpus.encode_sample`` through the policy): the folder's chat template, its tokenizer
with the grammar's tags made single tokens (``agents.lmm.tokenizer.add_structural_tokens``, the embeddings grown
when the new ids pass them), its image processor's visual tokens; the loss covers the assistant's tokens only
(``trainers.supervised.batches.Trainee``). ``<out>/cold_start`` is a checkpoint folder the trainers take as
``--model``.

Settings that follow such a model, each printed with its reason unless given (``with_model_settings``): frames as
large as its processor takes (at most 448 px), 16-frame crops, overviews of K drawn from 4..64, no stage-1 captions
or direct answers, a fine-tuning learning rate, the vision tower frozen, activation checkpointing, batches of at
most 32k padded tokens. The corpus's frames stay in host memory (at 448 px a K = 64 overview is 38 MB).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path

from trainers.supervised.args import Args

SETTINGS = {"stage1_frame": (0, "a model that sees needs no caption pretraining"),
            "stage1_caption": (0, "a model that sees needs no caption pretraining"),
            "stage1_direct": (0, "direct answers are part of the cold start"),
            "crop_max_frames": (16, "the paper's crops hold up to 16 frames"),
            "budgets": ("4,8,16,32,64", "the paper's overview sizes K"),
            "caption_aug_p": (0.0, "captions are rendered at the model's frame size"),
            "stage2_lr": (1e-5, "a pretrained model is fine-tuned at a small rate"),
            "batch_tokens": (32768, "a K = 64 overview is 16k visual tokens at 448 px"),
            "freeze_vision": (True, "the cold start teaches the grammar, not seeing"),
            "gradient_checkpointing": (True, "long multimodal sequences")}


def with_model_settings(args: Args, given=()) -> Args:
    """``args`` with the settings of a real model's cold start for every field not ``given``, each said on stderr."""
    from trainers.config import chosen_settings, flag_text

    settings = chosen_settings(args.model, SETTINGS, given)
    for k, (value, why) in settings.items():
        print(f"[sft] settings: {flag_text(k, value)}: {why} (--model)", file=sys.stderr)
    return dataclasses.replace(args, **{k: value for k, (value, _) in settings.items()})


def check_model_args(args: Args) -> None:
    """SystemExit for settings a --model cold start cannot take."""
    from trainers.run_state import model_dir_problem

    problem = model_dir_problem(args.model)
    if problem:
        raise SystemExit(f"--model {args.model}: {problem}")
    if args.tool_prior == "both" or args.init_from or args.grow_layers or args.stage2_rows:
        raise SystemExit("--model cold-starts one folder with one prior: give --tool-prior strong or weak, and no "
                         "--init-from, --grow-layers or --stage2-rows")


def trainee(args: Args):
    """The folder's model (fp32 weights on ``args.device``, prepared for training as the RL trainers prepare it:
    vision frozen and activation checkpointing per the flags), with its tokenizer (grammar tags added) and image
    processor, as a ``Trainee``."""
    from agents.lmm.tiny_qwen import load_checkpoint
    from agents.lmm.tokenizer import add_structural_tokens
    from trainers.core import prepare_model
    from trainers.supervised.batches import Trainee

    model, tok, proc = load_checkpoint(args.model, device=args.device)
    added = add_structural_tokens(tok, model)
    if added:
        print(f"[sft] {args.model}: the grammar's tags {added} added to its tokenizer as single tokens",
              file=sys.stderr)
    prepare_model(model, args)
    return Trainee(model, tok, proc, args.device, fast=args.fast, answer_weight=args.answer_weight)


def cold_start(args: Args, out: Path, key: str, state: dict | None, writer, t_start: float, deadline: float) -> Path:
    """Render the corpus with the model's own tokenizer and processor, train the cold start, write
    ``<out>/cold_start`` and the build record (``trainers/sft.py`` opened the run: out, state, writer)."""
    from trainers.supervised.checkpoints import finish_cold_start, save_state
    from trainers.supervised.data import corpus_plan, load_parts, prepare_corpus
    from trainers.supervised.loop import Stage, train_stage
    from trainers.supervised.quick_eval import CaptionCheck

    tr = trainee(args)
    model, tok, proc = tr.model, tr.tokenizer, tr.image_processor
    plan = corpus_plan(args)
    _, cdir, stats = prepare_corpus(args, plan, progress=args.progress, tokenizer=tok, image_processor=proc)
    t_corpus = time.time() - t_start
    parts = load_parts(args, plan, cdir, "cpu", len(tok))  # batches move their frames to the device
    parts = {n: r for n, r in parts.items() if n.startswith("s2_") or n == "s1_native"}
    print(f"[sft] {args.model}: corpus ready in {t_corpus:.0f} s ({cdir}): " + ", ".join(
        f"{n} {len(r)}" for n, r in sorted(parts.items())), file=sys.stderr)
    info = {"args": dataclasses.asdict(args), "corpus_dir": str(cdir), "corpus_stats": stats,
            "corpus_seconds": t_corpus, "fast_path": tr.fast, "corpus": {n: r.kinds() for n, r in parts.items()}}
    if state is not None:
        model.load_state_dict(state["model"])

    def save(stage_name, step, train_s, alloc_s, opt, history, info_done=None):
        save_state(out, key, model, stage_name, step, train_s, alloc_s, opt, history, info_done or {})

    stage = Stage("stage2", parts, {"s1_native": args.tool_weight}, args.stage2_steps, args.stage2_lr,
                  end_by=deadline - 10.0 if args.stage2_fit else math.inf)
    r = train_stage(tr, stage, args, writer, deadline=deadline, state=state, save_state=save,
                    evaluate=CaptionCheck(args, tr, writer))
    info.update(stage2_steps_done=r["steps"], stage2_seconds=r["seconds"], stage2_loss=r["history"]["loss"],
                stage2_eval=r["history"]["eval"], stage2_tokens=r["tokens"])
    return finish_cold_start(out, r, info, save, model, tok, proc, writer, t_start, args.model)
