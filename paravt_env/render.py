"""A picture of one episode: overview strip, crop windows, evidence windows, answer, reward.

    env = gym.make("ParaVT-LongVideo-v0", render_mode="rgb_array"); ...; env.render()   # or draw_timeline(env)

The command line that plays an agent and saves the picture is ``python -m agents.render``.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

WIDTH = 960
EVIDENCE_COLOUR = (40, 170, 60)
CROP_COLOUR = (40, 90, 220)


def draw_timeline(env) -> np.ndarray:
    """Draw ``env``'s current episode as an RGB uint8 array."""
    ep, duration = env.episode, env.episode.source.duration
    k = env.k
    thumb = max(8, min(96, (WIDTH - 20) // k))
    strip_h = thumb * env.frame_size[0] // max(1, env.frame_size[1])
    height = 40 + strip_h + 150
    img = Image.new("RGB", (WIDTH, height), (250, 250, 250))
    draw = ImageDraw.Draw(img)
    q = ep.question
    draw.text((10, 5), f"{q.id} [{q.family}]  K={k}  dispatch={env.dispatch}", fill=(0, 0, 0))
    draw.text((10, 20), q.text[:150], fill=(60, 60, 60))
    y = 40
    for i, frame in enumerate(env.overview.images):
        x = 10 + i * thumb
        small = Image.fromarray(frame).resize((thumb, strip_h), Image.NEAREST)
        img.paste(small, (x, y))
    axis_y, x0, x1 = y + strip_h + 30, 10, WIDTH - 10

    def px(t: float) -> int:
        return int(x0 + (x1 - x0) * min(max(t / duration, 0.0), 1.0))

    draw.line([(x0, axis_y), (x1, axis_y)], fill=(0, 0, 0), width=2)
    for t in env.overview.timestamps:
        draw.line([(px(t), axis_y - 4), (px(t), axis_y + 4)], fill=(120, 120, 120))
    for frac in np.linspace(0, 1, 6):
        draw.text((px(frac * duration) - 10, axis_y + 8), f"{frac * duration:.0f}s", fill=(90, 90, 90))
    draw.text((x0, axis_y + 28), "evidence", fill=EVIDENCE_COLOUR)
    for a, b in q.evidence:
        draw.rectangle([px(a), axis_y + 42, max(px(b), px(a) + 2), axis_y + 52], fill=EVIDENCE_COLOUR)
    draw.text((x0, axis_y + 58), "crops", fill=CROP_COLOUR)
    for a, b in env.executed_windows:
        draw.rectangle([px(a), axis_y + 72, max(px(b), px(a) + 2), axis_y + 82], fill=CROP_COLOUR, outline=(250, 250, 250))
    info = env.last_reward_info
    if info:
        comp = info["reward_components"]
        answer = info.get("answer")
        line = (f"answer: {str(answer)[:40]!r}  truth: {q.answer!r}  correct: {info['correct']}  "
                f"acc={comp['accuracy']:.2f} fmt={comp['format']:.2f} tool={comp['tool']:.2f}")
    else:
        line = "episode in progress"
    draw.text((x0, axis_y + 95), line, fill=(0, 0, 0))
    return np.asarray(img)


def main(argv=None) -> None:
    # The command plays an agent, and agents live outside this package (which imports none of them).
    raise SystemExit("the timeline command moved: python -m agents.render --help")


if __name__ == "__main__":
    main()
