"""The API keeps its contract under generated input (schemathesis, property-based).

Every operation of the published OpenAPI document is called with inputs generated from
it, valid and invalid, against the real app on the in-memory fakes (``zds demo``'s
engine) with an admin token. Each answer must be: no 5xx, a status the document lists
for that operation, a body matching the document's schema for it (errors in the one
envelope), the documented content type and headers, an ``Allow`` header that lists every
method of the path on a 405. A fixed budget of examples per operation keeps the run to
about a minute.

Not checked: schemathesis's "positive data acceptance" (a request the schema allows must
not be a 4xx). The API's name rules are stricter than a JSON-schema pattern can say
(no '..', ZFS's reserved pool names, a datastore that does not exist yet), so such
requests are rightly refused with a documented 404/409/422.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import create_app
from appliance.demo import demo_engine

pytestmark = pytest.mark.fuzz

ENGINE = demo_engine(Path(tempfile.mkdtemp(prefix="zds-fuzz-")))
TOKEN = ENGINE.tokens.create("fuzz", "admin")
APP = create_app(ENGINE, start=False)
EXAMPLES = int(os.environ.get("ZDS_FUZZ_EXAMPLES", "40"))

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance,
          content_type_conformance, response_headers_conformance, allow_header_conformance]

schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_its_contract(case: schemathesis.Case[Any]) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS)
