"""The console scripts that ``pip install -e .`` puts on the PATH (setup.py's entry points), one per command line:

    paravt-train              PARA-GRPO                           python trainers/para_grpo.py
    paravt-train-grpo         vanilla GRPO                        python trainers/grpo.py
    paravt-train-sequential   the sequential-tool baseline        python trainers/sequential_tool.py
    paravt-sweep              the ablation sweep                  python trainers/sweep.py
    paravt-eval               one evaluation protocol, every row  python trainers/evaluation.py
    paravt-view               pages of a run's logged rollouts    python -m trainers.view

Each takes its script's flags (``paravt-train --help``, ``paravt-train --anchor-mode logprob``). A script's
``main`` returns what a library caller wants (a history, a report); a console script's return value would
become its exit status, so these run ``main`` and return None.
"""

from __future__ import annotations

import importlib
from typing import Sequence

# command -> the module whose main(argv) it runs
COMMANDS = {
    "paravt-train": "trainers.para_grpo",
    "paravt-train-grpo": "trainers.grpo",
    "paravt-train-sequential": "trainers.sequential_tool",
    "paravt-sweep": "trainers.sweep",
    "paravt-eval": "trainers.evaluation",
    "paravt-view": "trainers.view",
}


def run(command: str, argv: Sequence[str] | None = None) -> None:
    """The `command`'s main on `argv` (None: the command line)."""
    importlib.import_module(COMMANDS[command]).main(None if argv is None else list(argv))


def _entry(command: str, what: str):
    """The console-script function of `command`: run(command, argv)."""

    def entry(argv: Sequence[str] | None = None) -> None:
        run(command, argv)

    entry.__doc__ = f"{command}: {what} ({COMMANDS[command]})."
    return entry


# setup.py's entry points
train = _entry("paravt-train", "PARA-GRPO")
train_grpo = _entry("paravt-train-grpo", "vanilla GRPO")
train_sequential = _entry("paravt-train-sequential", "the sequential-tool baseline")
sweep = _entry("paravt-sweep", "the ablation sweep")
evaluate = _entry("paravt-eval", "the evaluation protocol")
view = _entry("paravt-view", "the run viewer")
