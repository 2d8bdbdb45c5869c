"""Bring your own trainer: TRL's GRPOTrainer on ParaVT-LongVideo-v0 (single turn, no tool).

    pip install torch==2.13.0 && pip install -e ".[trl]"     # trl==1.16.0
    python examples/trl_grpo.py                              # shipped tiny strong-prior checkpoint, CPU
    python examples/trl_grpo.py --total-steps 10 --group-size 4 --model path/to/checkpoint
    tensorboard --logdir runs/trl_grpo__s1

What this file wires together, and nothing more:

- Dataset rows from the environment. The rows are the prompts that trainers/para_grpo.py draws
  in its first --total-steps steps when run with --no-tools --max-turns 1: the same reset seeds,
  so the same videos, questions and K. Each row holds the chat messages of ``info["messages"]``,
  with the frames moved to an ``images`` column as PIL images (TRL's vision-language format),
  and the answer columns that the reward needs.
- The reward is ``paravt_env.rewards.score``, split into three TRL reward functions (accuracy,
  format, tool) with weights 1 / w_fmt / 1. Their weighted sum is ``score(...).total``, and TRL
  logs each term (``rewards/paravt_accuracy/mean``, ...). The text scored is what the
  environment scores: the think prefix, then the completion's exact tokens decoded with special
  tokens kept.
- The model: the shipped tiny checkpoint, or any local Qwen2.5-VL-style checkpoint, loaded by
  transformers.

Four choices, and why:

- Prefill. The released PARA-GRPO prefills "<think>\\n" at the start of every assistant turn,
  and TRL has no prefill option. So the chat template's generation prompt here ends with
  "<think>\\n": those tokens are prompt tokens, never trained, which is how our trainer treats
  them too.
- Processor. TRL loads ``AutoProcessor.from_pretrained(model)`` by default. Without
  torchvision a Qwen2.5-VL processor cannot be built, because its video processor needs
  torchvision. When that load fails we pass TRL the same tokenizer and image processor,
  joined in a small processor class without the video part.
- Stops. Our sampler ends a turn at "</answer>". The tiny tokenizer has that tag as one token,
  so it joins the model's end-of-sequence ids, which TRL also stops at.
- Excluded tokens. The vision tokens are never sampled, as in trainers/core.py. They go to
  generate's ``suppress_tokens``, which applies at sampling time only, whereas our trainer also
  masks them in its training forward. Their probability under the shipped checkpoint is
  negligible: at most 4e-4 at any position of 16 sampled completions, 1e-5 on average.

The GRPO settings follow trainers/para_grpo.py's flags, with the same names and defaults: G,
prompts per step, temperature, new tokens, learning rate (held constant), weight decay,
gradient clipping, PPO clip, k3 KL to a frozen reference (TRL's ``beta``), a frozen vision
tower, and TRL's token-mean loss ("dapo"), which is our aggregation. What differs:
- advantages are normalised per group only; ours are then normalised over the batch as well;
- TRL has no log-prob anchor (``--anchor-mode logprob``); the anchor *bonus* is in the reward here;
- our sampler also ends a turn after --max-calls-per-turn closed tool calls, where TRL samples on
  to the token budget (rare here: no tool is advertised);
- our trainer runs the model through its batched fast path (agents/lmm/fast_qwen.py, same
  numbers); TRL runs the stock transformers code.
benchmarks/speed_trl.py times both trainers side by side on the same setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python examples/trl_grpo.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from paravt_env.config import THINK_PREFIX  # noqa: E402
from paravt_env.rewards import RewardConfig, score  # noqa: E402
from trainers import core, para_grpo  # noqa: E402
from trainers.config import _HelpFormatter, validate_args  # noqa: E402
from trainers.rollouts import derive_seed, make_env, reward_config  # noqa: E402

# para_grpo.Args fields that mean the same thing here; the example's flags are exactly these
# (same names, defaults and help) plus --out, --report-to and --logging-steps.
SHARED_FLAGS = ("model", "prior", "seed", "total_steps", "prompts_per_step", "group_size", "temperature", "top_p",
                "max_new_tokens", "frame_budget", "frame_size", "nframes_gating", "gating_budgets", "world_seed",
                "dataset_size", "think_prefix", "answer_suffix", "anchor_lambda", "penalty_gamma", "tool_reward",
                "format_weight", "learning_rate", "weight_decay", "max_grad_norm", "clip_eps", "kl_coef",
                "freeze_vision", "torch_threads")


# ============================================================================================
# arguments: a para_grpo.Args in the single-turn setting
# ============================================================================================
def single_turn_args(**overrides) -> para_grpo.Args:
    """para_grpo's arguments for the setting both trainers share: no tool advertised, one turn,
    the log-prob anchor off (TRL has no such loss term; the anchor *bonus* is in the reward)."""
    args = dataclasses.replace(para_grpo.Args(), tools=False, max_turns=1, anchor_mode="bonus", **overrides)
    validate_args(args)
    return args


def parse_args(argv=None) -> tuple[para_grpo.Args, argparse.Namespace]:
    help_of = {}
    for klass in reversed(para_grpo.Args.__mro__):
        if dataclasses.is_dataclass(klass):
            help_of.update({f.name: f.metadata.get("help", "") for f in dataclasses.fields(klass) if f.metadata})
    base = para_grpo.Args()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    for name in SHARED_FLAGS:
        default = getattr(base, name)
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_of.get(name, ""))
        else:
            p.add_argument(flag, type=type(default), default=default, help=help_of.get(name, ""))
    p.add_argument("--out", default="", help="output folder (default runs/trl_grpo__s<seed>): TRL's logs, "
                                             "TensorBoard events, and final_model/")
    p.add_argument("--report-to", default="tensorboard", help="TRL/transformers loggers: tensorboard, none, ...")
    p.add_argument("--logging-steps", type=int, default=1, help="log every N steps")
    ns = p.parse_args(argv)
    try:
        args = single_turn_args(**{name: getattr(ns, name) for name in SHARED_FLAGS})
    except ValueError as exc:
        p.error(str(exc))
    return args, ns


# ============================================================================================
# dataset rows from the environment
# ============================================================================================
def prompt_seeds(args, steps: int) -> list[int]:
    """The reset seeds trainers/para_grpo.py draws for its steps 1..steps (process 0), in order."""
    return [derive_seed(args.seed, step, 0, p) for step in range(1, steps + 1) for p in range(args.prompts_per_step)]


def episode_rows(args, steps: int) -> list[dict]:
    """One dataset row per prompt that our trainer would train on in its first `steps` steps."""
    from PIL import Image

    env = make_env(args, "train")
    rows = []
    try:
        for seed in prompt_seeds(args, steps):
            _, info = env.reset(seed=seed)
            q = env.episode.question
            prompt, images = [], []
            for m in info["messages"]:
                parts = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else []
                for part in [] if isinstance(m["content"], str) else m["content"]:
                    if part.get("type") == "image":
                        images.append(Image.fromarray(np.asarray(part["image"], dtype=np.uint8)))
                        parts.append({"type": "image", "text": None})  # TRL fills it from the images column
                    else:
                        parts.append({"type": "text", "text": part["text"]})
                prompt.append({"role": m["role"], "content": parts})
            rows.append({"prompt": prompt, "images": images, "ground_truth": q.answer, "answer_type": q.answer_type,
                         "options": list(q.options) if q.options else None, "question": q.text,
                         "question_id": q.id, "family": q.family, "frame_budget": int(info["frame_budget"]),
                         "reset_seed": int(seed)})
    finally:
        env.close()
    return rows


def build_dataset(args, steps: int):
    from datasets import Dataset

    return Dataset.from_list(episode_rows(args, steps))


# ============================================================================================
# the reward: paravt_env.rewards.score, one TRL reward function per term
# ============================================================================================
def reward_functions(tokenizer, config: RewardConfig, prefix: str = THINK_PREFIX):
    """(functions, weights) for GRPOConfig(reward_weights=...): accuracy, format and tool terms of
    ``score(prefix + completion)``, weighted so that their sum is ``score(...).total``. The
    completion is its exact token ids decoded with special tokens kept, as our trainer's
    environment sees it, and no tool ever runs in this setting (tool_executed=False)."""
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False) if prefix else []

    def breakdowns(completion_ids, ground_truth, answer_type, options, question):
        texts = [tokenizer.decode(prefix_ids + list(ids), skip_special_tokens=False) for ids in completion_ids]
        return texts, [score(t, ground_truth=gt, answer_type=at, options=opts or None, tool_executed=False,
                             config=config, question=qt)
                       for t, gt, at, opts, qt in zip(texts, ground_truth, answer_type, options, question, strict=True)]

    def paravt_accuracy(completion_ids, ground_truth, answer_type, options, question, log_extra=None,
                        log_metric=None, **_):
        texts, bs = breakdowns(completion_ids, ground_truth, answer_type, options, question)
        if log_extra is not None:  # what was scored, in TRL's completions table
            log_extra("scored_text", texts)
        if log_metric is not None:
            log_metric("paravt/correct", float(np.mean([b.correct for b in bs])))
        return [b.accuracy for b in bs]

    def paravt_format(completion_ids, ground_truth, answer_type, options, question, **_):
        return [b.format for b in breakdowns(completion_ids, ground_truth, answer_type, options, question)[1]]

    def paravt_tool(completion_ids, ground_truth, answer_type, options, question, **_):
        return [b.tool for b in breakdowns(completion_ids, ground_truth, answer_type, options, question)[1]]

    return [paravt_accuracy, paravt_format, paravt_tool], [1.0, float(config.format_weight), 1.0]


# ============================================================================================
# model and processor
# ============================================================================================
def _processor_class():
    from transformers import Qwen2_5_VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageTextProcessor(Qwen2_5_VLProcessor):
        """A Qwen2.5-VL processor with an image processor and a tokenizer only: the stock one
        also needs a video processor, which transformers cannot build without torchvision."""

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImageTextProcessor


def load_processor(path: str, tokenizer, image_processor):
    """The checkpoint's processor as TRL loads it by default (AutoProcessor); when that cannot be
    built (no torchvision) or lacks an image processor, the same tokenizer and image processor
    joined in ImageTextProcessor. Returns (processor, how it was obtained)."""
    from transformers import AutoProcessor
    from transformers.processing_utils import ProcessorMixin

    try:
        proc = AutoProcessor.from_pretrained(path, local_files_only=True)
        if isinstance(proc, ProcessorMixin) and getattr(proc, "image_processor", None) is not None:
            if proc.chat_template is None:
                proc.chat_template = tokenizer.chat_template
            return proc, "AutoProcessor.from_pretrained"
        problem = f"it returned a {type(proc).__name__} without an image processor"
    except (ImportError, OSError, ValueError, TypeError) as exc:
        problem = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"
    proc = _processor_class()(image_processor, tokenizer, chat_template=tokenizer.chat_template)
    return proc, f"explicit tokenizer + image processor (AutoProcessor.from_pretrained failed: {problem})"


def with_generation_prefix(processor, prefix: str) -> None:
    """Make the chat template's generation prompt end with `prefix` (TRL has no prefill option).
    Appends to the template, so it requires a template whose output ends with the generation
    prompt (Qwen-style templates do); anything else raises a ValueError rather than train on a
    prompt that silently lacks the prefix."""
    if not prefix:
        return
    def render(add_generation_prompt):
        probe = [{"role": "system", "content": [{"type": "text", "text": "s"}]}]
        return processor.apply_chat_template(probe, add_generation_prompt=add_generation_prompt, tokenize=False)

    template = processor.chat_template
    plain, prompted = render(False), render(True)
    processor.chat_template = template + "{%- if add_generation_prompt -%}{{ " + repr(prefix) + " }}{%- endif -%}"
    # the generation prompt must be the last thing rendered, and the prefix must land right after it
    if not (prompted.startswith(plain) and len(prompted) > len(plain) and render(True) == prompted + prefix):
        processor.chat_template = template
        raise ValueError("the chat template does not end with its generation prompt, so the think prefix cannot be "
                         "appended to it; pass --no-think-prefix or a Qwen-style template")


def load_model(path: str, args):
    """The checkpoint as a stock transformers model, fp32, set up as trainers/core.py sets up the
    policy: vision tower frozen (--freeze-vision), and "</answer>" as an end-of-sequence id
    where it is one token (our sampler's stop string)."""
    from transformers import AutoModelForImageTextToText

    from agents.lmm.tiny_qwen import load_checkpoint

    _, tokenizer, image_processor = load_checkpoint(path)  # validates the folder; gives tokenizer + processor
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32, local_files_only=True)
    if args.freeze_vision:
        for name, p in model.named_parameters():
            if ".visual." in f".{name}":
                p.requires_grad_(False)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    stop = tokenizer.encode("</answer>", add_special_tokens=False)
    if len(stop) == 1 and stop[0] not in eos:
        eos.append(stop[0])
    model.generation_config.eos_token_id = eos
    return model, tokenizer, image_processor


