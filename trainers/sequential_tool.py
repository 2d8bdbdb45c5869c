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

if __name__ == "__main__" and not __package__:  # python trainers/sequential_tool.py: the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainers import para_grpo  # noqa: E402
from trainers.core import main_for  # noqa: E402


@dataclass
class Args(para_grpo.Args):
    """PARA-GRPO's settings with sequential dispatch: one crop per turn."""

    exp_name: str = "sequential_tool"
    dispatch: str = "sequential"
    max_calls_per_turn: int = 1


def main(argv=None):
    return main_for(Args, argv, __doc__)


if __name__ == "__main__":
    main()
