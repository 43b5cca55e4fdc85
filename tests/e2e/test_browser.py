"""End to end in a real browser: JupyterLab runs lessons 01 and 04, and the widgets play in Chromium; the
playground re-simulates when a control moves. Lesson 01 runs as a learner meets it: a clean workspace copy
(minicb.course.workspace) whose first prediction is answered, and the reveal must name that answer.

The kernel-side widget tests (tests/test_viz.py) cannot see the browser half: the widget manager, the
Play button's jslink to the slider, and the HTML views re-rendered as the slider moves. This test drives
all of it the way a learner does: open the lesson, Run > Run All Cells, press Play, and read the SVG the
widgets draw (data-* attributes and the .minicb-counters text) at several moments. The playground runs in a
one-cell notebook the test writes under build/e2e/: it picks another value in a dropdown, pins a run, ticks a
checkbox, and reads the figures the kernel sends back.

It also checks what a learner sees before running anything: every lesson opens without being marked
modified, and the figure helpers show pictures, not the text form of a matplotlib Figure.

Needs Debian's /usr/bin/chromium (or MINICB_CHROMIUM) and the playwright package (`make e2e-deps`);
without either it skips at once. Screenshots and the server log go to build/e2e/.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("MINICB_CHROMIUM", "/usr/bin/chromium")
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"no Chromium at {CHROMIUM} (make e2e installs Debian's chromium)", allow_module_level=True)
if importlib.util.find_spec("playwright") is None:
    pytest.skip("playwright is not installed (make e2e-deps installs it)", allow_module_level=True)

from playwright.sync_api import Page, sync_playwright  # noqa: E402 (only once the skips above let the module run)

from minicb.course.predictions import STORE_NAME, STORE_VARIABLE  # noqa: E402
from minicb.course.workspace import lesson_files, make_workspace  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "e2e"
NOTEBOOKS = REPO / "notebooks"
JUPYTER = Path(sys.executable).parent / "jupyter"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
RUN_ALL_TIMEOUT_MS = 240_000   # a lesson runs all its cells in about a minute on 2 shared cores
LESSONS = ["01_static_batching.ipynb", "04_paged_kv_cache.ipynb"]
PLAYGROUND_REQUESTS = 100   # a run of the playground takes about a second on 2 shared cores
WIDGET_ERRORS = ["Error displaying widget", "Failed to load model class", "widget manager",
                 "Could not create a model", "Model not found"]

# Lab settings for a run nobody watches: no news toast, and no autosave (the lessons in notebooks/ must
# stay exactly as committed; their fresh outputs live only in the browser).
USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    # Every cell in the page, not only those scrolled into view, so that a cell's output can be read anywhere.
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server on a free loopback port, its config, runtime and data dirs under build/e2e/."""

    def __init__(self) -> None:
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        home = BUILD / "jupyter"
        # The kernels keep predictions in the workspace's own store, not in one the test process was given.
        env = {name: value for name, value in os.environ.items() if name != STORE_VARIABLE}
        env.update(MINICB_IMPL="solutions", JUPYTER_CONFIG_DIR=str(home / "config"),
                   JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTER_DATA_DIR=str(home / "data"),
                   JUPYTERLAB_SETTINGS_DIR=str(home / "config" / "lab" / "user-settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), PYTHONUNBUFFERED="1")
        for name, settings in USER_SETTINGS.items():
            path = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(settings))
        self.log_path = BUILD / "jupyter.log"
        self.log = open(self.log_path, "w")   # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            [str(JUPYTER), "lab", "--no-browser", "--allow-root", f"--ServerApp.token={self.token}",
             f"--port={self.port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
             # The repository, not notebooks/: the test's own notebooks live under build/e2e/.
             f"--notebook-dir={REPO}", "--LabApp.news_url=None"],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str, timeout: float = 5):
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return json.loads(r.read() or b"null")

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                self.get("/api/status")
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer in {timeout:.0f} s:\n{self.log_text()}")

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text()[-4000:]

    def stop(self) -> None:
        """SIGTERM by PID: the server shuts its kernels down, then exits. SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def lab():
    BUILD.mkdir(parents=True, exist_ok=True)
    before = {NOTEBOOKS / name: (NOTEBOOKS / name).read_bytes() for name in LESSONS}
    server = Lab()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
    changed = [p.name for p, data in before.items() if p.read_bytes() != data]
    assert not changed, f"the browser run changed committed notebooks: {changed}"


@pytest.fixture(scope="module")
def browser(lab):
    with sync_playwright() as p:
        # launch() gives every run a fresh, temporary user-data-dir, removed on close.
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Lesson:
    """One lesson open in its own browser page, with every page error and console error recorded."""

    def __init__(self, browser, lab: Lab, notebook: str) -> None:
        self.context = browser.new_context(viewport={"width": 1500, "height": 1000})
        self.page: Page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.errors: list[str] = []
        self.console: list[str] = []
        self.ran = False
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("console", lambda m: self.console.append(m.text) if m.type == "error" else None)
        path = Path(notebook).resolve().relative_to(REPO).as_posix()
        self.page.goto(f"{lab.url}/lab/tree/{path}?reset&token={lab.token}")
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)

    def run_all(self, widget_selector: str) -> None:
        """Run > Run All Cells once the kernel is up, then wait for the widget and for the last cell to finish."""
        page = self.page
        # The kernel named in the notebook's metadata is up and idle ("No Kernel | Initializing" before):
        # Run All before that would open the "Select Kernel" dialog.
        page.get_by_text(re.compile(r"^Python 3 \(ipykernel\) \| Idle$")).wait_for(timeout=90_000)
        page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        self.ran = True
        page.wait_for_selector(f".jp-OutputArea-output {widget_selector}", timeout=RUN_ALL_TIMEOUT_MS)
        page.wait_for_function(
            "() => ![...document.querySelectorAll('.jp-InputPrompt')].some(e => e.textContent.includes('*'))",
            timeout=60_000)
        self.check()

    def check(self) -> None:
        """No page errors, no widget errors, no cell that raised."""
        body = self.page.locator(".jp-Notebook").inner_text()
        problems = [f"'{e}' shown in the notebook" for e in WIDGET_ERRORS if e.lower() in body.lower()]
        problems += [f"console error: {m}" for m in self.console
                     if any(e.lower() in m.lower() for e in WIDGET_ERRORS)]
        errors = self.page.locator("[data-mime-type='application/vnd.jupyter.error']")
        if errors.count():
            problems.append("a cell raised:\n" + errors.first.inner_text()[-2000:])
        # Without a widget manager a widget falls back to its text form: ipywidgets' "VBox(children=(...", or
        # minicb's "[SeatOccupancy: an interactive widget. ...]" (which the stored outputs show, before a run).
        if re.search(r"^(VBox\(children=|\[\w+: an interactive widget)", body, re.MULTILINE) and self.ran:
            problems.append("a widget shown as text: no widget manager in the page")
        assert not (problems + self.errors), "\n".join(problems + self.errors)

    def press_play(self, widget: str) -> None:
        box = self.page.locator(f".widget-vbox:has({widget})").last
        box.scroll_into_view_if_needed()
        box.locator(".widget-play button").first.click()
        # Play at the last step starts the run over: wait until the views have gone back to the start.
        self.page.wait_for_function(
            """sel => [...document.querySelectorAll(sel + ' .minicb-counters')].every(c => {
                const m = c.textContent.match(/step (\\d+)\\/(\\d+)/); return m && +m[1] < +m[2]; })""",
            arg=widget, timeout=60_000)

    def sample(self, widget: str, enough=lambda samples: True, every: float = 0.25,
               limit_s: float = 90) -> list[dict]:
        """What the widget's views show, counters and per-cell data, every `every` seconds until `enough(samples)`
        holds. How many frames a loaded machine draws per second varies, so the test waits for the frames it
        needs (up to a generous liveness limit) instead of counting those drawn in a fixed time."""
        script = """sel => [...document.querySelectorAll(sel)].map(v => ({
            counters: v.querySelector('.minicb-counters')?.textContent ?? '',
            cells: [...v.querySelectorAll('rect')].filter(r => r.attributes.length && r.dataset &&
                   Object.keys(r.dataset).length).map(r => ({...r.dataset, fill: r.getAttribute('fill')})),
        }))"""
        samples, deadline = [], time.monotonic() + limit_s
        while True:
            samples.append({"t": time.monotonic(), "views": self.page.evaluate(script, widget)})
            if enough(samples) or time.monotonic() > deadline:
                return samples
            time.sleep(every)

    def screenshot(self, widget: str, name: str) -> Path:
        path = BUILD / name
        self.page.locator(f".widget-vbox:has({widget})").last.screenshot(path=str(path))
        return path


@contextlib.contextmanager
def open_lesson(browser, lab: Lab, notebook: str | Path):
    """The lesson's page; on a failure its full-page screenshot goes to build/e2e/failure_<notebook>.png."""
    lesson = Lesson(browser, lab, notebook)
    try:
        yield lesson
        lesson.check()
    except BaseException:
        lesson.page.screenshot(path=str(BUILD / f"failure_{Path(notebook).stem}.png"), full_page=True)
        raise
    finally:
        lesson.context.close()   # no beforeunload: the unsaved notebook is simply dropped


