"""The docs cite what exists: every ``python`` command (a script, ``python -m module``) and every console script of
setup.py (``paravt-train ...``) in README.md and docs/*.md parses against the real argument parser of its script,
and every repository path they cite is there."""

import json
import re
import shlex
import subprocess
import sys
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP_MODULES = {"venv", "pip", "pytest"}  # not this project's parsers (the test commands are run by CI itself)
# setup.py's console scripts: command -> "module:function" (the driver calls the function as the script would)
CONSOLE_SCRIPTS = dict(re.findall(r'"([\w-]+)=([\w.]+:\w+)"', (ROOT / "setup.py").read_text()))
SWEEPS = ("trainers/sweep.py", "-m trainers.sweep", "paravt-sweep")  # they hand the flags they do not know on

# Run in a fresh interpreter: each command's script runs as __main__ until its parser returns, then stops; a parse
# error or a script that gets past its arguments without a parser is reported.
DRIVER = r'''
import argparse, importlib, json, runpy, sys
from pathlib import Path

class Parsed(Exception):
    pass

class ParseError(Exception):
    pass

depth = [0]
original_parse_args = argparse.ArgumentParser.parse_args
original_parse_known_args = argparse.ArgumentParser.parse_known_args

def parse_args(self, args=None, namespace=None):
    depth[0] += 1
    try:
        result = original_parse_args(self, args, namespace)
    finally:
        depth[0] -= 1
    raise Parsed(result, [])

def parse_known_args(self, args=None, namespace=None):
    if depth[0]:
        return original_parse_known_args(self, args, namespace)
    result, extra = original_parse_known_args(self, args, namespace)
    raise Parsed(result, extra)

def error(self, message):
    raise ParseError(f"{self.prog}: {message}")

argparse.ArgumentParser.parse_args = parse_args
argparse.ArgumentParser.parse_known_args = parse_known_args
argparse.ArgumentParser.error = error

def run(target, argv):
    sys.argv = [target, *argv]
    try:
        if target in CONSOLE_SCRIPTS:
            module, _, function = CONSOLE_SCRIPTS[target].partition(":")
            getattr(importlib.import_module(module), function)()
        elif target.startswith("-m "):
            runpy.run_module(target[3:], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except Parsed as p:
        return p.args[1]
    except ParseError as e:
        raise
    except SystemExit as e:
        raise ParseError(f"exited with {e.code} before its parser returned")
    raise ParseError("ran to the end without parsing its arguments")

report = []
CONSOLE_SCRIPTS, SWEEPS = json.loads(sys.argv[2]), json.loads(sys.argv[3])
for target, argv in json.loads(sys.argv[1]):
    try:
        extra = run(target, argv)
        if extra and target in SWEEPS:  # the sweep hands the flags it does not know to every run
            run("trainers/para_grpo.py", extra)
        report.append(None)
    except Exception as e:
        report.append(f"{type(e).__name__}: {e}")
print("REPORT " + json.dumps(report))
'''


def fenced_blocks(text: str):
    """(language, body) of every fenced block; the text outside them."""
    blocks, prose, lang, body = [], [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                blocks.append((lang, "\n".join(body)))
                lang = None
        elif lang is None:
            prose.append(line)
        else:
            body.append(line)
    return blocks, "\n".join(prose)


def code_texts(text: str):
    """Shell lines of fenced shell blocks (continuations joined) and inline code spans."""
    blocks, prose = fenced_blocks(text)
    for lang, body in blocks:
        if lang in ("", "bash", "sh"):
            yield from body.replace("\\\n", " ").splitlines()
    yield from (span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose))


def python_commands(text: str):
    """(script, "-m module" or console script, argv) of every command that runs a repository script with python or
    torchrun, or one of setup.py's console scripts."""
    for line in code_texts(text):
        line = line.split(" #")[0].strip()
        for cmd in re.split(r"&&|;", line):
            try:
                words = shlex.split(cmd)
            except ValueError:
                continue
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value prefixes
                words = words[1:]
            if not words:
                continue
            if words[0] in CONSOLE_SCRIPTS:
                if words[1:]:  # alone it is a name in the prose (`paravt-eval`), not a command
                    yield words[0], [w for w in words[1:] if w not in ("...", "[...]")]
                continue
            if words[0] == "torchrun":
                words = ["python", *[w for w in words[1:] if not w.startswith("--nproc")]]
            if words[0] not in ("python", "python3"):
                continue
            argv = [w for w in words[1:] if w not in ("...", "[...]")]
            if not argv or argv[0] == "-c":
                continue
            if argv[0] == "-m":
                if argv[1] in SKIP_MODULES:
                    continue
                yield f"-m {argv[1]}", argv[2:]
            elif argv[0].endswith(".py"):
                yield argv[0], argv[1:]


