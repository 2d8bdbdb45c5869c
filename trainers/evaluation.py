"""One evaluation protocol for every checkpoint of an ablation: the same episodes, the same environment.

A training row's own settings (its K, its think prefix, its dispatch) decide how it trains, never how it is
scored: a row evaluated under its training conditions compares conditions, not training. Here every
checkpoint, the untrained starting model included, plays the same held-out episodes with the same
environment: K drawn per episode from the protocol's budgets (the draw is a function of the episode, so
the same for every row), no think prefix, parallel dispatch with the sub-agent, one sampled rollout per
episode. A seed's evaluation samples with its own generation seeds (``draw``), so a spread over seeds
holds evaluation noise as well as training noise.

Conditions (each a separate pass over the same episodes):
    tools        the protocol itself: the crop tool advertised, sub-agent answers (accuracy "w/ sub")
    no_tools     no tool advertised, one turn (accuracy "w/o sub")
    sequential   one crop per turn, with as many turns as parallel dispatch has calls
                 ((max_turns - 1) x max_calls + 1), so sequential calls can execute as often
    greedy       the tools condition decoded greedily; with t0.7, the prior's format under sampling
    t0.7         the tools condition at the training temperature 0.7

    python trainers/evaluation.py --run runs/sweep/runs/full__s1 --steps 0,20,40 --draw 1 \\
        --conditions tools,no_tools,sequential --out-dir runs/sweep/evals/full__s1
    python trainers/evaluation.py --args runs/para_grpo__s1/args.json --steps 0 --out-dir runs/eval_start

Writes OUT_DIR/step_NNNNNN.json per checkpoint (conditions already there are kept: a rerun does only what is
missing). Step 0 is the run's starting model; step N its checkpoint of step N (checkpoints/step_N.pt: a run
evaluated this way keeps a checkpoint of every step it is evaluated at, as the sweep's do). An episode whose
video does not decode is left out and recorded in each condition (``videos_skipped``, ``skipped_episodes``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python trainers/evaluation.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONDITIONS = ("tools", "no_tools", "sequential", "greedy", "t0.7")


@dataclass(frozen=True)
class Protocol:
    eval_first_episode: int = 1000      # validation episodes F..F+N-1; the shipped models were chosen on 0-119
    eval_episodes: int = 256
    budgets: str = "4,8,16,32,64"       # K per episode, drawn from the episode's reset seed
    temperature: float = 0.6            # the paper's evaluation temperature (main agent and sub-agents)
    think_prefix: bool = False          # the model's own first token: no row is helped by a prefill it trained with
    max_turns: int = 3
    max_calls_per_turn: int = 5
    batch: int = 128                    # episodes played together; part of the protocol (generation seeds follow it)

    def sequential_turns(self) -> int:
        return (self.max_turns - 1) * self.max_calls_per_turn + 1


def condition_args(base, protocol: Protocol, condition: str):
    """The trainer arguments that play `condition` of the protocol: the row's world, frames, token limits and
    question files (shared by every row of a sweep), the protocol's everything else."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; known: {', '.join(CONDITIONS)}")
    a = dataclasses.replace(base, nframes_gating=True, gating_budgets=protocol.budgets,
                            think_prefix=protocol.think_prefix, dispatch="parallel", max_turns=protocol.max_turns,
                            max_calls_per_turn=protocol.max_calls_per_turn, tools=True, subagent="policy",
                            scoring="trajectory", eval_temperature=protocol.temperature, eval_subagent_temperature=-1.0,
                            eval_first_episode=protocol.eval_first_episode, eval_episodes=protocol.eval_episodes,
                            eval_samples=0)
    if condition == "no_tools":
        a = dataclasses.replace(a, tools=False, max_turns=1)
    elif condition == "sequential":
        a = dataclasses.replace(a, dispatch="sequential", max_calls_per_turn=1, max_turns=protocol.sequential_turns())
    elif condition == "greedy":
        a = dataclasses.replace(a, eval_temperature=0.0)
    elif condition == "t0.7":
        a = dataclasses.replace(a, eval_temperature=0.7)
    return a


