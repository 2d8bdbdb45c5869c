"""Fast CPU tests of the LMM agent layer (agents/lmm): tokenizer, tiny Qwen-VL, policy."""

import numpy as np
import pytest
import torch

from agents.lmm.graph_decode import cache_argument
from agents.lmm.policy import MAX_STATIC_CACHES, TransformersPolicy
from agents.lmm.tiny_qwen import build_image_processor, build_tiny_model, load_checkpoint, save_checkpoint
from agents.lmm.tokenizer import STRUCTURAL_TAGS, build_tokenizer


def frame(seed, h=64, w=80):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def episode_messages():
    """An episode in the environment's message format: overview, a tool-calling turn, tool responses."""
    overview = []
    for i, t in enumerate([0.0, 30.0, 60.0]):
        overview += [{"type": "text", "text": f"<{t} seconds>"}, {"type": "image", "image": frame(i)}]
    overview.append({"type": "text", "text": "Question: What colour is the star? (A) red (B) blue"})
    assistant = ('<think>\nThe star is near 30 s.</think><tool_call>{"name": "crop_video", "arguments": '
                 '{"video_path": "v.mp4", "start_time": 25.0, "end_time": 35.0}}</tool_call>')
    response = [{"type": "text", "text": "<tool_response>"}, {"type": "image", "image": frame(7, 56, 56)},
                {"type": "text", "text": "a red star at 31 s</tool_response>"}]
    return [
        {"role": "system", "content": "You answer questions about long videos."},
        {"role": "user", "content": overview},
        {"role": "assistant", "content": assistant},
        {"role": "user", "content": response},
    ]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def policy(tok):
    return TransformersPolicy(build_tiny_model(tok, seed=0), tok)


