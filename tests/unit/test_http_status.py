"""SQLSTATE -> exception -> exit code -> HTTP status, in one place (harvest.core.errors): every
error the SQL API raises has its own status, bad input is a 4xx, and the code is stable."""

from __future__ import annotations

import pytest

from harvest.core import errors
from harvest.core.errors import SQLSTATE_ERRORS, error_code, http_status


def _bare(cls: type) -> BaseException:
    return cls.__new__(cls)


@pytest.mark.parametrize("sqlstate", sorted(SQLSTATE_ERRORS))
def test_every_sqlstate_class_declares_a_status_that_is_not_a_bare_500(sqlstate: str) -> None:
    assert http_status(_bare(SQLSTATE_ERRORS[sqlstate])) != 500


@pytest.mark.parametrize(
    ("cls", "status"),
    [
        (errors.InvalidArgument, 400),
        (errors.UnknownWorkflow, 400),
        (errors.PayloadTooLarge, 413),
        (errors.NotFound, 404),
        (errors.WorkflowAlreadyExists, 409),
        (errors.WorkflowNotRunning, 409),
        (errors.PolicyConflict, 409),
        (errors.QuotaExceeded, 429),
        (errors.PermissionDenied, 403),
        (errors.Unauthenticated, 401),
        (errors.ApiTokenExists, 409),
        (errors.ParentShardAlive, 409),
        (errors.ScheduleAlreadyExists, 409),
        (errors.DagPaused, 409),
        (errors.DagRunLimit, 429),
        (errors.DagRunNotRetryable, 409),
        (errors.WorkflowPaused, 409),
        (errors.ExecutionMigrated, 503),
        (errors.ShardUnavailable, 503),
        (errors.DatabaseUnavailable, 503),
        (errors.NotPlacedHere, 503),
        (errors.TransactionConflict, 503),
        (errors.QueryFailed, 422),
        (errors.QueryTimeout, 504),
        (errors.ConfigError, 500),
    ],
)
def test_the_status_of_each_error(cls: type, status: int) -> None:
    assert http_status(_bare(cls)) == status


def test_codes_are_the_class_names_in_snake_case() -> None:
    assert error_code(_bare(errors.InvalidArgument)) == "invalid_argument"
    assert error_code(_bare(errors.WorkflowAlreadyExists)) == "workflow_already_exists"
    assert error_code(_bare(errors.TimeoutError_)) == "timeout_error"
    assert error_code(_bare(errors.PayloadTooLarge)) == "payload_too_large"
    assert error_code(ValueError("x")) == "value_error"
    assert http_status(ValueError("x")) == 500
