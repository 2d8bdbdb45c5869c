"""Stock vs fast path (agents/lmm/fast_qwen.py) for the tiny Qwen2.5-VL at 56x56 frames, side by side.

    python benchmarks/speed_fast_path.py                                  # CPU, batch 64
    python benchmarks/speed_fast_path.py --device cuda                     # batch 256 and 1024

Three measurements, each run for the stock path (TransformersPolicy(fast=False): stock model code,
PIL image processor) and the fast path (fast=True) on two copies of the same weights, interleaved
(stock, fast, fast, stock, ...; the first round is a warm-up and is not reported), medians over
`--repeats` rounds:

(a) pixel values for 256 frames at 56 px (no resize) and at 64 px (resized to 56, the env's default
    frame size): the PIL processor from numpy frames, result moved to the device, vs
    pixel_values_from_frames on uint8 frames already on the device;
(b) an SFT step (one batched forward, NLL of the assistant tokens, backward, AdamW step) on a
    batch of single-frame caption sequences and on a batch of 8-frame crop sequences (the
    sub-agent's input), pre-encoded as trainers/sft.py does;
(c) a GRPO-style step on a batch of env prompts (K = 8 overview frames at 56 px): encode the
    prompts (chat template + pixel values), generate up to 64 tokens (T = 0.7, same seed), then
    the log-prob forward and backward of the completed conversations.

Both copies see the same inputs and compute the same numbers (tests/test_fast_path.py), so with
the same seed they generate the same tokens; the table reports the counts. Writes
speed_fast_path_<device>.json and .md to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

if __name__ == "__main__" and not __package__:  # python benchmarks/speed_fast_path.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agents.lmm.fast_qwen import pixel_values_from_frames  # noqa: E402
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from paravt_env.multiagent import SUBAGENT_PROMPT  # noqa: E402
from paravt_env.sources import SyntheticDataset  # noqa: E402

DEFAULT_MODEL = "agents/lmm/checkpoints/tiny-strong/cold_start"
MODES = ("stock", "fast")


class Clock:
    """Wall time that waits for the device."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def caption_messages(episode, n_frames: int, size: int, rng: np.random.Generator) -> list[dict]:
    """A sub-agent caption sample as the SFT corpus builds it: crop frames (with timestamps) and the
    sub-agent prompt -> the world's truthful caption of exactly those frames."""
    src = episode.source
    start = float(rng.uniform(0, src.duration - 20))
    crop = src.crop(start, start + 16, 1.0, n_frames, (size, size))
    content = []
    for img, t in zip(crop.images, crop.timestamps):
        content += [{"type": "text", "text": f"<{t:.1f} seconds>"}, {"type": "image", "image": img}]
    content.append({"type": "text", "text": "\n" + SUBAGENT_PROMPT.format(a=start, b=start + 16,
                                                                           question=episode.question.prompt())})
    return [{"role": "user", "content": content}, {"role": "assistant", "content": src.caption(crop.timestamps)}]


def encode(policy, messages):
    conv = policy.start(messages[:-1])
    return conv.append_completion(policy.completion_from_text(messages[-1]["content"]))


def env_prompts(n: int, size: int) -> list[list[dict]]:
    import gymnasium as gym
    import paravt_env  # noqa: F401  (registers the env)
    env = gym.make("ParaVT-LongVideo-v0", frame_budget=8, frame_size=(size, size))
    out = []
    for i in range(n):
        _, info = env.reset(seed=i)
        out.append(info["messages"])
    env.close()
    return out


