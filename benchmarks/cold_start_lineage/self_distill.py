"""Self-distillation of a cold start (STaR-style rejection sampling): play the default run's episodes on the
TRAIN split with the checkpoint itself (greedy unless --temperature), keep the main agent's conversations that
answered right, and fine-tune on its own tokens there, with the grammar's tags left out of the loss (and, with a PIN,
their log-probs held where they were), meant to sharpen what it writes without mending its format under sampling (the
strong prior's mark). --openers decides what happens at each turn's first word, where the native dialect's openers
compete with the ParaVT lines. Then evaluate like the default run (validation
episodes, gated K, T = 0.6 and greedy).

    python benchmarks/cold_start_lineage/self_distill.py --out DIR [--model CKPT] --episodes 2048 --device cuda

Writes DIR/<LR>_<STEPS>/cold_start (checkpoints with the starting model's build record) and DIR/report.json."""
import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__" and not __package__:  # python benchmarks/cold_start_lineage/self_distill.py: the repo root on the path
    sys.path.insert(0, str(ROOT))

from trainers.para_grpo import Args  # noqa: E402
from trainers.core import (Dist, evaluation_records, load_policy, resolve_model,  # noqa: E402
                           starting_build_record)
from trainers.rollouts import episode_record, episode_stats, make_env  # noqa: E402
from trainers.supervised.self_distill import play, revoice_conversation, write_rows  # noqa: E402
from agents.lmm.corpus import NATIVE_OPENERS  # noqa: E402
from agents.lmm.tokenizer import SPECIAL_TOKENS, STRUCTURAL_TAGS  # noqa: E402

PIN_T = 0.7


def turn_openers(generated_mask) -> list[bool]:
    """True at the first generated token of each assistant turn (the think prefix is forced, so this is the think
    line's first word)."""
    return [bool(g) and (i == 0 or not generated_mask[i - 1]) for i, g in enumerate(generated_mask)]


def native_opener_ids(tokenizer) -> list[int]:
    """The first token of every native-dialect think opener the cold starts were taught."""
    return sorted({tokenizer.encode(line, add_special_tokens=False)[0] for style in NATIVE_OPENERS.values()
                   for lines in style.values() for line in lines})


def scores(policy, convs, native_ids) -> list[dict]:
    """One forward over `convs` (as ``policy.conversation_logprobs``), per conversation aligned with its tokens:
    ``lp`` the token's log-prob at T = 1, ``lp_pin`` at PIN_T, and the log of the total probability of the native
    openers' first tokens at T = 1 (``native``) and PIN_T (``native_pin``)."""
    firsts = [next((i for i, g in enumerate(c.generated_mask) if g), len(c)) for c in convs]
    tails = [len(c) - f for c, f in zip(convs, firsts)]
    keep = max(tails) + 1
    # the policy's own batching (private), so these are exactly the log-probs conversation_logprobs gives
    batch = policy._batch([c.token_ids for c in convs], convs)
    logits = policy.model(**batch, use_cache=False, logits_to_keep=keep).logits.float()
    native = torch.tensor(native_ids, device=logits.device)
    out = []
    for i, (c, n) in enumerate(zip(convs, tails)):
        step = logits[i, keep - 1 - n: keep - 1]
        target = torch.tensor(c.token_ids[len(c) - n:], device=logits.device)[:, None]
        row = {}
        for key, t in (("", 1.0), ("_pin", PIN_T)):
            logp = torch.log_softmax(step / t, -1)
            row["lp" + key] = logp.gather(1, target).squeeze(1)
            row["native" + key] = torch.logsumexp(logp[:, native], -1)
        out.append({k: torch.cat([v.new_zeros(len(c) - n), v]) for k, v in row.items()})
    return out


