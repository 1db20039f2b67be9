"""The README opens with exactly two one-line commands, and CI runs the second one."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S)


def test_readme_opens_with_two_one_line_commands():
    text = (ROOT / "README.md").read_text()
    head = text.split("\n## ", 1)[0]  # everything before the first section
    blocks = _blocks(head)
    assert len(blocks) == 2, f"expected exactly two command blocks before the first section, got {len(blocks)}"
    for b in blocks:
        lines = [l for l in b.strip().splitlines() if l.strip()]
        assert len(lines) == 1, f"each opening command must be one line, got: {b!r}"
    assert "pip install" in blocks[0], "the first command installs and runs the main job"


def test_ci_runs_the_readme_test_command():
    text = (ROOT / "README.md").read_text()
    test_cmd = _blocks(text.split("\n## ", 1)[0])[1].strip()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci, f".ci/run must call the README's test command {test_cmd!r}"


def test_test_script_treats_no_tests_as_failure():
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert '"$rc" -eq 5' in script and "exit 1" in script