def test_structural_tags_are_single_tokens(tok):
    for tag in STRUCTURAL_TAGS + ("<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|vision_start|>"):
        assert len(tok.encode(tag, add_special_tokens=False)) == 1, tag
    text = "<think>\nlook at 12.5 s</think><answer>B</answer>"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_chat_template_renders_images_qwen_style(tok):
    text = tok.apply_chat_template(episode_messages()[:2], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou answer questions about long videos.<|im_end|>\n<|im_start|>user\n")
    assert "<0.0 seconds><|vision_start|><|image_pad|><|vision_end|><30.0 seconds>" in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_sampled_logprobs_match_forward_pass(policy):
    msgs = episode_messages()
    convs = [policy.start(msgs[:2]) for _ in range(3)]
    convs.append(policy.start([msgs[0], {"role": "user", "content": "text only, shorter"}]))  # forces left padding
    comps = policy.generate(convs, temperature=0.7, max_new_tokens=24, seed=0)
    recomputed = policy.completion_logprobs(convs, comps)
    for c, lp in zip(comps, recomputed):
        mask = torch.tensor(c.generated_mask)
        assert len(lp) == len(c.token_ids) == len(c.logprobs)
        torch.testing.assert_close(torch.tensor(c.logprobs)[mask], lp.detach()[mask], atol=1e-4, rtol=0)
    # differentiable: gradients reach the weights
    sum(lp[torch.tensor(c.generated_mask)].sum() for c, lp in zip(comps, recomputed)).backward()
    assert policy.model.lm_head.weight.grad is not None
    policy.model.zero_grad(set_to_none=True)


def test_forced_prefix_and_finish_reasons(policy):
    convs = [policy.start(episode_messages()[:2]) for _ in range(8)]
    comps = policy.generate(convs, temperature=1.0, max_new_tokens=16, seed=1, stop=("e",))
    for c in comps:
        assert c.text.startswith("<think>\n")
        assert c.generated_mask[:2] == [False, False] and all(c.generated_mask[2:])
        assert c.finish_reason in ("stop", "eos", "length")
        if c.finish_reason == "stop":
            assert "e" in policy.tokenizer.decode(c.token_ids[2:])   # stop string included
        if c.finish_reason == "length":
            assert sum(c.generated_mask) == 16
    assert any(c.finish_reason == "stop" for c in comps)  # a one-letter stop string fires in 16 random tokens
    # seeded sampling is reproducible
    again = policy.generate(convs, temperature=1.0, max_new_tokens=16, seed=1, stop=("e",))
    assert [c.token_ids for c in comps] == [c.token_ids for c in again]


@pytest.mark.parametrize("sampler", ["static", "graph"])
def test_kept_cache_samplers_give_the_same_tokens_and_logprobs(tok, policy, sampler):
    """generation_cache="static" (generate with a kept StaticCache) and "graph" (graph_decode's own loop,
    eager on a CPU) change how tokens are computed, not which: same seed, same tokens, log-probs equal
    within float tolerance, stop strings, greedy and left padding included; caches are kept and bounded."""
    kept = TransformersPolicy(policy.model, tok, policy.image_processor, generation_cache=sampler)
    msgs = episode_messages()
    convs = [policy.start(msgs[:2]) for _ in range(3)] + [policy.start([msgs[0], {"role": "user", "content": "short"}])]
    caches = []
    real_generate = policy.model.generate

    def spy(*args, **kw):  # calls through: records the cache each sampler handed to generate
        caches.append(kw.get(cache_argument(policy.model)))
        return real_generate(*args, **kw)

    policy.model.generate = spy
    try:
        for temperature in (0.0, 0.7):
            a = policy.generate(convs, temperature=temperature, max_new_tokens=20, seed=3, stop=("e",))
            b = kept.generate(convs, temperature=temperature, max_new_tokens=20, seed=3, stop=("e",))
    finally:
        del policy.model.generate
    from transformers import StaticCache

    entries = list(kept.kept_caches.entries.values())
    assert len(entries) == 1 and isinstance(entries[0].cache, StaticCache)
    if sampler == "static":
        assert caches[0] is None and caches[2] is None and isinstance(caches[1], StaticCache)
        assert caches[3] is caches[1] is entries[0].cache  # kept and reused: the same tensors (addresses)
    else:
        assert len(caches) == 2 and all(c is None for c in caches)  # the graph sampler never calls generate
    longer = kept.generate(convs, temperature=0.7, max_new_tokens=300, seed=3, stop=("e",))  # another block
    assert len(kept.kept_caches) == 2 and all(c.finish_reason in ("eos", "stop", "length") for c in longer)
    for n in range(1, 6):  # turns shrink the batch: at most MAX_STATIC_CACHES are kept, the oldest dropped first
        kept.generate(convs[:1] * n, temperature=0.0, max_new_tokens=4, seed=3)
    assert [key[0] for key in kept.kept_caches.entries] == [2, 3, 4, 5] == list(range(2, 2 + MAX_STATIC_CACHES))
    text_only = [policy.start([msgs[0], {"role": "user", "content": q}]) for q in ("short", "a much longer question")]
    for batch, temperature, top_p in ((convs, 0.0, 1.0), (convs, 0.7, 1.0), (convs, 1.3, 0.8), (text_only, 0.7, 1.0)):
        a = policy.generate(batch, temperature=temperature, top_p=top_p, max_new_tokens=20, seed=3, stop=("e",))
        b = kept.generate(batch, temperature=temperature, top_p=top_p, max_new_tokens=20, seed=3, stop=("e",))
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
        for x, y in zip(a, b):
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="generation_cache"):
        TransformersPolicy(policy.model, tok, policy.image_processor, generation_cache="paged")


