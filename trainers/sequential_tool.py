"""Sequential-tool baseline (LongVT style): PARA-GRPO's reward and knobs, one crop per turn.

    python trainers/sequential_tool.py                 # default run: tiny strong-prior model, CPU
    python trainers/sequential_tool.py --max-turns 4
    torchrun --nproc_per_node=2 trainers/sequential_tool.py

--dispatch sequential: the environment runs one crop_video call per turn (extra calls are
answered with an in-band error), so evidence is gathered over turns and the context grows
each turn. Everything else as trainers/para_grpo.py (trainers/core.py).
"""

import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainers.core import GRPOArgs, main_for  # noqa: E402


@dataclass
class Args(GRPOArgs):
    exp_name: str = "sequential_tool"
    dispatch: str = "sequential"
    max_calls_per_turn: int = 1
    think_prefix: bool = True
    answer_suffix: bool = True
    anchor_lambda: float = 0.5
    anchor_mode: str = "bonus"
    penalty_gamma: float = 0.3
    tool_reward: bool = True
    nframes_gating: bool = True


def main(argv=None):
    return main_for(Args, argv, __doc__)


if __name__ == "__main__":
    main()