def step_of(counters: str) -> tuple[int, int]:
    match = re.search(r"step (\d+)/(\d+)", counters)
    assert match, f"no 'step k/n' in the counters: {counters!r}"
    return int(match[1]), int(match[2])


PREDICTION = "01.static_utilization"   # lesson 01's first: (c) about 30%, and the simulator measures 28%


@pytest.fixture()
def answered_workspace() -> Path:
    """A learner's workspace under build/e2e/, made as `make lab` makes one, with lesson 01's first prediction
    answered "c" in its copy, as a learner types it."""
    workspace = BUILD / "workspace"
    shutil.rmtree(workspace, ignore_errors=True)
    make_workspace(NOTEBOOKS, workspace)
    copy = workspace / LESSONS[0]
    notebook = json.loads(copy.read_text())
    cell = next(c for c in notebook["cells"] if f'course.predict("{PREDICTION}", ...)' in "".join(c["source"]))
    cell["source"] = [f'course.predict("{PREDICTION}", "c")\n']
    copy.write_text(json.dumps(notebook, indent=1))
    return copy


def test_lesson01_seat_occupancy_plays_and_its_prediction_is_revealed(lab, browser, answered_workspace):
    with open_lesson(browser, lab, answered_workspace) as lesson:
        lesson.run_all(".minicb-seats")
        shown = lesson.page.locator(".jp-Notebook").inner_text()
        assert "Recorded: (c) about 30%. Now run the next cell." in shown
        assert "You said (c) about 30%; measured 28%: right." in shown, "the reveal names the answer and judges it"
        assert "The answer." in shown and "28% at 8 seats" in shown, "the folded answer comes with the reveal"
        stored = json.loads((answered_workspace.parent / STORE_NAME).read_text())
        assert stored[PREDICTION]["answer"] == "c" and stored[PREDICTION]["right"] is True, stored
        views = lesson.page.locator(".widget-vbox:has(.minicb-seats) .minicb-seats")
        assert views.count() == 2, "SeatOccupancy shows two runs side by side"
        end = lesson.sample(".minicb-seats")[0]["views"]
        assert all(step_of(v["counters"])[0] == step_of(v["counters"])[1] for v in end), "starts at the last step"
        assert all(v["cells"] for v in end), "the seat grid has cells"

        lesson.press_play(".minicb-seats")
        samples = lesson.sample(".minicb-seats", lambda samples: all(
            len({step_of(s["views"][i]["counters"])[0] for s in samples}) >= 4 for i in range(2)))
        lesson.screenshot(".minicb-seats", "lesson01_seats.png")
        runs = [[s["views"][i] for s in samples] for i in range(2)]
        for i, frames in enumerate(runs):
            steps = [step_of(f["counters"])[0] for f in frames]
            counts = [len(f["cells"]) for f in frames]
            assert len(set(steps)) >= 3, f"view {i}: the step did not advance while playing: {steps}"
            assert steps == sorted(steps), f"view {i}: steps went backwards while playing: {steps}"
            assert len(set(counts)) >= 3 and counts == sorted(counts), f"view {i}: cells drawn per frame {counts}"
            # The grid really changes, not only the caption: a later frame holds cells the first did not.
            first = {(c["seat"], c["step"], c["request"], c["fill"]) for c in frames[0]["cells"]}
            later = {(c["seat"], c["step"], c["request"], c["fill"]) for c in frames[-1]["cells"]}
            assert later > first, f"view {i}: a later frame should extend the earlier one"
            # Within a frame, a cell's colour says who holds the seat: one request, one colour.
            fills = {}
            for c in frames[-1]["cells"]:
                if c["request"] and c["phase"] == "decode":
                    fills.setdefault(c["request"], set()).add(c["fill"])
            assert fills and all(len(f) == 1 for f in fills.values()), f"view {i}: decode colours {fills}"
            assert len(fills) > 1, f"view {i}: several requests drawn in their own colours"


