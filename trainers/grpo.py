"""Vanilla GRPO on ParaVT-LongVideo-v0: every PARA-GRPO mechanism off (the paper's "+ SFT + GRPO" row).

    python trainers/grpo.py                            # default run: tiny strong-prior model, CPU
    python trainers/grpo.py --frame-budget 16 --model path/to/checkpoint
    torchrun --nproc_per_node=2 trainers/grpo.py

No think prefix, default format weights, no anchor bonus or penalty, a fixed frame budget
K = 64 (the Tool Necessity Gap setting). R_tool stays on, as in the released code, which adds it
in every configuration. Same schedule and machinery as
trainers/para_grpo.py (trainers/core.py); only the defaults differ.
"""

import os
import sys
from dataclasses import dataclass

if __name__ == "__main__" and not __package__:  # python trainers/grpo.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainers.config import GRPOArgs  # noqa: E402
from trainers.core import main_for  # noqa: E402


@dataclass
class Args(GRPOArgs):
    exp_name: str = "grpo"
    think_prefix: bool = False
    answer_suffix: bool = False
    anchor_lambda: float = 0.0
    penalty_gamma: float = 0.0
    nframes_gating: bool = False
    frame_budget: int = 64


def main(argv=None):
    return main_for(Args, argv, __doc__)


if __name__ == "__main__":
    main()
