"""Config files for the command-line tools: a YAML (or JSON) mapping of flag names to values.

Every tool that takes ``--config FILE`` reads the file as the flags it holds, placed before the command line's,
so a flag given on the command line wins. Keys are flag names without the dashes, with ``_`` or ``-`` (a run's
``args.json`` is such a file, and a build record's ``args``); ``true`` / ``false`` become ``--flag`` /
``--no-flag``; a list becomes a comma list.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load_config(path: str | Path) -> dict:
    """The mapping in a .yaml / .yml / .json file (ValueError naming the file when it holds anything else)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - any parse error becomes one line naming the file
        raise ValueError(f"--config {path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'} ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values, got {type(data).__name__}")
    return data


def config_flags(mapping: dict, known: set[str] | None = None, source: str = "config") -> list[str]:
    """``{"total_steps": 40, "think_prefix": False, "seeds": [1, 2]}`` -> ``--total-steps 40 --no-think-prefix
    --seeds 1,2``. With ``known`` (flag names with underscores), an unknown key is a ValueError naming it."""
    if known is not None:
        unknown = sorted(k for k in mapping if k.replace("-", "_") not in known)
        if unknown:
            raise ValueError(f"{source}: unknown keys {', '.join(unknown)}")
    out: list[str] = []
    for key, value in mapping.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, (dict,)):
            raise ValueError(f"{source}: {key} holds a mapping; flags take numbers, text, true/false or lists")
        else:
            out += [flag, str(value)]
    return out


def config_argv(argv, known: set[str]) -> list[str]:
    """``argv`` with the flags of its ``--config FILE`` (if any) put in front, so the command line's own flags win.
    ``known`` are the flag names (with underscores) the file may set; anything else is a ValueError."""
    argv = list(argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default="")
    ns, rest = pre.parse_known_args(argv)
    if not ns.config:
        return argv
    data = load_config(ns.config)
    if isinstance(data.get("args"), dict) and "args" not in known:  # a build record (sft_args.json): its arguments
        data = data["args"]
    return config_flags(data, known, source=f"--config {ns.config}") + rest


def given_dests(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The destinations a command line sets explicitly (a flag given with its default value counts as given)."""
    unset = object()
    saved = {a.dest: a.default for a in parser._actions}
    try:
        for a in parser._actions:
            a.default = unset
        ns, _ = parser.parse_known_args(list(argv))
    finally:
        for a in parser._actions:
            a.default = saved[a.dest]
    return {k for k, v in vars(ns).items() if v is not unset}
