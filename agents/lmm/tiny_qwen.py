"""The tiny LMM: a stock Hugging Face Qwen2.5-VL with a tiny config (the CPU default).

Why a stock class rather than a home-made transformer: the rollout/training code then drives
the tiny model and a full-size Qwen2.5-VL / Qwen3-VL checkpoint through exactly the same
calls (`AutoModelForImageTextToText`, M-RoPE, image-pad scattering, KV cache, generate).

A checkpoint directory written by `save_checkpoint` holds what a Hub checkpoint holds:
    config.json, generation_config.json, model.safetensors   (the model)
    tokenizer.json, tokenizer_config.json, chat_template.*    (agents.lmm.tokenizer)
    preprocessor_config.json                                   (the image processor)
    processor_config.json                                      (what AutoProcessor builds)
plus checkpoint_manifest.json (every file's size and sha256, written last: the folder is
complete), and `load_checkpoint` reads any such directory, tiny or full-size, offline.

Image processing without torchvision: transformers 5.x ships a PIL/numpy backend of the stock
Qwen2-VL image processor (`Qwen2VLImageProcessorPil`); `AutoImageProcessor` falls back to it
when torchvision is missing, and picks the torchvision one when it is importable. Both give
the same layout: `pixel_values` of shape (sum of t*h*w patches, 3 * temporal_patch_size *
patch**2), each still image duplicated over the temporal patch, patches ordered by 2x2 merge
blocks; `image_grid_thw` = (1, h/patch, w/patch) per image. No home-made processor is needed.

`AutoProcessor.from_pretrained(folder)` (what TRL and other tools call) works without torchvision
too: transformers' `Qwen2_5_VLProcessor` always loads a video processor, and every video processor
needs torchvision, so a saved folder names, in processor_config.json, transformers' image-only
processor class `PaddleOCRVLProcessor`: image processor + tokenizer, each image's `<|image_pad|>`
repeated prod(image_grid_thw) / merge_size**2 times, which is Qwen2.5-VL's own image rule. It finds
the pad token through `tokenizer.image_token`, written into tokenizer_config.json. Same input_ids,
pixel_values and image_grid_thw as the policy builds (tests/test_library.py checks it without
torchvision); what it lacks is the video path, which the environment never uses (frames are images).
The policy itself uses the tokenizer and the image processor directly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from agents.checkpoint_io import kill_point, model_dir_problem, staged_dir, write_manifest
from agents.lmm.tokenizer import CHAT_TEMPLATE

# Tiny but shaped like the real thing: GQA, M-RoPE, windowed vision attention, 2x2 merge.
TINY_TEXT = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,          # head_dim 32
    max_position_embeddings=8192,   # context: 64 overview frames + crops + text fit
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]},  # sums to head_dim/2
)
TINY_VISION = dict(
    depth=2,
    hidden_size=64,
    intermediate_size=128,
    num_heads=2,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=56,                 # 2x2 merged tokens per window
    fullatt_block_indexes=[1],
    out_hidden_size=128,            # = text hidden size
)
# Small frames: a 112x112 frame is 8x8 patches -> 16 tokens after the 2x2 merge, so a 64-frame
# overview costs ~1k tokens. Larger frames are shrunk to max_pixels, aspect ratio kept.
TINY_IMAGE = dict(min_pixels=28 * 28, max_pixels=112 * 112, patch_size=14, temporal_patch_size=2, merge_size=2)
IMAGE_TOKEN = "<|image_pad|>"
# transformers' image-only processor with Qwen2.5-VL's image-token rule (see the module docstring)
PROCESSOR_CLASS = "PaddleOCRVLProcessor"


def tiny_config(tokenizer, **text_overrides) -> Qwen2_5_VLConfig:
    """A tiny Qwen2.5-VL config whose special-token ids come from `tokenizer`."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in
           ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_end|>", "<|endoftext|>")}
    text = dict(TINY_TEXT, vocab_size=len(tokenizer), bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    text.update(text_overrides)
    vision = dict(TINY_VISION, out_hidden_size=text["hidden_size"])
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,  # small vocab: halves the parameter count
        **{TINY_BUILD_KEY: True},
    )


# config.json of a model built here says so: the trainers keep their tiny-model defaults for it
TINY_BUILD_KEY = "paravt_tiny_build"


