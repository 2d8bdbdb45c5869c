"""The trainers as a package: the console scripts of setup.py (trainers/cli.py), the two ways to run a script
(``python trainers/para_grpo.py`` and ``python -m trainers.para_grpo``), and no library module editing sys.path."""

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def console_scripts() -> dict[str, str]:
    """setup.py's console scripts: name -> "module:function"."""
    return dict(re.findall(r'"([\w-]+)=([\w.]+:\w+)"', (ROOT / "setup.py").read_text()))


def test_every_command_of_trainers_cli_is_a_console_script():
    from trainers import cli

    scripts = console_scripts()
    assert {"paravt-train", "paravt-train-grpo", "paravt-train-sequential", "paravt-sweep", "paravt-eval",
            "paravt-view"} <= set(scripts)
    for command in cli.COMMANDS:
        module, _, function = scripts[command].partition(":")
        assert module == "trainers.cli" and getattr(cli, function).__doc__.startswith(f"{command}:"), command


@pytest.mark.parametrize("command", sorted(console_scripts()))
def test_console_script_help_exits_0(command, capsys):
    module, _, function = console_scripts()[command].partition(":")
    target = getattr(importlib.import_module(module), function, None)
    assert callable(target), f"{command}: no {function} in {module}"
    with pytest.raises(SystemExit) as exc:
        target(["--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_a_trainer_runs_as_a_module_and_as_a_file(tmp_path):
    """``python -m trainers.para_grpo`` from the repository; ``python /path/trainers/para_grpo.py`` from anywhere,
    with nothing on PYTHONPATH (the script puts its own repository first)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for target, cwd in ((["-m", "trainers.para_grpo"], ROOT), ([str(ROOT / "trainers" / "para_grpo.py")], tmp_path)):
        p = subprocess.run([sys.executable, *target, "--anchor-mode", "logprob", "--help"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "--anchor-mode {bonus,logprob}" in p.stdout


def _main_guarded(tree: ast.Module) -> set[int]:
    """ids of the nodes under an ``if __name__ == "__main__"...`` block."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def test_library_modules_leave_sys_path_alone():
    """Only a script's ``__main__`` entry may put the repository root on sys.path; importing a module never does."""
    offenders = []
    for folder in ("trainers", "agents", "paravt_env", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            guarded = _main_guarded(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                        and node.value.id == "sys" and id(node) not in guarded):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, "sys.path outside a __main__ guard: " + ", ".join(offenders)


def test_a_trainer_takes_a_config_file_and_a_runs_args_json_round_trips(tmp_path):
    """--config FILE (YAML or JSON) sets flags, the command line wins (a repeatable flag too, and the file's
    --reward-fn only stands when the command line replaces it), and a run's args.json loaded as a config gives back
    that run's arguments."""
    import dataclasses
    import json

    from trainers.config import GRPOArgs, parse_args
    from trainers.para_grpo import Args

    for name in ("a", "b"):
        (tmp_path / f"{name}.py").write_text("def f(trajectory, info):\n    return 0.0\n")
    a_fn, b_fn = f"{tmp_path / 'a.py'}:f", f"{tmp_path / 'b.py'}:f"
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"total_steps: 7\nthink_prefix: false\ngating_budgets: [4, 8]\nreward_fn: {a_fn}\n")
    a = parse_args(Args, ["--config", str(cfg), "--total-steps", "9", "--reward-fn", b_fn])
    assert (a.total_steps, a.think_prefix, a.gating_budgets, a.reward_fn) == (9, False, "4,8", b_fn)
    with pytest.raises(SystemExit):  # a file never names code to run: --reward-fn comes from the command line
        parse_args(Args, ["--config", str(cfg)])
    assert Args().think_prefix is True  # the file's false replaced the script's default
    original = parse_args(Args, ["--total-steps", "3", "--no-tool-reward", "--seed", "5", "--runs-dir", str(tmp_path)])
    saved = tmp_path / "args.json"
    saved.write_text(json.dumps(dataclasses.asdict(original)))
    assert parse_args(Args, ["--config", str(saved)]) == original
    cfg.write_text("total_stepz: 7\n")
    with pytest.raises(SystemExit):
        parse_args(GRPOArgs, ["--config", str(cfg)])
