"""Two-stage supervised build of the tiny LMM that sees (CleanRL style: one readable file).

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
autocast on CUDA with ``--amp true``, fp32 with TF32 matmuls otherwise), and take the
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
         traces; fp32 with TF32 matmuls (``--amp false``), stage-1 lr 6e-4, batches of up to 256
         sequences / 65,536 padded tokens, the first 60 % of stage 1 on captions only, and a
         540 s budget for the whole run (corpus included), so ``--tool-prior both`` fits one
         10-minute GPU call. Give it a longer ``--time-budget-s`` when you can: frame F1 was still
         rising at the end of the v4 runs.

The v4 cold starts were built by the gpu preset's recipe on a host with two H200s
(``--tool-prior both`` gives each prior its own GPU when there are several: strong on cuda:0, weak
on cuda:1; on one H200 the two share it, not measured):

    python trainers/sft.py --preset gpu --tool-prior both --time-budget-s 455 --workers 28 \
        --batch-size 256 --batch-tokens 65536 --stage1-lr 6e-4 --perception-warmup 0.6 \
        --eval-every 500 --amp false

    corpus (252,500 samples, 28 workers) 43 s; each build ~15 steps/s, ~4,900 stage-1 steps in
    ~5.7 min, then 200 stage-2 steps in 17 s. Frame object F1 0.79 / 0.73 (strong / weak) at the
    end of stage 1, still rising; 0.59 / 0.57 after stage 2 at lr 1e-3.
    Settings that failed on the same GPU: bf16 autocast + lr 2e-3 + batch 1024 learned no objects
    (frame F1 0.000 at the end); bf16 + lr 1e-3 + batch 256 went NaN at step ~700 (non-finite
    steps are now skipped and counted, but fp32 avoids them).

The shipped v5 cold starts (``agents/lmm/checkpoints/tiny-{strong,weak}``) continue v4 over three
more calls (``benchmarks/gpu_suite.sh``; each call's logs and results in
``benchmarks/results/gpu/sft_v5/``), each ``--init-from`` the last build's ``{prior}/cold_start``:

    v5a  --init-from shipped(v4) --perception-warmup 0.2 --stage2-lr 4e-4                 ~2,700 steps
    v5b  --perception-warmup 0 --workers 28 --answer-weight 10 --stage1-frame 20000 \
         --stage1-caption 30000 --stage1-direct 40000 --stage1-tool 24000                 ~3,000 steps
    v5c  the same with --stage1-frame 30000 --stage1-caption 40000 --stage2-lr 4e-4       ~1,000 steps

    v5d_weak  the shipped weak cold start: v5c's weak stage-1 weights (``<v5c>/weak/base``) + 10
              stage-2 steps of batch 64 at lr 4e-4 (the weak_L10 build of benchmarks/cold_start_length.py:
              ``--init-from <v5c>/weak/base --stage1-steps 0 --stage2-steps 10 --batch-size 64``);
              the 200-step one taught the seeing weak model to call tools (kappa 1.9), 10 steps keep
              the weak base's habit (kappa 0.00, format 1.00)

    validation (benchmarks/perception.py on the GPU), strong / weak:
                          frame F1     crop F1      direct answers (overview shows it)
      v5a                 0.96 / 0.98  0.97 / 0.95  0.20 / 0.18
      v5b                 0.89 / 0.99  0.86 / 0.90  0.40 / 0.16
      v5c (shipped strong) 0.92 / 0.98  0.91 / 0.91  0.47 / 0.17
      v5d_weak (shipped weak)     0.95         0.91         0.23
    Perception came from more stage-1 steps; answers from ``--answer-weight`` and more answer data
    (one token in ~100 decides an answer). Stage 2 at 1e-3 costs caption F1 (v5b); at 4e-4 it
    keeps it. Continue with ``--init-from DIR/{prior}/cold_start``.

    v6 strong (shipped before v7; benchmarks/results/gpu/recall/ and benchmarks/results/sft_v6/): v5 strong + recall rows
    and reading drills on one H200 (``--init-from shipped --stage1-recall 100000 --stage1-reading 30000
    --grounded-think true --answer-weight 10 ...``, 1,423 steps; then ``--recall-warmup-steps 800
    --recall-warmup-share 0.5``, 2,686 steps), then on the CPU 300 caption-only steps (lr 1e-4), 30 stage-2
    steps with ``--grounded-think true`` (lr 2e-4) and 150 caption-only steps (lr 5e-5): frame F1 0.935, crop
    F1 0.936, direct answers 0.49, reading 0.58 (needle_attribute 1.00, needle at chance), tool gain 0.00.

    Drills (14 strong variants from the shipped v5c, ``benchmarks/gpu_variants.sh``,
    table in ``benchmarks/results/gpu/reading_drills/``): ~1,900 stage-1 steps with 40k reading
    drills and ``--grounded-think true`` lift reading (perception.py's ``reading_accuracy``) from
    0.125 to 0.56-0.63, all of it on needle_attribute (1.00; needle stays ~0.2); 1,100 steps with
    20k did not; the same steps on more ordinary tool traces did not either. No variant gained
    from its own tools (tool gain -0.07 to +0.05), and direct drills cost reading.

    Option think (benchmarks/results/option_think/): v6 + 401 CPU steps of reading drills with
    ``--grounded-think true --option-think true`` (the options restated, letter after object) beside
    captions: needle reading 0.17 -> 0.83, reading 0.92; crop F1 fell to 0.81 and K = 4 calls to 0. v6's CPU
    mending chain after it: frame F1 0.954, crop F1 0.924, needle reading 0.65, but kappa at K = 64 0.06;
    90 more stage-2 steps (lr 2e-4, --warmup 15) = strong v7 (shipped before v8): frame F1 0.954, crop F1 0.914,
    reading 0.93 (needle 0.85), direct answers 0.47, tool gain -0.02, kappa 1.42 / 1.21.

    Direct think (benchmarks/results/gpu/direct_think/: three calls on one H200, variants side by side through
    ``benchmarks/gpu_variants.sh``): the shipped strong v8 is v7 + 1,289 stage-1 steps
    (``--init-from shipped --answer-weight 10 --perception-warmup 0 --grounded-think true --option-think true
    --direct-think needle --oracle-fraction 0 --drill-weight 2 --stage1-frame 8000 --stage1-caption 24000
    --stage1-direct 6000 --stage1-tool 8000 --stage1-reading 16000 --stage1-direct-needle 16000 --stage1-lr 4e-4
    --stage2-lr 2e-4 --stage2-steps 100 --warmup 50``): frame F1 0.963, crop F1 0.930, direct answers 0.567,
    reading 1.00, tool gain +0.04, kappa 0.90. The weak v6 is the weak v5 + three such calls with
    ``--tool-prior weak --stage2-steps 10`` (no tool traces): frame F1 0.963, crop F1 0.960, direct answers 0.433,
    kappa 0.00. ``--direct-think all`` broke global answers (1.00 -> 0.35-0.40) and stays as a measured negative.
    Five training processes of this size ran out of memory on one H200; four fit with --batch-tokens 49152.

    Native rollouts (benchmarks/results/native_traces/): the strong v9 is v8 + 200 stage-2 steps with
    ``--stage2-native-traces 0.65 --native-think spread --grounded-think true --option-think true --direct-think
    needle --stage2-lr 4e-4 --batch-size 64``, then 150 caption-only steps at lr 5e-5: its format holds greedy
    (0.967) and breaks at T = 0.7 (0.645), the strong prior of the paper; direct answers fall to 0.400.

    Caption mends (benchmarks/results/caption_mend/): for the crops a default env hands the public Subagent
    (64 px frames, 16 per crop), 800 caption-only steps of batch 256 with ``--caption-max-frames 16
    --caption-aug-p 0.5`` (one H200). The shipped weak v7 is weak v6 + those steps at lr 1e-4 (default-env crop
    F1 0.873 -> 0.921). On the strong they also erase the format break, so the strong v10 is v9 + those
    steps at lr 3e-4, v9's native step again, and 150 caption-only steps on 16-frame crops at lr 5e-5:
    default-env crop F1 0.714 -> 0.869, format 0.968 greedy, 0.666 at T = 0.7. The shipped strong v11 is the same
    with a 300-step native step: format 0.960 greedy, 0.591 at T = 0.7, reading 0.93.

    python trainers/sft.py --tool-prior strong --out checkpoints/strong                    # CPU demo
    python trainers/sft.py --preset gpu --tool-prior strong --out checkpoints/gpu-strong   # one H200
    python trainers/sft.py --preset gpu --tool-prior both --out checkpoints/gpu            # both priors,
        one corpus, two training processes (one GPU each when there are two, else sharing it):
        checkpoints/gpu/{strong,weak}/cold_start
    tensorboard --logdir runs      # stage{1,2}/loss, .../loss/<part>, .../eval/frame_object_f1, .../eval/crop_object_f1

Writes ``<out>/base`` (after stage 1) and ``<out>/cold_start`` (after stage 2), each a
``save_checkpoint`` directory loadable by ``TransformersPolicy(path)``, plus ``sft_args.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import importlib
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.corpus import (KINDS, READING_FAMILIES, CaptionConfig, WorldConfig, merge_stats,  # noqa: E402
                               ZOOM_THINKS, tokenizer_texts, write_chunk)
from agents.lmm.default import cache_root, checkpoint_info  # noqa: E402
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from agents.lmm.tiny_qwen import build_image_processor, build_tiny_model, save_checkpoint  # noqa: E402
from agents.lmm.tokenizer import build_tokenizer  # noqa: E402
from paravt_env.questions import FAMILIES  # noqa: E402
from trainers.run_state import RunStateError, check_name, load_data_only  # noqa: E402

try:  # the batch-friendly forward and GPU pixel values (same numbers as the stock path)
    from agents.lmm.fast_qwen import enable_fast_path, pixel_values_from_frames
except ImportError:  # not there yet: the stock forward and the image processor
    enable_fast_path = pixel_values_from_frames = None


@dataclass
class Args:
    exp_name: str = field(default="sft", metadata={"help": "experiment name (part of the run name)"})
    seed: int = field(default=1, metadata={"help": "seed of corpora, init and batching"})
    tool_prior: str = field(default="strong", metadata={"help": "strong: many native tool traces in stage 1; weak: "
                                                        "few/none; both: one corpus, the two builds in two processes "
                                                        "(<out>/strong, <out>/weak)", "choices": ("strong", "weak", "both")})
    out: str = field(default="checkpoints/sft", metadata={"help": "output directory (base/ and cold_start/ go here)"})
    runs_dir: str = field(default="runs", metadata={"help": "TensorBoard root; the run goes to <runs_dir>/<run name>"})
    corpus_dir: str = field(default="", metadata={"help": "pre-rendered corpus folder (default: $PARAVT_CACHE or "
                                                  "~/.cache/paravt-gym, then corpus/<hash of the data settings>: "
                                                  "shared by builds with the same data)"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads (0 = torch default)"})
    device: str = field(default="cpu", metadata={"help": "torch device (cpu, cuda, cuda:1, ...)"})
    preset: str = field(default="cpu", metadata={"help": "cpu: the small default build; gpu: one H200, many more "
                                                 "samples, time-budgeted (explicit flags override the preset)",
                                                 "choices": ("cpu", "gpu")})
    workers: int = field(default=0, metadata={"help": "processes that pre-render the corpus (0 = in-process)"})
    amp: bool = field(default=True, metadata={"help": "bf16 autocast for forward/backward on CUDA (ignored on CPU)"})
    fast: bool = field(default=True, metadata={"help": "use agents.lmm.fast_qwen (fast forward + pixel values) when "
                                               "it is installed"})
    time_budget_s: float = field(default=0.0, metadata={"help": "wall-clock budget of the whole run in seconds, corpus "
                                                        "included (0 = none): stage 1 ends in time for stage 2; a hard "
                                                        "stop at the budget still saves"})
    deadline_unix: float = field(default=0.0, metadata={"help": "absolute stop time (unix seconds) instead of "
                                                        "--time-budget-s; --tool-prior both passes it to its builds"})
    stage2_share: float = field(default=0.12, metadata={"help": "share of the time left after the corpus kept for "
                                                        "stage 2 (with --time-budget-s)"})
    init_from: str = field(default="", metadata={"help": "start from these weights instead of a random init: a "
                                                "checkpoint folder ({prior} in the path is replaced by the tool "
                                                "prior), or 'shipped' for the shipped cold start of the prior; its "
                                                "tokenizer must be this corpus's; its frame size, crop frames and "
                                                "budgets carry over unless given. Builds on one GPU call across "
                                                "several (see the module docstring)"})
    grow_layers: int = field(default=0, metadata={"help": "with --init-from: insert this many decoder layers, each a "
                                                  "copy of the layer below with its output projections zeroed, so "
                                                  "the grown model starts computing exactly what its parent did "
                                                  "(agents.lmm.tiny_qwen.grow_depth); 4 doubles the tiny model's "
                                                  "4 layers (7.8 MB)"})
    checkpoint_every_s: float = field(default=90.0, metadata={"help": "save the resumable run state every N seconds"})
    # world
    world_seed: int = field(default=0, metadata={"help": "synthetic world seed (train split for corpora)"})
    frame_size: int = field(default=56, metadata={"help": "frame height = width in pixels (56 -> 4 visual tokens)"})
    crop_max_frames: int = field(default=8, metadata={"help": "frames per crop in tool traces (the env's setting)"})
    budgets: str = field(default="4,8", metadata={"help": "overview sizes K drawn for training episodes (comma list)"})
    vocab_size: int = field(default=2048, metadata={"help": "BPE vocabulary size"})
    # captions (the sub-agent skill)
    caption_max_frames: str = field(default="8,16", metadata={"help": "crop captions: frames per crop, drawn from "
                                                              "this comma list"})
    caption_max_len: float = field(default=240.0, metadata={"help": "crop captions: longest window (s)"})
    caption_aug_p: float = field(default=0.25, metadata={"help": "captions: share rendered at 64x64 (the env default) "
                                                         "and fitted to --frame-size like the image processor does"})
    # stage 1
    stage1_frame: int = field(default=200, metadata={"help": "stage 1: single-frame caption samples"})
    stage1_caption: int = field(default=150, metadata={"help": "stage 1: crop caption samples"})
    stage1_direct: int = field(default=300, metadata={"help": "stage 1: direct-answer samples (ParaVT <answer> format)"})
    stage1_tool: int = field(default=400, metadata={"help": "stage 1: native-dialect tool traces (strong prior)"})
    stage1_episodes: int = field(default=4000, metadata={"help": "stage 1 draws train episodes [0, N), stage 2 [N, end)"})
    stage1_reading: int = field(default=0, metadata={"help": "stage 1: reading drills (agents.lmm.corpus): tool "
                                                     "traces on needle questions whose only target is the answer "
                                                     "after the responses; episodes beyond the train split's first "
                                                     "dataset_size. The weak prior gets --weak-tool-fraction of them"})
    stage1_direct_needle: int = field(default=0, metadata={"help": "stage 1: direct-answer drills: needle and "
                                                           "needle_attribute questions whose overview shows the "
                                                           "needle (fresh episodes, like the reading drills)"})
    stage1_recall: int = field(default=0, metadata={"help": "stage 1: text-only associative-recall rows "
                                                    "(agents.lmm.corpus.recall_records): dense practice of the "
                                                    "in-context lookup that reading a tool response needs; both priors"})
    stage1_presence: int = field(default=0, metadata={"help": "stage 1: text-only presence probes "
                                                      "(agents.lmm.corpus.presence_probe): reading drills about random "
                                                      "objects whose answer turn is the presence chain; on text the "
                                                      "check forms where real drills alone did not "
                                                      "(benchmarks/results/presence/)"})
    presence_weight: float = field(default=1.0, metadata={"help": "stage 1: sampling weight of the presence probes"})
    recall_weight: float = field(default=1.0, metadata={"help": "stage 1: sampling weight of the recall rows "
                                                        "relative to their size"})
    recall_warmup_steps: int = field(default=0, metadata={"help": "stage 1 opens with this many steps at "
                                                          "--recall-warmup-lr, --recall-warmup-share of them on recall "
                                                          "rows: the lookup forms in a few hundred dense steps; mixed "
                                                          "in at the stage-1 rate it did not form in 1,400 "
                                                          "(benchmarks/results/gpu/recall/)"})
    recall_warmup_lr: float = field(default=1e-3, metadata={"help": "learning rate of those steps (linear warm-up, "
                                                            "then constant)"})
    recall_warmup_share: float = field(default=0.5, metadata={"help": "share of those steps on recall rows; the rest "
                                                              "sample the other parts as usual (rehearsal: 1,000 "
                                                              "recall-only steps at 1e-3, share 1, made the model "
                                                              "forget how to see)"})
    drill_no_tool_share: float = field(default=0.0, metadata={"help": "stage 1: share of the direct-answer drills "
                                                              "played with no tool advertised (the env's tools=False "
                                                              "prompt): reading the overview is practised where it "
                                                              "does not compete with calling. Drills only: "
                                                              "--stage1-direct answers keep the tool prompt"})
    drill_decisions: bool = field(default=True, metadata={"help": "stage 1: the reading and direct-answer drills "
                                                          "train the tokens where a turn decides between calling and "
                                                          "answering (the first think token, <answer> after "
                                                          "</think>); false leaves them as context "
                                                          "(agents.lmm.corpus.decision_positions). Drills only "
                                                          "(--stage1-reading, --stage1-direct-needle)"})
    drill_weight: float = field(default=1.0, metadata={"help": "stage 1: sampling weight of the reading and direct "
                                                       "drills relative to their size"})
    oracle_fraction: float = field(default=0.25, metadata={"help": "tool traces played by the oracle (the rest: "
                                                           "--search-agent)"})
    search_agent: str = field(default="scene", metadata={"help": "the fair agent of the tool traces and reading "
                                                          "drills. scene: one turn of parallel crops tiling the named "
                                                          "scene; zoom: two turns whose window ends are numbers it "
                                                          "was shown, no arithmetic; sweep: zoom's two turns, the "
                                                          "first always the whole video (agents/scripted.py)",
                                                          "choices": ("scene", "zoom", "sweep")})
    count_order_think: bool = field(default=False, metadata={"help": "a tool trace on a counting or temporal-order "
                                                              "question closes with the reading of its crops step by "
                                                              "step (the scene's objects, then their number; each "
                                                              "option's first time, then the earlier one: "
                                                              "agents.lmm.corpus.count_order_line) instead of a fixed "
                                                              "line; with --tool-families including those families"})
    zoom_think: str = field(default="scene", metadata={"help": "the think line of a trace's later tool turns (zoom "
                                                       "and sweep). scene: \"I need a closer look during the X "
                                                       "scene.\"; sighting: the scene as the last responses print "
                                                       "it, times and all, so the calls copy their ends from "
                                                       "beside it (agents.lmm.corpus.zoom_line)",
                                                       "choices": ZOOM_THINKS})
    reading_oracle_fraction: float = field(default=0.5, metadata={"help": "reading drills played by the oracle (one "
                                                                  "response to read; the rest: --search-agent, "
                                                                  "whose crops return several objects). Drills train "
                                                                  "no call, so the oracle's windows teach none"})
    grounded_think: bool = field(default=False, metadata={"help": "tool traces: the answer after tool turns first "
                                                                  "thinks what the crops show of the question's needle "
                                                                  "('The crops show a white star.'; "
                                                                  "agents.lmm.corpus.grounded_after_tool)"})
    option_think: bool = field(default=False, metadata={"help": "with --grounded-think: on multiple-choice questions "
                                                        "that line first restates the options with each letter "
                                                        "after its object and ends with the letter ('A. red star A; "
                                                        "B. white star B. The crops show a white star B.'), so "
                                                        "matching the object to its option is a forward copy"})
    presence_think: bool = field(default=False, metadata={"help": "with --grounded-think: the answer after tool "
                                                          "turns on needle questions thinks a yes/no check per "
                                                          "candidate up to the answer ('A. red star: no; B. white "
                                                          "circle: yes.'; colour questions check every colour with "
                                                          "the named shape; agents.lmm.corpus.presence_line): one "
                                                          "lookup per check instead of one search over every "
                                                          "object the responses list. Direct answers keep the "
                                                          "restated options"})
    scene_presence: bool = field(default=False, metadata={"help": "with --presence-think: the chain also checks the "
                                                          "scene each named candidate is seen in, and only the "
                                                          "question's scene says yes ('B. orange star: sky scene, "
                                                          "no; C. yellow diamond: meadow scene, yes.'; "
                                                          "agents.lmm.corpus.scene_presence_line), so wide crops "
                                                          "that name other scenes' rivals are read right; the "
                                                          "presence probes (--stage1-presence) take that form too"})
    direct_think: str = field(default="none", metadata={"help": "direct answers first think what the overview "
                                                       "shows (agents.lmm.corpus.grounded_direct; options restated "
                                                       "with --option-think). needle: on needle questions ('The "
                                                       "overview shows a white star.'); all: on global ones too "
                                                       "('The overview shows the cave scene.'): the object or scene "
                                                       "is named before its option is matched; needle_time: the "
                                                       "needle line opens with its frame's time ('At 27.6 s the "
                                                       "overview shows a white star.'); presence: the needle line "
                                                       "is the presence chain of the overview (--presence-think's "
                                                       "form); transcribe_presence: the line first lists the "
                                                       "needles the overview shows ('The overview shows red star, "
                                                       "blue circle.'), then checks the candidates against that text; "
                                                       "scene: the overview's frames of the question's scene "
                                                       "captioned first (in first tool turns too), then the needle "
                                                       "line read off that caption; scene_compact: the same with "
                                                       "only the objects' names (no positions, times or span), short "
                                                       "enough for 64-token turns; scene_span: those names after the "
                                                       "scene's span; scene_chain: the compact names, then the "
                                                       "presence chain of them instead of the needle line; "
                                                       "scene_chain_calls: that line opens first tool turns too "
                                                       "(a call after the overview's own reading); "
                                                       "scene_chain_decide: first tool turns say the decision to "
                                                       "call, then that line",
                                                       "choices": ("none", "needle", "needle_time", "all", "presence",
                                                                   "transcribe_presence", "scene", "scene_compact",
                                                                   "scene_span", "scene_chain", "scene_chain_calls",
                                                                   "scene_chain_decide")})
    keep_wrong: float = field(default=0.0, metadata={"help": "fraction of wrong-answer traces kept (0: all dropped)"})
    weak_tool_fraction: float = field(default=0.0, metadata={"help": "weak prior: share of --stage1-tool native traces "
                                                             "it sees (the native-dialect knob)"})
    native_think: str = field(default="fixed", metadata={"help": "native dialect: how its turns open. fixed: the "
                                                     "ParaVT think lines; varied: one of several openers of its own "
                                                     "per decision (agents.lmm.corpus.NATIVE_THINK), so the first "
                                                     "token of a turn picks the dialect; spread: six per decision, "
                                                     "each with a first token of its own "
                                                     "(NATIVE_THINK_SPREAD)",
                                                     "choices": ("fixed", "varied", "spread")})
    native_close_think_p: float = field(default=0.3, metadata={"help": "native dialect: probability a turn closes </think>"})
    answer_weight: float = field(default=1.0, metadata={"help": "loss weight of the answer's own tokens (inside "
                                                        "<answer>...</answer>, or after a native 'Answer:'), relative to "
                                                        "the other assistant tokens: one token in ~100 decides the answer, "
                                                        "so at 1 the model learns the markup long before it learns to answer"})
    tool_weight: float = field(default=1.0, metadata={"help": "stage 1: sampling weight of the native-trace part "
                                                      "relative to its size (>1 = more native practice)"})
    perception_warmup: float = field(default=0.3, metadata={"help": "stage 1: share of its progress trained on "
                                                            "captions only (seeing first)"})
    stage1_steps: int = field(default=400, metadata={"help": "stage 1 optimiser steps (at most)"})
    stage1_lr: float = field(default=2e-3, metadata={"help": "stage 1 peak learning rate (cosine, linear warm-up)"})
    # stage 2
    stage2_tool: int = field(default=300, metadata={"help": "stage 2: ParaVT-format tool traces (parallel calls)"})
    stage2_native_share: float = field(default=0.0, metadata={"help": "stage 2: probability that each format marker "
                                                              "of a tool trace or direct answer (</think>, a call's "
                                                              "wrapper, the answer's wrapper) is written in the "
                                                              "native dialect: a cold start that leaves the "
                                                              "native habit beside the ParaVT one (one prior at a "
                                                              "time)"})
    tool_on_visible: float = field(default=0.0, metadata={"help": "share of the tool traces (stage 2's, and stage 1's "
                                                          "native ones) drawn where the overview already shows the "
                                                          "evidence: calls it made needless, the strong prior's "
                                                          "habit. With --direct-think scene_chain_calls such a call "
                                                          "follows the overview's own reading, answer and all"})
    tool_families: str = field(default="", metadata={"help": "comma-separated question families of the tool traces "
                                                     "(stage 2's, and stage 1's native ones); empty: all. With "
                                                     "--search-agent sweep, needle,needle_attribute keeps only "
                                                     "traces whose second turn zooms into the named scene, so "
                                                     "answering after one turn is not the habit they teach"})
    stage2_native_traces: float = field(default=0.0, metadata={"help": "stage 2: share of the tool traces and direct "
                                                               "answers played wholly in the native dialect "
                                                               "(turns opened per --native-think): the native "
                                                               "habit kept as whole rollouts beside the ParaVT "
                                                               "one, picked by a turn's first tokens (one prior "
                                                               "at a time)"})
    stage2_sighting: int = field(default=0, metadata={"help": "stage 2: text-only drills of the second tool turn "
                                                      "(agents.lmm.corpus.sighting_probe): --search-agent's traces "
                                                      "of needle questions on fresh videos (as the drills), cut "
                                                      "after that turn, its only target, frames left out; dense "
                                                      "practice of the scene lookup its calls need"})
    sighting_frames: bool = field(default=False, metadata={"help": "--stage2-sighting drills keep the overview's "
                                                           "frames, as the real turn has them"})
    stage2_fresh: bool = field(default=False, metadata={"help": "stage 2 draws its episodes from 60,000 fresh train "
                                                       "episodes (about 10,000 videos past the world's dataset size "
                                                       "and the drills') instead of [--stage1-episodes, dataset "
                                                       "size), about 333 videos: a build trained through several "
                                                       "native steps on them answered those 0.99 from the overview "
                                                       "and unseen videos 0.71"})
    stage2_rows: str = field(default="", metadata={"help": "stage 2: one more part, read from a folder of corpus "
                                                 "chunks (chunk_*.npz), e.g. a model's own rollouts written by "
                                                 "benchmarks/cold_start_lineage/self_distill.py --rows-out; trained "
                                                 "on, the rollouts of the start model hold the build near it"})
    stage2_rows_weight: float = field(default=1.0, metadata={"help": "--stage2-rows' sampling weight (1: as often as "
                                                             "its share of the batches)"})
    stage2_direct: int = field(default=150, metadata={"help": "stage 2: ParaVT-format direct answers"})
    stage2_frame: int = field(default=20, metadata={"help": "stage 2: single-frame captions (rehearsal)"})
    stage2_caption: int = field(default=30, metadata={"help": "stage 2: crop captions (keeps the sub-agent skill)"})
    stage2_steps: int = field(default=100, metadata={"help": "stage 2 (cold start) optimiser steps: its length"})
    stage2_lr: float = field(default=1e-3, metadata={"help": "stage 2 peak learning rate"})
    stage2_fit: bool = field(default=False, metadata={"help": "with a time budget or deadline: stage 2's schedule "
                                                     "ends by it, so steps that would not fit end with the learning "
                                                     "rate annealed instead of cut mid-schedule"})
    # optimisation
    batch_size: int = field(default=8, metadata={"help": "sequences per step at most"})
    batch_tokens: int = field(default=65536, metadata={"help": "padded tokens per step at most"})
    warmup: int = field(default=10, metadata={"help": "warm-up steps of each stage"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient-norm clip"})
    log_every: int = field(default=10, metadata={"help": "TensorBoard scalar period (steps)"})
    eval_every: int = field(default=0, metadata={"help": "greedy held-out caption F1 every N steps (0 = end of "
                                                 "each stage only)"})
    eval_frames: int = field(default=0, metadata={"help": "held-out single frames of that quick eval (0 = none)"})
    eval_crops: int = field(default=0, metadata={"help": "held-out crops of that quick eval (0 = none)"})
    eval_max_new_tokens: int = field(default=128, metadata={"help": "tokens per caption in that quick eval"})
    progress: bool = field(default=True, metadata={"help": "show tqdm progress bars"})

    def world(self) -> WorldConfig:
        return WorldConfig(world_seed=self.world_seed, frame_size=(self.frame_size, self.frame_size),
                           crop_max_frames=self.crop_max_frames)

    def budget_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in str(self.budgets).split(",") if x.strip())

    def tool_family_tuple(self) -> tuple[str, ...]:
        families = tuple(x.strip() for x in str(self.tool_families).split(",") if x.strip())
        if unknown := sorted(set(families) - set(FAMILIES)):
            raise ValueError(f"--tool-families: unknown families {unknown}; known: {list(FAMILIES)}")
        return families

    def caption_config(self) -> CaptionConfig:
        return CaptionConfig(max_frames=tuple(int(x) for x in str(self.caption_max_frames).split(",") if x.strip()),
                             max_len=self.caption_max_len, aug_p=self.caption_aug_p)


# Settings of each preset; an explicit command-line flag (or keyword to ``Args``/``with_preset``) wins.
PRESETS = {
    "cpu": {},
    # v4's recipe from a random init (the module docstring: v4, then the v5 continuations); bf16 and lr >= 1e-3 failed
    "gpu": dict(device="cuda", amp=False, budgets="4,8,16,32,64", workers=15, time_budget_s=540.0,
                stage1_frame=40000, stage1_caption=40000, stage1_direct=12000, stage1_tool=6000,
                stage1_steps=20000, stage1_lr=6e-4, perception_warmup=0.6,
                stage2_tool=3000, stage2_direct=1500, stage2_frame=1000, stage2_caption=2000,
                stage2_steps=200, stage2_lr=1e-3,
                batch_size=256, batch_tokens=65536, warmup=100, log_every=25, eval_every=500,
                eval_frames=128, eval_crops=64),
}

# Fields that do not change what is learned (a resumed run may differ in them).
RUNTIME_FIELDS = ("exp_name", "out", "runs_dir", "corpus_dir", "threads", "device", "workers", "progress",
                  "time_budget_s", "deadline_unix", "checkpoint_every_s", "log_every", "eval_every", "eval_frames", "eval_crops",
                  "eval_max_new_tokens",
                  "stage2_share")
# Fields that decide the pre-rendered corpus (its folder name hashes them).
DATA_FIELDS = ("seed", "world_seed", "frame_size", "crop_max_frames", "budgets", "vocab_size", "caption_max_frames",
               "caption_max_len", "caption_aug_p", "stage1_frame", "stage1_caption", "stage1_direct", "stage1_tool",
               "stage1_episodes", "stage1_reading", "stage1_direct_needle", "stage1_recall", "stage1_presence", "oracle_fraction", "reading_oracle_fraction", "search_agent", "grounded_think",
               "option_think", "presence_think", "scene_presence", "direct_think", "keep_wrong", "native_think", "native_close_think_p", "stage2_tool", "stage2_direct", "stage2_frame", "stage2_caption",
               "stage2_native_share", "stage2_native_traces", "drill_no_tool_share", "drill_decisions", "tool_on_visible",
               "tool_families", "zoom_think", "stage2_sighting", "sighting_frames", "stage2_fresh", "count_order_think")


def with_preset(args: Args, given=()) -> Args:
    """``args`` with its preset's values for every field not in ``given`` (explicitly set)."""
    preset = PRESETS[args.preset]
    return dataclasses.replace(args, **{k: v for k, v in preset.items() if k not in given})


