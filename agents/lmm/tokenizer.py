"""A small byte-level BPE tokenizer for the tiny LMM, built here (nothing can be downloaded).

Why build one: the tiny model is pretrained in this project on text the world generates, so a
~2k vocabulary trained on that text is enough, and it keeps the embedding matrix small.
The tokenizer speaks the same dialect as the Qwen-VL family, so the same policy code drives the
tiny model and a full-size Qwen2.5-VL / Qwen3-VL checkpoint:

- chat tokens `<|im_start|>`, `<|im_end|>`, `<|endoftext|>` and a Qwen-style chat template;
- vision tokens `<|vision_start|>`, `<|vision_end|>`, `<|image_pad|>`, `<|video_pad|>`;
- every structural tag of the ParaVT grammar (`<think>`, `</tool_call>`, `<answer>`, ...) is ONE
  token, so a stop string ends exactly on a token boundary and the selective-anchoring reward
  can address the structural positions one token each.

Byte-level BPE: any string encodes (the 256 byte symbols are always in the vocabulary).
Digits are split one per token (as in Qwen), which helps a tiny model with timestamps.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# The grammar's tags (the output grammar of the ParaVT paper, Yang et al., 2026). Added as non-special tokens, like Qwen's
# `<tool_call>`: they are single tokens but survive `decode(skip_special_tokens=True)`.
STRUCTURAL_TAGS = (
    "<think>", "</think>",
    "<tool_call>", "</tool_call>",
    "<tool_code>", "</tool_code>",
    "<tool_response>", "</tool_response>",
    "<answer>", "</answer>",
)
CHAT_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
SPECIAL_TOKENS = CHAT_TOKENS + VISION_TOKENS

# Qwen2's pre-tokenisation regex: letters/words, single digits, punctuation runs, newlines.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2-VL's chat template, written out: a default system turn when none is given, every
# message as `<|im_start|>role\n...<|im_end|>\n`, an image part as
# `<|vision_start|><|image_pad|><|vision_end|>` (the policy expands the one pad token to the
# image's number of merged patches), text parts concatenated with nothing in between.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] }}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part -%}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' or 'video' in part -%}"
    "{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in part -%}"
    "{{ part['text'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)

# Used when no corpus is given: enough of the ParaVT dialect for BPE to learn the common
# pieces. Real pretraining passes text the world generates (captions, answers, traces).
_DEFAULT_CORPUS = [
    "You are a helpful assistant. Answer questions about a long video.",
    "<0.0 seconds><12.0 seconds><123.5 seconds><3600.0 seconds>",
    "Question: What colour is the star that appears after the blue scene? "
    "Options: (A) red (B) green (C) blue (D) yellow",
    "Question: How many times does a red circle appear? Answer with a number.",
    "Question: When does the green square appear? Answer with start and end time in seconds.",
    "I should look closer at the second scene, between 120 and 180 seconds.",
    '{"name": "crop_video", "arguments": {"video_path": "video.mp4", "start_time": 10.0, "end_time": 20.0}}',
    "crop_video(start_time=10, end_time=20)",
    "red star 12-15 s. blue circle 30-34 s. green square. yellow triangle. purple cross. white dot.",
    "The clip shows a red star in the top left corner from 12 to 15 seconds.",
    "top left, top right, bottom left, bottom right, centre, scene, event, frame, crop, window.",
    "The answer is (B). The answer is 3. The event happens between 40.0 and 45.0 seconds.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 20 30 40 50 60 100 seconds minutes hours",
]


def build_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `corpus` and wrap it as a `PreTrainedTokenizerFast`.

    vocab_size counts everything (256 byte symbols + merges + special tokens). Deterministic:
    the same corpus gives the same tokenizer.
    """
    texts = list(corpus) if corpus is not None else list(_DEFAULT_CORPUS)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        # Special tokens first: stable low ids (<|endoftext|> = 0) whatever the corpus.
        special_tokens=list(SPECIAL_TOKENS) + list(STRUCTURAL_TAGS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # Re-register the tags as added tokens with the right flags: specials are hidden by
    # skip_special_tokens, structural tags are not; neither is normalised or stripped.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in STRUCTURAL_TAGS])

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=32768,
        padding_side="left",  # batched generation pads on the left
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    check_tokenizer(hf)
    return hf


def check_tokenizer(tokenizer, require_tags: bool = True) -> None:
    """Raise ValueError unless the chat/vision tokens (and, if require_tags, the grammar's tags)
    are single tokens of `tokenizer`."""
    needed = list(SPECIAL_TOKENS[1:3]) + list(VISION_TOKENS[:3])  # im_start/end, vision start/end/pad
    if require_tags:
        needed += list(STRUCTURAL_TAGS)
    missing = [t for t in needed if len(tokenizer.encode(t, add_special_tokens=False)) != 1]
    if missing:
        raise ValueError(
            f"tokenizer is missing single-token special tokens {missing}. Re-build it with "
            "agents.lmm.tokenizer.build_tokenizer (tiny model), or add them to a full-size "
            "checkpoint with agents.lmm.tokenizer.add_structural_tokens(tokenizer, model); "
            "to accept multi-token grammar tags on a stock checkpoint, pass require_tags=False."
        )
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("tokenizer has no chat_template; re-build it with agents.lmm.tokenizer.build_tokenizer "
                         "or set tokenizer.chat_template = agents.lmm.tokenizer.CHAT_TEMPLATE")


def add_structural_tokens(tokenizer, model=None) -> list[str]:
    """Make every grammar tag a single token of a stock tokenizer (e.g. Qwen2.5-VL has no
    `<think>`); grow the model's embeddings when the new ids pass them (a Qwen model's vocabulary is padded past
    its tokenizer's, and is never shrunk). Returns the tags that were added."""
    new = [t for t in STRUCTURAL_TAGS if len(tokenizer.encode(t, add_special_tokens=False)) != 1]
    if new:
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in new])
        if model is not None and len(tokenizer) > model.get_input_embeddings().num_embeddings:
            model.resize_token_embeddings(len(tokenizer))
    return new
