"""The fast path (agents/lmm/fast_qwen.py) computes what the stock Qwen2.5-VL code computes.

Every comparison runs the real stock code next to the patched code on the same inputs: the PIL
image processor, `Qwen2_5_VLModel.get_rope_index`, the stock forward/backward and generate."""

import copy
import os

import numpy as np
import pytest
import torch
from PIL import Image

from agents.lmm.fast_qwen import (FastPathUnavailable, _pil_resize, _pillow_vertical_first, disable_fast_path,
                                  enable_fast_path, is_fast_path_enabled, pixel_values_from_frames)
from agents.lmm.policy import TransformersPolicy
from agents.lmm.tiny_qwen import build_image_processor, build_tiny_model, load_checkpoint, save_checkpoint
from agents.lmm.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def frames(seed, n, h, w):
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def stock_pixels(proc, images):
    out = proc(images=list(images), return_tensors="pt")
    return out["pixel_values"], out["image_grid_thw"]


# --------------------------------------------------------------------------- pixel values
@pytest.mark.parametrize("hw", [(28, 28), (56, 56), (84, 84), (112, 112),          # no resize
                                (64, 64), (64, 80), (30, 45), (100, 57), (57, 113),  # resized (up, down, mixed)
                                (27, 27), (20, 300), (240, 320)])
def test_pixel_values_equal_pil_processor(hw):
    proc = build_image_processor()
    imgs = frames(sum(hw), 6, *hw)
    ref_pv, ref_grid = stock_pixels(proc, imgs)
    for given in (imgs, torch.from_numpy(imgs), list(imgs)):  # array, tensor, list of frames
        pv, grid = pixel_values_from_frames(given, proc)
        assert pv.dtype == torch.float32 and grid.dtype == torch.long
        assert torch.equal(grid, ref_grid)
        torch.testing.assert_close(pv, ref_pv, atol=1e-6, rtol=0)
        assert torch.equal(pv, ref_pv)  # in fact bit for bit


def test_pixel_values_mixed_sizes_keep_input_order():
    proc = build_image_processor()
    sizes = [(56, 56), (64, 80), (56, 56), (113, 41), (28, 28), (64, 80)]
    imgs = [frames(i, 1, h, w)[0] for i, (h, w) in enumerate(sizes)]
    ref_pv, ref_grid = stock_pixels(proc, imgs)
    pv, grid = pixel_values_from_frames(imgs, proc)
    assert torch.equal(grid, ref_grid) and torch.equal(pv, ref_pv)


@pytest.mark.parametrize("kwargs", [dict(resample=2),                                  # bilinear
                                    dict(patch_size=16, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                         min_pixels=32 * 32, max_pixels=128 * 128),   # Qwen3-VL style
                                    dict(max_pixels=56 * 56)])                         # forces shrinking
def test_pixel_values_other_processor_settings(kwargs):
    proc = build_image_processor(**kwargs)
    for hw in [(64, 64), (96, 70), (33, 130)]:
        imgs = frames(hw[0], 3, *hw)
        ref_pv, ref_grid = stock_pixels(proc, imgs)
        pv, grid = pixel_values_from_frames(imgs, proc)
        assert torch.equal(grid, ref_grid) and torch.equal(pv, ref_pv), hw


def test_pillow_resize_reproduced_exactly_on_random_sizes():
    rng = np.random.default_rng(0)
    for trial in range(80):
        h, w, th, tw = (int(v) for v in rng.integers(4, 120, 4))
        f = (Image.Resampling.BILINEAR, Image.Resampling.BICUBIC)[trial % 2]
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        ref = np.array(Image.fromarray(img).resize((tw, th), resample=f))
        got = _pil_resize(torch.from_numpy(img).permute(2, 0, 1)[None], th, tw, int(f),
                          _pillow_vertical_first(h, w, th, tw))[0].permute(1, 2, 0)
        assert np.array_equal(got.numpy(), ref), (h, w, th, tw, f)


