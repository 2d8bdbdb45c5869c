"""Published Qwen-VL configurations, and checkpoint folders of them with random weights.

    from agents.lmm.qwen_shapes import SHAPES, build_checkpoint
    build_checkpoint("qwen2.5-vl-3b", "runs/qwen2.5-vl-3b", device="cuda")   # a folder for --model

Each shape is the text and vision part of the model's ``config.json`` and the image processor settings of its
``preprocessor_config.json`` as published on the Hugging Face Hub, written out below (nothing can be downloaded
here). The weights are random (transformers' own initialisation, made on the device in bf16): enough to measure
speed and memory, which depend on the shapes alone.

What is not the model's own:
- The tokenizer. Qwen's 151k-token vocabulary cannot be fetched here, so a folder carries this project's
  byte-level BPE (the shipped tiny models' tokenizer, agents/lmm/tokenizer.py: Qwen's chat and vision tokens,
  the grammar's tags as single tokens, about 2k tokens learnt on the world's English). The world's prompts cost
  about as many tokens with it as with a large English vocabulary. The model keeps its published vocabulary
  size, so its embedding and output layers, and their cost, are the real ones; ids past the tokenizer are never
  written by it.
- The special-token ids of the config (image pad, vision start/end, end of text) are the tokenizer's, so the
  model and the tokenizer agree; every dimension is the published one.
The visual tokens are the real processor's: transformers' Qwen2-VL image processor with the published patch
size, merge size, pixel limits, mean and std (a 448 x 448 frame is 256 visual tokens for Qwen2.5-VL, 196 for
Qwen3-VL).

The ``tiny-*`` shapes are small models of the same families (few layers, small widths, the same vision tower
structure), for tests and CPU smoke runs; unlike this project's tiny builds they are not marked as such, so the
trainers treat them as any other model (trainers.config.model_settings).
"""

from __future__ import annotations

from pathlib import Path

import torch

# Qwen2.5-VL-3B/-7B-Instruct and Qwen3-VL-2B/-4B/-8B-Instruct, config.json (text and vision parts).
_QWEN25_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_chans=3, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                      fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2, hidden_act="silu")
_QWEN25_ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}
_QWEN3_ROPE = {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20], "mrope_interleaved": True}
_QWEN3_SMALL_VISION = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, in_channels=3,
                           patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
                           deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh")
# preprocessor_config.json: Qwen2.5-VL's, and Qwen3-VL's (its video processor's pixel limits are larger, and the
# environment sends frames as images)
_QWEN25_IMAGE = dict(min_pixels=3136, max_pixels=12845056, patch_size=14, temporal_patch_size=2, merge_size=2,
                     image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711])
_QWEN3_IMAGE = dict(size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16, temporal_patch_size=2,
                    merge_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])

SHAPES = {
    "qwen2.5-vl-3b": dict(
        family="qwen2_5_vl",
        text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=128000, rms_norm_eps=1e-6,
                  hidden_act="silu", rope_parameters=_QWEN25_ROPE),
        vision=dict(_QWEN25_VISION, out_hidden_size=2048), tie_word_embeddings=True, image=_QWEN25_IMAGE),
    "qwen2.5-vl-7b": dict(
        family="qwen2_5_vl",
        text=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                  num_key_value_heads=4, vocab_size=152064, max_position_embeddings=128000, rms_norm_eps=1e-6,
                  hidden_act="silu", rope_parameters=_QWEN25_ROPE),
        vision=dict(_QWEN25_VISION, out_hidden_size=3584), tie_word_embeddings=False, image=_QWEN25_IMAGE),
    "qwen3-vl-2b": dict(
        family="qwen3_vl",
        text=dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
                  rms_norm_eps=1e-6, hidden_act="silu", rope_parameters=_QWEN3_ROPE),
        vision=dict(_QWEN3_SMALL_VISION, out_hidden_size=2048), tie_word_embeddings=True, image=_QWEN3_IMAGE),
    "qwen3-vl-4b": dict(
        family="qwen3_vl",
        text=dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
                  rms_norm_eps=1e-6, hidden_act="silu", rope_parameters=_QWEN3_ROPE),
        vision=dict(_QWEN3_SMALL_VISION, out_hidden_size=2560), tie_word_embeddings=True, image=_QWEN3_IMAGE),
    "qwen3-vl-8b": dict(
        family="qwen3_vl",
        text=dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
                  rms_norm_eps=1e-6, hidden_act="silu", rope_parameters=_QWEN3_ROPE),
        vision=dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, in_channels=3, patch_size=16,
                    spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
                    deepstack_visual_indexes=[8, 16, 24], hidden_act="gelu_pytorch_tanh", out_hidden_size=4096),
        tie_word_embeddings=False, image=_QWEN3_IMAGE),
    # small models of the same families (tests, CPU smoke runs); vocab_size None: the tokenizer's size
    "tiny-qwen2.5-vl": dict(
        family="qwen2_5_vl",
        text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=None, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  hidden_act="silu", rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                      "mrope_section": [2, 3, 3]}),
        vision=dict(_QWEN25_VISION, depth=2, hidden_size=32, intermediate_size=64, num_heads=2, window_size=56,
                    fullatt_block_indexes=[1], out_hidden_size=64),
        tie_word_embeddings=True, image=_QWEN25_IMAGE),
    "tiny-qwen3-vl": dict(
        family="qwen3_vl",
        text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=None, max_position_embeddings=32768,
                  rms_norm_eps=1e-6, hidden_act="silu",
                  rope_parameters=dict(_QWEN3_ROPE, mrope_section=[4, 2, 2])),
        vision=dict(_QWEN3_SMALL_VISION, depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                    deepstack_visual_indexes=[0], out_hidden_size=64),
        tie_word_embeddings=True, image=_QWEN3_IMAGE),
}


