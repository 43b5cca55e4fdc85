"""Each kind of request state has one writer. Request progress (its status and reason, its computed tokens, its
arrival order, its prefix hashes and its metrics) is assigned only in minicb/scheduler/; output tokens and text
only in minicb/scheduler/output_processor.py, which the scheduler calls. Everything else (the engine, the
runners, the server, the lessons' parts, a learner's exercises, the notebooks' code) reads them. This walks the
code's syntax trees, so it catches a write however rarely it runs."""
from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEDULER = ROOT / "minicb" / "scheduler"
OUTPUTS = SCHEDULER / "output_processor.py"
PROGRESS = {"status", "reason", "num_computed_tokens", "arrival_index", "block_hashes", "num_cached_tokens", "metrics"}
TOKENS = {"output_token_ids", "text", "detok_offsets"}
MUTATORS = {"append", "extend", "insert", "pop", "clear", "remove", "update", "setdefault"}
FOLDERS = ("minicb", "exercises", "solutions", "kernels", "bench", "tools")


def allowed(path: Path) -> set[str]:
    """The kinds of request state this file may write."""
    if path == OUTPUTS:
        return TOKENS
    return PROGRESS if SCHEDULER in path.parents else set()


def guarded_name(target: ast.expr) -> str | None:
    """The request attribute a write reaches: x.status, or anything under it (x.metrics.token_times[0]). An
    object's own attributes (self.status) are not a request's."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return None
    node, found = target, None
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr in PROGRESS | TOKENS:
            found = node.attr
        node = node.value
    return found


def writes(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, what, attribute) for each assignment to, or mutating call on, a request attribute."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in PROGRESS | TOKENS):
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})", node.args[1].value))
        for target in targets:
            for leaf in (target.elts if isinstance(target, ast.Tuple) else [target]):
                name = guarded_name(leaf)
                if name:
                    found.append((node.lineno, ast.unparse(node if isinstance(node, ast.Call) else leaf), name))
    return found


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines = [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()
             if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def test_each_kind_of_request_state_has_one_writer():
    wrong = []
    for path in [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]:
        for line, what, name in writes(ast.parse(path.read_text(), str(path))):
            if name not in allowed(path):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        wrong += [f"{path.name}: {what}" for _, what, _ in writes(ast.parse(notebook_code(path)))]
    assert not wrong, ("request state written outside its writer (progress: minicb/scheduler/; output tokens and "
                       "text: minicb/scheduler/output_processor.py). Return the decision to the scheduler instead:\n"
                       + "\n".join(wrong))


def test_the_check_finds_each_kind_of_write():
    source = ("req.status = 1\nreq.metrics.first_token_time = 2\nreq.num_computed_tokens += 3\n"
              "a, r.status = 4, 5\nsetattr(req, 'status', 6)\nreq.metrics.token_times[0] = 7\n"
              "req.output_token_ids.append(8)\nreq.text += 'a'\nstatus = 9\nself.status = 10\nreq.other = 11\n")
    assert sorted((line, name) for line, _, name in writes(ast.parse(source))) == [
        (1, "status"), (2, "metrics"), (3, "num_computed_tokens"), (4, "status"), (5, "status"), (6, "metrics"),
        (7, "output_token_ids"), (8, "text")]
    scheduler, outputs = SCHEDULER / "continuous.py", OUTPUTS
    assert allowed(scheduler) == PROGRESS and allowed(outputs) == TOKENS and not allowed(ROOT / "minicb" / "engine.py")
