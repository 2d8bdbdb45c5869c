"""Fast tests of the SFT pipeline: corpora, loss mask, a tiny training run, checkpoints."""

import numpy as np
import pytest
import torch

from agents.lmm.corpus import (THINK_DIRECT, THINK_TOOL, WorldConfig, build_corpus, caption_objects, encode_sample,
                               render_turn)
from agents.lmm.policy import TransformersPolicy
from agents.lmm.tiny_qwen import build_image_processor, build_tiny_model, load_checkpoint, save_checkpoint
from agents.lmm.tokenizer import build_tokenizer
from paravt_env.parsing import parse_turn

def _sft():
    from agents.lmm.default import _sft_module
    return _sft_module()


WC = WorldConfig(frame_size=(28, 28), crop_max_frames=4)


@pytest.fixture(scope="module")
def corpora():
    native = build_corpus(3, 3, 4, "native", seed=0, wc=WC, budgets=(4,), oracle_fraction=0.5)
    paravt = build_corpus(0, 3, 4, "paravt", seed=1, wc=WC, budgets=(4,), index_range=(3000, 6000), oracle_fraction=0.5)
    return native, paravt


@pytest.fixture(scope="module")
def policy(corpora):
    texts = [m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
             for s in corpora[0] + corpora[1] for m in s.messages]
    tok = build_tokenizer(texts, vocab_size=600)
    return TransformersPolicy(build_tiny_model(tok, seed=0), tok, build_image_processor())


def test_native_corpus_uses_tool_code(corpora):
    native, _ = corpora
    tools = [s for s in native if s.kind == "tool"]
    assert tools and all(s.dialect == "native" for s in tools)
    for s in tools:
        first = s.assistant_texts[0]
        assert "<tool_code>crop_video(start_time=" in first and "<tool_call>" not in first
        assert all(c.parseable and c.syntax == "python" for c in parse_turn(first).tool_calls)
        assert "<answer>" not in s.assistant_texts[-1] and "Answer: " in s.assistant_texts[-1]
        # tool responses come from the env itself
        responses = [m for m in s.messages if m["role"] == "user"][1:]
        assert responses and all("<tool_response>" in p["text"] for m in responses for p in m["content"])
    caps = [s for s in native if s.kind == "caption"]
    assert caps and all(caption_objects(s.assistant_texts[0]) is not None for s in caps)
    assert all(s.assistant_texts[0].startswith("Scenes: ") for s in caps)


def test_cold_start_corpus_is_paravt(corpora):
    _, paravt = corpora
    for s in paravt:
        for text in s.assistant_texts:
            p = parse_turn(text)
            assert p.think_closed and "<tool_code>" not in text
            assert p.answer is not None or all(c.parseable and c.syntax == "json" for c in p.tool_calls)
        assert "<answer>" in s.assistant_texts[-1]
        assert s.meta["format"] > 0.5


def test_render_turn_dialects():
    t = render_turn("native", "look", windows=[(1.0, 5.0)], rng=np.random.default_rng(0), close_think_p=0.0)
    assert "</think>" not in t and parse_turn(t).tool_calls[0].arguments == {"start_time": 1.0, "end_time": 5.0}
    t = render_turn("paravt", "look at it", answer="B")
    assert parse_turn(t).answer == "B"
    t = render_turn("paravt", "look", windows=[(3.0, 9.0)])
    assert '"start_time": 3, "end_time": 9' in t and parse_turn(t).tool_calls[0].syntax == "json"


def test_round_windows_whole_seconds():
    from agents.lmm.corpus import round_windows
    assert round_windows([(12.3, 20.6), (0.0, 4.0)]) == [(12.0, 21.0), (0.0, 4.0)]


def test_loss_mask_covers_assistant_tokens_only(corpora, policy):
    sample = next(s for s in corpora[1] if s.kind == "tool")
    conv = encode_sample(policy, sample.messages)
    tok = policy.tokenizer
    masked = tok.decode([t for t, m in zip(conv.token_ids, conv.generated_mask) if m])
    expected = "".join(t + "<|im_end|>" for t in sample.assistant_texts)
    assert masked == expected
    unmasked = tok.decode([t for t, m in zip(conv.token_ids, conv.generated_mask) if not m])
    assert "<tool_response>" in unmasked and "<tool_response>" not in masked
    # same tokens as rendering the whole chat with the template (which adds a final "\n")
    full = policy.start(sample.messages, add_generation_prompt=False)
    assert conv.token_ids == full.token_ids[:len(conv.token_ids)] and len(full) == len(conv) + 1


