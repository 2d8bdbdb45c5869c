"""The real-scale paths at test size: log-probs through the output layer in chunks, the bf16 reference, the decode
caches freed before the update, and benchmarks/real_scale.py's CPU smoke run (training, the samplers side by side,
the cold start of a Qwen-VL folder)."""

import json
import math
from dataclasses import replace

import pytest
import torch

from trainers import core
from trainers.config import GRPOArgs
from trainers.core import TrainSeq


def _rollouts(policy, n=3):
    """Conversations with a prompt, sampled completions and behaviour log-probs."""
    convs = [policy.start([{"role": "user", "content": f"Say something about the number {i}."}]) for i in range(n)]
    comps = policy.generate(convs, max_new_tokens=6 + 3 * n, temperature=1.0, seed=3)
    return [c.append_completion(x) for c, x in zip(convs, comps)]


def test_chunked_log_probs_equal_one_pass_and_give_the_same_gradients(policy, monkeypatch):
    """A large vocabulary's log-probs come in chunks of scored positions, each recomputed in the backward pass:
    the same log-probs, entropies and gradients as one pass over every position, with the layers' activation
    checkpointing on too."""
    convs = _rollouts(policy)
    small = 5 * policy.model.get_output_embeddings().weight.shape[0]
    out = []
    for chunk, checkpointing in ((core.LOGPROB_CHUNK_VALUES, False), (small, False), (small, True)):
        monkeypatch.setattr(core, "LOGPROB_CHUNK_VALUES", chunk)
        if checkpointing:
            policy.model.activation_checkpointing_enable({"use_reentrant": False})
        policy.model.zero_grad(set_to_none=True)
        lps, ents = core.sequence_logprobs(policy.model, policy, convs, want_entropy=True)
        sum(lp.sum() for lp in lps).backward()
        grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
        out.append(([x.detach() for x in lps], [x.detach() for x in ents], grads))
    policy.model.activation_checkpointing_disable()
    policy.model.zero_grad(set_to_none=True)
    lp0, e0, g0 = out[0]
    assert any("lm_head" in k or "embed_tokens" in k for k in g0)
    for lp1, e1, g1 in out[1:]:
        for a, b in zip(lp0 + e0, lp1 + e1):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
        assert g0.keys() == g1.keys()
        for k in g0:
            torch.testing.assert_close(g1[k], g0[k], rtol=1e-5, atol=1e-7)


def test_a_bf16_reference_holds_bf16_weights_and_fp32_rotary_tables(tiny_dir):
    """--reference-dtype bf16: the frozen reference's parameters in bf16 (its buffers, such as the rotary tables,
    stay fp32), its KL to the fp32 policy small; refused without --dtype bf16."""
    args = GRPOArgs(model=tiny_dir, device="cpu", dtype="bf16", reference_dtype="bf16", progress=False)
    _, policy, ref, opt = core._load_models(args, core.Dist(), torch.device("cpu"))
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in policy.model.parameters()} == {torch.float32}
    assert all(b.dtype != torch.bfloat16 for b in ref.buffers())
    convs = _rollouts(policy, 2)
    upd = core.grpo_update(policy.model, None, ref, policy, opt, [TrainSeq(c, 1.0, "main") for c in convs], args,
                           core.Dist())
    assert math.isfinite(upd["loss"]) and 0 <= upd["kl"] < 0.05
    with pytest.raises(ValueError, match="--reference-dtype bf16 needs --dtype bf16"):
        core.validate_args(replace(args, dtype="fp32"))


def test_freed_decode_caches_sample_what_kept_ones_sample(tiny_dir, tmp_path):
    """--no-keep-decode-caches: the graph sampler keeps only its latest cache and frees it before each update; the
    run samples and trains exactly as with the caches kept."""
    runs = {}
    for keep in (True, False):
        args = GRPOArgs(model=tiny_dir, runs_dir=str(tmp_path / str(keep)), device="cpu", total_steps=2,
                        group_size=2, max_new_tokens=8, subagent_max_new_tokens=6, max_turns=2, eval_every=0,
                        checkpoint_every=0, dataset_size=60, progress=False, rollout_backend="hf-graph",
                        keep_decode_caches=keep)
        result = core.train(args)
        runs[keep] = result
        kept = result.policy.kept_caches
        assert (kept.max_kept, len(kept) == 0) == ((4, False) if keep else (1, True))
    same = ("train/reward", "train/loss", "train/main_tokens_per_rollout", "train/visual_tokens_per_rollout",
            "train/text_tokens_per_rollout", "train/forward_tokens")
    for a, b in zip(runs[True].history, runs[False].history):
        assert {k: a[k] for k in same} == pytest.approx({k: b[k] for k in same}, rel=1e-6)


