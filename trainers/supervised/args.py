"""The settings of a supervised build (trainers/sft.py): every flag as a field of ``Args``, the presets, which
fields decide the pre-rendered corpus or may change on a resume, the command-line parser, and the checks that stop
a build before any work."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

from agents.lmm.corpus import CaptionConfig, WorldConfig, ZOOM_THINKS
from agents.lmm.default import checkpoint_info
from paravt_env.config import GATING_BUDGETS
from paravt_env.questions import FAMILIES
from trainers.config import add_config_flag, given_dests, read_command_line
from trainers.run_state import RunStateError, check_name

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
    stop_at_unix: float = field(default=0.0, metadata={"help": "save the state and stop at this unix time, the "
                                                      "schedule left as it is (0 = never): re-running the same "
                                                      "command continues where it stopped. --time-budget-s and "
                                                      "--deadline-unix instead fit the stages into the time"})
    stage2_share: float = field(default=0.12, metadata={"help": "share of the time left after the corpus kept for "
                                                        "stage 2 (with --time-budget-s)"})
    model: str = field(default="", metadata={"help": "a Qwen2.5-VL / Qwen3-VL checkpoint folder to cold-start "
                                         "instead of building the tiny model: the cold start alone (stage 2), on the "
                                         "folder's own tokenizer, chat template and image processor; settings that "
                                         "follow such a model are printed (trainers/supervised/real_model.py)"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in the backward "
                                                                  "pass (less memory, more time; same gradients)"})
    freeze_vision: bool = field(default=False, metadata={"help": "leave the vision tower's weights as they are"})
    init_from: str = field(default="", metadata={"help": "start from these weights instead of a random init: a "
                                                "checkpoint folder ({prior} in the path is replaced by the tool "
                                                "prior), or 'shipped' for the shipped cold start of the prior; its "
                                                "tokenizer must be this corpus's; its frame size, crop frames and "
                                                "budgets carry over unless given. A build longer than one GPU "
                                                "call continues this way over several"})
    grow_layers: int = field(default=0, metadata={"help": "with --init-from: insert this many decoder layers, each a "
                                                  "copy of the layer below with its output projections zeroed, so "
                                                  "the grown model starts computing exactly what its parent did "
                                                  "(agents.lmm.tiny_qwen.grow_depth); 4 doubles the tiny model's "
                                                  "4 layers (7.8 MB)"})
    checkpoint_every_s: float = field(default=90.0, metadata={"help": "save the resumable run state every N seconds"})
    # world
    world_seed: int = field(default=WorldConfig.world_seed,
                            metadata={"help": "synthetic world seed (train split for corpora)"})
    frame_size: int = field(default=WorldConfig.frame_size[0],
                            metadata={"help": "frame height = width in pixels (56 -> 4 visual tokens)"})
    crop_max_frames: int = field(default=WorldConfig.crop_max_frames,
                                 metadata={"help": "frames per crop in tool traces (the env's setting)"})
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
                                                      "objects whose answer turn is the presence chain; in earlier "
                                                      "builds the check formed on text where real drills alone did "
                                                      "not form it"})
    presence_weight: float = field(default=1.0, metadata={"help": "stage 1: sampling weight of the presence probes"})
    recall_weight: float = field(default=1.0, metadata={"help": "stage 1: sampling weight of the recall rows "
                                                        "relative to their size"})
    recall_warmup_steps: int = field(default=0, metadata={"help": "stage 1 opens with this many steps at "
                                                          "--recall-warmup-lr, --recall-warmup-share of them on recall "
                                                          "rows: in earlier builds the lookup formed in a few hundred "
                                                          "dense steps, and mixed in at the stage-1 rate it did not "
                                                          "form in 1,400"})
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
                                                 "trainers.supervised.self_distill.play_rows (self-distillation) or "
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
    # one H200 from a random init; fp32: in earlier builds bf16 autocast at lr >= 1e-3 learned no objects or went NaN
    "gpu": dict(device="cuda", amp=False, budgets=",".join(map(str, GATING_BUDGETS)), workers=15, time_budget_s=540.0,
                stage1_frame=40000, stage1_caption=40000, stage1_direct=12000, stage1_tool=6000,
                stage1_steps=20000, stage1_lr=6e-4, perception_warmup=0.6,
                stage2_tool=3000, stage2_direct=1500, stage2_frame=1000, stage2_caption=2000,
                stage2_steps=200, stage2_lr=1e-3,
                batch_size=256, batch_tokens=65536, warmup=100, log_every=25, eval_every=500,
                eval_frames=128, eval_crops=64),
}

# Fields that do not change what is learned (a resumed run may differ in them).
RUNTIME_FIELDS = ("exp_name", "out", "runs_dir", "corpus_dir", "threads", "device", "workers", "progress",
                  "time_budget_s", "deadline_unix", "stop_at_unix", "checkpoint_every_s", "log_every", "eval_every", "eval_frames", "eval_crops",
                  "eval_max_new_tokens",
                  "stage2_share")
# Fields that decide the pre-rendered corpus (its folder name hashes them).
DATA_FIELDS = ("model", "seed", "world_seed", "frame_size", "crop_max_frames", "budgets", "vocab_size", "caption_max_frames",
               "caption_max_len", "caption_aug_p", "stage1_frame", "stage1_caption", "stage1_direct", "stage1_tool",
               "stage1_episodes", "stage1_reading", "stage1_direct_needle", "stage1_recall", "stage1_presence", "oracle_fraction", "reading_oracle_fraction", "search_agent", "grounded_think",
               "option_think", "presence_think", "scene_presence", "direct_think", "keep_wrong", "native_think", "native_close_think_p", "stage2_tool", "stage2_direct", "stage2_frame", "stage2_caption",
               "stage2_native_share", "stage2_native_traces", "drill_no_tool_share", "drill_decisions", "tool_on_visible",
               "tool_families", "zoom_think", "stage2_sighting", "sighting_frames", "stage2_fresh", "count_order_think")


def with_preset(args: Args, given=()) -> Args:
    """``args`` with its preset's values for every field not in ``given`` (explicitly set)."""
    preset = PRESETS[args.preset]
    return dataclasses.replace(args, **{k: v for k, v in preset.items() if k not in given})


