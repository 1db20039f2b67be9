"""docs/python-api.md runs as a doctest, so that its examples cannot rot.

Its examples run top to bottom in one namespace: they load the shipped ``host-cpu``
profile (its models are trained once, then read from the local model cache), estimate
zoo networks, time 20 small networks for a calibration (seconds), and start the gRPC
service in-process on a free loopback port. Markdown code fences end an example's
expected output the way a blank line does, so a block needs no blank line before its
closing fence.
"""
import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "python-api.md"
#: the guide holds more examples than this; fewer means examples went missing
MIN_EXAMPLES = 100


class _MarkdownParser(doctest.DocTestParser):
    """A doctest parser that reads a code fence line (```) as a blank line."""

    def parse(self, string: str, name: str = "<string>") -> list:
        return super().parse(re.sub(r"(?m)^[ \t]*```.*$", "", string), name)


@pytest.mark.slow
def test_python_api_guide_examples_run():
    result = doctest.testfile(str(GUIDE), module_relative=False, parser=_MarkdownParser(),
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {GUIDE.name} failed (see above)"
    assert result.attempted >= MIN_EXAMPLES, f"only {result.attempted} examples ran"
