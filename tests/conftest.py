"""Fixtures shared by the trainer tests: a freshly built tiny checkpoint (random weights, seed 0) and its policy.
A test module that needs a different model defines its own fixture of the same name."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # triton kernels (agents.lmm.cascade_kernel) run on a CPU only interpreted;
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton decorates them, so before any import


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from agents.lmm import build_tiny_model, build_tokenizer, save_checkpoint

    tok = build_tokenizer()
    path = tmp_path_factory.mktemp("tiny") / "model"
    save_checkpoint(str(path), build_tiny_model(tok, seed=0), tok)
    return str(path)


@pytest.fixture(scope="module")
def policy(tiny_dir):
    from trainers import core

    torch.set_num_threads(2)
    return core.load_policy(tiny_dir, torch.device("cpu"))