def parse_args(argv=None, cls=Args):
    """Every dataclass field becomes ``--kebab-name`` with its help text and default; then the
    ``--preset``'s values fill every field not given explicitly."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(cls):
        name = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "") + f" (default: {f.default})"
        if f.type in (bool, "bool"):
            p.add_argument(name, default=f.default, help=helptext, type=lambda s: s.lower() in ("1", "true", "yes", "y"),
                           metavar="BOOL")
        else:
            typ = {"int": int, "float": float, "str": str}.get(f.type if isinstance(f.type, str) else f.type.__name__, str)
            p.add_argument(name, default=f.default, type=typ, help=helptext, choices=f.metadata.get("choices"))
    ns = vars(p.parse_args(argv))
    explicit = argparse.ArgumentParser(add_help=False)
    for a in p._actions:
        if a.option_strings and a.dest != "help":
            explicit.add_argument(*a.option_strings, dest=a.dest, default=argparse.SUPPRESS, type=str)
    given = set(vars(explicit.parse_known_args(argv)[0]))
    args = inherit_world(with_preset(cls(**ns), given), given)
    try:
        args.tool_family_tuple()
    except ValueError as e:
        p.error(str(e))
    return args


# The world a checkpoint was trained in: a continuation keeps it unless told otherwise.
INHERITED_FIELDS = ("frame_size", "crop_max_frames", "budgets")


def inherit_world(args: Args, given=()) -> Args:
    """``--init-from``: the parent's frame size, crop frames and overview sizes K (its ``sft_args.json``) for
    every one of them not given explicitly. Benchmarks read K and the frame size from the last build's record,
    so a short caption mend under the cpu preset (K in 4, 8) of a parent trained at K up to 64 would otherwise
    be measured at K = 8 and trained on frames of another size than its parent's."""
    if not args.init_from or args.tool_prior == "both":
        return args
    parent = checkpoint_info(init_path(args)).get("args", {})
    take = {k: parent[k] for k in INHERITED_FIELDS if k in parent and k not in given and parent[k] != getattr(args, k)}
    if take:
        print(f"[sft] --init-from: keeping the parent's {take} (give the flags to change them)", file=sys.stderr)
    return dataclasses.replace(args, **take)


