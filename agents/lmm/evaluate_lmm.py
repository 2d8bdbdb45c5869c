"""Evaluate an LMM checkpoint in ``ParaVT-LongVideo-v0`` (validation split) with TransformersPolicy.

Rollouts are token-in/token-out (``policy.start`` / ``generate`` / ``extend``), batched over
episodes in lockstep; the env parses, runs the crops (oracle sub-agent by default) and scores.

    python -m agents.lmm.evaluate_lmm CHECKPOINT --episodes 48 --temperature 0.7 --gating

Metrics per setting: format reward (the env's R_fmt), tool calls per rollout (kappa), share of
rollouts with >= 1 call, accuracy overall and per family, and dialect diagnostics (native
``<tool_code>`` calls, ``Answer:`` without tags, unclosed ``<think>``).

``subagent_agreement`` makes the same model play the env's sub-agent (``agents.lmm.Subagent``: only a
crop's frames + the sub-agent prompt) and compares its summary with the world's truthful caption.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict

import numpy as np

from agents.lmm.corpus import WorldConfig, caption_objects, random_window
from agents.lmm.policy import TransformersPolicy
from agents.lmm.subagent import Subagent
from paravt_env.config import DEFAULTS, GATING_BUDGETS
from paravt_env.questions import FAMILIES
from paravt_env.rewards import token_f1
from paravt_env.sources import SyntheticDataset

_ANSWER_COLON = re.compile(r"\bAnswer:\s*\S")


def rollouts(policy: TransformersPolicy, wc: WorldConfig, *, episodes: int = 48, temperature: float = 0.0,
             gating: bool = False, frame_budget: int = DEFAULTS.frame_budget, max_new_tokens: int = 96,
             batch_size: int = 64, seed: int = 0, split: str = "validation", subagent="oracle",
             gating_budgets=None) -> list[dict]:
    """One rollout per episode (episode i = validation index i, so families are balanced).
    ``gating_budgets``: the K set of nFrames gating (default: the env's (4, 8, 16, 32, 64))."""
    records = []
    for lo in range(0, episodes, batch_size):
        idx = list(range(lo, min(episodes, lo + batch_size)))
        envs = [wc.env(split, nframes_gating=gating, frame_budget=frame_budget, subagent=subagent,
                       gating_budgets=gating_budgets) for _ in idx]
        convs, infos, texts = [], [], [[] for _ in idx]
        for env, i in zip(envs, idx):
            _, info = env.reset(seed=seed * 100003 + i, options={"episode_index": i})
            infos.append(info)
            convs.append(policy.start(info["messages"]))
        active = list(range(len(idx)))
        turn = 0
        while active:
            comps = policy.generate([convs[a] for a in active], temperature=temperature,
                                    max_new_tokens=max_new_tokens, seed=seed * 7919 + lo * 31 + turn)
            still = []
            for a, c in zip(active, comps):
                convs[a].append_completion(c)
                texts[a].append(c.text)
                _, reward, term, trunc, info = envs[a].step(c.text)
                infos[a] = info
                if term or trunc:
                    records.append(_record(info, texts[a], reward, truncated=trunc, finish=c.finish_reason))
                else:
                    policy.extend(convs[a], [info["messages"][-1]])
                    still.append(a)
            active, turn = still, turn + 1
        for env in envs:
            env.close()
    return records


def _record(info, texts, reward, truncated, finish) -> dict:
    full = "".join(texts)
    return dict(family=info["family"], frame_budget=info["frame_budget"], reward=float(reward),
                format=float(info.get("format_reward", 0.0)),
                format_common=float(info.get("format_reward_common", 0.0)), correct=bool(info.get("correct", False)),
                accuracy=float(info["reward_components"]["accuracy"]), tool_calls=int(info["num_tool_calls"]),
                turns=int(info["turn"]), truncated=bool(truncated), finish=finish,
                answer_tag="<answer>" in full, answer_colon=bool(_ANSWER_COLON.search(full)),
                tool_code="<tool_code>" in full, tool_call_json="<tool_call>" in full,
                think_closed=all("</think>" in t for t in texts), text=full[:600])


def summarize(records: list[dict]) -> dict:
    if not records:
        return {}
    m = lambda key: float(np.mean([r[key] for r in records]))  # noqa: E731
    out = dict(n=len(records), format=m("format"), format_common=m("format_common"), tool_calls=m("tool_calls"),
               tool_rate=float(np.mean([r["tool_calls"] > 0 for r in records])), accuracy=m("accuracy"),
               correct=m("correct"), answer_tag=m("answer_tag"), answer_colon=m("answer_colon"),
               tool_code=m("tool_code"), tool_call_json=m("tool_call_json"), think_closed=m("think_closed"),
               truncated=m("truncated"), turns=m("turns"))
    fam = defaultdict(list)
    for r in records:
        fam[r["family"]].append(r["correct"])
    out["correct_by_family"] = {f: float(np.mean(fam[f])) for f in FAMILIES if f in fam}
    return out


def subagent_agreement(policy: TransformersPolicy, wc: WorldConfig, *, crops: int = 64, seed: int = 0,
                       max_new_tokens: int = 96, split: str = "validation", batch_size: int = 32) -> dict:
    """The model as the env's sub-agent (``agents.lmm.Subagent``: greedy, its default passes) vs the world's
    caption of the same frames."""
    rng = np.random.default_rng(seed)
    ds = SyntheticDataset(split, wc.world_seed, wc.dataset_size, wc.duration)
    items, truths = [], []
    for _ in range(crops):
        ep = ds[int(rng.integers(len(ds)))]
        w = random_window(ep, rng)
        frames = ep.source.crop(w[0], w[1], 1.0, wc.crop_max_frames, tuple(wc.frame_size))
        items.append((frames, ep.question.prompt()))
        truths.append(ep.source.caption(frames.timestamps))
    sub = Subagent(policy, max_new_tokens=max_new_tokens, frame_size=None, batch_size=batch_size)
    preds = sub.batch(items, temperature=0.0)
    f1, p_num, p_den, r_num, r_den, scene_ok, exact = [], 0, 0, 0, 0, [], []
    for truth, pred in zip(truths, preds):
        f1.append(token_f1(pred, truth))
        po, to = caption_objects(pred), caption_objects(truth)
        p_num += len(po & to); p_den += len(po); r_num += len(po & to); r_den += len(to)
        ts = set(re.findall(r"([a-z]+) scene", truth)); ps = set(re.findall(r"([a-z]+) scene", pred))
        scene_ok.append(bool(ts) and ts == ps)
        exact.append(pred == truth)
    prec = p_num / p_den if p_den else float("nan")
    rec = r_num / r_den if r_den else float("nan")
    return dict(crops=len(items), token_f1=float(np.mean(f1)), object_precision=prec, object_recall=rec,
                object_f1=(2 * prec * rec / (prec + rec)) if p_den and r_den and (prec + rec) else 0.0,
                scene_match=float(np.mean(scene_ok)), exact=float(np.mean(exact)),
                objects_predicted=p_den, objects_true=r_den,
                examples=[{"truth": t, "pred": p} for t, p in list(zip(truths, preds))[:3]])


def training_budgets(checkpoint: str) -> tuple[int, ...]:
    """The overview sizes K the checkpoint was trained on: the ``budgets`` of its build record (sft_args.json) and
    of every build it continued (the record's ``parent`` chain), else the paper's gating set (4, 8, 16, 32, 64)."""
    from agents.lmm.default import checkpoint_info
    record, seen = checkpoint_info(checkpoint), set()
    while record:
        seen |= {int(x) for x in str(record.get("args", {}).get("budgets") or "").split(",") if x.strip()}
        record = record.get("parent")
    return tuple(sorted(seen)) if seen else GATING_BUDGETS


def world_config_of(checkpoint: str) -> WorldConfig:
    """The world settings the checkpoint was trained with (sft_args.json), else the defaults."""
    from agents.lmm.default import checkpoint_info
    a = checkpoint_info(checkpoint).get("args", {})
    wc = WorldConfig()
    if a:
        wc = WorldConfig(world_seed=a.get("world_seed", wc.world_seed), frame_size=(a["frame_size"], a["frame_size"]),
                         crop_max_frames=a.get("crop_max_frames", wc.crop_max_frames))
    return wc


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="checkpoint directory (TransformersPolicy(path))")
    p.add_argument("--episodes", type=int, default=48, help="validation episodes (default 48)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default 0)")
    p.add_argument("--gating", action="store_true", help="K ~ Uniform{4,8,16,32,64} per episode instead of K=64")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tokens per turn (default 96)")
    p.add_argument("--agreement-crops", type=int, default=0, help="also measure sub-agent agreement on N crops")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1, ...)")
    p.add_argument("--batch-size", type=int, default=64, help="episodes rolled out together (default 64)")
    a = p.parse_args(argv)
    policy = TransformersPolicy(a.checkpoint, device=a.device)
    wc = world_config_of(a.checkpoint)
    t = time.time()
    out = summarize(rollouts(policy, wc, episodes=a.episodes, temperature=a.temperature, gating=a.gating,
                             max_new_tokens=a.max_new_tokens, batch_size=a.batch_size))
    out["seconds"] = time.time() - t
    if a.agreement_crops:
        out["subagent"] = subagent_agreement(policy, wc, crops=a.agreement_crops)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
