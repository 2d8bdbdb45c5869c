"""Rollout collection: G multi-turn episodes per prompt through the environment, batched.

    env_config,         the env settings a trainer's arguments describe (reward configuration included),
    make_env            on top of the env's defaults (paravt_env.config), and that env
    BadVideos           episodes whose video does not decode: skipped, counted, the run stopped past a share
                        (evaluation: left out and their indices recorded)
    collect_rollouts    one episode per env, all envs batched turn by turn; the policy plays the
                        main agent and, as ``agents.lmm.Subagent`` (the env's own sub-agent: one
                        prompt), every sub-agent call of a turn in one batch (env.begin_turn /
                        env.deliver: the env parses, crops and scores, never this file)
    episode_record,     the plain facts of a finished rollout, and the metrics over many
    episode_stats       (kappa = executed calls, emitted calls, parallel-turn share, formats)

Token-in/token-out: conversations are extended with the exact sampled tokens, never re-tokenised.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from agents.lmm.subagent import Subagent, parse_frames_per_pass
from paravt_env.config import DEFAULTS, THINK_PREFIX
from trainers.algos import get_anchor_mode


def derive_seed(*parts: int) -> int:
    """A reproducible 31-bit seed from integers (never Python's salted hash(), which the released ParaVT code uses)."""
    return int(np.random.SeedSequence([int(p) % (2**63) for p in parts]).generate_state(1)[0] & 0x7FFFFFFF)


def reward_config(args):
    from paravt_env.rewards import RewardConfig

    bonus = get_anchor_mode(args.anchor_mode).reward_bonus  # else lambda acts in the loss, or nowhere
    return RewardConfig(format_weight=args.format_weight, answer_suffix=args.answer_suffix,
                        anchor_lambda=args.anchor_lambda if bonus else 0.0,
                        penalty_gamma=args.penalty_gamma if bonus else 0.0, tool_reward=args.tool_reward)


def subagent_passes(args) -> int | str | None:
    """--subagent-frames-per-pass as agents.lmm.Subagent takes it."""
    return parse_frames_per_pass(args.subagent_frames_per_pass, "--subagent-frames-per-pass")


def env_config(args, split: str, tools: bool | None = None, **changes):
    """The env settings (paravt_env.config.EnvConfig) a trainer's arguments describe; `changes` go on top."""
    return DEFAULTS.replace(
        split=split, world_seed=args.world_seed, dataset_size=args.dataset_size,
        frame_budget=args.frame_budget, nframes_gating=args.nframes_gating,
        gating_budgets=tuple(int(k) for k in str(args.gating_budgets).split(",") if k.strip()), dispatch=args.dispatch,
        max_turns=args.max_turns, max_calls_per_turn=args.max_calls_per_turn,
        think_prefix=THINK_PREFIX if args.think_prefix else None,
        frame_size=(args.frame_size, args.frame_size), crop_max_frames=args.crop_max_frames,
        reward_config=reward_config(args), tools=args.tools if tools is None else tools, scoring=args.scoring,
        **changes)


def make_env(args, split: str, policy=None, tools: bool | None = None, **env_kwargs):
    """`env_kwargs` go to the env as they are (the trainer's `dataset=`, `reward_fns=`)."""
    subagent = (Subagent(policy, max_new_tokens=args.subagent_max_new_tokens, frames_per_pass=subagent_passes(args))
                if policy is not None and args.subagent == "policy" else "oracle")
    return env_config(args, split, tools, subagent=subagent, **env_kwargs).make()


@dataclass
class Rollout:
    env: Any
    group: int                    # index of its prompt in the step
    conv: Any = None              # main-agent Conversation
    sub_convs: list = field(default_factory=list)  # one finished Conversation per sub-agent pass (Subagent.passes)
    reward: float = 0.0
    info: dict = field(default_factory=dict)
    done: bool = False
    gen_tokens: int = 0
    main_tokens: int = 0
    sub_tokens: int = 0


@dataclass
class Timer:
    """Seconds per named part, added up over ``with timer(name):`` blocks. ``sync`` (e.g. torch.cuda.synchronize)
    runs as a block starts and ends, so a part's GPU work is counted in it, not in the next part that waits."""
    totals: dict = field(default_factory=lambda: defaultdict(float))
    sync: Any = None

    def __call__(self, name):
        timer = self

        class _T:
            def __enter__(self):
                if timer.sync is not None:
                    timer.sync()
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                if timer.sync is not None:
                    timer.sync()
                timer.totals[name] += time.perf_counter() - self.t
        return _T()


class BadVideos:
    """Episodes whose video does not decode (``VideoError`` at reset: a file damaged in its middle, a
    folder or FIFO where a video should be), or whose question does not fit its video (``DatasetError`` at
    reset: an evidence window past the video's end, known only once the video opens). Each is skipped and
    another drawn in its place; each video (each such question) is named once in the log; once more than
    ``max_fraction`` of the draws so far (counted as at least ``MIN_DRAWS``, so the first bad draw of a run
    does not stop it) failed, the run stops with one line.
    ``counts``: [draws, skipped] to start from (a resumed run's, ``state()`` of the run so far).

    ``redraw=False`` (evaluation, whose episodes are fixed): such an episode is not replaced but left out,
    its index recorded in ``episodes``; nothing stops. Its video fails for every row evaluated on the same
    episodes, so each row leaves out the same ones and plays the rest in the same batches."""

    MIN_DRAWS = 100
    MAX_TRIES = 50  # redraws for one env before giving up on it (the fraction usually stops the run first)

    def __init__(self, max_fraction: float = 0.05, log=None, redraw: bool = True, counts=None):
        self.max_fraction, self.redraw = max_fraction, redraw
        self.draws, self.skipped = (int(counts[0]), int(counts[1])) if counts else (0, 0)
        self.episodes: list[int] = []  # redraw=False: the indices of the episodes left out, in order
        self.named: dict[str, None] = {}  # in the order first seen
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def state(self) -> list[int]:
        """[draws, skipped]: plain ints, for a checkpoint that loads with ``weights_only``."""
        return [self.draws, self.skipped]

    def reset(self, env, seed: int, options: dict | None):
        """``env.reset``, redrawing (seed derived from ``seed`` and the try, any pinned episode dropped)
        while the drawn video does not decode: rollouts of one prompt share a seed, so they share the
        replacement too. With ``redraw=False``: None for such an episode."""
        from paravt_env.sources import DatasetError, VideoError

        for attempt in range(self.MAX_TRIES):
            self.draws += 1
            try:
                return env.reset(seed=derive_seed(seed, attempt) if attempt else seed,
                                 options=options if not attempt else
                                 {k: v for k, v in (options or {}).items() if k != "episode_index"})
            except (VideoError, DatasetError) as exc:
                self.skipped += 1
                name = getattr(exc, "video", None) or str(exc)
                if name not in self.named:
                    self.named[name] = None
                    self.log(f"[data] skipping episodes of a video that does not decode: {exc}"
                             if isinstance(exc, VideoError) else f"[data] skipping a question that does not fit "
                                                                 f"its video: {exc}")
                if not self.redraw:
                    self.episodes.append(int((options or {}).get("episode_index", seed)))
                    return None
                if self.skipped > self.max_fraction * max(self.draws, self.MIN_DRAWS):
                    raise VideoError(f"{self.skipped} of {self.draws} episode draws had a video that does not "
                                     f"decode, more than --max-bad-video-fraction {self.max_fraction:g} allows "
                                     f"(first: {next(iter(self.named))}); repair or remove those videos") from None
        raise VideoError(f"{self.MAX_TRIES} draws in a row had a video that does not decode (last: {name})")


def collect_rollouts(policy, envs: Sequence, reset_seeds: Sequence[int], groups: Sequence[int], *,
                     temperature: float, top_p: float, max_new_tokens: int, sub_max_new_tokens: int,
                     think_prefix: bool, gen_seed: int, timer: Timer | None = None,
                     reset_options: Sequence[dict | None] | None = None,
                     sub_frames_per_pass: int | str | None = "auto",
                     sub_temperature: float | None = None, bad_videos: BadVideos | None = None) -> list[Rollout]:
    """Play one episode per env, all envs batched turn by turn. Envs with the same reset seed are
    the G rollouts of one prompt (same video, question and K). Sub-agent calls of every rollout of
    a turn form one more batch. The sub-agents sample at ``temperature`` too, unless ``sub_temperature`` is
    given and >= 0 (0: greedy). With ``bad_videos``, an episode whose video does not decode is replaced
    (see ``BadVideos``), or with its ``redraw=False`` left out of the rollouts returned (each keeps its env's
    group); without, its VideoError propagates. Returns finished rollouts with the token-level conversations."""
    timer = timer or Timer()
    rollouts = []
    with timer("env"):
        for i, (env, s) in enumerate(zip(envs, reset_seeds)):
            options = reset_options[i] if reset_options else None
            reset = (bad_videos.reset(env, int(s), options) if bad_videos is not None
                     else env.reset(seed=int(s), options=options))
            if reset is None:  # left out (BadVideos with redraw=False)
                continue
            info = reset[1]
            r = Rollout(env, groups[i], info=info)
            r.conv = policy.start(info["messages"])
            rollouts.append(r)
    prefix = THINK_PREFIX if think_prefix else ""
    temp = temperature if temperature > 0 else 0.0
    sub_temp = temp if sub_temperature is None or sub_temperature < 0 else float(sub_temperature)
    # the env's own sub-agent (``gym.make(..., subagent=Subagent(policy))``: same prompt, same
    # frames), batched: every crop of a turn, all rollouts together, in one generate call
    sub = Subagent(policy, max_new_tokens=sub_max_new_tokens, batch_size=max(1, len(envs) * max(1, envs[0].max_calls)),
                   frames_per_pass=sub_frames_per_pass)
    # A turn ends at </answer>, end of turn, the token budget, or after as many closed calls as the
    # env executes per turn (parallel: max_calls_per_turn; sequential: 1). Never at the first call.
    max_calls = 1 if envs[0].dispatch == "sequential" else envs[0].max_calls
    turn = 0
    while True:
        active = [r for r in rollouts if not r.done]
        if not active:
            break
        with timer("generate_main"):
            comps = policy.generate([r.conv for r in active], temperature=temp, top_p=top_p,
                                    max_new_tokens=max_new_tokens, prefix=prefix, max_calls=max_calls,
                                    seed=derive_seed(gen_seed, turn, 0))
        pending = []  # (rollout, crop results)
        for r, c in zip(active, comps):
            r.conv.append_completion(c)
            n = sum(c.generated_mask)
            r.gen_tokens += n
            r.main_tokens += n
            with timer("env"):
                finished, parsed, notes, results = r.env.begin_turn(c.text)
            if finished is not None:
                _, r.reward, _, _, r.info = finished
                r.done = True
            else:
                pending.append((r, results))
        if pending:
            # the env's own oracle writes summaries when configured so; the policy answers the rest
            jobs = [(r, res) for r, results in pending if r.env.subagent != "oracle" for res in results if res.ok]
            summaries: dict[int, str] = {}
            for r, results in pending:
                if r.env.subagent == "oracle":
                    summaries.update({id(res): text for res, text in zip(results, r.env.summarize(results))})
            if jobs:
                with timer("generate_sub"):
                    subs = sub.run([(res.frames, r.env.episode.question.prompt()) for r, res in jobs],
                                   temperature=sub_temp, top_p=top_p, seed=derive_seed(gen_seed, turn, 1))
                for (r, res), s in zip(jobs, subs):
                    summaries[id(res)] = s.summary
                    r.sub_convs += s.conversations  # one per pass over the crop; none for a crop without frames
                    n = sum(sum(c.generated_mask) for c in s.completions)
                    r.gen_tokens += n
                    r.sub_tokens += n
            with timer("env"):
                for r, results in pending:
                    r.env.deliver(results, [summaries.get(id(res), "") for res in results])
                    r.conv = policy.extend(r.conv, [r.env.messages[-1]])
        turn += 1
    return rollouts


def episode_record(r: Rollout) -> dict:
    """The plain-data facts of one finished rollout that metrics are computed from (picklable, so
    processes can gather them)."""
    info = r.info
    return {"reward": float(r.reward), "family": info.get("family", ""),
            "correct": float(bool(info.get("correct", False))),
            "format_reward": float(info.get("format_reward", 0.0)),
            "format_reward_common": float(info.get("format_reward_common", 0.0)),
            "format_reward_common_generated": float(info.get("format_reward_common_generated", 0.0)),
            "executed": float(info.get("num_tool_calls", 0)), "emitted": float(info.get("num_tool_calls_emitted", 0)),
            "calls_per_turn": list(info.get("tool_calls_per_turn", [])),
            "frame_budget": float(info.get("frame_budget", 0)),
            "components": {k: float(v) for k, v in info.get("reward_components", {}).items()}}


def episode_stats(records: Sequence[dict], per_family: bool = False) -> dict[str, float]:
    """Metrics over finished rollouts (records from `episode_record`), one number each:

    tool_calls_per_rollout is kappa as the released code counts it: sub-agent calls that executed.
    tool_calls_emitted_per_rollout counts parseable calls written, executed or not (a call in the
    answering turn or the last allowed turn, or past the per-turn limit, is emitted, not executed).
    parallel_turn_fraction: of the turns that executed >= 1 call, the share that executed >= 2
    (pooled over the rollouts; 0 when no turn executed a call). format_reward is the row's own
    reward configuration; format_reward_common the released PARA-GRPO format on the same text, and
    format_reward_common_generated that format on the agent's own tokens alone (the released reading)."""
    def mean(key):
        return float(np.mean([x[key] for x in records])) if records else 0.0

    turns = [n for x in records for n in x["calls_per_turn"] if n >= 1]
    out = {"reward": mean("reward"), "accuracy": mean("correct"), "format_reward": mean("format_reward"),
           "format_reward_common": mean("format_reward_common"),
           "format_reward_common_generated": mean("format_reward_common_generated"),
           "tool_calls_per_rollout": mean("executed"),
           "tool_calls_emitted_per_rollout": mean("emitted"),
           "parallel_turn_fraction": float(np.mean([n >= 2 for n in turns])) if turns else 0.0,
           "frame_budget": mean("frame_budget")}
    components = defaultdict(list)
    for x in records:
        for k, v in x["components"].items():
            components[k].append(v)
    out.update({f"reward_components/{k}": float(np.mean(v)) for k, v in sorted(components.items())})
    if per_family:
        fam = defaultdict(list)
        for x in records:
            fam[x["family"]].append(x["correct"])
        out.update({f"accuracy/{f}": float(np.mean(v)) for f, v in sorted(fam.items())})
    return out
