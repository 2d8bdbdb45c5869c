"""How well does a build describe the overview's frames of the question's scene (--direct-think scene)? On the
visible-evidence needle items of benchmarks/perception.py (draw of seed 0; tool tags suppressed, greedy), the
caption the model thinks first is compared with the truth (agents.lmm.corpus.scene_overview_caption): needles
named (F1), the answer object named, and the answer right (over all, and when the caption does and does not name
the answer object: reading the caption apart from writing it), split by overview size K.

A rival is another object the question could be about (another option, or the asked shape in another colour).

    PYTHONPATH=. python benchmarks/results/scene_view/scene_view_check.py CHECKPOINT [PER_FAMILY] [EXAMPLES] [JSON]
"""
import collections
import json
import sys

from agents.lmm.corpus import (SCENE_VIEWS, answer_object, caption_needles, named_objects, presence_candidates,
                               scene_overview_caption)
from agents.lmm.default import checkpoint_info
from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import NEEDLE_FAMILIES, forced_first_turns, visible_items
from agents.lmm.policy import TransformersPolicy

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
show = int(sys.argv[3]) if len(sys.argv) > 3 else 6
policy = TransformersPolicy(ck)
view = checkpoint_info(ck).get("args", {}).get("direct_think", "scene")
view = view if view in SCENE_VIEWS else "scene"


def listed(line: str) -> set[str]:
    """The objects a compact scene line lists ("...in the overview: small grey square, yellow diamond. ..."),
    by name; the full view's needles as (colour, shape, position) with their times."""
    if view == "scene":
        return set(caption_needles(line))
    # item by item, word for word: a garbled item ("cyan square cyan square") names nothing, where caption_objects
    # would find an object in it
    head = line.split(" in the overview", 1)[-1].split(": ", 1)[-1]
    return {o.strip() for o in head.split(".")[0].split(",")} - {"nothing", "no frame", ""}


wc, budgets = world_config_of(ck), training_budgets(ck)
items = visible_items(n, wc, budgets, families=NEEDLE_FAMILIES, seed=0)
envs, texts = forced_first_turns(policy, wc, items, budgets)
by_k = collections.defaultdict(lambda: collections.Counter())
records = []
for j, (env, text, (i, k)) in enumerate(zip(envs, texts, items)):
    truth = scene_overview_caption(env, view)
    said = text.split("</think>")[0]
    t_needles = listed(truth) if truth else set()
    s_needles = listed(said)
    target = answer_object(env.episode.question)
    correct = bool((fin := env.begin_turn(text)[0]) and fin[4]["correct"])
    c = by_k[k]
    c["n"] += 1
    c["tp"] += len(t_needles & s_needles)
    c["pred"] += len(s_needles)
    c["true"] += len(t_needles)
    names = s_needles if view != "scene" else named_objects(said)
    named = target in names
    rival = bool(names & (set(presence_candidates(env.episode.question)[1]) - {target}))
    c["answer_named"] += named
    c["correct"] += correct
    c["named_right"] += named and correct
    c["named_alone"] += named and not rival
    c["alone_right"] += named and not rival and correct
    records.append(dict(k=k, family=env.episode.question.family, question=env.episode.question.text,
                        target=target, said=sorted(names), truth=sorted(t_needles) if view != "scene" else None,
                        rival_named=rival, correct=correct, text=text))
    # the full view's scene span, word for word; a compact view has no span, so its whole line
    c["scene_right"] += bool(truth) and truth.split(" Objects:")[0] in said
    if j < show or (j >= len(items) // 2 and j < len(items) // 2 + show):
        print(f"--- K={k} {env.episode.question.text} {env.episode.question.options or ''} answer "
              f"{env.episode.question.answer} ({'right' if correct else 'wrong'})\n  truth: {truth}\n  model: "
              f"{text.strip()[:400]}")
print(f"\n{ck}: {len(items)} needle items")
print(f"| K | n | needle precision | needle recall | answer object named | "
      f"{'scene span' if view == 'scene' else 'whole line'} word for word | answer right | right when named | "
      "right when not | named, no rival named | right then |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k in sorted(by_k) + ["all"]:
    c = sum(by_k.values(), collections.Counter()) if k == "all" else by_k[k]
    print(f"| {k} | {c['n']} | {c['tp'] / max(c['pred'], 1):.2f} | {c['tp'] / max(c['true'], 1):.2f} | "
          f"{c['answer_named'] / c['n']:.2f} | {c['scene_right'] / c['n']:.2f} | {c['correct'] / c['n']:.2f} | "
          f"{c['named_right'] / max(c['answer_named'], 1):.2f} | "
          f"{(c['correct'] - c['named_right']) / max(c['n'] - c['answer_named'], 1):.2f} | "
          f"{c['named_alone'] / c['n']:.2f} | {c['alone_right'] / max(c['named_alone'], 1):.2f} |")
if len(sys.argv) > 4:
    with open(sys.argv[4], "w") as f:
        json.dump(records, f, indent=1)