def is_tiny_build(folder: str | os.PathLike) -> bool:
    """Whether a checkpoint folder holds one of this project's tiny builds: its config.json says so, or its build
    record (sft_args.json) names the frame size it was trained on."""
    from agents.lmm.default import checkpoint_info

    config = Path(folder) / "config.json"
    try:
        if config.is_file() and json.loads(config.read_text()).get(TINY_BUILD_KEY):
            return True
    except (OSError, ValueError):
        pass
    return bool(checkpoint_info(folder).get("args", {}).get("frame_size"))


def build_tiny_model(tokenizer, seed: int = 0, **text_overrides) -> Qwen2_5_VLForConditionalGeneration:
    """Randomly initialised tiny Qwen2.5-VL (fp32, eval mode). Same seed -> same weights."""
    with torch.random.fork_rng():  # do not disturb the caller's RNG stream
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(tiny_config(tokenizer, **text_overrides))
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                            tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def grow_depth(model, new_layers: int):
    """Give ``model``'s language model ``new_layers`` more decoder layers, in place, without changing what it
    computes: each new layer is a copy of the layer below it with its attention output and MLP down projections
    zeroed, so it adds nothing to the residual stream until training moves those two matrices (block expansion,
    as in LLaMA-Pro). The copies start from a working layer's features rather than noise, and the new layers are
    spread evenly through the stack. Returns ``model``."""
    import copy

    if new_layers < 0:
        raise ValueError(f"grow_depth: new_layers must be >= 0, got {new_layers}")
    lm = model.model.language_model
    old = list(lm.layers)
    # insert after layer round((j + 1) * n / new) - 1: after every layer for new == n, every other one for n / 2
    after = [max(0, round((j + 1) * len(old) / new_layers) - 1) for j in range(new_layers)] if new_layers else []
    layers, types = [], []
    for i, layer in enumerate(old):
        layers.append(layer)
        types.append(lm.config.layer_types[i])
        for _ in range(after.count(i)):
            new = copy.deepcopy(layer)
            torch.nn.init.zeros_(new.self_attn.o_proj.weight)
            torch.nn.init.zeros_(new.mlp.down_proj.weight)
            for bias in (new.self_attn.o_proj.bias, new.mlp.down_proj.bias):
                if bias is not None:
                    torch.nn.init.zeros_(bias)
            layers.append(new)
            types.append(lm.config.layer_types[i])
    for idx, layer in enumerate(layers):  # the KV cache is indexed by layer_idx
        layer.self_attn.layer_idx = idx
    lm.layers = torch.nn.ModuleList(layers)
    lm.config.num_hidden_layers = len(layers)
    lm.config.layer_types = types
    return model


def build_image_processor(**overrides) -> Qwen2VLImageProcessorPil:
    """The stock Qwen2-VL image processor, PIL backend (works without torchvision)."""
    return Qwen2VLImageProcessorPil(**dict(TINY_IMAGE, **overrides))


def save_checkpoint(path: str, model, tokenizer, image_processor=None, info: dict | None = None,
                    build_record: dict | None = None) -> str:
    """Write model + tokenizer + image processor to `path` in the Hub layout, whole or not at all:
    staged in a hidden sibling folder, checked complete (config, weights, a tokenizer that reloads
    with every token, preprocessor config), given a manifest (sizes, sha256 and `info`), fsynced and
    renamed into place (agents/checkpoint_io.py). An existing model folder at `path` is replaced.
    `build_record`: the starting model's sft_args.json (agents.lmm.default.checkpoint_info), written
    beside the weights so a trained model keeps what its build was trained on (the frame size and the
    sub-agent's passes of agents.lmm.Subagent's "auto" read it)."""
    with staged_dir(path) as tmp:
        model.save_pretrained(tmp)
        kill_point("model_dir_write")
        tokenizer.save_pretrained(tmp)
        (image_processor or build_image_processor()).save_pretrained(tmp)
        problem = model_dir_problem(tmp) or _tokenizer_round_trip_problem(tmp, tokenizer)
        if not (problem or os.path.isfile(os.path.join(tmp, "preprocessor_config.json"))):
            problem = "no preprocessor_config.json was written"
        problem = problem or _write_processor_config(tmp, tokenizer)
        if problem:
            raise ValueError(f"saving a checkpoint to {path}: {problem}")
        if build_record:
            with open(os.path.join(tmp, "sft_args.json"), "w") as f:
                json.dump(build_record, f, indent=1)
        write_manifest(tmp, info)
    return path


