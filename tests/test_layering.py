"""The project's layers and its one home of env defaults.

Imports follow the data flow, world -> environment -> agent -> trainer: ``paravt_env`` imports neither ``agents``
nor ``trainers`` (nor torch), ``agents`` never imports ``trainers``. Every builder of ``ParaVT-LongVideo-v0`` (the
constructor and so ``gym.make``, the PettingZoo twin, the stable-baselines3 wrapper, the trainers, the SFT
corpus's world) takes its defaults from ``paravt_env.config.DEFAULTS`` and differs from it only where it says so.
"""

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import gymnasium as gym
import pytest

import paravt_env
from paravt_env.config import DEFAULTS, ENTRY_POINT, ENV_ID, GATING_BUDGETS, EnvConfig
from paravt_env.env import ParaVTLongVideoEnv

ROOT = Path(__file__).resolve().parents[1]
# package -> the top-level names its modules may never import
FORBIDDEN = {"paravt_env": ("agents", "trainers", "torch"), "agents": ("trainers",)}


# ------------------------------------------------------------------ imports point down the data flow
def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, at any depth (inside functions too);
    relative imports are resolved against the file's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = list(path.relative_to(root).parts[:-1])  # a module's package; an __init__.py's own
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.append((node.lineno, module))
            if not node.module:  # from . import x: x is a module
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def upward_imports(package: str, root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted((root / package).rglob("*.py")):
        for line, module in imported_modules(path, root):
            if module.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_points_up_the_data_flow(package):
    assert not upward_imports(package), "\n".join(upward_imports(package))


def test_the_import_walk_sees_every_kind_of_import(tmp_path):
    """Not a rubber stamp: top-level, nested, from- and relative imports are all found and resolved."""
    pkg = tmp_path / "paravt_env" / "sub"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("import os\nfrom . import world\nfrom ..sources import x\n"
                                "def f():\n    import torch.nn\n    from trainers.core import train\n"
                                "from agents import view\n")
    modules = [m for _, m in imported_modules(pkg / "bad.py", tmp_path)]
    assert {"os", "paravt_env.sub.world", "paravt_env.sources", "torch.nn", "trainers.core", "agents"} <= set(modules)
    assert len(upward_imports("paravt_env", tmp_path)) == 3
    # and in the real tree it does find imports (trainers import agents, paravt_env, torch and each other)
    seen = {m.split(".")[0] for p in (ROOT / "trainers").rglob("*.py") for _, m in imported_modules(p)}
    assert {"agents", "paravt_env", "torch", "trainers"} <= seen


def test_the_run_viewer_sits_with_the_run_folders_it_reads():
    assert (ROOT / "trainers" / "view.py").is_file() and not (ROOT / "agents" / "view.py").exists()
    from agents import checkpoint_io
    from trainers import run_state

    for name in ("RunStateError", "atomic_write", "staged_dir", "write_manifest", "model_dir_problem", "kill_point"):
        assert getattr(run_state, name) is getattr(checkpoint_io, name), name


# ------------------------------------------------------------------ one home of the env's defaults
def settings(env) -> dict:
    """What an env was built with, read back from the env itself."""
    env = env.unwrapped
    ds = env.dataset
    subagent = env.subagent if isinstance(env.subagent, str) else type(env.subagent).__name__
    return dict(budgets=env.budgets, nframes_gating=env.nframes_gating, dispatch=env.dispatch,
                max_turns=env.max_turns, max_calls=env.max_calls, subagent=subagent, think_prefix=env.think_prefix,
                frame_size=env.frame_size, crop_fps=env.crop_fps, crop_max_frames=env.crop_max_frames,
                reward_config=env.reward_config, tools=env.tools, scoring=env.scoring,
                render_mode=env.render_mode, split=ds.split, world_seed=ds.seed, dataset_size=len(ds),
                duration=ds.duration)


def test_the_constructor_takes_every_default_from_the_config():
    params = inspect.signature(ParaVTLongVideoEnv.__init__).parameters
    names = [f.name for f in dataclasses.fields(EnvConfig)]
    assert names == [p for p in params if p != "self"]
    for name in names:
        assert params[name].default is getattr(DEFAULTS, name), name
    assert DEFAULTS.gating_budgets == GATING_BUDGETS and paravt_env.env.GATING_BUDGETS is GATING_BUDGETS
    assert gym.spec(ENV_ID).entry_point == ENTRY_POINT
    module, _, cls = ENTRY_POINT.partition(":")
    assert getattr(__import__(module, fromlist=[cls]), cls) is ParaVTLongVideoEnv
    assert settings(gym.make(ENV_ID)) == settings(DEFAULTS.make()) == settings(ParaVTLongVideoEnv())
    env = DEFAULTS.make()
    assert (env.budgets, env.max_turns, env.max_calls, env.frame_size, env.crop_max_frames) == (
        (DEFAULTS.frame_budget,), DEFAULTS.max_turns, DEFAULTS.max_calls_per_turn, DEFAULTS.frame_size,
        DEFAULTS.crop_max_frames)
    with pytest.raises(TypeError):
        DEFAULTS.replace(no_such_setting=1)


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for c in text:
        depth += c in "([" and 1 or (c in ")]" and -1 or 0)
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    return parts + [cur.strip()]


def test_docs_env_md_lists_the_configs_defaults():
    rows = re.findall(r"^\| (`[^|]+) \| ([^|]+) \|", (ROOT / "docs" / "env.md").read_text(), re.M)
    checked = 0
    for names_cell, default_cell in rows:
        names = re.findall(r"`(\w+)`", names_cell)
        values = _split_top_level(default_cell.replace("`", ""))
        if not names or len(values) != len(names) or not all(hasattr(DEFAULTS, n) for n in names):
            continue
        for name, text in zip(names, values):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                continue  # prose: "file's folder", "world's", "none", "RewardConfig()"
            assert value == getattr(DEFAULTS, name), f"docs/env.md says {name} = {text}"
            checked += 1
    assert checked >= 15


def test_the_pettingzoo_twin_builds_the_default_env():
    twin = paravt_env.parallel_env()
    assert settings(twin.env) == settings(DEFAULTS.make())
    assert len(twin.possible_agents) == 1 + DEFAULTS.max_calls_per_turn
    assert settings(paravt_env.parallel_env(frame_budget=16, subagent="frames").env) == settings(
        DEFAULTS.replace(frame_budget=16).make())  # its sub-agents answer, whatever subagent says


def test_the_sb3_wrapper_changes_only_what_it_says():
    from paravt_env.wrappers import MCQ_FAMILIES, STRUCTURED, make_structured_env
    from trainers import sb3_ppo

    changed = {f.name for f in dataclasses.fields(EnvConfig)
               if getattr(STRUCTURED, f.name) != getattr(DEFAULTS, f.name)}
    assert changed == {"frame_budget", "frame_size", "crop_max_frames", "subagent"}
    expected = settings(STRUCTURED.replace(max_calls_per_turn=4).make())  # one call per crop slot
    assert settings(make_structured_env()) == expected
    env = sb3_ppo.make_env("train", sb3_ppo.Args())
    assert settings(env) == expected and env.unwrapped.dataset.families == MCQ_FAMILIES
    assert sb3_ppo.Args().world_seed == DEFAULTS.world_seed


def test_the_trainers_build_the_default_env_but_for_their_own_choices():
    from agents.lmm.corpus import WorldConfig
    from trainers import para_grpo, rollouts
    from trainers.config import GRPOArgs

    args = GRPOArgs()
    # GRPOArgs: the tiny model's frames and crops (WorldConfig), no think prefix, its own reward knobs
    own = dict(frame_size=tuple(WorldConfig.frame_size), crop_max_frames=WorldConfig.crop_max_frames,
               think_prefix=None, reward_config=rollouts.reward_config(args))
    assert rollouts.env_config(args, DEFAULTS.split) == DEFAULTS.replace(**own)
    assert settings(rollouts.make_env(args, DEFAULTS.split)) == settings(DEFAULTS.replace(**own).make())
    assert args.gating_budgets == ",".join(map(str, GATING_BUDGETS))
    # PARA-GRPO's defaults on top: nFrames gating over the small K, the think prefix
    p = para_grpo.Args()
    own.update(reward_config=rollouts.reward_config(p), think_prefix=DEFAULTS.think_prefix)
    expected = DEFAULTS.replace(**own, nframes_gating=True, gating_budgets=(4, 8, 16))
    assert settings(rollouts.make_env(p, "validation")) == settings(expected.replace(split="validation").make())


def test_the_sft_corpus_world_builds_the_default_env_but_for_the_tiny_models_frames():
    from agents.lmm.corpus import WorldConfig
    from trainers import sft

    wc = WorldConfig()
    own = dict(frame_size=(56, 56), crop_max_frames=8, nframes_gating=True)  # the corpus gates K over the budgets
    assert wc.env_config() == DEFAULTS.replace(**own)
    assert settings(wc.env()) == settings(DEFAULTS.replace(**own).make())
    assert sft.Args().world() == wc
    assert sft.PRESETS["gpu"]["budgets"] == ",".join(map(str, GATING_BUDGETS))
