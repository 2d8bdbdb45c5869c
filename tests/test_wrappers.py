"""StructuredActionWrapper: array-only spaces that stable-baselines3 accepts."""

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest

import paravt_env  # noqa: F401  (registers ParaVT-LongVideo-v0)
from paravt_env.sources import SyntheticDataset
from paravt_env.world import COLOURS, SCENE_NAMES, SHAPES
from paravt_env.wrappers import (MCQ_FAMILIES, StructuredActionWrapper, make_structured_env, parse_option,
                                 scene_ids)


@pytest.fixture(scope="module")
def env():
    e = make_structured_env(split="train", size=600)
    yield e
    e.close()


def test_spaces(env):
    assert isinstance(env.observation_space, gym.spaces.Box)
    assert env.observation_space.dtype == np.float32
    assert env.observation_space.shape == (sum(env.blocks.values()),)
    assert isinstance(env.action_space, gym.spaces.MultiDiscrete)
    assert env.action_space.nvec.tolist() == [9, 9, 9, 9, 4]


def test_sb3_check_env_passes_without_warnings():
    from stable_baselines3.common.env_checker import check_env

    e = make_structured_env(split="train", size=600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(e, warn=True)
    e.close()


def test_random_episodes_two_steps_in_space(env):
    env.action_space.seed(0)
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        assert env.observation_space.contains(obs) and info["phase"] == 0
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and r == 0.0 and not (term or trunc)
        assert info["phase"] == 1
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and term and not trunc
        assert isinstance(info["correct"], bool) and info["choice"] in "ABCD"
        assert info["family"] in MCQ_FAMILIES
        assert r >= 1.0 if info["correct"] else r < 2.0  # the text env's reward, accuracy included
        with pytest.raises(RuntimeError):
            env.step(env.action_space.sample())


def test_reset_is_deterministic(env):
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=7)
    np.testing.assert_array_equal(a, b)


def test_crops_run_and_reach_the_observation(env):
    env.reset(seed=3)
    before = env._observation()
    obs, _, _, _, info = env.step(np.array([1, 8, 8, 0, 0]))  # duplicates run once
    assert info["crop_segments"] == [1, 8] and len(info["tool_windows"]) == 2
    d = env.unwrapped.episode.source.duration
    (a0, b0), (a1, b1) = info["tool_windows"]
    assert a0 == 0.0 and b0 == pytest.approx(d / 8, abs=1e-2) and b1 == pytest.approx(d, abs=1e-2)
    assert not np.array_equal(before, obs)
    # no crop at all: no text turn is spent, the agent answers from the overview
    env.reset(seed=3)
    _, _, _, _, info = env.step(np.zeros(5, np.int64))
    assert info["crop_segments"] == [] and info["turn"] == 0
    _, r, term, _, info = env.step(np.zeros(5, np.int64))
    assert term and info["turn"] == 1 and info["format_reward"] > 0.9


@pytest.mark.parametrize("bad", [np.array([9, 0, 0, 0, 0]), np.array([0, 0, 0, 0, 4]), np.array([-1, 0, 0, 0, 0]),
                                 np.array([0, 0, 0]), np.array([0.5, 0, 0, 0, 0]), "A", None])
def test_bad_actions_are_rejected(env, bad):
    env.reset(seed=0)
    assert not env.action_space.contains(bad) if isinstance(bad, np.ndarray) else True
    with pytest.raises(ValueError, match="action"):
        env.step(bad)
    env.step(np.zeros(5, np.int64))  # the episode is still usable after a rejected action


def test_non_mcq_question_is_refused():
    base = gym.make("ParaVT-LongVideo-v0", dataset=SyntheticDataset("train", size=12, families=("grounding",)),
                    frame_budget=8, frame_size=(32, 32))
    e = StructuredActionWrapper(base)
    with pytest.raises(ValueError, match="not multiple choice"):
        e.reset(seed=0)
    e.close()


def test_constructor_validation():
    base = gym.make("ParaVT-LongVideo-v0", dataset=SyntheticDataset("train", size=12, families=MCQ_FAMILIES),
                    frame_budget=8, frame_size=(32, 32), max_calls_per_turn=2)
    with pytest.raises(ValueError, match="n_crops"):
        StructuredActionWrapper(base, n_crops=3)
    gated = gym.make("ParaVT-LongVideo-v0", dataset=SyntheticDataset("train", size=12, families=MCQ_FAMILIES),
                     nframes_gating=True, frame_size=(32, 32))
    with pytest.raises(ValueError, match="fixed frame budget"):
        StructuredActionWrapper(gated)


