"""Extra reward terms: your own functions, added to the environment's reward as named terms.

    def brevity(trajectory: str, info: dict) -> float:
        return -0.001 * len(trajectory)

    def style(trajectory: str, info: dict) -> dict[str, float]:
        return {"no_shouting": -0.1 * trajectory.isupper(), "said_please": 0.05 * ("please" in trajectory)}

    env = gym.make("ParaVT-LongVideo-v0", reward_fns=[brevity, style])

Each function is called once per episode, when it ends, with

    trajectory  the whole assistant side of the episode as the scorer saw it: the prefilled think
                prefix and the tool responses included
    info        the finished episode's facts: question, options, ground_truth,
                answer_type, family, question_id, answer (the parsed answer or None), correct,
                reward_components (the built-in terms), num_tool_calls, num_tool_calls_emitted,
                frame_budget, turns

and returns a number (one term, named after the function) or a dict of numbers (one term per key).
Every term is added to the episode's reward and shows in ``info["reward_components"]`` under its name;
a name may not repeat a built-in term or another function's. A function sees a copy of the facts, so
one cannot change what the next one sees. Bad return values stop with a ``ValueError`` naming the
function; exceptions raised inside a function propagate unchanged (your traceback is the useful one).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence

RewardFn = Callable[[str, dict], "float | Mapping[str, float]"]


def fn_name(fn) -> str:
    """The term name a function's float return value gets."""
    return getattr(fn, "__name__", None) or type(fn).__name__


def check_reward_fns(fns: Sequence[RewardFn] | None) -> tuple[RewardFn, ...]:
    """The functions as a tuple, or a ValueError naming the first that is not callable."""
    if fns is None:
        return ()
    if callable(fns):  # one function passed where a list was meant
        fns = [fns]
    if isinstance(fns, (str, bytes)) or not isinstance(fns, Iterable):
        raise ValueError(f"reward_fns must be a list of functions f(trajectory, info), got {type(fns).__name__}")
    fns = tuple(fns)
    for fn in fns:
        if not callable(fn):
            raise ValueError(f"reward_fns entries must be functions f(trajectory, info), got {fn!r}")
    return fns


def extra_terms(fns: Sequence[RewardFn], trajectory: str, facts: dict, taken: Iterable[str]) -> dict[str, float]:
    """Call every function on one finished episode; returns {term name: value}."""
    taken = set(taken)
    out: dict[str, float] = {}
    for fn in fns:
        name = fn_name(fn)
        value = fn(trajectory, {**facts, "reward_components": dict(facts.get("reward_components", {}))})
        items = value.items() if isinstance(value, Mapping) else [(name, value)]
        for key, v in items:
            if not isinstance(key, str) or not key:
                raise ValueError(f"reward function {name} returned a term named {key!r}; names must be non-empty "
                                 "strings")
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
                raise ValueError(f"reward function {name} returned {v!r} for term {key!r}; expected a finite "
                                 "number (or a dict of them)")
            if key in taken or key in out:
                raise ValueError(f"reward function {name} returned a term named {key!r}, which is already taken "
                                 f"(built-in terms: {', '.join(sorted(taken))}; or another function's term)")
            out[key] = float(v)
    return out