def test_lesson04_kv_block_map_plays(lab, browser):
    with open_lesson(browser, lab, NOTEBOOKS / LESSONS[1]) as lesson:
        lesson.run_all(".minicb-kvblocks")
        end = lesson.sample(".minicb-kvblocks")[0]["views"][0]
        states = [c["state"] for c in end["cells"]]
        assert len(states) == 48, f"the pool of 48 blocks is drawn, got {len(states)}"
        assert states.count("free") == 48, "at the end of the run every block is back in the pool"

        lesson.press_play(".minicb-kvblocks")
        samples = lesson.sample(".minicb-kvblocks", lambda samples: len(
            {step_of(s["views"][0]["counters"])[0] for s in samples}) >= 4)
        lesson.screenshot(".minicb-kvblocks", "lesson04_kvblocks.png")
        seen = []
        for s in samples:
            view = s["views"][0]
            states = [c["state"] for c in view["cells"]]
            used, reserved, free = states.count("used"), states.count("reserved"), states.count("free")
            # The caption and the drawn blocks must tell the same story.
            numbers = re.search(r"used (\d+) · reserved-empty (\d+) · free (\d+)", view["counters"])
            assert numbers and tuple(map(int, numbers.groups())) == (used, reserved, free), view["counters"]
            seen.append((step_of(view["counters"])[0], used, free))
        steps = [s for s, _, _ in seen]
        assert len(set(steps)) >= 3 and steps == sorted(steps), f"the step did not advance while playing: {steps}"
        assert len({u for _, u, _ in seen}) >= 2 and len({f for _, _, f in seen}) >= 2, \
            f"used and free block counts should change as steps advance: {seen}"
        assert any(u > 0 for _, u, _ in seen), f"blocks are in use while the run plays: {seen}"


