"""Questions about videos, in six task families mirroring long-video benchmarks.

=================  ===========  ==============================================  =========
family             answer type  asks                                            evidence
=================  ===========  ==============================================  =========
needle             mcq          which object appears during a named scene       1 window
needle_attribute   open         the colour of a shape seen during a scene       1 window
counting           mcq          how many coloured objects a scene holds         many
temporal_order     mcq          which of two objects appears first              2 windows
grounding          grounding    when an object is visible ("start, end" s)      1 window
global             mcq          which scene occurs in the video                 a scene
=================  ===========  ==============================================  =========

Only ``global`` is answerable from a coarse overview alone; needle-type questions hinge on
a few seconds of a long video, so the frame budget decides whether tools are needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .world import COLOURS, SCENE_NAMES, SHAPES, Event, SyntheticVideo

FAMILIES = ("needle", "needle_attribute", "counting", "temporal_order", "grounding", "global")
ANSWER_TYPES = ("mcq", "open", "grounding")
LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Question:
    id: str
    family: str
    text: str
    answer: str
    answer_type: str
    options: tuple[str, ...] | None = None
    evidence: tuple[tuple[float, float], ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.answer_type not in ANSWER_TYPES:
            raise ValueError(f"question {self.id!r}: answer type {self.answer_type!r} not in {ANSWER_TYPES}")

    def prompt(self) -> str:
        """The question as the agent reads it: text, then lettered options if any."""
        if not self.options:
            return self.text
        lines = [self.text, "Options:"]
        lines += [f"{LETTERS[i]}. {o}" for i, o in enumerate(self.options)]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"id": self.id, "family": self.family, "question": self.text,
                "options": list(self.options) if self.options else None, "answer": self.answer,
                "type": self.answer_type, "evidence": [list(w) for w in self.evidence]}


def _mcq(rng: np.random.Generator, correct: str, wrong: list[str]) -> tuple[tuple[str, ...], str]:
    options = [correct] + wrong
    order = rng.permutation(len(options))
    options = [options[i] for i in order]
    return tuple(options), LETTERS[options.index(correct)]


def _window(e: Event) -> tuple[float, float]:
    return (e.start, e.end)


def _all_objects() -> list[str]:
    return [f"{c} {s}" for c in COLOURS for s in SHAPES]


def make_question(video: SyntheticVideo, family: str, qid: str, rng: np.random.Generator) -> Question:
    """One question of ``family`` about ``video``; every random choice comes from ``rng``."""
    by_scene: dict[str, list[Event]] = {}
    for e in video.events:
        by_scene.setdefault(e.scene, []).append(e)
    events = list(video.events)

    if family == "needle":
        e = events[int(rng.integers(len(events)))]
        in_scene = {x.name for x in by_scene[e.scene]}
        pool = [o for o in _all_objects() if o not in in_scene]
        wrong = [pool[i] for i in rng.choice(len(pool), 3, replace=False)]
        options, answer = _mcq(rng, e.name, wrong)
        return Question(qid, family, f"Which of these objects appears during the {e.scene} scene?",
                        answer, "mcq", options, (_window(e),))

    if family == "needle_attribute":
        # a shape that is unique within its scene, so "the <shape>" names one object
        candidates = [e for e in events
                      if sum(x.shape == e.shape for x in by_scene[e.scene]) == 1]
        e = candidates[int(rng.integers(len(candidates)))]
        return Question(qid, family,
                        f"What colour is the large {e.shape} that appears during the {e.scene} scene? "
                        "Answer with one word.", e.colour, "open", None, (_window(e),))

    if family == "counting":
        # The options are counts this video's scenes really hold (up to 4 of them, ascending),
        # and the answer is drawn uniformly among them: whatever the options are, each is the
        # answer with the same probability, so nothing in the text beats chance (wrong counts
        # near the true one let "the option nearest the middle" score 0.6; see
        # benchmarks/text_only.py). Hence 2-4 options, as many as the video has distinct counts.
        scenes_of: dict[int, list] = {}
        for s in video.scenes:
            if s.name in by_scene:
                scenes_of.setdefault(len(by_scene[s.name]), []).append(s)
        counts = sorted(scenes_of)
        if len(counts) > 1:
            values = sorted(int(c) for c in rng.choice(counts, min(4, len(counts)), replace=False))
            count = values[int(rng.integers(len(values)))]
        else:  # every scene holds the same count (under 1% of videos): one neighbour as the other option
            count = counts[0]
            other = count + 1 if count == 1 or rng.random() < 0.5 else count - 1
            values = sorted([count, other])
        candidates = scenes_of[count]
        scene = candidates[int(rng.integers(len(candidates)))]
        options = tuple(str(v) for v in values)
        return Question(qid, family,
                        f"How many coloured objects (not counting small grey ones) appear during "
                        f"the {scene.name} scene?", LETTERS[values.index(count)], "mcq", options,
                        tuple(_window(e) for e in by_scene[scene.name]))

    if family == "temporal_order":
        i, j = sorted(rng.choice(len(events), 2, replace=False).tolist())
        first, second = events[i], events[j]
        pair = [first, second] if rng.random() < 0.5 else [second, first]
        options = tuple(f"the {e.name}" for e in pair)
        answer = LETTERS[pair.index(first)]
        return Question(qid, family,
                        f"Which appears first in the video: the {pair[0].name} or the {pair[1].name}?",
                        answer, "mcq", options, (_window(first), _window(second)))

    if family == "grounding":
        e = events[int(rng.integers(len(events)))]
        return Question(qid, family,
                        f"During which time window is the {e.name} visible? "
                        "Answer as 'start, end' in seconds.",
                        f"{e.start:.1f}, {e.end:.1f}", "grounding", None, (_window(e),))

    if family == "global":
        scene = video.longest_scene
        present = {s.name for s in video.scenes}
        pool = [s for s in SCENE_NAMES if s not in present]
        wrong = [pool[i] for i in rng.choice(len(pool), min(3, len(pool)), replace=False)]
        options, answer = _mcq(rng, scene.name, wrong)
        return Question(qid, family, "Which of these scenes occurs in the video?", answer, "mcq",
                        options, ((scene.start, scene.end),))

    raise ValueError(f"unknown family {family!r}; known: {FAMILIES}")
