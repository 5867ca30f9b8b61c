"""Smoke suite: WebArena-format tasks, a scripted reference agent, the benchmark's evaluators, reports."""
from envctl.smoke.runner import SiteSummary, SmokeResult, TaskResult, run_smoke
from envctl.smoke.tasks import Task, TaskConfigError, bundled_sets, load_task_set

__all__ = ["SiteSummary", "SmokeResult", "Task", "TaskConfigError", "TaskResult", "bundled_sets",
           "load_task_set", "run_smoke"]