def test_pixel_values_bad_input():
    proc = build_image_processor()
    with pytest.raises(ValueError, match="uint8"):
        pixel_values_from_frames(np.zeros((2, 56, 56, 3), np.float32), proc)
    with pytest.raises(ValueError, match="N, H, W, 3"):
        pixel_values_from_frames(np.zeros((56, 56, 3), np.uint8), proc)
    with pytest.raises(ValueError, match="HxWx3"):
        pixel_values_from_frames([np.zeros((56, 56), np.uint8)], proc)
    with pytest.raises(ValueError, match="at least one"):
        pixel_values_from_frames([], proc)


# --------------------------------------------------------------------------- M-RoPE position ids
def random_batch(tok, rng, padding: str):
    """Rows of text runs and images of random grids (0, 1 or several per row; some rows text only),
    as the chat template lays them out, padded left or right ("none": rows topped up with text to
    one length, no attention mask)."""
    ids = tok.convert_tokens_to_ids
    img, vs, ve, pad = ids("<|image_pad|>"), ids("<|vision_start|>"), ids("<|vision_end|>"), tok.pad_token_id
    rows, grids = [], []
    for _ in range(int(rng.integers(1, 6))):
        row = list(rng.integers(10, 200, int(rng.integers(1, 6))))
        for _ in range(int(rng.choice([0, 0, 1, 2, 4]))):
            gh, gw = (int(2 * rng.integers(1, 5)) for _ in range(2))
            grids.append([1, gh, gw])
            row += [vs] + [img] * (gh * gw // 4) + [ve] + list(rng.integers(10, 200, int(rng.integers(0, 4))))
        rows.append(row)
    n = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), n), pad)
    mask = torch.zeros((len(rows), n), dtype=torch.long)
    for i, r in enumerate(rows):
        if padding == "none":
            r = r + list(rng.integers(10, 200, n - len(r)))
        sl = slice(n - len(r), n) if padding == "left" else slice(0, len(r))
        input_ids[i, sl], mask[i, sl] = torch.tensor(r), 1
    grid = torch.tensor(grids, dtype=torch.long) if grids else None
    return input_ids, (input_ids == img).long(), grid, (None if padding == "none" else mask)


@pytest.mark.parametrize("padding", ["left", "right", "none"])
def test_rope_index_equals_stock(tok, padding):
    model = build_tiny_model(tok)
    core = model.model
    stock = type(core).get_rope_index
    enable_fast_path(model)
    rng = np.random.default_rng({"left": 0, "right": 1, "none": 2}[padding])
    checked = 0
    for _ in range(40):
        input_ids, mm, grid, mask = random_batch(tok, rng, padding)
        if grid is None:  # no image in the batch: the model never calls get_rope_index
            continue
        ref_pos, ref_delta = stock(core, input_ids, mm, image_grid_thw=grid, attention_mask=mask)
        pos, delta = core.get_rope_index(input_ids, mm, image_grid_thw=grid, attention_mask=mask)
        assert torch.equal(pos, ref_pos) and torch.equal(delta, ref_delta)
        assert pos.dtype == ref_pos.dtype and delta.shape == ref_delta.shape
        checked += 1
    assert checked >= 20


def test_rope_index_rejects_tokens_that_do_not_match_grids(tok):
    model = enable_fast_path(build_tiny_model(tok))
    img = tok.convert_tokens_to_ids("<|image_pad|>")
    input_ids = torch.tensor([[5, img, img, img, img, 6, img, img, img, img, 7]])
    mm = (input_ids == img).long()
    with pytest.raises(ValueError, match="do not match image_grid_thw"):   # 2 images, 1 grid
        model.model.get_rope_index(input_ids, mm, image_grid_thw=torch.tensor([[1, 4, 4]]))
    with pytest.raises(ValueError, match="do not match image_grid_thw"):   # 4 tokens, grid of 16
        model.model.get_rope_index(input_ids, mm, image_grid_thw=torch.tensor([[1, 8, 8], [1, 4, 4]]))


# --------------------------------------------------------------------------- whole model
def image_messages(seed, sizes, text="Question: which scene?"):
    content = []
    for i, (h, w) in enumerate(sizes):
        content += [{"type": "text", "text": f"<{i}.0 seconds>"}, {"type": "image", "image": frames(seed + i, 1, h, w)[0]}]
    content.append({"type": "text", "text": text})
    return [{"role": "system", "content": "You answer questions about long videos."},
            {"role": "user", "content": content}]


