"""``rlm iceberg`` on Apache Iceberg's own REST catalog server, the Spark engine, ``iceberg.daemon``.

The workload is test_iceberg's (a tiered topic with two codecs, a committed and an aborted
transaction each larger than a segment; last, its second tiered topic for the tables several
topics share, ``iceberg.shared_tables``); the truth is what a read_committed consumer read from
the broker. The REST catalog is Iceberg's ``RESTCatalogServer`` from Maven Central (one per
session, its warehouse on SeaweedFS); ``rlm iceberg`` reaches it through PyIceberg's ``type: rest``
catalog, configured like any other catalog.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from tests.iceberg import test_iceberg as _base
from tests.iceberg.test_iceberg import (
    Row,
    World,
    _check_equal,
    _check_shared,
    check_spark41_reads,
    run_at_once,
    run_iceberg,
    table_rows,
)
from tests.services.iceberg_rest import IcebergRestCatalog
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]

#: test_iceberg's workload fixture (module scope: built once more for this module)
world = _base.world
#: test_iceberg's second tiered topic (a partition 0 overlapping the first's offsets), on this world
second = _base.second


def _rest_result(world: World, rest: IcebergRestCatalog, name: str) -> dict[str, Any]:
    from rlm.tables import read_ledger

    sync = world.sync(name, catalog=rest.properties)
    ledger = read_ledger(sync.table)
    return {"catalog": rest.properties, "catalog_name": "rlm", "table": sync.identifier,
            "segments": len(ledger.segments), "rows": ledger.rows}


def test_rest_catalog_backfill_equals_a_read_committed_consumer(world: World,
                                                                 iceberg_rest: IcebergRestCatalog) -> None:
    """``rlm iceberg`` configured with ``type: rest`` (Iceberg's REST server, warehouse on S3):
    every lineage segment once, row for row what the consumer read; a rerun adds nothing."""
    cfg = world.config("rest", catalog=iceberg_rest.properties)
    result = run_iceberg(cfg, world.topic, "--from", "earliest")
    ids = world.plan_ids()
    assert result["catalog"]["type"] == "rest" and result["catalog"]["uri"] == iceberg_rest.uri
    assert "s3.secret-access-key" not in result["catalog"]
    assert result["location"].startswith(f"s3://{iceberg_rest.bucket}/")
    assert result["added_segments"] == len(ids) and result["orphan_files"] == 0
    _check_equal(world, {**result, "catalog": iceberg_rest.properties}, ids)
    # a rerun (the same writer code, in process) adds nothing
    r = world.sync("rest", catalog=iceberg_rest.properties).run_once()
    assert (r.added_segments, r.added_rows) == (0, 0)
    assert _rest_result(world, iceberg_rest, "rest")["segments"] == len(ids)
    # the server holds the commits: a fresh client's view of the table names every segment once
    table = load_catalog("other", **iceberg_rest.properties).load_table(result["table"])
    named = [s[1] for snap in table.snapshots()
             for s in json.loads(snap.summary.additional_properties["rlm.segments"])]
    assert sorted(named) == sorted(ids)


@pytest.mark.spark
def test_spark_sql_through_the_iceberg_runtime_on_the_rest_catalog(world: World,
                                                                   iceberg_rest: IcebergRestCatalog) -> None:
    """Spark 4.1 SQL through ``iceberg-spark-runtime``'s ``SparkCatalog`` on the REST catalog, the
    data files read from SeaweedFS with S3FileIO (``iceberg-aws-bundle``): row for row the
    consumer's read, the ``WHERE timestamp`` counts its counts (see test_iceberg's SQLite twin)."""
    world.sync("rest", catalog=iceberg_rest.properties).run_once()  # (no-op after the backfill test)
    env = {"AWS_REGION": REGION, "AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",  # SeaweedFS
           "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED"}
    check_spark41_reads(world, _rest_result(world, iceberg_rest, "rest"), {
        "type": "rest", "uri": iceberg_rest.uri, "warehouse": iceberg_rest.warehouse,
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.endpoint": iceberg_rest.s3.endpoint_url, "s3.path-style-access": "true",
        "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY, "client.region": REGION},
        env)


def test_two_writers_at_once_on_the_rest_catalog_add_each_segment_once(
        world: World, iceberg_rest: IcebergRestCatalog) -> None:
    """The REST server refuses a commit whose base snapshot is stale (optimistic concurrency): of
    two writers racing one segment per commit, each segment lands once."""
    results = run_at_once(
        [world.sync("restpair", catalog=iceberg_rest.properties, segments_per_commit=1) for _ in range(2)])
    ids = world.plan_ids()
    assert sum(r.added_segments for r in results) == len(ids)
    _check_equal(world, _rest_result(world, iceberg_rest, "restpair"), ids)


def test_rlm_run_keeps_the_table_in_step_taking_turns_with_another_writer(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``iceberg.daemon``: ``rlm run --once`` appends, after its copy pass, what the table lacks.
    Another writer (``rlm iceberg``'s code) added the first two segments (its read_committed bound
    held inside the third); the daemon adds the rest, each once; a second run adds nothing."""
    import argparse

    import yaml

    import rlm.logging_setup as logging_setup
    from fetcher import CommittedBound
    from rlm.commands.run import run

    links = world.fetcher.plan(world.topic, 0).segments
    with monkeypatch.context() as m:  # the first writer only: the daemon's read core is its own
        m.setattr(world.fetcher, "committed_bound",
                  lambda topic, p: CommittedBound(links[2].first + 1, (), True))
        assert world.sync("turns").run_once().added_segments == 2
    monkeypatch.setattr(logging_setup, "configure_logging", lambda *a, **k: None)  # the test's logging stays
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(json.dumps(
        {**world.sidecar, "iceberg": world.iceberg("turns", daemon={"topics": [world.topic]})},
        default=str))))
    for _ in range(2):
        assert run(argparse.Namespace(config=cfg, once=True)) == 0
        ids = world.plan_ids()
        result = {**_base._result(world, "turns")}
        _check_equal(world, result, ids)
    table = load_catalog("rlm", **world.catalog).load_table(result["table"])
    assert len(table.snapshots()) == 1 + -(-(len(ids) - 2) // 4)  # the first writer's, then the daemon's


@pytest.mark.spark
def test_spark_sql_reads_the_tables_data_files(world: World, spark: Any) -> None:
    """Spark SQL over the data files of the table's current snapshot (listed by Iceberg's
    metadata; the session-wide SparkSession, no Iceberg runtime: see docs/iceberg.md for why):
    the Iceberg types reach Spark as Spark's Kafka types, and the rows equal the consumer's."""
    from pyspark.sql.types import ArrayType, BinaryType, TimestampType

    sync = world.sync("turns")  # the daemon test's table (completed here when run alone)
    sync.run_once()
    files = [task.file.file_path for task in sync.table.scan().plan_files()]
    assert files and not any(task.delete_files for task in sync.table.scan().plan_files())
    df = spark.read.parquet(*files)
    assert isinstance(df.schema["timestamp"].dataType, TimestampType)  # timestamptz: an instant
    headers = df.schema["headers"].dataType
    assert isinstance(headers, ArrayType) and isinstance(headers.elementType["value"].dataType, BinaryType)
    view = f"turns_{world.topic.replace('-', '_')}"
    df.createOrReplaceTempView(view)
    rows = spark.sql("SELECT `offset`, timestampType, unix_millis(`timestamp`) AS ms, key, value, headers "
                     f"FROM {view} ORDER BY `offset`").collect()
    got = [(r["offset"], r["timestampType"], r["ms"], _b(r["key"]), _b(r["value"]),
            tuple((h["key"], _b(h["value"])) for h in (r["headers"] or []))) for r in rows]
    assert [g[0] for g in got] == [t[0] for t in world.truth]
    assert got == world.truth


def _b(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


@pytest.mark.spark
def test_spark_engine_continues_a_table_the_pyiceberg_engine_started(
        world: World, spark: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The PyIceberg engine adds the first two segments (its read_committed bound held inside the
    third); ``rlm iceberg --engine spark`` (in process: the session's SparkSession, left running)
    adds the rest: each segment once, row for row the consumer's read; then the PyIceberg engine
    finds nothing to add."""
    import argparse

    import rlm.logging_setup as logging_setup
    from fetcher import CommittedBound
    from rlm.commands.iceberg import iceberg

    links = world.fetcher.plan(world.topic, 0).segments
    with monkeypatch.context() as m:
        m.setattr(world.fetcher, "committed_bound",
                  lambda topic, p: CommittedBound(links[2].first + 1, (), True))
        assert world.sync("engines").run_once().added_segments == 2
    monkeypatch.setattr(logging_setup, "configure_logging", lambda *a, **k: None)
    cfg = world.config("engines", segments_per_commit=64)  # one Spark job for the rest

    def cli() -> dict[str, Any]:
        capsys.readouterr()
        assert iceberg(argparse.Namespace(config=cfg, topic=world.topic, start="earliest", follow=False,
                                          isolation=None, engine="spark", json=True, action="sync",
                                          metrics_port=None, orphan_min_age_ms=None)) == 0
        return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))

    result = cli()
    ids = world.plan_ids()
    assert result["added_segments"] == len(ids) - 2 and result["orphan_files"] == 0
    _check_equal(world, {**result, "catalog": world.catalog}, ids)
    assert spark.sql("SELECT 1 AS one").collect()[0]["one"] == 1  # the shared session still runs
    assert world.sync("engines").run_once().added_segments == 0  # the ledger holds the Spark commits
    table = load_catalog("rlm", **world.catalog).load_table(result["table"])
    spark_files = [t.file.file_path for t in table.scan().plan_files() if "/data/spark-" in t.file.file_path]
    assert spark_files  # the Spark job's files are in the table


def _pass_and_jobs(spark: Any, sync: Any, group: str) -> tuple[Any, int]:
    """One ``run_once`` of a Spark-engine sync and the Spark jobs it ran (counted in a job group)."""
    spark.sparkContext.setJobGroup(group, "one pass")
    try:
        r = sync.run_once()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return r, len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.spark
def test_spark_engine_writes_a_pass_in_one_job_and_commits_per_group(world: World, spark: Any) -> None:
    """``segments_per_commit: 1``: a pass stopped by an error after its first commit keeps that
    commit and deletes the files it wrote for the other groups (no orphan); the next pass writes
    every other segment in ONE Spark job (its plan: no shuffle, one sort) in a directory of its own,
    then commits one snapshot per segment, in offset order, each naming its segment, each of its
    files holding that segment's rows only, sorted by offset; the table equals the consumer's read."""
    import pyarrow.parquet as pq

    from rlm.config import IcebergConfig
    from rlm.tables import orphan_files, read_ledger
    from rlm.tables.spark_engine import SparkIcebergSync

    cfg = IcebergConfig.model_validate(world.iceberg("onejob", segments_per_commit=1))
    sync = SparkIcebergSync(world.fetcher, load_catalog("rlm", **world.catalog), cfg, world.topic,
                            spark=spark, rlm_config=str(world.config("plan")))
    ids = world.plan_ids()
    _, todo, _ = sync.pending(sync.refresh())
    assert [w.segment_id for w in todo] == ids

    def stop(group: list[Any], rows: int) -> None:
        raise RuntimeError("stopped after the first commit")

    sync.on_commit = stop
    with pytest.raises(RuntimeError, match="stopped"):
        sync.run_once()
    sync.on_commit = None
    assert sync.refresh().segments.keys() == {ids[0]}
    assert orphan_files(sync.table) == []  # the other groups' files: deleted, not left behind

    r, jobs = _pass_and_jobs(spark, sync, f"rlm-test-{world.topic}")
    assert jobs == 1  # one job, every group
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    plan = executions.apply(executions.size() - 1).physicalPlanDescription()  # the pass's write, as run
    tree = plan.split("\n\n")[0]
    assert "WriteFiles" in tree and "Exchange" not in tree and tree.count("Sort (") == 1, plan
    assert (r.added_segments, len(r.commits)) == (len(ids) - 1, len(ids) - 1)
    table = sync.table
    snaps = table.snapshots()
    named = [[s[1] for s in json.loads(snap.summary.additional_properties["rlm.segments"])] for snap in snaps]
    assert named == [[i] for i in ids]
    files_of = {snap.snapshot_id: [e.data_file.file_path for m in snap.manifests(table.io)
                                   if m.added_snapshot_id == snap.snapshot_id
                                   for e in m.fetch_manifest_entry(table.io)] for snap in snaps}
    dirs = {path.split("/data/")[1].split("/")[0] for paths in files_of.values() for path in paths}
    assert len(dirs) == 2  # the stopped pass's directory (its first group) and the second pass's
    for snap, [sid] in zip(snaps, named, strict=True):  # (a segment of aborted records only: no file)
        for path in files_of[snap.snapshot_id]:
            t = pq.read_table(path.removeprefix("file://"), columns=["segment_id", "offset"])
            assert set(t.column("segment_id").to_pylist()) == {sid}, path
            assert t.column("offset").to_pylist() == sorted(t.column("offset").to_pylist()), path
    ledger = read_ledger(table)
    _check_equal(world, {"catalog": world.catalog, "catalog_name": "rlm", "table": sync.identifier,
                         "segments": len(ledger.segments), "rows": ledger.rows}, ids)
    assert orphan_files(table) == []


@pytest.mark.spark
def test_spark_engine_caps_the_segments_of_one_job(world: World, spark: Any) -> None:
    """``spark_segments_per_job: 2`` with one segment per commit: the pass runs a job per two
    segments (each started when the commits reach its groups), one snapshot per segment, in order,
    nothing left over, the table equal to the consumer's read."""
    from rlm.config import IcebergConfig
    from rlm.tables import orphan_files, read_ledger
    from rlm.tables.spark_engine import SparkIcebergSync

    cfg = IcebergConfig.model_validate(
        world.iceberg("jobcap", segments_per_commit=1, spark_segments_per_job=2))
    sync = SparkIcebergSync(world.fetcher, load_catalog("rlm", **world.catalog), cfg, world.topic,
                            spark=spark, rlm_config=str(world.config("plan")))
    ids = world.plan_ids()
    assert len(ids) >= 3, "the workload needs several jobs"
    r, jobs = _pass_and_jobs(spark, sync, f"rlm-test-jobcap-{world.topic}")
    assert jobs == -(-len(ids) // 2)
    named = [[s[1] for s in json.loads(snap.summary.additional_properties["rlm.segments"])]
             for snap in sync.table.snapshots()]
    assert (r.added_segments, named) == (len(ids), [[i] for i in ids])
    ledger = read_ledger(sync.table)
    _check_equal(world, {"catalog": world.catalog, "catalog_name": "rlm", "table": sync.identifier,
                         "segments": len(ledger.segments), "rows": ledger.rows}, ids)
    assert orphan_files(sync.table) == []


# ---- a table several topics share (iceberg.shared_tables) on each of the above ------------------

def _shared(name: str, world: World, second: tuple[str, list[Row]]) -> dict[str, Any]:
    return {"shared_tables": [{"name": name, "topics": [world.topic, second[0]]}]}


def _shared_result(world: World, table: str, catalog: dict[str, str] | None = None) -> dict[str, Any]:
    return {"catalog": catalog or world.catalog, "catalog_name": "rlm", "table": f"kafka.{table}"}


def test_a_shared_table_on_the_rest_catalog(world: World, second: tuple[str, list[Row]],
                                            iceberg_rest: IcebergRestCatalog) -> None:
    """Two topics into one table of the REST catalog (warehouse on S3): ``rlm iceberg --topic A``,
    then B's writer; each topic's rows equal its consumer's read, each snapshot records its own
    topic's segments; reruns add nothing (a fresh client sees the same snapshots)."""
    b_topic, b_truth = second
    shared = {**_shared("rest_both", world, second), "catalog": iceberg_rest.properties}
    ra = run_iceberg(world.config("restshared", **shared), world.topic)
    a_ids, b_ids = world.plan_ids(), world.plan_ids(b_topic)
    assert (ra["table"], ra["catalog"]["type"]) == ("kafka.rest_both", "rest")
    assert ra["added_segments"] == len(a_ids)
    assert ra["location"].startswith(f"s3://{iceberg_rest.bucket}/")
    rb = world.sync("restshared", b_topic, **shared).run_once()
    assert (rb.added_segments, rb.added_rows) == (len(b_ids), len(b_truth))
    result = _shared_result(world, "rest_both", iceberg_rest.properties)
    _check_shared(world, second, result)
    table = load_catalog("other", **iceberg_rest.properties).load_table("kafka.rest_both")
    assert [f.name for f in table.spec().fields] == ["topic", "timestamp_day"]
    snaps = len(table.snapshots())
    for t in (world.topic, b_topic):
        r = world.sync("restshared", t, **shared).run_once()
        assert (r.added_segments, r.added_rows) == (0, 0)
    fresh = load_catalog("other", **iceberg_rest.properties).load_table("kafka.rest_both")
    assert len(fresh.snapshots()) == snaps


def test_rlm_run_keeps_a_shared_table_in_step(world: World, second: tuple[str, list[Row]], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``iceberg.daemon`` selecting both topics of a shared table: another writer added A's first
    two segments; ``rlm run --once`` adds the rest of A and all of B, each segment once, by
    snapshots of their own topic; a second run adds nothing; the lag of each topic of the table
    is in the work dir for ``rlm status``; with ``expire_deleted_segments``, A's log start moved
    past its first segment, the next run removes A's rows below it and none of B's (the daemon
    runs ``rlm iceberg``'s pass hook)."""
    import argparse

    import yaml

    import rlm.logging_setup as logging_setup
    from fetcher import CommittedBound
    from rlm.commands.run import run

    b_topic, _ = second
    shared = _shared("daemon_both", world, second)
    links = world.fetcher.plan(world.topic, 0).segments
    with monkeypatch.context() as m:
        m.setattr(world.fetcher, "committed_bound",
                  lambda topic, p: CommittedBound(links[2].first + 1, (), True))
        assert world.sync("daemonshared", world.topic, **shared).run_once().added_segments == 2
    monkeypatch.setattr(logging_setup, "configure_logging", lambda *a, **k: None)
    cfg = tmp_path / "daemon.yaml"
    iceberg_cfg = world.iceberg("daemonshared", **shared, daemon={"topics": [world.topic, b_topic]},
                                expire_deleted_segments=True)
    daemon_cfg = json.loads(json.dumps({**world.sidecar, "iceberg": iceberg_cfg}, default=str))
    cfg.write_text(yaml.safe_dump(daemon_cfg))
    result = _shared_result(world, "daemon_both")
    snaps = []
    for _ in range(2):
        assert run(argparse.Namespace(config=cfg, once=True)) == 0
        _check_shared(world, second, result)
        snaps.append(len(load_catalog("rlm", **world.catalog).load_table("kafka.daemon_both").snapshots()))
    a_ids, b_ids = world.plan_ids(), world.plan_ids(b_topic)
    assert snaps[0] == snaps[1] == 1 + -(-(len(a_ids) - 2) // 4) + -(-len(b_ids) // 4)
    # the daemon's pass hook wrote the lag of each topic of the table, as `rlm status` reads it
    from rlm.commands.status import iceberg_lags

    a_rows = len([r for r in world.truth if r[0] < world.remote_end()])
    lags = {lag["topic"]: lag for lag in iceberg_lags(Path(world.sidecar["work_dir"]))
            if lag["table"] == "kafka.daemon_both"}
    assert {t: (lag["segments"], lag["rows"], lag["segments_behind"]) for t, lag in lags.items()} == {
        world.topic: (len(a_ids), a_rows, 0), b_topic: (len(b_ids), len(second[1]), 0)}
    # A's log start moved past its first segment: the daemon's next pass expires A's rows below it
    # (expire_deleted_segments, through the same pass hook) and none of B's, which has those offsets
    from types import SimpleNamespace

    from fetcher import RemoteFetcher

    bound = links[1].first
    real = RemoteFetcher.log_start
    monkeypatch.setattr(RemoteFetcher, "log_start", lambda self, tp, *a: (
        SimpleNamespace(offset=bound) if getattr(tp, "topic", tp) == world.topic else real(self, tp, *a)))
    assert run(argparse.Namespace(config=cfg, once=True)) == 0
    monkeypatch.setattr(RemoteFetcher, "log_start", real)
    a_truth = [r for r in world.truth if r[0] < world.remote_end()]
    assert any(r[0] < bound for r in second[1])
    assert table_rows(result, world.topic)[0] == [r for r in a_truth if r[0] >= bound]
    assert table_rows(result, b_topic)[0] == second[1]


@pytest.mark.spark
def test_spark_engine_on_a_shared_table(world: World, second: tuple[str, list[Row]], spark: Any,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A table of two topics whose partition 0 offsets overlap: the PyIceberg engine adds all of
    A and B's first segment; ``rlm iceberg --engine spark --topic B`` adds the rest of B (its
    ledger B's own: A's offsets do not stand for B's), ``--topic A`` finds nothing to add; each
    segment once, each topic's rows equal its consumer's read, every Spark-written file in B's
    partition (inferred from the file's statistics: a topic name longer than the 16 characters
    kept in string bounds) holding B's rows only; then the PyIceberg engine finds nothing."""
    import argparse

    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    import rlm.logging_setup as logging_setup
    from fetcher import CommittedBound
    from rlm.commands.iceberg import iceberg

    b_topic, b_truth = second
    assert len(b_topic) > 16
    shared = _shared("engines_both", world, second)
    b_links = world.fetcher.plan(b_topic, 0).segments
    real = world.fetcher.committed_bound
    with monkeypatch.context() as m:  # B's read_committed bound held inside its second segment
        m.setattr(world.fetcher, "committed_bound", lambda topic, p: (
            CommittedBound(b_links[1].first + 1, (), True) if topic == b_topic else real(topic, p)))
        assert world.sync("enginesshared", world.topic, **shared).run_once().added_segments == len(
            world.plan_ids())
        assert world.sync("enginesshared", b_topic, **shared).run_once().added_segments == 1
    monkeypatch.setattr(logging_setup, "configure_logging", lambda *a, **k: None)
    cfg = world.config("enginesshared", segments_per_commit=64, **shared)

    def cli(topic: str) -> dict[str, Any]:
        capsys.readouterr()
        assert iceberg(argparse.Namespace(config=cfg, topic=topic, start="earliest", follow=False,
                                          isolation=None, engine="spark", json=True, action="sync",
                                          metrics_port=None, orphan_min_age_ms=None)) == 0
        return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))

    a_ids, b_ids = world.plan_ids(), world.plan_ids(b_topic)
    rb = cli(b_topic)
    assert rb["table"] == "kafka.engines_both"
    assert (rb["added_segments"], rb["orphan_files"]) == (len(b_ids) - 1, 0)
    assert rb["topics"] == {world.topic: {"segments": len(a_ids), "rows": len(
        [r for r in world.truth if r[0] < world.remote_end()])},
        b_topic: {"segments": len(b_ids), "rows": len(b_truth)}}
    assert cli(world.topic)["added_segments"] == 0
    _check_shared(world, second, _shared_result(world, "engines_both"))
    for t in (world.topic, b_topic):
        assert world.sync("enginesshared", t, **shared).run_once().added_segments == 0
    table = load_catalog("rlm", **world.catalog).load_table("kafka.engines_both")
    spark_files = [task.file for task in table.scan().plan_files() if "/data/spark-" in task.file.file_path]
    assert spark_files and {f.partition[0] for f in spark_files} == {b_topic}
    fs = pafs.LocalFileSystem()
    for f in spark_files:
        with fs.open_input_file(f.file_path.removeprefix("file://")) as fh:
            topics = set(pq.read_table(fh, columns=["topic"]).column("topic").to_pylist())
        assert topics == {f.partition[0]}, f.file_path


@pytest.mark.spark
def test_spark_engine_refuses_a_warehouse_its_hadoop_cannot_write(
        world: World, second: tuple[str, list[Row]], spark: Any, iceberg_rest: IcebergRestCatalog) -> None:
    """The REST catalog's warehouse is ``s3://``, a scheme the session's Hadoop has no filesystem
    for (no hadoop-aws): ``--engine spark`` is refused at start with a typed configuration error
    naming the location, before any job (the PyIceberg engine writes there: see above)."""
    from rlm.config import IcebergConfig
    from rlm.errors import ConfigError
    from rlm.tables.spark_engine import SparkIcebergSync

    cfg = IcebergConfig.model_validate(world.iceberg("sparkrest", catalog=iceberg_rest.properties,
                                                     **_shared("spark_rest", world, second)))
    with pytest.raises(ConfigError, match=r"location s3://.* is not a filesystem this Spark .*'s3'"):
        SparkIcebergSync(world.fetcher, load_catalog("rlm", **iceberg_rest.properties), cfg, second[0],
                         spark=spark, rlm_config=str(world.config("plan")))