def test_tiny_sft_lowers_loss_and_saves(corpora, policy, tmp_path):
    sft = _sft()
    torch.manual_seed(0)
    convs = [encode_sample(policy, s.messages) for s in corpora[1][:4]]
    opt = torch.optim.AdamW(policy.model.parameters(), lr=3e-3)
    before, _ = sft.nll_loss(policy, convs)
    for _ in range(6):
        loss, n = sft.nll_loss(policy, convs)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after, _ = sft.nll_loss(policy, convs)
    assert n > 0 and after.item() < before.item() - 0.1
    save_checkpoint(str(tmp_path / "ck"), policy.model, policy.tokenizer, policy.image_processor)
    model, tok, proc = load_checkpoint(str(tmp_path / "ck"))
    p2 = TransformersPolicy(model, tok, proc)
    with torch.no_grad():
        again, _ = sft.nll_loss(p2, [encode_sample(p2, s.messages) for s in corpora[1][:4]])
    assert abs(again.item() - after.item()) < 1e-3


def test_args_cli_documents_every_knob(capsys):
    import dataclasses
    sft = _sft()
    a = sft.parse_args(["--tool-prior", "weak", "--stage1-steps", "3", "--progress", "false"])
    assert a.tool_prior == "weak" and a.stage1_steps == 3 and a.progress is False
    assert all(f.metadata.get("help") for f in dataclasses.fields(sft.Args))


@pytest.mark.slow
def test_default_checkpoint_builds(tmp_path):
    from agents.lmm.default import default_checkpoint
    path = default_checkpoint("weak", cache_dir=str(tmp_path), progress=False, stage1_steps=2, stage2_steps=2,
                              stage1_caption=8, stage1_direct=8, stage2_tool=4, stage2_direct=4, stage2_caption=2)
    TransformersPolicy(path)


def test_corpus_teaches_when_tools_are_needed(corpora):
    """Direct answers only where the overview shows the evidence, tool traces only where it does
    not, and every kept final answer is correct (keep_wrong=0)."""
    for s in corpora[0] + corpora[1]:
        if s.kind == "caption":
            continue
        assert s.meta["correct"] or s.meta["accuracy"] >= 0.5
        assert s.meta["visible"] == (s.kind == "direct")
        first = s.assistant_texts[0]
        assert (THINK_DIRECT in first) == (s.kind == "direct") and (THINK_TOOL in first) == (s.kind == "tool")
        thinks = [t.split("<think>\n", 1)[1].split("\n", 1)[0] for t in s.assistant_texts]
        assert not any(ch.isdigit() for t in thinks for ch in t)  # fixed, number-free think lines


def test_evidence_visible_matches_tool_necessity_rule():
    from agents.lmm.corpus import evidence_visible
    ev = [(10.0, 12.0), (50.0, 51.0)]
    assert evidence_visible([11.0, 30.0], ev, "needle") and not evidence_visible([11.0, 30.0], ev, "counting")
    assert evidence_visible([11.0, 50.5], ev, "temporal_order") and not evidence_visible([12.0], ev, "needle")
    assert not evidence_visible([1.0], [], "global")


def test_gpu_preset_and_explicit_flags_win():
    sft = _sft()
    a = sft.parse_args(["--preset", "gpu", "--stage1-steps", "7"])
    assert a.stage1_steps == 7 and a.stage2_steps == sft.PRESETS["gpu"]["stage2_steps"] and a.batch_size == 32
    assert sft.parse_args([]).stage1_steps == sft.Args().stage1_steps


def test_default_checkpoint_prefers_shipped(tmp_path, monkeypatch):
    import agents.lmm.default as d
    ck = tmp_path / "tiny-strong" / "cold_start"
    ck.mkdir(parents=True)
    (ck / "config.json").write_text("{}")
    monkeypatch.setattr(d, "SHIPPED_ROOT", tmp_path)
    monkeypatch.delenv("PARAVT_NO_SHIPPED", raising=False)
    assert d.default_checkpoint("strong", cache_dir=str(tmp_path / "cache")) == ck