def test_graph_sampler_prefills_each_distinct_prompt_once(policy):
    """Conversations with the same tokens AND the same images share one prefill row; the same tokens
    with another image do not (an image is a run of identical pad tokens in the prompt)."""
    from agents.lmm.policy import _distinct_prompts

    msgs = episode_messages()
    other = [dict(m) for m in msgs[:2]]
    other[1] = {"role": "user", "content": [dict(p) for p in msgs[1]["content"]]}
    other[1]["content"][1] = {"type": "image", "image": frame(5)}
    convs = [policy.start(msgs[:2]), policy.start(other), policy.start(msgs[:2]), policy.start(other),
             policy.start(msgs[:2])]
    assert convs[0].token_ids == convs[1].token_ids  # only the pixels differ
    assert _distinct_prompts([c.token_ids for c in convs], convs) == ([0, 1], [0, 1, 0, 1, 0])
    graphed = TransformersPolicy(policy.model, policy.tokenizer, policy.image_processor, generation_cache="graph")
    prefill_rows = []
    hook = policy.model.register_forward_pre_hook(
        lambda m, a, kw: prefill_rows.append(len(kw["input_ids"])) if kw["input_ids"].shape[1] > 1 else None,
        with_kwargs=True)
    try:
        a = graphed.generate(convs, temperature=0.7, max_new_tokens=12, seed=4)
    finally:
        hook.remove()
    b = policy.generate(convs, temperature=0.7, max_new_tokens=12, seed=4)
    assert prefill_rows == [2]
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def test_generation_scale_benchmark_runs_on_the_tiny_shape(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "speed_generation_scale", Path(__file__).resolve().parents[1] / "benchmarks" / "speed_generation_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    caches = "dynamic,static-per-call,static,graph-eager,graph,graph-compiled,graph+qkv+mlp"
    res = bench.main(["--tiny", "--caches", caches, "--out", str(tmp_path / "gen")])
    rows = res["shapes"]["tiny"]
    assert set(rows) == set(caches.split(","))
    for r in rows.values():
        assert r["tokens_per_second"] > 0 and r["logprob_abs_diff_max"] < 1e-4  # fp32 on CPU: recorder == forward
    assert json.loads((tmp_path / "gen.json").read_text())["shapes"]["tiny"]["static"]["seconds"] > 0
    assert "| tiny | static |" in (tmp_path / "gen.md").read_text() and "| tiny | graph |" in (tmp_path / "gen.md").read_text()


def test_greedy_generation(policy):
    conv = policy.start(episode_messages()[:2])
    a, b = policy.generate([conv, conv.copy()], temperature=0.0, max_new_tokens=8)
    assert a.token_ids == b.token_ids and a.temperature == 1.0


def test_extend_equals_full_template_rendering(policy):
    msgs = episode_messages()
    conv = policy.start(msgs[:2])
    conv.append_completion(policy.completion_from_text(msgs[2]["content"]))
    conv = policy.extend(conv, msgs[3:])
    full = policy.start(msgs)  # the template rendered once over the whole list
    assert conv.token_ids == full.token_ids
    assert len(conv.images) == len(full.images) == 4
    assert all(torch.equal(a, b) for a, b in zip(conv.pixel_values, full.pixel_values))
    # the loss mask covers exactly the assistant content
    n = len(policy.completion_from_text(msgs[2]["content"]).token_ids)
    assert sum(conv.generated_mask) == n


def test_extend_after_sampled_completion_keeps_exact_tokens(policy):
    msgs = episode_messages()
    conv = policy.start(msgs[:2])
    before = list(conv.token_ids)
    [c] = policy.generate([conv], max_new_tokens=12, seed=3)
    conv.append_completion(c)
    conv = policy.extend(conv, msgs[3:])
    assert conv.token_ids[:len(before)] == before
    assert conv.token_ids[len(before):len(before) + len(c.token_ids)] == c.token_ids  # never re-tokenised
    tail = policy.tokenizer.decode(conv.token_ids[len(before) + len(c.token_ids):])
    assert tail.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>") and tail.endswith("<|im_start|>assistant\n")
    assert len(conv.generated_mask) == len(conv.logprobs) == len(conv.token_ids)
    [c2] = policy.generate([conv], max_new_tokens=4, seed=4)  # the multi-image conversation still generates
    assert c2.text.startswith("<think>\n")


def test_save_load_round_trip_identical_logits(tok, tmp_path):
    model = build_tiny_model(tok, seed=5)
    save_checkpoint(str(tmp_path / "tiny"), model, tok, build_image_processor())
    loaded, tok2, proc = load_checkpoint(str(tmp_path / "tiny"))
    p1, p2 = TransformersPolicy(model, tok), TransformersPolicy(str(tmp_path / "tiny"))
    conv = p1.start(episode_messages()[:2])
    assert p2.start(episode_messages()[:2]).token_ids == conv.token_ids
    with torch.no_grad():
        b1, b2 = p1._batch([conv.token_ids], [conv]), p2._batch([conv.token_ids], [conv])
        assert torch.equal(model(**b1).logits, p2.model(**b2).logits)
    assert type(loaded).__name__ == "Qwen2_5_VLForConditionalGeneration"
    # no layer swapped for a Hub kernel: loading must work offline and keep the stock math
    assert not getattr(loaded, "use_kernels", False)


def _tiny_qwen3_vl(tok):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    ids = tok.convert_tokens_to_ids
    cfg = Qwen3VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [4, 2, 2], "mrope_interleaved": True},
                         pad_token_id=tok.pad_token_id),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                           num_position_embeddings=64, deepstack_visual_indexes=[0]),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
    )
    torch.manual_seed(0)
    return Qwen3VLForConditionalGeneration(cfg).eval()


