"""README.md quotes the engine: its samples and its error messages must stay what the code does now."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
COMMAND = "$ python -m minicb "


def readme_samples() -> list[tuple[list[str], str]]:
    """(CLI arguments, printed text) for each `$ python -m minicb ...` in the code block of "Three samples"."""
    block = README.split("Three samples", 1)[1].split("```\n", 2)[1]
    samples = []
    for chunk in block.split(COMMAND)[1:]:
        command, _, printed = chunk.partition("\n")
        samples.append((shlex.split(command), printed.rstrip("\n")))
    return samples


def test_the_readme_has_its_three_samples():
    assert [args[2] for args, _ in readme_samples()] == ["ROMEO.", "HAMLET.", "FALSTAFF."]


@pytest.mark.parametrize("args,printed", readme_samples(), ids=[args[2] for args, _ in readme_samples()])
def test_each_readme_sample_is_what_the_cli_prints_now(args, printed, capsys):
    from minicb.cli import main

    assert main(args) == 0
    assert capsys.readouterr().out.rstrip("\n") == printed


def troubleshooting_quotes() -> list[str]:
    section = README.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- \*\*`([^`]+)`\*\*", section, flags=re.MULTILINE)


def appears_in_order(pieces: list[str], source: str) -> bool:
    at = 0
    for piece in pieces:
        at = source.find(piece, at)
        if at == -1:
            return False
        at += len(piece)
    return True


def test_every_quoted_error_message_still_exists_in_the_code():
    """Each quote, with its placeholders (..., N, M) and the CLI's `error: ` taken out, must appear in
    one source file, its pieces in order (a message may be split over f-strings)."""
    sources = [p.read_text() for p in [*ROOT.glob("minicb/**/*.py"), *ROOT.glob("kernels/**/*.py"),
                                       ROOT / "Makefile"]]
    quotes = troubleshooting_quotes()
    assert len(quotes) >= 5
    for quote in quotes:
        pieces = [p.strip() for p in re.split(r"\.\.\.|\b[NM]\b", quote.removeprefix("error: ")) if p.strip()]
        assert any(appears_in_order(pieces, source) for source in sources), (
            f"README quotes {quote!r}, which no source file says any more")
