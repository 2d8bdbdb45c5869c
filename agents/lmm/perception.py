"""Can the model see? Measurements of an LMM against the world's truth (validation split).

Used by ``benchmarks/perception.py`` (the full benchmark) and by ``trainers/sft.py`` (a quick
held-out caption F1 logged while training: ``trainers/supervised/quick_eval.py``). Four skills:

* **captions of single frames and of crops** (the sub-agent skill), generated through
  :class:`~agents.lmm.subagent.Subagent` (the prompt the corpus trains and the env uses) and
  scored on the needles they name: (colour, shape, position) triples parsed with the world's own
  caption grammar (:func:`agents.lmm.corpus.caption_needles`), micro-averaged precision, recall
  and F1; for crops a needle counts only if its first and last times are each within one crop
  frame (the crop's sampling step) of the truth; scene accuracy = the caption lists exactly the
  true scenes; grey distractors (no position) are reported apart as recall.
* **direct answers where the overview shows the evidence**: (episode, K) with the evidence in
  the K overview frames (:func:`agents.lmm.corpus.evidence_visible`), the model answers with
  tool calls forbidden (their tags suppressed), so the number is about reading the overview.
* **the tool's pay-off**: at K = 4 on needle-type questions, accuracy when the model may call
  crop_video (answered by the model itself as sub-agent) minus accuracy with tools forbidden.
* **reading what a tool returns**: the same episodes with the first turn given (the oracle
  agent's calls on the evidence windows, in the cold start's words) and the crops summarised
  truthfully (the world's captions); the model only has to answer from the tool responses, tools
  forbidden. Separates reading from seeing and from choosing windows.

Intervals: 95 %, Wilson for proportions, percentile bootstrap (seeded) for F1 and differences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from agents.lmm.corpus import (THINK_TOOL, CaptionConfig, WorldConfig, _decision, answer_object, caption_needles,
                               caption_samples, caption_scenes, evidence_visible, named_objects, render_turn,
                               round_windows)
from agents.lmm.subagent import Subagent, crop_window
from paravt_env.questions import FAMILIES
from paravt_env.sources import Frames, SyntheticDataset
from paravt_env.world import uniform_timestamps

VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
TOOL_TAGS = ("<tool_call>", "<tool_code>")
VISIBLE_FAMILIES = ("needle", "needle_attribute", "global")
NEEDLE_FAMILIES = ("needle", "needle_attribute")
_DISTRACTOR = "small grey"


# ---------------------------------------------------------------------------------------------
# intervals
# ---------------------------------------------------------------------------------------------
def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (n = 0 gives (nan, nan))."""
    if n <= 0:
        return float("nan"), float("nan")
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap(stat, n: int, reps: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of ``stat(idx)`` over ``reps`` resamples of ``range(n)``."""
    if n <= 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    vals = np.array([stat(rng.integers(0, n, n)) for _ in range(reps)], dtype=np.float64)
    vals = vals[np.isfinite(vals)]
    return (float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))) if len(vals) else (float("nan"),) * 2


# ---------------------------------------------------------------------------------------------
# captions
# ---------------------------------------------------------------------------------------------
@dataclass
class CaptionItem:
    frames: Frames     # what the sub-agent sees
    question: str      # the episode's question (part of the sub-agent prompt)
    truth: str         # the world's caption of exactly these frames

    @property
    def step(self) -> float:
        """The crop's sampling step: 'one crop frame' of time tolerance."""
        a, b = crop_window(self.frames.timestamps)
        return (b - a) / max(1, len(self.frames.timestamps))


def caption_items(n: int, kind: str, wc: WorldConfig, *, split: str = "validation", seed: int = 0,
                  cc: CaptionConfig | None = None) -> list[CaptionItem]:
    """``n`` held-out single frames (``kind="frame"``) or crops (``"caption"``) drawn like the
    corpus draws them (:func:`agents.lmm.corpus.caption_samples`) from ``split``, with crops sampled
    the env's way at ``wc.crop_max_frames`` and frames at ``wc.frame_size`` (no resizing)."""
    if kind not in ("frame", "caption"):
        raise ValueError(f"kind must be 'frame' or 'caption', got {kind!r}")
    cc = cc or CaptionConfig(max_frames=(wc.crop_max_frames,), aug_p=0.0, per_episode=1)
    ds = SyntheticDataset(split, wc.world_seed, wc.dataset_size, wc.duration)
    rng = np.random.default_rng([seed, 7 if kind == "frame" else 8])
    samples = caption_samples(n if kind == "frame" else 0, n if kind == "caption" else 0, rng=rng, wc=wc, ds=ds,
                              pick=lambda: int(rng.integers(len(ds))), cc=cc)
    items = []
    for s in samples:
        content = s.messages[0]["content"]
        images = np.stack([p["image"] for p in content if p.get("type") == "image"])
        items.append(CaptionItem(Frames(images, np.asarray(s.meta["timestamps"])), s.meta["question"],
                                 s.assistant_texts[0]))
    return items


def score_captions(preds: Sequence[str], items: Sequence[CaptionItem], timed: bool = True, seed: int = 0) -> dict:
    """Needle precision / recall / F1 (micro over items), with ``timed`` matches requiring both
    times within one crop frame; scene accuracy; distractor recall; 95 % intervals; n."""
    tp, npred, ntrue, tp_untimed, scene_ok, d_hit, d_true = [], [], [], [], [], [], []
    for pred, item in zip(preds, items, strict=True):
        p, t = caption_needles(pred), caption_needles(item.truth)
        both = set(p) & set(t)
        tol = item.step + 1e-6
        ok = [k for k in both if abs(p[k][0] - t[k][0]) <= tol and abs(p[k][1] - t[k][1]) <= tol]
        tp.append(len(ok) if timed else len(both))
        tp_untimed.append(len(both))
        npred.append(len(p))
        ntrue.append(len(t))
        scene_ok.append(caption_scenes(pred) == caption_scenes(item.truth))
        td = {s for s in _distractor_shapes(item.truth)}
        d_true.append(len(td))
        d_hit.append(len(td & _distractor_shapes(pred)))
    tp, npred, ntrue, tpu = map(np.asarray, (tp, npred, ntrue, tp_untimed))

    def f1(idx, hits=tp):
        h, pp, tt = hits[idx].sum(), npred[idx].sum(), ntrue[idx].sum()
        return 2 * h / (pp + tt) if pp + tt else float("nan")

    n = len(items)
    idx = np.arange(n)
    out = dict(n=n, needles_true=int(ntrue.sum()), needles_predicted=int(npred.sum()),
               object_precision=float(tp.sum() / npred.sum()) if npred.sum() else float("nan"),
               object_recall=float(tp.sum() / ntrue.sum()) if ntrue.sum() else float("nan"),
               object_f1=float(f1(idx)), object_f1_ci=bootstrap(f1, n, seed=seed),
               object_f1_untimed=float(f1(idx, tpu)),
               scene_accuracy=float(np.mean(scene_ok)) if n else float("nan"),
               scene_accuracy_ci=wilson(float(np.sum(scene_ok)), n),
               distractor_recall=float(np.sum(d_hit) / np.sum(d_true)) if np.sum(d_true) else float("nan"),
               exact=float(np.mean([p.strip() == i.truth for p, i in zip(preds, items)])) if n else float("nan"))
    return out


def _distractor_shapes(text: str) -> set[str]:
    import re
    return set(re.findall(rf"{_DISTRACTOR} (circle|square|triangle|diamond|star|cross) \(", text or ""))


def caption_eval(subagent: Subagent, items: Sequence[CaptionItem], timed: bool = True) -> tuple[dict, list[str]]:
    """Greedy summaries of ``items`` by ``subagent`` scored with :func:`score_captions`."""
    preds = subagent.batch([(it.frames, it.question) for it in items], temperature=0.0, seed=0)
    return score_captions(preds, items, timed=timed), preds


# ---------------------------------------------------------------------------------------------
# episodes: direct answers and the tool's pay-off
# ---------------------------------------------------------------------------------------------
class suppressed:
    """Context manager: the listed tokens get logit -1e9 in every forward of ``policy.model``."""

    def __init__(self, policy, tokens: Sequence[str]):
        self.policy = policy
        self.ids = sorted({policy.tokenizer.convert_tokens_to_ids(t) for t in tokens})

    def __enter__(self):
        idx = torch.tensor(self.ids, dtype=torch.long)
        self.handle = self.policy.model.get_output_embeddings().register_forward_hook(
            lambda mod, inp, out: out.index_fill(-1, idx.to(out.device), -1e9))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def visible_items(n_per_family: int, wc: WorldConfig, budgets: Sequence[int], *, families=VISIBLE_FAMILIES,
                  split: str = "validation", seed: int = 0) -> list[tuple[int, int]]:
    """(episode index, K) pairs whose K-frame overview shows the evidence, ``n_per_family`` per
    family: for each episode of the family (in index order) a random K of ``budgets`` that shows
    it, if any. ``seed`` picks the draw: seed s skips the episodes that seeds 0 .. s-1 use, so the
    draws of different seeds share no episode (seed 0 is the first block, as it always was)."""
    ds = SyntheticDataset(split, wc.world_seed, wc.dataset_size, wc.duration)
    rng = np.random.default_rng([seed, 11])
    out = []
    for fam in families:
        got, i, skip = 0, FAMILIES.index(fam), seed * n_per_family
        while got < n_per_family and i < len(ds):
            ep = ds[i]
            k = next((int(k) for k in rng.permutation(list(budgets)) if evidence_visible(
                uniform_timestamps(0.0, ep.source.duration, int(k)), ep.question.evidence, fam)), None)
            if k is not None and skip:
                skip -= 1
            elif k is not None:
                out.append((i, k))
                got += 1
            i += len(FAMILIES)
        if got < n_per_family:
            raise ValueError(f"the {split} split holds fewer than {n_per_family} {fam} episodes for seed {seed}")
    return out


def needle_items(n_per_family: int, k: int = 4, *, dataset_size: int, seed: int = 0) -> list[tuple[int, int]]:
    """(episode index, ``k``) for the first ``n_per_family`` episodes of each needle family in the
    ``seed``-th block of them (seed 0: the first; blocks of different seeds share no episode), for
    the tool-gain and reading measures."""
    out = []
    for fam in NEEDLE_FAMILIES:
        first = FAMILIES.index(fam) + seed * n_per_family * len(FAMILIES)
        idx = range(first, first + n_per_family * len(FAMILIES), len(FAMILIES))
        if idx and idx[-1] >= dataset_size:
            raise ValueError(f"{n_per_family} {fam} episodes of seed {seed} run past the split's {dataset_size}")
        out += [(i, k) for i in idx]
    return out


def oracle_first_turn(env, obs, info) -> str:
    """The oracle agent's first turn (crop_video on the evidence windows) for the episode ``env``
    was just reset to (``obs``, ``info``), in the cold start's words: the ParaVT dialect, the fixed
    tool-turn think line, whole-second windows."""
    from agents.scripted import make_agent

    windows, _ = _decision(make_agent("oracle", env, seed=0).act(obs, info))
    return render_turn("paravt", THINK_TOOL, windows=round_windows(windows))


def play(policy, wc: WorldConfig, items: Sequence[tuple[int, int]], *, budgets: Sequence[int], forbid_tools: bool,
         subagent: Subagent | str | None = None, max_new_tokens: int = 192, batch_size: int = 64,
         split: str = "validation", temperature: float = 0.0, seed: int = 0, oracle_first_turn_given: bool = False,
         tools: bool = True) -> list[dict]:
    """Play each (episode index, K) once, batched in lockstep: greedy main turns with the
    ``<think>\\n`` prefix (stopping at ``</answer>`` or end of turn, so a turn may hold several
    parallel calls), crops summarised by ``subagent`` in one batch per turn (default: the
    policy itself, greedy; ``"oracle"``: the world's captions). ``forbid_tools``: the tool-call
    tags are suppressed and a generated turn must answer (:func:`forced_answers`), so the number is
    the model's best answer without tools, not a model derailed by a ban it was never trained on.
    ``oracle_first_turn_given``: the first turn is :func:`oracle_first_turn`, teacher-forced.
    ``tools=False``: the env's setting without a tool (its prompt advertises none).
    Each record's ``answer_in_crops`` (needle families; else None): whether the world's captions of the crops the
    episode's calls returned name the answer object, i.e. whether its windows caught the answer at all, whatever
    the sub-agent then said; its ``texts``: the turns the policy generated (or was given), in order."""
    subagent = subagent or Subagent(policy, frame_size=None)
    banned = VISION_TOKENS + (TOOL_TAGS if forbid_tools else ())
    records = []
    with suppressed(policy, banned):
        for lo in range(0, len(items), batch_size):
            chunk = items[lo:lo + batch_size]
            envs = [wc.env(split, nframes_gating=True, gating_budgets=tuple(budgets), subagent="oracle", tools=tools)
                    for _ in chunk]
            convs, observations, infos, done = [], [], [], [False] * len(chunk)
            truly_shown = [[] for _ in chunk]  # the world's captions of each episode's executed crops
            said = [[] for _ in chunk]  # each episode's generated turns, for reading its windows afterwards
            for env, (i, k) in zip(envs, chunk):
                obs, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": k})
                convs.append(policy.start(info["messages"]))
                observations.append(obs)
                infos.append(info)
            turn = 0
            while not all(done):
                active = [j for j in range(len(chunk)) if not done[j]]
                gen_seed = seed * 7919 + lo * 31 + turn
                if oracle_first_turn_given and turn == 0:
                    texts = [oracle_first_turn(envs[j], observations[j], infos[j]) for j in active]
                    for j, text in zip(active, texts):
                        convs[j].append_completion(policy.completion_from_text(text))
                elif forbid_tools:
                    texts = forced_answers(policy, [convs[j] for j in active], max_new_tokens=max_new_tokens,
                                           temperature=temperature, seed=gen_seed)
                else:
                    comps = policy.generate([convs[j] for j in active], temperature=temperature,
                                            max_new_tokens=max_new_tokens, stop=("</answer>",), prefix="<think>\n",
                                            seed=gen_seed)
                    for j, c in zip(active, comps):
                        convs[j].append_completion(c)
                    texts = [c.text for c in comps]
                pending = []
                for j, text in zip(active, texts):
                    said[j].append(text)
                    finished, _, _, results = envs[j].unwrapped.begin_turn(text)
                    if finished is not None:
                        infos[j], done[j] = finished[4], True
                    else:
                        pending.append((j, results))
                crops = [(j, r) for j, results in pending for r in results if r.ok]
                for j, r in crops:
                    truly_shown[j].append(envs[j].unwrapped.episode.source.caption(r.frames.timestamps))
                if subagent == "oracle":
                    summaries = [envs[j].unwrapped.summarize([r])[0] for j, r in crops]
                else:
                    summaries = subagent.batch([(r.frames, envs[j].unwrapped.episode.question.prompt())
                                                for j, r in crops], seed=seed + turn) if crops else []
                by_id = {id(r): s for (_, r), s in zip(crops, summaries)}
                for j, results in pending:
                    envs[j].unwrapped.deliver(results, [by_id.get(id(r), "") for r in results])
                    policy.extend(convs[j], [envs[j].unwrapped.messages[-1]])
                turn += 1
            for env, info, (i, k), shown, generated in zip(envs, infos, chunk, truly_shown, said):
                target = answer_object(env.unwrapped.episode.question)
                records.append(dict(index=i, k=k, family=info["family"], correct=bool(info.get("correct", False)),
                                    tool_calls=int(info["num_tool_calls"]), format=float(info.get("format_reward", 0.0)),
                                    answer=info.get("answer"), turns=int(info["turn"]), texts=generated,
                                    answer_in_crops=None if target is None else target in named_objects(" ".join(shown))))
                env.close()
    return records


def forced_answers(policy, convs: Sequence, *, max_new_tokens: int = 192, temperature: float = 0.0,
                   seed: int = 0) -> list[str]:
    """One answering turn per conversation, tools impossible: the model thinks freely (tool tags
    suppressed by the caller) up to ``</think>`` or an answer; a turn without ``<answer>`` is then
    continued from ``...</think>\\n<answer>`` (the ParaVT answer form the cold start trains), so
    every turn ends with an answer the env can score."""
    end = ("<|im_end|>", "<|endoftext|>")
    first = policy.generate(list(convs), temperature=temperature, max_new_tokens=max_new_tokens,
                            stop=("</think>", "</answer>"), prefix="<think>\n", seed=seed)
    texts, todo = [c.text for c in first], []
    for i, c in enumerate(first):
        if "</answer>" not in c.text:
            head = c.text
            for t in end:
                head = head.replace(t, "")
            todo.append((i, head + ("" if "</think>" in head else "\n</think>") + "\n<answer>"))
    if todo:  # each conversation continued by its own forced prefix, in one batch
        forced = []
        for i, prefix in todo:
            conv = convs[i].copy()
            ids = policy.tokenizer.encode(prefix, add_special_tokens=False)
            conv.token_ids += ids
            conv.generated_mask += [False] * len(ids)
            conv.logprobs += [0.0] * len(ids)
            forced.append(conv)
        comps = policy.generate(forced, temperature=temperature, max_new_tokens=32, stop=("</answer>",), prefix="",
                                seed=seed + 1)
        for (i, prefix), c in zip(todo, comps):
            texts[i] = prefix + c.text
    return texts


def forced_first_turns(policy, wc: WorldConfig, items: Sequence[tuple[int, int]], budgets: Sequence[int], *,
                       split: str = "validation", batch_size: int = 64, max_new_tokens: int = 192
                       ) -> tuple[list, list[str]]:
    """The first turn of each (episode index, K) as the direct-answer measure of :func:`play` generates it (tools
    and vision tokens suppressed, greedy, :func:`forced_answers`), with the unwrapped env it was reset in, so a
    caller can read the texts and score them (``env.begin_turn(text)``)."""
    envs, convs = [], []
    for i, k in items:
        env = wc.env(split, nframes_gating=True, gating_budgets=tuple(budgets), subagent="oracle")
        _, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": k})
        envs.append(env.unwrapped)
        convs.append(policy.start(info["messages"]))
    with suppressed(policy, VISION_TOKENS + TOOL_TAGS):
        texts = [t for lo in range(0, len(convs), batch_size)
                 for t in forced_answers(policy, convs[lo:lo + batch_size], max_new_tokens=max_new_tokens, seed=lo)]
    return envs, texts


def accuracy_summary(records: Sequence[dict], families: Sequence[str] | None = None) -> dict:
    """Accuracy (Wilson 95 %), n and tool calls per episode, overall and per family."""
    fams = families or sorted({r["family"] for r in records})

    def summ(rs):
        c = sum(r["correct"] for r in rs)
        return dict(n=len(rs), accuracy=c / len(rs) if rs else float("nan"), accuracy_ci=wilson(c, len(rs)),
                    tool_calls=float(np.mean([r["tool_calls"] for r in rs])) if rs else float("nan"))
    out = summ(list(records))
    out["by_family"] = {f: summ([r for r in records if r["family"] == f]) for f in fams}
    return out


def answer_catch(records: Sequence[dict]) -> dict:
    """Of episodes played with tools: the share whose crops show the answer object (``answer_in_crops``), and the
    accuracy when they do and when they do not. Splits "with tools" accuracy into choosing windows and reading."""
    rs = [r for r in records if r.get("answer_in_crops") is not None]
    shown = [r["correct"] for r in rs if r["answer_in_crops"]]
    missed = [r["correct"] for r in rs if not r["answer_in_crops"]]
    return dict(n=len(rs), share=len(shown) / len(rs) if rs else float("nan"), share_ci=wilson(len(shown), len(rs)),
                accuracy_if_shown=float(np.mean(shown)) if shown else float("nan"), n_shown=len(shown),
                accuracy_if_shown_ci=wilson(sum(shown), len(shown)),
                accuracy_if_not=float(np.mean(missed)) if missed else float("nan"), n_not=len(missed),
                accuracy_if_not_ci=wilson(sum(missed), len(missed)))


def paired_gain(with_tools: Sequence[dict], without: Sequence[dict], seed: int = 0) -> dict:
    """Accuracy with tools minus without, on the same episodes, with a paired bootstrap interval."""
    a = np.array([r["correct"] for r in with_tools], dtype=np.float64)
    b = np.array([r["correct"] for r in without], dtype=np.float64)
    if len(a) != len(b):
        raise ValueError("paired_gain needs the same episodes in both runs")
    return dict(gain=float(a.mean() - b.mean()) if len(a) else float("nan"),
                gain_ci=bootstrap(lambda idx: a[idx].mean() - b[idx].mean(), len(a), seed=seed), n=len(a))
