"""agents.lmm.graph_decode on a CPU: the decode attention used under torch.compile, and the compiled
decode loop against the eager one. (The CUDA-graph replay itself: tests/test_lmm.py, on a GPU.)"""

import os
from functools import partial

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agents.lmm import graph_decode


def grouped_model(seed=0, heads=8):
    """A small Qwen2 language model whose attention groups heads / 2 query heads per key/value head
    (8 heads: head size 8; 4 heads: 16, the triton kernel's smallest)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=heads,
                      num_key_value_heads=2, vocab_size=300, max_position_embeddings=512)
    cfg._attn_implementation = "sdpa"
    return Qwen2ForCausalLM(cfg).eval()


@pytest.mark.parametrize("kernel", graph_decode.DECODE_ATTENTION)
def test_decode_attention_equals_transformers_sdpa_for_one_query_token(kernel):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model = grouped_model()
    module = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(1)
    query = torch.randn(3, 8, 1, 8, generator=g)
    key, value = torch.randn(3, 2, 20, 8, generator=g), torch.randn(3, 2, 20, 8, generator=g)
    mask = torch.zeros(3, 1, 1, 20)
    mask[0, ..., :5] = torch.finfo(mask.dtype).min  # a left-padded row
    mask[:, ..., 15:] = torch.finfo(mask.dtype).min  # cache slots not written yet
    ours, _ = graph_decode._decode_sdpa(module, query, key, value, mask, scaling=module.scaling, kernel=kernel)
    stock, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=module.scaling)
    assert ours.shape == stock.shape == (3, 1, 8, 8)
    torch.testing.assert_close(ours, stock)
    half = [t.bfloat16() for t in (query, key, value, mask)]  # the output keeps the model's dtype
    assert graph_decode._decode_sdpa(module, *half, scaling=module.scaling, kernel=kernel)[0].dtype == torch.bfloat16
    # more than one query token (a prefill) is transformers' own path
    q2 = torch.randn(3, 8, 4, 8, generator=g)
    torch.testing.assert_close(graph_decode._decode_sdpa(module, q2, key, value, None, scaling=module.scaling,
                                                         kernel=kernel)[0],
                               sdpa_attention_forward(module, q2, key, value, None, scaling=module.scaling)[0])


def test_compiled_decode_samples_what_the_eager_loop_samples():
    """compile_decode=True changes the kernels, not the samples: same seed, same tokens, log-probs
    within float tolerance, left padding included; the model's attention setting is restored."""
    model = grouped_model()
    ids = torch.randint(1, 300, (3, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding
    runs = []
    for compiled in (False, True):
        kept = graph_decode.KeptCaches(model, compile_decode=compiled)
        torch.manual_seed(7)
        runs.append(graph_decode.sample(model, kept, {"input_ids": ids, "attention_mask": mask}, max_new_tokens=6,
                                        temperature=0.8))
    (eager_seqs, eager_lps), (compiled_seqs, compiled_lps) = runs
    assert torch.equal(eager_seqs, compiled_seqs) and eager_seqs.shape == (3, 18)
    torch.testing.assert_close(eager_lps, compiled_lps, atol=1e-4, rtol=0)
    assert model.config._attn_implementation == "sdpa"
    seqs, lps = graph_decode.sample(model, kept, {"input_ids": ids, "attention_mask": mask}, max_new_tokens=0)
    assert torch.equal(seqs, ids) and lps.shape == (3, 0)  # nothing asked, nothing generated


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the pinned-memory copy and events need a CUDA device"))])
def test_checking_one_step_ahead_returns_what_checking_every_step_returns(device):
    """check_ahead learns that every row has ended one step late and drops the extra step: the same tokens,
    log-probs and length as waiting at every step, both when the rows end early and at max_new_tokens."""
    model = grouped_model().to(device)
    ids = torch.randint(1, 300, (4, 9), generator=torch.Generator().manual_seed(4)).to(device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    kept = graph_decode.KeptCaches(model)
    for eos_ids, budget in ((range(1, 301, 3), 40), ((), 5)):
        runs = []
        for check_ahead in (False, True):
            torch.manual_seed(5)
            runs.append(graph_decode.sample(model, kept, batch, max_new_tokens=budget, temperature=1.0,
                                            eos_ids=list(eos_ids), pad_id=0, check_ahead=check_ahead))
        (seqs, lps), (ahead_seqs, ahead_lps) = runs
        assert torch.equal(seqs, ahead_seqs) and torch.equal(lps, ahead_lps)
        new = seqs[:, ids.shape[1]:]
        if eos_ids:  # every row ended on an eos, the last of them on the final column
            assert new.shape[1] < budget and bool(torch.isin(new[:, -1], torch.tensor(list(eos_ids), device=device)
                                                             ).any())
        else:
            assert new.shape[1] == budget


@pytest.mark.parametrize("compiled,kernel", [(False, "sdpa"), (True, "sdpa"), (False, "flex"), (False, "triton"),
                                             (False, "triton:prompt")])
def test_rows_sharing_a_prompt_are_prefilled_once_and_sample_what_repeated_prompts_sample(compiled, kernel,
                                                                                          monkeypatch):
    """rows=...: a prompt sampled several times (a GRPO group) is prefilled once and its keys/values
    kept once (cascade attention over the prompt and each row's new tokens); the samples equal those
    of the same prompts repeated in the batch, for groups of unequal size and in any row order. With
    kernel="flex" both the cascade's parts and the repeated prompts' attention are FlexAttention (eager: on
    a CPU, torch.compile cannot build FlexAttention's log-sum-exp; the GPU benchmark runs it compiled).
    kernel="triton": agents.lmm.cascade_kernel (on a CPU through triton's interpreter; skipped without triton),
    "triton:prompt" in its prompt-major layout."""
    kernel, _, layout = kernel.partition(":")
    if layout:
        from agents.lmm import cascade_kernel

        monkeypatch.setitem(cascade_kernel.TUNING, "layout", layout)
    device = triton_device() if kernel == "triton" else "cpu"
    model = grouped_model(heads=4 if kernel == "triton" else 8).to(device)
    ids = torch.randint(1, 300, (3, 10), generator=torch.Generator().manual_seed(3)).to(device)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    rows = torch.tensor([0, 0, 1, 0, 1, 1, 1, 2], device=device)
    prefills = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: prefills.append(kw["input_ids"].shape) if kw["input_ids"].shape[1] > 1 else None,
        with_kwargs=True)
    runs = []
    for shared in (False, True):
        kept = graph_decode.KeptCaches(model, compile_decode=compiled, decode_attention=kernel)
        batch = ({"input_ids": ids, "attention_mask": mask} if shared
                 else {"input_ids": ids[rows], "attention_mask": mask[rows]})
        for _ in range(2):  # the second call reuses the kept entry, whose buffers hold the first call's
            torch.manual_seed(11)
            runs.append(graph_decode.sample(model, kept, batch, max_new_tokens=7, temperature=0.9,
                                            rows=rows if shared else None))
    hook.remove()
    assert prefills == [(8, 10), (8, 10), (3, 10), (3, 10)]  # one prefill row per distinct prompt
    assert list(kept.entries) == [(8, 256, None, (3, 4, 256))]  # new tokens only; prompts of groups up to 4
    (seqs, lps), again, (shared_seqs, shared_lps), shared_again = runs
    assert seqs.shape == (8, 17) and torch.equal(seqs[:, :10], ids[rows])
    assert len({tuple(r) for r in seqs[rows == 1, 10:].tolist()}) > 1  # rows of one prompt sample differently
    for s, lp in (again, (shared_seqs, shared_lps), shared_again):
        assert torch.equal(s, seqs)
        torch.testing.assert_close(lp, lps, atol=1e-5, rtol=0)
    assert model.config._attn_implementation == "sdpa"


def triton_device() -> str:
    """Where agents.lmm.cascade_kernel runs in these tests: the GPU, or the CPU through triton's
    interpreter (tests/conftest.py sets TRITON_INTERPRET=1 where there is no GPU); skipped where
    triton is not installed, unless PARAVT_REQUIRE_TRITON is set (.ci/run: CI installs triton, and a
    kernel test that did not run must fail it, not pass)."""
    if os.environ.get("PARAVT_REQUIRE_TRITON"):
        import triton  # noqa: F401
    else:
        pytest.importorskip("triton")
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("layout", ["row", "prompt"])
@pytest.mark.parametrize("splits,block_keys", [(1, None), (2, None), (5, None), (3, 16), (1, 128)])
def test_cascade_kernel_equals_attention_over_the_prompt_and_the_written_new_tokens(splits, block_keys, layout):
    """The triton kernel: each row attends to its prompt's keys under the prompt mask (left padding, unused
    slots) and to its own new tokens up to own_length, whatever the number of key-block splits and the
    block size (128: one block holds a whole part, partly masked), and in either layout ("prompt": a
    prompt's rows read its keys together; groups of 1-3 rows, short ones padded with a repeat)."""
    device = triton_device()
    from agents.lmm import cascade_kernel

    g = torch.Generator().manual_seed(4)
    prompts, group, heads, groups, dim, prompt_slots, own_slots, written = 3, 2, 2, 3, 16, 80, 70, 37
    rows = prompts * group
    query = torch.randn(rows, heads, groups, dim, generator=g)
    pk, pv = (torch.randn(prompts, heads, prompt_slots, dim, generator=g) for _ in range(2))
    mask = torch.zeros(prompts, prompt_slots)
    mask[1, :7] = torch.finfo(mask.dtype).min  # a left-padded prompt
    mask[:, 75:] = torch.finfo(mask.dtype).min  # slots past the prompts
    ok, ov = (torch.randn(rows, heads, own_slots, dim, generator=g) for _ in range(2))
    ok[:, :, written:] = 1e4  # unwritten slots must not be read as keys
    prompt_of_row = torch.tensor([2, 0, 1, 0, 2, 2])
    rows_of = [[r for r, p in enumerate(prompt_of_row.tolist()) if p == prompt] for prompt in range(prompts)]
    members = torch.tensor([own + [own[-1]] * (3 - len(own)) for own in rows_of])  # as graph_decode lays them out
    slot = torch.tensor([p * 3 + rows_of[p].index(r) for r, p in enumerate(prompt_of_row.tolist())])
    on = [t.to(device) for t in (query, pk, pv, mask, prompt_of_row, ok, ov, torch.tensor([written], dtype=torch.int32))]
    out = cascade_kernel.cascade_decode(*on, dim ** -0.5, splits=splits, block_keys=block_keys, layout=layout,
                                        members=members.to(device), slot=slot.to(device)).cpu()
    for r, p in enumerate(prompt_of_row.tolist()):
        keys = torch.cat([pk[p], ok[r, :, :written]], dim=1)
        values = torch.cat([pv[p], ov[r, :, :written]], dim=1)
        bias = torch.cat([mask[p], torch.zeros(written)])
        expected = torch.softmax(query[r] @ keys.transpose(-1, -2) * dim ** -0.5 + bias, dim=-1) @ values
        torch.testing.assert_close(out[r], expected, atol=1e-5, rtol=1e-5)


def test_triton_decode_attention_says_why_it_cannot_run(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="cannot run here"):  # a CPU model (and maybe no triton at all)
        graph_decode.KeptCaches(grouped_model(heads=4), decode_attention="triton")


def test_cascade_kernel_benchmark_checks_every_setting_against_the_batched_products(tmp_path):
    """benchmarks/speed_cascade_kernel.py --tiny (the CPU through triton's interpreter): each kernel setting
    is timed and compared with graph_decode's cascade of batched products; JSON and table written."""
    import importlib.util
    import json
    from pathlib import Path

    triton_device()
    spec = importlib.util.spec_from_file_location(
        "speed_cascade_kernel", Path(__file__).resolve().parents[1] / "benchmarks" / "speed_cascade_kernel.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.main(["--tiny", "--out", str(tmp_path / "k")])
    assert len(res["kernel_all"]) == 4 and all("error" not in r for r in res["kernel_all"])  # 2 splits x 2 layouts
    assert all(r["max_abs_diff"] < 1e-5 and r["microseconds"] > 0 for r in res["kernel_all"])
    assert json.loads((tmp_path / "k.json").read_text())["shape"]["written"] == 12
    assert "| triton kernel | splits 2, block_keys 16, num_warps 4, num_stages 1, layout prompt |" in (
        tmp_path / "k.md").read_text()


@pytest.mark.parametrize("device,compiled,kinds", [
    ("cpu", False, ("attention",)), ("cpu", False, ("mlp",)), ("cpu", True, ("attention", "mlp")),
    pytest.param("cuda", True, ("attention", "mlp"), marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device (run on the GPU machine)"))])
def test_fused_projections_sample_what_separate_products_sample_and_follow_the_weights(device, compiled, kinds,
                                                                                       monkeypatch):
    """fuse_projections (one query/key/value product, one gate/up product per layer in decode steps) samples
    the tokens and log-probs of the separate products, for distinct prompts and for rows sharing prompts; after the
    weights change in place (a trainer's step) the next call follows them (on a GPU: the recorded CUDA
    graphs read the refreshed copy); afterwards the layers run their own forward again."""
    fused_calls = []
    if not compiled:  # (traced, the spy's growing list would recompile every step; see the next test)
        for kind in kinds:
            forward = graph_decode._FUSED_FORWARDS[kind]
            monkeypatch.setitem(graph_decode._FUSED_FORWARDS, kind,
                                partial(lambda f, *a, **kw: fused_calls.append(f) or f(*a, **kw), forward))
    model = grouped_model().to(device)
    ids = torch.randint(1, 300, (3, 9), generator=torch.Generator().manual_seed(6)).to(device)
    mask = torch.ones_like(ids)
    mask[2, :3] = 0  # left padding
    rows = torch.tensor([0, 1, 1, 2, 0], device=device)
    tolerance = 1e-5 if device == "cpu" else 1e-4  # a GPU's products of other widths round differently
    kept = {fused: graph_decode.KeptCaches(model, compile_decode=compiled, fuse_projections=kinds if fused else ())
            for fused in (False, True)}
    fused_calls.clear()  # (building the fused kept caches checked each layer once)

    def run(fused, shared):
        torch.manual_seed(12)
        return graph_decode.sample(model, kept[fused], {"input_ids": ids, "attention_mask": mask}, max_new_tokens=6,
                                   temperature=0.9, rows=rows if shared else None)

    for shared in (False, True):
        (seqs, lps), (fused_seqs, fused_lps) = run(False, shared), run(True, shared)
        assert torch.equal(seqs, fused_seqs)
        torch.testing.assert_close(fused_lps, lps, atol=tolerance, rtol=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(device))
    (new_seqs, new_lps), (fused_seqs, fused_lps) = run(False, True), run(True, True)
    assert not torch.equal(new_lps, lps)  # the update changed what is sampled...
    assert torch.equal(new_seqs, fused_seqs)  # ...and the fused copy followed it
    torch.testing.assert_close(fused_lps, new_lps, atol=tolerance, rtol=0)
    assert all("forward" not in layer.self_attn.__dict__ for layer in model.model.layers)
    assert compiled or len(fused_calls) >= len(kinds) * len(model.model.layers)  # the decode steps ran them


def test_compiled_fused_decode_compiles_once_and_reads_the_kept_copy(monkeypatch):
    """Compiled, the fused forwards are traced once, not at every decode step (their objects live as long as
    the kept caches: a new one per step failed torch.compile's guards and recompiled every step), and the
    compiled step reads the kept weight copy (spoiling the copy changes what is sampled)."""
    from torch._dynamo.utils import counters

    model = grouped_model()
    ids = torch.randint(1, 300, (2, 7), generator=torch.Generator().manual_seed(8))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    kept = graph_decode.KeptCaches(model, compile_decode=True, fuse_projections=("attention", "mlp"))
    graphs_before = counters["stats"]["unique_graphs"]
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        runs.append(graph_decode.sample(model, kept, batch, max_new_tokens=8, temperature=0.9))
    assert counters["stats"]["unique_graphs"] - graphs_before <= 3  # 7 decode steps a call, 2 calls
    assert torch.equal(runs[0][0], runs[1][0])
    refresh = graph_decode.FusedProjections.refresh
    monkeypatch.setattr(graph_decode.FusedProjections, "refresh",
                        lambda self: refresh(self) or [part[3].mul_(0.5) for part in self.parts])
    torch.manual_seed(3)
    spoiled = graph_decode.sample(model, kept, batch, max_new_tokens=8, temperature=0.9)
    assert (spoiled[1] - runs[0][1]).abs().max() > 1e-2


def test_fused_projections_copy_the_weights_again_only_after_they_change():
    """refresh (before every sample call) skips the copy while no parameter changed, and copies after an
    optimizer step or a load_state_dict."""
    model = grouped_model()
    fused = graph_decode.FusedProjections(model, ("attention", "mlp"))

    def copies_match():
        return all(torch.equal(weight, torch.cat([lin.weight for lin in linears]))
                   for _, linears, _, weight, _ in fused.parts)

    def spoil():
        for part in fused.parts:
            part[3].mul_(0.5)

    spoil()
    fused.refresh()
    assert not copies_match()  # nothing changed: no copy made
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randint(1, 300, (1, 5))).logits.square().mean().backward()
    optimizer.step()
    fused.refresh()
    assert copies_match()
    spoil()
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()})
    fused.refresh()
    assert copies_match()


@pytest.mark.parametrize("kind", graph_decode.FUSABLE)
def test_fused_projections_refuse_a_forward_they_do_not_reproduce(kind):
    model = grouped_model()
    layer = model.model.layers[1]
    module = layer.self_attn if kind == "attention" else layer.mlp
    own = module.forward

    def doubled(*args, **kwargs):  # not what the fused forward computes
        out = own(*args, **kwargs)
        return (2 * out[0], None) if isinstance(out, tuple) else 2 * out

    module.forward = doubled
    refused = rf"fuse_projections: {type(module).__name__}.* {kind} forward .*outputs differ by 5.0e-01 relative"
    with pytest.raises(ValueError, match=refused):
        graph_decode.KeptCaches(model, fuse_projections=(kind,))
    with pytest.raises(ValueError, match="name one or more of"):
        graph_decode.KeptCaches(model, fuse_projections=("attention", "lm_head"))


class OlderOutput(dict):
    """An output as transformers before 5.24 returns it: a mapping whose keys are also attributes, the cache under
    past_key_values (a plain class: transformers' own output classes translate that name in some versions)."""
    __getattr__ = dict.__getitem__


class OlderCacheNames(Qwen2ForCausalLM):
    """The model as transformers before 5.24 shows it: the KV cache is the forward's `past_key_values` argument and
    output field. Like those versions, it passes a keyword it does not know (`cache`) on to the layers, which
    ignore it."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                logits_to_keep=0, **kwargs):
        kwargs.pop("cache", None)
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs,
                              **{graph_decode.cache_argument(Qwen2ForCausalLM): past_key_values})
        return OlderOutput(logits=out.logits, past_key_values=graph_decode.returned_cache(out))


@pytest.mark.parametrize("shared", [False, True])
def test_a_model_that_names_its_cache_past_key_values_samples_the_same(shared):
    """transformers renamed the forward's KV cache argument from past_key_values to cache (5.24). The sampler passes
    it under the name the model takes: a cache passed under the other name vanished, and the decode steps attended to
    their own token alone (on a GPU with transformers 5.17: a mask as wide as the cache against one key)."""
    model = grouped_model()
    older = OlderCacheNames(model.config).eval()
    older.load_state_dict(model.state_dict())
    assert graph_decode.cache_argument(older) == "past_key_values"
    ids = torch.randint(1, 300, (3, 10), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    rows = torch.tensor([0, 0, 1, 2]) if shared else None
    runs = []
    for m in (model, older):
        torch.manual_seed(11)
        runs.append(graph_decode.sample(m, graph_decode.KeptCaches(m), {"input_ids": ids, "attention_mask": mask},
                                        max_new_tokens=6, temperature=0.9, rows=rows))
    (seqs, lps), (older_seqs, older_lps) = runs
    assert torch.equal(seqs, older_seqs)
    torch.testing.assert_close(older_lps, lps, atol=1e-5, rtol=0)


def test_autocast_sampling_on_an_older_transformers_says_why_it_cannot(monkeypatch):
    """Under autocast RoPE leaves the cached keys float32 while the values are bfloat16. transformers < 5.24 allocates
    a StaticCache layer's values in its keys' dtype, and the first write failed in index_copy_ (the GPU machine's 5.17).
    The sampler now names the version instead; on this version it samples."""
    import transformers
    model = grouped_model()
    batch = {"input_ids": torch.randint(1, 300, (2, 6), generator=torch.Generator().manual_seed(1)),
             "attention_mask": torch.ones(2, 6, dtype=torch.long)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        if graph_decode.transformers_release() >= (5, 24):  # the release setup.py asks for
            seqs, _ = graph_decode.sample(model, graph_decode.KeptCaches(model), batch, max_new_tokens=3,
                                          do_sample=False)
            assert seqs.shape == (2, 9)
        monkeypatch.setattr(transformers, "__version__", "5.17.0")
        with pytest.raises(RuntimeError, match="transformers >= 5.24"):
            graph_decode.sample(model, graph_decode.KeptCaches(model), batch, max_new_tokens=3, do_sample=False)
    # without autocast the older release is fine: no check
    seqs, _ = graph_decode.sample(model, graph_decode.KeptCaches(model), batch, max_new_tokens=3, do_sample=False)
    assert seqs.shape == (2, 9)
