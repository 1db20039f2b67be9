"""Bad command lines of the four CLIs, as a user meets them: exit 2 and one line on stderr
that names the option and the value (never a usage block or a traceback), and ``--help``
that shows no default for required options."""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from estimator.cliutil import Rule, build_parser

ROOT = Path(__file__).resolve().parents[1]
#: console script -> module with ``main(argv)`` and ``COMMANDS`` (pyproject's [project.scripts])
CLIS = {"bench": "bench.cli", "estimator": "estimator.cli", "estimation-service": "service.cli", "nas": "nas.cli"}


def _main(prog: str) -> Callable[[list[str]], int]:
    return importlib.import_module(CLIS[prog]).main


def _parser(prog: str) -> argparse.ArgumentParser:
    mod = importlib.import_module(CLIS[prog])
    return build_parser(prog, "", mod.COMMANDS)


def _subcommands(prog: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in _parser(prog)._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _required_args(sub: argparse.ArgumentParser) -> list[str]:
    """Placeholders for the subcommand's required arguments (nothing runs: parsing fails first)."""
    out: list[str] = []
    for a in sub._actions:
        if a.required:
            value = "0" if isinstance(sub._registry_get("type", a.type, a.type), Rule) else "placeholder"
            out += [max(a.option_strings, key=len), value] if a.option_strings else [value]
    return out


def _one_line_error(capsys: pytest.CaptureFixture[str], prog: str, argv: list[str]) -> str:
    rc = _main(prog)(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2, (argv, rc, captured.err)
    assert len(lines) == 1, (argv, captured.err)
    assert lines[0].startswith(f"{prog}: error: "), lines
    assert "Traceback" not in captured.err and "usage:" not in captured.err
    return lines[0]


def _numeric_options() -> list[Any]:
    cases = []
    for prog in CLIS:
        for name, sub in _subcommands(prog):
            for a in sub._actions:
                rule = sub._registry_get("type", a.type, a.type)
                if isinstance(rule, Rule):
                    cases.append(pytest.param(prog, name, max(a.option_strings, key=len), rule,
                                              id=f"{prog}-{name}-{max(a.option_strings, key=len)}"))
    return cases


NUMERIC_OPTIONS = _numeric_options()


def test_every_numeric_option_is_checked():
    """Every option of the four CLIs that takes a number has a rule (type=int/float included)."""
    options = {(prog, name, opt) for prog, name, opt, _ in (p.values for p in NUMERIC_OPTIONS)}
    for expected in [("nas", "search", "--trials"), ("nas", "search", "--confidence"), ("nas", "show", "--limit"),
                     ("bench", "run", "--runs"), ("bench", "refine", "--minutes"), ("bench", "agent", "--port"),
                     ("estimator", "train", "--jobs"), ("estimator", "layers", "--simplify-timeout"),
                     ("estimation-service", "serve", "--workers"), ("estimation-service", "serve", "--grace")]:
        assert expected in options


@pytest.mark.parametrize("prog, command, option, rule", NUMERIC_OPTIONS)
def test_a_bad_number_is_one_line_naming_option_and_value(capsys, prog, command, option, rule):
    base = [command, *_required_args(dict(_subcommands(prog))[command])]
    # "-5x" looks like an option to plain argparse ("expected one argument" and a usage block)
    values = ["x", "-5x", "nan" if rule.kind == "a number" else "1.5"]
    if rule.bounds:  # every bound here is a lower bound of 0 or more
        values.append("-5")
    for value in values:
        for argv in ([*base, option, value], [*base, f"{option}={value}"]):
            line = _one_line_error(capsys, prog, argv)
            assert f"{option} must be " in line and value in line, line


@pytest.mark.parametrize("argv, message", [
    (["--budget", "-5ms"], "--budget must be a positive latency with a unit, such as 50ms, 500us or 0.05s, got '-5ms'"),
    (["--budget=-5ms"], "--budget must be a positive latency with a unit, such as 50ms, 500us or 0.05s, got '-5ms'"),
    (["--budget", "0ms"], "--budget must be a positive latency"),
    (["--budget", "fast"], "--budget must be a positive latency with a unit, such as 50ms, 500us or 0.05s, got 'fast'"),
    (["--budget", "5parsecs"], "--budget must be a positive latency with a unit, such as 50ms, 500us or 0.05s, got "
                               "'5parsecs' (unknown unit 'parsecs')"),
    (["--budget", "5ms", "--trials", "-3"], "--trials must be >= 1, got -3"),
    (["--budget", "5ms", "--trials", "x"], "--trials must be an integer >= 1, got 'x'"),
    (["--budget", "5ms", "--confidence", "1.5"], "--confidence must be in (0, 1), got 1.5"),
    (["--budget", "5ms", "--confidence", "-.5"], "--confidence must be in (0, 1), got -.5"),
    (["--budget", "5ms", "--timeout", "-5min"], "--timeout must be a positive duration"),
    (["--budget", "5ms", "--timeout", "soon"], "got 'soon'"),
])
def test_nas_search_bad_values(capsys, tmp_path, argv, message):
    line = _one_line_error(capsys, "nas", ["search", "--device", "imx93", "--out", str(tmp_path / "out"), *argv])
    assert message in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("prog, argv, message", [
    ("nas", ["search"], "the following arguments are required: --device, --budget"),
    ("nas", ["search", "--device", "imx93", "--budget", "5ms", "--trials"], "--trials: expected one argument"),
    ("nas", ["search", "--device", "imx93", "--budget", "5ms", "--colour", "red"], "unrecognized arguments: --colour"),
    ("nas", ["searhc"], "invalid choice: 'searhc'"),
    ("bench", ["run", "--device", "d", "--runner", "nope"], "invalid choice: 'nope'"),
    ("estimator", ["predict", "m.onnx", "--device", "d", "--confidence", "1.5"], "--confidence must be in (0, 1), "
                                                                              "got 1.5"),
    ("estimation-service", ["serve"], "the following arguments are required: --port"),
])
def test_argparse_refusals_are_one_line(capsys, prog, argv, message):
    assert message in _one_line_error(capsys, prog, argv)


def test_a_negative_budget_from_the_shell(tmp_path):
    """The console script's stderr as a shell shows it."""
    p = subprocess.run([sys.executable, "-m", "nas.cli", "search", "--device", "imx93", "--budget", "-5ms",
                        "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["nas: error: --budget must be a positive latency with a unit, such as 50ms, "
                                     "500us or 0.05s, got '-5ms'"], p.stderr


@pytest.mark.parametrize("prog", list(CLIS))
def test_help_shows_no_default_for_required_options(capsys, prog):
    for name, sub in _subcommands(prog):
        with pytest.raises(SystemExit) as exit_:
            _main(prog)([name, "--help"])
        assert exit_.value.code == 0
        text = capsys.readouterr().out
        assert "(default: None)" not in text, (prog, name)
        required = [max(a.option_strings, key=len) for a in sub._actions if a.required and a.option_strings]
        for line in text.split("\n  -"):
            if any(line.lstrip("-").startswith(opt.lstrip("-") + " ") for opt in required):
                assert "(default" not in line, (prog, name, line)


def test_nas_search_help_keeps_real_defaults(capsys):
    with pytest.raises(SystemExit):
        _main("nas")(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--budget BUDGET latency budget with a unit: 50ms, 500us, 0.05s --trials" in text
    assert "--device DEVICE device profile name (one the estimator lists) --budget" in text
    assert "trials this worker runs (default: 100)" in text and "(default: 0.9)" in text
    assert "(default: False)" not in text and "(default: [])" not in text