def _tiny_qwen25_vl_stock_config(tok):
    """A tiny Qwen2.5-VL built with the stock config class directly (not via agents.lmm.tiny_qwen)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    ids = tok.convert_tokens_to_ids
    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                           fullatt_block_indexes=[1], window_size=56),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
    )
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_offline_stock_checkpoints_generate_from_image_conversation(tok, tmp_path, family):
    if family == "qwen3_vl":  # Qwen3-VL: patch 16, normalisation 0.5/0.5
        model = _tiny_qwen3_vl(tok)
        proc = build_image_processor(patch_size=16, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                     min_pixels=32 * 32, max_pixels=128 * 128)
    else:
        model, proc = _tiny_qwen25_vl_stock_config(tok), build_image_processor()
    path = str(tmp_path / family)
    save_checkpoint(path, model, tok, proc)
    policy = TransformersPolicy(path)  # AutoModelForImageTextToText + AutoTokenizer + AutoImageProcessor, offline
    assert policy.model.config.model_type == family
    msgs = episode_messages()
    convs = [policy.start(msgs[:2]), policy.start(msgs[:2])]
    comps = policy.generate(convs, max_new_tokens=8, seed=0)
    assert all(c.text.startswith("<think>\n") and len(c.token_ids) > 2 for c in comps)
    lps = policy.completion_logprobs(convs, comps)
    for c, lp in zip(comps, lps):
        mask = torch.tensor(c.generated_mask)
        torch.testing.assert_close(torch.tensor(c.logprobs)[mask], lp.detach()[mask], atol=1e-4, rtol=0)
    convs[0].append_completion(comps[0])
    policy.extend(convs[0], msgs[3:])
    assert policy.generate(convs[:1], max_new_tokens=4)[0].text.startswith("<think>\n")


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_a_model_that_is_not_a_tiny_build_gets_the_papers_settings(tok, tmp_path, family, capsys):
    """--model DIR of a stock Qwen-VL (not built here): frames as large as its processor takes (capped), 16-frame
    crops, 2048-token turns, 512-token sub-agent answers, one sub-agent pass, each printed with its reason; a flag
    given wins; this project's tiny builds keep the tiny defaults."""
    from trainers.config import parse_args
    from trainers.para_grpo import Args

    if family == "qwen3_vl":  # patch 16 x merge 2: 32 px blocks; 200 x 200 pixels -> 192 px frames
        model, unit, side = _tiny_qwen3_vl(tok), 32, 192
        proc = build_image_processor(patch_size=16, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                     min_pixels=32 * 32, max_pixels=200 * 200)
    else:  # patch 14 x merge 2: 28 px blocks; up to 2000 x 2000 pixels -> the 448 px cap
        model, unit, side = _tiny_qwen25_vl_stock_config(tok), 28, 448
        proc = build_image_processor(max_pixels=2000 * 2000)
    path = str(tmp_path / family)
    save_checkpoint(path, model, tok, proc)
    a = parse_args(Args, ["--model", path])
    assert (a.frame_size, a.crop_max_frames, a.max_new_tokens, a.subagent_max_new_tokens,
            a.subagent_frames_per_pass) == (side, 16, 2048, 512, "0")
    assert a.frame_size % unit == 0
    said = capsys.readouterr().err
    assert f"--frame-size {side}:" in said and "--max-new-tokens 2048:" in said and "tiny builds" in said
    b = parse_args(Args, ["--model", path, "--frame-size", "56", "--max-new-tokens", "300"])
    assert (b.frame_size, b.max_new_tokens, b.crop_max_frames) == (56, 300, 16)
    assert "--frame-size" not in capsys.readouterr().err
    tiny = str(tmp_path / "tiny")
    save_checkpoint(tiny, build_tiny_model(tok), tok)
    capsys.readouterr()
    c = parse_args(Args, ["--model", tiny])
    assert (c.frame_size, c.max_new_tokens) == (Args.frame_size, Args.max_new_tokens)
    assert "settings:" not in capsys.readouterr().err
    from agents.lmm.default import shipped_checkpoint
    from agents.lmm.tiny_qwen import is_tiny_build, load_checkpoint

    for prior in ("strong", "weak"):  # the shipped builds, and a copy saved again without its build record
        assert is_tiny_build(shipped_checkpoint(prior))
    again = str(tmp_path / "again")
    save_checkpoint(again, *load_checkpoint(str(shipped_checkpoint("strong"))))
    assert is_tiny_build(again) and not is_tiny_build(path)


