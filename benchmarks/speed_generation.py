"""Generation speed of the default tiny LMM: new tokens per second at batch 64.

Compares TransformersPolicy.generate (stop strings + per-token behaviour log-probs) with a plain
``model.generate`` on the same model, same prompts, same run. Prompts are real env overviews
(validation split, K frames). Writes <--out>.json/.md (default: runs/benchmarks/speed_generation_<device>).

    python benchmarks/speed_generation.py                 # CPU
    python benchmarks/speed_generation.py --device cuda   # on a GPU machine
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # python benchmarks/speed_generation.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.default import default_checkpoint  # noqa: E402
from agents.lmm.evaluate_lmm import world_config_of  # noqa: E402
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from transformers import GenerationConfig  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", help="default: default_checkpoint('strong')")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--k", type=int, default=16, help="overview frames per prompt")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per sequence (no early stop)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=None, help="output path without extension (default: runs/benchmarks/speed_generation_<device>, untracked; --out benchmarks/results/speed_generation_<device> refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args(argv)
    path = a.checkpoint or str(default_checkpoint("strong"))
    policy = TransformersPolicy(path, device=a.device)
    wc = world_config_of(path)
    env = wc.env("validation", nframes_gating=False, frame_budget=a.k)
    convs = []
    for i in range(a.batch):
        _, info = env.reset(seed=i, options={"episode_index": i % len(env.unwrapped.dataset)})
        convs.append(policy.start(info["messages"]))
    sync = (lambda: torch.cuda.synchronize()) if a.device.startswith("cuda") else (lambda: None)

    def policy_run():  # no stop strings and no EOS, so every row makes new_tokens tokens
        out = policy.generate(convs, temperature=0.7, max_new_tokens=a.new_tokens, stop=(), seed=0)
        return sum(sum(c.generated_mask) for c in out)

    def plain_run():
        batch = policy._batch([c.token_ids + policy._encode("<think>\n") for c in convs], convs)
        cfg = GenerationConfig(do_sample=True, temperature=0.7, top_k=0, max_new_tokens=a.new_tokens,
                               min_new_tokens=a.new_tokens, pad_token_id=policy.pad_id, use_cache=True)
        out = policy.model.generate(**batch, generation_config=cfg)
        return (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]

    res = {"device": a.device, "batch": a.batch, "k": a.k, "prompt_tokens_mean": sum(map(len, convs)) / len(convs),
           "new_tokens": a.new_tokens, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "machine": platform.processor() or platform.machine(), "checkpoint": path}
    runs = (("TransformersPolicy.generate", policy_run), ("model.generate", plain_run))
    for _, fn in runs:
        fn()  # warm-up
    times = {name: [] for name, _ in runs}
    toks = {}
    for _ in range(a.repeats):  # interleaved, so a busy spell on the machine hits both samplers
        for name, fn in runs:
            sync(); t = time.time(); toks[name] = fn(); sync(); times[name].append(time.time() - t)
    for name, _ in runs:
        best = min(times[name])
        res[name] = {"seconds": best, "tokens": int(toks[name]), "tokens_per_s": toks[name] / best,
                     "all_seconds": times[name]}
        print(name, res[name], flush=True)
    stem = Path(a.out or f"runs/benchmarks/speed_generation_{a.device.split(':')[0]}")
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
    md = (f"Generation speed, tiny LMM, batch {a.batch}, K={a.k} overview frames "
          f"(~{res['prompt_tokens_mean']:.0f} prompt tokens), {a.new_tokens} new tokens, T=0.7, {a.device}, "
          f"{res['threads']} threads (prefill included).\n\n| sampler | seconds | new tokens | tokens/s |\n|---|---|---|---|\n")
    for name in ("TransformersPolicy.generate", "model.generate"):
        r = res[name]
        md += f"| {name} | {r['seconds']:.2f} | {r['tokens']} | {r['tokens_per_s']:.0f} |\n"
    stem.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
