"""The constrained types of request bodies and parameters.

Each type carries the rule the engine's validator applies (pattern, lengths, bounds,
choices), taken from that validator's own constants, so the OpenAPI document says what
the server enforces and pydantic refuses (422) what the document calls invalid before the
engine sees it. The engine checks everything again (the CLI reaches it without the API).
A pattern is narrower than its validator only where the validator is lenient with what
people type (appliance/validate.py says where); tests/unit/test_schema_patterns.py holds
every published pattern to its validator.

Numbers and booleans are strict (the request models' ``strict=True``): ``0`` is not
``false`` and ``"5"`` is not ``5``; fields that take a number or a string with a unit
(sizes, intervals) say so with both types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import BeforeValidator, Field, WithJsonSchema

from appliance import validate
from appliance.host import hooks, nvmet, ssh
from appliance.patterns import anchored
from appliance.policies import schedule
from appliance.policies import service as policies
from appliance.policies.retention import MAX_KEEP
from appliance.replication import model as replication
from appliance.services.snapshots import HOLD_TAG

# pattern -> the rule in words: a refusal by pattern says the rule, not the pattern
RULES: dict[str, str] = {}


def _integral(value: object) -> object:
    """A JSON number without a fraction is an integer (JSON and JSON Schema do not tell
    5 from 5.0); anything else is left to the strict integer check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


INTEGRAL = BeforeValidator(_integral)
# an integer: 5 or 5.0, never "5" or true (bounds go before INTEGRAL, so the document
# shows them: Annotated[int, Field(ge=1), INTEGRAL])
Int = Annotated[int, INTEGRAL]


def text(pattern: str, rule: str, *, min_length: int | None = None,
         max_length: int | None = None) -> Any:
    """A string field following ``pattern`` (the validator's rule, said as ``rule``)."""
    RULES[pattern] = rule
    return Field(pattern=pattern, min_length=min_length, max_length=max_length,
                 description=rule)


def path(pattern: str, rule: str, what: str, max_length: int) -> Any:
    """A path parameter following ``pattern``."""
    RULES[pattern] = rule
    return Path(pattern=pattern, max_length=max_length, description=f"{what}: {rule}")


def query(pattern: str, rule: str, max_length: int | None = None, **extra: Any) -> Any:
    """A query parameter following ``pattern``."""
    RULES[pattern] = rule
    return Query(pattern=pattern, max_length=max_length, description=rule, **extra)


# --- names ---------------------------------------------------------------------------------

Name = Annotated[str, text(validate.RESOURCE_NAME_PATTERN, validate.RESOURCE_NAME_RULE,
                           max_length=validate.RESOURCE_NAME_MAX)]
PoolName = Annotated[str, text(validate.POOL_NAME_PATTERN, validate.POOL_NAME_RULE,
                               max_length=validate.POOL_NAME_MAX)]
SnapshotName = Annotated[str, text(validate.SNAPSHOT_NAME_PATTERN,
                                   validate.SNAPSHOT_NAME_RULE)]
HOLD_TAG_RULE = ("1-63 lowercase letters, digits, '.', '_', ':' or '-', starting with a letter "
                 "or digit")


def name_path(what: str) -> Any:
    return path(validate.RESOURCE_NAME_PATTERN, validate.RESOURCE_NAME_RULE, what,
                validate.RESOURCE_NAME_MAX)


DatastorePath = Annotated[str, name_path("the datastore")]
GroupPath = Annotated[str, name_path("the initiator group")]
PolicyPath = Annotated[str, name_path("the snapshot policy")]
VcenterPath = Annotated[str, name_path("the vCenter")]
ReplicationPath = Annotated[str, name_path("the replication")]
KeyPath = Annotated[str, name_path("the authorized key")]
PoolPath = Annotated[str, path(validate.POOL_NAME_PATTERN, validate.POOL_NAME_RULE,
                               "the pool", validate.POOL_NAME_MAX)]
SnapshotPath = Annotated[str, path(validate.SNAPSHOT_NAME_PATTERN, validate.SNAPSHOT_NAME_RULE,
                                   "the snapshot", 63)]
HoldTagPath = Annotated[str, path(anchored(HOLD_TAG), HOLD_TAG_RULE, "the hold tag", 63)]

# --- access ---------------------------------------------------------------------------------

NQN_RULE = ("an NVMe Qualified Name: nqn.yyyy-mm.reversed.domain:name "
            "(nqn.2014-08.com.vmware:nvme:esx01) or nqn.2014-08.org.nvmexpress:uuid:<UUID> "
            "(what nvme-cli writes to /etc/nvme/hostnqn); printable ASCII without spaces "
            "or '/', at most 223 characters; case matters")
