"""Text-only baselines: can a multiple-choice question be answered without seeing a frame?

Agents that read only the question and its options, on every multiple-choice family
(validation split): each fixed letter, the longest / shortest option, the k-th smallest option
(numeric value, else alphabetical: the order statistics), the number nearest the middle of
the options, the option most / least similar to the question (word overlap), and two learned
models fitted on the TRAIN split: naive Bayes over option and question features (words,
question-word x option-word pairs, letter, value rank, length rank, overlap), and a lookup
table of which option won for each option set seen in training (naive Bayes where unseen).
Chance is the mean of 1 / #options; every accuracy comes with a 95% Wilson interval, and the
strongest agent's verdict uses a family-wise 95% interval (Bonferroni over the agents), since
the best of ~15 agents at chance lands about two standard errors above it by luck alone.

    python benchmarks/text_only.py --episodes 2000 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from paravt_env import SyntheticDataset
from paravt_env.questions import LETTERS

MCQ_FAMILIES = ("needle", "counting", "temporal_order", "global")
_WORD = re.compile(r"[a-z]+|\d+")
_STOP = frozenset("the a an of in to is are which what how many these during video scene appear appears "
                  "or and not counting small grey ones coloured objects first".split())


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def number(option: str) -> float | None:
    found = re.findall(r"-?\d+(?:\.\d+)?", option)
    return float(found[0]) if len(found) == 1 else None


def ranks(keys: list) -> list[int]:
    """Rank of each key among the options (0 = smallest; ties share a rank)."""
    order = sorted(set(keys))
    return [order.index(k) for k in keys]


def sort_keys(options: tuple[str, ...]) -> list:
    values = [number(o) for o in options]
    return values if all(v is not None for v in values) else [o.lower() for o in options]


def overlap(question: str, option: str) -> float:
    q, o = set(words(question)), set(words(option))
    return len(q & o) / max(1, len(q | o))


def first_max(scores) -> int:
    return int(np.argmax(scores))  # ties: the first option (a letter, so at chance by itself)


# ---- rule agents: (question text, options) -> option index ----------------------------------

def rule_agents() -> dict:
    agents = {f"letter {L}": (lambda i: lambda q, o: i % len(o))(i) for i, L in enumerate(LETTERS[:4])}
    agents["longest option"] = lambda q, o: first_max([len(x) for x in o])
    agents["shortest option"] = lambda q, o: first_max([-len(x) for x in o])
    for k in range(4):
        agents[f"rank {k + 1} option (smallest first)"] = (
            lambda k: lambda q, o: ranks(sort_keys(o)).index(min(k, max(ranks(sort_keys(o))))))(k)

    def middle(q, o):
        values = [number(x) for x in o]
        if any(v is None for v in values):
            return 0
        mid = (min(values) + max(values)) / 2
        return first_max([-abs(v - mid) for v in values])

    agents["number nearest the middle"] = middle
    agents["most similar to the question"] = lambda q, o: first_max([overlap(q, x) for x in o])
    agents["least similar to the question"] = lambda q, o: first_max([-overlap(q, x) for x in o])
    return agents


# ---- learned agents ------------------------------------------------------------------------

def option_features(question: str, options: tuple[str, ...], j: int) -> list[str]:
    opt = options[j]
    qw = [w for w in words(question) if w not in _STOP]
    ow = words(opt)
    n = len(options)
    f = [f"opt={opt.lower()}", f"pos={j}/{n}", f"valrank={ranks(sort_keys(options))[j]}/{n}",
         f"lenrank={ranks([len(x) for x in options])[j]}/{n}",
         f"overlap={round(overlap(question, opt), 1)}"]
    f += [f"w={w}" for w in ow]
    f += [f"q={a}|o={b}" for a in qw for b in ow]
    return f


class NaiveBayes:
    """Bernoulli-style naive Bayes over option features: correct vs wrong options."""

    def fit(self, data):
        self.pos, self.neg = Counter(), Counter()
        self.n_pos = self.n_neg = 0
        for question, options, answer in data:
            for j in range(len(options)):
                feats = set(option_features(question, options, j))
                if j == answer:
                    self.pos.update(feats)
                    self.n_pos += 1
                else:
                    self.neg.update(feats)
                    self.n_neg += 1
        return self

    def score(self, question, options, j) -> float:
        s = 0.0
        for f in set(option_features(question, options, j)):
            s += math.log((self.pos[f] + 1) / (self.n_pos + 2)) - math.log((self.neg[f] + 1) / (self.n_neg + 2))
        return s

    def __call__(self, question, options) -> int:
        return first_max([self.score(question, options, j) for j in range(len(options))])


class OptionSetTable:
    """Which option text won, for each option set seen in training; naive Bayes otherwise."""

    def fit(self, data, fallback):
        self.table = defaultdict(Counter)
        for question, options, answer in data:
            self.table[tuple(sorted(options))][options[answer]] += 1
        self.fallback = fallback
        return self

    def __call__(self, question, options) -> int:
        seen = self.table.get(tuple(sorted(options)))
        if not seen:
            return self.fallback(question, options)
        return first_max([seen[o] for o in options])


# ---- measurement ---------------------------------------------------------------------------

def questions(split: str, family: str, n: int, seed: int):
    data = SyntheticDataset(split=split, seed=seed, size=n, families=(family,))
    out = []
    for i in tqdm(range(n), desc=f"{split} {family}", leave=False):
        q = data[i].question
        out.append((q.text, tuple(q.options), LETTERS.index(q.answer)))
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _normal_quantile(p: float) -> float:
    """Inverse of the standard normal CDF, by bisection (no scipy needed)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * math.erfc(-mid / math.sqrt(2)) < p else (lo, mid)
    return (lo + hi) / 2


