"""The learner's workspace: clean copies of the lessons, where no stored output answers a prediction.

notebooks/ keeps every lesson with its outputs, for readers (on GitHub, say) and for nbval, which checks
them. A learner who works in those copies reads each measured result before predicting it, so `make lab`
opens workspace/ instead: the same lessons with every output cleared, as fast.ai ships its "clean"
notebooks beside the full ones. workspace/ sits beside notebooks/ (its cells' relative paths, such as
../bench, still hold) and git ignores it.

A copy is made once and then belongs to the learner. When a lesson changes upstream (a `git pull`), a
copy the learner never saved is replaced by the new lesson; one the learner changed stays as it is, and
the new lesson is offered beside it as NN_name.updated.ipynb.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from minicb.course.predictions import ANSWER_TAG, WORKSPACE
from minicb.course.predictions import WORKSPACE_MANIFEST as MANIFEST   # lesson file -> digest of the copy it was given

LESSON_GLOBS = ("[0-9][0-9]_*.ipynb", "[0-9][0-9][a-z]_*.ipynb")   # NN_topic, and NNb_topic (a lesson split in two)
STILL_TAG = "still"   # a code cell tagged so draws a still of the widget above it (minicb.viz's save_png and stills)
UPDATED_SUFFIX = ".updated.ipynb"


def clean_notebook(text: str) -> str:
    """The notebook with every output, execution count and stored widget state removed, the answers to its
    predictions folded away (course.reveal shows each once the learner has predicted), and each widget's
    still left out (the widget itself is there, live)."""
    notebook = json.loads(text)
    notebook["cells"] = [cell for cell in notebook["cells"] if not is_answer(cell) and not is_still(cell)]
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    notebook.get("metadata", {}).pop("widgets", None)
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def lesson_files(notebooks: Path) -> list[Path]:
    """The lessons in `notebooks`, in course order: 00_..., 06_..., 06b_..., 07_... ("_" sorts before "b")."""
    return sorted(path for pattern in LESSON_GLOBS for path in notebooks.glob(pattern))


def is_answer(cell: dict) -> bool:
    """A prediction's answer (minicb.course.predictions): folded away until course.reveal shows it."""
    return any(tag.startswith(ANSWER_TAG) for tag in cell.get("metadata", {}).get("tags", []))


def is_still(cell: dict) -> bool:
    """A still picture of the widget just above it, for readers without a live kernel (on GitHub): the
    workspace has a kernel, so its copy keeps the widget alone."""
    return STILL_TAG in cell.get("metadata", {}).get("tags", [])


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class WorkspaceReport:
    folder: Path
    created: tuple[str, ...]    # lessons copied for the first time
    refreshed: tuple[str, ...]  # changed upstream, and the learner's copy was untouched: replaced
    offered: tuple[str, ...]    # changed upstream over a copy the learner changed: NN_name.updated.ipynb beside it

    def summary(self) -> str:
        lines = [f"Your workspace: {self.folder.resolve()} (work here; notebooks/ keeps the lessons with their outputs)"]
        if self.created:
            lines.append(f"  new, outputs cleared: {', '.join(self.created)}")
        if self.refreshed:
            lines.append(f"  updated (you had not changed them): {', '.join(self.refreshed)}")
        for name in self.offered:
            updated = name.removesuffix(".ipynb") + UPDATED_SUFFIX
            lines.append(f"  {name} changed upstream and you have edited yours: yours is kept, the new one "
                         f"is {updated} beside it")
        return "\n".join(lines)


def make_workspace(notebooks: Path, workspace: Path) -> WorkspaceReport:
    """Bring `workspace` up to date with the lessons in `notebooks`, never overwriting a learner's edit."""
    workspace.mkdir(parents=True, exist_ok=True)
    manifest_path = workspace / MANIFEST
    manifest: dict[str, str] = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    created, refreshed, offered = [], [], []
    for lesson in lesson_files(notebooks):
        clean = clean_notebook(lesson.read_text())
        copy, updated = workspace / lesson.name, workspace / (lesson.stem + UPDATED_SUFFIX)
        if not copy.exists():
            created.append(lesson.name)
        elif manifest.get(lesson.name) == digest(clean):
            updated.unlink(missing_ok=True)   # an offer the learner has seen, now the same as their base
            continue
        elif digest(copy.read_text()) == manifest.get(lesson.name):
            refreshed.append(lesson.name)
        else:
            offered.append(lesson.name)
            updated.write_text(clean)
            continue
        copy.write_text(clean)
        manifest[lesson.name] = digest(clean)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return WorkspaceReport(workspace, tuple(created), tuple(refreshed), tuple(offered))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="the lessons, with outputs")
    parser.add_argument("--workspace", type=Path, default=Path(WORKSPACE), help="the learner's copies")
    args = parser.parse_args(argv)
    print(make_workspace(args.notebooks, args.workspace).summary())


if __name__ == "__main__":
    main()
