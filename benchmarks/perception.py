"""Perception benchmark: can an LMM checkpoint see? (validation split, greedy decoding)

    python benchmarks/perception.py --checkpoint agents/lmm/checkpoints/tiny-strong --json out.json
    python benchmarks/perception.py --checkpoint DIR/strong --json strong.json --device cuda

Measured (``agents.lmm.perception`` defines every number; world settings = the checkpoint's own
``sft_args.json``: frame size, crop size, training K):

| key | what |
|---|---|
| ``frame_object_f1``  | single frames (1 s crops) captioned by the model as sub-agent: F1 of the needles named, as (colour, shape, position) triples |
| ``scene_accuracy``   | single frames: the caption names exactly the true scene |
| ``crop_object_f1``   | crops sampled as the env samples a tool call's window (1 fps, the checkpoint's crop size), the sub-agent prompt; a needle counts only with its first and last time each within one crop frame |
| ``visible_evidence_accuracy`` | needle, needle_attribute and global questions at a K whose overview shows the evidence, tools forbidden: answered from the overview |
| ``visible_evidence_no_tool_prompt_accuracy`` | the same episodes in the env's ``tools=False`` setting, whose prompt advertises no tool |
| ``tool_gain_k4``     | K = 4, needle and needle_attribute: accuracy calling tools (the model is its own sub-agent) minus accuracy with tools forbidden, same episodes |
| ``details.tool_gain_k4.answer_in_crops`` | of the episodes with tools: the share whose crops (the model's own windows) show the answer object by the world's captions, and the accuracy when they do and when they do not: choosing windows apart from reading |
| ``reading_accuracy`` | the same episodes, the first turn given (the oracle agent's calls on the evidence windows) and the crops summarised truthfully (the world's captions): accuracy answering from those tool responses, tools forbidden |

The sub-agent is ``agents.lmm.Subagent`` as the env gets it: it looks at a crop in passes of at most 4
frames and merges their captions (``--frames-per-pass 0``: one pass over each whole crop, the paper's
sub-agent).

"Tools forbidden": the tool-call tags are suppressed and a turn that has not answered by its
``</think>`` is continued from ``</think>\n<answer>``, so it always answers (a bare ban would
derail a model trained to call at small K into answering nothing, inflating the gain).

Also: the untimed crop F1, crops as a DEFAULT env hands them to ``Subagent`` (64x64 frames, 16 per
crop; the sub-agent fits them to the checkpoint's size), per-family numbers, n per metric and
95 % intervals. Writes ``--json`` and a markdown table next to it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python benchmarks/perception.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.lmm.corpus import CaptionConfig  # noqa: E402
from agents.lmm.evaluate_lmm import training_budgets, world_config_of  # noqa: E402
from agents.lmm.perception import (NEEDLE_FAMILIES, VISIBLE_FAMILIES, accuracy_summary, caption_eval,  # noqa: E402
                                   answer_catch, caption_items, needle_items, paired_gain, play,
                                   visible_items)
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from agents.lmm.subagent import Subagent, parse_frames_per_pass  # noqa: E402


def resolve(path: str) -> str:
    p = Path(path)
    return str(p / "cold_start") if (p / "cold_start" / "config.json").is_file() else str(p)


def measure(checkpoint: str, *, frames: int = 256, crops: int = 256, visible: int = 80, tool_episodes: int = 120,
            env_default_crops: int = 128, device: str = "cpu", batch_size: int = 64, seed: int = 0,
            world_seed: int | None = None, crop_max_frames: int | None = None,
            frames_per_pass: int | str | None = "auto", log=print) -> dict:
    """Every number of the benchmark for one checkpoint (``visible`` and ``tool_episodes`` per family).
    ``world_seed``: draw every video and question from this seed of the synthetic world instead of the one the
    checkpoint was trained on (its validation split is unseen either way; another seed is a wholly new draw).
    ``crop_max_frames``: crops (the caption measures' and the tool calls') sample at most this many frames instead
    of the checkpoint's own number: a build measured in another world's crop sampling.
    ``frames_per_pass``: the sub-agent's (``agents.lmm.Subagent``); None: one pass over each whole crop."""
    ckpt = resolve(checkpoint)
    policy = TransformersPolicy(ckpt, device=device)
    wc, budgets = world_config_of(ckpt), training_budgets(ckpt)
    if world_seed is not None:
        wc = replace(wc, world_seed=world_seed)
    if crop_max_frames is not None:
        wc = replace(wc, crop_max_frames=crop_max_frames)
    sub = Subagent(policy, frame_size=None, max_new_tokens=128, batch_size=batch_size, frames_per_pass=frames_per_pass)
    res: dict = {"checkpoint": ckpt, "frame_size": list(wc.frame_size), "crop_max_frames": wc.crop_max_frames,
                 "budgets": list(budgets), "device": device, "seed": seed, "world_seed": wc.world_seed,
                 "subagent_frames_per_pass": sub.frames_per_pass,
                 "details": {}}
    t = time.time()
    if frames:
        r, preds = caption_eval(sub, caption_items(frames, "frame", wc, seed=seed))
        res["frame_object_f1"], res["scene_accuracy"] = r["object_f1"], r["scene_accuracy"]
        res["details"]["frames"] = dict(r, examples=preds[:3])
        log(f"frames: F1 {r['object_f1']:.3f}, scene {r['scene_accuracy']:.3f} (n={r['n']}, {time.time() - t:.0f} s)")
    if crops:
        t = time.time()
        r, preds = caption_eval(sub, caption_items(crops, "caption", wc, seed=seed))
        res["crop_object_f1"] = r["object_f1"]
        res["details"]["crops"] = dict(r, examples=preds[:3])
        log(f"crops: F1 {r['object_f1']:.3f} (untimed {r['object_f1_untimed']:.3f}), n={r['n']}, {time.time() - t:.0f} s")
    if env_default_crops:  # what a default env (64x64 frames, 16 per crop) gives the public Subagent
        t = time.time()
        big = replace(wc, frame_size=(64, 64))
        items = caption_items(env_default_crops, "caption", big, seed=seed + 1,
                              cc=CaptionConfig(max_frames=(16,), aug_p=0.0, per_episode=1))
        r, _ = caption_eval(replace_sub(sub, wc.frame_size), items)
        res["details"]["crops_env_default"] = r
        log(f"crops, default env (64 px, 16 frames): F1 {r['object_f1']:.3f}, n={r['n']}, {time.time() - t:.0f} s")
    if visible:
        t = time.time()
        vis = visible_items(visible, wc, budgets, seed=seed)
        for key, tools in (("visible_evidence", True), ("visible_evidence_no_tool_prompt", False)):
            recs = play(policy, wc, vis, budgets=budgets, forbid_tools=True, batch_size=batch_size, seed=seed,
                        tools=tools)
            s = accuracy_summary(recs, VISIBLE_FAMILIES)
            res[f"{key}_accuracy"] = s["accuracy"]
            res["details"][key] = s
            log(f"{key}: accuracy {s['accuracy']:.3f} (n={s['n']}, {time.time() - t:.0f} s) "
                + ", ".join(f"{f} {v['accuracy']:.2f}" for f, v in s["by_family"].items()))
    if tool_episodes:
        t = time.time()
        items = needle_items(tool_episodes, 4, dataset_size=wc.dataset_size, seed=seed)
        tb = tuple(sorted(set(budgets) | {4}))
        with_tools = play(policy, wc, items, budgets=tb, forbid_tools=False, subagent=sub, batch_size=batch_size, seed=seed)
        without = play(policy, wc, items, budgets=tb, forbid_tools=True, batch_size=batch_size, seed=seed)
        g = paired_gain(with_tools, without, seed=seed)
        res["tool_gain_k4"] = g["gain"]
        res["details"]["tool_gain_k4"] = dict(g, with_tools=accuracy_summary(with_tools, NEEDLE_FAMILIES),
                                              without_tools=accuracy_summary(without, NEEDLE_FAMILIES),
                                              answer_in_crops=answer_catch(with_tools))
        log(f"tool gain at K=4: {g['gain']:+.3f} (with {res['details']['tool_gain_k4']['with_tools']['accuracy']:.3f}, "
            f"without {res['details']['tool_gain_k4']['without_tools']['accuracy']:.3f}, n={g['n']}, "
            f"{time.time() - t:.0f} s)")
        t = time.time()
        reading = play(policy, wc, items, budgets=tb, forbid_tools=True, subagent="oracle",
                       oracle_first_turn_given=True, batch_size=batch_size, seed=seed)
        r = accuracy_summary(reading, NEEDLE_FAMILIES)
        answers = Counter(str(x["answer"]) for x in reading)
        res["reading_accuracy"] = r["accuracy"]
        res["details"]["reading"] = dict(r, answers=dict(answers.most_common()))
        log(f"reading truthful tool responses after the right calls: accuracy {r['accuracy']:.3f} (n={r['n']}, "
            f"{time.time() - t:.0f} s); most given answers {answers.most_common(4)}")
    return res