def measure(episodes: int, train_episodes: int, seed: int, families=MCQ_FAMILIES) -> dict:
    results = {}
    for family in families:
        train = questions("train", family, train_episodes, seed)
        val = questions("validation", family, episodes, seed)
        agents = rule_agents()
        nb = NaiveBayes().fit(train)
        agents["naive Bayes (fit on train)"] = nb
        agents["option-set table (fit on train)"] = OptionSetTable().fit(train, nb)
        chance = float(np.mean([1 / len(o) for _, o, _ in val]))
        rows = {}
        for name, agent in agents.items():
            k = sum(agent(q, o) == a for q, o, a in val)
            lo, hi = wilson(k, len(val))
            rows[name] = {"accuracy": k / len(val), "ci95": [lo, hi]}
        best = max(rows, key=lambda r: rows[r]["accuracy"])
        # the strongest of many agents sits above chance by luck alone: its verdict uses an
        # interval that holds for all agents at once (Bonferroni over the agents)
        z = _normal_quantile(1 - 0.025 / len(rows))
        k_best = round(rows[best]["accuracy"] * len(val))
        lo, hi = wilson(k_best, len(val), z)
        results[family] = {"questions": len(val), "train_questions": len(train), "chance": chance,
                           "agents": rows, "strongest": best, "strongest_familywise_ci95": [lo, hi],
                           "strongest_at_chance": lo <= chance,
                           "answer_position_counts": dict(sorted(Counter(LETTERS[a] for _, _, a in val).items()))}
    return results


def markdown(results: dict) -> str:
    families = list(results)
    agents = list(next(iter(results.values()))["agents"])
    lines = ["| text-only agent | " + " | ".join(families) + " |", "|---|" + "---|" * len(families)]
    for name in agents:
        lines.append(f"| {name} | " + " | ".join(f"{results[f]['agents'][name]['accuracy']:.3f}" for f in families)
                     + " |")
    lines.append("| **chance** (mean 1/#options) | " + " | ".join(f"**{results[f]['chance']:.3f}**"
                                                               for f in families) + " |")
    cells = []
    for f in families:
        r = results[f]
        lo, hi = r["agents"][r["strongest"]]["ci95"]
        cells.append(f"{r['agents'][r['strongest']]['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]")
    lines.append("| strongest, 95% interval | " + " | ".join(cells) + " |")
    lines.append("| strongest, family-wise 95% interval | " + " | ".join(
        "[{:.3f}, {:.3f}]".format(*results[f]["strongest_familywise_ci95"]) for f in families) + " |")
    lines.append("| at chance (family-wise interval holds chance) | " + " | ".join(
        "yes" if results[f]["strongest_at_chance"] else "**no**" for f in families) + " |")
    lines.append("| validation questions | " + " | ".join(str(results[f]["questions"]) for f in families) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=2000, help="validation questions per family")
    p.add_argument("--train-episodes", type=int, default=4000, help="train questions per family (learned agents)")
    p.add_argument("--seed", type=int, default=0, help="world seed")
    p.add_argument("--families", default=",".join(MCQ_FAMILIES))
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args(argv)
    results = measure(a.episodes, a.train_episodes, a.seed, tuple(a.families.split(",")))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "text_only.json").write_text(json.dumps({"episodes": a.episodes, "train_episodes": a.train_episodes,
                                                     "seed": a.seed, "split": "validation",
                                                     "families": results}, indent=2))
    md = markdown(results)
    (out / "text_only.md").write_text(md + "\n")
    print(md)
    for f, r in results.items():
        print(f"{f}: strongest {r['strongest']!r}; at chance: {r['strongest_at_chance']}")
    return results


if __name__ == "__main__":
    main()