def _write_processor_config(folder, tokenizer) -> str | None:
    """Make `AutoProcessor.from_pretrained(folder)` work with or without torchvision (see the module
    docstring); returns the problem if it still does not load."""
    from transformers import AutoProcessor
    from transformers.utils import logging as hf_logging

    if tokenizer.convert_tokens_to_ids(IMAGE_TOKEN) in (None, tokenizer.unk_token_id):
        return f"the tokenizer has no {IMAGE_TOKEN} token"
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config["image_token"] = IMAGE_TOKEN  # a top-level *_token entry becomes tokenizer.image_token on load
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    with open(os.path.join(folder, "processor_config.json"), "w", encoding="utf-8") as f:
        json.dump({"processor_class": PROCESSOR_CLASS}, f, indent=2)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its one-time note about the class's older attribute style is noise here
    try:
        AutoProcessor.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # any failure means the folder would not load elsewhere: say which
        return f"AutoProcessor cannot load it: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
    finally:
        hf_logging.set_verbosity(verbosity)
    return None


def _tokenizer_round_trip_problem(folder, tokenizer) -> str | None:
    reloaded = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if len(reloaded) != len(tokenizer):
        return f"the saved tokenizer reloads with {len(reloaded)} tokens instead of {len(tokenizer)}"
    return None


def load_checkpoint(path: str, device: str | torch.device = "cpu", dtype: torch.dtype | None = None):
    """Load (model, tokenizer, image_processor) from a local directory, offline. Works for the
    tiny model and for any local Qwen-VL-style image-text-to-text checkpoint. A trainers/sft.py
    output folder is accepted too: its ``cold_start`` checkpoint is loaded. A folder that is
    incomplete (against its manifest, or missing weights or tokenizer files) or holds truncated
    weights raises a ValueError naming the folder and the problem."""
    if os.path.isfile(os.path.join(path, "cold_start", "config.json")) and not os.path.isfile(
            os.path.join(path, "config.json")):
        path = os.path.join(path, "cold_start")
    if not os.path.isdir(path):
        raise ValueError(f"model directory {path!r} does not exist; build one with "
                         "agents.lmm.tiny_qwen.save_checkpoint(path, build_tiny_model(tok), tok) "
                         "or point at a downloaded Hugging Face checkpoint directory")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"{path!r} has no config.json, so it is not a model checkpoint directory "
                         f"(it holds {sorted(os.listdir(path))[:10]}); save one with "
                         "agents.lmm.tiny_qwen.save_checkpoint or model.save_pretrained(path)")
    problem = model_dir_problem(path)
    if problem:
        raise ValueError(f"model directory {path!r} cannot be loaded: {problem}")
    # trust_remote_code=False: a folder's own Python (config.json's auto_map) never runs, and transformers refuses
    # with an error instead of asking on the terminal
    kw = dict(local_files_only=True, trust_remote_code=False)
    try:
        # use_kernels=False: transformers 5.2x otherwise swaps layers for kernels fetched from the Hub, which
        # breaks offline loading on a GPU (local_files_only does not cover them) and is no longer the stock math.
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype or torch.float32, use_kernels=False,
                                                            **kw)
        tokenizer = AutoTokenizer.from_pretrained(path, **kw)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"model directory {path!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if getattr(tokenizer, "chat_template", None) is None:
        tokenizer.chat_template = _find_chat_template(path) or CHAT_TEMPLATE
    if os.path.isfile(os.path.join(path, "preprocessor_config.json")):
        image_processor = AutoImageProcessor.from_pretrained(path, **kw)
    else:
        image_processor = build_image_processor()
    return model.to(device).eval(), tokenizer, image_processor


def _find_chat_template(path: str) -> str | None:
    """Hub VLM checkpoints often keep the template next to the processor, not the tokenizer."""
    jinja, js = os.path.join(path, "chat_template.jinja"), os.path.join(path, "chat_template.json")
    if os.path.isfile(jinja):
        return open(jinja).read()
    if os.path.isfile(js):
        return json.load(open(js))["chat_template"]
    return None
