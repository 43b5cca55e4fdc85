"""Lesson 07's task, graded on the simulator with the implementation MINICB_IMPL picks."""
from __future__ import annotations

from minicb import course
from minicb.config import EngineConfig
from minicb.slo import SloTarget, grade_slo

mine = course.lesson("lesson07_slo")


def test_lesson07_task1_your_configuration_meets_the_slo():
    config = mine.slo_config()
    EngineConfig(**config)   # a misspelt or invalid knob fails here, by name
    report = grade_slo(config)
    target = SloTarget()
    assert report.ttft_p99_s <= target.ttft_p99_s, str(report)
    assert report.itl_p99_s <= target.itl_p99_s, str(report)
    assert report.rejected <= target.max_rejected_fraction * (report.served + report.rejected), str(report)
    assert report.met
