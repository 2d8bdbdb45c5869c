"""Reading after OTHER agents' calls: perception.py's reading row (first turn given, truthful crop
captions, tools then forbidden), with the first turn played by the scene agent (tiles the named scene,
located from the overview) or the uniform agent (tiles the whole video) instead of the oracle.
It asks how much tool gain a build would get if it learned those agents' calls; the scripted agents
themselves (which read the captions by rule) are printed beside it (agents.evaluate at K = 4).

    PYTHONPATH=. python benchmarks/results/reading_experiments/reading_other_calls.py CHECKPOINT [EPISODES_PER_FAMILY]
"""
import sys

from agents.lmm import perception
from agents.lmm.corpus import THINK_TOOL, _decision, render_turn, round_windows
from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.policy import TransformersPolicy
from agents.scripted import make_agent
from agents.lmm.perception import NEEDLE_FAMILIES, accuracy_summary
from paravt_env.questions import FAMILIES

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 48
policy = TransformersPolicy(ck)
wc = world_config_of(ck)
items = [(i, 4) for fam in NEEDLE_FAMILIES for i in range(FAMILIES.index(fam), n * len(FAMILIES), len(FAMILIES))]
tb = tuple(sorted(set(training_budgets(ck)) | {4}))
for agent in ("oracle", "scene", "uniform"):
    def first_turn(env, obs, info, agent=agent):
        windows, _ = _decision(make_agent(agent, env, seed=0).act(obs, info))
        return render_turn("paravt", THINK_TOOL, windows=round_windows(windows))

    perception.oracle_first_turn = first_turn
    records = perception.play(policy, wc, items, budgets=tb, forbid_tools=True, subagent="oracle",
                              oracle_first_turn_given=True, batch_size=48)
    s = accuracy_summary(records, NEEDLE_FAMILIES)
    print(ck, "| calls of", agent, "| reading", round(s["accuracy"], 3), "n", s["n"],
          {f: round(v["accuracy"], 2) for f, v in s["by_family"].items()}, flush=True)