def project_tokenizer():
    """This project's byte-level BPE: the shipped tiny models' tokenizer, else one built from the world's text."""
    from transformers import AutoTokenizer

    from agents.lmm.default import shipped_checkpoint
    from agents.lmm.tokenizer import CHAT_TEMPLATE

    shipped = shipped_checkpoint("strong")
    if shipped is not None:
        tok = AutoTokenizer.from_pretrained(str(shipped), local_files_only=True)
        tok.chat_template = tok.chat_template or CHAT_TEMPLATE
        return tok
    from agents.lmm.corpus import WorldConfig, tokenizer_texts
    from agents.lmm.tokenizer import build_tokenizer

    return build_tokenizer(tokenizer_texts(WorldConfig()))


def model_config(shape: str, tokenizer):
    """The transformers config of ``shape``, its special-token ids taken from ``tokenizer``."""
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    spec = SHAPES[shape]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in
           ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_end|>", "<|endoftext|>")}
    text = dict(spec["text"], bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"], tie_word_embeddings=spec["tie_word_embeddings"])
    text["vocab_size"] = text["vocab_size"] or len(tokenizer)
    if text["vocab_size"] < len(tokenizer):
        raise ValueError(f"{shape}: vocabulary of {text['vocab_size']} is smaller than the tokenizer's {len(tokenizer)}")
    cls = Qwen2_5_VLConfig if spec["family"] == "qwen2_5_vl" else Qwen3VLConfig
    return cls(text_config=text, vision_config=spec["vision"], image_token_id=ids["<|image_pad|>"],
               video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
               vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=spec["tie_word_embeddings"])


def image_processor(shape: str):
    """transformers' Qwen2-VL image processor (PIL backend: no torchvision needed) with the published settings."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(**SHAPES[shape]["image"])


def parameter_counts(model) -> dict[str, int]:
    """{"language": the language model's parameters (embeddings and output layer included, a tied one once),
    "vision": the vision tower's}."""
    seen, counts = set(), {"language": 0, "vision": 0}
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        counts["vision" if ".visual." in f".{name}" else "language"] += p.numel()
    return counts


def build_checkpoint(shape: str, path: str | Path, device: str | torch.device = "cpu", seed: int = 0,
                     tokenizer=None) -> Path:
    """A checkpoint folder of ``shape`` with random bf16 weights at ``path`` (agents.lmm.tiny_qwen.save_checkpoint:
    the Hub layout, written whole), made on ``device``; an existing folder of the same shape is kept."""
    from transformers import AutoModelForImageTextToText

    from agents.checkpoint_io import model_dir_problem, read_manifest
    from agents.lmm.tiny_qwen import save_checkpoint

    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    path = Path(path)
    if not model_dir_problem(path) and (read_manifest(path) or {}).get("info", {}).get("shape") == shape:
        return path
    tok = tokenizer or project_tokenizer()
    config = model_config(shape, tok)
    device = torch.device(device)
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []), device:
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = [tok.convert_tokens_to_ids("<|im_end|>"),
                                            tok.convert_tokens_to_ids("<|endoftext|>")]
    model.generation_config.pad_token_id = tok.pad_token_id
    save_checkpoint(str(path), model, tok, image_processor(shape), info={"shape": shape, "weights": "random"})
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return path