def test_perception_matches_the_world(env):
    """Scenes and objects read from pixels agree with the world's ground truth."""
    env.reset(seed=11)
    ep = env.unwrapped.episode
    video = ep.source.video
    truth = [SCENE_NAMES.index(video.scene_at(t).name) for t in env.unwrapped.overview.timestamps]
    assert scene_ids(env.unwrapped.overview.images).tolist() == truth
    env.step(np.array([1, 2, 3, 4, 0]))
    checked = 0
    for _, _, objects, times in env.crop_feats.values():
        for t, objs in zip(times, objects):
            want = sorted((list(COLOURS).index(e.colour), SHAPES.index(e.shape))
                          for e in video.events if e.start <= t < e.end)
            assert sorted(objs) == want
            checked += len(want)
    assert checked > 0


def test_parse_option():
    assert parse_option("the red circle") == (list(COLOURS).index("red"), SHAPES.index("circle"), -1, -1)
    assert parse_option("beach") == (-1, -1, SCENE_NAMES.index("beach"), -1)
    assert parse_option("7") == (-1, -1, -1, 7)


def test_ppo_smoke(tmp_path, monkeypatch):
    pytest.importorskip("stable_baselines3")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from trainers import sb3_ppo

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "result.json"
    result = sb3_ppo.main(["--total-timesteps", "128", "--num-envs", "2", "--num-steps", "32",
                           "--batch-size", "32", "--update-epochs", "1", "--eval-episodes", "4",
                           "--run-name", "smoke", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["ppo"]["episodes"] == saved["random"]["episodes"] == 4
    assert 0.0 <= saved["ppo"]["accuracy"] <= 1.0 and 0.0 <= saved["random"]["accuracy"] <= 1.0
    assert (tmp_path / "runs" / "smoke" / "model.zip").exists()
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "runs" / "smoke").iterdir())
    assert result["ppo"] == saved["ppo"]


# ---- the support feature alone, no learning --------------------------------------------------


def test_crop_rules():
    from paravt_env.wrappers import crop_rule_action

    e = make_structured_env(split="validation", size=60, blocks=("question", "perception"))
    e.reset(seed=0)
    assert crop_rule_action(e, "none") == [0, 0, 0, 0]
    assert crop_rule_action(e, "uniform") == [1, 3, 5, 7]
    checked = 0
    for seed in range(12):
        e.reset(seed=seed)
        match = e.perception()[0]
        crops = crop_rule_action(e, "scene")
        if e.question_scene < 0 or not (match > 0).any():
            assert crops == [1, 3, 5, 7]
            continue
        chosen = [c for c in crops if c > 0]
        assert chosen and all(match[c - 1] > 0 for c in chosen)
        others = [b for b in range(e.B) if b + 1 not in chosen]
        assert min(match[c - 1] for c in chosen) >= max([match[b] for b in others if match[b] > 0], default=0)
        checked += 1
    assert checked >= 4
    with pytest.raises(ValueError, match="crop rule"):
        crop_rule_action(e, "psychic")


def test_support_policy_answers_the_supports_argmax_and_beats_random():
    from paravt_env.wrappers import support_policy

    e = make_structured_env(split="validation", size=240, blocks=("question", "perception"))
    policy = support_policy(e, "scene")
    correct = 0
    for seed in range(40):
        obs, _ = e.reset(seed=1000 + seed)
        obs, *_ = e.step(policy(obs))
        support = e.support()[: len(e.options_parsed)]
        action = policy(obs)
        assert action[-1] == int(np.argmax(support))
        *_, info = e.step(action)
        correct += info["correct"]
    e.action_space.seed(0)
    random_correct = 0
    for seed in range(40):
        e.reset(seed=1000 + seed)
        e.step(e.action_space.sample())
        *_, info = e.step(e.action_space.sample())
        random_correct += info["correct"]
    assert correct >= random_correct + 6, (correct, random_correct)
    with pytest.raises(ValueError, match="crop rule"):
        support_policy(e, "everything")


def test_support_baseline_cli(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from trainers import sb3_ppo

    out = tmp_path / "support.json"
    result = sb3_ppo.main(["--baseline", "support", "--eval-episodes", "6", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert set(saved) >= {"support_none_crops", "support_uniform_crops", "support_scene_crops", "random"}
    assert all(saved[k]["episodes"] == 6 for k in ("support_scene_crops", "random"))
    assert result["support_scene_crops"] == saved["support_scene_crops"]
    with pytest.raises(SystemExit, match="baseline"):
        sb3_ppo.main(["--baseline", "magic"])