def all_commands():
    seen = {}
    for page in PAGES:
        for target, argv in python_commands(page.read_text()):
            seen.setdefault((target, tuple(argv)), page.relative_to(ROOT))
    return seen


def test_the_docs_cite_python_commands():
    commands = all_commands()
    assert len(commands) >= 40
    assert any(t == "trainers/para_grpo.py" for t, _ in commands)
    assert any(t == "trainers/sweep.py" for t, _ in commands)
    assert any(t == "paravt-train" for t, _ in commands) and any(t.startswith("-m trainers.") for t, _ in commands)


def driver(commands, timeout: int, **env) -> list:
    """The DRIVER's report on `commands` [(target, argv)], run in a fresh interpreter from the repository."""
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands), json.dumps(CONSOLE_SCRIPTS),
                           json.dumps(SWEEPS)], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()), **env})
    lines = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(lines[-1][len("REPORT "):])


def test_every_python_command_in_the_docs_parses_against_its_script():
    commands = all_commands()
    scripts = {target for target, _ in commands if not target.startswith("-m ") and target not in CONSOLE_SCRIPTS}
    for target, _ in commands:
        if target in scripts:
            assert (ROOT / target).is_file(), f"{commands[(target, _)]}: no script {target}"
    runnable = []
    for (target, argv), page in commands.items():
        script = ROOT / target if target in scripts else None
        if script is not None and not argv and "argparse" not in script.read_text():
            continue  # a script without arguments (it would do its work): its existence is checked above
        runnable.append((target, list(argv), page))
    report = driver([(t, a) for t, a, _ in runnable], 600, PARAVT_NO_SHIPPED="0", OMP_NUM_THREADS="1")
    failures = [f"{page}: {'' if t in CONSOLE_SCRIPTS else 'python '}{t} {' '.join(a)}\n    {r}"
                for (t, a, page), r in zip(runnable, report) if r]
    assert not failures, "\n".join(failures)


def test_a_bad_flag_in_a_command_is_caught():
    """The driver is not a rubber stamp: an unknown flag and a bad choice fail, a good command passes."""
    cmds = [("trainers/para_grpo.py", ["--no-such-flag", "1"]), ("trainers/para_grpo.py", ["--anchor-mode", "x"]),
            ("trainers/para_grpo.py", ["--total-steps", "3"]), ("benchmarks/update_readme.py", ["--x"]),
            ("paravt-train-grpo", ["--anchor-mode", "x"]), ("paravt-train", ["--total-steps", "3"]),
            ("-m trainers.grpo", ["--no-such-flag"])]
    report = driver(cmds, 300)
    assert report[0] and "unrecognized arguments" in report[0]
    assert report[1] and "invalid choice" in report[1]
    assert report[2] is None
    assert report[3] and "without parsing" in report[3]
    assert report[4] and "invalid choice" in report[4]
    assert report[5] is None
    assert report[6] and "unrecognized arguments" in report[6]


PATH_RE = re.compile(r"(?:\.\./)*(?:agents|benchmarks|trainers|paravt_env|tests|examples|docs|\.ci)/[\w./{},:-]*"
                     r"|(?:\.\./)*\b(?:README|REPRODUCTION|env|rewards|data|training|scaling|models)\.md|\bsetup\.py|\bpytest\.ini")


def expand(path: str):
    """``a/{x,y}/b`` -> ``a/x/b``, ``a/y/b``."""
    parts = re.split(r"\{([^{}]*)\}", path)
    for choice in product(*[p.split(",") for p in parts[1::2]]):
        yield "".join(x for pair in zip(parts[::2], [*choice, ""]) for x in pair)


def cited_paths(page: Path):
    text = page.read_text()
    blocks, prose = fenced_blocks(text)
    spans = re.findall(r"`([^`]+)`", prose) + [body for _, body in blocks]
    spans += re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose)
    for span in spans:
        for m in PATH_RE.finditer(span):
            token = m.group(0).rstrip(".,:;")
            if any(c in span[m.end():m.end() + 1] for c in "[<*") or "NNN" in token:
                continue  # a pattern (benchmarks/results[/NAME]), not a file
            yield from expand(token)


def test_every_repository_path_the_docs_cite_exists():
    missing = []
    for page in PAGES:
        for token in cited_paths(page):
            path, _, test_name = token.partition("::")
            bases = [page.parent] if path.startswith("..") else [ROOT, page.parent] if "/" not in path else [ROOT]
            found = [(b / path).resolve() for b in bases if (b / path).exists() or (b / (path + ".md")).exists()]
            target = found[0] if found else None
            if target is None:
                missing.append(f"{page.relative_to(ROOT)}: {token}")  # an output stem counts when its table is there
            elif test_name and f"def {test_name.split('[')[0]}(" not in target.read_text():
                missing.append(f"{page.relative_to(ROOT)}: {token} (no such test)")
    assert not missing, "\n".join(missing)
