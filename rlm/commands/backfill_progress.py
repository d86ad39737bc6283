"""``rlm backfill``'s one progress line: rows and bytes written, stages, tasks and an ETA.

Why: Spark's own console bar (``spark.ui.showConsoleProgress``) and the backfill's lines used to
overwrite each other on stderr, and the backfill's stopped after stage 0. So the backfill turns
Spark's bar off (:data:`SPARK_CONF`) and draws one line from one place: every second it reads the
application's stages from Spark's monitoring REST API (``/api/v1/applications/<id>/stages``,
documented and stable across Spark versions; it has the rows and bytes written, which
:class:`pyspark.StatusTracker` does not), falling back to the status tracker (tasks only) when
the UI is disabled. On a terminal the line is redrawn in place (:class:`rlm.commands.readside.Progress`);
otherwise (a log file, CI) a line is printed when a stage finishes, so logs stay short.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from rlm.daemon.pass_summary import human_size

#: set on the backfill's own session: Spark's console bar would fight the line drawn here
SPARK_CONF = {"spark.ui.showConsoleProgress": "false"}


@dataclass(frozen=True)
class Snapshot:
    """Where the job is: stages and tasks seen so far, rows and bytes written by finished tasks."""

    stages_done: int = 0
    stages_running: int = 0
    tasks_done: int = 0
    tasks_total: int = 0
    rows: int = 0
    bytes: int = 0
    exact: bool = True  # False: from the status tracker (no rows/bytes)


def from_stages(stages: list[dict[str, Any]]) -> Snapshot:
    """A snapshot from the REST API's stage list (skipped stages count as neither done nor running)."""
    counted = [s for s in stages if s.get("status") in ("COMPLETE", "ACTIVE", "PENDING", "FAILED")]
    return Snapshot(
        stages_done=sum(1 for s in counted if s["status"] == "COMPLETE"),
        stages_running=sum(1 for s in counted if s["status"] == "ACTIVE"),
        tasks_done=sum(int(s.get("numCompleteTasks", 0)) for s in counted),
        tasks_total=sum(int(s.get("numTasks", 0)) for s in counted),
        rows=sum(int(s.get("outputRecords", 0)) for s in counted),
        bytes=sum(int(s.get("outputBytes", 0)) for s in counted),
    )


def _duration(s: float) -> str:
    n = int(s)
    if n < 120:
        return f"{n}s"
    return f"{n // 60}m{n % 60:02d}s" if n < 7200 else f"{n // 3600}h{n % 3600 // 60:02d}m"


def render(s: Snapshot, elapsed_s: float) -> str:
    """``12,000 rows, 1.2 MiB written; stages 1 done, 1 running; tasks 6/10; ETA 4s``. The ETA
    extrapolates the tasks known so far (later stages are not known yet: it is a lower bound)."""
    eta = "-"
    if 0 < s.tasks_done < s.tasks_total:
        eta = "~" + _duration(elapsed_s * (s.tasks_total - s.tasks_done) / s.tasks_done)
    elif s.tasks_total and s.tasks_done >= s.tasks_total:
        eta = "0s"
    written = f"{s.rows:,} rows, {human_size(s.bytes)} written; " if s.exact else ""
    return (f"{written}stages {s.stages_done} done, {s.stages_running} running; "
            f"tasks {s.tasks_done}/{s.tasks_total}; ETA {eta}")


class StageSource:
    """Reads the job's stages: the REST API when the UI is up, else the status tracker."""

    def __init__(self, spark: Any) -> None:
        sc = spark.sparkContext
        self._tracker = sc.statusTracker()
        url = getattr(sc, "uiWebUrl", None)
        self._url = f"{url}/api/v1/applications/{sc.applicationId}/stages" if url else None

    def snapshot(self) -> Snapshot:
        if self._url is not None:
            try:
                with urllib.request.urlopen(self._url, timeout=5) as r:
                    return from_stages(json.loads(r.read()))
            except (OSError, ValueError):
                self._url = None  # UI gone or answering something else: tasks only from now on
        return self._from_tracker()

    def _from_tracker(self) -> Snapshot:
        """Tasks and stages of this session's jobs (no rows/bytes: the tracker does not have them)."""
        t = self._tracker
        running = set(t.getActiveStageIds())
        ids: set[int] = set(running)
        for job in (t.getJobInfo(j) for j in t.getJobIdsForGroup()):
            if job is not None:
                ids.update(job.stageIds)
        infos = [i for i in (t.getStageInfo(sid) for sid in sorted(ids)) if i is not None]
        done = [i for i in infos
                if i.stageId not in running and i.numTasks and i.numCompletedTasks >= i.numTasks]
        return Snapshot(stages_done=len(done), stages_running=len(running & {i.stageId for i in infos}),
                        tasks_done=sum(i.numCompletedTasks for i in infos),
                        tasks_total=sum(i.numTasks for i in infos), exact=False)


@contextlib.contextmanager
def progress_line(spark: Any, stream: TextIO | None = None, every_s: float = 1.0) -> Iterator[None]:
    """Show the job's progress on ``stream`` (stderr) while the block runs; one line."""
    from rlm.commands.readside import Progress

    out = stream if stream is not None else sys.stderr
    line = Progress("rlm backfill", out, interval_s=0)
    source = StageSource(spark)
    stop = threading.Event()
    t0 = time.monotonic()

    printed = [0]  # stages done at the last printed line (not a terminal)

    def show() -> None:
        snap = source.snapshot()
        text = render(snap, time.monotonic() - t0)
        if line.enabled:
            line.update(text, force=True)
        elif snap.stages_done != printed[0]:  # not a terminal: a line per finished stage
            print(f"rlm backfill: {text}", file=out, flush=True)
            printed[0] = snap.stages_done

    def loop() -> None:
        while not stop.wait(every_s):
            show()

    t = threading.Thread(target=loop, name="backfill-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        show()  # where it ended (a job shorter than one interval still says so)
        line.done()
