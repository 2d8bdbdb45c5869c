"""TRL's GRPOTrainer on ParaVT-LongVideo (examples/trl_grpo.py): prompts, reward and two real steps.

Skipped when trl is not installed (`pip install -e ".[trl]"`; CI installs it through ".[all]").
"""

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from safetensors.torch import load_file  # noqa: E402

from examples import trl_grpo  # noqa: E402
from trainers.rollouts import make_env  # noqa: E402

SMALL = dict(prompts_per_step=2, group_size=4, max_new_tokens=32)


@pytest.fixture(scope="module")
def args():
    return trl_grpo.single_turn_args(**SMALL)


@pytest.fixture(scope="module")
def loaded(args):
    path = trl_grpo.core.resolve_model(args)
    model, tokenizer, image_processor = trl_grpo.load_model(path, args)
    processor, _ = trl_grpo.load_processor(path, tokenizer, image_processor)
    trl_grpo.with_generation_prefix(processor, trl_grpo.THINK_PREFIX)
    return path, tokenizer, image_processor, processor


def test_prompts_are_our_trainers_prompts(args, loaded):
    """The rows TRL trains on, rendered by the processor TRL gets, are token for token and pixel
    for pixel what our policy builds for the same episodes, plus the prefilled "<think>\\n"."""
    from trl.data_utils import prepare_multimodal_messages

    from agents.lmm.policy import TransformersPolicy

    path, tokenizer, _, processor = loaded
    dataset = trl_grpo.build_dataset(args, steps=1)
    assert len(dataset) == args.prompts_per_step
    assert [r["reset_seed"] for r in dataset] == trl_grpo.prompt_seeds(args, 1)
    policy = TransformersPolicy(path)
    env = make_env(args, "train")
    prefix_ids = tokenizer.encode(trl_grpo.THINK_PREFIX, add_special_tokens=False)
    for row in dataset:  # through the datasets round trip (images stored and decoded)
        _, info = env.reset(seed=row["reset_seed"])
        assert row["question_id"] == env.episode.question.id and row["ground_truth"] == env.episode.question.answer
        assert len(row["images"]) == info["frame_budget"]
        messages = prepare_multimodal_messages(row["prompt"], row["images"])
        out = processor.apply_chat_template([messages], add_generation_prompt=True, tokenize=True,
                                            return_dict=True, return_tensors="pt")
        conv = policy.start(info["messages"])
        assert out["input_ids"][0].tolist() == conv.token_ids + prefix_ids
        assert torch.equal(torch.as_tensor(out["image_grid_thw"]), torch.stack(conv.image_grid_thw))
        assert torch.allclose(torch.as_tensor(out["pixel_values"]).float(), torch.cat(conv.pixel_values).float(),
                              atol=1e-5)
    env.close()


def test_reward_functions_sum_to_the_environments_reward(args, loaded):
    """accuracy + w_fmt * format + tool, from the three TRL reward functions, is the reward our
    environment returns for the same completion tokens (think prefix prefilled, EOS kept)."""
    _, tokenizer, _, _ = loaded
    funcs, weights = trl_grpo.reward_functions(tokenizer, trl_grpo.reward_config(args))
    assert [f.__name__ for f in funcs] == ["paravt_accuracy", "paravt_format", "paravt_tool"]
    row = trl_grpo.episode_rows(args, steps=1)[0]
    texts = [f"The overview is enough.\n</think>\n<answer>{row['ground_truth']}</answer><|im_end|>",
             "The overview is enough.\n</think>\n<answer>not it</answer>",
             "no tags at all, then <|im_end|>", "</think><tool_call>{\"name\": \"crop_video\"}</tool_call>"]
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    cols = {k: [row[k]] * len(ids) for k in ("ground_truth", "answer_type", "options", "question")}
    logged = {}
    terms = [f(completion_ids=ids, log_extra=lambda k, v: logged.setdefault(k, v), **cols) for f in funcs]
    env = make_env(args, "train")
    for i, t in enumerate(texts):
        env.reset(seed=row["reset_seed"])
        _, reward, terminated, truncated, info = env.step(t)
        assert terminated or truncated  # one turn
        assert sum(w * term[i] for w, term in zip(weights, terms)) == pytest.approx(reward, abs=1e-6)
        assert terms[1][i] == pytest.approx(info["format_reward"], abs=1e-6)
        assert logged["scored_text"][i] == env.trajectory  # the text scored is the env's trajectory
    env.close()
    assert terms[0][0] == 1.0 and terms[0][1] == 0.0  # the right and a wrong answer


