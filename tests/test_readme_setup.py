"""The README's set-up text and printed output, and the shell examples of README and docs/, agree with what the
Makefile does and what the code prints."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DOCS = "\n".join(path.read_text() for path in sorted((REPO / "docs").glob("*.md")))


def shell_blocks() -> list[str]:
    """The shell examples of the README and docs/, without the bodies of here-documents (Python fed to `python -`)."""
    blocks = re.findall(r"```bash\n(.*?)```", README + "\n" + DOCS, flags=re.S)
    return [re.sub(r"<<'(\w+)'\n.*?\n\1\n", "\n", block, flags=re.S) for block in blocks]


def test_the_setup_text_names_the_extras_the_makefile_installs() -> None:
    extras = re.search(r"pip install -q -e '(\.\[[^]]*\])'", (REPO / "Makefile").read_text()).group(1)
    setup = README.split("## What `make run` does")[0]
    assert f"pip install -e '{extras}'" in setup


def test_shell_examples_quote_their_brackets() -> None:
    """An unquoted `key=[1]` is a glob: zsh stops with 'no matches found', bash passes it on only by luck."""
    unquoted = [word for block in shell_blocks() for line in block.splitlines()
                for word in re.findall(r"(?<!['\"\w.])[\w.]+=\[[^\s'\"]*", line.split("#")[0])]
    assert not unquoted, unquoted


def test_stdlib_one_liners_use_python3() -> None:
    """Where no environment is active only `python3` can be counted on (Debian and Ubuntu have no `python`)."""
    assert not [block for block in shell_blocks() if re.search(r"(^|[\s(])python -c", block)]


def test_the_printed_promotion_matches_its_table() -> None:
    """The example output's first promotion is where its own rates first reach the threshold on average over the
    window, and the new stage starts two steps later (the step after it was already sampled, asynchronously)."""
    output = README.split("What one run printed")[1].split("```")[1]
    rows = [line.split() for line in output.splitlines() if re.match(r"\s+\d+\s+\w+\s+[\d.]+", line)]
    step, window, mean, threshold = re.search(
        r"promotion at step (\d+): stage format -> compile \(mean (?:level_\d+/)?format_rate of the last (\d+) steps "
        r"([\d.]+) >= ([\d.]+)\)", output).groups()
    step, window, mean, threshold = int(step), int(window), float(mean), float(threshold)
    rates = {int(row[0]): float(row[2]) for row in rows}
    window_mean = lambda s: sum(rates[s - k] for k in range(window)) / window  # noqa: E731
    first = next(s for s in sorted(rates) if s + 1 >= window and window_mean(s) >= threshold)
    assert first == step and abs(window_mean(step) - mean) < 0.01
    stages = {int(row[0]): row[1] for row in rows}
    assert [stages[s] for s in sorted(stages) if s <= step + 1] == ["format"] * (step + 2)
    assert stages[step + 2] == "compile"
    assert set(re.findall(r"stage format -> compile at step (\d+)", README + DOCS)) <= {str(step)}