Iqn = Annotated[str, text(validate.IQN_PATTERN, validate.IQN_RULE,
                          max_length=validate.MAX_IQN_BYTES)]
Nqn = Annotated[str, text(nvmet.NQN_PATTERN, NQN_RULE, max_length=nvmet.NQN_MAX)]
# an initiator group lists both kinds (an IQN never starts with nqn.)
InitiatorName = Annotated[str, text(
    anchored(f"{validate.IQN_PATTERN}|{nvmet.NQN_PATTERN}"),
    f"an iSCSI name ({validate.IQN_RULE}) or an NVMe host NQN ({NQN_RULE})",
    max_length=max(validate.MAX_IQN_BYTES, nvmet.NQN_MAX))]
NfsClientMatch = Annotated[str, text(validate.NFS_CLIENT_PATTERN, validate.NFS_CLIENT_RULE,
                                     max_length=validate.HOSTNAME_MAX)]
NfsClientQuery = Annotated[str | None, query(
    validate.NFS_CLIENT_PATTERN, "the address clients reach the appliance at, instead of "
    "the one this request came to: " + validate.NFS_CLIENT_RULE,
    max_length=validate.HOSTNAME_MAX)]
ChapUser = Annotated[str, text(validate.CHAP_USER_PATTERN, validate.CHAP_RULE,
                               min_length=1, max_length=validate.CHAP_USER_MAX)]
ChapSecret = Annotated[str, text(
    validate.CHAP_TEXT_PATTERN, validate.CHAP_RULE + "; 12-255 characters (ESXi and Windows "
    "initiators: 12-16)", min_length=validate.CHAP_SECRET_LENGTH[0],
    max_length=validate.CHAP_SECRET_LENGTH[1])]

# --- sizes and ZFS properties ---------------------------------------------------------------

_SIZE_TEXT = ("bytes, or a number with K, M, G, T or P (binary units; 100G, 1.5T, 512MiB)")
DatastoreSize = (Annotated[int, Field(ge=validate.MIN_DATASTORE_SIZE), INTEGRAL]
                 | Annotated[str, text(validate.size_pattern(validate.MIN_DATASTORE_SIZE),
                                       _SIZE_TEXT + ", at least 64M",
                                       max_length=validate.SIZE_TEXT_MAX)])
VdevSize = (Annotated[int, Field(ge=validate.MIN_DATASTORE_SIZE), INTEGRAL]
            | Annotated[str, text(validate.size_pattern(validate.MIN_DATASTORE_SIZE),
                                  _SIZE_TEXT + ", at least 64M (ZFS's smallest vdev)",
                                  max_length=validate.SIZE_TEXT_MAX)])
BandwidthLimit = (Annotated[int, Field(ge=replication.MIN_BANDWIDTH), INTEGRAL]
                  | Annotated[str, text(validate.size_pattern(replication.MIN_BANDWIDTH),
                                        "bytes per second, or a number with K, M, G, T or "
                                        "P (binary units), at least 64K",
                                        max_length=validate.SIZE_TEXT_MAX)])

if TYPE_CHECKING:
    RecordsizeBytes = int
    VolblocksizeBytes = int
    SyncName = str
else:
    RecordsizeBytes = Annotated[Literal[tuple(validate.power_of_two_sizes(
        *validate.RECORDSIZE_RANGE))], INTEGRAL]
    VolblocksizeBytes = Annotated[Literal[tuple(validate.power_of_two_sizes(
        *validate.VOLBLOCKSIZE_RANGE))], INTEGRAL]
    SyncName = Literal[validate.SYNC]

Recordsize = RecordsizeBytes | Annotated[str, text(
    validate.power_of_two_pattern(*validate.RECORDSIZE_RANGE),
    "a power of two from 4K to 1M, in bytes or a whole number of K or M (128K)")]
Volblocksize = VolblocksizeBytes | Annotated[str, text(
    validate.power_of_two_pattern(*validate.VOLBLOCKSIZE_RANGE),
    "a power of two from 4K to 128K, in bytes or a whole number of K (16K)")]
Compression = Annotated[str, text(validate.COMPRESSION_PATTERN,
                                  "off, on, lz4, zle, lzjb, gzip[-1..9], zstd[-1..19], "
                                  "zstd-fast[-N]")]
DevicePath = Annotated[str, text(validate.DEVICE_PATH_PATTERN, validate.DEVICE_PATH_RULE,
                                 min_length=validate.DEVICE_PATH_MIN)]

LabelKey = Annotated[str, text(validate.LABEL_KEY_PATTERN, "1-63 lowercase letters, digits, "
                               "'.', '_' or '-', starting and ending with a letter or digit")]
