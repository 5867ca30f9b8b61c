"""Smoke reports: ``report.json``, a self-contained ``report.html`` (screenshots inlined), a text table."""
from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from envctl.smoke.results import SmokeResult, TaskResult

_COLORS = {"pass": "#1a7f37", "fail": "#cf222e", "skip": "#9a6700", "gap": "#6e40c9"}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def write_reports(result: SmokeResult, report_dir: Path) -> dict[str, Path]:
    """Write screenshots, report.json and report.html under ``report_dir``; return their paths."""
    report_dir.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    data["report_dir"] = str(report_dir)
    for task, tj in zip(result.tasks, data["tasks"]):
        for step, sj in zip(task.steps, tj["steps"]):
            if step.screenshot:
                rel = Path("screenshots") / _safe(task.task_id) / f"{step.index:02d}.jpg"
                (report_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                (report_dir / rel).write_bytes(step.screenshot)
                sj["screenshot"] = str(rel)
    json_path = report_dir / "report.json"
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    html_path = report_dir / "report.html"
    html_path.write_text(render_html(result), encoding="utf-8")
    return {"json": json_path, "html": html_path}


def render_html(result: SmokeResult) -> str:
    e = html.escape
    c = result.counts
    rows = "".join(
        f"<tr><td>{e(s.site)}</td><td>{s.passed}</td><td>{s.failed}</td><td>{s.skipped}</td><td>{s.gaps}</td>"
        f"<td>{s.elapsed_s:.1f}s</td></tr>"
        for s in result.per_site())
    tasks = "".join(_task_html(t) for t in result.tasks)
    verdict = "PASS" if result.ok else "FAIL"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>envctl smoke {e(result.task_set)}: {verdict}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}
.badge{{color:#fff;padding:2px 8px;border-radius:4px;font-weight:bold}}
details{{margin:0.6em 0;border:1px solid #ddd;border-radius:6px;padding:0.4em 0.8em}}
img{{max-width:560px;border:1px solid #ccc;display:block;margin:4px 0}} code{{word-break:break-all}}
</style></head><body>
<h1>envctl smoke — {e(result.task_set or "tasks")}: <span class="badge" style="background:{_COLORS['pass' if result.ok else 'fail']}">{verdict}</span></h1>
<p>Started {e(result.started_at)}; wall time {result.wall_s:.1f}s; {c['pass']} passed, {c['fail']} failed, {c['skip']} skipped, {c['gap']} not answerable by the flavor's data (gap).</p>
<h2>Per site</h2>
<table><tr><th>site</th><th>pass</th><th>fail</th><th>skip</th><th>gap</th><th>time</th></tr>{rows}</table>
<h2>Tasks</h2>{tasks}
</body></html>
"""


def _task_html(t: TaskResult) -> str:
    e = html.escape
    checks = "".join(
        f"<tr><td>{e(str(ch['name']))}</td><td>{'skip' if ch['score'] is None else ch['score']}</td>"
        f"<td><code>{e(str(ch['detail']))}</code></td></tr>" for ch in t.checks)
    steps = []
    for s in t.steps:
        img = (f'<img alt="step {s.index}" src="data:image/jpeg;base64,{base64.b64encode(s.screenshot).decode()}">'
               if s.screenshot else "")
        err = f"<br><b>error:</b> {e(s.error)}" if s.error else ""
        steps.append(f"<li><code>{e(s.action)}</code> → <code>{e(s.url)}</code> ({s.elapsed_s:.2f}s){err}{img}</li>")
    tags = " negative control" if t.negative_control else ""
    tags += "" if t.verified is None else (" verified" if t.verified else " unverified recipe")
    return f"""<details{' open' if t.status == 'fail' else ''}><summary><span class="badge" style="background:{_COLORS.get(t.status, '#555')}">{t.status}</span>
 <b>{e(t.task_id)}</b> [{e('+'.join(t.sites))}] {e(t.intent)} <i>{e(tags)}</i> — {t.elapsed_s:.1f}s</summary>
<p><b>reason:</b> {e(t.reason)}<br><b>answer:</b> <code>{e(t.answer)}</code><br><b>final URL:</b> <code>{e(t.final_url)}</code></p>
<table><tr><th>check</th><th>score</th><th>detail</th></tr>{checks}</table>
<ol start="0">{''.join(steps)}</ol></details>
"""


def format_table(result: SmokeResult) -> str:
    """A plain-text per-site table plus failing tasks, for terminals and closing notes."""
    gaps = result.counts["gap"] > 0  # a column only when the flavor's data cannot answer some task
    lines = [f"{'site':<28} {'pass':>4} {'fail':>4} {'skip':>4} " + (f"{'gap':>4} " if gaps else "") + f"{'time':>8}"]
    for s in result.per_site():
        lines.append(f"{s.site:<28} {s.passed:>4} {s.failed:>4} {s.skipped:>4} " + (f"{s.gaps:>4} " if gaps else "")
                     + f"{s.elapsed_s:>7.1f}s")
    c = result.counts
    lines.append(f"{'total':<28} {c['pass']:>4} {c['fail']:>4} {c['skip']:>4} " + (f"{c['gap']:>4} " if gaps else "")
                 + f"{result.wall_s:>7.1f}s wall")
    for t in result.tasks:
        if t.status != "pass":
            lines.append(f"  {t.status.upper()} {t.task_id}: {t.reason}")
    lines.append("smoke: " + ("PASS" if result.ok else "FAIL"))
    return "\n".join(lines)
