"""A reward term for `--reward-fn`: take back what the released scorer pays for calls when the environment ran none.

The scorer credits a call that parses (R_tool 0.1, plus 0.5 when the answer is right, and the think-before-tool
format term), whether or not it ran. A 200-step run from v15 learned to write calls the environment cannot run
(README.md here). With this term an episode without an executed call keeps none of that credit:

    python trainers/para_grpo.py --reward-fn benchmarks/results/rl_dose/executed_only.py:unexecuted_call_credit
"""


def unexecuted_call_credit(trajectory: str, info: dict) -> float:
    if info["num_tool_calls"] > 0:
        return 0.0
    c = info["reward_components"]
    return -(c.get("tool", 0.0) + c.get("format/think_before_tool", 0.0))
