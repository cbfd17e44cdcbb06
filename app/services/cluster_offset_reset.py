"""Resetting a group's consumer offsets of a topic on a live cluster: previewed per broker and queue
(the committed offset now and the new one), then applied as an audited action. With the group's
consumers online the brokers tell them (every queue of the topic, to a time); with none online the
committed offsets are written on each broker."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from app.roles import Principal
from app.services import audit
from app.services.errors import ConflictError, NotFoundError
from app.services.offset_reset import parse_target
from backend.protocol import Backend, BackendUnavailable, BrokerQueueReset, OffsetResetPlan, ResetTarget
from cluster.offsets import through_consumers_refusal
from store.broker.metadata import GroupConfig, checked_group
from store.clock import Clock
from store.format import topics

RESET_CLUSTER_OFFSETS = "reset_cluster_offsets"


@dataclass(frozen=True)
class ClusterReset:
    queues: list[BrokerQueueReset]
    consumers_online: bool
    through: str | None = None  # applied: "consumers" (the brokers told them) or "offsets" (written)
    problems: list[str] = field(default_factory=list)


def plan(backend: Backend, group: str, topic: str, to: object, queue_id: int | None = None) -> OffsetResetPlan:
    checked_group(GroupConfig(group))
    topics.validate_topic(topic)
    kind, value = parse_target(to)
    planned = backend.plan_offset_reset(group, topic, ResetTarget(kind, value), queue_id)
    if not planned.queues:
        if planned.problems:
            raise BackendUnavailable(f"no broker of topic {topic} answered: {'; '.join(planned.problems)}")
        if queue_id is not None:
            raise NotFoundError(f"no broker holds queue {queue_id} of topic {topic}")
        raise NotFoundError(f"no broker holds topic {topic}")
    return planned


def preview(backend: Backend, group: str, topic: str, to: object, queue_id: int | None = None) -> ClusterReset:
    planned = plan(backend, group, topic, to, queue_id)
    return ClusterReset(planned.queues, planned.consumers_online, problems=planned.problems)


def reset(backend: Backend, sessions: sessionmaker[Session], clock: Clock, group: str, topic: str, to: object, *,
          actor: Principal, queue_id: int | None = None, reason: str | None = None,
          idempotency_key: str | None = None) -> ClusterReset:
    planned = plan(backend, group, topic, to, queue_id)
    refusal = through_consumers_refusal(planned) if planned.consumers_online else None
    if refusal:
        raise ConflictError(f"consumers of {group} are online on {topic}, and RocketMQ resets online consumers "
                            f"only on every queue of the topic to a time: {refusal} needs them stopped first; or "
                            "reset the whole topic to the earliest, the latest or a time")
    request = {"topic": topic, "to": to, "queue_id": queue_id}

    def act(decided: dict) -> dict:
        done = backend.apply_offset_reset(planned)
        if not done.queues:
            raise BackendUnavailable(f"no broker moved the offsets: {'; '.join(done.problems) or 'none answered'}")
        return {"through": done.through, "queues": [asdict(row) for row in done.queues],
                "problems": done.problems}

    done = audit.perform(sessions, clock, actor=actor, action=RESET_CLUSTER_OFFSETS, target=f"group:{group}",
                         request=request, act=act, reason=reason, idempotency_key=idempotency_key,
                         intent=lambda s, _: {"topic": topic, "consumers_online": planned.consumers_online,
                                              "queues": [asdict(row) for row in planned.queues]})
    result = done.result
    return ClusterReset([BrokerQueueReset(**row) for row in result["queues"]], result["consumers_online"],
                        result.get("through"), [*planned.problems, *result.get("problems", [])])
