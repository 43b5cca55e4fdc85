"""The Traditional Chinese companion (docs/zh-TW/) keeps in step with the English: each glossary entry, cheat-sheet
row, lesson's "Check yourself" and "What to remember" has its counterpart, with the same numbers; and the Chinese
holds no simplified character and no mainland term, as OpenCC's simplified-to-Taiwan conversion (s2twp) finds them."""
from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import opencc
import pytest

ROOT = Path(__file__).resolve().parent.parent
ZH = ROOT / "docs" / "zh-TW"
LESSONS = [p for p in sorted((ROOT / "notebooks").glob("[01]*.ipynb"))
           if "appendix" not in p.name and not p.name.startswith("11_")]   # lesson 11: its own test below
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def numbers(text: str) -> set[str]:
    """The numbers a text quotes, list numbering and Markdown headings' lesson numbers aside."""
    text = re.sub(r"^\s*\d+\. ", "", text, flags=re.M)
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def numbered(text: str) -> int:
    return len(re.findall(r"^\d+\. ", text, flags=re.M))


def cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def section(text: str, english: str) -> str:
    """The Markdown section whose heading names `english` (in full-width parentheses), up to the next heading of its
    level or above."""
    match = re.search(rf"^(#+) [^\n]*（{re.escape(english)}）[^\n]*\n(.*?)(?=^#{{1,2}} |\Z)", text, flags=re.M | re.S)
    assert match, f"no section headed ...（{english}）"
    return match.group(2)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_each_lesson_has_its_counterpart(path: Path):
    zh = (ZH / "lessons" / f"{path.stem}.md").read_text()
    tagged = ["".join(c["source"]) for c in cells(path) if "check-yourself" in c.get("metadata", {}).get("tags", [])]
    questions, _, answers = tagged
    remember = next("".join(c["source"]) for c in cells(path) if "## What to remember" in "".join(c["source"]))
    remember = remember.split("**Next:**")[0]
    check = section(zh, "Check yourself")
    zh_questions, _, zh_answers = check.partition("（Model answers）")
    assert numbered(zh_questions) == numbered(questions) and numbered(zh_answers) == numbered(answers), path.stem
    assert numbers(zh_questions + zh_answers) == numbers(questions + answers), path.stem
    zh_remember = section(zh, "What to remember")
    assert zh_remember.count("\n- ") == remember.count("\n- "), f"{path.stem}: What to remember has another count"
    assert numbers(zh_remember) == numbers(remember.replace("## What to remember", "")), path.stem


def glossary_entries(text: str) -> dict[str, str]:
    """English term -> entry, from the bold headings of docs/GLOSSARY.md or the English in its companion's."""
    entries = {}
    for entry in re.split(r"\n(?=\*\*)", text.split("\n---\n", 1)[1].strip()):
        heading = re.match(r"\*\*(.+?)\*\*", entry).group(1)
        english = re.search(r"（(.+?)）", heading)
        entries[(english.group(1) if english else heading).rstrip(".")] = entry
    return entries


def test_the_glossary_has_every_entry_with_its_numbers():
    english, chinese = (glossary_entries(p.read_text()) for p in (ROOT / "docs" / "GLOSSARY.md", ZH / "GLOSSARY.md"))
    assert list(chinese) == list(english), "the companion's entries, by their English names, in the glossary's order"
    for term, entry in english.items():
        assert numbers(chinese[term]) == numbers(entry), term


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]


def test_the_cheat_sheet_has_every_row_with_its_numbers():
    english, chinese = (table_rows(p.read_text()) for p in (ROOT / "docs" / "CHEATSHEET.md", ZH / "CHEATSHEET.md"))
    assert len(chinese) == len(english)
    for en, zh in zip(english, chinese):
        assert numbers(zh) == numbers(en), en[:60]


@pytest.mark.parametrize("path", sorted(ZH.rglob("*.md")), ids=lambda p: str(p.relative_to(ZH)))
def test_the_chinese_is_traditional_in_taiwan_usage(path: Path):
    text = path.read_text()
    converted = opencc.OpenCC("s2twp").convert(text)
    changed = [f"{text[i1:i2]!r} -> {converted[j1:j2]!r} in ...{text[max(0, i1 - 8):i2 + 8]}..."
               for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, text, converted, autojunk=False).get_opcodes()
               if op != "equal"]
    assert not changed, f"{path.name}: OpenCC s2twp rewrites {changed[:5]}: simplified characters or mainland terms"


def test_lesson_11_has_its_counterpart():
    """The drill's rubric, paper drills, follow-ups with their model answers, wrong answers and What to remember."""
    from minicb.course import drill

    zh = (ZH / "lessons" / "11_interview_drill.md").read_text()
    english = ["".join(c["source"]) for c in cells(ROOT / "notebooks" / "11_interview_drill.ipynb")]
    follow_ups = [text for text in english if text.startswith("**Follow-up")]
    wrong = [text for text in english if text.startswith('**"')]
    remember = next(text for text in english if "## What to remember" in text).split("**Next:**")[0]
    rubric = section(zh, "Rubric")
    assert numbered(rubric) == len(drill.RUBRIC)
    assert numbers(rubric) == numbers(" ".join(f"{p.claim} {p.published}" for p in drill.RUBRIC))
    paper = section(zh, "Drills on paper")
    questions = [d.question() for d in drill._drills().values()]
    assert numbered(paper) == len(questions) and numbers(paper) == numbers(" ".join(questions))
    asked, _, answered = section(zh, "Follow-up questions").partition("（Model answers）")
    assert numbered(asked) == numbered(answered) == len(follow_ups)
    assert numbers(asked + answered) == numbers(re.sub(r"\*\*Follow-up \d+\. ", "", " ".join(follow_ups)))
    mistakes = section(zh, "Common wrong answers")
    assert numbered(mistakes) == len(wrong) and numbers(mistakes) == numbers(" ".join(wrong))
    zh_remember = section(zh, "What to remember")
    assert zh_remember.count("\n- ") == remember.count("\n- ")
    assert numbers(zh_remember) == numbers(remember.replace("## What to remember", ""))