def replace_sub(sub: Subagent, size) -> Subagent:
    """The same sub-agent, fitting frames to ``size`` (as ``Subagent(policy)`` does for its checkpoint)."""
    return Subagent(sub.policy, max_new_tokens=sub.max_new_tokens, frame_size=size, batch_size=sub.batch_size,
                    frames_per_pass=sub.frames_per_pass)


def _ci(x) -> str:
    return f"[{x[0]:.2f}, {x[1]:.2f}]" if x and x[0] == x[0] else ""


def markdown(results: dict) -> str:
    d = results["details"]
    rows = []
    if "frames" in d:
        rows.append(("single-frame object F1", results["frame_object_f1"], d["frames"]["object_f1_ci"], d["frames"]["n"], ">= 0.95"))
        rows.append(("single-frame scene accuracy", results["scene_accuracy"], d["frames"]["scene_accuracy_ci"], d["frames"]["n"], ">= 0.95"))
    if "crops" in d:
        rows.append(("crop object F1 (times within one crop frame)", results["crop_object_f1"], d["crops"]["object_f1_ci"],
                     d["crops"]["n"], ">= 0.90"))
        rows.append(("crop object F1, times ignored", d["crops"]["object_f1_untimed"], None, d["crops"]["n"], ""))
        rows.append(("crop scene accuracy", d["crops"]["scene_accuracy"], d["crops"]["scene_accuracy_ci"], d["crops"]["n"], ""))
    if "crops_env_default" in d:
        c = d["crops_env_default"]
        rows.append(("crop object F1, default env (64 px, 16 frames)", c["object_f1"], c["object_f1_ci"], c["n"], ""))
    for key, label, target in (("visible_evidence", "direct answers, evidence in the overview", ">= 0.80"),
                               ("visible_evidence_no_tool_prompt", "the same, the env's prompt without a tool", "")):
        if key in d:
            v = d[key]
            rows.append((label, v["accuracy"], v["accuracy_ci"], v["n"], target))
            rows += [(f"... {f}", s["accuracy"], s["accuracy_ci"], s["n"], target) for f, s in v["by_family"].items()]
    if "tool_gain_k4" in d:
        g = d["tool_gain_k4"]
        rows.append(("tool gain at K=4 (needle, needle_attribute)", g["gain"], g["gain_ci"], g["n"], ">= 0.20"))
        for label, key in (("with tools (own sub-agent)", "with_tools"), ("tools forbidden", "without_tools")):
            s = g[key]
            rows.append((f"... accuracy {label}, tool calls/ep {s['tool_calls']:.2f}", s["accuracy"], s["accuracy_ci"], s["n"], ""))
            rows += [(f"...... {f}", x["accuracy"], x["accuracy_ci"], x["n"], "") for f, x in s["by_family"].items()]
        if "answer_in_crops" in g:  # results from before 2026-12-04 lack it
            c = g["answer_in_crops"]
            rows.append(("... with tools: its crops show the answer object (truthful captions of its windows)",
                         c["share"], c["share_ci"], c["n"], ""))
            rows.append(("...... accuracy when they do", c["accuracy_if_shown"], c["accuracy_if_shown_ci"], c["n_shown"], ""))
            rows.append(("...... accuracy when they do not", c["accuracy_if_not"], c["accuracy_if_not_ci"], c["n_not"], ""))
    if "reading" in d:
        r = d["reading"]
        rows.append(("reading: answers after the right calls, truthful crop captions", r["accuracy"], r["accuracy_ci"],
                     r["n"], ""))
        rows += [(f"... {f}", x["accuracy"], x["accuracy_ci"], x["n"], "") for f, x in r["by_family"].items()]
    took = f" Measured on {results['device']} in {results['seconds']:.0f} s." if "seconds" in results else ""
    lines = [f"Perception of `{results['checkpoint']}` (validation split, greedy; frames {results['frame_size'][0]} px, "
             f"crops of up to {results['crop_max_frames']} frames, K in {tuple(results['budgets'])}, "
             f"world seed {results.get('world_seed', 0)}, sub-agent passes of "
             f"{results.get('subagent_frames_per_pass') or 'all the'} frames).{took}", "",
             "| measure | value | 95% interval | n | target |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {v:.3f} | {_ci(ci)} | {n} | {tgt} |" for name, v, ci, n, tgt in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="cold_start directory or the sft build directory above it")
    p.add_argument("--json", required=True, help="output JSON path (a .md table is written next to it)")
    p.add_argument("--frames", type=int, default=256, help="held-out single frames (default 256)")
    p.add_argument("--crops", type=int, default=256, help="held-out crops (default 256)")
    p.add_argument("--env-default-crops", type=int, default=128, help="crops as a default env gives them (default 128)")
    p.add_argument("--visible", type=int, default=80, help="episodes per family for direct answers (default 80 x 3)")
    p.add_argument("--tool-episodes", type=int, default=120, help="K=4 episodes per needle family (default 120 x 2)")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    p.add_argument("--batch-size", type=int, default=64, help="sequences generated together")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out draws: captions, and which block of "
                   "episodes the direct-answer and tool measures use (seeds share none)")
    p.add_argument("--frames-per-pass", default="auto", help="the sub-agent looks at a crop in parts of at most "
                   "this many frames and merges their captions; 0: one pass over the whole crop; auto (default): "
                   "agents.lmm.Subagent's choice, 4 for this project's tiny builds")
    p.add_argument("--crop-max-frames", type=int, default=None, help="crops sample at most this many frames "
                   "(default: the checkpoint's own crop sampling)")
    p.add_argument("--world-seed", type=int, default=None, help="draw the videos and questions from this seed of "
                   "the synthetic world (default: the checkpoint's own, whose validation split it never trained on)")
    a = p.parse_args(argv)
    try:
        frames_per_pass = parse_frames_per_pass(a.frames_per_pass, "--frames-per-pass")
    except ValueError as e:
        p.error(str(e))
    t = time.time()
    res = measure(a.checkpoint, frames=a.frames, crops=a.crops, visible=a.visible, tool_episodes=a.tool_episodes,
                  env_default_crops=a.env_default_crops, device=a.device, batch_size=a.batch_size, seed=a.seed,
                  world_seed=a.world_seed, crop_max_frames=a.crop_max_frames,
                  frames_per_pass=frames_per_pass)
    res["seconds"] = time.time() - t
    out = Path(a.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
