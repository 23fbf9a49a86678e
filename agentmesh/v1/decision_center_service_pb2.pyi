import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from agentmesh.v1 import supervisor_service_pb2 as _supervisor_service_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReviewKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REVIEW_KIND_UNSPECIFIED: _ClassVar[ReviewKind]
    REVIEW_KIND_CONFLICT: _ClassVar[ReviewKind]
    REVIEW_KIND_ACTION_APPROVAL: _ClassVar[ReviewKind]
    REVIEW_KIND_RECOMMENDATION: _ClassVar[ReviewKind]
    REVIEW_KIND_LIMIT: _ClassVar[ReviewKind]

class ReviewStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REVIEW_STATUS_UNSPECIFIED: _ClassVar[ReviewStatus]
    REVIEW_STATUS_OPEN: _ClassVar[ReviewStatus]
    REVIEW_STATUS_INFORMATION_REQUESTED: _ClassVar[ReviewStatus]
    REVIEW_STATUS_APPROVED: _ClassVar[ReviewStatus]
    REVIEW_STATUS_REJECTED: _ClassVar[ReviewStatus]
    REVIEW_STATUS_OVERRIDDEN: _ClassVar[ReviewStatus]

class ReviewDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REVIEW_DECISION_UNSPECIFIED: _ClassVar[ReviewDecision]
    REVIEW_DECISION_APPROVE: _ClassVar[ReviewDecision]
    REVIEW_DECISION_REJECT: _ClassVar[ReviewDecision]
    REVIEW_DECISION_REQUEST_INFORMATION: _ClassVar[ReviewDecision]
    REVIEW_DECISION_OVERRIDE: _ClassVar[ReviewDecision]
    REVIEW_DECISION_ASSIGN: _ClassVar[ReviewDecision]
REVIEW_KIND_UNSPECIFIED: ReviewKind
REVIEW_KIND_CONFLICT: ReviewKind
REVIEW_KIND_ACTION_APPROVAL: ReviewKind
REVIEW_KIND_RECOMMENDATION: ReviewKind
REVIEW_KIND_LIMIT: ReviewKind
REVIEW_STATUS_UNSPECIFIED: ReviewStatus
REVIEW_STATUS_OPEN: ReviewStatus
REVIEW_STATUS_INFORMATION_REQUESTED: ReviewStatus
REVIEW_STATUS_APPROVED: ReviewStatus
REVIEW_STATUS_REJECTED: ReviewStatus
REVIEW_STATUS_OVERRIDDEN: ReviewStatus
REVIEW_DECISION_UNSPECIFIED: ReviewDecision
REVIEW_DECISION_APPROVE: ReviewDecision
REVIEW_DECISION_REJECT: ReviewDecision
REVIEW_DECISION_REQUEST_INFORMATION: ReviewDecision
REVIEW_DECISION_OVERRIDE: ReviewDecision
REVIEW_DECISION_ASSIGN: ReviewDecision

class LimitReached(_message.Message):
    __slots__ = ("limit_reason", "source", "limit", "observed")
    LIMIT_REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    limit_reason: str
    source: str
    limit: float
    observed: float
    def __init__(self, limit_reason: _Optional[str] = ..., source: _Optional[str] = ..., limit: _Optional[float] = ..., observed: _Optional[float] = ...) -> None: ...

