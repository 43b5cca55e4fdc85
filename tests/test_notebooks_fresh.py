"""Static checks of the course notebooks as stored (fast; nothing is executed here).

Executing them is the job of nbval (`make test` runs `pytest tests notebooks --nbval --nbval-current-env`
with MINICB_IMPL=solutions) and of `python tools/check_notebooks.py`, which compares fresh outputs with
the stored ones. These tests check the stored files those runs and GitHub readers rely on:
- every code cell was run and stored (it has an execution count), and none stored an error;
- a cell that runs a learner's task (`course.attempt`) is tagged "yours" and stores no output: run under the
  reference, its output would be the task's answer, shown to a learner who opens this copy before trying;
- every cell that shows machine-dependent output (the clock, latencies, versions, the platform) or a
  widget starts with `# NBVAL_IGNORE_OUTPUT`, so that nbval does not compare it;
- every lesson has its title, "What you will learn", "What to remember", a recap of the lesson before
  (but lesson 00), a "**Next:**" line, and links only to notebooks that exist;
- every exercise a lesson names (`exercises/lessonNN_topic.py::symbol`) comes with its check command;
- every "Your turn" is followed by its folded answer key;
- no markdown cell runs past 250 words, tables and diagrams included;
- lessons 00-10 hold at most 21,500 words of markdown (appendices and "Check yourself" apart), and each lesson's
  sentences average at most 20 words;
- no lesson uses a glossary term before the lesson that teaches it;
- every lesson but lesson 11 (the interview drill) ends with "Check yourself": open questions, a cell for the
  learner's answers, folded model answers.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
IGNORE = "# NBVAL_IGNORE_OUTPUT"
YOURS = "yours"

# What makes an output depend on the machine: the clock, versions, and interactive widgets. Simulated
# times (the simulator's clock) are deterministic, so throughput from `simulate=True` runs may be checked.
MACHINE_DEPENDENT = r"perf_counter|time\.time\(|\.duration\b|__version__|platform\.|ttft|e2e|queue_time|token_times"
WIDGETS = r"^(SeatOccupancy|KVBlockMap|Timeline|Playground)\(|ServerSeats\(|latency_cdf\("


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb files"


def tasks_run(cells: list[dict]) -> list[bool]:
    """For each code cell, whether it runs a task of yours: it calls course.attempt, or a function that a cell
    calling course.attempt defines."""
    helpers = {name for c in cells if "course.attempt(" in source(c)
               for name in re.findall(r"^def (\w+)\(", source(c), flags=re.M)}
    return [any(re.search(rf"(?<![\w.]){re.escape(call)}\(", source(c)) for call in ["course.attempt", *helpers])
            for c in cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_cell_was_run_and_stored(path: Path):
    cells = code_cells(path)
    missing = [i for i, (c, yours) in enumerate(zip(cells, tasks_run(cells)))
               if c.get("execution_count") is None and not yours]
    assert not missing, (f"{path.name}: code cells {missing} have no stored outputs; store them with "
                         f"`python tools/check_notebooks.py --write notebooks/{path.name}`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_cell_that_runs_your_task_stores_no_answer(path: Path):
    cells = code_cells(path)
    untagged = [i for i, (c, yours) in enumerate(zip(cells, tasks_run(cells))) if yours
                and not {YOURS, "nbval-ignore-output"} <= set(c.get("metadata", {}).get("tags", []))]
    stored = [i for i, c in enumerate(cells) if YOURS in c.get("metadata", {}).get("tags", []) and c.get("outputs")]
    assert not untagged, (f"{path.name}: code cells {untagged} run a task of yours but are not tagged "
                          f"'{YOURS}' and 'nbval-ignore-output'")
    assert not stored, (f"{path.name}: code cells {stored} run a task of yours and store the reference's output: "
                        f"`python tools/check_notebooks.py --write notebooks/{path.name}` drops it")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_errors(path: Path):
    errors = [i for i, c in enumerate(code_cells(path))
              if any(o["output_type"] == "error" for o in c.get("outputs", []))]
    assert not errors, f"{path.name}: code cells {errors} stored an error"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_machine_dependent_cells_are_ignored_by_nbval(path: Path):
    """A cell that prints a time or a version, or shows a widget, must not be compared by nbval."""
    bad = []
    cells = code_cells(path)
    for i, (cell, yours) in enumerate(zip(cells, tasks_run(cells))):
        text = source(cell)
        if text.lstrip().startswith(IGNORE) or yours:
            continue
        lines = text.splitlines()
        shown = [line for line in lines if "print(" in line] + lines[-1:]   # printed, or the cell's value
        if any(re.search(MACHINE_DEPENDENT, line) for line in shown) or any(re.search(WIDGETS, line) for line in lines):
            bad.append(i)
    assert not bad, f"{path.name}: code cells {bad} show machine-dependent output without '{IGNORE}' as first line"


MAX_CELL_WORDS = 250   # a markdown cell fits on a screen: its words, tables and diagrams included


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_markdown_cell_runs_past_a_screen(path: Path):
    cells = json.loads(path.read_text())["cells"]
    long = {i: words for i, c in enumerate(cells) if c["cell_type"] == "markdown"
            and (words := len(source(c).split())) > MAX_CELL_WORDS}
    assert not long, (f"{path.name}: markdown cells over {MAX_CELL_WORDS} words (cell: words): {long}; cut words or "
                      "split the cell where its topic changes")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_structure(path: Path):
    """Title, what you will learn, what to remember, and (but for the last lesson) a link onward."""
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# "), "no title cell"
    assert "## What you will learn" in text
    assert "## What to remember" in text
    if not path.name.startswith("00"):
        assert "Recap of lesson" in text
    assert "**Next:**" in text
    for link in re.findall(r"\]\(([^)#]+\.ipynb)\)", text):
        assert (path.parent / link).exists(), f"{path.name} links to {link}, which does not exist"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_name_their_check_command(path: Path):
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    from minicb.course import TASKS

    for module, symbol in re.findall(r"exercises/(lesson\d\d_\w+)\.py::([\w.]+)", text):
        commands = [t.command for t in TASKS if t.module == module]   # lesson 02's plan_step grows in 04, 06, 07
        assert any(c in text for c in commands), f"{path.name}: exercise {module}.{symbol} without its check command"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_your_turn_has_a_folded_answer_key(path: Path):
    """A self-paced learner checks their reasoning: each "## Your turn" is followed by a folded "What you should
    see", which stays in the workspace copy (it is not a prediction's answer, which the workspace removes)."""
    cells = json.loads(path.read_text())["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and source(cell).startswith("## Your turn"):
            key = cells[i + 1] if i + 1 < len(cells) else {"cell_type": None, "source": []}
            assert key["cell_type"] == "markdown" and source(key).startswith(
                "<details><summary>What you should see"), f"{path.name}, cell {i}: its Your turn has no answer key"
            assert not any(t.startswith("answer:") for t in key.get("metadata", {}).get("tags", [])), path.name


# Prose a learner reads in lessons 00-10: every whitespace word of every markdown cell, as the cap counts them.
# Appendix notebooks (their file names say "appendix") hold optional depth and are counted apart.
MAX_LESSON_WORDS = 21_500
MAX_MEAN_SENTENCE = 20
LESSONS = [p for p in NOTEBOOKS if "appendix" not in p.name]
DRILL = "11_interview_drill"   # lesson 11 is the course's questions: tests/test_drill.py counts its words
COURSE = [p for p in LESSONS if p.stem != DRILL]   # lessons 00-10, 06b and 07b
_UNIT = re.compile(r"^\s*(#+|[-*]|\d+\.|>)\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[)*\"'`]*\s+(?=[A-Z`(*\"'\d])")


def sentences(markdown: str) -> list[str]:
    """The sentences of paragraphs and list items, wrapped lines joined; headings, tables and code are left out."""
    markdown = re.sub(r"```.*?```|<[^>]+>", " ", markdown, flags=re.S)
    paragraphs, current = [], []
    for line in markdown.splitlines() + [""]:
        starts_unit = not line.strip() or line.lstrip().startswith("|") or _UNIT.match(line)
        if starts_unit and current:
            paragraphs.append(" ".join(current))
            current = []
        if line.strip() and not line.lstrip().startswith(("|", "#")):
            current.append(_UNIT.sub("", line).strip())
    return [s for p in paragraphs for s in _SENTENCE_END.split(p) if s.split()]


CHECK_YOURSELF = "check-yourself"   # a lesson's closing questions and model answers: the learner's work, counted apart
MAX_CHECK_YOURSELF_WORDS = 400


def prose(path: Path, check_yourself: bool = False) -> list[str]:
    """The markdown a learner reads in the lesson (or, check_yourself=True, its closing questions and answers)."""
    return [source(c) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"
            and (CHECK_YOURSELF in c.get("metadata", {}).get("tags", [])) == check_yourself]


def test_the_lessons_prose_fits_its_budget():
    words = {p.stem: sum(len(cell.split()) for cell in prose(p)) for p in COURSE}
    assert sum(words.values()) <= MAX_LESSON_WORDS, (
        f"lessons 00-10 hold {sum(words.values()):,} words of markdown, over {MAX_LESSON_WORDS:,}: {words}. Cut words, "
        "or move optional depth to an appendix notebook")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_sentences_are_short_on_average(path: Path):
    cells = prose(path) + prose(path, check_yourself=True)
    lengths = [len(s.split()) for cell in cells for s in sentences(cell)]
    longest = sorted((s for cell in cells for s in sentences(cell)), key=lambda s: -len(s.split()))[:3]
    assert sum(lengths) / len(lengths) <= MAX_MEAN_SENTENCE, (
        f"{path.name}: sentences average {sum(lengths) / len(lengths):.1f} words, over {MAX_MEAN_SENTENCE}; "
        f"split the longest: {longest}")


# Each glossary entry names the lesson that teaches its term: the first "Lesson NN" it mentions.
GLOSSARY = Path(__file__).resolve().parent.parent / "docs" / "GLOSSARY.md"
FORWARD = "forward"   # a markdown cell tagged so points ahead on purpose: it may name terms of later lessons


def glossary_terms() -> dict[str, str]:
    """Each term (and alias) of docs/GLOSSARY.md, lower case, with the lesson that teaches it ("00" to "10", "06b")."""
    terms = {}
    for entry in re.split(r"\n(?=\*\*)", GLOSSARY.read_text().split("\n---\n", 1)[1].strip()):
        heading = re.match(r"\*\*(.+?)\.?\*\*(?: \((?:also )?\*?([^)*]+)\*?\))?", entry.strip())
        taught = re.search(r"\b[Ll]essons?\s+(\d\db?)\b", entry)
        assert heading and taught, f"docs/GLOSSARY.md: this entry names no lesson that teaches it: {entry[:80]!r}"
        names = heading.group(1).split(" / ") + ([heading.group(2)] if heading.group(2) else [])
        terms.update({name.strip().lower(): taught.group(1) for name in names})
    return terms


def test_a_lesson_uses_no_term_before_the_lesson_that_teaches_it():
    terms = glossary_terms()
    early = []
    for path in NOTEBOOKS:
        lesson = path.stem.split("_")[0]
        cells = [c for c in json.loads(path.read_text())["cells"]
                 if c["cell_type"] == "markdown" and FORWARD not in c.get("metadata", {}).get("tags", [])]
        text = re.sub(r"`[^`]*`|\]\([^)]*\)|<[^>]+>|\*\*Next:\*\*.*", " ", "\n".join(source(c) for c in cells))
        for term, taught in terms.items():
            # A use that names its later lesson points ahead: "lesson 06's swap pool", "preemption (lesson 06)".
            use = rf"(?<!lesson \d\d's )(?<!lesson \d\db's )\b{re.escape(term)}(s|es)?\b(?!\**,? \(?lesson \d)"
            if taught > lesson and re.search(use, text, flags=re.I):
                early.append(f"{path.stem} uses '{term}' (taught in lesson {taught})")
    assert not early, ("terms used before the lesson that teaches them (teach the term here, say it another way, or "
                       f"tag the cell '{FORWARD}' if it points ahead on purpose):\n" + "\n".join(early))


def numbers_not_shown(text: str, shown: str) -> list[str]:
    """The numbers `text` quotes (thousands commas or not) that `shown`, written without commas, never does."""
    return [n for n in re.findall(r"(?<![\w.])\d[\d,]*\.?\d*(?![\w])", text) if n.replace(",", "").rstrip(".") not in shown]


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_a_lesson_ends_with_questions_to_answer_in_your_own_words(path: Path):
    """Before "What to remember": 3-6 open questions, a cell for the learner's answers, then the model answers,
    folded, one per question. Every number a model answer quotes is one the lesson shows (an output or its text)."""
    cells = json.loads(path.read_text())["cells"]
    tagged = [i for i, c in enumerate(cells) if CHECK_YOURSELF in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 3 and tagged == list(range(tagged[0], tagged[0] + 3)), (
        f"{path.name}: three consecutive markdown cells tagged '{CHECK_YOURSELF}': the questions, your answers, the "
        f"model answers (found {tagged})")
    questions, answers, model = (source(cells[i]) for i in tagged)
    remember = next(i for i, c in enumerate(cells) if "## What to remember" in source(c))
    assert questions.startswith("## Check yourself") and tagged[-1] < remember, path.name
    numbered = [len(re.findall(r"^\d+\. ", text, flags=re.M)) for text in (questions, answers, model)]
    assert 3 <= numbered[0] <= 6 and len(set(numbered)) == 1, (
        f"{path.name}: as many answer slots and model answers as questions (3 to 6): {numbered}")
    assert model.startswith("<details>") and model.rstrip().endswith("</details>"), f"{path.name}: fold the answers"
    shown = " ".join(source(c) for i, c in enumerate(cells) if i not in tagged) + " ".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))
    typed = numbers_not_shown(re.sub(r"^\d+\. ", "", model, flags=re.M), shown.replace(",", ""))
    assert not typed, f"{path.name}: model answers quote numbers the lesson never shows: {typed}"
    words = sum(len(text.split()) for text in prose(path, check_yourself=True))
    assert words <= MAX_CHECK_YOURSELF_WORDS, (
        f"{path.name}: Check yourself holds {words} words, over {MAX_CHECK_YOURSELF_WORDS}")