def evaluate(policy, args, first: int, n: int, temperature: float) -> dict:
    args = dataclasses.replace(args, eval_temperature=temperature, eval_first_episode=first, eval_episodes=n)
    envs = [make_env(args, "validation", policy) for _ in range(min(n, 64))]
    with torch.no_grad():
        rows = evaluation_records(policy, envs, args, Dist())
    stats = episode_stats(rows, per_family=True)
    blocks = [float(np.mean([r["correct"] for r in rows if lo <= r["episode"] < lo + 24]))
              for lo in range(first, first + n, 24)]
    return {"accuracy": stats["accuracy"], "format_common": stats["format_reward_common"],
            "calls": stats["tool_calls_per_rollout"], "per_24": blocks,
            **{k: v for k, v in stats.items() if k.startswith("accuracy/")}}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="", help="starting checkpoint (default: the shipped strong cold start)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--episodes", type=int, default=256, help="train-split episodes to play")
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--pool", type=int, default=32, help="episodes played at once")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy rollouts")
    p.add_argument("--keep", choices=("correct", "all"), default="correct")
    p.add_argument("--train-tags", action="store_true", help="train the grammar's tags too")
    p.add_argument("--families", default="", help="comma list: keep only episodes of these question families")
    p.add_argument("--rows-out", default="", help="write the kept conversations (every generated token a target) as a "
                   "corpus part, DIR/chunk_00000.npz, for trainers/sft.py --stage2-rows, and stop: played at T = 1, the "
                   "rows hold a build near the playing model")
    p.add_argument("--openers", choices=("loss", "out", "split"), default="loss",
                   help="each turn's first generated token, the think line's opener, where the native dialect's openers "
                   "compete with the ParaVT lines: 'loss' trains it like any word; 'out' treats it as a tag (out of the "
                   "loss, its log-prob pinned); 'split' trains the opener among the ParaVT openers only and pins the "
                   "native openers' total probability at T = 0.7 (squared error in probability)")
    p.add_argument("--variants", default="1e-4:100:10", help="comma list of LR:STEPS:PIN, each trained from the "
                   "start model on the same conversations, saved to OUT/<LR>_<STEPS>_<PIN>/cold_start and evaluated. "
                   "PIN weighs a squared-error term that holds the log-prob (at T = 0.7) of every tag the conversations "
                   "wrote where the start model had it, meant to keep the start model's fragile format under sampling (it did not: "
                   "README.md beside this file)")
    p.add_argument("--native-revoice", type=float, default=0.0,
                   help="share of the kept conversations said again wholly in the native dialect (same calls and answers, "
                   "a native opener per turn): the native openers keep their share while the content sharpens in both "
                   "dialects")
    p.add_argument("--revoice-mode", choices=("replace", "add"), default="replace",
                   help="'replace': a re-voiced conversation takes the ParaVT one's place; 'add': it is trained beside it, so "
                   "the ParaVT content keeps every kept conversation")
    p.add_argument("--batch", type=int, default=16, help="conversations per step")
    p.add_argument("--eval-episodes", type=int, default=120)
    p.add_argument("--no-start-eval", action="store_true", help="skip evaluating the starting checkpoint")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    args = Args()
    args.model = a.model
    model_path = resolve_model(args)
    policy = load_policy(model_path, device, generation_cache="graph" if device.type == "cuda" else "dynamic")
    policy.model.eval()
    report = {"args": vars(a), "model": model_path}
    start_eval = a.eval_episodes and not a.no_start_eval and {
        f"T{t:g}": evaluate(policy, args, 0, a.eval_episodes, t) for t in (0.6, 0.0)}
    if start_eval:
        report["start_eval"] = start_eval
        print("start", json.dumps(start_eval), flush=True)
    t0 = time.perf_counter()
    rs = play(policy, args, "train", a.first, a.episodes, a.pool, a.temperature, seed=20_000 + a.seed)
    families = {f for f in a.families.split(",") if f}
    kept = [r.conv for r in rs if (a.keep == "all" or r.info.get("correct"))
            and (not families or r.info.get("family") in families)]
    if a.native_revoice:
        revoice_rng = np.random.default_rng(a.seed)
        voiced = [revoice_conversation(c, policy.tokenizer, revoice_rng) if revoice_rng.random() < a.native_revoice
                  else None for c in kept]
        kept = ([v or c for v, c in zip(voiced, kept)] if a.revoice_mode == "replace"
                else kept + [v for v in voiced if v is not None])
    report["play"] = {"episodes": len(rs), "kept": len(kept), "seconds": time.perf_counter() - t0,
                      **episode_stats([episode_record(r) for r in rs],
                                      per_family=True)}
    print(json.dumps(report["play"]), flush=True)
    if a.rows_out:
        write_rows(kept, Path(a.rows_out))
        report["rows_out"] = a.rows_out
        (Path(a.rows_out) / "report.json").write_text(json.dumps(report, indent=1))
        return
    tok = policy.tokenizer
    untrained = set() if a.train_tags else {tok.convert_tokens_to_ids(t) for t in STRUCTURAL_TAGS}
    untrained |= {tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    tag_ids = {tok.convert_tokens_to_ids(t) for t in STRUCTURAL_TAGS + ("<|im_end|>",)}
    native_ids = native_opener_ids(tok)
    # per conversation, bool tensors: trained tokens, opener positions, openers that are ParaVT lines, tag positions
    rows = []
    for c in kept:
        op = turn_openers(c.generated_mask) if a.openers != "loss" else [False] * len(c)
        rows.append((torch.tensor([g and t not in untrained and not o
                                   for t, g, o in zip(c.token_ids, c.generated_mask, op)]),
                     torch.tensor(op), torch.tensor([o and t not in native_ids for t, o in zip(c.token_ids, op)]),
                     torch.tensor([g and t in tag_ids for t, g in zip(c.token_ids, c.generated_mask)])))
    report["play"]["revoiced"] = sum(v is not None for v in voiced) if a.native_revoice else 0
    report["play"]["kept_native_opened"] = sum(
        c.token_ids[turn_openers(c.generated_mask).index(True)] in native_ids for c in kept)
    with torch.no_grad():  # the start model's tag log-probs and native opener mass at the prior benchmark's T = 0.7
        ref = [(sc["lp_pin"].cpu(), sc["native_pin"].cpu()) for i in range(0, len(kept), a.batch)
               for sc in scores(policy, kept[i:i + a.batch], native_ids)]
    start = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
    out = Path(a.out)
    report["native_opener_ids"] = native_ids
    report["variants"] = {}
    for spec in a.variants.split(","):
        lr_text, steps_text, pin_text = (spec.split(":") + ["0"])[:3]
        lr, steps, pin = float(lr_text), int(steps_text), float(pin_text)
        name = f"{lr_text}_{steps}_{pin_text}"
        policy.model.load_state_dict(start)
        torch.manual_seed(a.seed)
        rng = random.Random(a.seed)
        opt = torch.optim.AdamW([q for q in policy.model.parameters() if q.requires_grad], lr=lr, weight_decay=0.0)
        losses, t1 = [], time.perf_counter()
        policy.model.train()
        for step in range(steps):
            pick = rng.sample(range(len(kept)), min(a.batch, len(kept)))
            nll = pin_err = 0.0
            n_tok = n_pin = 0
            for sc, i in zip(scores(policy, [kept[i] for i in pick], native_ids), pick):
                dev = sc["lp"].device
                trained, op, op_paravt, tags = (m.to(dev) for m in rows[i])
                nll = nll - (sc["lp"] * trained).sum()
                n_tok += int(trained.sum())
                pinned = tags
                if a.openers == "split":  # a ParaVT opener learnt among the ParaVT lines only (the native mass is
                    # spread over 15 first tokens); a native opener (sampled play) is not learnt, only its mass pinned
                    off_native = torch.log1p(-sc["native"].exp().clamp(max=1 - 1e-6))
                    nll = nll - ((sc["lp"] - off_native) * op_paravt).sum()
                    n_tok += int(op_paravt.sum())
                    # in probability, not log space: where the native mass is ~1e-7 its log moves by whole units
                    # while nothing is sampled differently
                    pin_err = pin_err + ((sc["native_pin"].exp() - ref[i][1].to(dev).exp()) ** 2 * op).sum()
                    n_pin += int(op.sum())
                elif a.openers == "out":
                    pinned = tags | op
                pin_err = pin_err + ((sc["lp_pin"] - ref[i][0].to(dev)) ** 2 * pinned).sum()
                n_pin += int(pinned.sum())
            loss = nll / max(n_tok, 1) + (pin * pin_err / max(n_pin, 1) if pin else 0.0)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            if (step + 1) % 10 == 0:
                print(f"{name} step {step + 1}/{steps} loss {np.mean(losses[-10:]):.4f}", flush=True)
        policy.model.eval()
        row = {"lr": lr, "steps": steps, "pin": pin, "seconds": time.perf_counter() - t1,
               "loss_first10": float(np.mean(losses[:10])), "loss_last10": float(np.mean(losses[-10:]))}
        from agents.lmm.tiny_qwen import save_checkpoint

        record = {**(starting_build_record(model_path) or {}),
                  "self_distill": {**vars(a), "lr": lr, "steps": steps, "pin": pin}}
        save_checkpoint(str(out / name / "cold_start"), policy.model, tok, policy.image_processor,
                        info={"self_distill": record["self_distill"]}, build_record=record)
        if a.eval_episodes:
            row["eval"] = {f"T{t:g}": evaluate(policy, args, 0, a.eval_episodes, t) for t in (0.6, 0.0)}
        report["variants"][name] = row
        print(name, json.dumps(row), flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
