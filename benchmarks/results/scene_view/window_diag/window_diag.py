"""Where a cold start's K = 4 tool episodes lose the needle (fifteenth session).

    python benchmarks/results/scene_view/window_diag/window_diag.py [--checkpoint C] [--seed 1] [--per-family 48]

Plays the perception benchmark's tool episodes (agents.lmm.perception.play: K = 4, needle and needle_attribute,
greedy, the policy as its own sub-agent) and records every executed crop from the environment's own results: its
window and the timestamps of the frames it returned. Each episode is then placed by what its crops did:
- the first turn (the sweep): did a returned frame fall inside the question's evidence (the needle's span)?
- the later turns (the zoom): a frame on the evidence; else a window over it whose frames missed it; else windows
  inside the question's scene that missed the needle; else windows only outside that scene.
Then the zoom's aim: the first "X scene (a-b s)" span its think line names, against the scene entries of the
sweep's tool responses (in order): the question's scene's span, the entry next to it, another entry, or a span
that no response gave.
Writes window_diag_s{seed}.md beside this file.
"""
import argparse
import os
import re
import sys
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))

import paravt_env.env as E  # noqa: E402
from agents.lmm import perception as P  # noqa: E402
from agents.lmm.evaluate_lmm import training_budgets, world_config_of  # noqa: E402
from agents.lmm.policy import TransformersPolicy  # noqa: E402
from agents.lmm.subagent import Subagent  # noqa: E402


SCENE_SPAN = re.compile(r"(\w+) scene \((\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))? s\)")


def record_crops():
    """Patch the env so each instance keeps, per turn, (window, frame timestamps) of its executed crops, and
    hand every closed env's (episode, turns, text of its first tool message) to the returned list."""
    turns_of, closed = {}, []
    begin, close = E.ParaVTLongVideoEnv.begin_turn, E.ParaVTLongVideoEnv.close

    def begin_turn(self, text):
        out = begin(self, text)
        turns_of.setdefault(id(self), []).append(
            [(r.window, tuple(r.frames.timestamps)) for r in (out[3] or []) if r.ok and r.frames is not None])
        return out

    def close_env(self):
        texts = [m["content"] if isinstance(m["content"], str) else
                 " ".join(c.get("text", "") for c in m["content"] if c.get("type") == "text") for m in self.messages]
        sweep = next((t for t in texts if "<tool_response>" in t), "")
        closed.append((self.episode, turns_of.pop(id(self), []), sweep))
        return close(self)

    E.ParaVTLongVideoEnv.begin_turn, E.ParaVTLongVideoEnv.close = begin_turn, close_env
    return closed


def place(episode, turns) -> tuple[str, str]:
    ev = episode.question.evidence
    video = episode.source.video
    scene = video.scene_at(ev[0][0])
    on = lambda ts: any(a <= t <= b for t in ts for a, b in ev)
    over = lambda w: any(w[0] <= b and a <= w[1] for a, b in ev)
    in_scene = lambda w: w[0] <= scene.end and scene.start <= w[1]
    first = turns[0] if turns else []
    later = [c for t in turns[1:] for c in t]
    sweep = "no calls" if not any(turns) else ("frames on the needle" if any(on(ts) for _, ts in first)
                                               else "frames missed it")
    if not later:
        zoom = "no later calls"
    elif any(on(ts) for _, ts in later):
        zoom = "frames on the needle"
    elif any(over(w) for w, _ in later):
        zoom = "a window over it, frames missed it"
    elif any(in_scene(w) for w, _ in later):
        zoom = "in the question's scene, not over the needle"
    else:
        zoom = "only outside the question's scene"
    return sweep, zoom


