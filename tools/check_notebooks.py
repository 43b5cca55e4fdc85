"""Check that the course notebooks' stored outputs are fresh, or refresh them.

    python tools/check_notebooks.py                 # execute every notebook, compare with stored outputs
    python tools/check_notebooks.py NN_x.ipynb ...  # only these
    python tools/check_notebooks.py --write [...]   # execute and save the notebooks with fresh outputs

Each notebook runs with nbclient in a fresh python3 kernel (the venv's), with MINICB_IMPL=solutions and
notebooks/ as the working directory, as nbval runs it under `make test`. A code cell is compared unless
its first line is `# NBVAL_IGNORE_OUTPUT`; the comparison covers stream text and text/plain results
(images, HTML, widgets and execution counts are ignored). Exits non-zero naming each stale cell.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
IGNORE = "# NBVAL_IGNORE_OUTPUT"
# A cell that runs a learner's task: run here under the reference, its output would be the task's answer, so
# the stored notebook keeps none (tests/test_notebooks_fresh.py checks the tag on every such cell).
YOURS = "yours"


def runs_your_task(cell) -> bool:
    return YOURS in cell.get("metadata", {}).get("tags", [])


def ignored(cell) -> bool:
    return cell.source.lstrip().startswith(IGNORE) or runs_your_task(cell)


def comparable(outputs) -> list[tuple[str, str]]:
    """The parts of a cell's outputs that must not change: stream text (streams merged per name) and
    text/plain results."""
    parts: list[tuple[str, str]] = []
    for out in outputs:
        if out.output_type == "stream":
            if parts and parts[-1][0] == out.name:
                parts[-1] = (out.name, parts[-1][1] + out.text)
            else:
                parts.append((out.name, out.text))
        elif out.output_type in ("execute_result", "display_data"):
            if "application/vnd.jupyter.widget-view+json" in out.get("data", {}):
                continue
            text = out.get("data", {}).get("text/plain")
            if text is not None:
                parts.append(("text/plain", text))
        elif out.output_type == "error":
            parts.append(("error", f"{out.ename}: {out.evalue}"))
    return parts


def render(parts: list[tuple[str, str]]) -> list[str]:
    return [f"[{kind}] {line}" for kind, text in parts for line in text.splitlines()]


def execute(path: Path, timeout: int = 600):
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    os.environ["MINICB_IMPL"] = "solutions"   # the kernel inherits this process's environment
    # No widget state in the file: it is large, changes every run, and the still images show the views.
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    # As JupyterLab writes them when the lesson opens (nbclient has set language_info): stored any other
    # way, opening a lesson would mark it modified before the learner has done anything.
    spec = KernelSpecManager().get_kernel_spec("python3")
    nb.metadata.kernelspec = {"display_name": spec.display_name, "language": spec.language, "name": "python3"}
    return nb


def diff(stored, fresh, name: str) -> list[str]:
    problems = []
    old_cells = [c for c in stored.cells if c.cell_type == "code"]
    new_cells = [c for c in fresh.cells if c.cell_type == "code"]
    for i, (old, new) in enumerate(zip(old_cells, new_cells)):
        if ignored(new):
            continue
        a, b = comparable(old.get("outputs", [])), comparable(new.get("outputs", []))
        if a != b:
            first = new.source.splitlines()[0] if new.source else ""
            diff = list(difflib.unified_diff(render(a), render(b), "stored", "fresh", lineterm="", n=0))
            changed = "\n".join(diff[2:12])   # past the two header lines, the first ten changed lines
            problems.append(f"{name}: code cell {i} ({first[:60]!r}) is stale:\n{changed}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", help="notebook files (default: every notebooks/*.ipynb)")
    ap.add_argument("--write", action="store_true", help="save the notebooks with fresh outputs")
    args = ap.parse_args(argv)
    paths = [Path(p).resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("*.ipynb"))
    problems: list[str] = []
    for path in paths:
        t0 = time.perf_counter()
        stored = nbformat.read(path, as_version=4)
        try:
            fresh = execute(path)
        except Exception as exc:   # a cell raised: the notebook does not run top to bottom
            problems.append(f"{path.name}: failed to run: {exc}")
            print(f"{path.name}: FAILED ({time.perf_counter() - t0:.0f} s)")
            continue
        took = time.perf_counter() - t0
        if args.write:
            for cell in fresh.cells:
                if runs_your_task(cell):
                    cell.outputs, cell.execution_count = [], None
            nbformat.write(fresh, path)
            print(f"{path.name}: written ({took:.0f} s)")
        else:
            found = diff(stored, fresh, path.name)
            problems += found
            print(f"{path.name}: {'STALE' if found else 'fresh'} ({took:.0f} s)")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
