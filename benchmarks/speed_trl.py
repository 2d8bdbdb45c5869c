"""Seconds per GRPO step: our trainer against TRL's GRPOTrainer, same single-turn setting.

    pip install -e ".[trl]"
    python benchmarks/speed_trl.py                              # 2 rounds x 6 steps each, CPU, 1 thread
    python benchmarks/speed_trl.py --steps 8 --rounds 3 -- --group-size 4 --max-new-tokens 32

Both trainers get one set of arguments (examples/trl_grpo.py's flags, which are
trainers/para_grpo.py's, after ``--``), in the setting they share: no tool advertised, one
turn (``--no-tools --max-turns 1``). That means the same checkpoint, the same prompts (the
same reset seeds, so the same videos, questions and K), the same G, prompts per step,
new-token budget, temperature, learning rate, KL coefficient and PPO clip, and the same
torch threads. Each round runs our trainer (``trainers.core.train``) for --steps steps, then
TRL for --steps steps, in one process; the next round runs them in the other order, so that a
change in machine load weighs on both. The first step of every run is warm-up and is left out
of the means.

What a step covers:
- Ours: ``perf/step_seconds``, i.e. env reset and frame rendering, prompt tokens and pixel
  values, generation, scoring, advantages, then the update (reference and policy forwards,
  backward, optimizer).
- TRL: the time from the end of one step to the end of the next. That covers fetching the
  batch (PIL images decoded from the dataset), prompt processing, generation, reward, reference
  log-probs, loss forward and backward, optimizer, and logging.
- TRL's dataset rows are rendered once, before training (reported apart). Our trainer renders
  its frames inside the step.

Where the time goes:
- Ours: generation; env + reward (reset, frame rendering, prompt tokens and pixel values,
  scoring); update (reference and policy forwards, backward, optimizer).
- TRL: generation (``_generate_single_turn``), reward (``_calculate_rewards``), prompt
  processing (``_tokenize_prompts``: chat template, image processor), the rest of
  ``_generate_and_score_completions`` (mostly the reference model's log-probs; also decoding
  and advantages), and update (the rest of the step: loss forward and backward, optimizer,
  batch fetch, logging).

Generated tokens differ between the two because each samples its own completions; tokens per
step are reported next to the times.

Writes speed_trl.json and speed_trl.md to --out (default runs/speed_trl/).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python benchmarks/speed_trl.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from examples import trl_grpo  # noqa: E402
from trainers import core  # noqa: E402


def ours(args, steps: int, runs_dir: str, name: str) -> list[dict]:
    run_args = dataclasses.replace(args, total_steps=steps, runs_dir=runs_dir, run_name=name, eval_every=0,
                                   checkpoint_every=0, progress=False)
    hist = core.train(run_args).history
    n = args.prompts_per_step * args.group_size
    rows = []
    for h in hist:
        seconds = h["perf/step_seconds"]
        parts = {"generation": h.get("perf/generate_main_seconds", 0.0), "env_reward": h.get("perf/env_seconds", 0.0),
                 "update": h.get("perf/backward_seconds", 0.0)}
        rows.append({"step": h["step"], "seconds": seconds, **parts, "other": seconds - sum(parts.values()),
                     "tokens": h["train/main_tokens_per_rollout"] * n, "mean_reward": h["train/reward"]})
    return rows


def timed_trainer_cls():
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that adds up the seconds of its rollout phases (a measurement, no change)."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.phase_seconds = defaultdict(float)

        def _timed(self, name, method, *a, **kw):
            t0 = time.perf_counter()
            try:
                return method(*a, **kw)
            finally:
                self.phase_seconds[name] += time.perf_counter() - t0

        def _generate_single_turn(self, *a, **kw):
            return self._timed("generation", super()._generate_single_turn, *a, **kw)

        def _tokenize_prompts(self, *a, **kw):
            return self._timed("prompts", super()._tokenize_prompts, *a, **kw)

        def _calculate_rewards(self, *a, **kw):
            return self._timed("reward", super()._calculate_rewards, *a, **kw)

        def _generate_and_score_completions(self, *a, **kw):
            return self._timed("rollout", super()._generate_and_score_completions, *a, **kw)

    return TimedGRPOTrainer


def step_clock():
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Seconds from the end of one optimizer step to the end of the next (the first step: from
        its on_step_begin), with the trainer's phase seconds of that step."""

        def __init__(self):
            self.trainer, self.rows, self.begin, self.last_end = None, [], None, None

        def on_step_begin(self, args, state, control, **kw):
            if self.begin is None:
                self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            seconds = now - (self.last_end if self.last_end is not None else self.begin)
            self.last_end = now
            phases = dict(self.trainer.phase_seconds)
            self.trainer.phase_seconds.clear()
            gen, rew, rollout = phases.get("generation", 0.0), phases.get("reward", 0.0), phases.get("rollout", 0.0)
            prompts = phases.get("prompts", 0.0)
            self.rows.append({"step": state.global_step, "seconds": seconds, "generation": gen, "reward": rew,
                              "prompts": prompts, "rollout_other": rollout - gen - rew - prompts,
                              "update": seconds - rollout})

    return StepClock()