def write_notebook(path: Path, source: str) -> Path:
    """A one-cell notebook with the kernelspec the lessons carry (without one, Lab asks which kernel)."""
    kernelspec = json.loads((NOTEBOOKS / LESSONS[0]).read_text())["metadata"]["kernelspec"]
    cell = {"cell_type": "code", "execution_count": None, "id": "cell-0", "metadata": {}, "outputs": [],
            "source": source}
    path.write_text(json.dumps({"cells": [cell], "metadata": {"kernelspec": kernelspec}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


def figures(page: Page) -> dict[str, dict[str, float]]:
    """run ("current", "pinned") -> metric -> the number the playground's table shows (its data-value)."""
    cells = page.evaluate("""() => [...document.querySelectorAll('.minicb-playground td.minicb-value')]
        .map(td => [td.dataset.run, td.dataset.metric, td.dataset.value])""")
    runs: dict[str, dict[str, float]] = {}
    for run, metric, value in cells:
        runs.setdefault(run, {})[metric] = float(value)
    return runs


def wait_for_new_figures(page: Page, metric: str, old: float) -> None:
    """Until the current run's `metric` shows another value than `old`: the kernel re-ran and redrew."""
    page.wait_for_function(
        """([metric, old]) => { const td = document.querySelector(
               `.minicb-playground td[data-run="current"][data-metric="${metric}"]`);
             return td && td.dataset.value !== old; }""", arg=[metric, repr(old)], timeout=60_000)


def test_playground_reruns_when_a_control_moves(lab, browser):
    from minicb.lab.hardware import PRESETS
    from minicb.viz import PlaygroundSettings, playground_run

    notebook = write_notebook(BUILD / "playground.ipynb",
                              f"from minicb.viz import Playground\nPlayground(num_requests={PLAYGROUND_REQUESTS})")
    with open_lesson(browser, lab, notebook) as lesson:
        page = lesson.page
        lesson.run_all(".minicb-playground")
        first = figures(page)
        assert set(first) == {"current"} and first["current"]["served"] == PLAYGROUND_REQUESTS

        # A dropdown the way a learner uses it: the kernel re-simulates and the table changes.
        box = page.locator(".minicb-playground-widget")
        box.locator(".widget-dropdown", has_text="output lengths").locator("select").select_option(
            label="fixed (32 tokens)")
        wait_for_new_figures(page, "output_tok_per_s", first["current"]["output_tok_per_s"])
        fixed = figures(page)["current"]
        expected = playground_run(PlaygroundSettings(num_requests=PLAYGROUND_REQUESTS, lengths="fixed"),
                                  next(iter(PRESETS.values()))).figures()
        for metric in ("output_tok_per_s", "ttft_p99_s", "itl_p99_s", "goodput_rps"):
            assert fixed[metric] == expected[metric], f"{metric}: the browser shows what the simulator gives"
        lesson.screenshot(".minicb-playground", "playground.png")

        # Pin, then tick a checkbox: the kernel re-runs with it (the table says what changed since the pin)
        # and the pinned run's figures stay beside the new ones.
        box.get_by_role("button", name="pin this run").click()
        page.wait_for_selector('.minicb-playground th:text-is("pinned")')
        box.locator(".widget-checkbox", has_text="chunked prefill").locator("input").check()
        page.wait_for_selector('.minicb-playground :text("enable_chunked_prefill False → True")', timeout=60_000)
        both = figures(page)
        assert both["pinned"] == fixed, "the pinned column keeps the figures of the run that was pinned"
        assert set(both["current"]) == set(fixed)
        lesson.screenshot(".minicb-playground", "playground_pinned.png")


@pytest.mark.parametrize("notebook", [p.name for p in lesson_files(NOTEBOOKS)])
def test_opening_a_lesson_leaves_it_unmodified(lab, browser, notebook):
    """Opening a lesson and starting its kernel must not dirty it: no 'save your changes?' on close,
    and nothing for git to show. (The kernel's language_info, missing cell ids or an old nbformat
    would each be written into the notebook as it opens.)"""
    with open_lesson(browser, lab, NOTEBOOKS / notebook) as lesson:
        page = lesson.page
        page.get_by_text(re.compile(r"^Python 3 \(ipykernel\) \| Idle$")).wait_for(timeout=90_000)
        page.wait_for_timeout(1_000)   # metadata from the kernel's info reply lands just after "Idle"
        tab = page.locator(".lm-TabBar-tab.jp-mod-current", has_text=notebook)
        assert tab.count() == 1, f"the lesson's tab is open: {page.locator('.lm-TabBar-tab').all_inner_texts()}"
        assert "jp-mod-dirty" not in (tab.get_attribute("class") or ""), \
            f"{notebook} is marked modified as soon as it opens"


def test_figures_show_as_pictures(lab, browser):
    """The helpers that return a matplotlib figure (latency_cdf, plot_load_curve) show a PNG in the
    notebook, not "<Figure size 550x340 with 1 Axes>"."""
    notebook = write_notebook(BUILD / "figures.ipynb", "\n".join([
        "from minicb import LLMEngine",
        "from minicb.lab.hardware import PRESETS",
        "from minicb.viz import PlaygroundSettings, latency_cdf, load_curve, plot_load_curve",
        "from minicb.lab.workload import make_workload, run_workload",
        "engine = LLMEngine(device='cpu', simulate=True, max_num_seqs=8)",
        "display(latency_cdf(run_workload(engine, make_workload(24, seed=0), progress=False), labels=['sim']))",
        "cpu = next(iter(PRESETS.values()))",
        "plot_load_curve(load_curve(PlaygroundSettings(num_requests=40), cpu, rates=[5, 20]))"]))
    with open_lesson(browser, lab, notebook) as lesson:
        lesson.run_all("img")
        outputs = lesson.page.locator(".jp-OutputArea-output")
        pictures = lesson.page.locator(".jp-OutputArea-output img[src^='data:image/png']")
        assert pictures.count() == 2, f"two PNG figures, got {pictures.count()}: {outputs.all_inner_texts()}"
        assert all(pictures.nth(i).evaluate("img => img.naturalWidth") > 100 for i in range(2)), "decoded images"
        assert not any("<Figure" in t or "Figure size" in t for t in outputs.all_inner_texts()), \
            "a figure shown as its text form"
