"""How the command line prints what it is given, including values from a newer contract."""

from __future__ import annotations

import io

from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh_cli.common import print_bullets
from agentmesh_cli.reviews import _kind, _status


def test_a_titled_list_is_printed_only_when_it_has_items() -> None:
    out = io.StringIO()
    print_bullets("missing", [], out)
    assert out.getvalue() == ""
    print_bullets("missing", ["training of W-1005", "permit scan"], out)
    assert out.getvalue() == "\nmissing:\n  - training of W-1005\n  - permit scan\n"


def test_a_review_of_a_kind_or_status_this_client_does_not_know_is_shown_by_number() -> None:
    review = dc_pb2.ReviewItem(kind=dc_pb2.REVIEW_KIND_LIMIT, status=dc_pb2.REVIEW_STATUS_OPEN)
    assert (_kind(review), _status(review)) == ("LIMIT", "OPEN")
    newer = dc_pb2.ReviewItem(kind=77, status=88)  # type: ignore[arg-type]
    assert (_kind(newer), _status(newer)) == ("77", "88")
