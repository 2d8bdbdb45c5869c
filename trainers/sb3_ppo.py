"""PPO (stable-baselines3) on the structured-action view of ParaVT-LongVideo-v0.

A classic-RL baseline: the policy picks crop segments, then an option letter, from the flat
perception vector of :class:`paravt_env.wrappers.StructuredActionWrapper`. After training,
the deterministic PPO policy and a uniform-random policy play the same validation episodes
(same reset seeds) and both accuracies are printed and written to ``--out``.

    python trainers/sb3_ppo.py --total-timesteps 8192 --seed 1 --out runs/ppo_result.json

``--baseline support`` trains nothing: it scores the wrapper's hand-made per-option support
feature alone (answer = its argmax) after no crops, uniform crops and scene-guided crops, next
to random actions, on the same validation episodes PPO is scored on, so a PPO table can say
what the policy learned beyond that feature:

    python trainers/sb3_ppo.py --baseline support --out runs/support_baseline.json

TensorBoard: ``tensorboard --logdir runs`` (the run lands in ``runs/<run name>/``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from paravt_env.config import DEFAULTS


@dataclass
class Args:
    run_name: str = ""  # default: sb3_ppo__<seed>__<unix time>
    seed: int = 1
    total_timesteps: int = 8192  # environment steps (2 per episode)
    num_envs: int = 4
    num_steps: int = 64  # steps per env per rollout: many small PPO updates
    batch_size: int = 64
    update_epochs: int = 10
    learning_rate: float = 5e-4
    gamma: float = 1.0  # two-step episodes: the crop step is credited with the final reward
    gae_lambda: float = 1.0
    ent_coef: float = 0.01
    hidden: int = 128  # width of the two hidden layers (policy and value nets)
    # StructuredActionWrapper blocks, comma-separated, or "all". The compact default learns far
    # faster in a few thousand steps than "all" (whose per-frame pixel statistics add ~600 dims)
    obs_blocks: str = "question,perception"
    world_seed: int = DEFAULTS.world_seed  # the synthetic world; train and validation splits share no video
    eval_episodes: int = 400
    eval_seed: int = 10_000  # validation episode i uses reset(seed=eval_seed + i)
    out: str = ""  # JSON with both accuracies; default runs/<run name>/result.json
    torch_threads: int = 2
    baseline: str = ""  # "support": no training; score the support feature's argmax (see above)


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args(argv)))


def make_env(split: str, args: Args):
    """The structured-action env (paravt_env.wrappers.make_structured_env: its settings are STRUCTURED there)."""
    from paravt_env.wrappers import make_structured_env

    blocks = None if args.obs_blocks == "all" else tuple(b.strip() for b in args.obs_blocks.split(","))
    return make_structured_env(split=split, seed=args.world_seed, blocks=blocks)


def evaluate(env, policy, episodes: int, seed: int) -> dict:
    """Play ``episodes`` episodes with ``policy(obs) -> action``; accuracy overall and per family."""
    correct, per_family, rewards = 0, defaultdict(list), []
    for i in range(episodes):
        obs, info = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, r, terminated, truncated, info = env.step(policy(obs))
            total += r
            done = terminated or truncated
        ok = bool(info.get("correct", False))
        correct += ok
        per_family[info["family"]].append(ok)
        rewards.append(total)
    return {"accuracy": correct / episodes, "mean_reward": float(np.mean(rewards)), "episodes": episodes,
            "per_family": {k: float(np.mean(v)) for k, v in sorted(per_family.items())}}


def support_baseline(args: Args) -> dict:
    """The support feature's argmax after each crop rule, and random actions, on the validation
    episodes PPO is scored on (reset seeds ``eval_seed + i``)."""
    from paravt_env.wrappers import CROP_RULES, support_policy

    env = make_env("validation", args)
    result = {"baseline": "support", "eval_split": "validation",
              "eval_seeds": [args.eval_seed, args.eval_seed + args.eval_episodes - 1]}
    for rule in CROP_RULES:
        result[f"support_{rule}_crops"] = evaluate(env, support_policy(env, rule), args.eval_episodes, args.eval_seed)
    env.action_space.seed(args.seed)
    result["random"] = evaluate(env, lambda o: env.action_space.sample(), args.eval_episodes, args.eval_seed)
    env.close()
    out = args.out or os.path.join("runs", "support_baseline.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    families = sorted(result["random"]["per_family"])
    print("| policy | accuracy | " + " | ".join(families) + " |")
    print("|---|---|" + "---|" * len(families))
    for key in [f"support_{rule}_crops" for rule in CROP_RULES] + ["random"]:
        r = result[key]
        print(f"| {key.replace('_', ' ')} | {r['accuracy']:.3f} | "
              + " | ".join(f"{r['per_family'][f]:.2f}" for f in families) + " |")
    print(f"({args.eval_episodes} validation episodes; wrote {out})")
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.baseline:
        if args.baseline != "support":
            raise SystemExit(f"--baseline must be 'support' (or empty to train PPO), got {args.baseline!r}")
        return support_baseline(args)
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    torch.set_num_threads(args.torch_threads)
    run_name = args.run_name or f"sb3_ppo__{args.seed}__{int(time.time())}"
    run_dir = os.path.join("runs", run_name)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump(dataclasses.asdict(args), f, indent=2)

    vec = make_vec_env(lambda: make_env("train", args), n_envs=args.num_envs, seed=args.seed)
    model = PPO("MlpPolicy", vec, learning_rate=args.learning_rate, n_steps=args.num_steps,
                batch_size=args.batch_size, n_epochs=args.update_epochs, gamma=args.gamma,
                gae_lambda=args.gae_lambda, ent_coef=args.ent_coef, seed=args.seed, verbose=0,
                policy_kwargs={"net_arch": [args.hidden, args.hidden]})
    # TensorBoard straight into runs/<run name>/ (tensorboard_log= would add a "PPO_1" level)
    try:
        import tensorboard  # noqa: F401

        formats = ["stdout", "tensorboard", "csv"]
    except ImportError:
        print("tensorboard is not installed: logging to CSV only")
        formats = ["stdout", "csv"]
    model.set_logger(configure(run_dir, formats))
    model.logger.record("text/hyperparameters", json.dumps(dataclasses.asdict(args)))
    start = time.time()
    model.learn(total_timesteps=args.total_timesteps)
    train_s = time.time() - start
    model.save(os.path.join(run_dir, "model.zip"))
    vec.close()

    env = make_env("validation", args)
    ppo = evaluate(env, lambda o: model.predict(o, deterministic=True)[0], args.eval_episodes, args.eval_seed)
    env.action_space.seed(args.seed)
    rnd = evaluate(env, lambda o: env.action_space.sample(), args.eval_episodes, args.eval_seed)
    env.close()

    result = {"run_name": run_name, "total_timesteps": args.total_timesteps, "train_seconds": round(train_s, 1),
              "eval_split": "validation", "eval_seeds": [args.eval_seed, args.eval_seed + args.eval_episodes - 1],
              "ppo": ppo, "random": rnd}
    out = args.out or os.path.join(run_dir, "result.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"PPO    accuracy {ppo['accuracy']:.3f}  mean reward {ppo['mean_reward']:.3f}  {ppo['per_family']}")
    print(f"random accuracy {rnd['accuracy']:.3f}  mean reward {rnd['mean_reward']:.3f}  {rnd['per_family']}")
    print(f"({args.eval_episodes} validation episodes, {args.total_timesteps} training steps in {train_s:.0f} s; "
          f"wrote {out})")
    return result


if __name__ == "__main__":
    main()
