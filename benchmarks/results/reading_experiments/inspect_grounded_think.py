"""What the --grounded-think continuation (r2) thinks and answers after the right calls with truthful
captions: 40 validation episodes at K = 4 (needle, needle_attribute); prints a few and the counts.
Kept as the record of README's "copied the right one 5 times in 40" (output: inspect_grounded_think.txt).
Run from the repository root with the r2 build at runs/reading_exp/r2 (r2_sft_args.json has its flags)."""
from agents.lmm.policy import TransformersPolicy
from agents.lmm.evaluate_lmm import world_config_of
from agents.lmm.perception import oracle_first_turn, forced_answers, suppressed, TOOL_TAGS, VISION_TOKENS
ck = "runs/reading_exp/r2/cold_start"
pol = TransformersPolicy(ck); wc = world_config_of(ck)
env = wc.env("validation", nframes_gating=True, gating_budgets=(4,), subagent="oracle")
ok_copy = ok_ans = n = 0
for i in list(range(0, 120, 6)) + list(range(1, 120, 6)):
    obs, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": 4})
    t = oracle_first_turn(env, obs, info)
    obs, r, term, trunc, info = env.step(t)
    conv = pol.start(info["messages"])
    with suppressed(pol, VISION_TOKENS + TOOL_TAGS):
        out = forced_answers(pol, [conv], max_new_tokens=48)[0]
    q = env.unwrapped.episode.question
    truth = q.options[ord(q.answer) - 65] if q.answer_type == "mcq" else q.answer
    think = out.split("</think>")[0].replace("<think>\n", "").strip()
    ans = out.split("<answer>")[-1].split("</answer>")[0]
    n += 1; ok_copy += truth.split()[0] in think; ok_ans += ans.strip() == q.answer
    if n <= 6 or (n > 20 and n <= 24): print(q.family, "| truth", q.answer, truth, "| think:", think, "| ans:", ans)
print("copied truth into think:", ok_copy, "/", n, " answer right:", ok_ans)
