"""Smoke suite: WebArena-format tasks, a scripted reference agent, the benchmark's evaluators, reports."""
from envctl.smoke.report import format_table
from envctl.smoke.results import SiteSummary, SmokeResult, TaskResult
from envctl.smoke.runner import run_smoke
from envctl.smoke.sets import load_task_set
from envctl.smoke.tasks import Task, TaskConfigError, bundled_sets

__all__ = ["format_table", "SiteSummary", "SmokeResult", "Task", "TaskConfigError", "TaskResult", "bundled_sets",
           "load_task_set", "run_smoke"]
