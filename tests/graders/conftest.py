"""The negative controls import the graders from tests/exercises, which pytest puts on sys.path only
when it collects a test there."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "exercises"))
