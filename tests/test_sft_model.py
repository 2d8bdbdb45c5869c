"""trainers/sft.py --model: the cold start of a Qwen-VL checkpoint folder (trainers/supervised/real_model.py), at
test size: a small Qwen2.5-VL of the real structure saved with a tokenizer."""

import json

import numpy as np
import pytest
import torch

from agents.lmm.qwen_shapes import build_checkpoint
from trainers import sft

SMALL = ["--frame-size", "56", "--crop-max-frames", "4", "--budgets", "4", "--stage2-tool", "4", "--stage2-direct", "2",
         "--stage2-frame", "2", "--stage2-caption", "2", "--stage1-tool", "2", "--batch-size", "2", "--threads", "2",
         "--no-progress"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny Qwen2.5-VL folder and its cold start (3 steps at a test-size learning rate)."""
    tmp = tmp_path_factory.mktemp("sft_model")
    folder = build_checkpoint("tiny-qwen2.5-vl", tmp / "model")
    args = sft.parse_args(["--model", str(folder), "--out", str(tmp / "out"), "--runs-dir", str(tmp / "tb"),
                           "--corpus-dir", str(tmp / "corpus"), "--stage2-steps", "3", "--stage2-lr", "1e-3", *SMALL])
    return args, sft.main(args), tmp


def test_a_model_folder_gets_the_cold_start_settings_unless_given(built, capsys):
    args, _, tmp = built
    assert (args.freeze_vision, args.gradient_checkpointing, args.stage1_frame, args.stage1_caption) == (True, True, 0, 0)
    assert (args.frame_size, args.budgets, args.stage2_lr) == (56, "4", 1e-3)  # given on the command line
    again = sft.parse_args(["--model", args.model, "--out", str(tmp / "other")])
    assert (again.frame_size, again.crop_max_frames, again.budgets, again.stage2_lr) == (448, 16, "4,8,16,32,64", 1e-5)
    said = capsys.readouterr().err
    assert "--frame-size 448" in said and "--freeze-vision" in said and "--gradient-checkpointing" in said
    with pytest.raises(SystemExit, match="one prior"):
        sft.main(sft.parse_args(["--model", args.model, "--out", str(tmp / "both"), "--tool-prior", "both"]))


def test_the_cold_start_trains_assistant_tokens_only_and_saves_a_loadable_folder(built):
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from trainers.supervised.data import Records

    args, path, tmp = built
    record = json.loads((tmp / "out" / "sft_args.json").read_text())
    assert record["stage2_steps_done"] == 3 and record["stage2_tokens"] > 0
    assert all(np.isfinite(loss) for _, loss in record["stage2_loss"])
    assert set(record["corpus"]) == {"s1_native", "s2_tool", "s2_direct", "s2_frame", "s2_caption"}
    tok = AutoTokenizer.from_pretrained(str(path))
    start, end = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    header = tok.encode("assistant\n", add_special_tokens=False)
    for part in record["corpus"]:
        recs = Records.load(tmp / "corpus" / part)
        for i in range(len(recs)):
            ids = recs.ids[recs.tok_off[i]:recs.tok_off[i + 1]].tolist()
            mask = recs.mask[recs.tok_off[i]:recs.tok_off[i + 1]]
            assistant = np.zeros(len(ids), bool)  # an assistant turn's content and the <|im_end|> closing it
            for j in (j for j, t in enumerate(ids) if t == start and ids[j + 1:j + 1 + len(header)] == header):
                k = j + 1 + len(header)
                assistant[k:ids.index(end, k) + 1] = True
            assert mask.any() and not (mask & ~assistant).any(), part
    model = AutoModelForImageTextToText.from_pretrained(str(path))
    prompt = tok.apply_chat_template([{"role": "user", "content": "Describe the video."}], tokenize=False,
                                     add_generation_prompt=True)
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids.shape[1]


def test_the_cold_start_loss_falls_on_a_fixed_batch(built):
    from trainers.supervised.data import Records
    from trainers.supervised.real_model import trainee

    args, _, tmp = built
    tr = trainee(args)
    assert not any(p.requires_grad for n, p in tr.model.named_parameters() if ".visual." in f".{n}")
    assert tr.model.model.language_model.gradient_checkpointing
    recs = Records.load(tmp / "corpus" / "s2_tool")
    batch = tr.collate(recs, np.arange(2))
    assert "frames" in batch
    opt = torch.optim.AdamW([p for p in tr.model.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(6):
        loss, n = tr.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert n > 0 and all(np.isfinite(losses)) and losses[-1] < 0.9 * losses[0], losses


def test_grammar_tags_grow_an_unpadded_vocabulary_and_never_shrink_a_padded_one():
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from agents.lmm.tiny_qwen import build_tiny_model
    from agents.lmm.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, STRUCTURAL_TAGS, add_structural_tokens

    def stock():  # chat and vision tokens only, as a stock checkpoint's tokenizer has no <answer>
        t = Tokenizer(models.BPE())
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        t.train_from_iterator(["a video of a red star and a blue circle"] * 4,
                              trainers.BpeTrainer(vocab_size=300, special_tokens=list(SPECIAL_TOKENS),
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        t.add_special_tokens([AddedToken(x, special=True, normalized=False) for x in SPECIAL_TOKENS])
        tok = PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        tok.chat_template = CHAT_TEMPLATE
        return tok

    for pad in (0, 64):
        tok = stock()
        model = build_tiny_model(tok)
        model.resize_token_embeddings(len(tok) + pad)
        added = add_structural_tokens(tok, model)
        assert added == list(STRUCTURAL_TAGS) and len(tok.encode("<answer>", add_special_tokens=False)) == 1
        rows = model.get_input_embeddings().num_embeddings
        assert rows == (len(tok) if not pad else len(tok) - len(added) + pad)
