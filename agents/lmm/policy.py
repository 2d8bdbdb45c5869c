"""One interface for every LMM backend: token-in/token-out conversations, batched sampling with
behaviour log-probs, and differentiable log-probs of given completions for training.

The rollout loop (verl's agent loop, never re-tokenise the history):

    conv = policy.start(obs_messages)                     # template rendered ONCE (+ generation prompt)
    while True:
        [c] = policy.generate([conv], temperature=0.7)    # completion text starts with "<think>\n"
        conv.append_completion(c)                         # exact sampled tokens join the history
        obs, reward, done, ... = env.step(c.text)
        if done: break
        conv = policy.extend(conv, [tool_response_msg])   # closes the turn, appends ONLY the new turn

`conv.token_ids` is then the training sequence, `conv.generated_mask` its loss mask and
`conv.logprobs` the behaviour log-probs (0.0 where not generated); for the trainer,
`policy.completion_logprobs` recomputes log-probs under the current weights, with gradients.

Log-prob convention: log pi(token) = log_softmax(logits / T)[token], T = the sampling temperature
(T = 1 for greedy), i.e. the distribution sampled from *before* top-p truncation, the usual choice
of TRL/verl. `completion_logprobs` defaults to the temperature each completion was sampled at.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, StoppingCriteria

from agents.lmm import graph_decode
from agents.lmm.graph_decode import MAX_STATIC_CACHES, KeptCaches  # noqa: F401  (MAX_STATIC_CACHES: re-exported)
from agents.lmm.tokenizer import check_tokenizer
from paravt_env.config import THINK_PREFIX

# A turn ends at its answer. Tool calls do NOT end a turn: under parallel dispatch one turn holds
# several calls, so `generate(max_calls=N)` ends it after the N-th closed call instead.
DEFAULT_STOP = ("</answer>",)
CALL_CLOSERS = ("</tool_call>", "</tool_code>")
DEFAULT_PREFIX = THINK_PREFIX  # the env's think prefix, prefilled at the start of every turn


@dataclass
class Completion:
    text: str                    # generated text INCLUDING the forced prefix
    token_ids: list[int]         # prefix tokens + generated tokens
    logprobs: list[float]        # behaviour log-prob per token; 0.0 for prefix tokens
    generated_mask: list[bool]   # False for forced-prefix tokens
    finish_reason: str           # "stop" (stop string) | "eos" (end-of-turn token) | "length"
    temperature: float = 1.0     # the T of the log-prob convention (1.0 for greedy)


@dataclass
class Conversation:
    """Token-level history of one episode. Mutable: `extend` and `append_completion` modify it
    in place (and return it); use `copy()` to branch, e.g. for the G rollouts of a group."""
    token_ids: list[int] = field(default_factory=list)
    images: list[np.ndarray] = field(default_factory=list)        # in order of appearance, HxWx3 uint8
    generated_mask: list[bool] = field(default_factory=list)      # True where the model sampled the token
    logprobs: list[float] = field(default_factory=list)           # behaviour log-probs, 0.0 elsewhere
    pixel_values: list[torch.Tensor] = field(default_factory=list)  # per image, processed once
    image_grid_thw: list[torch.Tensor] = field(default_factory=list)  # per image, (t, h, w) in patches
    open_turn: bool = False      # an assistant turn is open (generation prompt or completion not yet closed)
    temperature: float = 1.0     # sampling temperature of the appended completions (log-prob convention)

    def append_completion(self, c: Completion) -> "Conversation":
        self.token_ids += c.token_ids
        self.generated_mask += c.generated_mask
        self.logprobs += c.logprobs
        self.open_turn = True    # the turn is closed by the next `extend`
        self.temperature = c.temperature
        return self

    def copy(self) -> "Conversation":
        return Conversation(list(self.token_ids), list(self.images), list(self.generated_mask),
                            list(self.logprobs), list(self.pixel_values), list(self.image_grid_thw), self.open_turn,
                            self.temperature)

    def __len__(self) -> int:
        return len(self.token_ids)


class LMMPolicy(Protocol):
    def start(self, messages: list[dict], add_generation_prompt: bool = True) -> Conversation: ...
    def extend(self, conv: Conversation, messages: list[dict], add_generation_prompt: bool = True) -> Conversation: ...
    def generate(self, convs: Sequence[Conversation], *, temperature: float = 0.7, top_p: float = 1.0,
                 max_new_tokens: int = 256, stop: Sequence[str] = DEFAULT_STOP, prefix: str = DEFAULT_PREFIX,
                 seed: int | None = None, max_calls: int | None = None) -> list[Completion]: ...
    def completion_logprobs(self, convs: Sequence[Conversation], completions: Sequence[Completion], *,
                            temperature: float | None = None) -> list[torch.Tensor]: ...
    def conversation_logprobs(self, convs: Sequence[Conversation], *,
                              temperature: float | None = None) -> list[torch.Tensor]: ...


class _RecordLogprobs(LogitsProcessor):
    """Sees the raw logits of every step (custom processors run before generate's temperature and
    top-p warpers) and records log_softmax(logits / T) of the token chosen at that step. The token is
    only known at the next call, so one step of distribution is kept (O(batch * vocab) memory)."""

    def __init__(self, temperature: float):
        self.t = temperature
        self.prev: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.t, dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:  # (batch, steps)
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, last_tokens[:, None]).squeeze(1))
            self.prev = None
        return torch.stack(self.steps, 1)


GENERATION_CACHES = ("dynamic", "static", "graph", "graph-compiled")


class _StopOnStrings(StoppingCriteria):
    """Per-row stop when a stop string appears in the generated text, or after the `max_calls`-th
    closed tool call (a </tool_call> or </tool_code> written after the forced prefix).

    A string that is an added token (the structural tags of the tiny tokenizer) can only appear as
    that token, so it is checked by id, batched. Other strings (a stock tokenizer's multi-token
    tags) are found by decoding a short tail: a string of n bytes spans at most n + 1 byte-level
    tokens, and comparing the tail with and without its newest token counts each occurrence once."""

    def __init__(self, tokenizer, stops: Sequence[str], prompt_len: int, max_calls: int | None = None,
                 batch_size: int = 1):
        self.tok, self.prompt_len, self.max_calls = tokenizer, prompt_len, max_calls
        vocab = tokenizer.get_added_vocab()
        self.stop_ids = [vocab[s] for s in stops if s in vocab]
        self.stops = [s for s in stops if s not in vocab]
        closers = CALL_CLOSERS if max_calls is not None else ()
        self.closer_ids = [vocab[s] for s in closers if s in vocab]
        self.closers = [s for s in closers if s not in vocab]
        self.window = max((len(s.encode()) for s in self.stops + self.closers), default=0) + 1
        self.calls = torch.zeros(batch_size, dtype=torch.long)
        self.stopped_at: dict[int, int] = {}  # row -> number of generated tokens incl. the stop

    def _tail_text(self, input_ids, row: int, n_gen: int, drop_last: bool) -> str:
        end = input_ids.shape[1] - (1 if drop_last else 0)
        start = input_ids.shape[1] - min(n_gen, self.window)
        return self.tok.decode(input_ids[row, start:end].tolist(), skip_special_tokens=False)

    def __call__(self, input_ids, scores, **kwargs):
        n_gen = input_ids.shape[1] - self.prompt_len
        device = input_ids.device
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=device)
        if self.stopped_at:
            done[list(self.stopped_at)] = True
        hit = torch.zeros_like(done)
        if self.stop_ids:
            hit |= torch.isin(input_ids[:, -1], torch.tensor(self.stop_ids, device=device))
        if self.closer_ids:
            closed = torch.isin(input_ids[:, -1], torch.tensor(self.closer_ids, device=device)) & ~done
            self.calls += closed.cpu().long()
        if self.stops or self.closers:
            for row in (~done).nonzero().flatten().tolist():
                text = self._tail_text(input_ids, row, n_gen, drop_last=False)
                if any(s in text for s in self.stops):
                    hit[row] = True
                if self.closers:
                    before = self._tail_text(input_ids, row, n_gen, drop_last=True)
                    self.calls[row] += sum(text.count(s) - before.count(s) for s in self.closers)
        if self.max_calls is not None:
            hit |= (self.calls >= self.max_calls).to(device)
        hit &= ~done
        for row in hit.nonzero().flatten().tolist():
            self.stopped_at[row] = n_gen
        return done | hit


class TransformersPolicy:
    """LMMPolicy over a Hugging Face image-text-to-text model: the tiny Qwen2.5-VL of this
    project or any local Qwen2.5-VL / Qwen3-VL-style checkpoint.

    TransformersPolicy(path)                                  # a local checkpoint directory, offline
    TransformersPolicy(model, tokenizer, image_processor)     # objects already in memory
    require_tags=False accepts a stock tokenizer whose grammar tags are several tokens each.
    fast=True (default) patches a Qwen2.5-VL model with agents.lmm.fast_qwen.enable_fast_path (same
    numbers, batch-friendly) and builds pixel values in torch (pixel_values_from_frames, equal to the
    processor's); fast=False runs the stock Hugging Face code throughout (and unpatches the model).
    generation_cache picks the sampler; all give the same tokens and log-probs for a seed:
      "dynamic"  Hugging Face `generate` with its growing KV cache (the default);
      "static"   `generate` with a preallocated KV cache, which lets it compile the decoding forward on
                 a GPU (torch.compile "reduce-overhead");
      "graph"    agents.lmm.graph_decode: the decode forward recorded once as a CUDA graph and replayed
                 per token, sampling as `generate` does (on a CPU the same loop runs eagerly);
      "graph-compiled"  the same with the decode forward compiled (torch.compile, inductor) before it
                 is recorded: fewer kernels per token, ~20 s of compilation for the first two shapes.
    With a graph sampler, decode_attention picks the compiled decode step's attention kernel (e.g.
    "triton": agents.lmm.cascade_kernel, for a GRPO group's rows sharing a prompt, CUDA and triton) and
    fuse_projections ("attention", "mlp") computes each layer's query/key/value and gate/up products as
    one during decode steps, from a kept copy of those weights refreshed when they change (see
    graph_decode.KeptCaches; the README's "Scaling up" has what each buys at the 7B shape).
    The static and graph samplers keep one cache per batch size and length block (prompt + new tokens
    rounded up to graph_decode.STATIC_CACHE_BLOCK) across calls, so its tensors keep their addresses
    and a recorded graph can replay (at most MAX_STATIC_CACHES, least recently used dropped first);
    each new batch size or block compiles or records once more.
    benchmarks/speed_generation_scale.py measures them.
    """

    def __init__(self, model_dir_or_model, tokenizer=None, image_processor=None, *,
                 device: str | torch.device = "cpu", dtype: torch.dtype | None = None, require_tags: bool = True,
                 fast: bool = True, generation_cache: str = "dynamic", decode_attention: str = "sdpa",
                 fuse_projections: Sequence[str] = ()):
        if generation_cache not in GENERATION_CACHES:
            raise ValueError(f"generation_cache must be one of {GENERATION_CACHES}, not {generation_cache!r}")
        if (decode_attention != "sdpa" or fuse_projections) and not generation_cache.startswith("graph"):
            raise ValueError("decode_attention and fuse_projections choose what a graph sampler's decode step runs: "
                             f"use generation_cache='graph' or 'graph-compiled', not {generation_cache!r}")
        self.generation_cache = generation_cache
        if isinstance(model_dir_or_model, (str, bytes)) or hasattr(model_dir_or_model, "__fspath__"):
            from agents.lmm.tiny_qwen import load_checkpoint
            model, tok, proc = load_checkpoint(str(model_dir_or_model), device=device, dtype=dtype)
            tokenizer, image_processor = tokenizer or tok, image_processor or proc
        else:
            model = model_dir_or_model.to(device)
            if tokenizer is None:
                raise ValueError("pass the tokenizer together with an in-memory model "
                                 "(or a checkpoint directory that contains it)")
            if image_processor is None:
                from agents.lmm.tiny_qwen import build_image_processor
                image_processor = build_image_processor()
        check_tokenizer(tokenizer, require_tags=require_tags)
        from agents.lmm.fast_qwen import disable_fast_path, enable_fast_path, supports_fast_path
        if supports_fast_path(model):  # other families (Qwen3-VL) keep the stock model code
            (enable_fast_path if fast else disable_fast_path)(model)
        self.fast = fast
        self.model, self.tokenizer, self.image_processor = model, tokenizer, image_processor
        self.kept_caches = KeptCaches(model, compile_decode=generation_cache == "graph-compiled",  # static, graph*
                                      decode_attention=decode_attention, fuse_projections=tuple(fuse_projections))
        self.device = torch.device(device)
        cfg = model.config
        text_cfg = getattr(cfg, "text_config", cfg)
        self.context_length: int = text_cfg.max_position_embeddings
        self.image_token_id: int = cfg.image_token_id
        self.video_token_id: int | None = getattr(cfg, "video_token_id", None)
        if tokenizer.convert_tokens_to_ids("<|image_pad|>") != self.image_token_id:
            raise ValueError("tokenizer's <|image_pad|> id differs from the model's image_token_id; "
                             "save the model and tokenizer together (agents.lmm.tiny_qwen.save_checkpoint)")
        self.merge = getattr(image_processor, "merge_size", 2)
        self.eos_ids = sorted({tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")})
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        # What the template writes between an assistant message's content and the next message
        # ("<|im_end|>\n" for Qwen): closes a turn whose completion we appended token by token.
        probe = "\x00PROBE\x00"
        rendered = self._template([{"role": "system", "content": "s"}, {"role": "assistant", "content": probe}], False)
        self._turn_end_ids = self._encode(rendered.split(probe, 1)[1])

    # ------------------------------------------------------------------ rendering
    def _template(self, messages, add_generation_prompt):
        return self.tokenizer.apply_chat_template(_strip_images(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _render(self, messages, add_generation_prompt, continuation):
        """Token ids + processed images for `messages`. A continuation is rendered after a dummy
        system turn that is then cut off, so the template's first-message logic (default system
        prompt) does not fire in the middle of a conversation."""
        if continuation:
            head = [{"role": "system", "content": "s"}]
            base = self._template(head, False)
            full = self._template(head + list(messages), add_generation_prompt)
            if not full.startswith(base):
                raise ValueError("chat template does not render messages independently; cannot extend "
                                 "token-in/token-out (use a Qwen-style template)")
            text = full[len(base):]
        else:
            text = self._template(messages, add_generation_prompt)
        images = [_as_uint8_image(p["image"]) for m in messages if not isinstance(m["content"], str)
                  for p in m["content"] if p.get("type") == "image" or "image" in p]
        if any(p.get("type") == "video" for m in messages if not isinstance(m["content"], str) for p in m["content"]):
            raise ValueError("video parts are not supported; pass the frames as image parts")
        ids = self._encode(text)
        pixel_values, grids = self._process_images(images)
        # One <|image_pad|> per image in the template; the model needs one per merged patch.
        out, k = [], 0
        for t in ids:
            if t == self.image_token_id:
                if k >= len(images):
                    raise ValueError("more <|image_pad|> tokens than image parts in the messages")
                out += [t] * (int(grids[k].prod()) // self.merge ** 2)
                k += 1
            else:
                out.append(t)
        if k != len(images):
            raise ValueError(f"the chat template rendered {k} image placeholders for {len(images)} images")
        return out, images, pixel_values, grids

    def _process_images(self, images):
        if not images:
            return [], []
        if self.fast:
            from agents.lmm.fast_qwen import pixel_values_from_frames
            pixel_values, grid_thw = pixel_values_from_frames(images, self.image_processor)
        else:
            out = self.image_processor(images=images, return_tensors="pt")
            pixel_values, grid_thw = out["pixel_values"], out["image_grid_thw"]
        grids = list(grid_thw)
        sizes = [int(g.prod()) for g in grids]
        return list(torch.split(pixel_values, sizes)), grids

    def _check_length(self, n: int, what: str):
        if n > self.context_length:
            raise ValueError(
                f"{what} is {n} tokens but the model's context is {self.context_length} tokens. Use fewer "
                "or smaller frames (image processor max_pixels), fewer turns or shorter tool responses, or "
                "a model with a larger max_position_embeddings.")

    def start(self, messages: list[dict], add_generation_prompt: bool = True) -> Conversation:
        ids, images, pv, grids = self._render(messages, add_generation_prompt, continuation=False)
        self._check_length(len(ids), "the prompt")
        return Conversation(ids, images, [False] * len(ids), [0.0] * len(ids), pv, grids,
                            open_turn=add_generation_prompt)

    def extend(self, conv: Conversation, messages: list[dict], add_generation_prompt: bool = True) -> Conversation:
        if conv.open_turn:  # close the assistant turn exactly as the template would
            end = self._turn_end_ids
            if conv.token_ids and conv.token_ids[-1] == end[0]:
                end = end[1:]  # the model already emitted <|im_end|> (finish_reason "eos")
            conv.token_ids += end
            conv.generated_mask += [False] * len(end)
            conv.logprobs += [0.0] * len(end)
        ids, images, pv, grids = self._render(messages, add_generation_prompt, continuation=True)
        conv.token_ids += ids
        conv.generated_mask += [False] * len(ids)
        conv.logprobs += [0.0] * len(ids)
        conv.images += images
        conv.pixel_values += pv
        conv.image_grid_thw += grids
        conv.open_turn = add_generation_prompt
        self._check_length(len(conv.token_ids), "the conversation")
        return conv

    def completion_from_text(self, text: str, finish_reason: str = "stop") -> Completion:
        """A teacher-forced completion (SFT targets, scripted turns): canonical tokens of `text`,
        all marked as generated (loss targets), log-probs 0.0."""
        ids = self._encode(text)
        return Completion(text, ids, [0.0] * len(ids), [True] * len(ids), finish_reason)

    # ------------------------------------------------------------------ batching
    def _batch(self, seqs: list[list[int]], convs: Sequence[Conversation]) -> dict:
        """Left-padded model inputs for token sequences whose images are those of `convs`."""
        # One vectorised pass over all tokens: a loop of per-row tensor copies was ~5x slower, which
        # shows at GPU batch sizes (1024 rows).
        lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        n = int(lens.max())
        flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
        row = np.repeat(np.arange(len(seqs)), lens)
        col = np.arange(len(flat)) + np.repeat(n - np.cumsum(lens), lens)  # row i ends at column n - 1
        ids = np.full((len(seqs), n), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(seqs), n), dtype=np.int64)
        ids[row, col], mask[row, col] = flat, 1
        ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
        # mm_token_type_ids tells the model where the vision tokens are (M-RoPE needs it in transformers 5).
        mm = (ids == self.image_token_id).long()
        if self.video_token_id is not None:
            mm += 2 * (ids == self.video_token_id).long()
        batch = dict(input_ids=ids, attention_mask=mask, mm_token_type_ids=mm)
        pvs = [p for c in convs for p in c.pixel_values]  # the model fills pads row by row, in order
        if pvs:
            batch["pixel_values"] = torch.cat(pvs)
            batch["image_grid_thw"] = torch.stack([g for c in convs for g in c.image_grid_thw])
        batch = {k: v.to(self.device) for k, v in batch.items()}
        if pvs:  # cast on the device: stored fp16 pixel values cross the bus at half the bytes
            batch["pixel_values"] = batch["pixel_values"].to(self.model.dtype)
        return batch

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def generate(self, convs: Sequence[Conversation], *, temperature: float = 0.7, top_p: float = 1.0,
                 max_new_tokens: int = 256, stop: Sequence[str] = DEFAULT_STOP, prefix: str = DEFAULT_PREFIX,
                 seed: int | None = None, max_calls: int | None = None) -> list[Completion]:
        """Sample one completion per conversation, batched. The forced `prefix` is appended to the
        prompt before sampling and is part of each completion. A sequence ends at a stop string
        (included in the text), at <|im_end|>/<|endoftext|> (included), at max_new_tokens, or, when
        `max_calls` is set, right after its `max_calls`-th closed tool call (parallel dispatch: the
        env's calls-per-turn limit; sequential dispatch: 1). `max_calls=None` never stops on calls.
        `seed` makes the batch reproducible (same batch composition -> same samples)."""
        if not convs:
            return []
        prefix_ids = self._encode(prefix) if prefix else []
        prompts = [c.token_ids + prefix_ids for c in convs]
        longest = max(len(p) for p in prompts)
        if longest >= self.context_length:
            self._check_length(longest + 1, "the prompt plus forced prefix plus one new token")
        max_new = min(max_new_tokens, self.context_length - longest)
        distinct, rows = list(range(len(convs))), None
        if self.generation_cache.startswith("graph"):  # our own sampler prefills each distinct prompt once
            distinct, of_prompt = _distinct_prompts(prompts, convs)
            rows = torch.tensor(of_prompt) if len(distinct) < len(convs) else None
        batch = self._batch([prompts[i] for i in distinct], [convs[i] for i in distinct])
        prompt_len = batch["input_ids"].shape[1]
        do_sample = bool(temperature and temperature > 0)
        t = float(temperature) if do_sample else 1.0
        stopper = _StopOnStrings(self.tokenizer, stop, prompt_len, max_calls, len(convs))
        cuda = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            if seed is not None:
                torch.manual_seed(seed)
            if self.generation_cache.startswith("graph"):
                seqs, lps = graph_decode.sample(
                    self.model, self.kept_caches, batch, max_new_tokens=max_new, temperature=t,
                    do_sample=do_sample, top_p=top_p, eos_ids=self.eos_ids, pad_id=self.pad_id,
                    stopping=stopper, rows=rows)
                gen, lps = seqs[:, prompt_len:].cpu(), lps.cpu()
            else:
                recorder = _RecordLogprobs(t)
                gen_cfg = GenerationConfig(  # from scratch: a checkpoint's defaults (top_k, penalties) must not leak in
                    do_sample=do_sample, temperature=t if do_sample else None, top_p=top_p if do_sample else None,
                    top_k=0 if do_sample else None, max_new_tokens=max_new, eos_token_id=self.eos_ids,
                    pad_token_id=self.pad_id, use_cache=True, return_dict_in_generate=True)
                kept = (self.kept_caches.get(len(convs), prompt_len + max_new)
                        if self.generation_cache == "static" else None)
                cache = {kept.cache_argument: kept.cache} if kept else {}
                out = self.model.generate(**batch, generation_config=gen_cfg, **cache,
                                          logits_processor=[recorder], stopping_criteria=[stopper])
                gen = out.sequences[:, prompt_len:].cpu()
                lps = (recorder.finish(out.sequences[:, -1]).cpu() if gen.shape[1]
                       else torch.zeros(len(convs), 0))
        results = []
        for row in range(len(convs)):
            toks = gen[row].tolist()
            if row in stopper.stopped_at:
                n, reason = stopper.stopped_at[row], "stop"
            else:
                first_eos = next((i for i, x in enumerate(toks) if x in self.eos_ids), None)
                n, reason = (first_eos + 1, "eos") if first_eos is not None else (len(toks), "length")
            ids = prefix_ids + toks[:n]
            results.append(Completion(
                text=self.tokenizer.decode(ids, skip_special_tokens=False),
                token_ids=ids,
                logprobs=[0.0] * len(prefix_ids) + lps[row, :n].tolist(),
                generated_mask=[False] * len(prefix_ids) + [True] * n,
                finish_reason=reason,
                temperature=t,
            ))
        return results

    # ------------------------------------------------------------------ training
    def completion_logprobs(self, convs: Sequence[Conversation], completions: Sequence[Completion], *,
                            temperature: float | None = None) -> list[torch.Tensor]:
        """Per-token log-probs of each completion's tokens (prefix tokens included: mask them with
        `generated_mask`) under the current weights, one batched forward pass, differentiable (call
        under torch.no_grad() for old/reference log-probs). temperature=None: each completion's own."""
        seqs = [c.token_ids + comp.token_ids for c, comp in zip(convs, completions, strict=True)]
        temps = [temperature if temperature is not None else comp.temperature for comp in completions]
        return self._tail_logprobs(seqs, convs, [len(comp.token_ids) for comp in completions], temps)

    def conversation_logprobs(self, convs: Sequence[Conversation], *,
                              temperature: float | None = None) -> list[torch.Tensor]:
        """Multi-turn training: log-probs of every token of each finished conversation, aligned with
        `conv.token_ids` (entries before the first generated token are 0.0). Loss mask:
        `conv.generated_mask`; behaviour log-probs: `conv.logprobs`. One forward per conversation
        batch, whatever the number of turns. temperature=None: the conversation's sampling temperature."""
        firsts = [next((i for i, g in enumerate(c.generated_mask) if g), len(c)) for c in convs]
        tails = [len(c) - f for c, f in zip(convs, firsts)]
        temps = [temperature if temperature is not None else c.temperature for c in convs]
        lps = self._tail_logprobs([c.token_ids for c in convs], convs, tails, temps)
        return [torch.cat([lp.new_zeros(len(c) - len(lp)), lp]) for c, lp in zip(convs, lps)]

    def _tail_logprobs(self, seqs, convs, tails, temps) -> list[torch.Tensor]:
        """log pi(seq[j] | seq[:j]) for the last `tail` tokens of each sequence."""
        if any(t >= len(s) for s, t in zip(seqs, tails)):
            raise ValueError("a scored span must leave at least one context token before it")
        self._check_length(max(len(s) for s in seqs), "conversation plus completion")
        batch = self._batch(seqs, convs)
        keep = max(tails) + 1
        # With left padding every sequence ends at the last column, so the last `keep` positions hold
        # the predictions of every scored token; logits_to_keep avoids the full L x vocab logits.
        logits = self.model(**batch, use_cache=False, logits_to_keep=keep).logits.float()
        out = []
        for i, (seq, n, t) in enumerate(zip(seqs, tails, temps)):
            step_logits = logits[i, keep - 1 - n: keep - 1] / t       # position j predicts token j+1
            target = torch.tensor(seq[len(seq) - n:], device=logits.device, dtype=torch.long)
            out.append(torch.log_softmax(step_logits, -1).gather(1, target[:, None]).squeeze(1))
        return out


def _distinct_prompts(prompts: Sequence[list[int]], convs: Sequence[Conversation]) -> tuple[list[int], list[int]]:
    """(index of the first conversation of each distinct prompt, for every conversation the position of
    its prompt in that list). Prompts are the same when their tokens and their images are."""
    distinct: list[int] = []
    rows: list[int] = []
    by_tokens: dict[tuple, list[int]] = {}
    for i, (prompt, conv) in enumerate(zip(prompts, convs, strict=True)):
        same_tokens = by_tokens.setdefault(tuple(prompt), [])
        match = next((j for j in same_tokens if _same_images(convs[distinct[j]], conv)), None)
        if match is None:
            match = len(distinct)
            distinct.append(i)
            same_tokens.append(match)
        rows.append(match)
    return distinct, rows


def _same_images(a: Conversation, b: Conversation) -> bool:
    return (len(a.pixel_values) == len(b.pixel_values)
            and all(x is y or (x.shape == y.shape and torch.equal(x, y)) for x, y in zip(a.pixel_values, b.pixel_values))
            and all(torch.equal(x, y) for x, y in zip(a.image_grid_thw, b.image_grid_thw)))


def _strip_images(messages):
    """Messages for the template: image arrays replaced by a marker (templates only test for the key)."""
    clean = []
    for m in messages:
        if isinstance(m.get("content"), str) or m.get("content") is None:
            clean.append(dict(m))
        else:
            clean.append({**m, "content": [{**p, "image": "<image>"} if ("image" in p or p.get("type") == "image")
                                           else dict(p) for p in m["content"]]})
    return clean


def _as_uint8_image(img) -> np.ndarray:
    arr = np.asarray(img)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise ValueError(f"image parts must be HxWx3 uint8 arrays, got shape {arr.shape} dtype {arr.dtype}")
    return arr
