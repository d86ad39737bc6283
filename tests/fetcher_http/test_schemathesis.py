"""The HTTP API under schemathesis, property-based from its own OpenAPI document: for valid and
invalid parameters alike, no 5xx and no hang (each call bounded), and every response conforms to
the document (documented status, content type, headers and body schema).

(schemathesis' pytest integration does not run on pytest 9, so each operation's hypothesis
strategy is driven directly.)
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance

from fetcher.http.openapi import openapi_document
from tests.fetcher_http.conftest import TOPIC, Api

pytestmark = pytest.mark.slow


@pytest.fixture(scope="package")
def api_schema(api: Api) -> Any:
    return schemathesis.openapi.from_url(api.base + "/openapi.json")


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("path", "mode", "pinned"), [
    (path, mode, pinned) for path, item in openapi_document()["paths"].items()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    for pinned in (False, True)
    if (mode is GenerationMode.POSITIVE or item["get"]["parameters"])  # no parameters: nothing invalid
    and (not pinned or (mode is GenerationMode.POSITIVE and "{topic}" in path))])
def test_no_server_error_and_conforms(api_schema: Any, path: str, mode: GenerationMode, pinned: bool) -> None:
    """``pinned``: the topic is the tiered one, so offsets, timestamps and sizes hit real reads."""
    operation = api_schema[path]["GET"]
    fixed = ({"topic": TOPIC} | ({"partition": 0} if "{partition}" in path else {})) if pinned else None

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(case: Any) -> None:
        response = case.call(timeout=30)
        assert response.status_code < 500, (case.formatted_path, response.status_code, response.text[:300])
        # 416 (offset outside the remote range) and 400 for offset together with timestamp are
        # answers to schema-valid input by design; every status must still be a documented one
        case.validate_response(response, excluded_checks=[positive_data_acceptance])

    run()