def aim(episode, sweep_text: str, zoom_turn: str) -> str:
    """Which sweep entry the zoom's think line copied its scene span from."""
    scene = re.search(r"during the (\w+) scene", episode.question.text)
    spans = list(SCENE_SPAN.finditer(zoom_turn.split("</think>")[0]))
    if scene is None or not spans:
        return "its think line names no scene span"
    entries = [(m.group(1), (m.group(2), m.group(3))) for m in SCENE_SPAN.finditer(sweep_text)]
    got = (spans[0].group(2), spans[0].group(3))
    mine = [i for i, (name, _) in enumerate(entries) if name == scene.group(1)]
    if not mine:
        return "the sweep never names the question's scene"
    hits = [i for i, (_, span) in enumerate(entries) if span == got]
    if any(i in mine for i in hits):
        return "the question's scene's span"
    if any(abs(i - j) == 1 for i in hits for j in mine):
        return "the span of the entry next to it (another scene)"
    if hits:
        return "the span of another entry"
    return "a span no response gave"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default="agents/lmm/checkpoints/tiny-strong/cold_start")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-family", type=int, default=48)
    a = ap.parse_args()
    closed = record_crops()
    policy = TransformersPolicy(a.checkpoint)
    wc, budgets = world_config_of(a.checkpoint), training_budgets(a.checkpoint)
    sub = Subagent(policy, frame_size=None, max_new_tokens=128, batch_size=64, frames_per_pass="auto")
    items = P.needle_items(a.per_family, 4, dataset_size=wc.dataset_size, seed=a.seed)
    recs = P.play(policy, wc, items, budgets=tuple(sorted(set(budgets) | {4})), forbid_tools=False, subagent=sub,
                  batch_size=64, seed=a.seed)
    assert len(recs) == len(closed)
    table, aims = Counter(), Counter()
    spans, scene_lens, zoom_widths = [], [], []
    for rec, (episode, turns, sweep_text) in zip(recs, closed):
        table[place(episode, turns) + (bool(rec["correct"]),)] += 1
        if len(rec["texts"]) >= 2 and turns and turns[0]:
            aims[aim(episode, sweep_text, rec["texts"][1])] += 1
        ev = episode.question.evidence
        spans.append(sum(b - a for a, b in ev))
        s = episode.source.video.scene_at(ev[0][0])
        scene_lens.append(s.end - s.start)
        zoom_widths += [w[1] - w[0] for t in turns[1:] for w, _ in t]
    frames = [len(ts) for _, turns, _ in closed for t in turns for _, ts in t]
    n = len(recs)
    lines = [f"# Where the K = 4 tool episodes lose the needle: `{a.checkpoint}`, seed {a.seed}", "",
             f"`python benchmarks/results/scene_view/window_diag/window_diag.py --checkpoint {a.checkpoint} "
             f"--seed {a.seed} --per-family {a.per_family}`: {n} episodes (needle, needle_attribute; K = 4; greedy; "
             f"its own sub-agent), accuracy {np.mean([r['correct'] for r in recs]):.3f}.", "",
             f"- The needle's span (the question's evidence): median {np.median(spans):.1f} s "
             f"(10-90 %: {np.percentile(spans, 10):.1f}-{np.percentile(spans, 90):.1f} s); its scene: median "
             f"{np.median(scene_lens):.0f} s.",
             f"- Frames a crop returned: mean {np.mean(frames):.2f} (at most {wc.crop_max_frames}); later-turn windows: "
             f"median {np.median(zoom_widths) if zoom_widths else float('nan'):.0f} s wide.", "",
             "| first turn (sweep) | later turns (zoom) | correct | wrong | episodes |", "|---|---|---|---|---|"]
    for key in sorted({k[:2] for k in table}):
        c, w = table[key + (True,)], table[key + (False,)]
        lines.append(f"| {key[0]} | {key[1]} | {c} | {w} | {c + w} |")
    lines += ["", "The zoom's aim (episodes with a sweep and a second turn): the span its think line copies is", "",
              "| copied span | episodes |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in aims.most_common()]
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"window_diag_s{a.seed}.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
