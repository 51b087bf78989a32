"""The API keeps its contract under generated input (schemathesis, property-based).

Every operation of the published OpenAPI document is called with inputs generated from
it, valid and invalid, against the real app on the in-memory fakes (``zds demo``'s
engine) with an admin token. Each answer must be: no 5xx, a status the document lists
for that operation, a body matching the document's schema for it (errors in the one
envelope), the documented content type and headers, an ``Allow`` header that lists every
method of the path on a 405. A fixed budget of examples per operation keeps the run to
about a minute.

Both directions of the schema are held too, since generated clients (openapi-generator,
Terraform, Ansible) trust it: a request the document allows is never refused as invalid
(no 400 or 422; what depends on the appliance's state, a name that does not exist or a
conflict, is a 404 or 409), and a request it forbids is always refused (a 4xx, in the
error envelope the document describes).
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
    CheckContext,
    allow_header_conformance,
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import SchemathesisConfig
from schemathesis.core.transport import Response

from api.app import create_app
from appliance.demo import demo_engine

pytestmark = pytest.mark.fuzz

ENGINE = demo_engine(Path(tempfile.mkdtemp(prefix="zds-fuzz-")))
TOKEN = ENGINE.tokens.create("fuzz", "admin")
APP = create_app(ENGINE, start=False)
EXAMPLES = int(os.environ.get("ZDS_FUZZ_EXAMPLES", "40"))



@schemathesis.check
def invalid_requests_are_refused(ctx: CheckContext, response: Response,
                                 case: schemathesis.Case[Any]) -> bool | None:
    """schemathesis's negative_data_rejection, except for a case whose negation dropped
    the Authorization header: the test sends its token with every request, so that part
    of it never reaches the server (a request without a token is test_api_guard's)."""
    if (case.meta is not None and case.meta.generation.mode.is_negative
            and "authorization" not in {h.lower() for h in case.headers or {}}):
        return None
    refused: bool | None = negative_data_rejection(ctx, response, case)
    return refused


CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance,
          content_type_conformance, response_headers_conformance, allow_header_conformance,
          positive_data_acceptance, invalid_requests_are_refused]
# valid: done, or refused for the state it meets (404: no such thing, 409: a conflict),
# never 400/422; invalid: any 4xx (a 5xx fails not_a_server_error anyway)
CONFIG = SchemathesisConfig.from_dict({"checks": {
    "positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "404", "409",
                                                       "413", "429"]},
    "negative_data_rejection": {"expected-statuses": ["4xx"]},
}, "operations": [{
    # a probe body is a union of 19 profiles' parameter models: the coverage phase would
    # enumerate every boundary of each (thousands of requests, a minute); examples and
    # fuzzing (valid and invalid) still run there
    "include-path-regex": "^/api/v1/probes(?:/results)?$", "include-method": "POST",
    "phases": {"coverage": {"enabled": False}},
}]})

schema = schemathesis.openapi.from_asgi("/openapi.json", APP, config=CONFIG)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_its_contract(case: schemathesis.Case[Any]) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS)