def token_logprobs(policy, convs, temperature: float, amp: bool):
    """(log-probs of every next token, loss mask on the assistant tokens), one batched forward and
    vectorised over the batch (a per-row loss loop would cost the same on both paths and hide the
    difference on a GPU)."""
    batch = policy._batch([c.token_ids for c in convs], convs)
    n = batch["input_ids"].shape[1]
    mask = torch.zeros((len(convs), n), dtype=torch.float32)
    for i, c in enumerate(convs):
        mask[i, n - len(c):] = torch.tensor(c.generated_mask, dtype=torch.float32)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = policy.model(**batch, use_cache=False).logits[:, :-1]
    lp = torch.log_softmax(logits.float() / temperature, -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return lp, mask[:, 1:].to(lp.device)


def sft_step(policy, opt, convs, amp: bool) -> None:
    lp, mask = token_logprobs(policy, convs, 1.0, amp)
    loss = -(lp * mask).sum() / mask.sum().clamp(min=1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def grpo_step(policy, prompts, amp: bool, clock: Clock) -> dict:
    t0 = clock()
    convs = [policy.start(m) for m in prompts]
    t1 = clock()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        comps = policy.generate(convs, temperature=0.7, max_new_tokens=64, seed=0)
    t2 = clock()
    for c, comp in zip(convs, comps):
        c.append_completion(comp)
    lp, mask = token_logprobs(policy, convs, 0.7, amp)
    loss = -(lp * mask).sum() / mask.sum().clamp(min=1)
    policy.model.zero_grad(set_to_none=True)
    loss.backward()
    t3 = clock()
    return {"encode": t1 - t0, "generate": t2 - t1, "logprob_fwd_bwd": t3 - t2, "total": t3 - t0,
            "new_tokens": sum(sum(c.generated_mask) for c in comps)}


def count_ops(fn) -> int:
    """ATen operators dispatched while `fn` runs (forward and backward): each is a kernel launch or
    a host-side step, the currency of a launch-bound GPU step; independent of machine load."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counter.n += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        fn()
    return Counter.n


def interleaved(fns: dict, repeats: int) -> dict:
    """fns: mode -> callable returning seconds (or a dict of seconds). Round 0 is a warm-up."""
    samples = {m: [] for m in fns}
    for r in range(repeats + 1):
        order = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for m in order:
            out = fns[m]()
            if r > 0:
                samples[m].append(out)
    res = {}
    for m, xs in samples.items():
        if isinstance(xs[0], dict):
            res[m] = {k: statistics.median(x[k] for x in xs) for k in xs[0]}
        else:
            res[m] = {"seconds": statistics.median(xs)}
    return res


def run(a) -> dict:
    device = torch.device(a.device)
    clock = Clock(device)
    if a.threads:
        torch.set_num_threads(a.threads)
    amp = device.type == "cuda" and not a.fp32
    policies = {m: TransformersPolicy(a.model, device=device, fast=(m == "fast")) for m in MODES}
    proc = policies["stock"].image_processor
    results = {"device": a.device, "threads": torch.get_num_threads(), "model": a.model, "frame_size": a.size,
               "bf16_autocast": amp, "repeats": a.repeats, "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
               "cpu": platform.processor() or platform.machine(), "images": {}, "sft": {}, "grpo": {}}

    # (a) pixel values
    rng = np.random.default_rng(0)
    for src_size in (a.size, 64):
        frames = rng.integers(0, 256, (256, src_size, src_size, 3), dtype=np.uint8)
        on_device = torch.from_numpy(frames).to(device)

        def stock_px():
            t0 = clock()
            out = proc(images=list(frames), return_tensors="pt")
            out["pixel_values"].to(device), out["image_grid_thw"].to(device)
            return clock() - t0

        def fast_px():
            t0 = clock()
            pixel_values_from_frames(on_device, proc)
            return clock() - t0

        results["images"][f"256 frames {src_size}px"] = interleaved({"stock": stock_px, "fast": fast_px}, a.repeats)

    # (b) SFT steps
    episodes = SyntheticDataset(split="train", seed=0)
    for batch in a.batch:
        for n_frames, label in ((1, "single-frame captions"), (8, "8-frame crop captions")):
            rng = np.random.default_rng(batch * 10 + n_frames)
            msgs = [caption_messages(episodes[i % len(episodes)], n_frames, a.size, rng) for i in range(batch)]
            convs = {m: [encode(p, x) for x in msgs] for m, p in policies.items()}
            assert [c.token_ids for c in convs["stock"]] == [c.token_ids for c in convs["fast"]]
            # lr 0: the full AdamW step runs but the two copies keep equal weights for part (c)
            opts = {m: torch.optim.AdamW(p.model.parameters(), lr=0.0) for m, p in policies.items()}
            for p in policies.values():
                p.model.train()

            def timed(m):
                def f():
                    t0 = clock()
                    sft_step(policies[m], opts[m], convs[m], amp)
                    return clock() - t0
                return f

            r = interleaved({m: timed(m) for m in MODES}, a.repeats)
            r["tokens_per_batch"] = sum(len(c) for c in convs["stock"])
            if batch == a.batch[0]:  # counting slows a step down; once per sequence kind is enough
                r["aten_ops_per_step"] = {m: count_ops(lambda m=m: sft_step(policies[m], opts[m], convs[m], amp))
                                          for m in MODES}
            results["sft"][f"{label}, batch {batch}"] = r
            for p in policies.values():
                p.model.eval()

    # (c) GRPO-style steps
    for batch in a.grpo_batch:
        prompts = env_prompts(batch, a.size)
        r = interleaved({m: (lambda m=m: grpo_step(policies[m], prompts, amp, clock)) for m in MODES}, a.repeats)
        results["grpo"][f"{batch} prompts, K=8"] = r
    return results


def markdown(res: dict) -> str:
    dev = res["gpu"] or f"CPU ({res['cpu']})"
    lines = [f"Stock vs fast path, tiny Qwen2.5-VL, {res['frame_size']}x{res['frame_size']} frames, {res['device']} "
             f"({dev}, {res['threads']} threads{', bf16 autocast' if res['bf16_autocast'] else ', fp32'}), median of "
             f"{res['repeats']} interleaved rounds after a warm-up"
             + (f"; load average {res['load_average_1min_at_end']:.1f} at the end" if res.get("load_average_1min_at_end")
                is not None else "") + ".", "",
             "| measurement | stock s | fast s | speed-up | ATen ops per step, stock / fast |", "|---|---|---|---|---|"]

    def row(name, s, f, ops=None):
        counts = "" if ops is None else f"{ops['stock']:,} / {ops['fast']:,}"
        lines.append(f"| {name} | {s:.4f} | {f:.4f} | {s / f:.1f}x | {counts} |")

    for k, r in res["images"].items():
        row(f"pixel values, {k}", r["stock"]["seconds"], r["fast"]["seconds"])
    for k, r in res["sft"].items():
        row(f"SFT step (fwd+bwd+AdamW), {k} ({r['tokens_per_batch']} tokens)", r["stock"]["seconds"],
            r["fast"]["seconds"], r.get("aten_ops_per_step"))
    for k, r in res["grpo"].items():
        s, f = r["stock"], r["fast"]
        row(f"GRPO step, {k}: encode prompts", s["encode"], f["encode"])
        row(f"GRPO step, {k}: generate <= 64 tokens ({int(s['new_tokens'])} / {int(f['new_tokens'])} new)",
            s["generate"], f["generate"])
        row(f"GRPO step, {k}: log-prob fwd+bwd", s["logprob_fwd_bwd"], f["logprob_fwd_bwd"])
        row(f"GRPO step, {k}: total", s["total"], f["total"])
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint directory (the tiny model's architecture)")
    p.add_argument("--batch", default="", help="SFT batch sizes, comma-separated (default: 64 on cpu, 256,1024 on cuda)")
    p.add_argument("--grpo-batch", default="", help="GRPO prompts per step, comma-separated "
                   "(default: 16 on cpu, 256 on cuda)")
    p.add_argument("--size", type=int, default=56, help="frame size in pixels")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per measurement (after one warm-up)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--fp32", action="store_true", help="on cuda, no bf16 autocast")
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch sees no GPU")
    a.batch = [int(x) for x in (a.batch or ("64" if a.device == "cpu" else "256,1024")).split(",")]
    a.grpo_batch = [int(x) for x in (a.grpo_batch or ("16" if a.device == "cpu" else "256")).split(",")]
    t0 = time.time()
    res = run(a)
    res["wall_seconds"] = time.time() - t0
    res["load_average_1min_at_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, f"speed_fast_path_{a.device}")
    with open(base + ".json", "w") as f:
        json.dump(res, f, indent=1)
    md = markdown(res)
    with open(base + ".md", "w") as f:
        f.write(md)
    print(md)
    print(f"wrote {base}.json and .md ({res['wall_seconds']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
