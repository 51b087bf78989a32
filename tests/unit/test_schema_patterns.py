"""Every pattern the OpenAPI document publishes is held to the engine's validator for it:
a string the pattern allows, the validator accepts (a generated client's request is not
refused as invalid). The other direction (what the schema forbids is refused) is the
fuzz suite's, through the API."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance import validate
from appliance.host import hooks, nvmet, ssh
from appliance.metrics import service as metrics
from appliance.patterns import anchored
from appliance.policies import schedule
from appliance.replication import model as replication

MIN_SIZE = validate.MIN_DATASTORE_SIZE


def _cron(value: str) -> None:
    try:
        schedule.Schedule.parse(cron=value)
    except Exception as exc:  # a day that never comes (30 Feb) is the one rule left out
        assert "Bad day-of-month" in str(exc), (value, exc)


def _at_least(parse: Callable[[str], float], minimum: float) -> Callable[[str], None]:
    def check(value: str) -> None:
        assert parse(value) >= minimum, value
    return check


# name: (the published pattern, its maxLength or None, the validator); minLength where the
# schema has one is in MIN_LENGTH
PAIRS: dict[str, tuple[str, int | None, Callable[[str], object]]] = {
    "resource name": (validate.RESOURCE_NAME_PATTERN, validate.RESOURCE_NAME_MAX,
                      validate.resource_name),
    "pool name": (validate.POOL_NAME_PATTERN, validate.POOL_NAME_MAX, validate.pool_name),
    "snapshot name": (validate.SNAPSHOT_NAME_PATTERN, None, validate.snapshot_name),
    "iqn": (validate.IQN_PATTERN, validate.MAX_IQN_BYTES, validate.iqn),
    "nqn": (nvmet.NQN_PATTERN, nvmet.NQN_MAX, validate.nqn),
    "nfs client": (validate.NFS_CLIENT_PATTERN, validate.HOSTNAME_MAX, validate.nfs_client),
    "chap user": (validate.CHAP_USER_PATTERN, validate.CHAP_USER_MAX, validate.chap_user),
    "compression": (validate.COMPRESSION_PATTERN, None, validate.compression),
    "device path": (validate.DEVICE_PATH_PATTERN, None, validate.device_path),
    "unix user": (validate.UNIX_USER_PATTERN, None, validate.unix_user),
    "size": (validate.size_pattern(MIN_SIZE), validate.SIZE_TEXT_MAX,
             _at_least(validate.parse_size, MIN_SIZE)),
    "recordsize": (validate.power_of_two_pattern(*validate.RECORDSIZE_RANGE), None,
                   lambda v: validate.power_of_two_size(v, *validate.RECORDSIZE_RANGE, "r")),
    "policy interval": (schedule.INTERVAL_PATTERN, None, schedule.parse_interval),
    "replication interval": (replication.INTERVAL_PATTERN, None,
                             _at_least(replication.parse_interval, replication.MIN_INTERVAL)),
    "cron": (schedule.CRON_PATTERN, None, _cron),
    "step": (metrics.STEP_PATTERN, None, lambda v: metrics.parse_duration(v, "step")),
    "since": (metrics.SINCE_PATTERN, None, lambda v: metrics.parse_since(v, time.time())),
    "public key": (ssh.PUBLIC_KEY_PATTERN, None, ssh.public_key),
    "ssh host": (ssh.HOST_PATTERN, ssh.HOST_MAX, ssh.host_name),
    "hook argument": (anchored(hooks.ARG), hooks.MAX_ARG_LENGTH,
                      lambda v: hooks.check_args([v])),
}
MIN_LENGTH = {"chap user": 1, "device path": validate.DEVICE_PATH_MIN}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_what_a_pattern_allows_its_validator_accepts(name: str) -> None:
    pattern, longest, check = PAIRS[name]
    # fullmatch: a JSON Schema $ is the end of the text, Python's would allow a "\n"
    shortest = MIN_LENGTH.get(name, 0)
    values = st.from_regex(pattern, fullmatch=True).filter(
        lambda v: shortest <= len(v) <= (longest or len(v)))

    @settings(max_examples=50, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(values)
    def accepted(value: str) -> None:
        check(value)

    accepted()
