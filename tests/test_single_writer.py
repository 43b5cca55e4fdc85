"""Request state has one writer: a request's status, its computed tokens and its metrics are assigned only
inside minicb/scheduler/. Everything else (the engine, the runners, the server, the lessons' parts, a
learner's exercises, the notebooks' code) reads them, and hands decisions to the scheduler, which applies them.
This walks the code's syntax trees, so it catches an assignment however rarely it runs."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WRITER = ROOT / "minicb" / "scheduler"
GUARDED = {"status", "num_computed_tokens", "metrics"}   # attributes of a request only its scheduler assigns
CODE = [p for folder in ("minicb", "exercises", "solutions", "kernels", "bench", "tools")
        for p in sorted((ROOT / folder).rglob("*.py")) if WRITER not in p.parents]


def guarded_name(target: ast.expr) -> str | None:
    """The guarded attribute an assignment target writes: x.status, x.num_computed_tokens, x.metrics, or
    anything under x.metrics (x.metrics.first_token_time, x.metrics.token_times[0])."""
    node = target
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr in GUARDED:
            return node.attr
        node = node.value
    return None


def writes(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in GUARDED):
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
        for target in targets:
            for leaf in (target.elts if isinstance(target, ast.Tuple) else [target]):
                name = guarded_name(leaf)
                if name:
                    found.append((node.lineno, ast.unparse(leaf)))
    return found


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines = [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()
             if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_scheduler_writes_request_state(path):
    found = writes(ast.parse(path.read_text(), str(path)))
    assert not found, (f"{path.relative_to(ROOT)} writes request state that only minicb/scheduler/ may write: "
                       + ", ".join(f"line {line}: {what}" for line, what in found)
                       + ". Return the decision to the scheduler instead, and let it apply it")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_no_lesson_cell_writes_request_state(path):
    found = writes(ast.parse(notebook_code(path)))
    assert not found, f"{path.name} writes request state in a cell: {found}"


def test_the_check_finds_each_kind_of_write():
    source = ("req.status = 1\nreq.metrics.first_token_time = 2\nreq.num_computed_tokens += 3\n"
              "a, r.status = 4, 5\nsetattr(req, 'status', 6)\nreq.metrics.token_times[0] = 7\n"
              "req.output_token_ids = []\nstatus = 8\n")
    assert sorted(line for line, _ in writes(ast.parse(source))) == [1, 2, 3, 4, 5, 6]