def test_missing_directory_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        TransformersPolicy(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        TransformersPolicy(str(tmp_path / "empty"))


def test_tokenizer_without_structural_tokens_errors(tok):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    raw = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    bare = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")
    with pytest.raises(ValueError, match="build_tokenizer"):
        TransformersPolicy(build_tiny_model(tok), bare)


def test_prompt_longer_than_context_errors(tok):
    policy = TransformersPolicy(build_tiny_model(tok, max_position_embeddings=64), tok)
    with pytest.raises(ValueError, match="context is 64 tokens"):
        policy.start(episode_messages()[:2])  # three frames and a question are > 64 tokens
    conv = policy.start([{"role": "user", "content": "hi"}])
    conv.token_ids += [conv.token_ids[-1]] * (64 - len(conv))  # fill the context exactly
    with pytest.raises(ValueError, match="context"):
        policy.generate([conv])
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        policy.start([{"role": "user", "content": [{"type": "image", "image": np.zeros((4, 4), np.float32)}]}])


def test_left_padding_does_not_change_samples(policy):
    msgs = episode_messages()
    short = policy.start([msgs[0], {"role": "user", "content": [{"type": "image", "image": frame(9)},
                                                                {"type": "text", "text": "Question: q"}]}])
    alone = policy.generate([short], temperature=0.0, max_new_tokens=10)[0]
    padded = policy.generate([policy.start(msgs[:2]), short], temperature=0.0, max_new_tokens=10)[1]
    assert alone.token_ids == padded.token_ids
    np.testing.assert_allclose(alone.logprobs, padded.logprobs, atol=1e-4)


def test_multi_turn_conversation_logprobs(policy):
    msgs = episode_messages()
    convs = [policy.start(msgs[:2]) for _ in range(2)]
    n_generated = [0, 0]
    for i, (conv, c) in enumerate(zip(convs, policy.generate(convs, max_new_tokens=10, seed=6))):
        conv.append_completion(c)
        policy.extend(conv, msgs[3:])
        n_generated[i] += sum(c.generated_mask)
    for i, (conv, c) in enumerate(zip(convs, policy.generate(convs, max_new_tokens=10, seed=7))):
        conv.append_completion(c)
        n_generated[i] += sum(c.generated_mask)
    lps = policy.conversation_logprobs(convs)
    for conv, lp, n in zip(convs, lps, n_generated):
        assert len(lp) == len(conv.token_ids)
        mask = torch.tensor(conv.generated_mask)
        assert mask.sum() == n  # both turns' sampled tokens, nothing else
        torch.testing.assert_close(torch.tensor(conv.logprobs)[mask], lp.detach()[mask], atol=1e-4, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device (run on the GPU machine)")
@pytest.mark.parametrize("sampler", ["graph", "graph-compiled"])
def test_graph_sampler_replays_cuda_graphs_that_follow_the_weights(tok, sampler):
    """On a GPU the graph sampler records the decode step once and replays it: tokens and log-probs
    equal `generate`'s (fp32 and under bf16 autocast), a second call replays the kept graph, and
    after an in-place weight update (an optimizer step) the replayed graph sees the new weights."""
    from agents.lmm import graph_decode

    model = build_tiny_model(tok, seed=0).cuda()
    stock = TransformersPolicy(model, tok, device="cuda")
    graphed = TransformersPolicy(model, tok, stock.image_processor, device="cuda", generation_cache=sampler)
    msgs = episode_messages()
    convs = [stock.start(msgs[:2]) for _ in range(3)] + [stock.start([msgs[0], {"role": "user", "content": "short"}])]
    recorded = []
    real_step = graph_decode._decode_step

    def spy(kept, entry, slot, weights_at):
        recorded.append((weights_at is not None, entry.graph))
        return real_step(kept, entry, slot, weights_at)

    graph_decode._decode_step = spy
    try:
        for round_ in range(3):
            if round_ == 2:  # an optimizer step changes the weights in place
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(torch.randn_like(p) * 0.02)
            for temperature in (0.0, 0.7):
                a = stock.generate(convs, temperature=temperature, max_new_tokens=24, seed=5)
                b = graphed.generate(convs, temperature=temperature, max_new_tokens=24, seed=5)
                assert [c.token_ids for c in a] == [c.token_ids for c in b], (round_, temperature)
                for x, y in zip(a, b):
                    torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            a = stock.generate(convs, temperature=0.0, max_new_tokens=24, seed=5)
            b = graphed.generate(convs, temperature=0.0, max_new_tokens=24, seed=5)
        agree = np.mean([x == y for c, d in zip(a, b) for x, y in zip(c.token_ids, d.token_ids)])
        assert agree > 0.9, agree  # bf16: the static cache's masked attention may round a near tie differently
    finally:
        graph_decode._decode_step = real_step
    assert all(use for use, _ in recorded)
    graphs = {id(g) for _, g in recorded if g is not None}
    assert len(graphs) == 2, "one graph recorded for fp32 (replayed across calls and the update), one for autocast"
    assert [key[2] for key in graphed.kept_caches.entries] == [None, torch.bfloat16]  # a cache per dtype