# ============================================================================================
# the pre-rendered corpus
# ============================================================================================
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
LATE_DATA_FIELDS = {"grounded_think": False, "option_think": False, "presence_think": False, "scene_presence": False, "stage1_reading": 0, "stage1_direct_needle": 0,
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


class _Lock:
    """An exclusive lock file, so concurrent builds of one corpus render it once."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "w")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def prepare_corpus(args: Args, plan: dict, progress: bool = True):
    """(tokenizer, corpus folder, stats per part): the tokenizer (the same for both priors: it is
    trained on both dialects) and every chunk of ``plan``, rendered once into the corpus folder by
    ``args.workers`` processes; chunks already there are reused."""
    from transformers import AutoTokenizer

    cdir = resolve_corpus_dir(args)
    cdir.mkdir(parents=True, exist_ok=True)
    with _Lock(cdir / ".lock"):
        (cdir / "data_args.json").write_text(json.dumps({k: getattr(args, k) for k in DATA_FIELDS}, indent=1))
        tdir = cdir / "tokenizer"
        if not (tdir / "tokenizer.json").is_file():
            tok = build_tokenizer(tokenizer_texts(args.world()), vocab_size=args.vocab_size)
            tok.save_pretrained(str(tdir) + ".tmp")
            os.replace(str(tdir) + ".tmp", tdir)
        tok = AutoTokenizer.from_pretrained(str(tdir), local_files_only=True)
        from agents.lmm.tokenizer import CHAT_TEMPLATE
        tok.chat_template = tok.chat_template or CHAT_TEMPLATE
        jobs = [(name, j, c, kw, str(cdir / name / f"chunk_{j:05d}.npz")) for name, j, c, kw in chunk_jobs(args, plan)]
        for name in plan:
            (cdir / name).mkdir(exist_ok=True)
        jobs = [job for job in jobs if not Path(job[4]).is_file()]
        stats: dict[str, list] = {}
        work = sum(sum(_COST[k] * v for k, v in c.items() if k in _COST) for _, _, c, _, _ in jobs)
        with tqdm(total=work, desc="corpus", disable=not progress or not jobs, dynamic_ncols=True, mininterval=5) as bar:
            def done(name, c, st):
                stats.setdefault(name, []).append(st)
                bar.update(sum(_COST[k] * v for k, v in c.items() if k in _COST))
            if args.workers <= 1:
                for name, _, c, kw, path in jobs:
                    done(name, c, write_chunk(tok, c, kw, path))
            else:
                import concurrent.futures as cf
                import multiprocessing as mp
                with cf.ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as ex:
                    futs = {ex.submit(write_chunk, tok, c, kw, path): (name, c) for name, _, c, kw, path in jobs}
                    for f in cf.as_completed(futs):
                        done(*futs[f], f.result())
        stats_path = cdir / "stats.json"
        old = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
        merged = {name: merge_stats(([old[name]] if name in old else []) + stats.get(name, [])) for name in plan}
        stats_path.write_text(json.dumps(merged, indent=1))
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
        raise SystemExit(f"--stage2-rows {folder}: no chunk_*.npz there (write them with self_distill.py --rows-out)")
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


# ============================================================================================
# batches and the loss
# ============================================================================================
class Trainee:
    """The model being trained with what batches need: token ids of pads and images, the image
    processor (or the fast pixel-value builder) and the device."""

    def __init__(self, model, tokenizer, image_processor, device, fast: bool = True, answer_weight: float = 1.0):
        self.model, self.tokenizer, self.image_processor = model, tokenizer, image_processor
        self.answer_weight = float(answer_weight)
        self.answer_marks = answer_marks(tokenizer)
        self.device = torch.device(device)
        self.fast = bool(fast and enable_fast_path is not None)
        if self.fast:
            try:
                enable_fast_path(model)
            except Exception as exc:  # e.g. transformers internals it does not know: the stock path is still right
                print(f"[sft] fast path unavailable ({type(exc).__name__}: {exc}); using the stock forward",
                      file=sys.stderr)
                self.fast = False
        cfg = model.config
        self.image_token_id = cfg.image_token_id
        self.video_token_id = getattr(cfg, "video_token_id", None)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def pixel_values(self, frames: torch.Tensor):
        """(pixel_values, image_grid_thw) of uint8 frames (N, H, W, 3), on the frames' device."""
        if self.fast:
            return pixel_values_from_frames(frames, self.image_processor)
        out = self.image_processor(images=list(frames.cpu().numpy()), return_tensors="pt")
        return out["pixel_values"].to(frames.device), out["image_grid_thw"].to(frames.device)

    def collate(self, recs: Records, idx) -> dict:
        """Left-padded batch (as the policy pads) of sequences ``idx`` of ``recs``."""
        n, lens = len(idx), recs.lens[idx]
        width = int(lens.max())
        ids = np.full((n, width), self.pad_id, np.int64)
        attn = np.zeros((n, width), np.int64)
        lmask = np.zeros((n, width), np.bool_)
        for r, i in enumerate(idx):
            a, b = recs.tok_off[i], recs.tok_off[i + 1]
            ids[r, width - (b - a):] = recs.ids[a:b]
            attn[r, width - (b - a):] = 1
            lmask[r, width - (b - a):] = recs.mask[a:b]
        batch = {"input_ids": torch.from_numpy(ids).to(self.device), "attention_mask": torch.from_numpy(attn).to(self.device),
                 "loss_mask": torch.from_numpy(lmask).to(self.device)}
        if self.answer_weight != 1.0:
            weight = np.where(answer_token_mask(ids, lmask, self.answer_marks), self.answer_weight, 1.0)
            batch["loss_weight"] = torch.from_numpy(weight.astype(np.float32)).to(self.device)
        img = np.concatenate([np.arange(recs.img_off[i], recs.img_off[i + 1]) for i in idx])
        if len(img):
            sel = torch.from_numpy(img).to(recs.frames.device)
            batch["frames"] = recs.frames.index_select(0, sel).to(self.device)
        return batch

    def loss(self, batch: dict) -> tuple[torch.Tensor, int]:
        """Mean next-token cross-entropy over loss-mask tokens (assistant tokens), computing the
        vocabulary projection only where a target is; answer tokens count ``answer_weight`` times
        (the mean still divides by the number of tokens)."""
        ids = batch["input_ids"]
        mm = (ids == self.image_token_id).long()
        if self.video_token_id is not None:
            mm = mm + 2 * (ids == self.video_token_id).long()
        kw = dict(input_ids=ids, attention_mask=batch["attention_mask"], mm_token_type_ids=mm, use_cache=False)
        if "frames" in batch:
            pv, grid = self.pixel_values(batch["frames"])
            kw.update(pixel_values=pv.to(self.model.dtype), image_grid_thw=grid)
        hidden = self.model.model(**kw).last_hidden_state
        sel = batch["loss_mask"][:, 1:]
        logits = self.model.lm_head(hidden[:, :-1][sel]).float()
        if "loss_weight" not in batch:
            return F.cross_entropy(logits, ids[:, 1:][sel]), int(sel.sum())
        ce = F.cross_entropy(logits, ids[:, 1:][sel], reduction="none")
        return (ce * batch["loss_weight"][:, 1:][sel]).sum() / max(int(sel.sum()), 1), int(sel.sum())


def answer_marks(tokenizer) -> dict:
    """Token ids that open and close an answer: ``<answer>``/``</answer>`` and the native
    ``Answer:`` (as a token sequence), ``<|im_end|>`` ending a native answer."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    return dict(open=enc("<answer>"), close=enc("</answer>"), native=enc("Answer:"), end=enc("<|im_end|>"))


def answer_token_mask(ids: np.ndarray, loss_mask: np.ndarray, marks: dict) -> np.ndarray:
    """(batch, len) bool: assistant tokens that spell an answer, i.e. those after ``<answer>`` up
    to and including ``</answer>`` and those after a native ``Answer:`` up to the turn's end."""
    def ends_of(seq):  # positions where ``seq`` ends
        hit = np.zeros(ids.shape, np.bool_)
        if seq and ids.shape[1] >= len(seq):
            n = ids.shape[1] - len(seq) + 1
            run = np.ones((ids.shape[0], n), np.bool_)
            for j, t in enumerate(seq):
                run &= ids[:, j:j + n] == t
            hit[:, len(seq) - 1:] = run
        return hit
    pos = np.arange(ids.shape[1])
    opened = np.maximum.accumulate(np.where(ends_of(marks["open"]) | ends_of(marks["native"]), pos, -1), axis=1)
    closed = np.maximum.accumulate(np.where(ends_of(marks["close"]) | ends_of(marks["end"]), pos, -1), axis=1)
    inside = np.zeros(ids.shape, np.bool_)
    inside[:, 1:] = opened[:, :-1] > closed[:, :-1]  # opened before this token, not closed before it
    return inside & loss_mask


def nll_loss(policy, convs) -> tuple[torch.Tensor, int]:
    """Mean NLL over assistant tokens through the policy (``generated_mask``): the reference the
    batched loss is tested against."""
    lps = policy.conversation_logprobs(convs, temperature=1.0)
    total, n = 0.0, 0
    for lp, c in zip(lps, convs):
        m = torch.tensor(c.generated_mask, dtype=lp.dtype, device=lp.device)
        total = total + -(lp * m).sum()
        n += int(m.sum())
    return total / max(n, 1), n


# ============================================================================================
# training
# ============================================================================================
STATE_FILE = "train_state.pt"


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def learning_rate(peak: float, step: int, progress: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from ``peak`` to ``floor * peak`` over
    the stage's progress in [0, 1]."""
    warm = min(1.0, (step + 1) / max(1, warmup))
    return peak * warm * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@dataclass
class Stage:
    name: str                      # "stage1" | "stage2"
    parts: dict                    # part name -> Records
    weights: dict                  # part name -> sampling weight (relative to batches per epoch)
    steps: int                     # at most this many optimiser steps
    lr: float
    alloc_s: float = math.inf      # the schedule's time horizon (progress = max(step/steps, time/alloc))
    caption_only_until: float = 0.0  # progress below which only caption parts are sampled
    end_by: float = math.inf       # unix time by which this stage AND the next one's steps must be done
    next_steps: int = 0            # the next stage's step count (its time is kept free)
    next_share: float = 0.0        # share of the time before end_by kept for the next stage until
                                   # this stage's own step time is measured
    lead_part: str = ""            # the stage opens with ``lead_steps`` steps at ``lead_lr``, a share
    lead_steps: int = 0            # ``lead_share`` of them on this part (the rest sampled as usual)
    lead_lr: float = 0.0
    lead_share: float = 1.0

    def horizon(self, train_s: float, now: float, sec_per_step: float | None) -> float:
        """The training seconds this stage may take in all: up to ``end_by`` minus the time the
        next stage's steps will need (1.3x this stage's measured step time, +15 s). A last stage (no next
        steps: ``--stage2-fit``) keeps its 15 s from the first step, not only once its step time is measured:
        that shrank its horizon at once after 20 steps, cutting it with the learning rate still high."""
        if not math.isfinite(self.end_by):
            return self.alloc_s
        left = self.end_by - now
        known = sec_per_step or not self.next_steps  # measured, or no next steps to measure for
        keep = self.next_steps * (sec_per_step or 0.0) * 1.3 + 15.0 if known else left * self.next_share
        return max(train_s, train_s + left - keep)


def train_stage(tr: Trainee, stage: Stage, args: Args, writer, *, deadline: float, state: dict | None,
                save_state, evaluate) -> dict:
    """Train one stage (resuming from ``state`` if given); returns its record. Stops at its step
    count, at the end of its time horizon, or at the hard ``deadline`` (then ``stopped`` is set)."""
    model = tr.model
    amp = args.amp and tr.device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=stage.lr, weight_decay=args.weight_decay, betas=(0.9, 0.95))
    step, train_s, history = 0, 0.0, {"loss": [], "eval": []}
    if state:
        opt.load_state_dict(state["opt"])
        step, train_s, history = state["step"], state["train_seconds"], state["history"]
    rng = np.random.default_rng([args.seed, int(stage.name[-1]), step])  # the resume point fixes the data order
    batchers = {n: Batcher(r.lens, args.batch_size, args.batch_tokens, rng) for n, r in stage.parts.items() if len(r)}
    names = sorted(batchers)
    caption_parts = [n for n in names if n.endswith(("_frame", "_caption"))]
    share = np.array([batchers[n].per_epoch * stage.weights.get(n, 1.0) for n in names], np.float64)
    model.train()
    t_last_save = time.time()
    stopped = None
    # a time-bound stage has no known step count: the bar counts steps and shows the schedule's progress
    bar = tqdm(total=None if math.isfinite(stage.alloc_s) else stage.steps, initial=step,
               desc=f"{args.tool_prior} {stage.name}", disable=not args.progress, dynamic_ncols=True, mininterval=5)
    pending_loss = []
    skipped = 0
    step0, wall0 = step, time.time()
    while True:
        measured = (time.time() - wall0) / (step - step0) if step - step0 >= 20 else None
        stage.alloc_s = stage.horizon(train_s, time.time(), measured)
        progress = max(step / max(1, stage.steps), train_s / stage.alloc_s if stage.alloc_s > 0 else 1.0)
        if time.time() >= deadline:
            stopped = "time budget"
            break
        if progress >= 1.0 or stage.steps <= 0 or not names:  # e.g. --stage1-steps 0: a cold start from a base
            break
        t0 = time.time()
        lead = step < stage.lead_steps and stage.lead_part in batchers
        if lead and (stage.lead_share >= 1.0 or rng.random() < stage.lead_share):
            part = stage.lead_part
        else:
            allowed = caption_parts if progress < stage.caption_only_until and caption_parts else names
            allowed = [n for n in allowed if not lead or n != stage.lead_part] or allowed
            p = np.array([share[names.index(n)] for n in allowed])
            part = allowed[int(rng.choice(len(allowed), p=p / p.sum()))]
        lr = learning_rate(stage.lead_lr, step, 0.0, args.warmup) if lead else learning_rate(stage.lr, step, progress,
                                                                                             args.warmup)
        idx = batchers[part].next()
        for g in opt.param_groups:
            g["lr"] = lr
        batch = tr.collate(stage.parts[part], idx)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss, ntok = tr.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        if torch.isfinite(gnorm) and torch.isfinite(loss):
            opt.step()
        else:  # one non-finite batch (a bf16 overflow, an empty target) must not poison the weights
            skipped += 1
            if writer is not None:
                writer.add_scalar(f"{stage.name}/skipped_steps", skipped, step)
        step += 1
        pending_loss.append((part, loss.detach(), len(idx), ntok))
        if step % args.log_every == 0 or step == stage.steps:
            vals = torch.stack([x[1] for x in pending_loss]).float().cpu().tolist()
            mean = float(np.nanmean([v if math.isfinite(v) else np.nan for v in vals])) if any(
                math.isfinite(v) for v in vals) else float("nan")
            history["loss"].append((step, mean))
            if writer is not None:
                writer.add_scalar(f"{stage.name}/loss", mean, step)
                for n in {x[0] for x in pending_loss}:
                    writer.add_scalar(f"{stage.name}/loss/{n}", float(np.mean([v for x, v in zip(pending_loss, vals)
                                                                               if x[0] == n])), step)
                writer.add_scalar(f"{stage.name}/lr", lr, step)
                writer.add_scalar(f"{stage.name}/grad_norm", float(gnorm), step)
                writer.add_scalar(f"{stage.name}/progress", progress, step)
                writer.add_scalar(f"{stage.name}/sequences_per_step", float(np.mean([x[2] for x in pending_loss])), step)
            bar.set_postfix(loss=f"{mean:.3f}", progress=f"{progress:.0%}", refresh=False)
            pending_loss = []
        train_s += time.time() - t0
        if args.eval_every and step % args.eval_every == 0:
            t0 = time.time()
            history["eval"].append(dict(step=step, **evaluate(stage.name, step)))
            model.train()
            train_s += time.time() - t0
        bar.update(1)
        if time.time() - t_last_save >= args.checkpoint_every_s:
            save_state(stage.name, step, train_s, stage.alloc_s, opt, history)
            t_last_save = time.time()
    bar.close()
    model.eval()
    if skipped:
        print(f"[sft] {args.tool_prior} {stage.name}: {skipped} step(s) with a non-finite loss or gradient skipped",
              file=sys.stderr)
    return dict(steps=step, seconds=train_s, stopped=stopped, history=history, opt=opt, skipped=skipped)


def build_base(args: Args, tokenizer):
    """The model around ``tokenizer`` on ``args.device``: the tiny model at a random init, or ``--init-from``'s
    checkpoint in its own shape (a grown parent stays grown), then ``--grow-layers`` more layers."""
    if not args.init_from:
        return build_tiny_model(tokenizer, seed=args.seed).to(args.device)
    from agents.lmm.tiny_qwen import grow_depth, load_checkpoint

    path = init_path(args)
    if not (path / "config.json").is_file():
        raise SystemExit(f"--init-from {args.init_from}: {path} is not a checkpoint folder (no config.json)")
    model, init_tok, _ = load_checkpoint(str(path))
    if init_tok.get_vocab() != tokenizer.get_vocab():
        raise SystemExit(f"--init-from {path}: its tokenizer differs from this corpus's (another --vocab-size "
                         f"or corpus); continue from a checkpoint built with the same data settings")
    return grow_depth(model, args.grow_layers).to(args.device)


def init_path(args: Args) -> Path:
    if args.init_from == "shipped":
        from agents.lmm.default import shipped_checkpoint

        path = shipped_checkpoint(args.tool_prior)
        if path is None:
            raise SystemExit(f"--init-from shipped: no shipped {args.tool_prior} cold start in this checkout")
        return Path(path)
    return Path(args.init_from.replace("{prior}", args.tool_prior))


def state_key(args: Args) -> str:
    d = {k: v for k, v in dataclasses.asdict(args).items() if k not in RUNTIME_FIELDS}
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def main(args: Args) -> Path:
    """Build (or resume building) one prior's checkpoints; ``--tool-prior both`` builds two."""
    t_start = time.time()
    deadline = (args.deadline_unix if args.deadline_unix > 0 else
                t_start + args.time_budget_s if args.time_budget_s > 0 else math.inf)
    try:
        check_name("--exp-name", args.exp_name)
    except RunStateError as exc:
        raise SystemExit(f"error: {exc}") from None
    for flag in ("stage2_native_share", "stage2_native_traces", "drill_no_tool_share"):
        if not 0.0 <= getattr(args, flag) <= 1.0:
            raise SystemExit(f"--{flag.replace('_', '-')} must be in [0, 1], got {getattr(args, flag)}")
    for flag in ("option_think", "presence_think"):
        if getattr(args, flag) and not args.grounded_think:
            raise SystemExit(f"--{flag.replace('_', '-')} shapes the grounded think line: give it with "
                             "--grounded-think true")
    if args.grow_layers < 0 or (args.grow_layers and not args.init_from):
        raise SystemExit(f"--grow-layers {args.grow_layers}: give a count >= 0, with --init-from (it grows a trained "
                         "parent, keeping what the parent computes)")
    if args.scene_presence and not args.presence_think:
        raise SystemExit("--scene-presence shapes the presence chain: give it with --presence-think true")
    # The drill flags shape the drill parts only; a run that gives them without drills would silently train
    # ordinary direct answers (tool prompt, decisions trained) where the flags promise otherwise.
    if args.drill_no_tool_share and not args.stage1_direct_needle:
        raise SystemExit("--drill-no-tool-share shapes the direct-answer drills (--stage1-direct-needle), which this "
                         "run has none of; --stage1-direct answers are always played in the tool prompt")
    if not args.drill_decisions and not (args.stage1_direct_needle or args.stage1_reading):
        raise SystemExit("--drill-decisions false shapes the drills (--stage1-reading, --stage1-direct-needle), "
                         "which this run has none of")
    if args.tool_prior == "both" and args.stage2_rows:
        raise SystemExit("--stage2-rows are one model's rollouts: build one prior with them (--tool-prior strong or weak)")
    if args.tool_prior == "both" and (args.stage2_native_share or args.stage2_native_traces):
        raise SystemExit("--stage2-native-share/-traces shape one prior's cold start (the two priors share one "
                         "corpus): build that prior alone with --tool-prior strong or weak")
    if args.tool_prior == "both":
        return main_both(args, t_start, deadline)
    from torch.utils.tensorboard import SummaryWriter

    out = Path(args.out)
    state_path = out / STATE_FILE
    if (out / "cold_start" / "config.json").is_file() and (out / "sft_args.json").is_file() and not state_path.exists():
        print(f"[sft] {out} is already built (cold_start + sft_args.json); nothing to do", file=sys.stderr)
        return out / "cold_start"
    out.mkdir(parents=True, exist_ok=True)
    state = None
    if state_path.is_file():
        try:
            state = load_data_only(state_path)
        except RunStateError as exc:  # overwritten by this run's first save
            print(f"[sft] skipping {exc}; starting afresh", file=sys.stderr)
    if state is not None and state["key"] != state_key(args):
        raise SystemExit(f"{state_path} belongs to a run with other settings; resume with the same flags, or delete "
                         f"it (or pick another --out) to start afresh")
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

    plan = corpus_plan(args)
    tok, cdir, stats = prepare_corpus(args, plan, progress=args.progress)
    t_corpus = time.time() - t_start
    proc = build_image_processor()
    model = build_base(args, tok)
    tr = Trainee(model, tok, proc, args.device, fast=args.fast, answer_weight=args.answer_weight)
    if not tr.fast and tr.device.type == "cuda":
        print("[sft] agents.lmm.fast_qwen is not available (or --fast false): the stock forward and the PIL image "
              "processor are several times slower on the GPU", file=sys.stderr)
    parts = {}
    for name in plan:
        limit = (native_count(args, args.tool_prior) if name == "s1_native" else
                 native_count(args, args.tool_prior, args.stage1_reading) if name == "s1_reading" else None)
        if limit == 0:
            continue
        parts[name] = Records.load(cdir / name, limit).to(tr.device)
    if args.stage2_rows:
        parts["s2_rows"] = stage2_rows(args.stage2_rows).to(tr.device)
        if len(parts["s2_rows"]) and int(parts["s2_rows"].ids.max()) >= len(tok):
            raise SystemExit(f"--stage2-rows {args.stage2_rows}: token ids up to {int(parts['s2_rows'].ids.max())}, "
                             f"beyond this build's {len(tok)}-token vocabulary: rows written with another tokenizer")
    print(f"[sft] {args.tool_prior}: corpus ready in {t_corpus:.0f} s ({cdir}): " + ", ".join(
        f"{n} {len(r)}" for n, r in sorted(parts.items())), file=sys.stderr)
    for name, recs in parts.items():
        writer.add_text(f"corpus/{name}", json.dumps(stats.get(name, {})))
        writer.add_scalar(f"corpus/{name}/mean_tokens", float(recs.lens.mean()) if len(recs) else 0.0, 0)

    from agents.lmm.perception import caption_eval, caption_items
    from agents.lmm.subagent import Subagent
    wc = args.world()
    eval_sets = {"frame": caption_items(args.eval_frames, "frame", wc, seed=args.seed),
                 "crop": caption_items(args.eval_crops, "caption", wc, seed=args.seed)} if args.eval_frames + args.eval_crops else {}
    import inspect
    fast_kw = {"fast": tr.fast} if "fast" in inspect.signature(TransformersPolicy).parameters else {}
    eval_policy = TransformersPolicy(model, tok, proc, device=args.device, **fast_kw)
    sub = Subagent(eval_policy, frame_size=None, max_new_tokens=args.eval_max_new_tokens, batch_size=256)

    def evaluate(stage_name: str, step: int) -> dict:
        model.eval()
        res = {}
        for name, items in eval_sets.items():
            if items:
                r, _ = caption_eval(sub, items)
                res[f"{name}_object_f1"], res[f"{name}_scene_accuracy"] = r["object_f1"], r["scene_accuracy"]
        for k, v in res.items():
            writer.add_scalar(f"{stage_name}/eval/{k}", v, step)
        if res:
            print(f"[sft] {args.tool_prior} {stage_name} step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in res.items()),
                  file=sys.stderr)
        return res

    key = state_key(args)
    info = {"args": dataclasses.asdict(args), "run_name": run_name, "corpus_dir": str(cdir), "corpus_stats": stats,
            "corpus_seconds": t_corpus, "fast_path": tr.fast,
            "corpus": {n: r.kinds() for n, r in parts.items()}}
    if args.init_from and (parent := checkpoint_info(init_path(args))):
        info["parent"] = parent  # the lineage: what the starting weights were trained on (training_budgets reads it)
    if state is not None:
        model.load_state_dict(state["model"])
        info.update(state.get("info_done", {}))

    def save_state(stage_name, step, train_s, alloc_s, opt, history, info_done=None):
        _atomic_save(dict(key=key, stage=stage_name, step=step, train_seconds=train_s, alloc_seconds=alloc_s,
                          model=model.state_dict(), opt=opt.state_dict(), history=history,
                          info_done=info_done if info_done is not None else {k: info[k] for k in info
                                                                             if k.startswith("stage1")}), state_path)

    # Stage 1 runs until the time left is what stage 2's steps need (+ a final eval and save);
    # without a budget it runs its steps.
    s1 = Stage("stage1", {n: r for n, r in parts.items() if n.startswith("s1_")},
               {"s1_native": args.tool_weight, "s1_reading": args.drill_weight, "s1_direct_needle": args.drill_weight,
                "s1_recall": args.recall_weight, "s1_presence": args.presence_weight}, args.stage1_steps, args.stage1_lr,
               caption_only_until=args.perception_warmup, end_by=deadline - 10.0,
               next_steps=args.stage2_steps, next_share=args.stage2_share,
               lead_part="s1_recall", lead_steps=args.recall_warmup_steps, lead_lr=args.recall_warmup_lr,
               lead_share=args.recall_warmup_share)
    s2 = Stage("stage2", {n: r for n, r in parts.items() if n.startswith("s2_")}, {"s2_rows": args.stage2_rows_weight},
               args.stage2_steps, args.stage2_lr,
               end_by=deadline - 10.0 if args.stage2_fit else math.inf)
    def stopped_early(stage_name, r, alloc_s):
        """Out of time: keep what is learned (``base`` after a cut stage 1; ``cold_start`` marked
        ``stage2_stopped`` after a cut stage 2) and the state to resume from; say so."""
        save_state(stage_name, r["steps"], r["seconds"], alloc_s, r["opt"], r["history"],
                   info_done={k: info[k] for k in info if k.startswith("stage1")})
        print(f"[sft] {args.tool_prior}: {stage_name} stopped by the {r['stopped']} after {r['steps']} steps; "
              f"re-run the same command to resume", file=sys.stderr)
        writer.close()
        if stage_name == "stage1":
            save_checkpoint(str(out / "base"), model, tok, proc)
            return out / "base"
        save_checkpoint(str(out / "cold_start"), model, tok, proc)
        info.update(stage2_stopped=r["stopped"], total_seconds=time.time() - t_start)
        (out / "sft_args.json").write_text(json.dumps(info, indent=1))
        return out / "cold_start"

    if state is None or state["stage"] == "stage1":
        r = train_stage(tr, s1, args, writer, deadline=deadline - 10.0 * math.isfinite(deadline),
                        state=state, save_state=save_state, evaluate=evaluate)
        info.update(stage1_steps_done=r["steps"], stage1_seconds=r["seconds"], stage1_loss=r["history"]["loss"],
                    stage1_eval=r["history"]["eval"])
        if r["stopped"]:
            return stopped_early("stage1", r, s1.alloc_s)
        if not args.eval_every or r["steps"] % args.eval_every:
            info["stage1_eval"].append(dict(step=r["steps"], **evaluate("stage1", r["steps"])))
        save_checkpoint(str(out / "base"), model, tok, proc)
        state = None
        save_state("stage2", 0, 0.0, math.inf, torch.optim.AdamW(model.parameters()), {"loss": [], "eval": []})
    r = train_stage(tr, s2, args, writer, deadline=deadline, state=state, save_state=save_state, evaluate=evaluate)
    info.update(stage2_steps_done=r["steps"], stage2_seconds=r["seconds"], stage2_loss=r["history"]["loss"],
                stage2_eval=r["history"]["eval"], stage2_stopped=None)
    if r["stopped"]:
        return stopped_early("stage2", r, math.inf)
    if not args.eval_every or r["steps"] % args.eval_every:
        info["stage2_eval"].append(dict(step=r["steps"], **evaluate("stage2", r["steps"])))
    save_checkpoint(str(out / "cold_start"), model, tok, proc)
    info["total_seconds"] = time.time() - t_start
    (out / "sft_args.json").write_text(json.dumps(info, indent=1))
    state_path.unlink(missing_ok=True)
    writer.close()
    print(f"[sft] {args.tool_prior}: done in {info['total_seconds']:.0f} s -> {out / 'cold_start'}", file=sys.stderr)
    return out / "cold_start"


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


if __name__ == "__main__":
    main(parse_args())