def summarize(records: list[dict]) -> dict:
    """One condition's numbers: accuracy overall, at K = 4 and K = 64 and per family; the common format on the
    whole trajectory and on the agent's own tokens; executed and emitted calls; each episode's correctness and
    executed calls; what the agent wrote in the first episodes."""
    from trainers.rollouts import episode_stats

    records = sorted(records, key=lambda r: r["episode"])
    stats = episode_stats(records, per_family=True)

    def acc_at(k):
        hits = [r["correct"] for r in records if int(r["frame_budget"]) == k]
        return sum(hits) / len(hits) if hits else float("nan")

    return {"episodes": len(records), "accuracy": stats["accuracy"], "accuracy_k4": acc_at(4),
            "accuracy_k64": acc_at(64),
            "accuracy_by_family": {k.split("/", 1)[1]: v for k, v in stats.items() if k.startswith("accuracy/")},
            "format_common": stats["format_reward_common"],
            "format_common_generated": stats["format_reward_common_generated"],
            "kappa": stats["tool_calls_per_rollout"], "kappa_emitted": stats["tool_calls_emitted_per_rollout"],
            "parallel_turn_fraction": stats["parallel_turn_fraction"],
            "correct": [int(r["correct"]) for r in records],
            "frame_budget": [int(r["frame_budget"]) for r in records],
            "calls": [int(r["executed"]) for r in records],
            "transcripts": [{"episode": r["episode"], "frame_budget": int(r["frame_budget"]),
                             "correct": int(r["correct"]), "calls": int(r["executed"]), "turns": r["turns"]}
                            for r in records if "turns" in r]}


def evaluate_policy(policy, base, protocol: Protocol, condition: str, draw: int, dataset=None) -> dict:
    """Play the protocol's episodes in `condition` with `policy` (generation seeds of `draw`). An episode whose
    video does not decode is left out, counted (``videos_skipped``) and named (``skipped_episodes``): the same
    video fails in every row and condition, so every one of them leaves out the same episodes and the rest
    play in the same batches with the same seeds."""
    import torch

    from paravt_env.sources import VideoError
    from trainers.core import Dist, evaluation_records
    from trainers.rollouts import BadVideos, make_env

    args = condition_args(base, protocol, condition)
    kw = {"dataset": dataset} if dataset is not None else {}
    envs = [make_env(args, "validation", policy, **kw) for _ in range(min(protocol.batch, protocol.eval_episodes))]
    skipped = BadVideos(redraw=False)
    try:
        with torch.no_grad():
            records = evaluation_records(policy, envs, args, Dist(), draw=draw, bad_videos=skipped)
    finally:
        for e in envs:
            e.close()
    if not records and skipped.skipped:
        raise VideoError(f"none of the protocol's {protocol.eval_episodes} episodes has a video that decodes (first: "
                         f"{next(iter(skipped.named))}); repair or remove those videos")
    return {**summarize(records), "videos_skipped": skipped.skipped, "skipped_episodes": sorted(skipped.episodes)}


_NUMBERS = ("accuracy", "accuracy_k4", "accuracy_k64", "format_common", "kappa")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def condition_problem(c) -> str | None:
    """What keeps a condition's results from being read as ``summarize`` writes them (the fields reports use)."""
    if not isinstance(c, dict):
        return "a condition is not an object"
    bad = [k for k in _NUMBERS if k in c and not _number(c[k])]
    if bad:
        return f"{bad[0]} is not a number"
    if not (isinstance(c.get("calls", []), list) and all(map(_number, c.get("calls", [])))):
        return "calls is not a list of numbers"
    transcripts = c.get("transcripts", [])
    if not (isinstance(transcripts, list) and all(
            isinstance(t, dict) and all(_number(t.get(k)) for k in ("episode", "frame_budget", "calls", "correct"))
            and isinstance(t.get("turns"), list) and all(isinstance(x, str) for x in t["turns"])
            for t in transcripts)):
        return "transcripts are not records of episode, frame_budget, calls, correct and turns"
    return None


