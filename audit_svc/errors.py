"""Errors raised by the audit log's domain core.

Every error carries ``reason``: a stable UPPER_SNAKE code, naming the field
where one is at fault, for ``google.rpc.ErrorInfo.reason``. The transport
layer maps the *class* to a status code and copies ``reason`` verbatim; it
never parses the message.

    AuditError                      (base; never raised itself)
    ├── InvalidArgumentError        -> INVALID_ARGUMENT   bad index/size/range/attribute/entry
    ├── LogClosedError              -> UNAVAILABLE        append or read after close()
    ├── StorageError                -> UNAVAILABLE        SQLite failed; the batch was not stored
    ├── LogCorruptedError           -> DATA_LOSS          the stored log is inconsistent
    ├── LogLockedError              -> FAILED_PRECONDITION another process holds the log
    ├── KeyFileError                -> FAILED_PRECONDITION signing/public key unusable
    └── CheckpointInvalidError      -> INVALID_ARGUMENT   a checkpoint fails to parse or verify
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "CheckpointInvalidError",
    "InvalidArgumentError",
    "KeyFileError",
    "LogClosedError",
    "LogCorruptedError",
    "LogLockedError",
    "StorageError",
]


class AuditError(Exception):
    """Base of all audit-log errors; ``reason`` is a stable UPPER_SNAKE code."""

    default_reason = "AUDIT_ERROR"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason: str = reason if reason is not None else self.default_reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r}, message={str(self)!r})"


class InvalidArgumentError(AuditError):
    """A caller-supplied value is out of range or malformed; nothing was changed.

    Reasons name the field: ``LEAF_INDEX``, ``TREE_SIZE``, ``FIRST_TREE_SIZE``,
    ``SECOND_TREE_SIZE``, ``ENTRY_TOO_LARGE``, ``ENTRY_TYPE``, ``TIME_RANGE``,
    ``LIMIT``, ``AFTER_INDEX``, ``<ATTRIBUTE>_INVALID`` (e.g. ``EXECUTION_ID_INVALID``).
    """

    default_reason = "INVALID_ARGUMENT"


class LogClosedError(AuditError):
    """The log has been closed (or its writer stopped after a storage failure)."""

    default_reason = "LOG_CLOSED"


class StorageError(AuditError):
    """SQLite failed while writing; the affected batch was rolled back, not acknowledged."""

    default_reason = "STORAGE_ERROR"


class LogCorruptedError(AuditError):
    """The stored log is structurally inconsistent; the log refuses to serve (fail closed)."""

    default_reason = "LOG_CORRUPTED"


class LogLockedError(AuditError):
    """Another process already has the log open for writing."""

    default_reason = "LOG_LOCKED"


class KeyFileError(AuditError):
    """A key file is missing, unreadable, too permissive or not an Ed25519 key."""

    default_reason = "KEY_FILE_INVALID"


class CheckpointInvalidError(AuditError):
    """A checkpoint is malformed, signed by another key, or its signature is wrong.

    Reasons: ``CHECKPOINT_FORMAT``, ``CHECKPOINT_ORIGIN``, ``CHECKPOINT_KEY_ID``,
    ``CHECKPOINT_SIGNATURE``.
    """

    default_reason = "CHECKPOINT_INVALID"