class ReviewEvent(_message.Message):
    __slots__ = ("decision", "reviewer", "reason", "assignee", "override_decision", "policy_decision_id", "at")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REVIEWER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ASSIGNEE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_DECISION_FIELD_NUMBER: _ClassVar[int]
    POLICY_DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    decision: ReviewDecision
    reviewer: str
    reason: str
    assignee: str
    override_decision: _common_pb2.AnalysisDecision
    policy_decision_id: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, decision: _Optional[_Union[ReviewDecision, str]] = ..., reviewer: _Optional[str] = ..., reason: _Optional[str] = ..., assignee: _Optional[str] = ..., override_decision: _Optional[_Union[_common_pb2.AnalysisDecision, str]] = ..., policy_decision_id: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReviewItem(_message.Message):
    __slots__ = ("review_id", "execution_id", "tenant_id", "kind", "status", "requester", "assignee", "summary", "conflict", "action", "recommended_resources", "limit", "analysis_decision", "history", "created_at", "updated_at")
    REVIEW_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REQUESTER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNEE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_DECISION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    review_id: str
    execution_id: str
    tenant_id: str
    kind: ReviewKind
    status: ReviewStatus
    requester: str
    assignee: str
    summary: str
    conflict: _supervisor_service_pb2.Conflict
    action: _supervisor_service_pb2.ProposedAction
    recommended_resources: _containers.RepeatedScalarFieldContainer[str]
    limit: LimitReached
    analysis_decision: _common_pb2.AnalysisDecision
    history: _containers.RepeatedCompositeFieldContainer[ReviewEvent]
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, review_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., kind: _Optional[_Union[ReviewKind, str]] = ..., status: _Optional[_Union[ReviewStatus, str]] = ..., requester: _Optional[str] = ..., assignee: _Optional[str] = ..., summary: _Optional[str] = ..., conflict: _Optional[_Union[_supervisor_service_pb2.Conflict, _Mapping]] = ..., action: _Optional[_Union[_supervisor_service_pb2.ProposedAction, _Mapping]] = ..., recommended_resources: _Optional[_Iterable[str]] = ..., limit: _Optional[_Union[LimitReached, _Mapping]] = ..., analysis_decision: _Optional[_Union[_common_pb2.AnalysisDecision, str]] = ..., history: _Optional[_Iterable[_Union[ReviewEvent, _Mapping]]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListReviewsRequest(_message.Message):
    __slots__ = ("user_assertion", "status", "execution_id")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    status: ReviewStatus
    execution_id: str
    def __init__(self, user_assertion: _Optional[str] = ..., status: _Optional[_Union[ReviewStatus, str]] = ..., execution_id: _Optional[str] = ...) -> None: ...

class ListReviewsResponse(_message.Message):
    __slots__ = ("reviews",)
    REVIEWS_FIELD_NUMBER: _ClassVar[int]
    reviews: _containers.RepeatedCompositeFieldContainer[ReviewItem]
    def __init__(self, reviews: _Optional[_Iterable[_Union[ReviewItem, _Mapping]]] = ...) -> None: ...

class GetReviewRequest(_message.Message):
    __slots__ = ("user_assertion", "review_id")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    REVIEW_ID_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    review_id: str
    def __init__(self, user_assertion: _Optional[str] = ..., review_id: _Optional[str] = ...) -> None: ...

class GetReviewResponse(_message.Message):
    __slots__ = ("review", "execution")
    REVIEW_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    review: ReviewItem
    execution: _supervisor_service_pb2.Execution
    def __init__(self, review: _Optional[_Union[ReviewItem, _Mapping]] = ..., execution: _Optional[_Union[_supervisor_service_pb2.Execution, _Mapping]] = ...) -> None: ...

class SubmitReviewDecisionRequest(_message.Message):
    __slots__ = ("user_assertion", "review_id", "decision", "reason", "assignee", "override_decision")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    REVIEW_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ASSIGNEE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_DECISION_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    review_id: str
    decision: ReviewDecision
    reason: str
    assignee: str
    override_decision: _common_pb2.AnalysisDecision
    def __init__(self, user_assertion: _Optional[str] = ..., review_id: _Optional[str] = ..., decision: _Optional[_Union[ReviewDecision, str]] = ..., reason: _Optional[str] = ..., assignee: _Optional[str] = ..., override_decision: _Optional[_Union[_common_pb2.AnalysisDecision, str]] = ...) -> None: ...

class SubmitReviewDecisionResponse(_message.Message):
    __slots__ = ("review", "execution")
    REVIEW_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    review: ReviewItem
    execution: _supervisor_service_pb2.Execution
    def __init__(self, review: _Optional[_Union[ReviewItem, _Mapping]] = ..., execution: _Optional[_Union[_supervisor_service_pb2.Execution, _Mapping]] = ...) -> None: ...