def read_record(path: str | os.PathLike) -> dict | None:
    """An OUT_DIR/step_NNNNNN.json as ``evaluate_steps`` writes it; None when absent. One of another shape
    (damaged, or from elsewhere) is said on stderr and read as absent: an evaluation writes it anew, a report
    leaves it out."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("conditions"), dict):
            raise ValueError("not an object with a 'conditions' object")
        problem = next(filter(None, map(condition_problem, record["conditions"].values())), None)
        if problem:
            raise ValueError(problem)
    except (OSError, ValueError) as exc:
        print(f"{path}: not an evaluation record ({str(exc)[:160]}); read as absent", file=sys.stderr)
        return None
    return record


def load_base_args(path: str | os.PathLike):
    """A trainer's arguments from an args.json (unknown keys, from newer or older trainers, are left out). One that
    is not a JSON object of settings, each of its field's type, is a ValueError naming the file and the field."""
    from trainers.config import GRPOArgs

    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read ({type(exc).__name__}: {str(exc)[:160]})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not a trainer's args.json (a {type(raw).__name__}, not an object of settings)")
    fields = {f.name: type(f.default) for f in dataclasses.fields(GRPOArgs)}
    for k, v in raw.items():
        kind = fields.get(k)
        # a float field takes a whole number too; a bool is never a number here
        ok = kind is None or type(v) is kind or (kind is float and type(v) is int)
        if not ok:
            raise ValueError(f"{path}: {k} is {str(v)[:40]!r} ({type(v).__name__}); a trainer writes "
                             f"{kind.__name__} values there")
    return GRPOArgs(**{k: v for k, v in raw.items() if k in fields})


def checkpoint_state(run_dir: Path, step: int) -> dict | None:
    """The model weights of `run_dir` at `step` (checkpoints/step_N.pt); None when no checkpoint of it is kept."""
    from trainers import run_state

    ckpt = run_state.checkpoint_path(run_dir, step)
    return run_state.load_training_checkpoint(ckpt)["model"] if ckpt.is_file() else None


def evaluate_steps(base, steps: list[int], out_dir: Path, protocol: Protocol, conditions: list[str], draw: int,
                   run_dir: Path | None = None, device: str = "auto", log=print) -> dict[int, dict]:
    """Evaluate the starting model (step 0) and `run_dir`'s checkpoints at `steps` under the protocol; each
    step's results go to out_dir/step_NNNNNN.json as soon as they exist. Returns {step: its file's content}."""
    import torch

    from trainers.core import load_policy, load_question_files, resolve_model
    from trainers.run_state import atomic_write_json

    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    torch.set_num_threads(max(1, int(base.torch_threads)))
    start = resolve_model(base)
    eval_ds = load_question_files(dataclasses.replace(base, eval_every=0))[1]
    available = len(eval_ds) if eval_ds is not None else base.dataset_size
    if protocol.eval_first_episode + protocol.eval_episodes > available:
        raise ValueError(f"the protocol's episodes {protocol.eval_first_episode}.."
                         f"{protocol.eval_first_episode + protocol.eval_episodes - 1} are not all among the "
                         f"{available} validation episodes")
    policy = None
    done: dict[int, dict] = {}
    protocol_dict = dataclasses.asdict(protocol)
    for step in steps:
        path = out_dir / f"step_{step:06d}.json"
        record = read_record(path) or {}
        if record.get("protocol") != protocol_dict or record.get("draw") != draw:
            record = {"model": str(start), "run": str(run_dir or ""), "step": step, "draw": draw,
                      "protocol": protocol_dict, "conditions": {}}
        todo = [c for c in conditions if c not in record["conditions"]]
        if not todo:
            done[step] = record
            continue
        state = None
        if step > 0:
            if run_dir is None:
                raise ValueError(f"step {step}: only step 0 (the starting model) can be evaluated without --run")
            state = checkpoint_state(run_dir, step)
            if state is None:
                log(f"{run_dir}: no checkpoint of step {step} kept; skipped")
                continue
        if policy is None:
            policy = load_policy(start, dev, "graph" if dev.type == "cuda" else "dynamic")
            initial = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
        policy.model.load_state_dict(state if state is not None else initial)
        policy.model.eval()
        for condition in todo:
            t0 = time.perf_counter()
            record["conditions"][condition] = evaluate_policy(policy, base, protocol, condition, draw, eval_ds)
            record["conditions"][condition]["seconds"] = time.perf_counter() - t0
            out_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, record)
            c = record["conditions"][condition]
            log(f"step {step} {condition}: accuracy {c['accuracy']:.3f} (K=4 {c['accuracy_k4']:.3f}, K=64 "
                f"{c['accuracy_k64']:.3f}), format {c['format_common']:.3f}, calls {c['kappa']:.2f} "
                f"[{c['seconds']:.0f} s]")
        done[step] = record
    return done