def training_batch(policy):
    """Overview frames at 56 px, an 8-frame crop at 56 px, frames whose windows differ in length
    (84 and 112 px, 64 px resized), and a text-only row; left padded; assistant answers appended."""
    msgs = [image_messages(0, [(56, 56)] * 4), image_messages(10, [(56, 56)] * 8, "Describe the crop."),
            image_messages(20, [(84, 84), (112, 112), (64, 64)]),
            [{"role": "user", "content": "A text-only row, a little longer than the rest of it."}]]
    convs = [policy.start(m) for m in msgs]
    for c, text in zip(convs, ["Seen it.\n</think><answer>B</answer>", "Scenes: beach. Objects: red star.",
                               "I should look closer.\n</think><answer>A</answer>", "<answer>C</answer>"]):
        c.append_completion(policy.completion_from_text(text))
    return convs


def loss_and_grads(policy, convs):
    model = policy.model
    model.zero_grad(set_to_none=True)
    lps = policy.conversation_logprobs(convs)
    loss = -sum(lp[torch.tensor(c.generated_mask)].sum() for c, lp in zip(convs, lps))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_loss_and_gradients_equal_stock(tok, attn):
    fast = TransformersPolicy(build_tiny_model(tok, seed=1), tok, fast=True)
    stock = TransformersPolicy(build_tiny_model(tok, seed=1), tok, fast=False)
    for p in (fast, stock):
        p.model.set_attn_implementation(attn)
        p.model.train()
    assert is_fast_path_enabled(fast.model) and not is_fast_path_enabled(stock.model)
    convs_fast, convs_stock = training_batch(fast), training_batch(stock)
    for a, b in zip(convs_fast, convs_stock):   # same tokens, same pixels
        assert a.token_ids == b.token_ids
        assert all(torch.equal(x, y) for x, y in zip(a.pixel_values, b.pixel_values))
    lf, gf = loss_and_grads(fast, convs_fast)
    ls, gs = loss_and_grads(stock, convs_stock)
    torch.testing.assert_close(lf, ls, atol=1e-5, rtol=1e-6)
    assert gf.keys() == gs.keys() == {n for n, _ in stock.model.named_parameters()}  # every parameter, vision too
    assert any(n.startswith("model.visual.") for n in gs)
    for n in gs:
        # fp32 sums taken in another order differ by a few ulps of the tensor's largest entry (embedding gradients
        # reach about 12, whose ulp is 1e-6); a wrong gradient differs by the size of the gradient itself
        atol = 1e-6 * max(1.0, float(gs[n].abs().max()))
        torch.testing.assert_close(gf[n], gs[n], atol=atol, rtol=1e-5, msg=lambda m: f"{n}: {m}")
    assert sum(float(g.abs().sum()) for n, g in gs.items() if "visual.blocks" in n) > 0


def test_generate_equal_stock(tok):
    fast = TransformersPolicy(build_tiny_model(tok, seed=2), tok, fast=True)
    stock = TransformersPolicy(build_tiny_model(tok, seed=2), tok, fast=False)

    def convs(policy):  # left padding, 0 / 1 / several images of different grids per row
        return [policy.start(image_messages(0, [(56, 56)] * 3)), policy.start(image_messages(5, [(84, 84), (28, 56)])),
                policy.start([{"role": "user", "content": "text only"}]), policy.start(image_messages(9, [(112, 112)]))]

    for temperature, seed in ((0.0, None), (1.0, 3)):
        a = fast.generate(convs(fast), temperature=temperature, max_new_tokens=12, seed=seed, stop=())
        b = stock.generate(convs(stock), temperature=temperature, max_new_tokens=12, seed=seed, stop=())
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids and x.finish_reason == y.finish_reason
            np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-5, rtol=0)
        assert max(len(x.token_ids) for x in a) > 8  # the cached steps really ran