def trl_run(args, steps: int, out_dir: str) -> tuple[list[dict], float]:
    t0 = time.perf_counter()
    dataset = trl_grpo.build_dataset(args, steps)
    build_seconds = time.perf_counter() - t0
    clock = step_clock()
    torch.set_num_threads(args.torch_threads)
    trainer, _ = trl_grpo.build_trainer(args, out_dir, steps=steps, trainer_cls=timed_trainer_cls(), dataset=dataset)
    clock.trainer = trainer
    trainer.add_callback(clock)
    trainer.train()
    logs = {h["step"]: h for h in trainer.state.log_history if "reward" in h and "step" in h}
    n = args.prompts_per_step * args.group_size
    for r in clock.rows:
        h = logs.get(r["step"], {})
        r["tokens"] = float(h.get("completions/mean_length", float("nan"))) * n
        r["mean_reward"] = float(h.get("reward", float("nan")))
    return clock.rows, build_seconds


def summarize(rows: list[dict], keys) -> dict:
    steady = [r for r in rows if not r["warmup"]]
    out = {k: float(np.mean([r[k] for r in steady])) for k in keys}
    out["median_seconds"] = float(np.median([r["seconds"] for r in steady]))
    out["steps"] = len(steady)
    return out


def _shown(path: str) -> str:
    """A path inside the repository relative to it (for the markdown), others as given."""
    root = Path(__file__).resolve().parents[1]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def markdown(res: dict) -> str:
    s, o, t = res["settings"], res["ours"]["mean"], res["trl"]["mean"]
    lines = [
        f"Seconds per GRPO step, single turn (`--no-tools --max-turns 1`), {res['device']}, {s['torch_threads']} torch "
        f"thread(s), model `{res['model']}`: {s['prompts_per_step']} prompts x G = {s['group_size']}, "
        f"{s['max_new_tokens']} new tokens, T = {s['temperature']}, frames {s['frame_size']} px, K from "
        f"{s['gating_budgets'] if s['nframes_gating'] else s['frame_budget']}, lr {s['learning_rate']}, KL "
        f"{s['kl_coef']}; {res['rounds']} rounds x {res['steps_per_run']} steps per trainer, alternating order, first "
        f"step of each run excluded ({o['steps']} + {t['steps']} steps timed). TRL {res['trl_version']}, transformers "
        f"{res['transformers_version']}, torch {res['torch_version']}.",
        "",
        "| trainer | s/step (mean) | s/step (median) | generation | env + reward | prompt processing | reference "
        "log-probs + rest of rollout | update | other | tokens/step | reward |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| ours (trainers/para_grpo.py) | {o['seconds']:.2f} | {o['median_seconds']:.2f} | {o['generation']:.2f} | "
        f"{o['env_reward']:.2f} | (in env) | (in update) | {o['update']:.2f} | {o['other']:.2f} | {o['tokens']:.0f} | "
        f"{o['mean_reward']:.2f} |",
        f"| TRL GRPOTrainer | {t['seconds']:.2f} | {t['median_seconds']:.2f} | {t['generation']:.2f} | "
        f"{t['reward']:.2f} | {t['prompts']:.2f} | {t['rollout_other']:.2f} | {t['update']:.2f} | - | {t['tokens']:.0f} | "
        f"{t['mean_reward']:.2f} |",
        "",
        f"**Ratio ours / TRL: {res['ratio_mean']:.2f}x** (mean step time; median {res['ratio_median']:.2f}x; per round "
        f"{', '.join(f'{x:.2f}' for x in res['ratio_per_round'])}). TRL's dataset rows took "
        f"{np.mean(res['trl']['dataset_build_seconds']):.2f} s to build per run, outside its steps. Load average "
        f"{res['load_average'][0]:.2f} -> {res['load_average'][1]:.2f} on {res['cpus']} CPUs.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=6, help="steps per run (the first is warm-up)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of (ours, TRL), the order alternating")
    p.add_argument("--out", default="runs/speed_trl", help="output folder for speed_trl.json and speed_trl.md")
    p.add_argument("extra", nargs="*", help="examples/trl_grpo.py arguments after --, e.g. -- --group-size 4")
    a = p.parse_args(argv)
    if a.steps < 2 or a.rounds < 1:
        p.error("--steps must be >= 2 (the first is warm-up) and --rounds >= 1")
    import transformers
    import trl

    args, _ = trl_grpo.parse_args(list(a.extra))
    args = dataclasses.replace(args, model=str(core.resolve_model(args)))
    load0 = os.getloadavg()
    rows = {"ours": [], "trl": []}
    builds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = ("ours", "trl") if r % 2 == 0 else ("trl", "ours")
            for who in order:
                print(f"round {r + 1}/{a.rounds}: {who}", file=sys.stderr)
                if who == "ours":
                    got = ours(args, a.steps, tmp, f"ours_r{r}")
                else:
                    got, build = trl_run(args, a.steps, str(Path(tmp) / f"trl_r{r}"))
                    builds.append(build)
                for i, row in enumerate(got):
                    rows[who].append({"round": r, "warmup": i == 0, **row})
    ours_mean = summarize(rows["ours"], ("seconds", "generation", "env_reward", "update", "other", "tokens",
                                         "mean_reward"))
    trl_mean = summarize(rows["trl"], ("seconds", "generation", "reward", "prompts", "rollout_other", "update", "tokens",
                                       "mean_reward"))

    def mean_of(who, r):
        return float(np.mean([x["seconds"] for x in rows[who] if x["round"] == r and not x["warmup"]]))

    res = {
        "model": _shown(args.model), "device": "cuda" if torch.cuda.is_available() else "cpu", "rounds": a.rounds,
        "steps_per_run": a.steps, "cpus": os.cpu_count(), "load_average": [load0[0], os.getloadavg()[0]],
        "platform": platform.platform(), "trl_version": trl.__version__,
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "settings": {k: getattr(args, k) for k in trl_grpo.SHARED_FLAGS},
        "ours": {"mean": ours_mean, "steps": rows["ours"]},
        "trl": {"mean": trl_mean, "steps": rows["trl"], "dataset_build_seconds": builds},
        "ratio_mean": ours_mean["seconds"] / trl_mean["seconds"],
        "ratio_median": ours_mean["median_seconds"] / trl_mean["median_seconds"],
        "ratio_per_round": [mean_of("ours", r) / mean_of("trl", r) for r in range(a.rounds)],
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed_trl.json").write_text(json.dumps(res, indent=2))
    md = markdown(res)
    (out / "speed_trl.md").write_text(md)
    print(md)
    return res


if __name__ == "__main__":
    main()
