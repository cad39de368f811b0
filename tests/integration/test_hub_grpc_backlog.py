"""Many agents reaching the hub at once (a restarted hub, a failover, a stalled hub resuming) wait
until it takes their streams, and every one is served: gRPC's own limit on streams waiting for the
hub (1,000 by default, silently refusing the rest at random) must not turn agents away.

The hub is a real process. It is stopped (SIGSTOP) while the streams are written, so that all of
them are waiting when it resumes, as after a stall; then every stream must be answered."""

from __future__ import annotations

import asyncio
import os
import signal

import grpc
from grpc_health.v1 import health_pb2

from scaleagent import __version__
from scaleagent.protocol import PROTOCOL_VERSION, pb, pb_grpc
from tests.helpers import HubProcess, write_yaml

# More than gRPC's default limit of waiting streams (1,000; all refused beyond 3,000), less than
# the hub's (grpc.maxPendingCalls, 10,000 by default). Health checks stand in for most agents:
# they wait in the same queue and cost the hub little once taken.
WAITING = 2_000
AGENTS = 10  # real agents' Caching streams, written after the health checks: last in the queue
CHANNELS = 8
ANSWER_WITHIN = 120.0  # a bound for a failing run, not a wait: a passing run answers in seconds


def _hello(agent_id: str) -> pb.CachingMessage:
    return pb.CachingMessage(
        hello=pb.Hello(protocol_version=PROTOCOL_VERSION, agent_id=agent_id, agent_version=__version__)
    )


async def _health_check(channel: grpc.aio.Channel) -> grpc.aio.StreamUnaryCall:
    """A health check whose request is written (handed to gRPC) before this returns."""
    call = channel.stream_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )()
    await call.write(health_pb2.HealthCheckRequest(service=""))
    await call.done_writing()
    return call


async def _agent(channel: grpc.aio.Channel, agent_id: str) -> grpc.aio.StreamStreamCall:
    call = pb_grpc.AgentLinkStub(channel).Caching()
    await call.write(_hello(agent_id))
    return call


async def _outcome(awaitable) -> str:
    """What the caller saw: the answer's kind, or gRPC's status."""
    try:
        answer = await asyncio.wait_for(awaitable, ANSWER_WITHIN)
    except grpc.aio.AioRpcError as e:
        return f"{e.code().name}: {e.details()}"
    if isinstance(answer, health_pb2.HealthCheckResponse):
        return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    if answer is grpc.aio.EOF:
        return "the stream ended"
    return answer.WhichOneof("message") or "an empty message"


async def test_streams_waiting_while_the_hub_is_stalled_are_all_served(tmp_path):
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"}},
        )
    )
    channels = [grpc.aio.insecure_channel(hub.grpc_target) for _ in range(CHANNELS)]
    stopped = False
    try:
        for channel in channels:
            await asyncio.wait_for(channel.channel_ready(), 30)
        os.kill(hub.proc.pid, signal.SIGSTOP)
        stopped = True
        checks = [await _health_check(channels[i % CHANNELS]) for i in range(WAITING)]
        agents = [await _agent(channels[i % CHANNELS], f"crowd-{i}") for i in range(AGENTS)]
        os.kill(hub.proc.pid, signal.SIGCONT)
        stopped = False

        health = await asyncio.gather(*(_outcome(call) for call in checks))
        welcomes = await asyncio.gather(*(_outcome(call.read()) for call in agents))

        refused = sorted({h for h in health if h != "SERVING"})
        assert health.count("SERVING") == WAITING, f"{WAITING - health.count('SERVING')} refused: {refused}"
        assert welcomes == ["welcome"] * AGENTS
        for call in agents:
            call.cancel()
    finally:
        if stopped:
            os.kill(hub.proc.pid, signal.SIGCONT)
        for channel in channels:
            await channel.close()
        hub.stop()