# --------------------------------------------------------------------------- patching hygiene
def test_patch_is_per_instance_idempotent_and_reversible(tok):
    a, b = build_tiny_model(tok, seed=4), build_tiny_model(tok, seed=4)
    cls_rope = type(a.model).get_rope_index
    before = {k: v.clone() for k, v in a.state_dict().items()}
    assert enable_fast_path(enable_fast_path(a)) is a                  # idempotent
    assert is_fast_path_enabled(a) and not is_fast_path_enabled(b)      # only this instance
    assert type(a.model).get_rope_index is cls_rope and "get_rope_index" not in b.model.__dict__
    assert "forward" not in b.model.visual.__dict__ and "forward" not in b.model.visual.blocks[0].attn.__dict__
    assert a.state_dict().keys() == before.keys() and all(torch.equal(a.state_dict()[k], v) for k, v in before.items())
    assert [n for n, _ in a.named_modules()] == [n for n, _ in b.named_modules()]
    ref = copy.deepcopy(a)                       # e.g. the trainer's frozen reference model
    assert is_fast_path_enabled(ref) and ref.model.get_rope_index.__self__ is ref.model
    disable_fast_path(a)
    assert not is_fast_path_enabled(a) and "get_rope_index" not in a.model.__dict__


def test_save_pretrained_identical_and_trained_weights_reload(tok, tmp_path):
    """Train a few steps through the fast path (weights no longer the seeded init), then save: the
    files equal those of the unpatched model, and they reload to the same weights and logits."""
    policy = TransformersPolicy(build_tiny_model(tok, seed=6), tok)
    model = policy.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    convs = training_batch(policy)[:1]
    for _ in range(2):
        lps = policy.conversation_logprobs(convs)
        loss = -sum(lp[torch.tensor(c.generated_mask)].sum() for c, lp in zip(convs, lps))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    init = build_tiny_model(tok, seed=6).state_dict()
    assert any(not torch.equal(init[k], v) for k, v in model.state_dict().items())
    save_checkpoint(str(tmp_path / "fast"), model, tok)
    stock_copy = disable_fast_path(copy.deepcopy(model))
    stock_copy.save_pretrained(str(tmp_path / "stock"))
    for name in ("model.safetensors", "config.json", "generation_config.json"):
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "stock" / name).read_bytes(), name
    loaded, _, _ = load_checkpoint(str(tmp_path / "fast"))
    assert not is_fast_path_enabled(loaded)          # patches live on the instance, never in the files
    sd = model.state_dict()
    assert loaded.state_dict().keys() == sd.keys() and all(torch.equal(loaded.state_dict()[k], v) for k, v in sd.items())
    again = TransformersPolicy(str(tmp_path / "fast"))
    c1, c2 = training_batch(policy)[2:], training_batch(again)[2:]
    with torch.no_grad():
        for x, y in zip(policy.conversation_logprobs(c1), again.conversation_logprobs(c2)):
            assert torch.equal(x, y)
    assert os.path.isfile(tmp_path / "fast" / "preprocessor_config.json")


def test_unsupported_models_and_missing_internals(tok, monkeypatch):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    import transformers
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
    qwen3 = Qwen3VLForConditionalGeneration(Qwen3VLConfig(
        text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                                              "mrope_section": [4, 2, 2]}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32,
                           num_position_embeddings=16, deepstack_visual_indexes=[0])))
    with pytest.raises(TypeError, match="Qwen2.5-VL models only"):
        enable_fast_path(qwen3)
    monkeypatch.delattr(modeling_qwen2_5_vl, "get_vision_window_index")
    with pytest.raises(FastPathUnavailable, match=f"transformers {transformers.__version__}.*get_vision_window_index"):
        enable_fast_path(build_tiny_model(tok))


def test_plans_made_under_inference_mode_serve_training(tok):
    """The memoised vision plan of a batch first seen while generating under torch.inference_mode
    is reused by a training step on the same grids (no 'inference tensor' error, same numbers)."""
    policy = TransformersPolicy(build_tiny_model(tok, seed=7), tok)
    convs = training_batch(policy)[2:3]   # frames whose windows differ in length (gathered attention)
    with torch.inference_mode():
        ref = policy.conversation_logprobs(convs)[0]
    assert len(policy.model.model.visual._paravt_plans) == 1
    lp = policy.conversation_logprobs(convs)[0]
    lp.sum().backward()
    assert len(policy.model.model.visual._paravt_plans) == 1  # the same plan served both
    torch.testing.assert_close(lp.detach(), ref, atol=0, rtol=0)
    assert policy.model.model.visual.blocks[0].attn.qkv.weight.grad is not None