def protocol_from(ns) -> Protocol:
    return Protocol(eval_first_episode=ns.first_episode, eval_episodes=ns.episodes, budgets=ns.budgets,
                    temperature=ns.temperature, think_prefix=ns.think_prefix, batch=ns.batch)


def add_protocol_flags(p: argparse.ArgumentParser) -> None:
    d = Protocol()
    g = p.add_argument_group("the evaluation protocol (the same for every row of a sweep)")
    g.add_argument("--first-episode", type=int, default=d.eval_first_episode,
                   help="first validation episode (the shipped models were selected on 0-119)")
    g.add_argument("--episodes", type=int, default=d.eval_episodes, help="episodes per evaluation")
    g.add_argument("--budgets", default=d.budgets, help="K drawn per episode from this comma list")
    g.add_argument("--temperature", type=float, default=d.temperature, help="sampling temperature")
    g.add_argument("--think-prefix", action=argparse.BooleanOptionalAction, default=d.think_prefix,
                   help="prefill '<think>\\n' in every turn")
    g.add_argument("--batch", type=int, default=d.batch, help="episodes played together")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default="", help="a trainer's run folder: its args.json and checkpoints")
    p.add_argument("--args", default="", help="an args.json to take the settings from (default: RUN/args.json)")
    p.add_argument("--steps", default="0", help="comma list of steps; 0 is the starting model")
    p.add_argument("--draw", type=int, default=1, help="generation seeds of this draw (a sweep uses the run's seed)")
    p.add_argument("--conditions", default="tools,no_tools", help=f"comma list from {', '.join(CONDITIONS)}")
    p.add_argument("--out-dir", required=True, help="where step_NNNNNN.json go")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    add_protocol_flags(p)
    ns = p.parse_args(argv)
    args_file = ns.args or (os.path.join(ns.run, "args.json") if ns.run else "")
    if not args_file or not os.path.isfile(args_file):
        p.error("give --run RUN_DIR (with its args.json) or --args FILE")
    conditions = [c for c in ns.conditions.split(",") if c]
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown or not conditions:
        p.error(f"--conditions: comma list from {', '.join(CONDITIONS)}, got {ns.conditions!r}")
    try:
        steps = sorted({int(s) for s in ns.steps.split(",") if s.strip()})
    except ValueError:
        p.error(f"--steps: comma list of integers, got {ns.steps!r}")
    if any(s < 0 for s in steps) or (any(s > 0 for s in steps) and not ns.run):
        p.error("--steps: 0 or more; steps above 0 need --run")
    if ns.episodes < 1 or ns.batch < 1 or ns.first_episode < 0:
        p.error("--episodes and --batch must be >= 1, --first-episode >= 0")
    try:
        base = load_base_args(args_file)
    except ValueError as exc:
        p.error(str(exc))
    evaluate_steps(base, steps, Path(ns.out_dir), protocol_from(ns), conditions, ns.draw,
                   run_dir=Path(ns.run) if ns.run else None, device=ns.device)


if __name__ == "__main__":
    main()