LabelValue = Annotated[str, text(validate.LABEL_VALUE_PATTERN, "up to 63 letters, digits, "
                                 "'.', '_' or '-', starting and ending with a letter or "
                                 "digit")]
# pydantic would publish the key rule as patternProperties, which lets other keys through
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=validate.MAX_LABELS),
                   WithJsonSchema({
                       "type": "object", "maxProperties": validate.MAX_LABELS,
                       "propertyNames": {"pattern": validate.LABEL_KEY_PATTERN},
                       "additionalProperties": {"type": "string",
                                                "pattern": validate.LABEL_VALUE_PATTERN}})]

# --- hosts, networks, keys ------------------------------------------------------------------

Port = Annotated[int, Field(ge=policies.PORT_RANGE[0], le=policies.PORT_RANGE[1]), INTEGRAL]
SshHost = Annotated[str, text(ssh.HOST_PATTERN, "an IP address or a DNS name",
                              max_length=ssh.HOST_MAX)]
VcenterHost = Annotated[str, text(anchored(f"{validate.IP_ADDRESS}|{validate.HOSTNAME}"),
                                  "an IP address or a host name (its last label starting "
                                  "or ending with a letter)", max_length=validate.HOSTNAME_MAX)]
UnixUser = Annotated[str, text(validate.UNIX_USER_PATTERN, "a Unix user name: a lowercase "
                               "letter or '_', then up to 31 of those, digits or '-'")]
PublicKey = Annotated[str, text(ssh.PUBLIC_KEY_PATTERN, "one OpenSSH public key line: "
                                f"{', '.join(ssh.KEY_TYPES)}, then its base64 key (which "
                                "names the same type), then an optional comment")]
SourceNetwork = Annotated[str, text(anchored(f"{validate.IP_ADDRESS}|{validate.IP_NETWORK}"),
                                    "an IP address or a CIDR network")]
TargetDataset = Annotated[str, text(replication.TARGET_DATASET_PATTERN,
                                    "a ZFS dataset below a pool (pool/replicas/NAME), not in "
                                    "pool/datastores", max_length=ssh.DATASET_MAX)]
KeyPrefix = Annotated[str, text(replication.KEY_PREFIX_PATTERN,
                                "a ZFS dataset below a pool (pool/replicas/NAME), outside "
                                "pool/datastores and pool/zds-*", max_length=ssh.DATASET_MAX)]

# --- schedules ------------------------------------------------------------------------------

PolicyInterval = (Annotated[int, Field(ge=schedule.MIN_INTERVAL, le=schedule.MAX_INTERVAL),
                            INTEGRAL]
                  | Annotated[str, text(schedule.INTERVAL_PATTERN,
                                        "a whole number with s, m, h, d or w (15m, 6h, 1d), "
                                        "from 10 s to 366 days")])
ReplicationInterval = (Annotated[int, Field(ge=replication.MIN_INTERVAL), INTEGRAL]
                       | Annotated[str, text(replication.INTERVAL_PATTERN,
                                             "a whole number with s, m, h or d (90s, 15m, "
                                             "1h), at least 60 s")])
TimeZone = Annotated[str, text(schedule.TIMEZONE_PATTERN,
                               "an IANA time zone name (Europe/Berlin, UTC) this appliance's "
                               "tzdata knows")]
Cron = Annotated[str, text(schedule.CRON_PATTERN,
                           "five fields (minute hour day-of-month month day-of-week) in "
                           "cron's grammar, e.g. '0 2 * * *'; values out of range and times "
                           "that never come (30 Feb) are refused")]
RetentionCount = Annotated[int, Field(ge=0, le=MAX_KEEP), INTEGRAL]
_HOOK_ARG = text(anchored(hooks.ARG), "no control characters",
                 max_length=hooks.MAX_ARG_LENGTH)
# the first item is the program: a file name in the hooks directory or an absolute path
# (which programs are installed there is the appliance's state: 404 when missing)
HookArgv = Annotated[list[Annotated[str, _HOOK_ARG]], Field(
    max_length=hooks.MAX_ARGS, json_schema_extra={"prefixItems": [{
        "type": "string", "maxLength": hooks.MAX_ARG_LENGTH,
        "pattern": anchored(f"{hooks.PROGRAM}|/{hooks.ARG}")}]})]
VcenterUser = Annotated[str, text("^[^\\x00-\\x1f]*$", "1-255 characters, no control "
                                  "characters", min_length=1,
                                  max_length=policies.VCENTER_USER_MAX)]
VcenterPassword = Annotated[str, Field(min_length=1, max_length=policies.VCENTER_PASSWORD_MAX)]