# ============================================================================================
# the trainer
# ============================================================================================
def build_trainer(args, out: str, *, steps: int | None = None, report_to: str = "none", logging_steps: int = 1,
                  trainer_cls=None, callbacks=(), dataset=None):
    """A GRPOTrainer for `args` (a single_turn_args() object) on the prompts of our trainer's first
    `steps` steps (default args.total_steps). Returns (trainer, info dict)."""
    from trl import GRPOConfig, GRPOTrainer

    steps = args.total_steps if steps is None else steps
    path = core.resolve_model(args)
    model, tokenizer, image_processor = load_model(path, args)
    processor, processor_source = load_processor(path, tokenizer, image_processor)
    if args.think_prefix:
        with_generation_prefix(processor, THINK_PREFIX)
    funcs, weights = reward_functions(tokenizer, reward_config(args), THINK_PREFIX if args.think_prefix else "")
    forbidden = [tokenizer.convert_tokens_to_ids(t) for t in core.FORBIDDEN_TOKENS]
    config = GRPOConfig(
        output_dir=out, seed=args.seed, max_steps=steps, num_train_epochs=1,
        per_device_train_batch_size=args.prompts_per_step * args.group_size, gradient_accumulation_steps=1,
        num_generations=args.group_size, shuffle_dataset=False,  # rows in our trainer's order
        max_completion_length=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, top_k=0,
        generation_kwargs={"suppress_tokens": forbidden},
        learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm,
        beta=args.kl_coef, epsilon=args.clip_eps, num_iterations=1, loss_type="dapo", scale_rewards="group",
        reward_weights=weights, bf16=False, fp16=False, gradient_checkpointing=False,
        logging_steps=logging_steps, report_to=report_to, save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0)
    trainer = (trainer_cls or GRPOTrainer)(
        model=model, reward_funcs=funcs, args=config, processing_class=processor,
        train_dataset=dataset if dataset is not None else build_dataset(args, steps), callbacks=list(callbacks))
    return trainer, {"model": path, "processor": processor_source, "tokenizer": tokenizer,
                     "image_processor": image_processor}


def main(argv=None):
    args, ns = parse_args(argv)
    torch.set_num_threads(args.torch_threads)  # as our trainer does: one thread is fastest for the tiny model
    out = Path(ns.out or Path(args.runs_dir) / f"trl_grpo__s{args.seed}")
    trainer, info = build_trainer(args, str(out), report_to=ns.report_to, logging_steps=ns.logging_steps)
    print(f"model {info['model']}\nprocessor: {info['processor']}", file=sys.stderr)
    trainer.train()
    from agents.lmm.tiny_qwen import save_checkpoint

    save_checkpoint(str(out / "final_model"), trainer.model, info["tokenizer"], info["image_processor"],
                    info={"step": args.total_steps, "trainer": "trl.GRPOTrainer"})
    print(f"trained model: {out / 'final_model'}", file=sys.stderr)
    return trainer.state.log_history


if __name__ == "__main__":
    main()