def test_processor_rejects_a_template_that_hides_the_prefix(loaded):
    _, tokenizer, image_processor, _ = loaded
    proc = trl_grpo._processor_class()(image_processor, tokenizer,
                                       chat_template=tokenizer.chat_template + "{{ '<|endoftext|>' }}")
    with pytest.raises(ValueError, match="think prefix"):
        trl_grpo.with_generation_prefix(proc, trl_grpo.THINK_PREFIX)


def test_two_grpo_trainer_steps_train_on_our_reward(args, tmp_path):
    """examples/trl_grpo.py end to end: 2 GRPOTrainer steps on the tiny checkpoint. The logged reward
    is our scorer's (its three terms, weighted, and the correct-rate it logs), a step had reward
    spread within a group, the language model's weights moved (no weight decay, so only by the
    gradient), the frozen vision tower did not, and the saved model loads in our policy."""
    from agents.lmm.policy import TransformersPolicy

    out = tmp_path / "run"
    history = trl_grpo.main(["--total-steps", "2", "--prompts-per-step", "2", "--group-size", "4",
                             "--max-new-tokens", "32", "--weight-decay", "0", "--out", str(out), "--report-to", "none"])
    steps = [h for h in history if "reward" in h]
    assert len(steps) == 2
    for h in steps:
        for key in ("rewards/paravt_accuracy/mean", "rewards/paravt_format/mean", "rewards/paravt_tool/mean",
                    "paravt/correct"):
            assert key in h
        assert h["reward"] == pytest.approx(h["rewards/paravt_accuracy/mean"] + args.format_weight *
                                            h["rewards/paravt_format/mean"] + h["rewards/paravt_tool/mean"], abs=1e-4)
    assert min(h["frac_reward_zero_std"] for h in steps) < 1.0  # some group had a non-zero advantage
    before = load_file(str(Path(trl_grpo.core.resolve_model(args)) / "model.safetensors"))
    after = load_file(str(out / "final_model" / "model.safetensors"))
    assert before.keys() == after.keys()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(k.startswith("visual.") for k in before)  # the check below has something to check
    assert not any(k.startswith("visual.") for k in changed)  # frozen
    assert any(k.startswith("model.layers.") for k in changed)  # the language model moved
    policy = TransformersPolicy(str(out / "final_model"))
    env = make_env(args, "validation")
    _, info = env.reset(seed=0)
    [c] = policy.generate([policy.start(info["messages"])], temperature=0.0, max_new_tokens=8)
    assert isinstance(c.text, str) and np.isfinite(c.logprobs).all()
    env.close()


def test_speed_benchmark_runs_both_trainers(tmp_path):
    """benchmarks/speed_trl.py end to end at a tiny size: both trainers run and the ratio is measured."""
    import math
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import speed_trl

    res = speed_trl.main(["--steps", "2", "--rounds", "1", "--out", str(tmp_path), "--",
                          "--prompts-per-step", "1", "--group-size", "2", "--max-new-tokens", "8"])
    assert len(res["ours"]["steps"]) == 2 and len(res["trl"]["steps"]) == 2
    assert math.isfinite(res["ratio_mean"]) and res["ratio_mean"] > 0
    assert (tmp_path / "speed_trl.md").read_text().count("|") > 10