def test_release_rows_from_an_export_read_back_as_the_same_questions(tmp_path):
    from paravt_env.export import export
    from paravt_env.sources import FileDataset, SyntheticDataset

    path = export(tmp_path, 6, seed=0, fps=1, size=(32, 32), duration=60, release_format=True)
    row = json.loads(path.read_text().splitlines()[0])
    assert set(row) == {"prompt", "videos", "extra_info"} and row["prompt"][0]["content"].startswith("<video>\n")
    files, world = FileDataset(path), SyntheticDataset(split="test", seed=0, size=6, duration=60)
    for i in range(6):
        a, b = files[i].question, world[i].question
        assert (a.id, a.text, a.answer, a.answer_type, a.options, a.evidence) == \
               (b.id, b.text, b.answer, b.answer_type, b.options, b.evidence)
    assert files[0].source.duration == pytest.approx(60.0)


# ------------------------------------------------------------------ benchmarks/real_scale.py --tiny
@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    work = tmp_path_factory.mktemp("real_scale")
    return ["--tiny", "--work", str(work / "work"), "--out", str(work / "out")], work / "out" / "real_scale.json"


def test_real_scale_smoke_trains_a_qwen_vl_folder_on_encoded_videos(bench):
    """Two PARA-GRPO steps of the tiny Qwen2.5-VL shape on one-minute H.264 videos through the trainer: every
    measured field is there and positive, and the forced calls make every rollout the longest the settings allow."""
    from benchmarks import real_scale

    argv, path = bench
    real_scale.main(argv)
    res = json.loads(path.read_text())
    [row] = res["rows"]
    assert row["status"] == "ok" and row["steps_run"] == 2
    for key in ("step_seconds", "generate_main_seconds", "generate_sub_seconds", "backward_seconds",
                "reference_forward_seconds", "logprob_forward_seconds", "loss_backward_seconds", "optimizer_seconds",
                "visual_tokens_per_rollout", "text_tokens_per_rollout", "main_context_tokens", "peak_memory_gb",
                "update_tokens_per_second", "forward_tokens"):
        assert row[key] > 0, key
    for part in ("generate_main", "generate_sub", "backward"):
        assert 0 < row[f"{part}_share"] < 1
    # 3 turns of 8 sampled tokens, 2 calls in each of the first two answered in 4 tokens, every sequence trained
    assert (row["main_tokens_per_rollout"], row["tool_calls_per_rollout"], row["sub_tokens_per_rollout"]) == (24, 4, 16)
    per_rollout = row["visual_tokens_per_rollout"] + row["text_tokens_per_rollout"]
    assert per_rollout * row["sequences"] == pytest.approx(row["forward_tokens"])
    assert res["meta"]["parameters"]["vision"] > 0 and "| 1 | 2 | ok |" in path.with_suffix(".md").read_text()


def test_real_scale_smoke_compares_the_samplers_and_cold_starts(bench):
    """The CPU samplers in the same rollouts give the same tokens; the cold start of the folder runs its steps."""
    from benchmarks import real_scale

    argv, path = bench
    real_scale.main(argv + ["--compare-samplers", "hf,hf-static,hf-graph"])
    real_scale.main(argv + ["--sft"])
    res = json.loads(path.read_text())
    summary = res["samplers"]["summary"]
    assert set(summary) == {"hf", "hf-static", "hf-graph"}
    for b, x in summary.items():
        assert x["same_tokens_as_first"] and x["main_agreement"] == 1.0 and x["rollouts"] == 4
        assert x["generation_seconds"] > 0 and x["speedup"] > 0
    sft = res["sft"]
    assert sft["steps"] == 3 and sft["seconds_per_step"] > 0 and sft["tokens_per_second"] > 0
    assert sft["peak_memory_gb"] > 0 and sft["settings"]["gradient_checkpointing"] and sft["settings"]["freeze_vision"]
