"""The perception check during a supervised build: greedy captions of held-out single frames (``--eval-frames``)
and crops (``--eval-crops``) by the model being trained, acting as the env's sub-agent, scored by
``agents.lmm.perception.caption_eval`` (object F1, scene accuracy) and logged to TensorBoard as
``<stage>/eval/frame_object_f1``, ``<stage>/eval/crop_object_f1``, ... every ``--eval-every`` steps and at the end of
each stage. ``benchmarks/perception.py`` is the full benchmark."""

from __future__ import annotations

import inspect
import sys

from agents.lmm.policy import TransformersPolicy
from trainers.supervised.args import Args
from trainers.supervised.batches import Trainee


class CaptionCheck:
    """``check(stage_name, step)``: the held-out caption scores of ``tr``'s model now (empty without eval sets),
    written to ``writer`` and said on stderr."""

    def __init__(self, args: Args, tr: Trainee, writer):
        from agents.lmm.perception import caption_items
        from agents.lmm.subagent import Subagent

        wc = args.world()
        self.sets = {"frame": caption_items(args.eval_frames, "frame", wc, seed=args.seed),
                     "crop": caption_items(args.eval_crops, "caption", wc, seed=args.seed)} \
            if args.eval_frames + args.eval_crops else {}
        fast_kw = {"fast": tr.fast} if "fast" in inspect.signature(TransformersPolicy).parameters else {}
        policy = TransformersPolicy(tr.model, tr.tokenizer, tr.image_processor, device=args.device, **fast_kw)
        self.sub = Subagent(policy, frame_size=None, max_new_tokens=args.eval_max_new_tokens, batch_size=256)
        self.model, self.writer, self.label = tr.model, writer, args.tool_prior

    def __call__(self, stage_name: str, step: int) -> dict:
        from agents.lmm.perception import caption_eval

        self.model.eval()
        res = {}
        for name, items in self.sets.items():
            if items:
                r, _ = caption_eval(self.sub, items)
                res[f"{name}_object_f1"], res[f"{name}_scene_accuracy"] = r["object_f1"], r["scene_accuracy"]
        for k, v in res.items():
            self.writer.add_scalar(f"{stage_name}/eval/{k}", v, step)
        if res:
            print(f"[sft] {self.label} {stage_name} step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in res.items()),
                  file=sys.stderr)
        return res
