"""How well does a build describe the overview's frames of the question's scene (--direct-think scene)? On the
visible-evidence needle items of benchmarks/perception.py (draw of seed 0; tool tags suppressed, greedy), the
caption the model thinks first is compared with the truth (agents.lmm.corpus.scene_overview_caption): needles
named (F1), the answer object named, and the answer right, split by overview size K.

    PYTHONPATH=. python benchmarks/results/scene_view/scene_view_check.py CHECKPOINT [PER_FAMILY] [EXAMPLES]
"""
import collections
import sys

from agents.lmm.corpus import answer_object, caption_needles, named_objects, scene_overview_caption
from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import NEEDLE_FAMILIES, forced_first_turns, visible_items
from agents.lmm.policy import TransformersPolicy

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
show = int(sys.argv[3]) if len(sys.argv) > 3 else 6
policy = TransformersPolicy(ck)
wc, budgets = world_config_of(ck), training_budgets(ck)
items = visible_items(n, wc, budgets, families=NEEDLE_FAMILIES, seed=0)
envs, texts = forced_first_turns(policy, wc, items, budgets)
by_k = collections.defaultdict(lambda: collections.Counter())
for j, (env, text, (i, k)) in enumerate(zip(envs, texts, items)):
    truth = scene_overview_caption(env)
    said = text.split("</think>")[0]
    t_needles = set(caption_needles(truth)) if truth else set()
    s_needles = set(caption_needles(said))
    target = answer_object(env.episode.question)
    correct = bool((fin := env.begin_turn(text)[0]) and fin[4]["correct"])
    c = by_k[k]
    c["n"] += 1
    c["tp"] += len(t_needles & s_needles)
    c["pred"] += len(s_needles)
    c["true"] += len(t_needles)
    c["answer_named"] += target in named_objects(said)
    c["correct"] += correct
    c["scene_right"] += bool(truth) and truth.split(" Objects:")[0] in said
    if j < show or (j >= len(items) // 2 and j < len(items) // 2 + show):
        print(f"--- K={k} {env.episode.question.text} {env.episode.question.options or ''} answer "
              f"{env.episode.question.answer} ({'right' if correct else 'wrong'})\n  truth: {truth}\n  model: "
              f"{text.strip()[:400]}")
print(f"\n{ck}: {len(items)} needle items")
print("| K | n | needle precision | needle recall | answer object named | scene span word for word | answer right |")
print("|---|---|---|---|---|---|---|")
for k in sorted(by_k) + ["all"]:
    c = sum(by_k.values(), collections.Counter()) if k == "all" else by_k[k]
    print(f"| {k} | {c['n']} | {c['tp'] / max(c['pred'], 1):.2f} | {c['tp'] / max(c['true'], 1):.2f} | "
          f"{c['answer_named'] / c['n']:.2f} | {c['scene_right'] / c['n']:.2f} | {c['correct'] / c['n']:.2f} |")