def parse_args(argv=None, cls=Args, description: str | None = None):
    """Every dataclass field becomes ``--kebab-name`` with its help text and default (a boolean: ``--name`` /
    ``--no-name``); ``--config FILE`` (YAML or JSON, a run's ``sft_args.json`` too) gives flags the command line
    can override; then the ``--preset``'s values fill every field not given explicitly. ``description`` heads
    ``--help``."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(p)
    for f in dataclasses.fields(cls):
        name = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "") + f" (default: {f.default})"
        if f.type in (bool, "bool"):
            p.add_argument(name, default=f.default, help=helptext, action=argparse.BooleanOptionalAction)
        else:
            typ = {"int": int, "float": float, "str": str}.get(f.type if isinstance(f.type, str) else f.type.__name__, str)
            p.add_argument(name, default=f.default, type=typ, help=helptext, choices=f.metadata.get("choices"))
    ns, argv = read_command_line(p, cls, argv)
    given = given_dests(p, argv)
    try:
        args = inherit_world(with_preset(cls(**ns), given), given)
        if args.model:
            from trainers.supervised.real_model import with_model_settings

            args = with_model_settings(args, given)
    except ValueError as e:  # a parent's build record or a --model's processor settings: one line naming the file
        p.exit(2, f"{p.prog}: error: {e}\n")
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


def init_path(args: Args) -> Path:
    """The folder ``--init-from`` names: ``{prior}`` replaced by the tool prior; ``shipped`` is the shipped cold
    start of the prior."""
    if args.init_from == "shipped":
        from agents.lmm.default import shipped_checkpoint

        path = shipped_checkpoint(args.tool_prior)
        if path is None:
            raise SystemExit(f"--init-from shipped: no shipped {args.tool_prior} cold start in this checkout")
        return Path(path)
    return Path(args.init_from.replace("{prior}", args.tool_prior))


def check_args(args: Args) -> None:
    """SystemExit, naming the flag, for settings that cannot run or would not do what they say; called before
    anything is written."""
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
                             "--grounded-think")
    if args.grow_layers < 0 or (args.grow_layers and not args.init_from):
        raise SystemExit(f"--grow-layers {args.grow_layers}: give a count >= 0, with --init-from (it grows a trained "
                         "parent, keeping what the parent computes)")
    if args.scene_presence and not args.presence_think:
        raise SystemExit("--scene-presence shapes the presence chain: give it with --presence-think")
    # The drill flags shape the drill parts only; a run that gives them without drills would silently train
    # ordinary direct answers (tool prompt, decisions trained) where the flags promise otherwise.
    if args.drill_no_tool_share and not args.stage1_direct_needle:
        raise SystemExit("--drill-no-tool-share shapes the direct-answer drills (--stage1-direct-needle), which this "
                         "run has none of; --stage1-direct answers are always played in the tool prompt")
    if not args.drill_decisions and not (args.stage1_direct_needle or args.stage1_reading):
        raise SystemExit("--no-drill-decisions shapes the drills (--stage1-reading, --stage1-direct-needle), "
                         "which this run has none of")
    if args.tool_prior == "both" and args.stage2_rows:
        raise SystemExit("--stage2-rows are one model's rollouts: build one prior with them (--tool-prior strong or weak)")
    if args.tool_prior == "both" and (args.stage2_native_share or args.stage2_native_traces):
        raise SystemExit("--stage2-native-share/-traces shape one prior's cold start (the two priors share one "
                         "corpus): build that prior alone with --tool-prior strong or weak")
