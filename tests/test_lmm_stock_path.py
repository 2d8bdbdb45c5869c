"""Every test of test_lmm.py once more with TransformersPolicy(fast=False): the stock Hugging Face
model code and image processor (test_lmm.py itself runs the default fast path)."""

import pytest

from agents.lmm.policy import TransformersPolicy
from test_lmm import *  # noqa: F401,F403  (collected again here, under the stock path)


@pytest.fixture(autouse=True, scope="module")
def stock_path():
    # Module scope and autouse: in force before test_lmm's module-scoped `policy` fixture is built.
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(TransformersPolicy.__init__.__kwdefaults__, "fast", False)
        yield


def test_stock_path_in_force(policy):
    assert policy.fast is False and "get_rope_index" not in policy.model.model.__dict__
