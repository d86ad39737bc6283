"""Every error status of the HTTP API, each from a real condition (bad input, a held or failing
storage plugin, a full reader pool), and bearer-token authentication."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from fetcher.http.encoders import ARROW, NDJSON, RAW
from fetcher.http.server import HttpApiServer
from rlm.errors import ConfigError
from tests.fetcher_http.conftest import CONTROLLED, CONTROLLED_RLMM, TOPIC, Api, Tiered, serving
from tests.fetcher_http.controlled_rlmm import ControlledFileRemoteLogMetadataManager
from tests.fetcher_http.controlled_rsm import ControlledRSM

RECORDS = f"/v1/topics/{TOPIC}/partitions/0/records"


def _json_error(r: requests.Response, status: int, error: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["error"] == error and body["message"]
    assert "Traceback" not in r.text
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize(("path", "params", "parameter"), [
    (RECORDS, {"offset": "x"}, "offset"),
    (RECORDS, {"offset": "-1"}, "offset"),
    (RECORDS, {"offset": "0", "timestamp": "5"}, "timestamp"),
    (RECORDS, {"timestamp": "yesterday"}, "timestamp"),
    (RECORDS, {"offset": "0", "max_bytes": "0"}, "max_bytes"),
    (RECORDS, {"offset": "0", "max_bytes": str(2**40)}, "max_bytes"),
    (RECORDS, {"offset": "0", "isolation": "dirty"}, "isolation"),
    (f"/v1/topics/{TOPIC}/partitions/zero/records", {"offset": "0"}, "partition"),
    (f"/v1/topics/{TOPIC}/partitions/-1/segments", {}, "partition"),
    (f"/v1/topics/{TOPIC}/offsets", {}, "timestamp"),
    (f"/v1/topics/{TOPIC}/offsets", {"timestamp": "soon"}, "timestamp"),
])
def test_400_names_the_parameter(api: Api, path: str, params: dict[str, str], parameter: str) -> None:
    body = _json_error(api.get(path, **params), 400, "bad_parameter")
    assert body["parameter"] == parameter and parameter in body["message"]


def test_records_start_at_the_remote_log_start_by_default(api: Api) -> None:
    assert api.get(RECORDS).text == api.get(RECORDS, offset=0).text
    assert api.get(RECORDS).headers["X-Next-Offset"] == api.get(RECORDS, offset=0).headers["X-Next-Offset"]


def test_404_unknown_topic_or_partition(api: Api) -> None:
    _json_error(api.get("/v1/topics/nope/partitions/0/segments"), 404, "unknown_topic_or_partition")
    body = _json_error(api.get(f"/v1/topics/{TOPIC}/partitions/9/records", offset=0), 404,
                       "unknown_topic_or_partition")
    assert "events-9" in body["message"]
    _json_error(api.get("/v1/topics/nope/offsets", timestamp="latest"), 404, "unknown_topic_or_partition")
    _json_error(api.get("/v2/nothing"), 404, "not_found")


@pytest.mark.parametrize("accept", [NDJSON, RAW, ARROW])
def test_416_carries_the_remote_range(api: Api, accept: str) -> None:
    end = api.get(f"/v1/topics/{TOPIC}/partitions/0/segments").json()["log_end_offset"]
    for offset in (end, end + 1000):
        body = _json_error(api.get(RECORDS, accept, offset=offset), 416, "offset_out_of_range")
        assert (body["log_start_offset"], body["log_end_offset"]) == (0, end)
    # no remote record that late
    body = _json_error(api.get(RECORDS, accept, timestamp=str(2**50)), 416, "offset_out_of_range")
    assert body["log_end_offset"] == end


def test_406_when_no_record_type_is_acceptable(api: Api) -> None:
    body = _json_error(api.get(RECORDS, "text/html", offset=0), 406, "not_acceptable")
    assert NDJSON in body["message"]
    assert api.get(RECORDS, "*/*", offset=0).headers["content-type"] == NDJSON
    r = api.get(RECORDS, f"{NDJSON};q=0.2, {ARROW}", offset=0)
    assert r.headers["content-type"] == ARROW


def _held_server(tiered: Tiered, work: Path, **read: Any) -> Any:
    ControlledRSM.reset()
    return serving(tiered.config(work, plugin=CONTROLLED, **read))


def _pool_in_use(api: Api) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith("rlm_fetch_reader_pool_in_use "):
            return float(line.split()[1])
    raise AssertionError("no pool gauge")


def test_429_when_the_reader_pool_is_full(tiered: Tiered, tmp_path: Path) -> None:
    with _held_server(tiered, tmp_path, reader_threads=1, reader_max_pending_tasks=1,
                      fetch_max_wait_ms=60_000) as api:
        ControlledRSM.mode = "block"
        results: list[int] = []

        def read(offset: int) -> None:
            r = requests.get(api.base + RECORDS, params={"offset": offset}, timeout=60)
            results.append(r.status_code)

        running = threading.Thread(target=read, args=(0,))
        running.start()
        assert ControlledRSM.entered.wait(30)
        queued = threading.Thread(target=read, args=(700,))
        queued.start()
        deadline = time.monotonic() + 30
        while _pool_in_use(api) < 2:
            assert time.monotonic() < deadline, "the second read never queued"
            time.sleep(0.02)
        r = api.get(RECORDS, offset=1300)
        body = _json_error(r, 429, "reader_busy")
        assert r.headers["Retry-After"] == "1" and "max.pending" in body["message"]
        assert "rlm_fetch_reader_pool_rejected_total 1.0" in api.get("/metrics").text
        ControlledRSM.gate.set()
        running.join(60)
        queued.join(60)
        assert results == [200, 200]
        assert api.get(RECORDS, offset=1300).status_code == 200


def test_503_when_storage_is_down(tiered: Tiered, tmp_path: Path) -> None:
    with _held_server(tiered, tmp_path) as api:
        ControlledRSM.mode = "fail"
        for accept in (NDJSON, RAW, ARROW):
            r = api.get(RECORDS, accept, offset=10)
            body = _json_error(r, 503, "storage_unavailable")
            assert r.headers["Retry-After"] == "2" and "outage" in body["message"]
        r = api.get(f"/v1/topics/{TOPIC}/offsets", timestamp="1")
        assert r.status_code == 503 and r.headers["Retry-After"] == "2"
        ControlledRSM.mode = "ok"  # storage back: the same read succeeds
        assert api.get(RECORDS, offset=10).status_code == 200


def test_a_failure_mid_stream_aborts_the_body(tiered: Tiered, tmp_path: Path) -> None:
    """Once a stream has started its status cannot change: storage failing later must cut the
    connection (the client sees an incomplete body), never end the stream as if complete."""
    with _held_server(tiered, tmp_path) as api:
        plan = api.get(f"/v1/topics/{TOPIC}/partitions/0/segments").json()
        ControlledRSM.fail_from_offset = plan["segments"][3]["start_offset"]
        r = api.session.get(api.base + RECORDS, params={"offset": 0, "max_bytes": 64 << 20},
                            headers={"Accept": ARROW}, stream=True, timeout=60)
        assert r.status_code == 200
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            r.content  # noqa: B018
        ControlledRSM.fail_from_offset = None
        assert api.get(RECORDS, ARROW, offset=0).status_code == 200


def test_503_when_metadata_is_down(tiered: Tiered, tmp_path: Path) -> None:
    with serving(tiered.config(tmp_path, manager=CONTROLLED_RLMM)) as api:
        assert api.get(RECORDS, offset=10).status_code == 200
        ControlledFileRemoteLogMetadataManager.down = True
        try:
            time.sleep(1.1)  # reads use the catalog and plans of the last second: let them expire
            for path, params in (("/v1/topics", {}), (RECORDS, {"offset": 10}), ("/health", {})):
                r = api.get(path, **params)
                body = _json_error(r, 503, "metadata_unavailable")
                assert r.headers["Retry-After"] == "2" and "metadata" in body["message"]
        finally:
            ControlledFileRemoteLogMetadataManager.down = False
        assert api.get(RECORDS, offset=10).status_code == 200


def test_504_on_a_read_that_runs_out_of_time(tiered: Tiered, tmp_path: Path) -> None:
    with _held_server(tiered, tmp_path, fetch_max_wait_ms=50) as api:
        ControlledRSM.mode = "block"
        for accept in (NDJSON, RAW):
            body = _json_error(api.get(RECORDS, accept, offset=10), 504, "fetch_timeout")
            assert "50 ms" in body["message"]
        assert "rlm_fetch_reader_pool_timeouts_total 2.0" in api.get("/metrics").text
        ControlledRSM.gate.set()


def test_500_says_nothing_about_internals(tiered: Tiered, tmp_path: Path) -> None:
    with _held_server(tiered, tmp_path) as api:
        ControlledRSM.mode = "crash"
        r = api.get(RECORDS, offset=10)
        body = _json_error(r, 500, "internal_error")
        assert "secret" not in r.text and "RuntimeError" not in r.text and body["message"]
        ControlledRSM.mode = "ok"
        assert api.get("/health").json()["status"] == "ok"


def test_bearer_token_from_env(tiered: Tiered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capfd: pytest.CaptureFixture[str]) -> None:
    token = "s3cr3t-token-value-4242"
    monkeypatch.setenv("RLM_TEST_API_TOKEN", token)
    with serving(tiered.config(tmp_path, http_token_env="RLM_TEST_API_TOKEN")) as api:
        url = api.base + "/v1/topics"
        r = requests.get(url, timeout=10)
        _json_error(r, 401, "unauthorized")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        _json_error(requests.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10), 401,
                    "unauthorized")
        _json_error(requests.get(url, headers={"Authorization": f"Basic {token}"}, timeout=10), 401,
                    "unauthorized")
        assert requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code == 200
        assert requests.get(api.base + "/health", timeout=10).status_code == 200  # probes need no token
        _json_error(requests.get(api.base + RECORDS, params={"offset": 0}, timeout=10), 401, "unauthorized")
    out, err = capfd.readouterr()
    assert token not in out and token not in err


def test_bearer_token_from_file(tiered: Tiered, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("file-token-1\n")
    cfg = tiered.config(tmp_path / "w", http_token_file=str(tmp_path / "token"))
    with serving(cfg, "file-token-1") as api:
        assert api.get("/v1/topics").status_code == 200
        assert requests.get(api.base + "/metrics", timeout=10).status_code == 401
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        HttpApiServer.from_config(tiered.config(tmp_path / "w", http_token_file=str(tmp_path / "empty")))
    with pytest.raises(ConfigError, match="RLM_NO_SUCH_TOKEN_VAR"):
        HttpApiServer.from_config(tiered.config(tmp_path / "w", http_token_env="RLM_NO_SUCH_TOKEN_VAR"))


def test_metrics_count_remote_reads(api: Api) -> None:
    api.get(RECORDS, offset=0)
    text = api.get("/metrics").text
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values["rlm_fetch_remote_get_requests_total"] > 0
    assert values["rlm_fetch_remote_get_bytes_total"] > 0
    assert values["rlm_fetch_index_cache_misses_total"] > 0
    assert "rlm_fetch_chunk_cache_hits_total" in values
    assert any(k.startswith("rlm_http_request_duration_seconds_count{") and 'route="/v1/topics/{topic}/'
               in k for k in values)
