"""The graders' own tests import the graders from tests/exercises, as those tests import grading.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "exercises"))
