"""``iceberg.shared_tables`` without a broker: which table a topic goes to, the shared table's
partition spec and sort order, and configuration errors at start (the end-to-end tests of
shared tables are in test_iceberg.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog import load_catalog

from rlm.config import IcebergConfig, load_config
from rlm.errors import ConfigError
from rlm.tables import ensure_table, table_identifier

SHARED: dict[str, Any] = {"shared_tables": [{"name": "shop.events", "topics": ["orders", "pay-*"]},
                                            {"name": "other", "topics": ["pay-eu", "audit"]}]}


def test_topics_map_to_their_shared_table_or_one_of_their_own() -> None:
    cfg = IcebergConfig.model_validate({**SHARED, "table_name": "t_{topic}"})
    assert table_identifier(cfg, "orders") == "kafka.shop_events"  # by name; dots become underscores
    assert table_identifier(cfg, "pay-eu") == "kafka.shop_events"  # by glob; the first entry wins
    assert table_identifier(cfg, "audit") == "kafka.other"
    assert table_identifier(cfg, "clicks") == "kafka.t_clicks"  # selected by none: its own table
    assert cfg.table_partition_by("orders") == ["topic", "day"]
    assert cfg.table_partition_by("clicks") == ["day"]
    placed = IcebergConfig.model_validate({**SHARED, "partition_by": ["hour", "topic"]})
    assert placed.table_partition_by("orders") == ["hour", "topic"]
    assert IcebergConfig.model_validate({}).shared_tables == []  # default: one table per topic


def test_a_shared_table_is_partitioned_and_sorted_by_topic(tmp_path: Path) -> None:
    catalog = load_catalog("rlm", type="sql", uri=f"sqlite:///{tmp_path / 'c.db'}",
                           warehouse=(tmp_path / "wh").as_uri())
    (tmp_path / "wh").mkdir()
    cfg = IcebergConfig.model_validate(SHARED)
    shared = ensure_table(catalog, cfg, "pay-us")
    assert [(f.name, str(f.transform)) for f in shared.spec().fields] == [
        ("topic", "identity"), ("timestamp_day", "day")]
    assert [f.source_id for f in shared.sort_order().fields] == [3, 4, 5]  # topic, partition, offset
    assert "rlm.topic" not in shared.properties  # every snapshot names its topic instead
    own = ensure_table(catalog, cfg, "clicks")
    assert [f.name for f in own.spec().fields] == ["timestamp_day"]
    assert own.properties["rlm.topic"] == "clicks"


@pytest.mark.parametrize(("shared", "match"), [
    ([{"name": "a", "topics": ["x"]}, {"name": "a", "topics": ["y"]}], "a table name is listed twice"),
    ([{"name": "a", "topics": []}], r"iceberg.shared_tables\[0\].topics = \[\]: list should have at least 1"),
    ([{"name": "{topic}", "topics": ["x"]}], r"iceberg.shared_tables\[0\].name = '\{topic\}'"),
])
def test_a_bad_shared_tables_config_is_a_config_error_at_start(tmp_path: Path, shared: list[Any],
                                                               match: str) -> None:
    path = tmp_path / "rlm.yaml"
    path.write_text(yaml.safe_dump({"bootstrap_servers": "localhost:9092", "work_dir": str(tmp_path),
                                    "storage": {"plugin": "local", "config": {"root": str(tmp_path)}},
                                    "iceberg": {"shared_tables": shared}}))
    with pytest.raises(ConfigError, match=match):
        load_config(path)


@pytest.mark.parametrize("value", [0, -3, "many"])
def test_a_bad_spark_job_size_is_a_config_error_at_start(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "rlm.yaml"
    path.write_text(yaml.safe_dump({"bootstrap_servers": "localhost:9092", "work_dir": str(tmp_path),
                                    "storage": {"plugin": "local", "config": {"root": str(tmp_path)}},
                                    "iceberg": {"spark_segments_per_job": value}}))
    with pytest.raises(ConfigError, match=r"iceberg.spark_segments_per_job"):
        load_config(path)
